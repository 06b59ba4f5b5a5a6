//! Reading results back: the filtered listing (oldest first), its newest-first pages with keyset
//! cursors, and the newest result of each series.
//!
//! Every listing is bounded by an index: by campaign (`results_by_campaign`), by series
//! (`results_by_series`: agent, device, spec key, time), by time (`results_by_time`, which pages
//! walk backwards from their cursor), or by the `latest_results` table the insert trigger keeps
//! (migration 8). The tests check the plans with `EXPLAIN QUERY PLAN`: none may scan `results`.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::str::FromStr;
use std::sync::LazyLock;

use super::engine::{DbError, DbResult, FromValue, Row, Value as SqlValue};

use super::error::{StoreError, sql};
use super::open::Store;
use super::results::decode_samples;
use super::rows::{ResultRecord, ResultRow};

/// Columns of `results` (aliased `r`) in the order listings read them.
const RESULT_COLUMNS: &str = "r.id, r.run_id, r.campaign_id, r.job_id, r.agent_id, r.device_row_id,
    r.device_id, r.backend, r.spec_key, r.kernel, r.variant, r.params_json, r.dtype, r.mode,
    r.status, r.message, r.metric_kind, r.metric_unit, r.metric_value, r.higher_is_better,
    r.pct_of_peak, r.peak_source, r.median_s, r.p10_s, r.p90_s, r.min_s, r.max_s, r.mean_s, r.stddev_s, r.cv,
    r.ci_low_s, r.ci_high_s, r.target_ci_pct, r.noisy, r.robust_cv, r.p25_s, r.p75_s, r.upper_fence_s,
    r.outliers_high, r.iterations, r.validation_json, r.config_json, r.fingerprint_json, r.stderr_tail, r.signal,
    r.started_at, r.wall_s, r.created_at, r.energy_json, r.energy_j, r.avg_watts,
    r.metric_per_watt, r.joules_per_unit, r.samples_compacted_at, r.power_compacted_at";

/// The bulky columns a summary read ([`ResultFilter::summary_only`]) leaves out, each with what it
/// reads instead: what the store writes for an empty value of its kind.
const SUMMARY_LEAVES_OUT: &[(&str, &str)] = &[
    ("r.validation_json", "'null' AS validation_json"),
    ("r.config_json", "'null' AS config_json"),
    ("r.fingerprint_json", "'null' AS fingerprint_json"),
    ("r.energy_json", "'null' AS energy_json"),
    ("r.stderr_tail", "'' AS stderr_tail"),
];

/// [`RESULT_COLUMNS`] with [`SUMMARY_LEAVES_OUT`]'s columns read as empty.
fn summary_columns() -> &'static str {
    static COLUMNS: LazyLock<String> = LazyLock::new(|| {
        SUMMARY_LEAVES_OUT
            .iter()
            .fold(RESULT_COLUMNS.to_owned(), |columns, (column, empty)| {
                assert!(columns.contains(column), "{column} is a result column");
                columns.replace(column, empty)
            })
    });
    &COLUMNS
}

/// Joins that give a result its agent name, device and campaign suite.
const RESULT_JOINS: &str = "FROM results r
    JOIN agents a ON a.id = r.agent_id
    LEFT JOIN devices d ON d.id = r.device_row_id
    LEFT JOIN campaigns c ON c.id = r.campaign_id";

/// Where a newest-first page ended: the last row's time and id. Its text (`TIME:ID`) is what
/// `/api/results` answers as `next` and takes as `after`; the next page starts strictly after it,
/// so rows stored meanwhile never shift a page (newer ones appear on a new first page).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cursor {
    /// The time of the last row returned (a result's `created_at`, a verdict's `updated_at`).
    pub time: f64,
    /// Its id.
    pub id: i64,
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // f64's Display is the shortest text that parses back to the same bits.
        write!(f, "{}:{}", self.time, self.id)
    }
}

impl FromStr for Cursor {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            let quoted: String = s.chars().take(40).collect();
            format!(
                "{quoted:?} is not a cursor; pass the `next` value of an earlier answer (TIME:ID)"
            )
        };
        let (t, id) = s.split_once(':').ok_or_else(bad)?;
        let time: f64 = t.parse().map_err(|_| bad())?;
        let id: i64 = id.parse().map_err(|_| bad())?;
        if !time.is_finite() || id < 1 {
            return Err(bad());
        }
        Ok(Cursor { time, id })
    }
}

/// One newest-first page of results.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResultPage {
    /// Up to the asked number of rows, newest first.
    pub rows: Vec<ResultRow>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<Cursor>,
}

/// The largest page [`Store::results_page`] returns.
pub const MAX_PAGE: usize = 10_000;

/// A page size: 1 to [`MAX_PAGE`] (the store's pages, `limit` of the API, `results --limit`).
///
/// # Errors
/// The reason, for the caller to put beside the name of its field.
pub fn check_limit(limit: usize) -> Result<usize, String> {
    if (1..=MAX_PAGE).contains(&limit) {
        Ok(limit)
    } else {
        Err(format!("{limit} is not between 1 and {MAX_PAGE}"))
    }
}

/// A page read with one row more than `limit`: its first `limit` rows, and the cursor of the
/// last of them when the extra row shows that more follow.
pub(super) fn split_page<T>(
    mut rows: Vec<T>,
    limit: usize,
    cursor: impl Fn(&T) -> Cursor,
) -> (Vec<T>, Option<Cursor>) {
    if rows.len() <= limit {
        return (rows, None);
    }
    rows.truncate(limit);
    let next = rows.last().map(cursor);
    (rows, next)
}

/// Which way a page walks time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Direction {
    /// Newest first (the API, a log's tail).
    #[default]
    NewestFirst,
    /// Oldest first (`gpufleet results --all`, in the order results were stored).
    OldestFirst,
}

/// How a listing walks the table.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Walk {
    /// Everything that matches, oldest first; the planner picks the index.
    All,
    /// A page from a cursor along `results_by_time`: the filters only filter.
    Page(Direction),
}

/// `WHERE` terms (over `results r` only) and their arguments.
#[derive(Debug, Default)]
struct Terms {
    conditions: Vec<String>,
    args: Vec<SqlValue>,
}

impl Terms {
    fn push(&mut self, condition: &str, value: SqlValue) {
        self.conditions.push(condition.to_owned());
        self.args.push(value);
    }

    fn sql(&self) -> String {
        if self.conditions.is_empty() {
            "TRUE".to_owned()
        } else {
            self.conditions.join(" AND ")
        }
    }

    /// The terms of `f`. In a [`Walk::Page`], a unary `+` keeps the planner off every index but
    /// the campaign's (a campaign is small enough to sort), so it walks `results_by_time` back
    /// from the cursor instead of sorting a whole agent's or series' history.
    fn of(f: &ResultFilter, walk: Walk) -> Terms {
        let plus = if walk == Walk::All { "" } else { "+" };
        let mut t = Terms::default();
        if let Some(id) = f.id {
            t.push("r.id = ?", SqlValue::Int(id));
        }
        if let Some(c) = f.campaign_id {
            t.push("r.campaign_id = ?", SqlValue::Int(c));
        }
        let text = |v: &String| SqlValue::Text(v.clone());
        t.push_series(f, &format!("{plus}r."));
        if let Some(v) = &f.kernel {
            t.push("r.kernel = ?", text(v));
        }
        if let Some(v) = &f.status {
            t.push("r.status = ?", text(v));
        }
        if let Some(v) = &f.suite {
            t.push(
                &format!("{plus}r.campaign_id IN (SELECT id FROM campaigns WHERE suite = ?)"),
                text(v),
            );
        }
        if let Some(since) = f.since {
            t.push("r.created_at >= ?", SqlValue::Real(since));
        }
        t
    }

    /// The terms of `f` that hold for a whole series, over `latest_results l`.
    fn of_series(f: &ResultFilter) -> Terms {
        let mut t = Terms::default();
        t.push_series(f, "l.");
        if let Some(v) = &f.kernel {
            // The spec key names the kernel, so the series' newest result tells.
            t.push(
                "(SELECT kernel FROM results WHERE id = l.result_id) = ?",
                SqlValue::Text(v.clone()),
            );
        }
        t
    }

    /// The filters that name a series (agent, device id, spec key), on the columns of `table`
    /// (`r.`, `+r.` to keep the planner off their indexes, or `l.` for `latest_results`).
    fn push_series(&mut self, f: &ResultFilter, table: &str) {
        let text = |v: &String| SqlValue::Text(v.clone());
        if let Some(v) = &f.agent {
            self.push(
                &format!("{table}agent_id = (SELECT id FROM agents WHERE name = ?)"),
                text(v),
            );
        }
        if let Some(v) = &f.device_id {
            self.push(&format!("{table}device_id = ?"), text(v));
        }
        if let Some(v) = &f.spec_key {
            self.push(&format!("{table}spec_key = ?"), text(v));
        }
    }
}

/// The listing's query: the selected ids' rows with their joins, and its arguments.
fn listing_sql(
    f: &ResultFilter,
    walk: Walk,
    after: Option<Cursor>,
    limit: Option<usize>,
) -> (String, Vec<SqlValue>) {
    let mut terms = Terms::of(f, walk);
    let matching = terms.sql();
    let selection = if !f.latest_per_device_and_key {
        matching
    } else if f.campaign_id.is_some() {
        // A campaign's rows are few: rank them.
        format!(
            "r.id IN (SELECT id FROM (
                SELECT r.id AS id, row_number() OVER (
                    PARTITION BY r.agent_id, r.device_id, r.spec_key
                    ORDER BY r.created_at DESC, r.id DESC) AS newest
                FROM results r WHERE {matching}) WHERE newest = 1)"
        )
    } else if terms.conditions.is_empty() {
        "r.id IN (SELECT result_id FROM latest_results)".to_owned()
    } else {
        // Per series, walk its history back from the newest to the first match (the filters
        // select first): one index seek per series when the newest matches, as it mostly does.
        // What is the same for a whole series (its agent, device, spec key and so its kernel) is
        // checked on the series first, so a series that cannot match is never walked.
        let series = Terms::of_series(f);
        terms.args.extend(series.args.iter().cloned());
        format!(
            "r.id IN (SELECT (SELECT r.id FROM results r
                              WHERE r.agent_id = l.agent_id AND r.device_id = l.device_id
                                AND r.spec_key = l.spec_key AND {matching}
                              ORDER BY r.created_at DESC, r.id DESC LIMIT 1)
                      FROM latest_results l WHERE {})",
            series.sql()
        )
    };
    let mut selection = selection;
    if let Walk::Page(direction) = walk {
        // A page is a range of `results_by_time` from its cursor (from the end of time for the
        // first page), read until the limit: the plan says SEARCH, and it reads what it returns.
        let (c, bound, after_cursor) = match direction {
            Direction::NewestFirst => (
                after.unwrap_or(Cursor {
                    time: f64::MAX,
                    id: i64::MAX,
                }),
                "r.created_at <= ?",
                "(r.created_at < ? OR r.id < ?)",
            ),
            Direction::OldestFirst => (
                after.unwrap_or(Cursor {
                    time: f64::MIN,
                    id: 0,
                }),
                "r.created_at >= ?",
                "(r.created_at > ? OR r.id > ?)",
            ),
        };
        selection.push_str(&format!(" AND {bound} AND {after_cursor}"));
        terms.args.push(SqlValue::Real(c.time));
        terms.args.push(SqlValue::Real(c.time));
        terms.args.push(SqlValue::Int(c.id));
    }
    let (samples_column, samples_join) = if f.with_samples {
        (
            "s.times AS samples",
            "LEFT JOIN result_samples s ON s.result_id = r.id",
        )
    } else {
        ("NULL AS samples", "")
    };
    let order = match walk {
        Walk::All | Walk::Page(Direction::OldestFirst) => "r.created_at, r.id",
        Walk::Page(Direction::NewestFirst) => "r.created_at DESC, r.id DESC",
    };
    let columns = if f.summary_only {
        summary_columns()
    } else {
        RESULT_COLUMNS
    };
    let mut query = format!(
        "SELECT {columns}, a.name AS agent_name, d.name AS device_name,
                d.vendor AS device_vendor, d.arch AS device_arch, c.suite AS suite,
                {samples_column}
         {RESULT_JOINS} {samples_join}
         WHERE {selection}
         ORDER BY {order}"
    );
    if let Some(n) = limit {
        query.push_str(" LIMIT ?");
        terms.args.push(SqlValue::Int(n as i64));
    }
    (query, terms.args)
}

impl Store {
    /// Stored results matching `f`, oldest first.
    ///
    /// With `latest_per_device_and_key`, the other fields select first and then only the newest
    /// match per (agent, device id, spec key) is kept: "latest `ok` result of each kernel on each
    /// device".
    ///
    /// # Errors
    /// [`StoreError::Db`] if the query fails or a stored value is malformed.
    pub fn results(&self, f: &ResultFilter) -> Result<Vec<ResultRow>, StoreError> {
        let (query, args) = listing_sql(f, Walk::All, None, None);
        self.read_results(&query, args, f.with_samples)
    }

    /// Up to `limit` (at most [`MAX_PAGE`]) results matching `f` in `direction` (by time, then
    /// id), starting after `after`; `next` is set when more may follow. Reads only the rows it
    /// returns (and, with filters, the ones it skips on the way).
    ///
    /// # Errors
    /// [`StoreError::InvalidInput`] (`limit`) for 0 or more than [`MAX_PAGE`];
    /// [`StoreError::Db`] if the query fails or a stored value is malformed.
    pub fn results_page(
        &self,
        f: &ResultFilter,
        limit: usize,
        after: Option<Cursor>,
        direction: Direction,
    ) -> Result<ResultPage, StoreError> {
        check_limit(limit).map_err(|e| StoreError::invalid("limit", e))?;
        let (query, args) = listing_sql(f, Walk::Page(direction), after, Some(limit + 1));
        let rows = self.read_results(&query, args, f.with_samples)?;
        let (rows, next) = split_page(rows, limit, |r| Cursor {
            time: r.record.created_at.unwrap_or_default(),
            id: r.id,
        });
        Ok(ResultPage { rows, next })
    }

    fn read_results(
        &self,
        query: &str,
        args: Vec<SqlValue>,
        with_samples: bool,
    ) -> Result<Vec<ResultRow>, StoreError> {
        let context = "listing results";
        let mut stmt = self.conn.prepare_cached(query).map_err(sql(context))?;
        let mut cols: Option<HashMap<String, usize>> = None;
        let mut rows: Vec<ResultRow> = stmt
            .query_map(args, |row| {
                let cols = cols.get_or_insert_with(|| {
                    row.column_names()
                        .into_iter()
                        .enumerate()
                        .map(|(i, name)| (name, i))
                        .collect()
                });
                result_from_row(&Named { row, cols })
            })
            .map_err(sql(context))?
            .collect::<Result<_, _>>()
            .map_err(sql(context))?;
        if with_samples {
            for row in &mut rows {
                row.record.power = self.power_of(row.id)?;
            }
        }
        Ok(rows)
    }
}

fn result_from_row(row: &Named<'_, '_>) -> DbResult<ResultRow> {
    let params_text: String = row.get("params_json")?;
    let params: BTreeMap<String, i64> =
        serde_json::from_str(&params_text).map_err(|e| DbError::conversion("params_json", e))?;
    let times = match row.get::<Option<Vec<u8>>>("samples")? {
        Some(bytes) => decode_samples(&bytes).map_err(|e| DbError::conversion("samples", e))?,
        None => Vec::new(),
    };
    let record = ResultRecord {
        run_id: row.get("run_id")?,
        campaign_id: row.get("campaign_id")?,
        job_id: row.get("job_id")?,
        agent_id: row.get("agent_id")?,
        device_row_id: row.get("device_row_id")?,
        device_id: row.get("device_id")?,
        backend: row.get("backend")?,
        spec_key: row.get("spec_key")?,
        kernel: row.get("kernel")?,
        variant: row.get("variant")?,
        params,
        dtype: row.get("dtype")?,
        mode: row.get("mode")?,
        status: row.get("status")?,
        message: row.get("message")?,
        metric_kind: row.get("metric_kind")?,
        metric_unit: row.get("metric_unit")?,
        metric_value: row.get("metric_value")?,
        higher_is_better: row.get("higher_is_better")?,
        // Absent where no peak is known; rows stored before the wire's field was `optional` hold
        // a 0 for that, read here as absent too.
        pct_of_peak: row.get::<Option<f64>>("pct_of_peak")?.filter(|p| *p > 0.0),
        peak_source: row.get("peak_source")?,
        median_s: row.get("median_s")?,
        p10_s: row.get("p10_s")?,
        p90_s: row.get("p90_s")?,
        min_s: row.get("min_s")?,
        max_s: row.get("max_s")?,
        mean_s: row.get("mean_s")?,
        stddev_s: row.get("stddev_s")?,
        cv: row.get("cv")?,
        ci_low_s: row.get("ci_low_s")?,
        ci_high_s: row.get("ci_high_s")?,
        target_ci_pct: row.get("target_ci_pct")?,
        noisy: row.get("noisy")?,
        robust_cv: row.get("robust_cv")?,
        p25_s: row.get("p25_s")?,
        p75_s: row.get("p75_s")?,
        upper_fence_s: row.get("upper_fence_s")?,
        outliers_high: row.get("outliers_high")?,
        iterations: row.get("iterations")?,
        validation: row.json("validation_json")?,
        config: row.json("config_json")?,
        fingerprint: row.json("fingerprint_json")?,
        stderr_tail: row.get("stderr_tail")?,
        signal: row.get("signal")?,
        started_at: row.get("started_at")?,
        wall_s: row.get("wall_s")?,
        created_at: Some(row.get("created_at")?),
        times,
        energy: row.json("energy_json")?,
        energy_j: row.get("energy_j")?,
        avg_watts: row.get("avg_watts")?,
        metric_per_watt: row.get("metric_per_watt")?,
        joules_per_unit: row.get("joules_per_unit")?,
        power: Vec::new(),
        samples_compacted_at: row.get("samples_compacted_at")?,
        power_compacted_at: row.get("power_compacted_at")?,
    };
    Ok(ResultRow {
        id: row.get("id")?,
        record,
        agent: row.get("agent_name")?,
        device_name: row.get("device_name")?,
        device_vendor: row.get("device_vendor")?,
        device_arch: row.get("device_arch")?,
        suite: row.get("suite")?,
    })
}

/// A listing row read by column name, with the names looked up once per statement: rusqlite's
/// lookup by name compares against every column name, which for 56 columns read by name was
/// most of the time a 2,700-result compare matrix took.
struct Named<'r, 's> {
    row: &'r Row<'s>,
    cols: &'r HashMap<String, usize>,
}

impl Named<'_, '_> {
    fn get<T: FromValue>(&self, name: &str) -> DbResult<T> {
        let index = *self
            .cols
            .get(name)
            .ok_or_else(|| DbError::conversion(name, "no such column"))?;
        self.row.get(index)
    }

    fn json(&self, name: &str) -> DbResult<serde_json::Value> {
        let text: String = self.get(name)?;
        serde_json::from_str(&text).map_err(|e| DbError::conversion(name, e))
    }
}

/// Which results [`Store::results`](super::open::Store::results) returns; every `Some` must match.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResultFilter {
    /// Only the result with this row id.
    pub id: Option<i64>,
    /// Only this campaign's results.
    pub campaign_id: Option<i64>,
    /// Only this kernel.
    pub kernel: Option<String>,
    /// Only results of campaigns running this suite.
    pub suite: Option<String>,
    /// Only this agent's results (by name; removed agents included).
    pub agent: Option<String>,
    /// Only this status.
    pub status: Option<String>,
    /// Only this spec key (one series, with `agent` and `device_id`).
    pub spec_key: Option<String>,
    /// Only this device id (the agent's, e.g. `opencl:0.0`).
    pub device_id: Option<String>,
    /// Only results stored at or after this time (unix seconds).
    pub since: Option<f64>,
    /// Among the results matching the other fields, keep only the newest per (agent, device,
    /// spec key).
    pub latest_per_device_and_key: bool,
    /// Fill [`ResultRecord::times`] and [`ResultRecord::power`].
    pub with_samples: bool,
    /// Leave the bulky fields empty: `validation`, `config`, `fingerprint` and `energy` JSON
    /// null, `stderr_tail` empty. For views of many results that show none of them (a
    /// comparison reads 2,700 rows at a million results, and these were most of its bytes).
    pub summary_only: bool,
}

#[cfg(test)]
mod tests;
