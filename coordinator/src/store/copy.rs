//! `gpufleet db copy SRC DST`: every row of one store into another, across engines (SQLite to
//! PostgreSQL and back), checked afterwards.
//!
//! # Into an empty store
//!
//! Tables go in foreign-key order, a page of rows per multi-row `INSERT`, with their ids kept, in
//! one transaction on the destination: a copy that fails leaves the destination empty. The one
//! cycle (a confirmation job names the result it confirms; that result names its job) is broken by
//! inserting jobs without `confirms_result_id` and setting it after the results. PostgreSQL's id
//! sequences are moved past the copied ids.
//!
//! The tables the triggers keep (`latest_results`, `result_counts`, `campaign_counts`): into
//! SQLite, inserting the results and jobs rebuilds them. Into PostgreSQL, the triggers that keep
//! them are turned off for the copy and the tables are copied, a counter as its total: inside one
//! transaction every update of a row walks the versions the earlier updates of that row left, and
//! a million results bump each counter shard about a thousand times and each series' latest row
//! once per night, which made the copy quadratic (of a 1M-result copy, three quarters of the
//! results were in after 17 minutes, ever slower; with the triggers off the whole copy takes 9).
//! Turning a trigger off needs the table's owner; a copy by another role keeps them on. Either
//! way the check compares the derived tables too.
//!
//! # The check
//!
//! It runs in the copy's transaction, before the commit: a copy that fails it is rolled back. Per
//! table: the row count, and a SHA-256 over every row in primary-key order, each value hashed
//! with its storage class (so `1` and `1.0` and `'1'` differ, and a real's bits count exactly).
//! Both engines hold the same storage classes (see `engine`), so equal tables hash equal. In the
//! counting tables only rows with a count above 0 take part: a count that fell to 0 leaves a row
//! in the source that the rebuilt destination never had.
//!
//! # Merging (`--merge`)
//!
//! Into a store that has rows, nothing is overwritten and nothing is stored twice: a result whose
//! run id the destination has is skipped (and so are its samples, power trace and check), as is a
//! job with a known run id, an agent or schedule with a known name and a device an agent already
//! has. Ids are the destination's own, and every reference is translated. A campaign is the one
//! the destination already has for any of its jobs' run ids, else a new one. The check is then
//! per run id: every result of the source is in the destination.

use std::collections::HashMap;

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::engine::{Engine, Value, ValueRef};
use super::error::{StoreError, sql};
use super::open::Store;

/// Rows read (and written) per statement.
const PAGE: usize = 500;

/// At most this many parameters in one statement (SQLite's limit is 32766, PostgreSQL's 65535).
const MAX_PARAMS: usize = 30_000;

/// A copied table: its primary key (the order of reads and of the checksum) and what its
/// columns refer to.
struct Table {
    name: &'static str,
    key: &'static [&'static str],
    /// Whether `id` is its own (an identity column in PostgreSQL).
    has_id: bool,
    /// (column, the table whose id it holds).
    refs: &'static [(&'static str, &'static str)],
}

/// The tables copied, in an order where every reference points back (except
/// `jobs.confirms_result_id`, set after `results`).
const TABLES: &[Table] = &[
    Table {
        name: "agents",
        key: &["id"],
        has_id: true,
        refs: &[],
    },
    Table {
        name: "devices",
        key: &["id"],
        has_id: true,
        refs: &[("agent_id", "agents")],
    },
    Table {
        name: "campaigns",
        key: &["id"],
        has_id: true,
        refs: &[],
    },
    Table {
        name: "jobs",
        key: &["id"],
        has_id: true,
        refs: &[
            ("campaign_id", "campaigns"),
            ("agent_id", "agents"),
            ("device_row_id", "devices"),
        ],
    },
    Table {
        name: "results",
        key: &["id"],
        has_id: true,
        refs: &[
            ("campaign_id", "campaigns"),
            ("job_id", "jobs"),
            ("agent_id", "agents"),
            ("device_row_id", "devices"),
        ],
    },
    Table {
        name: "result_samples",
        key: &["result_id"],
        has_id: false,
        refs: &[("result_id", "results")],
    },
    Table {
        name: "power_samples",
        key: &["result_id", "seq"],
        has_id: false,
        refs: &[("result_id", "results")],
    },
    Table {
        name: "schedules",
        key: &["id"],
        has_id: true,
        refs: &[],
    },
    Table {
        name: "checks",
        key: &["result_id"],
        has_id: false,
        refs: &[
            ("result_id", "results"),
            ("confirmation_result_id", "results"),
        ],
    },
    Table {
        name: "alerts",
        key: &["id"],
        has_id: true,
        refs: &[
            ("result_id", "results"),
            ("confirmation_result_id", "results"),
            ("campaign_id", "campaigns"),
            ("device_row_id", "devices"),
        ],
    },
];

/// The rows of a counting table that take part in the check: keys with a count above 0.
const COUNTED: &str = "n > 0";

/// The tables the triggers keep, compared but not copied: (name, key, which rows count).
const DERIVED: &[(&str, &[&str], &str)] = &[
    (
        "latest_results",
        &["agent_id", "device_id", "spec_key"],
        "TRUE",
    ),
    ("result_counts", &["status"], COUNTED),
    (
        "campaign_counts",
        &["campaign_id", "kind", "state"],
        COUNTED,
    ),
];

/// PostgreSQL's triggers that keep the derived tables as results and jobs are inserted, turned off
/// while a copy into an empty store inserts them (inside its transaction: a rollback turns them
/// on again), and on again before the commit. The derived tables are emptied with them (a counter
/// left at 0 by deleted rows would stand in the way of the copied total).
const TRIGGERS_OFF: &str = "ALTER TABLE results DISABLE TRIGGER results_inserted;
                            ALTER TABLE jobs DISABLE TRIGGER jobs_count;
                            DELETE FROM latest_results;
                            DELETE FROM result_counts;
                            DELETE FROM campaign_counts;";
const TRIGGERS_ON: &str = "ALTER TABLE results ENABLE TRIGGER results_inserted;
                           ALTER TABLE jobs ENABLE TRIGGER jobs_count;";

/// Where the check reads `table`: the table itself (`None`: its own columns), or for a counting
/// table (a derived one filtered by [`COUNTED`]) its totals, one row per key, with their columns
/// (the key and `n`): PostgreSQL keeps those counters in shards (migration 12), SQLite in one row
/// per key.
fn checked_source(table: &str, key: &[&str], filter: &str) -> (String, Option<Vec<String>>) {
    if filter != COUNTED {
        return (table.to_owned(), None);
    }
    let keys = key.join(", ");
    let columns = key.iter().map(|k| (*k).to_owned()).chain(["n".to_owned()]);
    (
        format!(
            "(SELECT {keys}, CAST(sum(n) AS bigint) AS n FROM {table} GROUP BY {keys}) AS totals"
        ),
        Some(columns.collect()),
    )
}

/// What a copy did to one table, and what the check found.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct TableCopy {
    /// The table.
    pub table: String,
    /// Rows in the source.
    pub source_rows: u64,
    /// Rows written to the destination.
    pub copied: u64,
    /// Rows the destination already had (a merge).
    pub skipped: u64,
    /// Rows in the destination afterwards.
    pub destination_rows: u64,
    /// SHA-256 of the source's rows (hex); `None` for a merge.
    pub source_sha256: Option<String>,
    /// SHA-256 of the destination's rows; equal to the source's after a copy into an empty store.
    pub destination_sha256: Option<String>,
}

/// What `db copy` did.
#[derive(Debug, Clone, Serialize)]
pub struct CopyReport {
    /// Whether it merged into a store that had rows.
    pub merged: bool,
    /// Per table, in copy order, then the counting tables.
    pub tables: Vec<TableCopy>,
    /// Results of the source the destination now has (all of them, or the copy failed).
    pub results_verified: u64,
    /// Seconds taken.
    pub seconds: f64,
}

impl Store {
    /// Copies every row of this store into `dest` and checks the copy (see the module docs).
    /// `dest` must hold no agent, campaign, result or schedule unless `merge`. Calls
    /// `progress(table, rows done, rows in it)` as it goes.
    ///
    /// # Errors
    /// [`StoreError::InvalidInput`] (`field: "destination"`) for a destination with rows and no
    /// `merge`, or a copy whose check fails (the destination is then rolled back);
    /// [`StoreError::Db`] when a statement fails (nothing of the copy stays).
    pub fn copy_to(
        &self,
        dest: &mut Store,
        merge: bool,
        progress: &mut dyn FnMut(&str, u64, u64),
    ) -> Result<CopyReport, StoreError> {
        let started = std::time::Instant::now();
        let context = "copying the database";
        let mut occupied = Vec::new();
        for table in TABLES {
            let n = dest.count_rows(table.name, "TRUE")?;
            if n > 0 {
                occupied.push(format!("{} {}", n, table.name));
            }
        }
        let merged = !occupied.is_empty();
        if merged && !merge {
            return Err(StoreError::invalid(
                "destination",
                format!(
                    "it already holds rows ({}); pass --merge to add what it lacks (by run id, \
                     never twice), or copy into an empty database",
                    occupied.join(", ")
                ),
            ));
        }
        let level = dest.conn.open_level().map_err(sql(context))?;
        // The check runs inside the copy's transaction: a copy that fails it is rolled back.
        let checked = if merged {
            self.merge_into(dest, progress)
        } else {
            self.copy_into_empty(dest, progress)
        }
        .and_then(|tables| self.check_copy(dest, merged, tables));
        match checked {
            Ok((tables, results_verified)) => {
                dest.conn.close_level(level, true).map_err(sql(context))?;
                Ok(CopyReport {
                    merged,
                    tables,
                    results_verified,
                    seconds: started.elapsed().as_secs_f64(),
                })
            }
            Err(e) => {
                let _ = dest.conn.close_level(level, false);
                Err(e)
            }
        }
    }

    /// The check of a copy into `dest` (see the module docs): every result of this store is
    /// there, and after a copy into an empty store every table, the counting ones included, has
    /// the source's rows and checksum. Returns the tables with their checksums and the results
    /// found.
    fn check_copy(
        &self,
        dest: &Store,
        merged: bool,
        mut tables: Vec<TableCopy>,
    ) -> Result<(Vec<TableCopy>, u64), StoreError> {
        let results_verified = self.verify_results_in(dest)?;
        if merged {
            return Ok((tables, results_verified));
        }
        for t in &mut tables {
            t.destination_sha256 = Some(dest.table_sha256(&t.table)?);
        }
        for (name, key, filter) in DERIVED {
            let (source, _) = checked_source(name, key, filter);
            tables.push(TableCopy {
                table: (*name).to_owned(),
                source_rows: self.count_rows(&source, filter)?,
                copied: 0,
                skipped: 0,
                destination_rows: dest.count_rows(&source, filter)?,
                source_sha256: Some(self.table_sha256(name)?),
                destination_sha256: Some(dest.table_sha256(name)?),
            });
        }
        let differ: Vec<&str> = tables
            .iter()
            .filter(|t| {
                t.source_sha256 != t.destination_sha256 || t.source_rows != t.destination_rows
            })
            .map(|t| t.table.as_str())
            .collect();
        if !differ.is_empty() {
            return Err(StoreError::invalid(
                "destination",
                format!(
                    "the copy differs from the source in {} (rows or checksum)",
                    differ.join(", ")
                ),
            ));
        }
        Ok((tables, results_verified))
    }

    /// Rows of `table` matching `filter`.
    fn count_rows(&self, table: &str, filter: &str) -> Result<u64, StoreError> {
        self.conn
            .query_row(
                &format!("SELECT count(*) FROM {table} WHERE {filter}"),
                [],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| u64::try_from(n).unwrap_or(0))
            .map_err(sql("counting rows"))
    }

    /// The names of `table`'s columns, in the schema's order.
    fn columns(&self, table: &str) -> Result<Vec<String>, StoreError> {
        let context = "reading a table's columns";
        let query = match self.conn.engine() {
            Engine::Sqlite => "SELECT name FROM pragma_table_info(?1) ORDER BY cid",
            Engine::Postgres => {
                "SELECT column_name::text FROM information_schema.columns
                  WHERE table_schema = current_schema() AND table_name = ?1
                  ORDER BY ordinal_position"
            }
        };
        self.conn
            .prepare(query)
            .and_then(|mut s| s.query_map([table], |r| r.get(0)))
            .map_err(sql(context))?
            .collect::<Result<_, _>>()
            .map_err(sql(context))
    }

    /// Every row of `table` in key order, a page at a time, through `f`.
    fn each_page(
        &self,
        table: &str,
        columns: &[String],
        key: &[&str],
        filter: &str,
        f: &mut dyn FnMut(Vec<Vec<Value>>) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let context = "reading rows to copy";
        let list = columns.join(", ");
        let key_list = key.join(", ");
        let key_at: Vec<usize> = key
            .iter()
            .map(|k| columns.iter().position(|c| c == k).expect("key column"))
            .collect();
        let placeholders: Vec<String> = (1..=key.len()).map(|i| format!("?{i}")).collect();
        let mut after: Option<Vec<Value>> = None;
        loop {
            let query = match &after {
                None => format!(
                    "SELECT {list} FROM {table} WHERE {filter} ORDER BY {key_list} LIMIT {PAGE}"
                ),
                Some(_) => format!(
                    "SELECT {list} FROM {table} WHERE {filter} AND ({key_list}) > ({})
                     ORDER BY {key_list} LIMIT {PAGE}",
                    placeholders.join(", ")
                ),
            };
            let rows: Vec<Vec<Value>> = self
                .conn
                .prepare(&query)
                .and_then(|mut s| {
                    s.query_map(after.clone().unwrap_or_default(), |r| {
                        (0..columns.len()).map(|i| r.get(i)).collect()
                    })
                })
                .map_err(sql(context))?
                .collect::<Result<_, _>>()
                .map_err(sql(context))?;
            let Some(last) = rows.last() else {
                return Ok(());
            };
            after = Some(key_at.iter().map(|&i| last[i].clone()).collect());
            let full = rows.len() == PAGE;
            f(rows)?;
            if !full {
                return Ok(());
            }
        }
    }

    /// SHA-256 (hex) of every row of `table` in key order (counting tables: the counted rows).
    fn table_sha256(&self, table: &str) -> Result<String, StoreError> {
        let (key, filter): (&[&str], &str) = TABLES
            .iter()
            .find(|t| t.name == table)
            .map(|t| (t.key, "TRUE"))
            .or_else(|| DERIVED.iter().find(|d| d.0 == table).map(|d| (d.1, d.2)))
            .expect("a known table");
        let (source, columns) = self.checked_read(table, key, filter)?;
        let mut hash = Sha256::new();
        self.each_page(&source, &columns, key, filter, &mut |rows| {
            hash_rows(&mut hash, &rows);
            Ok(())
        })?;
        Ok(format!("{:x}", hash.finalize()))
    }

    /// How many of this store's result run ids `dest` has; an error when one is missing.
    fn verify_results_in(&self, dest: &Store) -> Result<u64, StoreError> {
        let columns = vec!["id".to_owned(), "run_id".to_owned()];
        let mut found = 0u64;
        let mut missing = Vec::new();
        self.each_page("results", &columns, &["id"], "TRUE", &mut |rows| {
            let runs: Vec<Value> = rows.into_iter().map(|mut r| r.swap_remove(1)).collect();
            let marks = vec!["?"; runs.len()].join(", ");
            let n: i64 = dest
                .conn
                .query_row(
                    &format!("SELECT count(*) FROM results WHERE run_id IN ({marks})"),
                    runs.clone(),
                    |r| r.get(0),
                )
                .map_err(sql("checking the copied run ids"))?;
            found += u64::try_from(n).unwrap_or(0);
            if n as usize != runs.len() && missing.is_empty() {
                missing.push(format!("{:?}", runs.first()));
            }
            Ok(())
        })?;
        if !missing.is_empty() {
            return Err(StoreError::invalid(
                "destination",
                format!(
                    "results of the source are missing after the copy (the page starting at run \
                     id {})",
                    missing[0]
                ),
            ));
        }
        Ok(found)
    }

    /// [`Store::copy_to`] into an empty `dest`, ids kept; returns the tables with the source's
    /// checksums, taken from the rows as they are copied (the same rows, in the same order, as
    /// [`Store::table_sha256`] reads).
    fn copy_into_empty(
        &self,
        dest: &mut Store,
        progress: &mut dyn FnMut(&str, u64, u64),
    ) -> Result<Vec<TableCopy>, StoreError> {
        let triggers_set_aside = dest.set_triggers_aside()?;
        let mut report = Vec::new();
        for table in TABLES {
            let columns = self.columns(table.name)?;
            let total = self.count_rows(table.name, "TRUE")?;
            let confirms = columns.iter().position(|c| c == "confirms_result_id");
            let mut done = 0u64;
            let mut hash = Sha256::new();
            self.each_page(table.name, &columns, table.key, "TRUE", &mut |mut rows| {
                hash_rows(&mut hash, &rows);
                if let Some(i) = confirms {
                    // Set after the results (the one reference that points forward).
                    for row in &mut rows {
                        row[i] = Value::Null;
                    }
                }
                dest.insert_rows(table.name, &columns, &rows)?;
                done += rows.len() as u64;
                progress(table.name, done, total);
                Ok(())
            })?;
            report.push(TableCopy {
                table: table.name.to_owned(),
                source_rows: total,
                copied: done,
                skipped: 0,
                destination_rows: dest.count_rows(table.name, "TRUE")?,
                source_sha256: Some(format!("{:x}", hash.finalize())),
                destination_sha256: None,
            });
            if table.name == "results" {
                self.copy_confirmations(dest, &HashMap::new())?;
            }
        }
        if triggers_set_aside {
            // The triggers did not keep the derived tables: they are copied as the source has
            // them (a counter's total in one row).
            for (name, key, filter) in DERIVED {
                let (source, columns) = self.checked_read(name, key, filter)?;
                self.each_page(&source, &columns, key, filter, &mut |rows| {
                    dest.insert_rows(name, &columns, &rows)
                })?;
            }
            dest.conn
                .execute_batch(TRIGGERS_ON)
                .map_err(sql("putting the counting triggers back"))?;
        }
        if dest.conn.engine() == Engine::Postgres {
            for table in TABLES.iter().filter(|t| t.has_id) {
                dest.conn
                    .query_row(
                        &format!(
                            "SELECT setval(pg_get_serial_sequence('{0}', 'id'),
                                           coalesce(max(id), 0) + 1, false) FROM {0}",
                            table.name
                        ),
                        [],
                        |_| Ok(()),
                    )
                    .map_err(sql("moving the id sequences past the copied ids"))?;
            }
        }
        Ok(report)
    }

    /// What the check reads of `table` in this store ([`checked_source`]) and the columns it reads:
    /// a counting table's totals, or the table's own columns.
    fn checked_read(
        &self,
        table: &str,
        key: &[&str],
        filter: &str,
    ) -> Result<(String, Vec<String>), StoreError> {
        let (source, totals) = checked_source(table, key, filter);
        let columns = match totals {
            Some(totals) => totals,
            None => self.columns(table)?,
        };
        Ok((source, columns))
    }

    /// `rows` into `table` (its `columns`), as many per `INSERT` as the parameter limit allows.
    fn insert_rows(
        &self,
        table: &str,
        columns: &[String],
        rows: &[Vec<Value>],
    ) -> Result<(), StoreError> {
        let per_statement = (MAX_PARAMS / columns.len()).clamp(1, PAGE);
        for chunk in rows.chunks(per_statement) {
            self.conn
                .execute(&insert_sql(table, columns, chunk.len()), chunk.concat())
                .map_err(sql("writing copied rows"))?;
        }
        Ok(())
    }

    /// On PostgreSQL, when this connection owns `results` and `jobs`: turns off, for the copy's
    /// transaction, the triggers that keep the derived tables as rows are inserted (see the
    /// module docs), and says so. SQLite's stay on: it updates a counter in place.
    fn set_triggers_aside(&self) -> Result<bool, StoreError> {
        if self.conn.engine() != Engine::Postgres {
            return Ok(false);
        }
        let context = "setting the counting triggers aside";
        let owner: bool = self
            .conn
            .query_row(
                "SELECT bool_and(pg_has_role(relowner, 'USAGE')) FROM pg_class
                  WHERE oid IN ('results'::regclass, 'jobs'::regclass)",
                [],
                |r| r.get(0),
            )
            .map_err(sql(context))?;
        if owner {
            self.conn
                .execute_batch(TRIGGERS_OFF)
                .map_err(sql(context))?;
        }
        Ok(owner)
    }

    /// Sets `jobs.confirms_result_id` in `dest` from this store's jobs, through `results` (source
    /// result id → destination's; ids unchanged where the map has none).
    fn copy_confirmations(
        &self,
        dest: &Store,
        results: &HashMap<i64, i64>,
    ) -> Result<(), StoreError> {
        let context = "linking confirmation jobs";
        let pairs: Vec<(String, i64)> = self
            .conn
            .prepare(
                "SELECT run_id, confirms_result_id FROM jobs WHERE confirms_result_id IS NOT NULL",
            )
            .and_then(|mut s| s.query_map([], |r| Ok((r.get(0)?, r.get(1)?))))
            .map_err(sql(context))?
            .collect::<Result<_, _>>()
            .map_err(sql(context))?;
        for (run_id, result) in pairs {
            let result = results.get(&result).copied().unwrap_or(result);
            dest.conn
                .execute(
                    "UPDATE jobs SET confirms_result_id = ?2
                      WHERE run_id = ?1 AND confirms_result_id IS NULL",
                    super::engine::params![run_id, result],
                )
                .map_err(sql(context))?;
        }
        Ok(())
    }

    /// [`Store::copy_to`] into a `dest` with rows: row by row, skipping what it has, ids
    /// translated.
    fn merge_into(
        &self,
        dest: &mut Store,
        progress: &mut dyn FnMut(&str, u64, u64),
    ) -> Result<Vec<TableCopy>, StoreError> {
        let context = "merging rows";
        let mut ids: HashMap<&'static str, HashMap<i64, i64>> = HashMap::new();
        // Results the destination had: their samples, power and check are its own.
        let mut kept_results: std::collections::HashSet<i64> = std::collections::HashSet::new();
        let mut report = Vec::new();
        for table in TABLES {
            let columns = self.columns(table.name)?;
            let total = self.count_rows(table.name, "TRUE")?;
            let (mut copied, mut skipped, mut done) = (0u64, 0u64, 0u64);
            let at = |name: &str| columns.iter().position(|c| c == name);
            let mut map: HashMap<i64, i64> = HashMap::new();
            let mut pages = Vec::new();
            self.each_page(table.name, &columns, table.key, "TRUE", &mut |rows| {
                pages.push(rows);
                Ok(())
            })?;
            for mut row in pages.into_iter().flatten() {
                done += 1;
                let source_id = at("id").and_then(|i| int(&row[i]));
                // References through the maps of the tables already merged.
                let mut dangling = false;
                for (column, target) in table.refs {
                    let Some(i) = at(column) else { continue };
                    if let Some(old) = int(&row[i]) {
                        match ids.get(target).and_then(|m| m.get(&old)) {
                            Some(&new) => row[i] = Value::Int(new),
                            None => dangling = true,
                        }
                    }
                }
                if let Some(i) = at("confirms_result_id") {
                    row[i] = Value::Null;
                }
                let owner_kept = at("result_id")
                    .and_then(|i| int(&row[i]))
                    .is_some_and(|r| kept_results.contains(&r))
                    && table.name != "alerts";
                let existing = dest.merge_match(table.name, &columns, &row)?;
                if let Some(existing) = existing {
                    if let Some(old) = source_id {
                        map.insert(old, existing);
                    }
                    if table.name == "results" {
                        kept_results.insert(existing);
                    }
                    skipped += 1;
                    continue;
                }
                if owner_kept || dangling {
                    skipped += 1;
                    continue;
                }
                let (cols, values): (Vec<String>, Vec<Value>) = columns
                    .iter()
                    .cloned()
                    .zip(row)
                    .filter(|(c, _)| !(table.has_id && c == "id"))
                    .unzip();
                let returning = if table.has_id { " RETURNING id" } else { "" };
                let new_id: Option<i64> = if table.has_id {
                    Some(
                        dest.conn
                            .query_row(
                                &format!("{}{returning}", insert_sql(table.name, &cols, 1)),
                                values,
                                |r| r.get(0),
                            )
                            .map_err(sql(context))?,
                    )
                } else {
                    dest.conn
                        .execute(&insert_sql(table.name, &cols, 1), values)
                        .map_err(sql(context))?;
                    None
                };
                if let (Some(old), Some(new)) = (source_id, new_id) {
                    map.insert(old, new);
                }
                copied += 1;
                if done % PAGE as u64 == 0 {
                    progress(table.name, done, total);
                }
            }
            progress(table.name, done, total);
            ids.insert(table.name, map);
            report.push(TableCopy {
                table: table.name.to_owned(),
                source_rows: total,
                copied,
                skipped,
                destination_rows: dest.count_rows(table.name, "TRUE")?,
                source_sha256: None,
                destination_sha256: None,
            });
            if table.name == "results" {
                self.copy_confirmations(dest, &ids["results"])?;
            }
        }
        Ok(report)
    }

    /// The id of the row of `table` in this store that `row` (already translated) is the same
    /// as, by its natural key; `Some(0)` for a keyless match (a row keyed by its result).
    fn merge_match(
        &self,
        table: &str,
        columns: &[String],
        row: &[Value],
    ) -> Result<Option<i64>, StoreError> {
        let get = |name: &str| {
            columns
                .iter()
                .position(|c| c == name)
                .map(|i| row[i].clone())
                .unwrap_or(Value::Null)
        };
        let (query, args): (&str, Vec<Value>) = match table {
            "agents" => ("SELECT id FROM agents WHERE name = ?1", vec![get("name")]),
            "devices" => (
                "SELECT id FROM devices WHERE agent_id = ?1 AND device_id = ?2",
                vec![get("agent_id"), get("device_id")],
            ),
            "schedules" => (
                "SELECT id FROM schedules WHERE name = ?1",
                vec![get("name")],
            ),
            "jobs" => ("SELECT id FROM jobs WHERE run_id = ?1", vec![get("run_id")]),
            "results" => (
                "SELECT id FROM results WHERE run_id = ?1",
                vec![get("run_id")],
            ),
            "result_samples" => (
                "SELECT 0 FROM result_samples WHERE result_id = ?1",
                vec![get("result_id")],
            ),
            "power_samples" => (
                "SELECT 0 FROM power_samples WHERE result_id = ?1 AND seq = ?2",
                vec![get("result_id"), get("seq")],
            ),
            "checks" => (
                "SELECT 0 FROM checks WHERE result_id = ?1",
                vec![get("result_id")],
            ),
            "alerts" => (
                "SELECT id FROM alerts WHERE result_id = ?1",
                vec![get("result_id")],
            ),
            // A campaign is new unless it is the same suite, created at the same instant.
            "campaigns" => (
                "SELECT id FROM campaigns WHERE suite = ?1 AND created_at = ?2
                 AND description = ?3 ORDER BY id LIMIT 1",
                vec![get("suite"), get("created_at"), get("description")],
            ),
            _ => return Ok(None),
        };
        use super::engine::OptionalExtension;
        self.conn
            .query_row(query, args, |r| r.get(0))
            .optional()
            .map_err(sql("matching a merged row"))
    }
}

/// `INSERT INTO table (columns) VALUES (?1, …), (…)` for `rows` rows.
fn insert_sql(table: &str, columns: &[String], rows: usize) -> String {
    let n = columns.len();
    let tuples: Vec<String> = (0..rows)
        .map(|r| {
            let marks: Vec<String> = (1..=n).map(|c| format!("?{}", r * n + c)).collect();
            format!("({})", marks.join(", "))
        })
        .collect();
    format!(
        "INSERT INTO {table} ({}) VALUES {}",
        columns.join(", "),
        tuples.join(", ")
    )
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        _ => None,
    }
}

/// Feeds rows to the checksum, value by value.
fn hash_rows(hash: &mut Sha256, rows: &[Vec<Value>]) {
    for v in rows.iter().flatten() {
        hash_value(hash, v.as_ref());
    }
}

/// Feeds one value to the checksum: its storage class, then its bytes.
fn hash_value(hash: &mut Sha256, v: ValueRef<'_>) {
    match v {
        ValueRef::Null => hash.update([0]),
        ValueRef::Int(i) => {
            hash.update([1]);
            hash.update(i.to_le_bytes());
        }
        ValueRef::Real(f) => {
            hash.update([2]);
            hash.update(f.to_bits().to_le_bytes());
        }
        ValueRef::Text(t) => {
            hash.update([3]);
            hash.update((t.len() as u64).to_le_bytes());
            hash.update(t.as_bytes());
        }
        ValueRef::Blob(b) => {
            hash.update([4]);
            hash.update((b.len() as u64).to_le_bytes());
            hash.update(b);
        }
    }
}

#[cfg(test)]
mod tests;
