//! How every listing prints (`--json`, `--format`).

use crate::table::Format;
use clap::Args;

/// How a listing prints: every listing command takes both `--json` and `--format`.
#[derive(Debug, Args, Clone, Copy)]
pub struct Output {
    /// Print JSON (the same as --format json).
    #[arg(long)]
    pub json: bool,
    /// table (aligned columns), md (Markdown), csv, json, or (compare only) llama-bench: the
    /// `llm` results as llama-bench's table (model, size, params, backend, pp512/tg128, t/s).
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
}

impl Output {
    /// The format asked for (`--json` wins), refusing `llama-bench` (only `compare` prints it:
    /// [`Self::compare_format`]).
    ///
    /// # Errors
    /// `--format llama-bench`.
    pub fn format(&self) -> anyhow::Result<Format> {
        match self.compare_format() {
            Format::LlamaBench => anyhow::bail!(
                "--format llama-bench: only `gpufleet compare` prints llama-bench's table"
            ),
            f => Ok(f),
        }
    }

    /// The format asked for (`--json` wins), `llama-bench` included.
    pub fn compare_format(&self) -> Format {
        if self.json { Format::Json } else { self.format }
    }
}
