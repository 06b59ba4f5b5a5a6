//! A copy into an empty store: every table in order, ids kept, a page of rows per `INSERT`, the
//! source's checksum taken from the rows as they pass; on PostgreSQL the counting triggers set
//! aside (when this role owns the tables) and the derived tables copied instead, and the id
//! sequences moved past the copied ids.

use std::collections::HashMap;

use sha2::{Digest, Sha256};

use super::super::engine::{Engine, Value};
use super::super::error::{StoreError, sql};
use super::super::open::Store;
use super::report::TableCopy;
use super::tables::{DERIVED, TABLES, TRIGGERS_OFF, TRIGGERS_ON};
use super::verify::hash_rows;

impl Store {
    /// [`Store::copy_to`] into an empty `dest`, ids kept; returns the tables with the source's
    /// checksums, taken from the rows as they are copied (the same rows, in the same order, as
    /// [`Store::table_sha256`] reads).
    pub(super) fn copy_into_empty(
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

    /// On PostgreSQL, when this connection owns `results` and `jobs`: turns off, for the copy's
    /// transaction, the triggers that keep the derived tables as rows are inserted (see the
    /// module docs), and says so. SQLite's stay on: it updates a counter in place.
    pub(super) fn set_triggers_aside(&self) -> Result<bool, StoreError> {
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
}
