//! The connection to either engine ([`Conn`]), its statements ([`Stmt`]) and transactions
//! ([`Tx`]): the part of rusqlite's API the store uses, run on SQLite directly or on PostgreSQL's
//! connection thread.

use std::cell::Cell;

use super::db_error::DbError;
use super::parameters::{IntoParams, pg_sql, sqlite_bind};
use super::pg::PgConn;
use super::row::Row;

/// Which engine a connection talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// An SQLite file (or an in-memory database).
    Sqlite,
    /// A PostgreSQL database.
    Postgres,
}

/// A connection to either engine. Methods take `&self`, as rusqlite's do; a PostgreSQL
/// connection runs on its own thread ([`PgConn`]) so the store can be called from anywhere,
/// async tasks included, exactly as the SQLite one.
// One per store: the SQLite variant's size costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
pub(in crate::store) enum Conn {
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
    pub(in crate::store) fn sqlite(conn: rusqlite::Connection) -> Conn {
        Conn::Sqlite {
            conn,
            depth: Cell::new(0),
        }
    }

    /// A connection around an open PostgreSQL client.
    pub(in crate::store) fn postgres(conn: PgConn) -> Conn {
        Conn::Postgres {
            conn,
            depth: Cell::new(0),
        }
    }

    /// Which engine this is.
    pub(in crate::store) fn engine(&self) -> Engine {
        match self {
            Conn::Sqlite { .. } => Engine::Sqlite,
            Conn::Postgres { .. } => Engine::Postgres,
        }
    }

    /// Whether the database can be reached now: PostgreSQL's connection keeps it as it loses and
    /// regains the server; SQLite's is always up.
    pub(in crate::store) fn health(&self) -> std::sync::Arc<super::StoreHealth> {
        match self {
            Conn::Sqlite { .. } => std::sync::Arc::default(),
            Conn::Postgres { conn, .. } => conn.health().clone(),
        }
    }

    /// The SQLite connection, for what only SQLite has (pragmas, backups); `None` on PostgreSQL.
    pub(in crate::store) fn as_sqlite(&self) -> Option<&rusqlite::Connection> {
        match self {
            Conn::Sqlite { conn, .. } => Some(conn),
            Conn::Postgres { .. } => None,
        }
    }

    /// Runs `sql` (one or more statements without parameters).
    ///
    /// # Errors
    /// The engine's error.
    pub(in crate::store) fn execute_batch(&self, sql: &str) -> Result<(), DbError> {
        match self {
            Conn::Sqlite { conn, .. } => Ok(conn.execute_batch(sql)?),
            Conn::Postgres { conn, .. } => conn.batch(sql),
        }
    }

    /// Runs one statement; returns the rows it changed.
    ///
    /// # Errors
    /// The engine's error.
    pub(in crate::store) fn execute(
        &self,
        sql: &str,
        params: impl IntoParams,
    ) -> Result<usize, DbError> {
        self.prepare_cached(sql)?.execute(params)
    }

    /// The first row of `sql`, through `f`.
    ///
    /// # Errors
    /// [`DbError::NoRows`] when there is none; the engine's error; `f`'s.
    pub(in crate::store) fn query_row<T>(
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
    pub(in crate::store) fn prepare_cached(&self, sql: &str) -> Result<Stmt<'_>, DbError> {
        Ok(Stmt {
            conn: self,
            sql: sql.to_owned(),
        })
    }

    /// [`Conn::prepare_cached`].
    ///
    /// # Errors
    /// None yet.
    pub(in crate::store) fn prepare(&self, sql: &str) -> Result<Stmt<'_>, DbError> {
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
    pub(in crate::store) fn begin(&self) -> Result<Tx<'_>, DbError> {
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
    pub(in crate::store) fn open_level(&self) -> Result<usize, DbError> {
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
    pub(in crate::store) fn close_level(&self, level: usize, commit: bool) -> Result<(), DbError> {
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
pub(in crate::store) struct Stmt<'c> {
    conn: &'c Conn,
    sql: String,
}

impl Stmt<'_> {
    /// Runs it; returns the rows it changed.
    ///
    /// # Errors
    /// The engine's error.
    pub(in crate::store) fn execute(&mut self, params: impl IntoParams) -> Result<usize, DbError> {
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
    pub(in crate::store) fn query_map<T>(
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
    pub(in crate::store) fn query_row<T>(
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

/// An open transaction or savepoint ([`Conn::begin`]); derefs to the connection.
pub(in crate::store) struct Tx<'c> {
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
    pub(in crate::store) fn commit(mut self) -> Result<(), DbError> {
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
    use super::super::db_error::OptionalExtension;
    use super::super::parameters::params;
    use super::*;

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
