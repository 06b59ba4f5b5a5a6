//! The PostgreSQL connection thread's session: runs each statement, and rides through a server
//! that restarts, stops for a while or drops the connection.
//!
//! # Riding through an outage
//!
//! A statement that finds the connection lost (the socket closed, or the server's
//! `admin_shutdown`, `crash_shutdown`, `cannot_connect_now` or a connection exception) does not
//! fail: the session reconnects with backoff (0.1 s doubling to 2 s) until the server answers or
//! the retry window ([`retry_window`](super::health), 300 s by default) has passed since the
//! first failure, then runs the statement again. The outage is logged once when it begins and
//! once when it ends, and kept in [`StoreHealth`] for `/healthz`.
//!
//! Inside a transaction the server has rolled back what the lost connection did, so the session
//! keeps a log of the open transaction's statements, each with a digest of what it returned
//! (rows changed, or the rows read), and replays them on the new connection before going on. A
//! replayed statement that returns something else than it did the first time (another serve took
//! the job it had picked) ends the replay: the transaction is lost and the caller is told, as
//! without the replay. A `COMMIT` whose answer was lost is not replayed blindly: the transaction
//! id read before it says, through `txid_status`, whether the server committed it.
//!
//! A statement outside a transaction that was lost *after* the server ran it runs twice; the
//! store's writes outside transactions are single idempotent updates (a heartbeat, `last_seen`),
//! so that is harmless. Session settings (`SET ...` outside a transaction: a read-only session)
//! are applied again on every new connection. A transaction whose log grows past
//! [`REPLAY_LOG_BYTES`] (a bulk copy) is not replayable: losing its connection fails it.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use postgres::{Client, Config, Statement};

use super::DbError;
use super::health::StoreHealth;
use super::pg_tls::MakeTls;
use super::value::{Value, ValueRef};

/// Prepared statements kept per connection before the cache starts again.
const STATEMENT_CACHE: usize = 512;

/// The largest log of one transaction's statements kept for a replay.
pub(super) const REPLAY_LOG_BYTES: usize = 64 << 20;

/// One statement for the session.
pub(super) enum Op {
    /// Statements without parameters (`BEGIN`, `COMMIT`, schema changes, settings).
    Batch(String),
    /// A statement and its parameters; the rows it changed.
    Execute(String, Vec<Value>),
    /// A statement and its parameters; its rows.
    Query(String, Vec<Value>),
}

/// What a statement returned.
pub(super) enum Done {
    Batch,
    Changed(usize),
    Rows(Vec<postgres::Row>),
}

/// A statement of the open transaction, kept for a replay, with a digest of what it returned.
struct Logged {
    op: Op,
    digest: u64,
}

/// What a batch does to the transaction state.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Control {
    Begin,
    Commit,
    Rollback,
    /// `SET ...` outside a transaction: applied again on every new connection.
    Setting,
    Other,
}

/// The connection thread's state.
pub(super) struct Session {
    client: Option<Client>,
    config: Config,
    tls: MakeTls,
    statements: HashMap<String, Statement>,
    in_transaction: bool,
    /// Read just before `COMMIT` was sent: the transaction's id, `None` inside when it wrote
    /// nothing (so it had nothing to commit).
    commit_txid: Option<Option<i64>>,
    /// The open transaction's statements, while they fit in [`REPLAY_LOG_BYTES`].
    log: Option<Vec<Logged>>,
    log_bytes: usize,
    /// The open transaction could not be restored on a new connection: every statement fails
    /// until the caller ends it.
    broken: bool,
    settings: Vec<String>,
    health: Arc<StoreHealth>,
    window: Duration,
    target: String,
}

impl Session {
    pub(super) fn new(
        client: Client,
        config: Config,
        tls: MakeTls,
        health: Arc<StoreHealth>,
        window: Duration,
        target: String,
    ) -> Session {
        Session {
            client: Some(client),
            config,
            tls,
            statements: HashMap::new(),
            in_transaction: false,
            commit_txid: None,
            log: None,
            log_bytes: 0,
            broken: false,
            settings: Vec::new(),
            health,
            window,
            target,
        }
    }

    /// Runs `op`, through a lost connection as the module says.
    pub(super) fn run(&mut self, op: Op) -> Result<Done, DbError> {
        let control = control_of(&op, self.in_transaction);
        if self.broken {
            if matches!(control, Control::Rollback) {
                self.end_transaction();
                return Ok(Done::Batch);
            }
            return Err(lost_transaction());
        }
        let mut first_failure: Option<Instant> = None;
        loop {
            let error = match self.attempt(&op, control) {
                Ok(done) => {
                    self.reached();
                    self.after(op, control, &done);
                    return Ok(done);
                }
                Err(e) if is_connection_lost(&e) => e,
                Err(e) => return Err(e),
            };
            self.client = None;
            if control == Control::Rollback {
                // The server rolled the transaction back when the connection went.
                self.end_transaction();
                return Ok(Done::Batch);
            }
            let started = *first_failure.get_or_insert_with(Instant::now);
            self.lost(&error);
            if self.reconnect(started).is_err() {
                self.give_up();
                return Err(error);
            }
            if self.in_transaction {
                if control == Control::Commit {
                    match self.committed_before(started) {
                        Ok(Some(done)) => return Ok(done),
                        Ok(None) => {}
                        Err(e) if is_connection_lost(&e) => {
                            self.client = None;
                            continue;
                        }
                        Err(e) => {
                            self.broken = true;
                            return Err(e);
                        }
                    }
                }
                if let Err(e) = self.replay() {
                    if is_connection_lost(&e) {
                        self.client = None;
                        continue;
                    }
                    self.broken = true;
                    let _ = self.client.as_mut().map(|c| c.batch_execute("ROLLBACK"));
                    return Err(e);
                }
            }
        }
    }

    /// One try of `op` on the current connection.
    fn attempt(&mut self, op: &Op, control: Control) -> Result<Done, DbError> {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            return Err(DbError::Closed);
        }
        match op {
            Op::Batch(sql) => {
                if control == Control::Commit {
                    // Which transaction to ask about when the answer to COMMIT is lost.
                    let txid: Option<i64> = self
                        .client()
                        .query_one("SELECT txid_current_if_assigned()", &[])?
                        .get(0);
                    self.commit_txid = Some(txid);
                }
                self.client().batch_execute(sql)?;
                let word = sql.trim_start().to_ascii_uppercase();
                let transaction_control = ["BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE"];
                if !transaction_control.iter().any(|c| word.starts_with(c)) {
                    // Schema changes can invalidate prepared statements.
                    self.statements.clear();
                }
                Ok(Done::Batch)
            }
            Op::Execute(sql, values) => {
                let stmt = self.statement(sql)?;
                let n = self.client().execute(&stmt, &as_params(values))?;
                Ok(Done::Changed(n as usize))
            }
            Op::Query(sql, values) => {
                let stmt = self.statement(sql)?;
                Ok(Done::Rows(self.client().query(&stmt, &as_params(values))?))
            }
        }
    }

    fn client(&mut self) -> &mut Client {
        self.client
            .as_mut()
            .expect("attempt checks the client first")
    }

    /// The prepared statement for `sql`, prepared on first use.
    fn statement(&mut self, sql: &str) -> Result<Statement, postgres::Error> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let s = self.client().prepare(sql)?;
        if self.statements.len() >= STATEMENT_CACHE {
            self.statements.clear();
        }
        self.statements.insert(sql.to_owned(), s.clone());
        Ok(s)
    }

    /// Keeps track of the transaction after `op` succeeded.
    fn after(&mut self, op: Op, control: Control, done: &Done) {
        match control {
            Control::Begin => {
                self.in_transaction = true;
                self.log = Some(Vec::new());
                self.log_bytes = 0;
                self.commit_txid = None;
            }
            Control::Commit | Control::Rollback => self.end_transaction(),
            Control::Setting => {
                if let Op::Batch(sql) = op {
                    self.settings.push(sql);
                }
            }
            Control::Other if self.in_transaction => {
                let bytes = op_bytes(&op);
                if let Some(log) = &mut self.log {
                    self.log_bytes += bytes;
                    if self.log_bytes > REPLAY_LOG_BYTES {
                        self.log = None;
                    } else {
                        log.push(Logged {
                            op,
                            digest: digest(done),
                        });
                    }
                }
            }
            Control::Other => {}
        }
    }

    fn end_transaction(&mut self) {
        self.in_transaction = false;
        self.broken = false;
        self.log = None;
        self.log_bytes = 0;
        self.commit_txid = None;
    }

    /// A statement reached the server: an outage under way ends.
    fn reached(&self) {
        if let Some(o) = self.health.up() {
            tracing::warn!(
                "PostgreSQL at {} is back after {:.0} s; store calls go on",
                self.target,
                crate::time::now() - o.since
            );
        }
    }

    /// Records a lost connection, logging the outage once.
    fn lost(&self, error: &DbError) {
        if self.health.down(&error.to_string()) {
            tracing::error!(
                "lost the connection to PostgreSQL at {} ({error}); store calls wait for it to come back, up to {} s",
                self.target,
                self.window.as_secs()
            );
        }
    }

    /// The retry window ran out: the statement fails, and so does the transaction it was in.
    fn give_up(&mut self) {
        tracing::error!(
            "PostgreSQL at {} did not come back within {} s: the store call fails",
            self.target,
            self.window.as_secs()
        );
        if self.in_transaction {
            self.broken = true;
        }
    }

    /// Connects again, with backoff, until the window that began at `started` ends; applies the
    /// session's settings. Every failure is part of the same outage.
    fn reconnect(&mut self, started: Instant) -> Result<(), DbError> {
        let mut pause = Duration::from_millis(100);
        loop {
            let tried = self
                .config
                .connect(self.tls.clone())
                .map_err(DbError::from)
                .and_then(|mut c| {
                    for s in &self.settings {
                        c.batch_execute(s)?;
                    }
                    Ok(c)
                });
            match tried {
                Ok(client) => {
                    self.client = Some(client);
                    self.statements.clear();
                    return Ok(());
                }
                Err(e) => {
                    self.health.down(&e.to_string());
                    let left = self.window.saturating_sub(started.elapsed());
                    if left.is_zero() {
                        return Err(e);
                    }
                    std::thread::sleep(pause.min(left));
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
            }
        }
    }

    /// After a lost answer to `COMMIT`: whether the server committed the transaction (then it is
    /// over: `Some`), asking until it knows or the window ends; `None` when it did not (replay).
    fn committed_before(&mut self, started: Instant) -> Result<Option<Done>, DbError> {
        let txid = match self.commit_txid {
            // COMMIT was never sent.
            None => return Ok(None),
            // Nothing written: nothing to commit.
            Some(None) => {
                self.end_transaction();
                return Ok(Some(Done::Batch));
            }
            Some(Some(txid)) => txid,
        };
        loop {
            let status: Option<String> = self
                .client()
                .query_one("SELECT txid_status($1)", &[&txid])?
                .get(0);
            match status.as_deref() {
                Some("committed") => {
                    self.end_transaction();
                    return Ok(Some(Done::Batch));
                }
                Some("in progress") if started.elapsed() < self.window => {
                    std::thread::sleep(Duration::from_millis(200));
                }
                Some("in progress") => return Err(lost_transaction()),
                _ => return Ok(None),
            }
        }
    }

    /// Runs the open transaction's statements again on the new connection, checking each returns
    /// what it did the first time.
    fn replay(&mut self) -> Result<(), DbError> {
        let Some(log) = self.log.take() else {
            return Err(lost_transaction());
        };
        let result = (|| {
            self.client().batch_execute("BEGIN")?;
            for (i, entry) in log.iter().enumerate() {
                let done = self.attempt(&entry.op, Control::Other)?;
                if digest(&done) != entry.digest {
                    return Err(DbError::Lost(format!(
                        "the connection to PostgreSQL was lost in a transaction, and statement {} of \
                         it read or changed other rows when replayed on a new connection (another \
                         process changed them meanwhile); nothing of the transaction was kept",
                        i + 1
                    )));
                }
            }
            Ok(())
        })();
        self.log = Some(log);
        if result.is_ok() {
            tracing::info!("replayed an open transaction on the new PostgreSQL connection");
        }
        result
    }
}

/// The transaction of a lost connection that could not be restored.
fn lost_transaction() -> DbError {
    DbError::Lost(
        "the connection to PostgreSQL was lost in a transaction that could not be restored; \
         nothing of it was kept"
            .into(),
    )
}

fn control_of(op: &Op, in_transaction: bool) -> Control {
    let Op::Batch(sql) = op else {
        return Control::Other;
    };
    let word = sql.trim().to_ascii_uppercase();
    if word.starts_with("BEGIN") {
        Control::Begin
    } else if word == "COMMIT" {
        Control::Commit
    } else if word == "ROLLBACK" {
        Control::Rollback
    } else if word.starts_with("SET ") && !in_transaction {
        Control::Setting
    } else {
        Control::Other
    }
}

/// Whether `e` means the connection is gone (rather than the statement being wrong): the client
/// saw the socket close, or the server is shutting down, starting up or lost the connection.
pub(in crate::store) fn is_connection_lost(e: &DbError) -> bool {
    match e {
        DbError::Closed => true,
        DbError::Postgres(e) => {
            if e.is_closed() {
                return true;
            }
            match e.code() {
                Some(code) => {
                    let code = code.code();
                    code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03")
                }
                // No SQLSTATE: the client's own error (I/O, a timeout), not the statement's.
                None => e.as_db_error().is_none() && !is_client_misuse(e),
            }
        }
        _ => false,
    }
}

/// A client error that is about the call, not the connection (a parameter of the wrong type, a
/// row count asked of a query that returned none).
fn is_client_misuse(e: &postgres::Error) -> bool {
    let text = e.to_string();
    text.contains("error serializing")
        || text.contains("error deserializing")
        || text.contains("query returned an unexpected number of rows")
        || text.contains("invalid column")
}

fn as_params(values: &[Value]) -> Vec<&(dyn postgres::types::ToSql + Sync)> {
    values
        .iter()
        .map(|v| v as &(dyn postgres::types::ToSql + Sync))
        .collect()
}

fn op_bytes(op: &Op) -> usize {
    let values = |v: &[Value]| -> usize {
        v.iter()
            .map(|v| match v {
                Value::Text(t) => t.len() + 8,
                Value::Blob(b) => b.len() + 8,
                _ => 16,
            })
            .sum()
    };
    match op {
        Op::Batch(sql) => sql.len(),
        Op::Execute(sql, v) | Op::Query(sql, v) => sql.len() + values(v),
    }
}

/// A digest of what a statement returned, to tell a replay that went otherwise.
fn digest(done: &Done) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    match done {
        Done::Batch => 0u8.hash(&mut h),
        Done::Changed(n) => (1u8, n).hash(&mut h),
        Done::Rows(rows) => {
            2u8.hash(&mut h);
            rows.len().hash(&mut h);
            for row in rows {
                for i in 0..row.len() {
                    match row.try_get::<_, ValueRef<'_>>(i) {
                        Ok(ValueRef::Null) => 0u8.hash(&mut h),
                        Ok(ValueRef::Int(v)) => (1u8, v).hash(&mut h),
                        Ok(ValueRef::Real(v)) => (2u8, v.to_bits()).hash(&mut h),
                        Ok(ValueRef::Text(v)) => (3u8, v).hash(&mut h),
                        Ok(ValueRef::Blob(v)) => (4u8, v).hash(&mut h),
                        // A type the store never reads (void): its presence only.
                        Err(_) => 5u8.hash(&mut h),
                    }
                }
            }
        }
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::super::{PgConn, PgTarget, Value};
    use super::*;
    use crate::store::test_support::pg_test_db;

    fn count(conn: &PgConn) -> i64 {
        let rows = conn.query("SELECT count(*) FROM t".into(), vec![]).unwrap();
        rows[0].get(0)
    }

    /// Ends every other connection to the test's database, as a server restart does.
    fn kill_others(killer: &PgConn) {
        killer
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                  WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    .into(),
                vec![],
            )
            .unwrap();
    }

    #[test]
    fn a_lost_connection_is_restored_and_its_transaction_replayed_or_refused() {
        let Some(db) = pg_test_db() else { return };
        let target = PgTarget::parse(db.url()).unwrap();
        let (conn, killer) = (
            PgConn::connect(&target).unwrap(),
            PgConn::connect(&target).unwrap(),
        );
        conn.batch("CREATE TABLE t (x bigint)").unwrap();

        // Killed mid-transaction: replayed on a new connection, committed once.
        conn.batch("BEGIN").unwrap();
        conn.execute("INSERT INTO t VALUES ($1)".into(), vec![Value::Int(1)])
            .unwrap();
        assert_eq!(count(&conn), 1);
        kill_others(&killer);
        conn.execute("INSERT INTO t VALUES ($1)".into(), vec![Value::Int(2)])
            .unwrap();
        conn.batch("COMMIT").unwrap();
        assert_eq!(count(&killer), 2, "both rows, once");
        assert!(conn.health().outage().is_none());
        assert!(conn.health().last_outage().is_some(), "the loss was seen");

        // Killed between statements outside a transaction: the next one reconnects.
        kill_others(&killer);
        assert_eq!(count(&conn), 2);

        // A replay that reads otherwise (another process wrote meanwhile) is refused: the
        // transaction is lost, the caller told, and a rollback ends it.
        conn.batch("BEGIN").unwrap();
        assert_eq!(count(&conn), 2);
        killer
            .execute("INSERT INTO t VALUES ($1)".into(), vec![Value::Int(3)])
            .unwrap();
        kill_others(&killer);
        let err = conn
            .execute("INSERT INTO t VALUES ($1)".into(), vec![Value::Int(4)])
            .unwrap_err();
        assert!(matches!(err, DbError::Lost(_)), "{err}");
        assert!(err.to_string().contains("statement 1"), "{err}");
        assert!(
            conn.batch("COMMIT").is_err(),
            "a lost transaction cannot commit"
        );
        conn.batch("ROLLBACK").unwrap();
        assert_eq!(count(&conn), 3, "the other process's row only");
    }
}
