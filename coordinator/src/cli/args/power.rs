//! `gpufleet power`'s options.

/// How `gpufleet power` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PowerFormat {
    /// One line per channel, updated in place on a terminal; a line per sample otherwise.
    Table,
    /// A header, then one row per sample.
    Csv,
    /// One JSON object per line per sample (JSON Lines).
    Json,
}

/// The arguments of `gpufleet power`.
#[derive(Debug, clap::Args)]
pub struct PowerArgs {
    /// Registered agent name (a dial-in agent is read through the serve that holds its link), or
    /// an agent URL (http://host:port).
    pub agent: String,
    /// Only this device: its id (`opencl:0.0`) or its PCI bus id.
    #[arg(long)]
    pub device: Option<String>,
    /// Only this source (`nvml`, `amdgpu-hwmon`, `rapl`, `rocm-smi`, ...).
    #[arg(long)]
    pub source: Option<String>,
    /// Stop after this many seconds (default: until Ctrl-C).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Samples shown per second and channel, at most what the agent takes (its --power-rate-hz,
    /// 20 by default); 0 shows every sample.
    #[arg(long, default_value_t = 2.0)]
    pub rate_hz: f64,
    /// table, csv or json (JSON Lines: one object per sample).
    #[arg(long, value_enum, default_value = "table")]
    pub format: PowerFormat,
    /// With an agent URL: the agent's token (started with `--token`), from the first line of this
    /// file, never from the command line. A registered agent's token is the one stored with it.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<std::path::PathBuf>,
}
