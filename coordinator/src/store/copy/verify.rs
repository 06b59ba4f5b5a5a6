//! The check of a copy (see the module docs of `copy`): every result of the source is in the
//! destination, and after a copy into an empty store every table has the source's row count and
//! SHA-256, each value hashed with its storage class.

use sha2::{Digest, Sha256};

use super::super::engine::{Value, ValueRef};
use super::super::error::{StoreError, sql};
use super::super::open::Store;
use super::report::TableCopy;
use super::tables::{DERIVED, TABLES, checked_source};

impl Store {
    /// The check of a copy into `dest` (see the module docs): every result of this store is
    /// there, and after a copy into an empty store every table, the counting ones included, has
    /// the source's rows and checksum. Returns the tables with their checksums and the results
    /// found.
    pub(super) fn check_copy(
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

    /// SHA-256 (hex) of every row of `table` in key order (counting tables: the counted rows).
    pub(super) fn table_sha256(&self, table: &str) -> Result<String, StoreError> {
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
    pub(super) fn verify_results_in(&self, dest: &Store) -> Result<u64, StoreError> {
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
}

/// Feeds rows to the checksum, value by value.
pub(super) fn hash_rows(hash: &mut Sha256, rows: &[Vec<Value>]) {
    for v in rows.iter().flatten() {
        hash_value(hash, v.as_ref());
    }
}

/// Feeds one value to the checksum: its storage class, then its bytes.
pub(super) fn hash_value(hash: &mut Sha256, v: ValueRef<'_>) {
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
