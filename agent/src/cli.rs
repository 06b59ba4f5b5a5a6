//! Command line of `gpufleet-agent`. Clap types stay here.

use clap::{Parser, Subcommand};
use std::net::SocketAddr;

/// gpufleet agent: serves this host's compute backends (cpu today; OpenCL,
/// Vulkan and HIP as they are added) to a gpufleet coordinator over gRPC.
///
/// Without a subcommand it serves. Every run executes in a child worker
/// process with a watchdog, so a crashing or hanging driver becomes a result,
/// not a dead agent.
#[derive(Debug, Parser)]
#[command(name = "gpufleet-agent", version)]
pub struct Cli {
    /// Address to listen on. Anything other than loopback requires --token.
    #[arg(long, default_value = "127.0.0.1:50051", env = "GPUFLEET_AGENT_LISTEN")]
    pub listen: SocketAddr,
    /// Bearer token clients must send (`authorization: Bearer <token>`).
    #[arg(long, env = "GPUFLEET_AGENT_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Serve the debug kernels debug_crash, debug_hang and debug_wrong.
    #[arg(long)]
    pub enable_debug_kernels: bool,
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
    #[command(subcommand)]
    pub command: Option<Command>,
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
}
