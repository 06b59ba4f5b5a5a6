//! What `db copy` reports: per table, what was copied and skipped and the checksums the check
//! compared. Its own file because the copy, the merge and the check all fill it.

use serde::Serialize;

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
