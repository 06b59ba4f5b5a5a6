//! `db backup`, `db restore`, `db stats` and `db compact`: the store's maintenance calls
//! (`store/maintenance.rs`, `store/compact.rs`), printed. `backup` and `stats` read through a read-only store; `restore` never opens its target
//! as a store (an open would create or migrate it), so `main.rs` calls it before opening one.

use std::io::IsTerminal;
use std::path::Path;

use super::args::CompactArgs;
use crate::db::Db;
use crate::store::{DbStats, ObjectKind, Retention, Store, TableCopy, TableStats};
use crate::table::{Column, Format, Table};
use gpufleet_kernels::human_bytes;

/// `db backup FILE`: progress in percent on stderr (every percent on a terminal, every tenth in a
/// log), then a summary line, or a JSON object with `--json`, on stdout.
///
/// # Errors
/// As [`Store::backup_to`]: FILE exists, the copy fails its check or cannot be written.
pub fn backup(db: &Db, file: &Path, json: bool) -> anyhow::Result<i32> {
    let terminal = std::io::stderr().is_terminal();
    let every = if terminal { 1 } else { 10 };
    let mut shown = None;
    let summary = db.with(|s| {
        s.backup_to(file, |done, total| {
            let pct = done * 100 / total.max(1) / every * every;
            if shown != Some(pct) {
                shown = Some(pct);
                if terminal {
                    eprint!("\rbackup: {pct:>3}%");
                } else {
                    eprintln!("backup: {pct}%");
                }
            }
        })
    });
    if terminal && shown.is_some() {
        eprintln!();
    }
    let summary = summary?;
    if json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        println!(
            "backed up to {}: {}, {} results, {:.1} s",
            summary.path.display(),
            human_bytes(summary.bytes),
            summary.results,
            summary.seconds
        );
    }
    Ok(0)
}

/// `db copy SRC DST`: progress per table on stderr, then a line per table (or JSON) on stdout.
///
/// # Errors
/// As [`Store::copy_to`], and opening either store.
pub fn copy(src: &Path, dst: &Path, merge: bool, json: bool) -> anyhow::Result<i32> {
    let source = Store::open_any_read_only(src)?;
    let mut dest = Store::open_any(dst)?;
    let terminal = std::io::stderr().is_terminal();
    let mut last = (String::new(), 0u64);
    let report = source.copy_to(&mut dest, merge, &mut |table, done, total| {
        let pct = done * 100 / total.max(1);
        let step = if terminal { 1 } else { 25 };
        if last.0 != table || pct / step != last.1 / step || done == total {
            if terminal {
                eprint!("\rcopy: {table} {done}/{total} ({pct}%)\x1b[K");
                if done == total {
                    eprintln!();
                }
            } else {
                eprintln!("copy: {table} {done}/{total} ({pct}%)");
            }
            last = (table.to_owned(), pct);
        }
    })?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
        return Ok(0);
    }
    print!(
        "{}",
        Table::of(COPY_COLUMNS, &report.tables).render(Format::Table)
    );
    println!(
        "{} {} into {} in {:.1} s: every one of the source's {} results is there",
        if report.merged { "merged" } else { "copied" },
        source.path().display(),
        dest.path().display(),
        report.seconds,
        report.results_verified
    );
    Ok(0)
}

/// `db restore FILE`: replaces the database at `db` with a copy of `file`.
///
/// # Errors
/// As [`Store::restore`]: a source that is not a sound gpufleet database, a running serve, a
/// kept copy in the way without `--force`, a file that cannot be written.
pub fn restore(file: &Path, db: &Path, force: bool) -> anyhow::Result<i32> {
    let summary = Store::restore(file, db, force)?;
    println!(
        "restored {} into {}: {}, {} results, schema version {}",
        summary.from.display(),
        summary.to.display(),
        human_bytes(summary.bytes),
        summary.results,
        summary.schema_version
    );
    if let Some(kept) = &summary.kept {
        println!("the replaced database is kept as {}", kept.display());
    }
    Ok(0)
}

/// `db stats`: rows and bytes per table and index, largest first, with totals and the file's
/// layout; JSON with `--json`.
///
/// # Errors
/// As [`Store::stats`].
pub fn stats(db: &Db, json: bool) -> anyhow::Result<i32> {
    let stats = db.with(|s| s.stats())?;
    if json {
        println!("{}", serde_json::to_string_pretty(&stats)?);
    } else {
        print!("{}", stats_text(&stats));
    }
    Ok(0)
}

/// A count, or `-` where there is none.
fn count_or_dash(n: Option<u64>) -> String {
    n.map_or_else(|| "-".to_owned(), |n| n.to_string())
}

/// `db copy`'s table: a line per table.
const COPY_COLUMNS: &[Column<TableCopy>] = &[
    Column::new("table", |t| t.table.clone()),
    Column::new("source rows", |t| t.source_rows.to_string()),
    Column::new("copied", |t| t.copied.to_string()),
    Column::new("skipped", |t| t.skipped.to_string()),
    Column::new("rows now", |t| t.destination_rows.to_string()),
    Column::new("checksum", |t| {
        match (&t.source_sha256, &t.destination_sha256) {
            (Some(a), Some(b)) if a == b => format!("same ({})", &a[..12]),
            (Some(_), Some(_)) => "DIFFERS".to_owned(),
            _ => "-".to_owned(),
        }
    }),
];

const STATS_COLUMNS: &[Column<TableStats>] = &[
    Column::new("name", |t| t.name.clone()),
    Column::new("kind", |t| {
        match t.kind {
            ObjectKind::Table => "table",
            ObjectKind::Index => "index",
        }
        .to_owned()
    }),
    Column::new("table", |t| t.table.clone()),
    Column::new("rows", |t| count_or_dash(t.rows)),
    Column::new("bytes", |t| {
        t.bytes.map_or_else(|| "-".to_owned(), human_bytes)
    }),
    Column::new("pages", |t| count_or_dash(t.pages)),
];

/// The aligned table of `db stats`, a totals row, and the file's layout below it.
fn stats_text(stats: &DbStats) -> String {
    let mut table = Table::of(STATS_COLUMNS, &stats.tables);
    let sum = |field: fn(&TableStats) -> Option<u64>| {
        stats
            .tables
            .iter()
            .map(field)
            .sum::<Option<u64>>()
            .map_or_else(|| "-".to_owned(), |n| n.to_string())
    };
    let rows: u64 = stats.tables.iter().filter_map(|t| t.rows).sum();
    let bytes: Option<u64> = stats.tables.iter().map(|t| t.bytes).sum();
    table.push(vec![
        "total".to_owned(),
        String::new(),
        String::new(),
        rows.to_string(),
        bytes.map_or_else(|| "-".to_owned(), human_bytes),
        sum(|t| t.pages),
    ]);
    let mut text = table.render(Format::Table);
    let file = stats
        .file_bytes
        .map_or_else(|| "in memory".to_owned(), human_bytes);
    text.push_str(&format!(
        "\n{}: {file}, {} pages of {} B ({} free), schema version {}\n",
        stats.path.display(),
        stats.page_count,
        stats.page_size,
        stats.freelist_count,
        stats.schema_version
    ));
    if let Some(wal) = stats.wal_bytes.filter(|&b| b > 0) {
        text.push_str(&format!(
            "write-ahead log: {} (folded into the file at the next checkpoint)\n",
            human_bytes(wal)
        ));
    }
    if bytes.is_none() {
        text.push_str("bytes per table unknown: this SQLite was built without dbstat\n");
    }
    text
}

/// Bytes of the database file and its WAL.
fn on_disk(db: &Db) -> u64 {
    let (file, wal) = db.with(|s| s.file_sizes());
    file.unwrap_or(0) + wal.unwrap_or(0)
}

/// `db compact`: progress on stderr, then what was dropped and the size before and after.
///
/// # Errors
/// As [`Store::compact`] and [`Store::vacuum`].
pub fn compact(db: &Db, a: &CompactArgs) -> anyhow::Result<i32> {
    let path = db.with(|s| s.path().to_path_buf());
    let before = on_disk(db);
    let now = crate::time::now();
    let policy = Retention {
        samples_before: Some(now - a.samples_older_than),
        power_before: Some(now - a.power_older_than),
        keep_last: a.keep_last,
    };
    let began = std::time::Instant::now();
    let mut last = std::time::Instant::now();
    let report = db.with(|s| {
        s.compact(&policy, &mut |n| {
            if last.elapsed().as_secs_f64() >= 2.0 {
                last = std::time::Instant::now();
                eprintln!("compact: {n} results so far");
            }
        })
    })?;
    let vacuum_s = if a.no_vacuum {
        None
    } else {
        eprintln!("compact: vacuuming (rewrites the file; needs free space about its size)");
        let t = std::time::Instant::now();
        db.with(|s| s.vacuum())?;
        Some(t.elapsed().as_secs_f64())
    };
    let after = on_disk(db);
    let seconds = began.elapsed().as_secs_f64();
    if a.json {
        let mut v = serde_json::to_value(&report)?;
        v["bytes_before"] = before.into();
        v["bytes_after"] = after.into();
        v["vacuum_seconds"] = vacuum_s.into();
        v["total_seconds"] = seconds.into();
        println!("{v}");
    } else {
        println!(
            "compacted {}: raw times of {} results and power traces of {} dropped ({} power samples), {} old results kept whole; {} → {}{} in {seconds:.1} s",
            path.display(),
            report.samples_dropped,
            report.power_dropped,
            report.power_rows_deleted,
            report.kept,
            human_bytes(before),
            human_bytes(after),
            if a.no_vacuum { " (not vacuumed)" } else { "" },
        );
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn object(name: &str, kind: ObjectKind, rows: Option<u64>, bytes: Option<u64>) -> TableStats {
        TableStats {
            name: name.into(),
            kind,
            table: "results".into(),
            rows,
            bytes,
            pages: bytes.map(|b| b / 4096),
        }
    }

    #[test]
    fn the_stats_table_has_a_totals_row_and_the_files_layout() {
        let stats = DbStats {
            path: PathBuf::from("fleet.db"),
            file_bytes: Some(3 * 4096),
            wal_bytes: None,
            page_size: 4096,
            page_count: 3,
            freelist_count: 0,
            schema_version: 7,
            tables: vec![
                object("results", ObjectKind::Table, Some(12), Some(8192)),
                object("idx", ObjectKind::Index, None, Some(4096)),
            ],
        };
        let text = stats_text(&stats);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("name"), "{text}");
        assert!(
            lines[2].starts_with("results") && lines[2].contains("8.0 KiB"),
            "{text}"
        );
        assert!(lines[4].starts_with("total"), "{text}");
        assert!(lines[4].contains("12.0 KiB"), "{text}");
        assert!(
            text.contains("fleet.db: 12.0 KiB, 3 pages of 4096 B (0 free)"),
            "{text}"
        );
        assert!(!text.contains("dbstat"), "{text}");
    }
}
