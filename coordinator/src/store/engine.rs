//! The two database engines behind one connection type: SQLite (embedded, the default) and
//! PostgreSQL (shared by several serves).
//!
//! Every statement of the store goes through [`Conn`], which mirrors the part of rusqlite's API
//! the store uses (`execute`, `query_row`, `prepare_cached(..).query_map`, `execute_batch`,
//! transactions). The store writes SQL in the dialect both engines share: `?N` parameters (turned
//! into `$N` for PostgreSQL by [`pg_sql`]), `ON CONFLICT … DO …`, `RETURNING`, `NULLS FIRST/LAST`
//! where a nullable column is sorted; where the dialects part, the caller asks [`Conn::engine`].
//!
//! Values cross the boundary as SQLite's five storage classes ([`ValueRef`]), whichever engine
//! holds them: PostgreSQL's `bigint`, `double precision`, `text` and `bytea` columns map onto them
//! one to one, and a PostgreSQL `boolean` or `numeric` (`sum` of integers) reads back as an
//! integer or a real, so a row is read the same way from either engine.

mod pg;
mod pg_tls;
mod value;

use std::cell::Cell;

pub use self::pg::is_postgres_url;
pub(super) use self::pg::{PgConn, PgTarget, explain_connect_error};
pub(super) use self::value::{FromValue, ToParam, Value, ValueRef};

/// A statement's outcome.
pub(super) type DbResult<T> = Result<T, DbError>;

/// Which engine a connection talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// An SQLite file (or an in-memory database).
    Sqlite,
    /// A PostgreSQL database.
    Postgres,
}

/// Why a statement failed, in either engine.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// SQLite's error.
    #[error("{0}")]
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL's error (the server's message and SQLSTATE where it sent one; the client's
    /// reason with its causes otherwise), whole in its message.
    #[error("{}", pg::describe(.0))]
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
}

impl DbError {
    /// A [`DbError::Conversion`] of `column`.
    pub(super) fn conversion(column: &str, message: impl std::fmt::Display) -> DbError {
        DbError::Conversion {
            column: column.to_owned(),
            message: message.to_string(),
        }
    }

    /// Whether this is a failed UNIQUE constraint (a name or run id that is taken).
    pub(super) fn is_unique_violation(&self) -> bool {
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
pub(super) trait OptionalExtension<T> {
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

/// A statement's parameters: positional (`?1`, `?2`, …) or named (`:name`).
#[derive(Clone, Copy)]
pub(super) enum Params<'a> {
    /// `?N` takes the N-th.
    Positional(&'a [&'a dyn ToParam]),
    /// `:name` takes the value paired with `":name"`.
    Named(&'a [(&'a str, &'a dyn ToParam)]),
}

/// What a statement's parameters can be given as: `[]`, `[x]`, `params![a, b]`,
/// `named_params! {":a": a}`.
pub(super) trait IntoParams {
    /// The parameters, borrowed.
    fn with_params<R>(&self, f: impl FnOnce(Params<'_>) -> R) -> R;
}

impl IntoParams for &[&dyn ToParam] {
    fn with_params<R>(&self, f: impl FnOnce(Params<'_>) -> R) -> R {
        f(Params::Positional(self))
    }
}

impl IntoParams for &[(&str, &dyn ToParam)] {
    fn with_params<R>(&self, f: impl FnOnce(Params<'_>) -> R) -> R {
        f(Params::Named(self))
    }
}

/// `[]`: no parameters (one impl for the empty array, so `[]` needs no type).
impl IntoParams for [&dyn ToParam; 0] {
    fn with_params<R>(&self, f: impl FnOnce(Params<'_>) -> R) -> R {
        f(Params::Positional(&[]))
    }
}

/// `values` as positional parameters.
fn positional<T: ToParam, R>(values: &[T], f: impl FnOnce(Params<'_>) -> R) -> R {
    let refs: Vec<&dyn ToParam> = values.iter().map(|v| v as &dyn ToParam).collect();
    f(Params::Positional(&refs))
}

macro_rules! array_params {
    ($($n:literal)*) => {$(
        impl<T: ToParam> IntoParams for [T; $n] {
            fn with_params<R>(&self, f: impl FnOnce(Params<'_>) -> R) -> R {
                positional(self, f)
            }
        }
    )*};
}
array_params!(1 2 3 4 5 6 7 8);

impl<T: ToParam> IntoParams for Vec<T> {
    fn with_params<R>(&self, f: impl FnOnce(Params<'_>) -> R) -> R {
        positional(self, f)
    }
}

/// Positional parameters, as `rusqlite::params!`.
macro_rules! params {
    () => { &[] as &[&dyn $crate::store::engine::ToParam] };
    ($($p:expr),+ $(,)?) => { &[$(&$p as &dyn $crate::store::engine::ToParam),+] as &[&dyn $crate::store::engine::ToParam] };
}

/// Named parameters, as `rusqlite::named_params!`.
macro_rules! named_params {
    ($($n:literal : $p:expr),+ $(,)?) => {
        &[$(($n, &$p as &dyn $crate::store::engine::ToParam)),+] as &[(&str, &dyn $crate::store::engine::ToParam)]
    };
}

pub(super) use {named_params, params};

/// A column index: its position or its name.
pub(super) trait ColIndex:
    rusqlite::RowIndex + postgres::row::RowIndex + std::fmt::Display + Copy
{
}
impl ColIndex for usize {}
impl ColIndex for &str {}

/// One row of a result, from either engine.
pub(super) enum Row<'a> {
    Sqlite(&'a rusqlite::Row<'a>),
    Postgres(&'a postgres::Row),
}

impl Row<'_> {
    /// The names of the row's columns, in order.
    pub(super) fn column_names(&self) -> Vec<String> {
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
    pub(super) fn get<I: ColIndex, T: FromValue>(&self, index: I) -> Result<T, DbError> {
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

/// A connection to either engine. Methods take `&self`, as rusqlite's do; a PostgreSQL
/// connection runs on its own thread ([`PgConn`]) so the store can be called from anywhere,
/// async tasks included, exactly as the SQLite one.
// One per store: the SQLite variant's size costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
pub(super) enum Conn {
    Sqlite {
        conn: rusqlite::Connection,
        /// Open transactions and savepoints ([`Conn::begin`]).
        depth: Cell<usize>,
    },
    Postgres {
        conn: PgConn,
        depth: Cell<usize>,
    },
}

impl Conn {
    /// A connection around an open SQLite database.
    pub(super) fn sqlite(conn: rusqlite::Connection) -> Conn {
        Conn::Sqlite {
            conn,
            depth: Cell::new(0),
        }
    }

    /// A connection around an open PostgreSQL client.
    pub(super) fn postgres(conn: PgConn) -> Conn {
        Conn::Postgres {
            conn,
            depth: Cell::new(0),
        }
    }

    /// Which engine this is.
    pub(super) fn engine(&self) -> Engine {
        match self {
            Conn::Sqlite { .. } => Engine::Sqlite,
            Conn::Postgres { .. } => Engine::Postgres,
        }
    }

    /// The SQLite connection, for what only SQLite has (pragmas, backups); `None` on PostgreSQL.
    pub(super) fn as_sqlite(&self) -> Option<&rusqlite::Connection> {
        match self {
            Conn::Sqlite { conn, .. } => Some(conn),
            Conn::Postgres { .. } => None,
        }
    }

    /// Runs `sql` (one or more statements without parameters).
    ///
    /// # Errors
    /// The engine's error.
    pub(super) fn execute_batch(&self, sql: &str) -> Result<(), DbError> {
        match self {
            Conn::Sqlite { conn, .. } => Ok(conn.execute_batch(sql)?),
            Conn::Postgres { conn, .. } => conn.batch(sql),
        }
    }

    /// Runs one statement; returns the rows it changed.
    ///
    /// # Errors
    /// The engine's error.
    pub(super) fn execute(&self, sql: &str, params: impl IntoParams) -> Result<usize, DbError> {
        self.prepare_cached(sql)?.execute(params)
    }

    /// The first row of `sql`, through `f`.
    ///
    /// # Errors
    /// [`DbError::NoRows`] when there is none; the engine's error; `f`'s.
    pub(super) fn query_row<T>(
        &self,
        sql: &str,
        params: impl IntoParams,
        f: impl FnOnce(&Row<'_>) -> Result<T, DbError>,
    ) -> Result<T, DbError> {
        self.prepare_cached(sql)?.query_row(params, f)
    }

    /// A statement to run (SQLite keeps it prepared in the connection's cache, PostgreSQL in the
    /// connection thread's).
    ///
    /// # Errors
    /// None yet: a statement is prepared when it first runs.
    pub(super) fn prepare_cached(&self, sql: &str) -> Result<Stmt<'_>, DbError> {
        Ok(Stmt {
            conn: self,
            sql: sql.to_owned(),
        })
    }

    /// [`Conn::prepare_cached`].
    ///
    /// # Errors
    /// None yet.
    pub(super) fn prepare(&self, sql: &str) -> Result<Stmt<'_>, DbError> {
        self.prepare_cached(sql)
    }

    fn depth(&self) -> &Cell<usize> {
        match self {
            Conn::Sqlite { depth, .. } | Conn::Postgres { depth, .. } => depth,
        }
    }

    /// Opens a transaction (SQLite: `BEGIN IMMEDIATE`, so a second process waits for the write
    /// lock up front), or a savepoint inside an open one. It rolls back when dropped uncommitted.
    ///
    /// # Errors
    /// The engine's error of `BEGIN` or `SAVEPOINT`.
    pub(super) fn begin(&self) -> Result<Tx<'_>, DbError> {
        let level = self.open_level()?;
        Ok(Tx {
            conn: self,
            level,
            done: false,
        })
    }

    /// Opens a transaction or savepoint without a guard; [`Conn::close_level`] with the level it
    /// returns ends it (for a caller that must lend the store out in between, as `bulk` does).
    ///
    /// # Errors
    /// The engine's error of `BEGIN` or `SAVEPOINT`.
    pub(super) fn open_level(&self) -> Result<usize, DbError> {
        let depth = self.depth().get();
        if depth == 0 {
            self.execute_batch(match self.engine() {
                Engine::Sqlite => "BEGIN IMMEDIATE",
                Engine::Postgres => "BEGIN",
            })?;
        } else {
            self.execute_batch(&format!("SAVEPOINT gpufleet_sp{depth}"))?;
        }
        self.depth().set(depth + 1);
        Ok(depth)
    }

    /// Commits (or rolls back) the transaction or savepoint [`Conn::open_level`] opened at
    /// `level`. A failed commit rolls back.
    ///
    /// # Errors
    /// The engine's error of `COMMIT` or `RELEASE`.
    pub(super) fn close_level(&self, level: usize, commit: bool) -> Result<(), DbError> {
        self.depth().set(level);
        let sp = format!("gpufleet_sp{level}");
        if commit {
            let result = if level == 0 {
                self.execute_batch("COMMIT")
            } else {
                self.execute_batch(&format!("RELEASE {sp}"))
            };
            if result.is_err() {
                let _ = self.close_level(level, false);
            }
            return result;
        }
        if level == 0 {
            self.execute_batch("ROLLBACK")
        } else {
            self.execute_batch(&format!("ROLLBACK TO {sp}; RELEASE {sp}"))
        }
    }
}

/// A statement on a [`Conn`], as rusqlite's `Statement` is used.
pub(super) struct Stmt<'c> {
    conn: &'c Conn,
    sql: String,
}

impl Stmt<'_> {
    /// Runs it; returns the rows it changed.
    ///
    /// # Errors
    /// The engine's error.
    pub(super) fn execute(&mut self, params: impl IntoParams) -> Result<usize, DbError> {
        match self.conn {
            Conn::Sqlite { conn, .. } => {
                let mut stmt = conn.prepare_cached(&self.sql)?;
                Ok(params
                    .with_params(|p| sqlite_bind(&mut stmt, p))?
                    .raw_execute()?)
            }
            Conn::Postgres { conn, .. } => {
                let (sql, values) = params.with_params(|p| pg_sql(&self.sql, p));
                conn.execute(sql, values)
            }
        }
    }

    /// Every row, each through `f`, collected (so the iterator rusqlite's callers expect is one
    /// over results already read).
    ///
    /// # Errors
    /// The engine's error.
    pub(super) fn query_map<T>(
        &mut self,
        params: impl IntoParams,
        mut f: impl FnMut(&Row<'_>) -> Result<T, DbError>,
    ) -> Result<std::vec::IntoIter<Result<T, DbError>>, DbError> {
        let mut out = Vec::new();
        self.for_each(params, |row| {
            out.push(f(row));
            Ok(true)
        })?;
        Ok(out.into_iter())
    }

    /// The first row, through `f`.
    ///
    /// # Errors
    /// [`DbError::NoRows`] when there is none; the engine's error; `f`'s.
    pub(super) fn query_row<T>(
        &mut self,
        params: impl IntoParams,
        f: impl FnOnce(&Row<'_>) -> Result<T, DbError>,
    ) -> Result<T, DbError> {
        let mut f = Some(f);
        let mut out = None;
        self.for_each(params, |row| {
            if let Some(f) = f.take() {
                out = Some(f(row));
            }
            Ok(false)
        })?;
        out.unwrap_or(Err(DbError::NoRows))
    }

    /// Calls `f` on each row until it returns `false`.
    fn for_each(
        &mut self,
        params: impl IntoParams,
        mut f: impl FnMut(&Row<'_>) -> Result<bool, DbError>,
    ) -> Result<(), DbError> {
        match self.conn {
            Conn::Sqlite { conn, .. } => {
                let mut stmt = conn.prepare_cached(&self.sql)?;
                let mut rows = params
                    .with_params(|p| sqlite_bind(&mut stmt, p))?
                    .raw_query();
                while let Some(row) = rows.next()? {
                    if !f(&Row::Sqlite(row))? {
                        break;
                    }
                }
                Ok(())
            }
            Conn::Postgres { conn, .. } => {
                let (sql, values) = params.with_params(|p| pg_sql(&self.sql, p));
                for row in conn.query(sql, values)? {
                    if !f(&Row::Postgres(&row))? {
                        break;
                    }
                }
                Ok(())
            }
        }
    }
}

/// Binds `params` to an SQLite statement.
fn sqlite_bind<'s, 'c>(
    stmt: &'s mut rusqlite::CachedStatement<'c>,
    params: Params<'_>,
) -> rusqlite::Result<&'s mut rusqlite::CachedStatement<'c>> {
    match params {
        Params::Positional(values) => {
            let expected = stmt.parameter_count();
            if values.len() != expected {
                return Err(rusqlite::Error::InvalidParameterCount(
                    values.len(),
                    expected,
                ));
            }
            for (i, v) in values.iter().enumerate() {
                stmt.raw_bind_parameter(i + 1, v.to_value())?;
            }
        }
        Params::Named(pairs) => {
            for (name, v) in pairs {
                let Some(i) = stmt.parameter_index(name)? else {
                    return Err(rusqlite::Error::InvalidParameterName((*name).to_owned()));
                };
                stmt.raw_bind_parameter(i, v.to_value())?;
            }
        }
    }
    Ok(stmt)
}

/// `sql` in PostgreSQL's spelling of parameters, and the values in `$N` order: `?N` becomes `$N`,
/// a bare `?` the next number, `:name` the position of `name` among named parameters. String
/// literals, quoted names, comments and `::` casts are left alone.
pub(super) fn pg_sql(sql: &str, params: Params<'_>) -> (String, Vec<Value>) {
    let bytes = sql.as_bytes();
    let mut out = String::with_capacity(sql.len() + 8);
    let mut next = 0usize;
    let mut i = 0;
    let mut copied = 0;
    let names: Vec<&str> = match params {
        Params::Named(pairs) => pairs.iter().map(|(n, _)| *n).collect(),
        Params::Positional(_) => Vec::new(),
    };
    while i < bytes.len() {
        match bytes[i] {
            q @ (b'\'' | b'"') => {
                i += 1;
                while i < bytes.len() && bytes[i] != q {
                    i += 1;
                }
                i += 1;
            }
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b':' if bytes.get(i + 1) == Some(&b':') => i += 2,
            b'?' => {
                out.push_str(&sql[copied..i]);
                i += 1;
                let start = i;
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
                let n = if start == i {
                    next += 1;
                    next
                } else {
                    let n: usize = sql[start..i].parse().unwrap_or(0);
                    next = next.max(n);
                    n
                };
                out.push_str(&format!("${n}"));
                copied = i;
            }
            b':' if !names.is_empty()
                && bytes
                    .get(i + 1)
                    .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_') =>
            {
                let start = i;
                i += 1;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                if let Some(pos) = names.iter().position(|n| *n == &sql[start..i]) {
                    out.push_str(&sql[copied..start]);
                    out.push_str(&format!("${}", pos + 1));
                    copied = i;
                }
            }
            _ => i += 1,
        }
    }
    out.push_str(&sql[copied..]);
    let values = match params {
        Params::Positional(values) => values.iter().map(|v| v.to_value().to_owned()).collect(),
        Params::Named(pairs) => pairs.iter().map(|(_, v)| v.to_value().to_owned()).collect(),
    };
    (out, values)
}

/// An open transaction or savepoint ([`Conn::begin`]); derefs to the connection.
pub(super) struct Tx<'c> {
    conn: &'c Conn,
    level: usize,
    done: bool,
}

impl std::ops::Deref for Tx<'_> {
    type Target = Conn;

    fn deref(&self) -> &Conn {
        self.conn
    }
}

impl Tx<'_> {
    /// Commits the transaction, or releases the savepoint into the enclosing one.
    ///
    /// # Errors
    /// The engine's error of `COMMIT` (the transaction is then rolled back).
    pub(super) fn commit(mut self) -> Result<(), DbError> {
        self.done = true;
        self.conn.close_level(self.level, true)
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.conn.close_level(self.level, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pg_sql_numbers_parameters_and_leaves_literals_alone() {
        let (sql, values) = pg_sql(
            "SELECT '?1', \"a?\", x::text FROM t WHERE a = ?2 AND b = ?1 -- ?3\n AND c = ?",
            Params::Positional(params![1i64, "x", 2.5f64]),
        );
        assert_eq!(
            sql,
            "SELECT '?1', \"a?\", x::text FROM t WHERE a = $2 AND b = $1 -- ?3\n AND c = $3"
        );
        assert_eq!(values.len(), 3);
        let (sql, values) = pg_sql(
            "INSERT INTO t VALUES (:b, :a, :b, ':a')",
            Params::Named(named_params! {":a": 1i64, ":b": "two"}),
        );
        assert_eq!(sql, "INSERT INTO t VALUES ($2, $1, $2, ':a')");
        assert_eq!(values, vec![Value::Int(1), Value::Text("two".into())]);
    }

    #[test]
    fn sqlite_transactions_nest_and_roll_back_on_drop() {
        let conn = Conn::sqlite(rusqlite::Connection::open_in_memory().unwrap());
        conn.execute_batch("CREATE TABLE t (x INTEGER)").unwrap();
        {
            let tx = conn.begin().unwrap();
            tx.execute("INSERT INTO t VALUES (?1)", params![1i64])
                .unwrap();
            {
                let inner = tx.begin().unwrap();
                inner.execute("INSERT INTO t VALUES (?1)", [2i64]).unwrap();
                // dropped: rolled back alone
            }
            let inner = tx.begin().unwrap();
            inner
                .execute("INSERT INTO t VALUES (3)", params![])
                .unwrap();
            inner.commit().unwrap();
            tx.commit().unwrap();
        }
        assert_eq!(conn.depth().get(), 0);
        let xs: Vec<i64> = conn
            .prepare_cached("SELECT x FROM t ORDER BY x")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(xs, [1, 3]);
        let none = conn
            .query_row("SELECT x FROM t WHERE x = 9", params![], |r| {
                r.get::<_, i64>(0)
            })
            .optional()
            .unwrap();
        assert_eq!(none, None);
    }
}
