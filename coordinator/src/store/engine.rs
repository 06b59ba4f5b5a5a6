//! The two database engines behind one connection type: SQLite (embedded, the default) and
//! PostgreSQL (shared by several serves).
//!
//! Every statement of the store goes through [`Conn`], which mirrors the part of rusqlite's API
//! the store uses (`execute`, `query_row`, `prepare_cached(..).query_map`, `execute_batch`,
//! transactions). The store writes SQL in the dialect both engines share: `?N` parameters (turned
//! into `$N` for PostgreSQL by [`pg_sql`](parameters::pg_sql)), `ON CONFLICT … DO …`, `RETURNING`, `NULLS FIRST/LAST`
//! where a nullable column is sorted; where the dialects part, the caller asks [`Conn::engine`].
//!
//! Values cross the boundary as SQLite's five storage classes ([`ValueRef`]), whichever engine
//! holds them: PostgreSQL's `bigint`, `double precision`, `text` and `bytea` columns map onto them
//! one to one, and a PostgreSQL `boolean` or `numeric` (`sum` of integers) reads back as an
//! integer or a real, so a row is read the same way from either engine.
//!
//! # Layout
//!
//! `conn` is the connection, its statements and transactions; `parameters` how each engine takes
//! a statement's parameters; `row` a row read from either; `value` the storage classes both
//! hold; `db_error` why a statement failed; `pg` and `pg_tls` PostgreSQL's client thread and TLS; `pg_session`
//! how that thread rides through a lost server, `health` whether it is reachable now.

mod conn;
mod db_error;
mod health;
mod parameters;
mod pg;
mod pg_session;
mod pg_tls;
mod row;
mod value;

pub use self::conn::Engine;
pub(super) use self::conn::{Conn, Tx};
pub use self::db_error::DbError;
pub(super) use self::db_error::{DbResult, OptionalExtension};
pub use self::health::{DEFAULT_RETRY_S, Outage, StoreHealth};
pub(super) use self::parameters::{named_params, params};
pub use self::pg::is_postgres_url;
pub(super) use self::pg::{PgConn, PgTarget, explain_connect_error};
pub(in crate::store) use self::pg_session::is_connection_lost;
pub(super) use self::row::Row;
pub(super) use self::value::{FromValue, ToParam, Value, ValueRef};
