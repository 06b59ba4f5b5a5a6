//! After a scheduled campaign's jobs: its results checked against their history (suspect
//! regressions rerun, then resolved) and its devices against their siblings (each outlier rerun,
//! confirmed when it is one again; see [`crate::outliers`]).

use super::{CampaignReport, Daemon};
use crate::campaign::JobOutcome;
use crate::campaign::execute::execute_campaign;
use crate::outliers::OutlierConfig;
use crate::outliers::collect::queue_outlier_reruns;
use crate::regression::check;

impl Daemon {
    /// Checks campaign `id` and runs its confirmation reruns, adding their outcomes to `results`
    /// and what went wrong to `report`.
    pub(super) async fn check_and_confirm(
        &self,
        id: i64,
        report: &mut CampaignReport,
        results: &mut Vec<JobOutcome>,
    ) {
        let cfg = self.cfg.detect;
        let new_run_id = || uuid::Uuid::new_v4().to_string();
        match self
            .db
            .call(move |s| check::assess_new(s, Some(id), &cfg, &mut || new_run_id()))
            .await
        {
            Ok(a) => {
                self.ex
                    .reporter
                    .more(a.suspects, "confirmation reruns of suspect results");
                report.assess = a;
            }
            Err(e) => report.error = Some(format!("regression check: {e}")),
        }
        let outliers = OutlierConfig::DEFAULT;
        match self
            .db
            .call(move |s| queue_outlier_reruns(s, id, &outliers, &mut || new_run_id()))
            .await
        {
            Ok(n) => self
                .ex
                .reporter
                .more(n, "reruns of outliers among sibling devices"),
            Err(e) => report.error = Some(format!("outlier check: {e}")),
        }
        // Confirmation reruns (and anything a crash left queued).
        match execute_campaign(&self.db, id, &self.ex).await {
            Ok(r) => results.extend(r),
            Err(e) => report.error = Some(e.to_string()),
        }
        match self
            .db
            .call(move |s| check::resolve(s, Some(id), &cfg))
            .await
        {
            Ok(r) => report.resolve = r,
            Err(e) => report.error = Some(format!("regression check: {e}")),
        }
    }
}
