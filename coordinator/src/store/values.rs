//! Checks on values before they are written, and JSON columns read back.

use super::engine::{DbError, DbResult, Row};
use super::error::StoreError;

/// Rejects an empty value for a field that names something.
pub(super) fn require_non_empty(field: &'static str, value: &str) -> Result<(), StoreError> {
    if value.trim().is_empty() {
        Err(StoreError::invalid(field, "must not be empty"))
    } else {
        Ok(())
    }
}

/// Parses `text` as JSON for `field`, so malformed JSON is refused before it is stored.
pub(super) fn parse_json(field: &'static str, text: &str) -> Result<serde_json::Value, StoreError> {
    serde_json::from_str(text)
        .map_err(|e| StoreError::invalid(field, format!("is not valid JSON: {e}")))
}

/// Reads a JSON text column back into a value.
pub(super) fn json_column(row: &Row<'_>, column: &str) -> DbResult<serde_json::Value> {
    let text: String = row.get(column)?;
    serde_json::from_str(&text).map_err(|e| DbError::conversion(column, e))
}
