//! `db copy --merge`: into a store that has rows, row by row, skipping what the destination has
//! by each table's natural key (a run id, an agent's name, …), ids translated to the
//! destination's own.

use std::collections::HashMap;

use super::super::engine::Value;
use super::super::error::{StoreError, sql};
use super::super::open::Store;
use super::report::TableCopy;
use super::table_io::insert_sql;
use super::tables::{PAGE, TABLES};

impl Store {
    /// [`Store::copy_to`] into a `dest` with rows: row by row, skipping what it has, ids
    /// translated.
    pub(super) fn merge_into(
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
    pub(super) fn merge_match(
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
        use super::super::engine::OptionalExtension;
        self.conn
            .query_row(query, args, |r| r.get(0))
            .optional()
            .map_err(sql("matching a merged row"))
    }
}

/// The integer in `v`, if it holds one (an id or a reference).
fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        _ => None,
    }
}
