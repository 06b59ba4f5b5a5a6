//! Why a statement failed, in either engine ([`DbError`]), and `optional()` for a query that may
//! find no row. Below the connection, the rows and PostgreSQL's client, which all return it.

/// A statement's outcome.
pub(in crate::store) type DbResult<T> = Result<T, DbError>;

/// Why a statement failed, in either engine.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// SQLite's error.
    #[error("{0}")]
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL's error (the server's message and SQLSTATE where it sent one; the client's
    /// reason with its causes otherwise), whole in its message.
    #[error("{}", describe(.0))]
    Postgres(postgres::Error),
    /// `query_row` found no row.
    #[error("the query returned no rows")]
    NoRows,
    /// A column's value does not convert to the Rust type asked for.
    #[error("column {column}: {message}")]
    Conversion {
        /// The column's index or name.
        column: String,
        /// What was found and what was asked for.
        message: String,
    },
    /// The connection to PostgreSQL is gone (its thread ended).
    #[error("the connection to PostgreSQL is closed")]
    Closed,
    /// The connection to PostgreSQL was lost in a transaction that could not be restored on a new
    /// one (see `pg_session`): the transaction is gone.
    #[error("{0}")]
    Lost(String),
}

impl DbError {
    /// A [`DbError::Conversion`] of `column`.
    pub(in crate::store) fn conversion(column: &str, message: impl std::fmt::Display) -> DbError {
        DbError::Conversion {
            column: column.to_owned(),
            message: message.to_string(),
        }
    }

    /// Whether this is a failed UNIQUE constraint (a name or run id that is taken).
    pub(in crate::store) fn is_unique_violation(&self) -> bool {
        match self {
            DbError::Sqlite(rusqlite::Error::SqliteFailure(f, _)) => {
                f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                    || f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
            }
            DbError::Postgres(e) => e.code() == Some(&postgres::error::SqlState::UNIQUE_VIOLATION),
            _ => false,
        }
    }
}

impl From<postgres::Error> for DbError {
    fn from(e: postgres::Error) -> DbError {
        DbError::Postgres(e)
    }
}

/// `Result::optional` as rusqlite spells it: no row becomes `None`.
pub(in crate::store) trait OptionalExtension<T> {
    /// `Ok(None)` for [`DbError::NoRows`], the rest unchanged.
    fn optional(self) -> Result<Option<T>, DbError>;
}

impl<T> OptionalExtension<T> for Result<T, DbError> {
    fn optional(self) -> Result<Option<T>, DbError> {
        match self {
            Ok(v) => Ok(Some(v)),
            Err(DbError::NoRows) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// A PostgreSQL error in one line: the server's message and SQLSTATE, or the client's reason.
pub(super) fn describe(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                let more = s.to_string();
                if !text.contains(&more) {
                    text = format!("{text}: {more}");
                }
                source = s.source();
            }
            text
        }
    }
}
