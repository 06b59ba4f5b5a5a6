//! The PostgreSQL connection: a `postgres` client on a thread of its own, so a store call blocks
//! the caller exactly as an SQLite call does (from a blocking thread or an async task alike), and
//! where the database is and how to log in, from a `postgres://` URL.
//!
//! Passwords come from the URL, `PGPASSWORD` or a passfile (`passfile=` in the URL, `PGPASSFILE`,
//! or `~/.pgpass`), as libpq reads them; [`PgTarget`]'s display never shows one.

use std::fmt;
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;

use postgres::Config;
use postgres::config::Host;

use super::db_error::describe;
use super::health::{StoreHealth, retry_window};
use super::pg_session::{Done, Op, Session};
use super::pg_tls::{MakeTls, tls_for};
use super::{DbError, Value};

/// How long connecting may take before it fails (a host that drops packets).
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Where a PostgreSQL database is and how to log in to it.
#[derive(Clone)]
pub(in crate::store) struct PgTarget {
    config: Config,
    /// TLS as the URL's `sslmode` says (`prefer` when it says nothing, as libpq).
    tls: MakeTls,
    sslmode: String,
    /// The URL without its password, for messages.
    shown: String,
    /// Where the password came from, for messages (`the URL`, `PGPASSWORD`, a passfile).
    password_from: Option<String>,
}

impl fmt::Debug for PgTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

impl fmt::Display for PgTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

/// Whether `text` names a PostgreSQL database rather than an SQLite path.
pub fn is_postgres_url(text: &str) -> bool {
    text.starts_with("postgres://") || text.starts_with("postgresql://")
}

impl PgTarget {
    /// Parses a `postgres://` URL, taking the password from the URL, `PGPASSWORD` or a passfile.
    ///
    /// # Errors
    /// What is wrong with the URL, naming the part (never quoting a password).
    pub(in crate::store) fn parse(url: &str) -> Result<PgTarget, String> {
        Self::parse_with(url, |name| std::env::var(name).ok())
    }

    fn parse_with(url: &str, env: impl Fn(&str) -> Option<String>) -> Result<PgTarget, String> {
        if !is_postgres_url(url) {
            return Err("a PostgreSQL URL starts with postgres:// or postgresql://".into());
        }
        // TLS (sslmode as libpq spells it, sslrootcert) and passfile are ours; the client's
        // parser knows only part of them.
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut kept = Vec::new();
        let (mut passfile, mut sslmode, mut root_cert) = (None, "prefer".to_owned(), None);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "passfile" => passfile = Some(value.to_owned()),
                "sslmode" => value.clone_into(&mut sslmode),
                "sslrootcert" => root_cert = Some(value.to_owned()),
                "sslcert" | "sslkey" | "sslpassword" => {
                    return Err(format!(
                        "{key}: client certificates are not supported; the server must let this \
                         user log in with a password"
                    ));
                }
                _ => kept.push(pair.to_owned()),
            }
        }
        let home = env("HOME");
        let (ssl_mode, tls) = tls_for(&sslmode, root_cert.as_deref(), home.as_deref())?;
        let cleaned = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        let mut config: Config = cleaned.parse().map_err(|e: postgres::Error| {
            format!("not a PostgreSQL URL libpq would accept: {e}")
        })?;
        if config.get_hosts().is_empty() {
            config.host("localhost");
        }
        if config.get_user().is_none() {
            let user = env("PGUSER")
                .or_else(|| env("USER"))
                .unwrap_or_else(|| "postgres".into());
            config.user(&user);
        }
        if config.get_dbname().is_none() {
            let db = config.get_user().unwrap_or_default().to_owned();
            config.dbname(&db);
        }
        config.ssl_mode(ssl_mode);
        config.connect_timeout(CONNECT_TIMEOUT);
        config.application_name("gpufleet");
        let mut password_from = config.get_password().map(|_| "the URL".to_owned());
        if password_from.is_none() {
            if let Some(p) = env("PGPASSWORD") {
                config.password(p);
                password_from = Some("PGPASSWORD".into());
            } else {
                let file = passfile
                    .or_else(|| env("PGPASSFILE"))
                    .or_else(|| env("HOME").map(|h| format!("{h}/.pgpass")));
                if let Some(file) = file
                    && let Some(p) = passfile_password(&file, &config)
                {
                    config.password(p);
                    password_from = Some(format!("the passfile {file}"));
                }
            }
        }
        let shown = shown(&config);
        Ok(PgTarget {
            config,
            tls,
            sslmode,
            shown,
            password_from,
        })
    }

    /// Where the password came from, if one was given.
    pub(in crate::store) fn password_from(&self) -> Option<&str> {
        self.password_from.as_deref()
    }

    /// The database name.
    pub(in crate::store) fn dbname(&self) -> &str {
        self.config.get_dbname().unwrap_or_default()
    }
}

/// `postgres://user@host:port/db` (no password), for messages.
fn shown(config: &Config) -> String {
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "postgres://{}@{}:{}/{}",
        config.get_user().unwrap_or_default(),
        host,
        port,
        config.get_dbname().unwrap_or_default()
    )
}

/// The password for `config`'s host, port, database and user in a libpq passfile
/// (`host:port:db:user:password`, `*` matching anything, `\:` and `\\` escaped), if any. libpq
/// ignores a passfile others can read; so does this.
fn passfile_password(file: &str, config: &Config) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(file).ok()?;
    if meta.permissions().mode() & 0o077 != 0 {
        tracing::warn!("ignoring the passfile {file}: others can read it (chmod 600 it)");
        return None;
    }
    let text = std::fs::read_to_string(file).ok()?;
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        _ => "localhost".into(),
    };
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(5432)
        .to_string();
    let want = [
        host.as_str(),
        port.as_str(),
        config.get_dbname().unwrap_or_default(),
        config.get_user().unwrap_or_default(),
    ];
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let fields = split_passfile_line(line);
        if fields.len() == 5
            && fields[..4]
                .iter()
                .zip(want)
                .all(|(f, w)| f == "*" || f == w)
        {
            return Some(fields[4].clone());
        }
    }
    None
}

fn split_passfile_line(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => field.extend(chars.next()),
            ':' if fields.len() < 4 => fields.push(std::mem::take(&mut field)),
            c => field.push(c),
        }
    }
    fields.push(field);
    fields
}

/// Why connecting to `target` failed, in words that say which of the usual causes it was: the
/// server cannot be reached, it refused the password (or wanted one), or the database is missing.
/// Never shows the password.
pub(in crate::store) fn explain_connect_error(e: &postgres::Error, target: &PgTarget) -> String {
    use postgres::error::SqlState;
    let user = target.config.get_user().unwrap_or_default();
    if let Some(db) = e.as_db_error() {
        return match *db.code() {
            SqlState::INVALID_PASSWORD => format!(
                "the server refused the password for user {user:?} (the password came from {})",
                target.password_from().unwrap_or("nowhere")
            ),
            SqlState::INVALID_AUTHORIZATION_SPECIFICATION => {
                format!(
                    "the server refused the login of user {user:?}: {}",
                    db.message()
                )
            }
            SqlState::INVALID_CATALOG_NAME => format!(
                "the server has no database {:?} (create it with `createdb`, or name another in \
                 the URL)",
                target.dbname()
            ),
            _ => describe(e),
        };
    }
    let text = describe(e);
    if text.contains("invalid peer certificate") {
        return format!(
            "the server's TLS certificate was refused (sslmode={}): {text}",
            target.sslmode
        );
    }
    if text.contains("server does not support TLS") {
        return format!(
            "the server does not offer TLS, and sslmode={} asks for it",
            target.sslmode
        );
    }
    if text.contains("password missing") {
        return format!(
            "the server wants a password for user {user:?} and none was given (set PGPASSWORD or \
             write it in a passfile, ~/.pgpass or passfile= in the URL)"
        );
    }
    format!("cannot reach the server: {text}")
}

type Job = Box<dyn FnOnce(&mut Session) + Send>;

/// A PostgreSQL client on its own thread.
pub(in crate::store) struct PgConn {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    target: PgTarget,
    health: Arc<StoreHealth>,
}

impl fmt::Debug for PgConn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgConn")
            .field("target", &self.target)
            .finish()
    }
}

impl PgConn {
    /// Connects to `target`. A connection lost later is restored as `pg_session` says, within
    /// [`retry_window`].
    ///
    /// # Errors
    /// The client's error (refused, timed out, wrong password, no such database).
    pub(in crate::store) fn connect(target: &PgTarget) -> Result<PgConn, postgres::Error> {
        let (config, tls) = (target.config.clone(), target.tls.clone());
        let health = Arc::new(StoreHealth::default());
        let (window, shown, session_health) =
            (retry_window(), target.shown.clone(), health.clone());
        let (ready_tx, ready_rx) = mpsc::channel();
        let (jobs_tx, jobs_rx) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("gpufleet-pg".into())
            .spawn(move || {
                let client = match config.connect(tls.clone()) {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                let mut session = Session::new(client, config, tls, session_health, window, shown);
                while let Ok(job) = jobs_rx.recv() {
                    job(&mut session);
                }
            })
            .expect("spawning the PostgreSQL connection thread");
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(PgConn {
                jobs: Some(jobs_tx),
                thread: Some(thread),
                target: target.clone(),
                health,
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => panic!("the PostgreSQL connection thread ended without a word"),
        }
    }

    /// Where this connection goes.
    pub(in crate::store) fn target(&self) -> &PgTarget {
        &self.target
    }

    /// Whether the server can be reached now.
    pub(in crate::store) fn health(&self) -> &Arc<StoreHealth> {
        &self.health
    }

    fn call(&self, op: Op) -> Result<Done, DbError> {
        let (reply_tx, reply_rx) = mpsc::sync_channel(1);
        let job: Job = Box::new(move |s| {
            let _ = reply_tx.send(s.run(op));
        });
        self.jobs
            .as_ref()
            .ok_or(DbError::Closed)?
            .send(job)
            .map_err(|_| DbError::Closed)?;
        reply_rx.recv().map_err(|_| DbError::Closed)?
    }

    /// Runs statements without parameters.
    pub(in crate::store) fn batch(&self, sql: &str) -> Result<(), DbError> {
        self.call(Op::Batch(sql.to_owned())).map(|_| ())
    }

    /// Runs one statement; the rows it changed.
    pub(super) fn execute(&self, sql: String, values: Vec<Value>) -> Result<usize, DbError> {
        match self.call(Op::Execute(sql, values))? {
            Done::Changed(n) => Ok(n),
            _ => unreachable!("an execute answers with the rows it changed"),
        }
    }

    /// Runs one statement; its rows.
    pub(super) fn query(
        &self,
        sql: String,
        values: Vec<Value>,
    ) -> Result<Vec<postgres::Row>, DbError> {
        match self.call(Op::Query(sql, values))? {
            Done::Rows(rows) => Ok(rows),
            _ => unreachable!("a query answers with its rows"),
        }
    }
}

impl Drop for PgConn {
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn urls_are_shown_without_their_password() {
        let t =
            PgTarget::parse_with("postgres://fleet:s3cret@db.lab:5433/gpufleet", env(&[])).unwrap();
        assert_eq!(t.to_string(), "postgres://fleet@db.lab:5433/gpufleet");
        assert!(!format!("{t:?}").contains("s3cret"));
        assert_eq!(t.password_from(), Some("the URL"));
        let t = PgTarget::parse_with(
            "postgresql://fleet@db.lab/gpufleet?sslmode=disable",
            env(&[("PGPASSWORD", "pw")]),
        )
        .unwrap();
        assert_eq!(t.password_from(), Some("PGPASSWORD"));
        assert_eq!(t.to_string(), "postgres://fleet@db.lab:5432/gpufleet");
    }

    #[test]
    fn bad_urls_name_the_part() {
        let e = PgTarget::parse_with("postgres://h/db?sslmode=sometimes", env(&[])).unwrap_err();
        assert!(e.contains("sslmode \"sometimes\""), "{e}");
        let e = PgTarget::parse_with("postgres://h/db?sslmode=verify-full", env(&[])).unwrap_err();
        assert!(e.contains("give sslrootcert=PATH"), "{e}");
        let e = PgTarget::parse_with(
            "postgres://h/db?sslmode=verify-ca&sslrootcert=/nonexistent/ca.crt",
            env(&[]),
        )
        .unwrap_err();
        assert!(e.starts_with("sslrootcert /nonexistent/ca.crt: "), "{e}");
        let e = PgTarget::parse_with("postgres://h/db?sslcert=me.crt", env(&[])).unwrap_err();
        assert!(e.contains("client certificates"), "{e}");
        let e = PgTarget::parse_with("postgres://h:notaport/db", env(&[])).unwrap_err();
        assert!(e.contains("libpq"), "{e}");
        assert!(PgTarget::parse_with("mysql://h/db", env(&[])).is_err());
    }

    #[test]
    fn passfiles_match_host_port_db_and_user() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pgpass");
        std::fs::write(
            &file,
            "# comment\nother:5432:*:*:no\ndb.lab:5433:gpufleet:fleet:pa\\:ss\n*:*:*:*:fallback\n",
        )
        .unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let f = file.display().to_string();
        let t = PgTarget::parse_with(
            &format!("postgres://fleet@db.lab:5433/gpufleet?passfile={f}"),
            env(&[]),
        )
        .unwrap();
        assert_eq!(t.config.get_password(), Some(&b"pa:ss"[..]));
        assert_eq!(
            t.password_from(),
            Some(format!("the passfile {f}").as_str())
        );
        let t =
            PgTarget::parse_with("postgres://x@elsewhere/db", env(&[("PGPASSFILE", &f)])).unwrap();
        assert_eq!(t.config.get_password(), Some(&b"fallback"[..]));
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let t =
            PgTarget::parse_with("postgres://x@elsewhere/db", env(&[("PGPASSFILE", &f)])).unwrap();
        assert_eq!(
            t.password_from(),
            None,
            "a passfile others can read is ignored"
        );
    }
}
