//! A campaign's observations for [`detect`](super::detect), read from the store: each `ok`
//! result with a metric, its device's group (model and memory from the stored description,
//! driver from the result's fingerprint) and its conditions (the fingerprint's PCIe link, power
//! cap and clock; the power trace's temperature and shader clock, read only for the specs that
//! have an outlier).

use super::cause::Conditions;
use super::{GroupReport, Observation, OutlierConfig, SiblingKey, detect};
use crate::store::{CampaignRow, DeviceRow, NewJob, ResultFilter, ResultRow, Store, StoreError};
use gpufleet_proto::v1 as pb;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The newest of `campaigns` that has results: the campaign the outlier views judge when none is
/// named (callers narrow the candidates first: a suite, `done` ones).
pub fn latest_with_results<'a>(
    campaigns: impl IntoIterator<Item = &'a CampaignRow>,
) -> Option<&'a CampaignRow> {
    campaigns
        .into_iter()
        .filter(|c| c.results.values().sum::<i64>() > 0)
        .max_by_key(|c| c.id)
}

/// The campaign's sibling groups, judged: [`detect`] on its observations, the specs with an
/// outlier judged again with their power traces read (for the temperature and clock causes).
///
/// # Errors
/// [`StoreError`] when the results or devices cannot be read.
pub fn campaign_outliers(
    s: &Store,
    campaign_id: i64,
    cfg: &OutlierConfig,
) -> Result<Vec<GroupReport>, StoreError> {
    let filter = ResultFilter {
        campaign_id: Some(campaign_id),
        status: Some("ok".into()),
        ..Default::default()
    };
    let rows = s.results(&filter)?;
    let devices: BTreeMap<i64, DeviceRow> = s.devices()?.into_iter().map(|d| (d.id, d)).collect();
    let mut observations: Vec<Observation> = rows
        .iter()
        .filter_map(|r| observation(r, &devices))
        .collect();
    let first = detect(&observations, cfg);
    let flagged: BTreeSet<(SiblingKey, String)> = first
        .iter()
        .flat_map(|g| {
            g.specs
                .iter()
                .filter(|s| !s.outliers.is_empty())
                .map(|s| (g.key.clone(), s.spec_key.clone()))
        })
        .collect();
    if flagged.is_empty() {
        return Ok(first);
    }
    for o in &mut observations {
        if flagged.contains(&(o.group.clone(), o.spec_key.clone())) {
            let trace = s.power_samples(&o.run_id)?;
            let temps: Vec<f64> = trace
                .iter()
                .filter_map(|p| p.reading.temperature_c)
                .collect();
            let sclk: Vec<f64> = trace
                .iter()
                .filter_map(|p| p.reading.sclk_mhz.map(f64::from))
                .collect();
            o.conditions.max_temp_c = temps.iter().copied().reduce(f64::max);
            o.conditions.mean_sclk_mhz =
                (!sclk.is_empty()).then(|| sclk.iter().sum::<f64>() / sclk.len() as f64);
        }
    }
    Ok(detect(&observations, cfg))
}

/// Queues a rerun of each outlier of campaign `campaign_id` that no rerun confirmed yet (one
/// result on its spec): a job for the same spec on the same device under a new run id, which the
/// campaign's next execution runs. A result without a job (imported) is left as it is. Returns
/// how many were queued.
///
/// # Errors
/// [`StoreError`] when the results cannot be read or a job cannot be added.
pub fn queue_outlier_reruns(
    s: &mut Store,
    campaign_id: i64,
    cfg: &OutlierConfig,
    new_run_id: &mut dyn FnMut() -> String,
) -> Result<usize, StoreError> {
    let groups = campaign_outliers(s, campaign_id, cfg)?;
    let mut queued = 0;
    for (_, o) in groups.iter().flat_map(GroupReport::outliers) {
        if o.confirmed {
            continue;
        }
        let Some(job) = s.job_by_run_id(&o.run_id)? else {
            continue;
        };
        s.add_job(&NewJob {
            campaign_id,
            agent_id: job.agent_id,
            device_row_id: job.device_row_id,
            spec_key: job.spec_key.clone(),
            spec_json: job.spec.to_string(),
            run_id: new_run_id(),
        })?;
        queued += 1;
    }
    Ok(queued)
}

/// One result as an observation; `None` without a metric.
fn observation(r: &ResultRow, devices: &BTreeMap<i64, DeviceRow>) -> Option<Observation> {
    let rec = &r.record;
    let value = rec.metric_value.filter(|v| v.is_finite())?;
    let device = rec.device_row_id.and_then(|id| devices.get(&id));
    let described =
        device.and_then(|d| gpufleet_kernels::from_json_value::<pb::Device>(&d.info).ok());
    let fp = &rec.fingerprint;
    let text = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
    let number = |v: &Value| v.as_f64().filter(|x| *x > 0.0);
    let driver = text(&fp["driver_version"])
        .or_else(|| described.as_ref().map(|d| d.driver_version.clone()))
        .unwrap_or_default();
    let model = device
        .map(|d| d.name.clone())
        .or_else(|| r.device_name.clone())
        .unwrap_or_else(|| rec.device_id.clone());
    let bus = device.map(|d| d.pci_bus_id.as_str()).unwrap_or_default();
    let platform = &fp["platform"];
    let pcie = (!bus.is_empty())
        .then(|| {
            let now = text(&platform[format!("pcie_link:{bus}")])?;
            let max = text(&platform[format!("pcie_link_max:{bus}")])?;
            Some((now, max))
        })
        .flatten();
    Some(Observation {
        result_id: r.id,
        run_id: rec.run_id.clone(),
        agent: r.agent.clone(),
        device_id: rec.device_id.clone(),
        group: SiblingKey {
            model,
            backend: rec.backend.clone(),
            driver,
            memory_bytes: described.as_ref().map_or(0, |d| d.memory_bytes),
        },
        spec_key: rec.spec_key.clone(),
        unit: rec.metric_unit.clone().unwrap_or_default(),
        value,
        higher_is_better: rec.higher_is_better.unwrap_or(true),
        conditions: Conditions {
            pcie,
            power_cap_w: number(&fp["power_cap_w"]),
            clock_mhz: number(&fp["clock_mhz"]),
            robust_cv: rec.robust_cv,
            noisy: rec.noisy,
            ..Conditions::default()
        },
    })
}

/// Eight RX 580s on one driver in a campaign of `copy`: node-3's card sits in an x4 slot and
/// reads 12 % slower; node-5's ran hot, seen only in its power trace. Returns the campaign.
#[cfg(test)]
pub(crate) fn rx580_campaign(s: &mut Store) -> i64 {
    use crate::store::DeviceRecord;
    use crate::store::test_support::sample_result;
    use serde_json::json;
    let campaign = s.create_campaign("acceptance", "", "{}").unwrap();
    for i in 0..8 {
        let agent = s
            .add_agent(&format!("node-{i}"), "http://127.0.0.1:9", None)
            .unwrap();
        let bus = "0000:03:00.0";
        let info = json!({"id": "vulkan:0", "backend": "vulkan", "name": "AMD Radeon RX 580",
                          "pci_bus_id": bus, "memory_bytes": 8u64 << 30,
                          "driver_version": "Mesa 22.3.6"});
        let device = s
            .upsert_device(
                agent.id,
                &DeviceRecord {
                    device_id: "vulkan:0".into(),
                    backend: "vulkan".into(),
                    vendor: "AMD".into(),
                    name: "AMD Radeon RX 580".into(),
                    arch: "gfx803".into(),
                    pci_bus_id: bus.into(),
                    info_json: info.to_string(),
                },
            )
            .unwrap();
        let mut r = sample_result(&format!("run-{i}"), agent.id);
        r.campaign_id = Some(campaign);
        r.device_row_id = Some(device);
        r.device_id = "vulkan:0".into();
        r.backend = "vulkan".into();
        r.spec_key = "copy/default/n=67108864/f32/bandwidth".into();
        r.metric_unit = Some("GB/s".into());
        let link = if i == 3 { "gen3 x4" } else { "gen3 x16" };
        r.fingerprint = json!({"driver_version": "Mesa 22.3.6", "power_cap_w": 185.0,
            "platform": {format!("pcie_link:{bus}"): link, format!("pcie_link_max:{bus}"): "gen3 x16"}});
        r.metric_value = Some(match i {
            3 => 198.0,
            5 => 200.0,
            _ => 225.0 + f64::from(i) * 0.5,
        });
        for p in &mut r.power {
            p.reading.temperature_c = Some(if i == 5 { 94.0 } else { 71.0 });
        }
        s.insert_result(&r).unwrap();
    }
    campaign
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::temp_store;

    #[test]
    fn a_campaign_s_outliers_come_with_the_link_or_the_heat_that_explains_them() {
        let (_db, mut s) = temp_store();
        let campaign = rx580_campaign(&mut s);
        let groups = campaign_outliers(&s, campaign, &OutlierConfig::DEFAULT).unwrap();
        assert_eq!(groups.len(), 1, "one sibling group: {groups:?}");
        assert_eq!(groups[0].devices, 8);
        assert_eq!(
            groups[0].key.to_string(),
            "AMD Radeon RX 580 · vulkan · driver Mesa 22.3.6 · 8.0 GiB"
        );
        let named: Vec<(&str, &str)> = groups[0]
            .outliers()
            .map(|(_, o)| (o.agent.as_str(), o.cause.as_str()))
            .collect();
        assert_eq!(
            named,
            [
                ("node-3", "PCIe x4 of x16"),
                ("node-5", "94 °C during the run (siblings 71 °C)")
            ]
        );
    }

    /// Six devices ran a campaign's jobs; the slow one's job is rerun once, and the rerun, slow
    /// again, confirms it; a confirmed outlier is not rerun again.
    #[test]
    fn an_outlier_s_job_is_rerun_once_and_its_rerun_confirms_it() {
        use crate::store::test_support::sample_result;
        let (_db, mut s) = temp_store();
        let campaign = s.create_campaign("nightly", "", "{}").unwrap();
        let mut jobs = Vec::new();
        for i in 0..6 {
            let agent = s
                .add_agent(&format!("node-{i}"), "http://127.0.0.1:9", None)
                .unwrap();
            let job = NewJob {
                campaign_id: campaign,
                agent_id: agent.id,
                device_row_id: None,
                spec_key: "copy/default".into(),
                spec_json: "{\"kernel\":\"copy\"}".into(),
                run_id: format!("run-{i}"),
            };
            let id = s.add_job(&job).unwrap();
            jobs.push((id, agent.id));
        }
        let store_result = |s: &mut Store, run_id: &str, job: (i64, i64), value: f64| {
            let mut r = sample_result(run_id, job.1);
            r.campaign_id = Some(campaign);
            r.job_id = Some(job.0);
            r.spec_key = "copy/default".into();
            r.metric_value = Some(value);
            s.insert_result(&r).unwrap();
        };
        for (i, job) in jobs.iter().enumerate() {
            let value = if i == 2 { 150.0 } else { 200.0 + i as f64 };
            store_result(&mut s, &format!("run-{i}"), *job, value);
        }
        let cfg = OutlierConfig::DEFAULT;
        let mut next = 0;
        let mut run_id = || {
            next += 1;
            format!("rerun-{next}")
        };
        assert_eq!(
            queue_outlier_reruns(&mut s, campaign, &cfg, &mut run_id).unwrap(),
            1
        );
        let rerun = s
            .job_by_run_id("rerun-1")
            .unwrap()
            .expect("the rerun's job");
        assert_eq!(
            (rerun.agent_id, rerun.spec_key.as_str()),
            (jobs[2].1, "copy/default")
        );
        store_result(&mut s, "rerun-1", (rerun.id, jobs[2].1), 152.0);
        let groups = campaign_outliers(&s, campaign, &cfg).unwrap();
        let (_, o) = groups[0].outliers().next().unwrap();
        assert_eq!((o.agent.as_str(), o.confirmed), ("node-2", true));
        assert_eq!(
            queue_outlier_reruns(&mut s, campaign, &cfg, &mut run_id).unwrap(),
            0
        );
    }
}
