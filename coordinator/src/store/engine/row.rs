//! One row of a result from either engine, read by column position or name with SQLite's
//! conversions whichever engine it came from.

use super::db_error::DbError;
use super::value::{FromValue, ValueRef};

/// A column index: its position or its name.
pub(in crate::store) trait ColIndex:
    rusqlite::RowIndex + postgres::row::RowIndex + std::fmt::Display + Copy
{
}
impl ColIndex for usize {}
impl ColIndex for &str {}

/// One row of a result, from either engine.
pub(in crate::store) enum Row<'a> {
    Sqlite(&'a rusqlite::Row<'a>),
    Postgres(&'a postgres::Row),
}

impl Row<'_> {
    /// The names of the row's columns, in order.
    pub(in crate::store) fn column_names(&self) -> Vec<String> {
        match self {
            Row::Sqlite(r) => r
                .as_ref()
                .column_names()
                .into_iter()
                .map(str::to_owned)
                .collect(),
            Row::Postgres(r) => r.columns().iter().map(|c| c.name().to_owned()).collect(),
        }
    }

    /// Column `index` as `T`, converted as SQLite would (an integer reads as a real, not the other
    /// way round; NULL only into an `Option`).
    ///
    /// # Errors
    /// [`DbError::Conversion`] for a value `T` cannot hold, the engine's error for a column that
    /// does not exist.
    pub(in crate::store) fn get<I: ColIndex, T: FromValue>(&self, index: I) -> Result<T, DbError> {
        let value = match self {
            Row::Sqlite(r) => ValueRef::from_sqlite(r.get_ref(index)?),
            Row::Postgres(r) => r.try_get::<_, ValueRef<'_>>(index)?,
        };
        // The column's name is text only for the error: every value read went through an
        // allocation for it (60 per result row of a listing).
        T::from_value(value).map_err(|message| DbError::Conversion {
            column: index.to_string(),
            message,
        })
    }
}
