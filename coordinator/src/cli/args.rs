//! The command line of `gpufleet`: clap types only. The handlers in the sibling modules parse
//! these into domain types, call the library and print.

use crate::compare::By;
use crate::link::grpc::DEFAULT_CONNECT_TIMEOUT;
use clap::{Args, Parser, Subcommand};
use gpufleet_kernels::{BackendKind, Dtype, Mode, PartialSettings, RunSettings};
use gpufleet_proto::addr::parse_host_port;
use std::net::SocketAddr;
use std::path::PathBuf;

mod agents;
mod db;
mod output;
mod power;
mod serve;
pub use self::agents::AgentsCommand;
pub use self::db::{CompactArgs, DbCommand, parse_age};
pub use self::output::Output;
pub use self::power::{PowerArgs, PowerFormat};
pub use self::serve::ServeArgs;

/// gpufleet: benchmark GPUs across a fleet and make the numbers comparable.
///
/// Start `gpufleet-agent` on each host, register it with `gpufleet agents
/// add`, then run suites and compare. Every result is validated against an
/// f64 reference and stored in one SQLite file.
#[derive(Debug, Parser)]
#[command(name = "gpufleet", version)]
pub struct Cli {
    /// The results database: an SQLite file (created if missing), or a PostgreSQL database as
    /// `postgres://USER@HOST:PORT/DB` (several serves may share one; the password comes from
    /// PGPASSWORD or a passfile, ~/.pgpass or `?passfile=PATH`, never from the command line).
    /// Default: ./gpufleet.db; on the host of the packaged coordinator (where
    /// /var/lib/gpufleet-coordinator exists and ./gpufleet.db does not), its database, which the
    /// gpufleet user opens: `sudo -u gpufleet gpufleet ...`. `demo` always defaults to
    /// ./gpufleet.db.
    #[arg(long, global = true, env = "GPUFLEET_DB")]
    pub db: Option<PathBuf>,
    /// Seconds to reach an agent (TCP connection, HTTP/2 handshake and its first answer) before it
    /// counts as unreachable.
    #[arg(
        long,
        global = true,
        env = "GPUFLEET_CONNECT_TIMEOUT_S",
        default_value_t = DEFAULT_CONNECT_TIMEOUT.as_secs_f64(),
        value_parser = positive_seconds
    )]
    pub connect_timeout_s: f64,
    #[command(subcommand)]
    pub command: Command,
}

/// A number of seconds above 0 (and at most a day), for clap.
fn positive_seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if v > 0.0 && v <= 86_400.0 {
        Ok(v)
    } else {
        Err(format!("{v} is outside (0, 86400] seconds"))
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start a local agent in-process, run the smoke suite on every local
    /// backend, print the comparison and keep the results in the database.
    Demo(DemoArgs),
    /// Register, list and remove agents.
    #[command(subcommand)]
    Agents(AgentsCommand),
    /// Show an agent's host, backends (and why any is unavailable), devices
    /// and kernels.
    Describe {
        /// Registered agent name, or an agent URL (http://host:port).
        agent: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run a suite, or one ad-hoc spec, on one or more agents.
    Run(RunArgs),
    /// Watch an agent's power sensors live: watts, temperature, clocks and busy % of each
    /// channel, updated in place on a terminal, a line (or CSV row, or JSON object) per sample
    /// otherwise; until Ctrl-C or --seconds. Exit 1 when the agent cannot be reached or ends the
    /// stream.
    Power(PowerArgs),
    /// Compare the latest result of each spec on each device, side by side.
    Compare(CompareArgs),
    /// List stored results.
    Results(ResultsArgs),
    /// Serve an agent from this binary (for tests and one-binary setups);
    /// prints `listening on ADDR` once bound.
    #[command(hide = true)]
    ServeAgent {
        #[arg(long, default_value = "127.0.0.1:0", value_parser = parse_host_port)]
        listen: SocketAddr,
        #[arg(long)]
        enable_debug_kernels: bool,
        #[arg(long, default_value_t = 16)]
        queue_capacity: usize,
        /// Read power sensors under this sysfs root only (a fixture tree; no NVML or tools).
        #[arg(long)]
        sysfs_root: Option<std::path::PathBuf>,
    },
    /// Write a network's seeded buffers for another framework: graph.json (layers, shapes, weight
    /// offsets), weights.f32 and images.f32 (little-endian f32, exactly what an agent runs for
    /// this kernel, batch and seed) and reference_logits.f64 (the f64 reference network's logits
    /// for every image). bench/models_vs_torch.py builds the same network in PyTorch from them.
    /// For `llm`: model.json (shape, every tensor's offset), weights.f32 or weights.f16 and
    /// tokens.i32 (bench/llm_vs_torch.py).
    ExportModel(ExportModelArgs),
    /// List campaigns with their job and result counts.
    Campaigns {
        #[command(flatten)]
        output: Output,
    },
    /// Run the coordinator daemon: fire schedules, resume campaigns a
    /// stopped or killed coordinator left, check every scheduled result for
    /// regressions, and answer HTTP (/healthz, /api/...). Stops gracefully on
    /// SIGINT/SIGTERM (running campaigns are resumed at the next start).
    Serve(ServeArgs),
    /// Add, list, remove and run cron schedules of suites.
    #[command(subcommand)]
    Schedule(ScheduleCommand),
    /// Confirmed regressions and improvements (and, with --all, every
    /// verdict). With --fail-on, exits 1 when there is one: for CI.
    Regressions(RegressionsArgs),
    /// Identical devices compared with each other: in a campaign (the latest by default), the
    /// devices of one model, backend, driver and memory that do worse than their siblings on a
    /// spec, each with its likely cause (PCIe link, power cap, clock, heat, a noisy run). Exits 1
    /// when there is one: for scripts.
    Outliers(OutliersArgs),
    /// Write the dashboard's pages as a static HTML report (relative links; opens from disk, no
    /// server): fleet, compare (with CSV and JSON), campaigns, alerts, and every result and history
    /// page they link to.
    Report(ReportArgs),
    /// Generate a fleet history (agents, nightly campaigns, a driver update, a confirmed
    /// regression, a power trace) for the dashboard's tests and benchmark.
    #[command(hide = true)]
    SeedHistory {
        #[arg(long, default_value_t = 2)]
        agents: usize,
        #[arg(long, default_value_t = 30)]
        nights: usize,
        #[arg(long, default_value_t = 3)]
        specs: usize,
        #[arg(long, value_delimiter = ',', default_value = "cpu,opencl,vulkan")]
        backends: Vec<String>,
        /// Raw iteration times per result.
        #[arg(long, default_value_t = 20)]
        iterations: usize,
        /// Every this-many-th result also carries a power trace (0: only one result does).
        #[arg(long, default_value_t = 0)]
        power_every: usize,
        /// Commit each result on its own, as campaigns do, instead of a night per transaction.
        #[arg(long)]
        no_bulk: bool,
        /// Every this many nights every series moves by 20 % (down, then back up): a confirmed
        /// regression or improvement per series per step (0: never).
        #[arg(long, default_value_t = 0)]
        steps_every: usize,
    },
    /// Back up, restore and measure the database file (see docs/operations.md).
    #[command(subcommand)]
    Db(DbCommand),
    /// Ask a running `gpufleet serve` for /healthz and exit 0 when it answers
    /// ok (a container HEALTHCHECK). Over TLS when DIR/ca.crt exists (the
    /// CA `serve --tls-self-signed DIR` made).
    Healthz {
        /// The serve's HTTP address (HOST:PORT).
        #[arg(
            long,
            env = "GPUFLEET_LISTEN",
            default_value = "127.0.0.1:8787",
            value_parser = parse_host_port
        )]
        addr: SocketAddr,
        /// The serve's --tls-self-signed directory.
        #[arg(long)]
        tls_dir: Option<std::path::PathBuf>,
    },
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Folder to write the report into (created if missing; index.html is the entry page).
    #[arg(long, value_name = "DIR")]
    pub html: std::path::PathBuf,
    /// Only this campaign (its results, alerts and the history of each of its series).
    #[arg(long, conflicts_with = "since")]
    pub campaign: Option<i64>,
    /// Only what was stored in this window: `7d`, `24h`, `90m`, or unix seconds.
    #[arg(long)]
    pub since: Option<String>,
    /// Print what was written as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Add a schedule (times are UTC).
    Add(Box<ScheduleAddArgs>),
    /// List schedules with their last and next slots.
    List {
        #[command(flatten)]
        output: Output,
    },
    /// Remove a schedule (its campaigns and results stay).
    Rm { name: String },
    /// Run a schedule's campaign now, in this process, and wait for it
    /// (results, regression verdicts and alerts included).
    RunNow {
        name: String,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct ScheduleAddArgs {
    /// Unique name ([A-Za-z0-9_.-]).
    pub name: String,
    /// Cron expression, 5 fields, UTC: "0 3 * * *" is 03:00 every day.
    #[arg(long)]
    pub cron: String,
    /// Suite: smoke, standard, perf, models, llm, ceilings, or a TOML file path.
    #[arg(long, default_value = "standard")]
    pub suite: String,
    /// Agents to run on. Repeatable; or --all.
    #[arg(long = "agent")]
    pub agents: Vec<String>,
    /// Every agent registered when the slot fires.
    #[arg(long, conflicts_with = "agents")]
    pub all: bool,
    /// Only these backends (cpu, opencl, vulkan, hip). Repeatable.
    #[arg(long = "backend", value_parser = BACKENDS)]
    pub backends: Vec<String>,
    /// Only these kernels. Repeatable.
    #[arg(long = "kernel")]
    pub kernels: Vec<String>,
    #[command(flatten)]
    pub overrides: RunOverrides,
    /// Do not run a slot missed while the coordinator was down.
    #[arg(long)]
    pub no_catch_up: bool,
}

/// Environment and timeout overrides for every run (`run` and `schedule add`).
#[derive(Debug, Args)]
pub struct RunOverrides {
    /// Environment override for the worker process, KEY=VALUE (allowlisted
    /// prefixes such as HSA_, RADV_, POCL_). Repeatable.
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// An environment matrix row: run everything once per set, each set its
    /// own comparison row (spec key `...@NAME`). `NAME:` alone is the set
    /// without overrides. Repeatable, e.g. `--env-set stock:
    /// --env-set gfx1030:HSA_OVERRIDE_GFX_VERSION=10.3.0`.
    #[arg(long = "env-set", value_name = "NAME:KEY=VALUE,...")]
    pub env_sets: Vec<String>,
    /// Per-run timeout in seconds (overrides the suite's; default 120).
    #[arg(long, value_parser = parse_timeout_s)]
    pub timeout_s: Option<f64>,
    /// Measure until the 95% confidence interval of the median is within this many percent of
    /// it (after the minimums), or the time budget ends; 0 turns the target off. Overrides the
    /// suite's; default 1. A result that misses it (or whose robust spread is above 12.5%) is marked noisy.
    #[arg(long, value_name = "PCT", value_parser = parse_target_ci_pct)]
    pub target_ci_pct: Option<f64>,
    /// Time budget of that adaptive loop: seconds of measuring per run, after which the run ends
    /// even if its interval is wider than the target. Overrides the suite's; default 5 × the
    /// run's min_seconds.
    #[arg(long, value_name = "SECONDS", value_parser = parse_max_seconds)]
    pub max_seconds: Option<f64>,
}

/// `--timeout-s`: seconds within the bounds every run's timeout has ([`PartialSettings::check`]).
fn parse_timeout_s(text: &str) -> Result<f64, String> {
    let v: f64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number of seconds"))?;
    let given = PartialSettings {
        timeout_s: Some(v),
        ..PartialSettings::default()
    };
    given.check().map(|()| v).map_err(|e| e.message)
}

/// `--target-ci-pct`: a percentage in [0, 100].
fn parse_target_ci_pct(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=100.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "`{text}` is not a percentage in [0, 100] (0: no target)"
        )),
    }
}

/// `--max-seconds`: a positive number of seconds, at most a day.
fn parse_max_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= RunSettings::MAX_TIMEOUT_S => Ok(v),
        _ => Err(format!(
            "`{text}` is not a number of seconds in (0, {}]",
            RunSettings::MAX_TIMEOUT_S
        )),
    }
}

#[derive(Debug, Args)]
pub struct RegressionsArgs {
    /// Only since: a duration back from now (36h, 7d, 2w) or unix seconds.
    #[arg(long)]
    pub since: Option<String>,
    /// Exit 1 if any alert of this kind is listed.
    #[arg(long, value_enum)]
    pub fail_on: Option<FailOn>,
    /// List every verdict, not only alerts.
    #[arg(long)]
    pub all: bool,
    #[command(flatten)]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct OutliersArgs {
    /// The campaign to look at (default: the latest with results, of --suite when given).
    #[arg(long)]
    pub campaign: Option<i64>,
    /// The latest campaign of this suite.
    #[arg(long)]
    pub suite: Option<String>,
    /// Robust spreads (1.4826 × MAD across the group's devices) worse than the median a device
    /// must be.
    #[arg(long, default_value_t = crate::outliers::OutlierConfig::DEFAULT.k)]
    pub k: f64,
    /// The smallest gap from the group's median flagged, percent.
    #[arg(long, default_value_t = crate::outliers::OutlierConfig::DEFAULT.min_gap_pct)]
    pub min_gap_pct: f64,
    /// Groups with fewer devices on a spec are not judged.
    #[arg(long, default_value_t = crate::outliers::OutlierConfig::DEFAULT.min_group)]
    pub min_group: usize,
    #[command(flatten)]
    pub output: Output,
}

/// Which alerts fail `gpufleet regressions --fail-on`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FailOn {
    Regression,
    Improvement,
    Any,
}

/// The backends an agent can have (the one list, below both binaries).
const BACKENDS: [&str; BackendKind::ALL.len()] = BackendKind::NAMES;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Suite to run: smoke, standard, perf, models, llm, ceilings, or a path to a suite TOML file.
    /// Without it, run one ad-hoc spec given by --kernel, --variant, --param.
    #[arg(long)]
    pub suite: Option<String>,
    /// Agent(s) to run on (registered names). Repeatable.
    #[arg(long = "agent", required_unless_present = "dry_run")]
    pub agents: Vec<String>,
    /// Validate the specs and print what each would run (its weights, for a model, and the memory
    /// it needs on a device) without contacting an agent or storing anything.
    #[arg(long)]
    pub dry_run: bool,
    /// Only devices of these backends (cpu, opencl, vulkan, hip). Repeatable.
    #[arg(long = "backend", value_parser = BACKENDS)]
    pub backends: Vec<String>,
    /// Only these device ids (e.g. cpu:0). Repeatable.
    #[arg(long = "device")]
    pub devices: Vec<String>,
    /// With --suite: only these kernels. Without: the kernel to run.
    #[arg(long = "kernel")]
    pub kernels: Vec<String>,
    /// Ad-hoc: kernel variant (default: the kernel's default variant). Not with --suite (a
    /// suite names its variants).
    #[arg(long, conflicts_with = "suite")]
    pub variant: Option<String>,
    /// Ad-hoc: a parameter, NAME=INTEGER. Repeatable. Not with --suite.
    #[arg(long = "param", value_name = "NAME=VALUE", conflicts_with = "suite")]
    pub params: Vec<String>,
    /// Ad-hoc `llm`: the shape of the model a Hugging Face config.json describes (hidden_size,
    /// num_hidden_layers, heads, kv heads, intermediate_size, vocab_size, rope_theta,
    /// tie_word_embeddings), as `model=custom` and its parameters; a --param wins over the file.
    /// The agent receives the numbers; weights stay seeded.
    #[arg(long, value_name = "FILE", conflicts_with = "suite")]
    pub model_config: Option<PathBuf>,
    /// Ad-hoc: data type: f32, f16 where a backend has it, or (llm, gemv) q8_0 / q4_0 weights.
    #[arg(long, default_value = "f32", value_parser = parse_dtype)]
    pub dtype: Dtype,
    /// Ad-hoc: compute_only or with_transfers.
    #[arg(long, default_value_t = Mode::ComputeOnly)]
    pub mode: Mode,
    #[command(flatten)]
    pub overrides: RunOverrides,
    /// Minimum kernel window in seconds for the energy figures of devices
    /// with a power sensor. Default: the agent's choice (four sensor update
    /// periods, at least 1 s: short kernels are repeated untimed until the
    /// window is that long). A negative value turns those repeats off.
    #[arg(long, allow_negative_numbers = true)]
    pub power_window_s: Option<f64>,
    /// Ad-hoc: warm-up iterations at least (warm-up also lasts 0.05 s at least and goes on while the
    /// iteration times still fall, up to 1 s).
    #[arg(long, default_value_t = RunSettings::DEFAULT.warmup)]
    pub warmup: u32,
    /// Ad-hoc: minimum timed iterations.
    #[arg(long, default_value_t = RunSettings::DEFAULT.min_iterations)]
    pub min_iterations: u32,
    /// Ad-hoc: minimum seconds of timed iterations.
    #[arg(long, default_value_t = RunSettings::DEFAULT.min_seconds)]
    pub min_seconds: f64,
    /// Print the results as JSON on stdout (progress stays on stderr).
    #[arg(long)]
    pub json: bool,
}

/// Which stored results a listing shows, and how (shared by `compare` and `results`).
#[derive(Debug, Args)]
pub struct ResultScope {
    /// Only this campaign.
    #[arg(long)]
    pub campaign: Option<i64>,
    /// Only this kernel.
    #[arg(long)]
    pub kernel: Option<String>,
    /// Only this agent.
    #[arg(long)]
    pub agent: Option<String>,
    #[command(flatten)]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct ExportModelArgs {
    /// The network: simple_cnn, resnet18 or mobilenet_v2; or `llm` (the transformer of `--model`).
    pub kernel: String,
    /// `llm` only: the model shape (tiny, small, 1b, 8b, llama-3.2-3b, qwen2.5-7b, mistral-7b; see
    /// docs/models.md).
    #[arg(long, default_value = "tiny")]
    pub model: String,
    /// `llm` only: instead of --model, the shape a Hugging Face config.json describes.
    #[arg(long, value_name = "FILE")]
    pub model_config: Option<PathBuf>,
    /// `llm` only: the weights' dtype, f32 or f16 (weights.f32 or weights.f16), or q8_0 / q4_0
    /// (weights.f32 holding values the blocks keep exactly, for llama.cpp's quantizer).
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// `llm` only: token ids written per sequence (tokens.i32, `--batch` sequences).
    #[arg(long, default_value_t = 512)]
    pub tokens: usize,
    /// Images per batch.
    #[arg(long, default_value_t = 1)]
    pub batch: i64,
    /// Seed of the images and weights: a run's spec seed (every campaign's runs use this default).
    #[arg(long, default_value_t = crate::campaign::plan::CAMPAIGN_SEED)]
    pub seed: u64,
    /// Directory to write (created if missing).
    #[arg(long)]
    pub out: std::path::PathBuf,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Only results of campaigns of this suite.
    #[arg(long)]
    pub suite: Option<String>,
    /// One column per device (`agent:device`), per agent or per backend; one row per spec.
    #[arg(long, value_enum, default_value_t = By::Device)]
    pub by: By,
    /// Show each cell's % change against a column (its key, a device id such as `opencl:0` or a
    /// device name) or, given a number, against the same device's result in that campaign.
    #[arg(long, value_name = "CAMPAIGN|DEVICE")]
    pub baseline: Option<String>,
    #[command(flatten)]
    pub scope: ResultScope,
}

#[derive(Debug, Args)]
pub struct ResultsArgs {
    #[command(flatten)]
    pub scope: ResultScope,
    /// Only this status (ok, invalid, crashed, timed_out, out_of_memory, error, ...).
    #[arg(long, value_parser = parse_status)]
    pub status: Option<String>,
    /// Include the raw per-iteration times: in each result with JSON, one line per iteration
    /// (run_id, iteration, seconds) with CSV.
    #[arg(long)]
    pub samples: bool,
    /// Only results stored since then: a duration back from now (90m, 36h, 7d, 2w) or unix
    /// seconds.
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// How many of the newest matching results to print (oldest of them first).
    #[arg(long, default_value_t = 1000, value_parser = parse_limit)]
    pub limit: usize,
    /// Print every matching result, however many, reading the store a page at a time.
    #[arg(long, conflicts_with = "limit")]
    pub all: bool,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Suite to run on the local agent.
    #[arg(long, default_value = "smoke")]
    pub suite: String,
    /// Print the comparison as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `--limit`: 1 to the store's largest page.
fn parse_limit(text: &str) -> Result<usize, String> {
    let n = text.parse::<usize>().map_err(|_| {
        format!(
            "expected a number of results from 1 to {}",
            crate::store::MAX_PAGE
        )
    })?;
    crate::store::check_limit(n)
}

/// `--status`: a status that exists (an unknown one would match nothing).
fn parse_status(text: &str) -> Result<String, String> {
    gpufleet_proto::v1::RunStatus::parse(text).map(|s| s.name().to_string())
}

/// `--dtype`: a known dtype name, case-insensitive.
fn parse_dtype(text: &str) -> Result<Dtype, String> {
    Dtype::parse(text).ok_or_else(|| {
        let known: Vec<&str> = Dtype::ALL.iter().map(|d| d.name()).collect();
        format!("unknown dtype `{text}` (known: {})", known.join(", "))
    })
}
