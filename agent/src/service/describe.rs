//! The Describe answer: host, devices, backends (with why unavailable),
//! kernels and power sources.

use super::{convert, power};
use crate::run::AgentCore;
use gpufleet_proto::v1 as pb;

impl AgentCore {
    /// The Describe answer.
    pub fn describe(&self) -> pb::AgentInfo {
        let debug = self.config.enable_debug_kernels;
        pb::AgentInfo {
            agent_version: env!("CARGO_PKG_VERSION").to_string(),
            host: Some(convert::host(&self.inventory.host)),
            devices: self
                .inventory
                .devices()
                .map(|(_, d)| convert::device(d))
                .collect(),
            backends: self
                .inventory
                .backends
                .iter()
                .map(|b| convert::backend(b, debug))
                .collect(),
            kernels: gpufleet_kernels::catalog()
                .iter()
                .filter(|k| debug || !k.debug)
                .map(convert::kernel)
                .collect(),
            power_sources: power::describe(self),
            debug_kernels: debug,
            queue_capacity: self.config.queue_capacity as u32,
        }
    }
}
