//! `gpufleet agents`' subcommands.

use super::output::Output;
use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum AgentsCommand {
    /// Register an agent under a name: a direct agent by its URL, or (with
    /// --dial-in) an agent that dials in to `gpufleet serve --fleet-listen`,
    /// for which a one-time enrolment token is printed (only its hash is
    /// stored: copy it now).
    Add {
        /// Short name ([A-Za-z0-9_.-], up to 64 characters).
        name: String,
        /// The agent's gRPC address, e.g. http://127.0.0.1:50051 (direct
        /// agents only).
        #[arg(required_unless_present = "dial_in", conflicts_with = "dial_in")]
        url: Option<String>,
        /// Bearer token the agent was started with. With --dial-in: the
        /// enrolment token to use instead of a fresh random one (16+ printable
        /// characters; for provisioning, e.g. docker/compose.yaml).
        #[arg(long)]
        token: Option<String>,
        /// An https agent's certificate SHA-256 (hex), as the agent's
        /// certificate tool prints it.
        #[arg(long, conflicts_with_all = ["dial_in", "ca_cert"])]
        pin_sha256: Option<String>,
        /// CA certificate (PEM file) an https agent's certificate chains to.
        #[arg(long, conflicts_with = "dial_in")]
        ca_cert: Option<std::path::PathBuf>,
        /// The agent dials in: make its enrolment token and print what the agent's host needs
        /// (agent.toml's lines, or the `gpufleet-agent --connect ...` command), the token itself
        /// only in a file or once on this terminal, never in a command.
        #[arg(long)]
        dial_in: bool,
        /// With --dial-in: the fleet listener the agent dials, as it reaches it (default:
        /// https://THIS_HOST:7443, the packaged coordinator's port), printed in the advice.
        #[arg(long, requires = "dial_in", value_name = "URL")]
        connect: Option<String>,
        /// With --dial-in: write the token to this new file (mode 600) instead of printing it;
        /// the advice then names the file.
        #[arg(long, requires = "dial_in", value_name = "FILE")]
        token_out: Option<std::path::PathBuf>,
        /// With --dial-in: print `{"name":…,"token":…,"connect":…,"pin_sha256":…}`.
        #[arg(long, requires = "dial_in")]
        json: bool,
    },
    /// List registered agents.
    List {
        /// Also ask each agent whether it is reachable.
        #[arg(long)]
        check: bool,
        #[command(flatten)]
        output: Output,
    },
    /// Forget an agent (its results are kept).
    Rm { name: String },
}
