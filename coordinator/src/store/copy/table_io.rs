//! Reading and writing a table's rows by name, whatever its columns: counts, the schema's column
//! list, key-ordered pages, multi-row `INSERT`s within the parameter limit, and the one forward
//! reference (`jobs.confirms_result_id`) set after the results. Shared by the copy into an empty
//! store, the merge and the check.

use std::collections::HashMap;

use super::super::engine::{Engine, Value};
use super::super::error::{StoreError, sql};
use super::super::open::Store;
use super::tables::{MAX_PARAMS, PAGE, checked_source};

impl Store {
    /// Rows of `table` matching `filter`.
    pub(super) fn count_rows(&self, table: &str, filter: &str) -> Result<u64, StoreError> {
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
    pub(super) fn columns(&self, table: &str) -> Result<Vec<String>, StoreError> {
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
    pub(super) fn each_page(
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

    /// What the check reads of `table` in this store ([`checked_source`]) and the columns it reads:
    /// a counting table's totals, or the table's own columns.
    pub(super) fn checked_read(
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
    pub(super) fn insert_rows(
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

    /// Sets `jobs.confirms_result_id` in `dest` from this store's jobs, through `results` (source
    /// result id → destination's; ids unchanged where the map has none).
    pub(super) fn copy_confirmations(
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
                    super::super::engine::params![run_id, result],
                )
                .map_err(sql(context))?;
        }
        Ok(())
    }
}

/// `INSERT INTO table (columns) VALUES (?1, …), (…)` for `rows` rows.
pub(super) fn insert_sql(table: &str, columns: &[String], rows: usize) -> String {
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
