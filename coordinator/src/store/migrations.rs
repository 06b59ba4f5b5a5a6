//! Numbered schema migrations, embedded in the binary.
//!
//! Migration `n` turns a version `n - 1` database into version `n`; the version lives in
//! `PRAGMA user_version` (header offset 60), so it can be read without parsing any table. All pending
//! migrations run in one `IMMEDIATE` transaction together with the `user_version` bump: a crash or a
//! failing statement leaves the database at its old version with none of the new tables, and two
//! coordinators starting at once serialise on the write lock (the second finds nothing to do).
//!
//! Rules for adding one: append a file `migrations/NNNN_what.sql` and an entry to [`MIGRATIONS`];
//! never edit a migration that has shipped. A migration that must rewrite stored values with Rust
//! code (migration 7 resolves stored run settings with the one function that knows the defaults)
//! adds a `rewrite` step, run after its SQL in the same transaction. `foreign_keys` cannot be switched inside a transaction,
//! so a migration that rebuilds a table must keep every row its children reference (copy into a new
//! table with the same ids, drop, rename) and the runner's `foreign_key_check` then proves it did.

mod settings;

use std::path::Path;

use rusqlite::{Connection, Transaction, TransactionBehavior};

use super::engine::{Conn, DbError};
use super::error::StoreError;

/// One schema step.
#[derive(Debug, Clone, Copy)]
pub(super) struct Migration {
    /// The `user_version` the database has after this step.
    pub version: i64,
    /// File name without extension, for error messages.
    pub name: &'static str,
    /// The statements, run as one batch.
    pub sql: &'static str,
    /// Stored values rewritten in Rust after the statements, where SQL cannot say it.
    pub rewrite: Option<fn(&Transaction<'_>) -> rusqlite::Result<()>>,
}

/// Every migration, in order; `MIGRATIONS[i].version == i + 1`.
pub(super) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "0001_init",
        sql: include_str!("migrations/0001_init.sql"),
        rewrite: None,
    },
    Migration {
        version: 2,
        name: "0002_energy",
        sql: include_str!("migrations/0002_energy.sql"),
        rewrite: None,
    },
    Migration {
        version: 3,
        name: "0003_service",
        sql: include_str!("migrations/0003_service.sql"),
        rewrite: None,
    },
    Migration {
        version: 4,
        name: "0004_fleet",
        sql: include_str!("migrations/0004_fleet.sql"),
        rewrite: None,
    },
    Migration {
        version: 5,
        name: "0005_dashboard",
        sql: include_str!("migrations/0005_dashboard.sql"),
        rewrite: None,
    },
    Migration {
        version: 6,
        name: "0006_noise",
        sql: include_str!("migrations/0006_noise.sql"),
        rewrite: None,
    },
    Migration {
        version: 7,
        name: "0007_settings",
        sql: include_str!("migrations/0007_settings.sql"),
        rewrite: Some(settings::rewrite),
    },
    Migration {
        version: 8,
        name: "0008_scale",
        sql: include_str!("migrations/0008_scale.sql"),
        rewrite: None,
    },
    Migration {
        version: 9,
        name: "0009_robust_noise",
        sql: include_str!("migrations/0009_robust_noise.sql"),
        rewrite: None,
    },
    Migration {
        version: 10,
        name: "0010_live",
        sql: include_str!("migrations/0010_live.sql"),
        rewrite: None,
    },
    Migration {
        version: 11,
        name: "0011_leases",
        sql: include_str!("migrations/0011_leases.sql"),
        rewrite: None,
    },
    Migration {
        version: 12,
        name: "0012_count_shards",
        sql: include_str!("migrations/0012_count_shards.sql"),
        rewrite: None,
    },
    Migration {
        version: 13,
        name: "0013_checks_order",
        sql: include_str!("migrations/0013_checks_order.sql"),
        rewrite: None,
    },
    Migration {
        version: 14,
        name: "0014_check_indexes",
        sql: include_str!("migrations/0014_check_indexes.sql"),
        rewrite: None,
    },
];

/// The schema version this binary writes; a database with a larger `user_version` is refused.
pub const LATEST_VERSION: i64 = MIGRATIONS.len() as i64;

/// `PRAGMA application_id` that migration 0001 stamps on every gpufleet database ("GPFL").
pub(super) const APPLICATION_ID: i64 = 0x4750_464C;

/// PostgreSQL's schema: the whole of version [`POSTGRES_BASELINE`] in one file, then the same
/// numbered steps as SQLite's from there, in PostgreSQL's dialect (`(version, name, sql)`).
const POSTGRES_BASELINE: (i64, &str, &str) = (
    10,
    "postgres/0010_baseline",
    include_str!("migrations/postgres/0010_baseline.sql"),
);

/// PostgreSQL's steps after the baseline; `POSTGRES_MIGRATIONS[i].0 == POSTGRES_BASELINE.0 + i + 1`.
const POSTGRES_MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        11,
        "postgres/0011_leases",
        include_str!("migrations/postgres/0011_leases.sql"),
    ),
    (
        12,
        "postgres/0012_count_shards",
        include_str!("migrations/postgres/0012_count_shards.sql"),
    ),
    (
        13,
        "postgres/0013_checks_order",
        include_str!("migrations/postgres/0013_checks_order.sql"),
    ),
    (
        14,
        "postgres/0014_check_indexes",
        include_str!("migrations/postgres/0014_check_indexes.sql"),
    ),
];

/// The key of the advisory lock that serialises migrations ("GPFL"): two serves starting at once
/// on an empty database create the schema once.
const POSTGRES_MIGRATION_LOCK: i64 = APPLICATION_ID;

/// How [`migrate_postgres`] treats the schema it finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PgOpen {
    /// Create it in an empty database, bring an older one up to date.
    Migrate,
    /// Leave it as it is: refuse a missing or older schema, and make the session read-only.
    ReadOnly,
}

/// Brings a PostgreSQL database to [`LATEST_VERSION`]: creates the schema in an empty database,
/// applies the pending steps to an older one; returns how many steps ran. All of it happens in one
/// transaction under an advisory lock, so a failure leaves the database as it was and a second
/// serve starting at once waits, then finds nothing to do.
///
/// # Errors
/// [`StoreError::ForeignDatabase`] for a database whose schema holds tables but no
/// `gpufleet_schema` (another application's), or a `gpufleet_schema` of another application;
/// [`StoreError::NewerSchema`]; [`StoreError::Open`] if a statement fails.
pub(super) fn migrate_postgres(
    conn: &Conn,
    path: &Path,
    mode: PgOpen,
) -> Result<usize, StoreError> {
    let open_err = |context: &'static str| {
        move |source: DbError| StoreError::Open {
            path: path.to_path_buf(),
            context,
            source,
        }
    };
    let tx = conn
        .begin()
        .map_err(open_err("starting the migration transaction"))?;
    tx.query_row(
        "SELECT pg_advisory_xact_lock(?1)",
        [POSTGRES_MIGRATION_LOCK],
        |_| Ok(()),
    )
    .map_err(open_err("waiting for the migration lock"))?;
    let has_schema: bool = tx
        .query_row(
            "SELECT to_regclass('gpufleet_schema') IS NOT NULL",
            [],
            |r| r.get(0),
        )
        .map_err(open_err("reading the schema version"))?;
    let found = if has_schema {
        let (application, version): (String, i64) = tx
            .query_row(
                "SELECT application, version FROM gpufleet_schema",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(open_err("reading the schema version"))?;
        if application != "gpufleet" {
            return Err(StoreError::ForeignDatabase {
                path: path.to_path_buf(),
                reason: format!(
                    "its gpufleet_schema table belongs to {:?}",
                    application.chars().take(40).collect::<String>()
                ),
            });
        }
        version
    } else {
        let tables: i64 = tx
            .query_row(
                "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()",
                [],
                |r| r.get(0),
            )
            .map_err(open_err("listing the tables"))?;
        if tables > 0 {
            return Err(StoreError::ForeignDatabase {
                path: path.to_path_buf(),
                reason: format!(
                    "its schema already holds {tables} table{} but no gpufleet schema version",
                    if tables == 1 { "" } else { "s" }
                ),
            });
        }
        0
    };
    if found > LATEST_VERSION {
        return Err(StoreError::NewerSchema {
            path: path.to_path_buf(),
            found,
            supported: LATEST_VERSION,
        });
    }
    if mode == PgOpen::ReadOnly {
        if found == 0 {
            return Err(StoreError::NotCreated {
                path: path.to_path_buf(),
                what: "an empty PostgreSQL database (no gpufleet schema)",
            });
        }
        if found < LATEST_VERSION {
            return Err(StoreError::OlderSchema {
                path: path.to_path_buf(),
                found,
                latest: LATEST_VERSION,
            });
        }
        tx.commit().map_err(open_err("ending the schema check"))?;
        conn.execute_batch("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
            .map_err(open_err("making the session read-only"))?;
        return Ok(0);
    }
    let mut ran = 0;
    if found == 0 {
        let (version, name, sql) = POSTGRES_BASELINE;
        tx.execute_batch(sql).map_err(open_err(name))?;
        tx.execute_batch(
            "CREATE TABLE gpufleet_schema (
                 application text NOT NULL,
                 version     bigint NOT NULL,
                 one_row     boolean PRIMARY KEY DEFAULT true CHECK (one_row)
             )",
        )
        .map_err(open_err("creating gpufleet_schema"))?;
        tx.execute(
            "INSERT INTO gpufleet_schema (application, version) VALUES ('gpufleet', ?1)",
            [version],
        )
        .map_err(open_err("writing the schema version"))?;
        ran += 1;
    }
    let from = found.max(POSTGRES_BASELINE.0);
    for &(version, name, sql) in POSTGRES_MIGRATIONS.iter().filter(|m| m.0 > from) {
        tx.execute_batch(sql).map_err(open_err(name))?;
        tx.execute("UPDATE gpufleet_schema SET version = ?1", [version])
            .map_err(open_err("writing the schema version"))?;
        ran += 1;
    }
    tx.commit().map_err(open_err("committing the migrations"))?;
    Ok(ran)
}

/// Brings `conn` to [`LATEST_VERSION`]; returns how many migrations ran.
///
/// # Errors
/// [`StoreError::NewerSchema`] if the database is already past this binary (checked again under
/// the write lock, in case another process upgraded it since `open` looked);
/// [`StoreError::Open`] if a statement fails, in which case nothing of the pending migrations stays.
pub(super) fn migrate(conn: &mut Connection, path: &Path) -> Result<usize, StoreError> {
    migrate_to(conn, path, LATEST_VERSION)
}

/// [`migrate`], stopping at version `target` (tests build older databases with it).
fn migrate_to(conn: &mut Connection, path: &Path, target: i64) -> Result<usize, StoreError> {
    let open_err = |context: &'static str| {
        move |source: rusqlite::Error| StoreError::Open {
            path: path.to_path_buf(),
            context,
            source: source.into(),
        }
    };
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(open_err("starting the migration transaction"))?;
    let found: i64 = tx
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(open_err("reading the schema version"))?;
    if found > LATEST_VERSION {
        return Err(StoreError::NewerSchema {
            path: path.to_path_buf(),
            found,
            supported: LATEST_VERSION,
        });
    }
    let pending: Vec<&Migration> = MIGRATIONS
        .iter()
        .filter(|m| m.version > found && m.version <= target)
        .collect();
    for m in &pending {
        let step_err = |source: rusqlite::Error| StoreError::Open {
            path: path.to_path_buf(),
            context: m.name,
            source: source.into(),
        };
        tx.execute_batch(m.sql).map_err(step_err)?;
        if let Some(rewrite) = m.rewrite {
            rewrite(&tx).map_err(step_err)?;
        }
    }
    if !pending.is_empty() {
        let violations: i64 = tx
            .query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |r| {
                r.get(0)
            })
            .map_err(open_err("checking foreign keys after migrating"))?;
        if violations > 0 {
            return Err(StoreError::Open {
                path: path.to_path_buf(),
                context: "checking foreign keys after migrating",
                source: rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CONSTRAINT_FOREIGNKEY),
                    Some(format!("{violations} rows break a foreign key")),
                )
                .into(),
            });
        }
        tx.pragma_update(None, "user_version", target)
            .map_err(open_err("writing the schema version"))?;
    }
    tx.commit().map_err(open_err("committing the migrations"))?;
    Ok(pending.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user_version(conn: &Connection) -> i64 {
        conn.pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn versions_are_numbered_from_one_without_gaps() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i64 + 1, "{}", m.name);
            assert!(
                m.name.starts_with(&format!("{:04}_", m.version)),
                "{} does not start with its number",
                m.name
            );
            assert!(!m.sql.trim().is_empty(), "{} is empty", m.name);
        }
        assert_eq!(LATEST_VERSION, MIGRATIONS.last().unwrap().version);
    }

    /// Results stored before migration 9 were noisy by their plain CV too; after it, only an
    /// interval wider than its target keeps them noisy (they carry no robust figures).
    #[test]
    fn migration_9_judges_stored_results_by_their_interval_alone() {
        let mut conn = Connection::open_in_memory().unwrap();
        let path = Path::new(":memory:");
        migrate_to(&mut conn, path, 8).unwrap();
        conn.execute_batch(
            "INSERT INTO agents (id, name, url, added_at) VALUES (1, 'rig', 'http://x', 0);",
        )
        .unwrap();
        // (run id, cv, interval low/high around a median of 1.0, target, noisy then)
        let rows = [
            ("tail", 0.4, 0.995, 1.005, 1.0, 1),
            ("wide", 0.05, 0.95, 1.05, 1.0, 1),
            ("no-target", 0.3, 0.9, 1.1, 0.0, 1),
            ("quiet", 0.02, 0.995, 1.005, 1.0, 0),
        ];
        for (run, cv, lo, hi, target, noisy) in rows {
            conn.execute(
                "INSERT INTO results (run_id, agent_id, device_id, backend, spec_key, kernel,
                    variant, params_json, dtype, mode, status, message, median_s, cv, ci_low_s,
                    ci_high_s, target_ci_pct, noisy, iterations, validation_json, config_json,
                    fingerprint_json, stderr_tail, started_at, wall_s, created_at)
                 VALUES (?1, 1, 'cpu:0', 'cpu', 'k', 'copy', 'default', '{}', 'f32',
                    'compute_only', 'ok', '', 1.0, ?2, ?3, ?4, ?5, ?6, 10, 'null', '{}', '{}', '',
                    0, 0, 0)",
                rusqlite::params![run, cv, lo, hi, target, noisy],
            )
            .unwrap();
        }
        migrate(&mut conn, path).unwrap();
        let noisy: Vec<(String, bool)> = conn
            .prepare("SELECT run_id, noisy FROM results ORDER BY id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let expected = [
            ("tail", false),
            ("wide", true),
            ("no-target", false),
            ("quiet", false),
        ];
        assert_eq!(
            noisy,
            expected.map(|(r, n)| (r.to_string(), n)).to_vec(),
            "the CV no longer decides"
        );
        let robust: Option<f64> = conn
            .query_row("SELECT robust_cv FROM results LIMIT 1", [], |r| r.get(0))
            .unwrap();
        assert_eq!(robust, None, "no robust figures are made up");
    }

    #[test]
    fn migrates_an_empty_database_once() {
        let mut conn = Connection::open_in_memory().unwrap();
        let path = Path::new(":memory:");
        assert_eq!(user_version(&conn), 0);
        assert_eq!(migrate(&mut conn, path).unwrap(), MIGRATIONS.len());
        assert_eq!(user_version(&conn), LATEST_VERSION);
        let app: i64 = conn
            .pragma_query_value(None, "application_id", |r| r.get(0))
            .unwrap();
        assert_eq!(app, APPLICATION_ID);
        let tables: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            tables,
            [
                "agents",
                "alerts",
                "campaign_counts",
                "campaigns",
                "checks",
                "devices",
                "jobs",
                "latest_results",
                "power_samples",
                "result_counts",
                "result_samples",
                "results",
                "schedules"
            ]
        );
        // A second run finds nothing pending and changes nothing.
        assert_eq!(migrate(&mut conn, path).unwrap(), 0);
        assert_eq!(user_version(&conn), LATEST_VERSION);
    }

    #[test]
    fn refuses_a_newer_database_and_leaves_it_alone() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "user_version", LATEST_VERSION + 5)
            .unwrap();
        let err = migrate(&mut conn, Path::new("x.db")).unwrap_err();
        assert!(
            matches!(err, StoreError::NewerSchema { found, supported, .. }
                if found == LATEST_VERSION + 5 && supported == LATEST_VERSION),
            "{err}"
        );
        let tables: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))
            .unwrap();
        assert_eq!(tables, 0);
    }

    #[test]
    fn a_failing_migration_leaves_the_old_version() {
        let mut conn = Connection::open_in_memory().unwrap();
        // A table of the same name makes 0001 fail half-way.
        conn.execute_batch("CREATE TABLE jobs (x)").unwrap();
        let err = migrate(&mut conn, Path::new("x.db")).unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::Open {
                    context: "0001_init",
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(user_version(&conn), 0);
        let agents: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE name = 'agents'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(
            agents, 0,
            "the part of 0001 before the failure was rolled back"
        );
    }
}
