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
//!
//! # Layout
//!
//! `tables` lists what is copied and in which order; `table_io` reads and writes a table's rows
//! by name; `into_empty` and `merge` are the two ways of copying; `verify` is the check;
//! `report` is what `db copy` prints.

mod into_empty;
mod merge;
mod report;
mod table_io;
mod tables;
mod verify;

pub use self::report::{CopyReport, TableCopy};

use self::tables::TABLES;
use super::error::{StoreError, sql};
use super::open::Store;

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
}

#[cfg(test)]
mod tests;
