//! Human-readable text of an `AgentInfo`, shared by `gpufleet-agent
//! describe` and `gpufleet describe` so both print the same thing.

use crate::v1::{AgentInfo, Device};
use std::fmt::Write;

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

fn device_line(out: &mut String, d: &Device) {
    let _ = writeln!(out, "  {}  {} ({})", d.id, d.name, d.vendor);
    let _ = write!(
        out,
        "      arch {}  units {}  clock {} MHz  memory {}",
        d.arch,
        d.compute_units,
        d.clock_mhz,
        gib(d.memory_bytes)
    );
    if !d.pci_bus_id.is_empty() {
        let _ = write!(out, "  pci {}", d.pci_bus_id);
    }
    let _ = writeln!(out);
    if !d.driver_version.is_empty() || !d.api_version.is_empty() {
        let _ = writeln!(
            out,
            "      driver {}  api {}",
            d.driver_version, d.api_version
        );
    }
    if !d.features.is_empty() {
        let _ = writeln!(out, "      features {}", d.features.join(" "));
    }
    if let Some(p) = &d.peaks {
        let peaks = [
            ("fp32", p.fp32_flops, "GFLOP/s", &p.fp32_source),
            ("memory", p.memory_bytes_per_s, "GB/s", &p.memory_source),
        ];
        for (what, value, unit, source) in peaks {
            if value > 0.0 {
                let _ = writeln!(
                    out,
                    "      peak {what} {:.1} {unit} ({source})",
                    value / 1e9
                );
            }
        }
    }
}

/// Multi-line description: host, backends (with the reason any is
/// unavailable), devices, kernels, power sources.
pub fn agent_info_text(info: &AgentInfo) -> String {
    let mut out = String::new();
    if let Some(h) = &info.host {
        let _ = writeln!(
            out,
            "host {}  ({}, kernel {}, {})",
            h.hostname, h.os, h.kernel_version, h.arch
        );
        let _ = writeln!(
            out,
            "  cpu {}  {} cores / {} threads  memory {}",
            h.cpu_model,
            h.physical_cores,
            h.logical_cores,
            gib(h.memory_bytes)
        );
        if !h.container_hints.is_empty() {
            let _ = writeln!(out, "  container: {}", h.container_hints.join(", "));
        }
    }
    let _ = writeln!(
        out,
        "agent {}  debug kernels {}",
        info.agent_version,
        if info.debug_kernels { "on" } else { "off" }
    );
    let _ = writeln!(out, "backends:");
    for b in &info.backends {
        if b.available {
            let _ = writeln!(
                out,
                "  {:<8} available  ({} kernels)",
                b.name,
                b.kernels.len()
            );
        } else {
            let _ = writeln!(out, "  {:<8} unavailable: {}", b.name, b.reason);
        }
    }
    let _ = writeln!(out, "devices:");
    if info.devices.is_empty() {
        let _ = writeln!(out, "  none");
    }
    for d in &info.devices {
        device_line(&mut out, d);
    }
    let _ = writeln!(out, "kernels:");
    for k in &info.kernels {
        let _ = writeln!(
            out,
            "  {:<24} [{}]{}",
            k.name,
            k.variants.join(","),
            if k.host_only { "  (cpu only)" } else { "" }
        );
        // Each parameter with its default and the bounds a run may ask for.
        let params: Vec<String> = k
            .params
            .iter()
            .map(|p| format!("{}={} [{}..{}]", p.name, p.default_value, p.min, p.max))
            .collect();
        if !params.is_empty() {
            let _ = writeln!(out, "  {:<24} {}", "", params.join("  "));
        }
    }
    let _ = writeln!(out, "power sources:");
    if info.power_sources.is_empty() {
        let _ = writeln!(out, "  none");
    }
    for p in &info.power_sources {
        if !p.available && p.scope.is_empty() {
            let _ = writeln!(out, "  {:<13} unavailable: {}", p.name, p.reason);
            continue;
        }
        let target = if p.device_ids.is_empty() {
            if p.pci_bus_id.is_empty() {
                "host".to_string()
            } else {
                p.pci_bus_id.clone()
            }
        } else {
            p.device_ids.join(", ")
        };
        let period = if p.measured_period_s > 0.0 {
            format!("updates every {:.3} s (measured)", p.measured_period_s)
        } else {
            format!("updates every {:.3} s (nominal)", p.nominal_period_s)
        };
        let mut extras = vec![
            p.scope.clone(),
            format!("polled at {:.0} Hz", p.poll_hz),
            period,
        ];
        if p.energy_counter {
            extras.push("energy counter".into());
        }
        if p.power_cap_w > 0.0 {
            extras.push(format!("cap {:.0} W", p.power_cap_w));
        }
        let _ = writeln!(
            out,
            "  {:<13} {}  [{}]  {}",
            p.name,
            target,
            extras.join(", "),
            p.label
        );
        if !p.reason.is_empty() {
            let _ = writeln!(out, "  {:<13} last error: {}", "", p.reason);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1::{BackendStatus, HostInfo, KernelInfo, ParamInfo};

    #[test]
    fn lists_unavailable_backends_with_reason() {
        let info = AgentInfo {
            host: Some(HostInfo {
                hostname: "rig1".into(),
                ..Default::default()
            }),
            backends: vec![
                BackendStatus {
                    name: "cpu".into(),
                    available: true,
                    ..Default::default()
                },
                BackendStatus {
                    name: "hip".into(),
                    available: false,
                    reason: "no HIP device (hipErrorNoDevice)".into(),
                    kernels: vec![],
                },
            ],
            ..Default::default()
        };
        let t = agent_info_text(&info);
        assert!(t.contains("host rig1"));
        assert!(
            t.contains("hip      unavailable: no HIP device (hipErrorNoDevice)"),
            "{t}"
        );
        assert!(t.contains("devices:\n  none"));
    }

    #[test]
    fn kernels_show_each_parameter_with_its_default_and_bounds() {
        let info = AgentInfo {
            kernels: vec![KernelInfo {
                name: "gemm".into(),
                variants: vec!["naive".into(), "tiled".into()],
                params: vec![ParamInfo {
                    name: "m".into(),
                    default_value: 256,
                    min: 1,
                    max: 16384,
                    description: String::new(),
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let t = agent_info_text(&info);
        assert!(
            t.contains("gemm                     [naive,tiled]\n"),
            "{t}"
        );
        assert!(t.contains("m=256 [1..16384]"), "{t}");
    }
}
