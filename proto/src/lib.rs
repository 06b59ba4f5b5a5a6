//! gpufleet's wire contract: the `gpufleet.v1` protobuf package compiled to
//! Rust (tonic services, prost messages) plus small conversions.
//!
//! # Layout
//! - `gpufleet/v1/agent.proto`: the `Agent` service (Describe, Run, Cancel,
//!   StreamPower) and its messages; the source of truth.
//! - `gpufleet/v1/fleet.proto`: the `Fleet` service (Attach) that agents
//!   dialing in to `gpufleet serve` hold open, and its messages.
//! - [`v1`]: the generated code.
//! - [`addr`]: `HOST:PORT` (an IPv4 address, a bracketed IPv6 one, or a name such as
//!   `localhost`), the one parser of the address flags of both binaries.
//! - [`convert`]: string names of the enums (`ok`, `compute_only`, ...) used by
//!   the CLI, the store and the JSON outputs, so every part spells them alike.
//! - [`digest`]: the SHA-256 hex digest (TLS pins, stored token hashes, content names).
//! - [`display`]: the text of an `AgentInfo`, shared by `gpufleet-agent
//!   describe` and `gpufleet describe`.
//! - [`power`]: one power sample ([`power::Reading`], [`power::PowerPoint`]) shared by the
//!   agent's sampler, the wire and the coordinator's store, with its wire conversions.
//! - [`settings`]: the measurement settings a `RunSpec` gives (`RunSettings` is the kernels
//!   crate's `PartialSettings`), and the one reading of the older top-level fields.
//! - [`FILE_DESCRIPTOR_SET`]: the encoded descriptors, for server reflection.
//!
//! - [`tls`]: how a client verifies a gpufleet server (a CA, or the pinned
//!   SHA-256 of its certificate) and the TLS connector for tonic, shared by
//!   the agent dialing in and the coordinator dialing a direct agent.
//!
//! Beyond the transport this crate holds no logic: validation lives in
//! `gpufleet-kernels`, the service in `gpufleet-agent`.

pub mod addr;
pub mod convert;
pub mod digest;
pub mod display;
pub mod power;
pub mod settings;
pub mod tls;

/// Generated code of package `gpufleet.v1`.
#[allow(clippy::all, missing_docs)]
pub mod v1 {
    tonic::include_proto!("gpufleet.v1");
}

/// Encoded `FileDescriptorSet` of the package, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/gpufleet_v1_descriptor.bin"));
