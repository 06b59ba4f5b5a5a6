//! The two store engines proven equal: a fresh SQLite file and a fresh PostgreSQL database, each
//! migrated by the store's own migrations (`Store::open_any`, as every command opens one), are
//! read back from their catalogs into one description and compared. Every difference fails the
//! test unless [`ALLOWED`] excuses it, with its reason; an entry that excuses nothing fails it
//! too, so the list never outlives what it was written for.
//!
//! What is compared, per table: the columns in order, each with its type mapped to a common name,
//! its nullability and its default; the primary key; the unique constraints and the indexes with
//! their columns (an index by name, a constraint by its columns: the engines name those
//! themselves); the foreign keys (columns, referenced table and columns, on delete, on update);
//! the triggers by name. CHECK constraints and trigger bodies are not compared.
//!
//! What is read of each engine, and how its types map to common names: `catalog`.

#[path = "catalog.rs"]
mod catalog;

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;

use gpufleet_coordinator::store::Store;

use super::{TestDb, cluster};
use catalog::{Column, Schema, Table, kinds_read, list, postgres_schema, sqlite_schema};

/// One difference the test tolerates, and why.
struct Allowed {
    /// As [`Difference::what`].
    what: &'static str,
    table: &'static str,
    /// As [`Difference::item`].
    item: &'static str,
    reason: &'static str,
}

/// Counters kept by SQLite triggers (one event each, no functions) and by PostgreSQL's trigger
/// functions (one per event and table, 0010_baseline): the same counting, under other names.
const TRIGGERS: &str = "the same counting (0008_scale): SQLite's triggers have one event and \
                        no functions, so it uses a trigger per counter where PostgreSQL calls one \
                        function per event and table (postgres/0010_baseline); db copy and the \
                        listing tests name them";

/// Every difference between the engines' schemas that is meant (see the module doc).
const ALLOWED: &[Allowed] = &[
    Allowed {
        what: "table",
        table: "gpufleet_schema",
        item: "",
        reason: "PostgreSQL's schema version; SQLite keeps it in PRAGMA user_version",
    },
    Allowed {
        what: "column",
        table: "result_counts",
        item: "shard",
        reason: "counters in shards on PostgreSQL, where updating one row many times in a \
                 transaction is quadratic (postgres/0012_count_shards); readers sum a key's rows",
    },
    Allowed {
        what: "primary key",
        table: "result_counts",
        item: "",
        reason: "the shard is part of the key (postgres/0012_count_shards)",
    },
    Allowed {
        what: "column",
        table: "campaign_counts",
        item: "shard",
        reason: "counters in shards on PostgreSQL (postgres/0012_count_shards)",
    },
    Allowed {
        what: "primary key",
        table: "campaign_counts",
        item: "",
        reason: "the shard is part of the key (postgres/0012_count_shards)",
    },
    Allowed {
        what: "index",
        table: "checks",
        item: "checks_by_time",
        reason: "SQLite's index holds the rowid, which is result_id, already (0013_checks_order)",
    },
    Allowed {
        what: "default",
        table: "checks",
        item: "result_id",
        reason: "an INTEGER PRIMARY KEY is SQLite's rowid; the store always gives the checked \
                 result's id, so PostgreSQL has no identity on it",
    },
    Allowed {
        what: "default",
        table: "result_samples",
        item: "result_id",
        reason: "an INTEGER PRIMARY KEY is SQLite's rowid; the store always gives the result's id, \
                 so PostgreSQL has no identity on it",
    },
    Allowed {
        what: "trigger",
        table: "results",
        item: "results_latest",
        reason: TRIGGERS,
    },
    Allowed {
        what: "trigger",
        table: "results",
        item: "results_count",
        reason: TRIGGERS,
    },
    Allowed {
        what: "trigger",
        table: "results",
        item: "results_campaign_count",
        reason: TRIGGERS,
    },
    Allowed {
        what: "trigger",
        table: "results",
        item: "results_inserted",
        reason: TRIGGERS,
    },
    Allowed {
        what: "trigger",
        table: "results",
        item: "results_uncount",
        reason: TRIGGERS,
    },
    Allowed {
        what: "trigger",
        table: "results",
        item: "results_campaign_uncount",
        reason: TRIGGERS,
    },
    Allowed {
        what: "trigger",
        table: "results",
        item: "results_deleted",
        reason: TRIGGERS,
    },
    Allowed {
        what: "trigger",
        table: "jobs",
        item: "jobs_uncount",
        reason: "PostgreSQL's jobs_count fires on INSERT OR DELETE; SQLite needs a trigger per \
                 event",
    },
];

/// One way the engines' schemas differ.
#[derive(Debug, PartialEq)]
struct Difference {
    /// What differs: `table`, `column`, `column type`, `nullability`, `default`, `column order`,
    /// `primary key`, `unique constraint`, `index`, `foreign key` or `trigger`.
    what: &'static str,
    table: String,
    /// The column, index or trigger name, a constraint's `(columns)`, or empty for the table.
    item: String,
    sqlite: String,
    postgres: String,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let place = match self.item.as_str() {
            "" => self.table.clone(),
            i if i.starts_with('(') => format!("{} {i}", self.table),
            i => format!("{}.{i}", self.table),
        };
        write!(
            f,
            "{:<17} {place}: sqlite says {}, postgres says {}",
            self.what, self.sqlite, self.postgres
        )
    }
}

impl Allowed {
    fn excuses(&self, d: &Difference) -> bool {
        self.what == d.what && self.table == d.table && self.item == d.item
    }
}

const ABSENT: &str = "(absent)";

/// Every difference between `sqlite` and `postgres`, table by table.
fn compare(sqlite: &Schema, postgres: &Schema) -> Vec<Difference> {
    let mut out = Vec::new();
    let names: BTreeSet<&String> = sqlite.keys().chain(postgres.keys()).collect();
    for name in names {
        let mut diff = |what: &'static str, item: String, s: String, p: String| {
            if s != p {
                out.push(Difference {
                    what,
                    table: name.clone(),
                    item,
                    sqlite: s,
                    postgres: p,
                });
            }
        };
        let (s, p) = match (sqlite.get(name), postgres.get(name)) {
            (Some(s), Some(p)) => (s, p),
            (s, p) => {
                let has = |t: Option<&Table>| t.map_or(ABSENT, |_| "present").to_owned();
                diff("table", String::new(), has(s), has(p));
                continue;
            }
        };
        let find = |t: &Table, c: &str| t.columns.iter().find(|x| x.name == c).cloned();
        let mut columns: Vec<&str> = s.columns.iter().map(|c| c.name.as_str()).collect();
        columns.extend(
            p.columns
                .iter()
                .map(|c| c.name.as_str())
                .filter(|c| find(s, c).is_none()),
        );
        for c in columns {
            match (find(s, c), find(p, c)) {
                (Some(sc), Some(pc)) => {
                    diff("column type", c.to_owned(), sc.ty, pc.ty);
                    let nulls = |not_null| if not_null { "NOT NULL" } else { "nullable" };
                    let (sn, pn) = (nulls(sc.not_null), nulls(pc.not_null));
                    diff("nullability", c.to_owned(), sn.to_owned(), pn.to_owned());
                    let none = || "(none)".to_owned();
                    let (sd, pd) = (
                        sc.default.unwrap_or_else(none),
                        pc.default.unwrap_or_else(none),
                    );
                    diff("default", c.to_owned(), sd, pd);
                }
                (sc, pc) => {
                    let says = |c: Option<Column>| c.map_or(ABSENT.to_owned(), |c| c.to_string());
                    diff("column", c.to_owned(), says(sc), says(pc));
                }
            }
        }
        let common = |a: &Table, b: &Table| {
            let names = a.columns.iter().map(|c| c.name.as_str());
            names
                .filter(|n| find(b, n).is_some())
                .collect::<Vec<_>>()
                .join(", ")
        };
        diff("column order", String::new(), common(s, p), common(p, s));
        diff(
            "primary key",
            String::new(),
            list(&s.primary_key),
            list(&p.primary_key),
        );
        for cols in s.uniques.union(&p.uniques) {
            let has = |t: &Table| {
                if t.uniques.contains(cols) {
                    "unique"
                } else {
                    ABSENT
                }
            };
            diff(
                "unique constraint",
                list(cols),
                has(s).into(),
                has(p).into(),
            );
        }
        for index in s
            .indexes
            .keys()
            .chain(p.indexes.keys())
            .collect::<BTreeSet<_>>()
        {
            let on = |t: &Table| t.indexes.get(index).map_or(ABSENT.into(), String::clone);
            diff("index", index.clone(), on(s), on(p));
        }
        let fks: BTreeSet<_> = s.foreign_keys.keys().chain(p.foreign_keys.keys()).collect();
        for cols in fks {
            let to = |t: &Table| {
                t.foreign_keys
                    .get(cols)
                    .map_or(ABSENT.into(), String::clone)
            };
            diff("foreign key", list(cols), to(s), to(p));
        }
        for trigger in s.triggers.union(&p.triggers) {
            let has = |t: &Table| {
                if t.triggers.contains(trigger) {
                    "present"
                } else {
                    ABSENT
                }
            };
            diff("trigger", trigger.clone(), has(s).into(), has(p).into());
        }
    }
    out
}

/// A fresh SQLite file migrated by the store, and what it has; the dir must outlive the file.
fn migrated_sqlite(dir: &Path, name: &str) -> (rusqlite::Connection, Schema) {
    let file = dir.join(name);
    drop(Store::open_any(&file).expect("the store migrates a new SQLite file"));
    let conn = rusqlite::Connection::open(&file).unwrap();
    let schema = sqlite_schema(&conn);
    (conn, schema)
}

#[test]
fn sqlite_and_postgres_migrate_to_the_same_schema() {
    let Some(admin) = cluster() else { return };
    let pg = TestDb::create(&admin, "schema");
    drop(Store::open_any(Path::new(&pg.url())).expect("the store migrates a new database"));
    let postgres = postgres_schema(&pg.url());
    let dir = tempfile::tempdir().unwrap();
    let (_conn, sqlite) = migrated_sqlite(dir.path(), "fleet.db");
    for (engine, schema) in [("sqlite", &sqlite), ("postgres", &postgres)] {
        let read = kinds_read(schema);
        assert!(
            read.iter().all(|n| *n > 0),
            "{engine}: read {read:?} of each kind"
        );
    }

    let differences = compare(&sqlite, &postgres);
    let (excused, unexcused): (Vec<_>, Vec<_>) = differences
        .iter()
        .partition(|d| ALLOWED.iter().any(|a| a.excuses(d)));
    for d in &excused {
        let why = ALLOWED.iter().find(|a| a.excuses(d)).unwrap().reason;
        eprintln!("allowed: {d} ({why})");
    }
    let stale: Vec<_> = ALLOWED
        .iter()
        .filter(|a| !differences.iter().any(|d| a.excuses(d)))
        .map(|a| format!("  {} {} {}", a.what, a.table, a.item))
        .collect();
    let mut report = String::new();
    if !unexcused.is_empty() {
        report += &format!(
            "the SQLite and PostgreSQL schemas differ in {} way(s) that ALLOWED \
             (coordinator/tests/postgres/schema.rs) does not excuse:\n",
            unexcused.len()
        );
        for d in &unexcused {
            report += &format!("  {d}\n");
        }
    }
    if !stale.is_empty() {
        report += &format!(
            "{} entr(y/ies) of ALLOWED excuse no difference (remove them):\n{}\n",
            stale.len(),
            stale.join("\n")
        );
    }
    assert!(report.is_empty(), "{report}");
}

/// The comparison itself, on SQLite alone (runs without a cluster): a column one side lacks is
/// named with what the other says.
#[test]
fn the_comparison_names_a_column_only_one_side_has() {
    let dir = tempfile::tempdir().unwrap();
    let (_a, plain) = migrated_sqlite(dir.path(), "a.db");
    let (b, _) = migrated_sqlite(dir.path(), "b.db");
    b.execute_batch("ALTER TABLE jobs ADD COLUMN extra TEXT NOT NULL DEFAULT ('x')")
        .unwrap();
    let extended = sqlite_schema(&b);
    assert!(compare(&plain, &plain).is_empty());
    let found = compare(&plain, &extended);
    assert_eq!(
        found,
        [Difference {
            what: "column",
            table: "jobs".into(),
            item: "extra".into(),
            sqlite: ABSENT.into(),
            postgres: "text NOT NULL DEFAULT 'x'".into(),
        }]
    );
    assert_eq!(
        found[0].to_string(),
        "column            jobs.extra: sqlite says (absent), postgres says text NOT NULL DEFAULT 'x'"
    );
}
