//! `gpufleet db …`: backups, restores, sizes and retention of the database file.

use crate::regression::detect::DetectConfig;
use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum DbCommand {
    /// Write a consistent copy of the database (--db) to FILE, a new file. Safe while
    /// `gpufleet serve` runs: the serve keeps writing, and the copy is the database as of one
    /// commit, with every result stored before the backup began. The copy is checked (integrity
    /// and foreign keys) before it gets its name; an existing FILE is never overwritten. Progress
    /// goes to stderr, a summary line to stdout.
    Backup {
        /// The backup file to create (one self-contained SQLite file).
        file: PathBuf,
        /// Print the summary as JSON (path, bytes, pages, results, seconds).
        #[arg(long)]
        json: bool,
    },
    /// Replace the database (--db) with a copy of FILE, a gpufleet database such as a backup.
    /// FILE is checked first (a gpufleet schema this version knows, integrity, foreign keys); the
    /// replaced database is kept as DB.before-restore. Refuses while a `gpufleet serve` uses the
    /// database: stop it first.
    Restore {
        /// The database to restore from.
        file: PathBuf,
        /// Replace an existing DB.before-restore (the database an earlier restore replaced).
        #[arg(long)]
        force: bool,
    },
    /// Copy every row of SRC into DST, each an SQLite file or a postgres:// URL (SQLite to
    /// PostgreSQL and back), then check the copy: rows and a SHA-256 per table must match. DST is
    /// created (or its schema made) if needed and must be empty; with --merge, rows go into a
    /// database that has some, by run id, never twice (a result DST has is skipped with its
    /// samples). The copy is one transaction on DST: if it fails, DST is as it was. --db is not
    /// used. Progress goes to stderr, a table per line to stdout.
    Copy {
        /// The database to copy from (read only).
        src: PathBuf,
        /// The database to copy into.
        dst: PathBuf,
        /// Add to a DST that has rows, skipping what it has (results by run id).
        #[arg(long)]
        merge: bool,
        /// Print the report as JSON (per table: rows, copied, skipped, checksums).
        #[arg(long)]
        json: bool,
    },
    /// Rows and bytes per table and index, largest first, with totals, the file's size, its page
    /// size and its free pages.
    Stats {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Drop the raw per-iteration times and power traces of old results, keeping every summary
    /// (median, interval, CV, energy, validation, fingerprint), then give the space back to the
    /// file system (VACUUM). Results an alert or a pending regression check refers to, and the
    /// newest --keep-last of each series (the next check's baseline), stay whole. A result's page
    /// says when its raw data was compacted. Safe while `gpufleet serve` runs (short
    /// transactions), but VACUUM holds the write lock until it ends: use --no-vacuum on a busy
    /// coordinator (freed pages are then reused by new results instead).
    Compact(CompactArgs),
}

#[derive(Debug, Args)]
pub struct CompactArgs {
    /// Drop the raw iteration times of results older than this (90d, 12w, 36h).
    #[arg(long, value_name = "AGE", default_value = "90d", value_parser = parse_age)]
    pub samples_older_than: f64,
    /// Drop the power traces of results older than this.
    #[arg(long, value_name = "AGE", default_value = "30d", value_parser = parse_age)]
    pub power_older_than: f64,
    /// Keep the newest this-many ok results of each series whole (the regression baseline).
    #[arg(long, default_value_t = DetectConfig::DEFAULT.baseline_n)]
    pub keep_last: usize,
    /// Do not VACUUM afterwards (the file keeps its size; new results reuse the freed pages).
    #[arg(long)]
    pub no_vacuum: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// An age such as `90d`: seconds.
pub fn parse_age(text: &str) -> Result<f64, String> {
    crate::time::parse_duration(text)
        .filter(|s| *s > 0.0)
        .ok_or_else(|| "expected an age such as 90d, 12w or 36h".to_string())
}
