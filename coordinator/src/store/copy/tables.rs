//! What `db copy` copies and in which order: the copied tables with their keys and references,
//! the derived tables the check compares, and the SQL that sets PostgreSQL's counting triggers
//! aside. The list is the one place a new table joins the copy; both ways of copying (into an
//! empty store, a merge) and the check read it.

/// Rows read (and written) per statement.
pub(super) const PAGE: usize = 500;

/// At most this many parameters in one statement (SQLite's limit is 32766, PostgreSQL's 65535).
pub(super) const MAX_PARAMS: usize = 30_000;

/// A copied table: its primary key (the order of reads and of the checksum) and what its
/// columns refer to.
pub(super) struct Table {
    pub(super) name: &'static str,
    pub(super) key: &'static [&'static str],
    /// Whether `id` is its own (an identity column in PostgreSQL).
    pub(super) has_id: bool,
    /// (column, the table whose id it holds).
    pub(super) refs: &'static [(&'static str, &'static str)],
}

/// The tables copied, in an order where every reference points back (except
/// `jobs.confirms_result_id`, set after `results`).
pub(super) const TABLES: &[Table] = &[
    Table {
        name: "agents",
        key: &["id"],
        has_id: true,
        refs: &[],
    },
    Table {
        name: "devices",
        key: &["id"],
        has_id: true,
        refs: &[("agent_id", "agents")],
    },
    Table {
        name: "campaigns",
        key: &["id"],
        has_id: true,
        refs: &[],
    },
    Table {
        name: "jobs",
        key: &["id"],
        has_id: true,
        refs: &[
            ("campaign_id", "campaigns"),
            ("agent_id", "agents"),
            ("device_row_id", "devices"),
        ],
    },
    Table {
        name: "results",
        key: &["id"],
        has_id: true,
        refs: &[
            ("campaign_id", "campaigns"),
            ("job_id", "jobs"),
            ("agent_id", "agents"),
            ("device_row_id", "devices"),
        ],
    },
    Table {
        name: "result_samples",
        key: &["result_id"],
        has_id: false,
        refs: &[("result_id", "results")],
    },
    Table {
        name: "power_samples",
        key: &["result_id", "seq"],
        has_id: false,
        refs: &[("result_id", "results")],
    },
    Table {
        name: "schedules",
        key: &["id"],
        has_id: true,
        refs: &[],
    },
    Table {
        name: "checks",
        key: &["result_id"],
        has_id: false,
        refs: &[
            ("result_id", "results"),
            ("confirmation_result_id", "results"),
        ],
    },
    Table {
        name: "alerts",
        key: &["id"],
        has_id: true,
        refs: &[
            ("result_id", "results"),
            ("confirmation_result_id", "results"),
            ("campaign_id", "campaigns"),
            ("device_row_id", "devices"),
        ],
    },
];

/// The rows of a counting table that take part in the check: keys with a count above 0.
const COUNTED: &str = "n > 0";

/// The tables the triggers keep, compared but not copied: (name, key, which rows count).
pub(super) const DERIVED: &[(&str, &[&str], &str)] = &[
    (
        "latest_results",
        &["agent_id", "device_id", "spec_key"],
        "TRUE",
    ),
    ("result_counts", &["status"], COUNTED),
    (
        "campaign_counts",
        &["campaign_id", "kind", "state"],
        COUNTED,
    ),
];

/// PostgreSQL's triggers that keep the derived tables as results and jobs are inserted, turned off
/// while a copy into an empty store inserts them (inside its transaction: a rollback turns them
/// on again), and on again before the commit. The derived tables are emptied with them (a counter
/// left at 0 by deleted rows would stand in the way of the copied total).
pub(super) const TRIGGERS_OFF: &str = "ALTER TABLE results DISABLE TRIGGER results_inserted;
                            ALTER TABLE jobs DISABLE TRIGGER jobs_count;
                            DELETE FROM latest_results;
                            DELETE FROM result_counts;
                            DELETE FROM campaign_counts;";
pub(super) const TRIGGERS_ON: &str = "ALTER TABLE results ENABLE TRIGGER results_inserted;
                           ALTER TABLE jobs ENABLE TRIGGER jobs_count;";

/// Where the check reads `table`: the table itself (`None`: its own columns), or for a counting
/// table (a derived one filtered by [`COUNTED`]) its totals, one row per key, with their columns
/// (the key and `n`): PostgreSQL keeps those counters in shards (migration 12), SQLite in one row
/// per key.
pub(super) fn checked_source(
    table: &str,
    key: &[&str],
    filter: &str,
) -> (String, Option<Vec<String>>) {
    if filter != COUNTED {
        return (table.to_owned(), None);
    }
    let keys = key.join(", ");
    let columns = key.iter().map(|k| (*k).to_owned()).chain(["n".to_owned()]);
    (
        format!(
            "(SELECT {keys}, CAST(sum(n) AS bigint) AS n FROM {table} GROUP BY {keys}) AS totals"
        ),
        Some(columns.collect()),
    )
}
