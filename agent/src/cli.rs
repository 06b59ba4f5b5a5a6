//! Command line of `gpufleet-agent`. Clap types stay here.

use clap::parser::ValueSource;
use clap::{Parser, Subcommand};
use gpufleet_agent::config::AgentFile;
use gpufleet_agent::env::DEFAULT_CONFIG;
use gpufleet_proto::addr::parse_host_port;
use std::net::SocketAddr;

/// gpufleet agent: serves this host's compute backends (cpu, OpenCL, Vulkan,
/// and HIP in a build with the `hip` feature) to a gpufleet coordinator over
/// gRPC.
///
/// Without a subcommand it serves. Every run executes in a child worker
/// process with a watchdog, so a crashing or hanging driver becomes a result,
/// not a dead agent.
#[derive(Debug, Parser)]
#[command(name = "gpufleet-agent", version)]
pub struct Cli {
    /// Configuration file (TOML: connect, name, token_file, pin_sha256 or ca_cert, listen,
    /// metrics_listen, state_dir, cache_dir, sysfs_root, power_rate_hz, [loader] allow,
    /// [device_pci]; see
    /// docs/install.md). Flags and GPUFLEET_* variables override it. Default:
    /// /etc/gpufleet/agent.toml when it exists.
    #[arg(long, env = "GPUFLEET_CONFIG")]
    pub config: Option<std::path::PathBuf>,
    /// Serve the `Agent` gRPC service here (direct mode: the coordinator
    /// dials this address). Anything other than loopback requires --token.
    /// Default: 127.0.0.1:50051 unless --connect is given; both may be on.
    /// HOST:PORT, HOST an address or a name such as localhost (its IPv4 address when it has one).
    #[arg(long, env = "GPUFLEET_LISTEN", value_parser = parse_host_port)]
    pub listen: Option<SocketAddr>,
    /// Serve Prometheus metrics (`GET /metrics`, plain HTTP, no secrets: power, temperature and
    /// clock per sensor channel, runs by status, worker crashes, queue depth) here, e.g.
    /// 127.0.0.1:9464 or localhost:9464.
    #[arg(long, env = "GPUFLEET_METRICS_LISTEN", value_parser = parse_host_port)]
    pub metrics_listen: Option<SocketAddr>,
    /// The agent's secret. Direct mode: clients must send it
    /// (`authorization: Bearer <token>`). Dial-in: the enrolment token
    /// `gpufleet agents add NAME --dial-in` printed.
    #[arg(long, env = "GPUFLEET_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Read the token from this file (first line; for secrets mounted into
    /// containers).
    #[arg(long, env = "GPUFLEET_TOKEN_FILE", conflicts_with = "token")]
    pub token_file: Option<std::path::PathBuf>,
    /// The configuration file `token_file` came from, when it did (for its errors).
    #[arg(skip)]
    pub token_file_from: Option<std::path::PathBuf>,
    /// Dial in to a coordinator's fleet listener (`gpufleet serve
    /// --fleet-listen`), e.g. https://coordinator.example:7443, and take runs
    /// from it over one long-lived stream. For hosts that accept no inbound
    /// connections (Runpod pods, NAT). http:// only to a loopback address.
    /// Give it more than once (or comma-separated in GPUFLEET_CONNECT) for
    /// several serves of one fleet: when a link fails the agent dials the
    /// next, in turn; finished runs wait in the outbox until one stores them.
    #[arg(long, env = "GPUFLEET_CONNECT", value_delimiter = ',')]
    pub connect: Vec<String>,
    /// The name this agent was enrolled under (default: $RUNPOD_POD_ID,
    /// else the host name).
    #[arg(long, env = "GPUFLEET_NAME")]
    pub name: Option<String>,
    /// Verify an https coordinator by this CA certificate (PEM).
    #[arg(long, env = "GPUFLEET_CA_CERT")]
    pub ca_cert: Option<std::path::PathBuf>,
    /// Verify an https coordinator by the SHA-256 of its certificate (hex,
    /// as `gpufleet serve --tls-self-signed` prints it).
    #[arg(long, env = "GPUFLEET_PIN_SHA256", conflicts_with = "ca_cert")]
    pub pin_sha256: Option<String>,
    /// Where the outbox of finished runs not yet acknowledged by the
    /// coordinator is kept (default: $XDG_STATE_HOME/gpufleet or
    /// ~/.local/state/gpufleet).
    #[arg(long, env = "GPUFLEET_STATE_DIR")]
    pub state_dir: Option<std::path::PathBuf>,
    /// TLS certificate (PEM) for --listen; required beyond loopback.
    #[arg(long, env = "GPUFLEET_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// TLS private key (PEM) for --tls-cert.
    #[arg(long, env = "GPUFLEET_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// Longest wait between redials, seconds (waits start at 0.5 s and
    /// double, with jitter).
    #[arg(long, default_value_t = 30.0)]
    pub max_backoff_s: f64,
    /// Serve the debug kernels debug_crash, debug_hang, debug_wrong and
    /// debug_alloc.
    #[arg(long)]
    pub enable_debug_kernels: bool,
    /// Run workers without a memory limit (RLIMIT_DATA of their admitted
    /// size); for a driver that maps large private memory it never touches.
    /// Admission against the host's available memory still applies.
    #[arg(long)]
    pub no_worker_memory_limit: bool,
    /// Start a fresh worker process for every run. By default a worker whose run ended ok is
    /// kept (up to 30 s idle) for the next run with the same backend, device, environment
    /// overrides and memory limit, which saves a process start and a driver initialisation per
    /// run; a crash, a timeout, a cancel or any other status still ends it. Results say which
    /// (`worker: new|reused` in their config).
    #[arg(long)]
    pub fresh_worker_per_run: bool,
    /// Runs allowed to wait per device before new ones get RESOURCE_EXHAUSTED.
    #[arg(long, default_value_t = 16)]
    pub queue_capacity: usize,
    /// Seconds each backend's device discovery may take before it is
    /// declared unavailable.
    #[arg(long, default_value_t = 30.0)]
    pub discovery_timeout_s: f64,
    /// Where compiled programs and tuned parameters are cached (default:
    /// $XDG_CACHE_HOME/gpufleet or ~/.cache/gpufleet).
    #[arg(long, env = "GPUFLEET_CACHE_DIR")]
    pub cache_dir: Option<std::path::PathBuf>,
    /// DEVICE=BDF: the PCI address of a device whose driver reports none (Clover's or rusticl's
    /// OpenCL on an RX 580, say), e.g. `opencl:0=0000:0a:00.0` with the id `describe` prints. It
    /// joins the device to its PCIe link (an outlier's likely cause) and its power sensors. A
    /// driver's own address is never replaced. Repeatable; comma-separated in the variable;
    /// `[device_pci]` in the config file.
    #[arg(
        long,
        env = "GPUFLEET_DEVICE_PCI",
        value_delimiter = ',',
        value_parser = gpufleet_agent::host::pci::parse_device_pci
    )]
    pub device_pci: Vec<(String, String)>,
    #[command(flatten)]
    pub power: PowerArgs,
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Power sensor options (shared by serving, `describe` and `power`).
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Power sensors")]
pub struct PowerArgs {
    /// Root under which /sys/class/drm (amdgpu hwmon) and
    /// /sys/class/powercap (RAPL) are read; for containers that mount the
    /// host's sysfs elsewhere.
    #[arg(long, global = true, default_value = "/", env = "GPUFLEET_SYSFS_ROOT")]
    pub sysfs_root: std::path::PathBuf,
    /// Rate at which sysfs, NVML and RAPL are read, in Hz (at most 1000).
    #[arg(long, global = true, default_value_t = 20.0, value_parser = parse_rate)]
    pub power_rate_hz: f64,
    /// `rocm-smi` to call for power (`off` disables it).
    #[arg(long, global = true, default_value = "rocm-smi")]
    pub rocm_smi: String,
    /// `amd-smi` to call for power (`off` disables it).
    #[arg(long, global = true, default_value = "amd-smi")]
    pub amd_smi: String,
    /// `ipmitool` to call for whole-node power (`off` disables it).
    #[arg(long, global = true, default_value = "ipmitool")]
    pub ipmitool: String,
    /// Seconds one call of rocm-smi/amd-smi/ipmitool may take.
    #[arg(long, global = true, default_value_t = 5.0)]
    pub power_command_timeout_s: f64,
    /// Seconds between calls of rocm-smi/amd-smi/ipmitool.
    #[arg(long, global = true, default_value_t = 1.0)]
    pub power_command_interval_s: f64,
    /// Do not load NVML.
    #[arg(long, global = true)]
    pub no_nvml: bool,
}

impl Cli {
    /// The command line, with what neither a flag nor a `GPUFLEET_*` variable set taken from the
    /// configuration file (`--config`, or /etc/gpufleet/agent.toml when it exists); the file, if
    /// one was read.
    ///
    /// # Errors
    /// The file cannot be read or is refused (the message names the key and the line), or it
    /// names both a pin and a CA.
    pub fn with_file(
        mut self,
        matches: &clap::ArgMatches,
    ) -> anyhow::Result<(Cli, Option<AgentFile>)> {
        let path = self.config.clone().unwrap_or_else(|| DEFAULT_CONFIG.into());
        if self.config.is_none() && !path.exists() {
            return Ok((self, None));
        }
        let file = AgentFile::load(&path).map_err(anyhow::Error::msg)?;
        if file.pin_sha256.is_some() && file.ca_cert.is_some() {
            anyhow::bail!(
                "config file {}: pin_sha256 and ca_cert: give one of them",
                path.display()
            );
        }
        let given = |id: &str| {
            matches!(
                matches.value_source(id),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            )
        };
        let f = file.clone();
        if self.connect.is_empty() {
            self.connect = f.connect;
        }
        self.name = self.name.or(f.name);
        self.listen = self.listen.or(f.listen);
        self.metrics_listen = self.metrics_listen.or(f.metrics_listen);
        self.state_dir = self.state_dir.or(f.state_dir);
        self.cache_dir = self.cache_dir.or(f.cache_dir);
        if self.token.is_none() && self.token_file.is_none() && f.token_file.is_some() {
            self.token_file = f.token_file;
            self.token_file_from = Some(path.clone());
        }
        if self.pin_sha256.is_none() && self.ca_cert.is_none() {
            self.pin_sha256 = f.pin_sha256;
            self.ca_cert = f.ca_cert;
        }
        // Key by key: a flag's device wins over the file's entry for it.
        let mut pci: Vec<(String, String)> = f.device_pci.into_iter().collect();
        pci.append(&mut self.device_pci);
        self.device_pci = pci;
        if !given("sysfs_root")
            && let Some(root) = f.sysfs_root
        {
            self.power.sysfs_root = root;
        }
        if !given("power_rate_hz")
            && let Some(rate) = f.power_rate_hz
        {
            self.power.power_rate_hz = rate;
        }
        Ok((self, Some(file)))
    }
}

fn parse_rate(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if v > 0.0 && v <= 1000.0 {
        Ok(v)
    } else {
        Err(format!("{v} is outside (0, 1000] Hz"))
    }
}

impl PowerArgs {
    /// The agent's power configuration.
    pub fn config(&self) -> gpufleet_agent::power::PowerConfig {
        let tool = |s: &str| (s != "off" && !s.is_empty()).then(|| std::path::PathBuf::from(s));
        gpufleet_agent::power::PowerConfig {
            sysfs_root: self.sysfs_root.clone(),
            rate_hz: self.power_rate_hz,
            rocm_smi: tool(&self.rocm_smi),
            amd_smi: tool(&self.amd_smi),
            ipmitool: tool(&self.ipmitool),
            command_timeout: std::time::Duration::from_secs_f64(
                self.power_command_timeout_s.clamp(0.1, 300.0),
            ),
            command_interval: std::time::Duration::from_secs_f64(
                self.power_command_interval_s.clamp(0.1, 3600.0),
            ),
            nvml: !self.no_nvml,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the local inventory (host, backends, devices, kernels) and exit,
    /// without starting a server.
    Describe {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Read the power sensors for a while without serving: prints each
    /// channel with its measured update period, the readings, and what the
    /// sampler cost in CPU time.
    Power {
        /// How long to sample.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Print one JSON object (channels, sample counts, cost) instead of
        /// text.
        #[arg(long)]
        json: bool,
    },
    /// FOR TESTS AND BENCHMARKS ONLY: simulate N dial-in agents in this process.
    ///
    /// Opens N real Fleet streams to the coordinator(s) from one process, one per simulated
    /// dial-in agent (TLS, enrolment tokens, the real protocol and outbox), and answers their
    /// runs with results drawn from a seeded distribution. No kernel runs: the device each agent
    /// describes is a simulated one and says so (name, vendor, driver, feature flag
    /// `simulated`); never take its results for measurements.
    ///
    /// Enrol the agents first (`gpufleet agents add sim-0000 --dial-in --json`, ...) and write
    /// one `NAME TOKEN` line per agent to the tokens file.
    #[command(hide = true)]
    Simulate(Box<SimulateArgs>),
}

/// The options of `gpufleet-agent simulate`.
#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    /// How many agents: PREFIX-0000 .. PREFIX-(N-1).
    #[arg(long)]
    pub agents: usize,
    /// The agents' name prefix.
    #[arg(long, default_value = "sim")]
    pub name_prefix: String,
    /// The enrolment tokens: one `NAME TOKEN` pair per line (`#` comments allowed).
    #[arg(long)]
    pub tokens: std::path::PathBuf,
    /// A coordinator's fleet address (`gpufleet serve --fleet-listen`), as the agent's
    /// --connect; repeat it for several serves of one fleet, dialed in turn.
    #[arg(long, required = true)]
    pub connect: Vec<String>,
    /// Verify an https coordinator by this CA certificate (PEM).
    #[arg(long)]
    pub ca_cert: Option<std::path::PathBuf>,
    /// Verify an https coordinator by the SHA-256 of its certificate (hex).
    #[arg(long, conflicts_with = "ca_cert")]
    pub pin_sha256: Option<String>,
    /// Each agent's state (its outbox of unacknowledged results) goes in DIR/NAME.
    #[arg(long)]
    pub state_dir: std::path::PathBuf,
    /// Seeds the devices' factors and every run's noise.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Device-to-device spread, a fraction: each device's factor is drawn once from the seed
    /// (0.01: devices differ by about 1 %); each run adds a quarter of it as run-to-run noise.
    #[arg(long, default_value_t = 0.01)]
    pub spread: f64,
    /// NAME=FRACTION: that agent's iteration times are 1 + FRACTION times its own draw (0.10:
    /// 10 % longer), to plant an outlier. Repeatable.
    #[arg(long, value_parser = gpufleet_agent::simulate::options::parse_slow)]
    pub slow: Vec<(String, f64)>,
    /// NAME=LINK: that agent's device reports PCIe LINK (e.g. `gen3 x4`) below its maximum,
    /// gen3 x16, as an outlier cause. Repeatable.
    #[arg(long, value_parser = gpufleet_agent::simulate::options::parse_pcie)]
    pub pcie: Vec<(String, String)>,
    /// Describe the simulated devices as this real device: FILE is what `gpufleet-agent describe
    /// --json` printed on its host; its model name, backend, driver and memory become the
    /// simulated devices' (vendor, feature flag and host still say simulated), so the real device
    /// and the simulated ones form one sibling group for `gpufleet outliers`.
    #[arg(long)]
    pub like: Option<std::path::PathBuf>,
    /// The device of --like's file when it describes several (its id, e.g. `opencl:0`).
    #[arg(long, requires = "like")]
    pub like_device: Option<String>,
    /// What `copy` measures on an average simulated device, GB/s (other kernels move their bytes
    /// at that rate too). Default: 400.
    #[arg(long)]
    pub copy_gbps: Option<f64>,
    /// Seconds each run takes once its device is free.
    #[arg(long, default_value_t = 0.0)]
    pub run_s: f64,
    /// Longest wait between redials, seconds.
    #[arg(long, default_value_t = 30.0)]
    pub max_backoff_s: f64,
}

impl SimulateArgs {
    /// The simulation's configuration.
    ///
    /// # Errors
    /// A --run-s, --max-backoff-s or --copy-gbps out of range, or a --like file that cannot be
    /// read or does not describe the device.
    pub fn config(self) -> anyhow::Result<gpufleet_agent::simulate::SimConfig> {
        use gpufleet_agent::simulate::device::Model;
        use gpufleet_proto::tls::Trust;
        if !(0.0..=3600.0).contains(&self.run_s) {
            anyhow::bail!("--run-s {} is outside [0, 3600]", self.run_s);
        }
        if !(self.max_backoff_s.is_finite() && self.max_backoff_s >= 0.5) {
            anyhow::bail!("--max-backoff-s must be at least 0.5");
        }
        let trust = match (self.ca_cert, self.pin_sha256) {
            (Some(ca), _) => Some(Trust::Ca(ca)),
            (None, Some(pin)) => Some(Trust::Pin(pin)),
            (None, None) => None,
        };
        let model = match &self.like {
            None => Model::default(),
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| anyhow::anyhow!("--like {}: {e}", path.display()))?;
                Model::like(&text, self.like_device.as_deref())
                    .map_err(|e| anyhow::anyhow!("--like {}: {e}", path.display()))?
            }
        };
        let copy_bytes_per_s = match self.copy_gbps {
            None => gpufleet_agent::simulate::draw::COPY_BYTES_PER_S,
            Some(g) if g.is_finite() && g > 0.0 && g <= 1e6 => g * 1e9,
            Some(g) => anyhow::bail!("--copy-gbps {g} is outside (0, 1000000] GB/s"),
        };
        Ok(gpufleet_agent::simulate::SimConfig {
            model,
            copy_bytes_per_s,
            agents: self.agents,
            name_prefix: self.name_prefix,
            tokens: self.tokens,
            urls: self.connect,
            trust,
            state_dir: self.state_dir,
            seed: self.seed,
            spread: self.spread,
            slow: self.slow,
            pcie: self.pcie,
            run_s: std::time::Duration::from_secs_f64(self.run_s),
            backoff_max: std::time::Duration::from_secs_f64(self.max_backoff_s),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_file(args: &[&str]) -> anyhow::Result<(Cli, Option<AgentFile>)> {
        use clap::{CommandFactory, FromArgMatches};
        let m = Cli::command().try_get_matches_from(args).unwrap();
        Cli::from_arg_matches(&m).unwrap().with_file(&m)
    }

    #[test]
    fn flags_override_the_config_file_key_by_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.toml");
        std::fs::write(
            &path,
            "connect = \"https://fleet:7443\"\nname = \"rig\"\ntoken_file = \"/etc/gpufleet/token\"\n\
             pin_sha256 = \"ab\"\npower_rate_hz = 10\nsysfs_root = \"/host\"\n\
             [device_pci]\n\"opencl:0\" = \"0000:0a:00.0\"\n\"vulkan:1\" = \"0000:0b:00.0\"\n",
        )
        .unwrap();
        let p = path.to_str().unwrap();
        let (cli, file) = with_file(&["gpufleet-agent", "--config", p]).unwrap();
        assert!(file.is_some());
        assert_eq!(cli.connect, ["https://fleet:7443"]);
        assert_eq!(cli.name.as_deref(), Some("rig"));
        assert_eq!(cli.power.power_rate_hz, 10.0);
        assert_eq!(cli.power.sysfs_root, std::path::PathBuf::from("/host"));
        assert_eq!(cli.token_file, Some("/etc/gpufleet/token".into()));
        let (cli, _) = with_file(&[
            "gpufleet-agent",
            "--config",
            p,
            "--name",
            "other",
            "--power-rate-hz",
            "5",
            "--ca-cert",
            "/ca.pem",
        ])
        .unwrap();
        assert_eq!(cli.name.as_deref(), Some("other"));
        assert_eq!(cli.power.power_rate_hz, 5.0);
        assert_eq!(
            (cli.pin_sha256, cli.ca_cert),
            (None, Some("/ca.pem".into()))
        );
        // A flag's device wins over the file's entry for it; the file's others stay.
        let (cli, _) = with_file(&[
            "gpufleet-agent",
            "--config",
            p,
            "--device-pci",
            "opencl:0=0c:00.0",
        ])
        .unwrap();
        let pci: std::collections::BTreeMap<_, _> = cli.device_pci.into_iter().collect();
        assert_eq!(pci["opencl:0"], "0000:0c:00.0");
        assert_eq!(pci["vulkan:1"], "0000:0b:00.0");
        let e = Cli::try_parse_from(["gpufleet-agent", "--device-pci", "opencl:0"]).unwrap_err();
        assert!(e.to_string().contains("DEVICE=BDF"), "{e}");
        // A file given by name must exist; a bad one is refused naming the key and line.
        let e = with_file(&["gpufleet-agent", "--config", "/nonexistent.toml"]).unwrap_err();
        assert!(e.to_string().contains("/nonexistent.toml"), "{e}");
        std::fs::write(&path, "name = \"rig\"\ncolour = \"red\"\n").unwrap();
        let e = with_file(&["gpufleet-agent", "--config", p])
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2") && e.contains("colour"), "{e}");
    }

    #[test]
    fn simulate_is_hidden_and_says_it_is_for_tests_only() {
        use clap::CommandFactory;
        let help = Cli::command().render_help().to_string();
        assert!(!help.contains("simulate"), "{help}");
        let mut cmd = Cli::command();
        let sub = cmd.find_subcommand_mut("simulate").unwrap();
        let help = sub.render_long_help().to_string();
        assert!(help.contains("FOR TESTS AND BENCHMARKS ONLY"), "{help}");
        let cli = Cli::try_parse_from([
            "gpufleet-agent",
            "simulate",
            "--agents",
            "20",
            "--tokens",
            "/t",
            "--connect",
            "https://fleet:7443",
            "--pin-sha256",
            "ab",
            "--state-dir",
            "/s",
            "--slow",
            "sim-0003=0.10",
            "--pcie",
            "sim-0004=gen3 x4",
        ])
        .unwrap();
        let Some(Command::Simulate(args)) = cli.command else {
            panic!("not simulate")
        };
        let cfg = args.config().unwrap();
        assert_eq!(
            (cfg.agents, cfg.name_prefix.as_str(), cfg.spread),
            (20, "sim", 0.01)
        );
        assert_eq!(cfg.slow, [("sim-0003".to_string(), 0.10)]);
        assert_eq!(cfg.pcie, [("sim-0004".to_string(), "gen3 x4".to_string())]);
        assert!(matches!(
            cfg.trust,
            Some(gpufleet_proto::tls::Trust::Pin(_))
        ));
        let e = Cli::try_parse_from(["gpufleet-agent", "simulate", "--agents", "2", "--slow", "x"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("NAME=VALUE"), "{e}");
    }

    #[test]
    fn listen_flags_take_a_host_name() {
        let cli = Cli::try_parse_from([
            "gpufleet-agent",
            "--listen",
            "localhost:0",
            "--metrics-listen",
            "localhost:9464",
        ])
        .unwrap();
        let listen = cli.listen.unwrap();
        assert!(listen.ip().is_loopback() && listen.is_ipv4(), "{listen}");
        assert_eq!(listen.port(), 0);
        assert_eq!(cli.metrics_listen.unwrap().port(), 9464);
        let err = Cli::try_parse_from(["gpufleet-agent", "--listen", "localhost"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--listen") && err.contains("`localhost` is not HOST:PORT"),
            "{err}"
        );
    }
}
