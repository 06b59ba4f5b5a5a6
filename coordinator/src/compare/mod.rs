//! Side-by-side comparison of results. Pure: stored rows in, a pivot and rendered text out.
//!
//! A [`Pivot`] has one row per spec (kernel, variant, params, dtype, mode, env set) and one column
//! per device, agent or backend ([`By`]). Each cell is a stored result ([`Cell`]: the
//! [`ResultRow`](crate::store::ResultRow) itself, plus where it stands in its row). In each row,
//! `relative` is 1.00 for the best `ok`, non-noisy cell and below 1 for the others, whichever way
//! the metric improves (GFLOP/s up, µs down). A [`Baseline`] (a column, or the same device's result
//! in another campaign) adds the % change of every cell, marked better or worse by the metric's
//! direction. Cells that are not `ok` have no metric; the table shows their status and a footnote
//! with the reason.
//!
//! # Layout
//! - `cell.rs`: [`Cell`], [`ratio`] and [`rank`] (relative figures and the order within a row).
//! - `pivot.rs`: [`Pivot`] (rows by spec, columns by [`By`]), baselines ([`Baseline`]).
//! - `text.rs`: the terminal and Markdown matrix with its legend and footnotes.
//! - `llama_bench.rs`: the `llm` results as llama-bench's table ([`llama_bench`]).
//! - `export.rs`: the long form for scripts: one CSV column list ([`csv`]) and one JSON field list
//!   (the `Serialize` of a [`Cell`]), shared by `gpufleet compare` and the dashboard's downloads.

mod cell;
mod export;
mod llama_bench;
mod pivot;
mod text;

pub use self::cell::{Cell, rank, ratio};
pub use self::export::csv;
pub use self::llama_bench::llama_bench;
pub use self::pivot::{Baseline, By, Pivot, PivotColumn, PivotRow};

#[cfg(test)]
mod tests;
