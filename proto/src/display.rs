//! Human-readable text of an `AgentInfo`, shared by `gpufleet-agent
//! describe` and `gpufleet describe` so both print the same thing.

use crate::v1::{AgentInfo, Device};
use std::fmt::Write;

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// A GPU's PCIe link as `describe` and the fleet page show it, from the host probe's facts
/// (`platform` looks one up by key): `gen3 x4 (max gen3 x16)`, `none: …`, or, for an integrated
/// GPU, that it shares system memory; with the probe's warning when the link runs below the
/// card's maximum. `None` for a device without a PCI address (a CPU) or a link not probed.
pub fn pcie_link(
    device_type: &str,
    pci_bus_id: &str,
    platform: impl Fn(&str) -> Option<String>,
) -> Option<(String, Option<String>)> {
    if device_type == "integrated_gpu" {
        return Some((
            "none: an integrated GPU shares system memory (no PCIe transfers)".into(),
            None,
        ));
    }
    if pci_bus_id.is_empty() {
        return None;
    }
    let link = platform(&format!("pcie_link:{pci_bus_id}"))?;
    let text = match platform(&format!("pcie_link_max:{pci_bus_id}")) {
        Some(max) => format!("{link} (max {max})"),
        None => link,
    };
    Some((text, platform(&format!("pcie_link_warning:{pci_bus_id}"))))
}

/// Writes a GPU's PCIe link after `lead`, and the probe's warning under it, when `info`'s host
/// probe has the link ([`pcie_link`]).
fn pcie_lines(out: &mut String, lead: &str, info: &AgentInfo, device_type: &str, pci_bus_id: &str) {
    let platform = |k: &str| info.host.as_ref()?.platform.get(k).cloned();
    if let Some((link, warning)) = pcie_link(device_type, pci_bus_id, platform) {
        let _ = writeln!(out, "{lead}pcie {link}");
        if let Some(w) = warning {
            let _ = writeln!(out, "      warning: {w}");
        }
    }
}

fn device_line(out: &mut String, d: &Device, info: &AgentInfo) {
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
    pcie_lines(out, "      ", info, &d.device_type, &d.pci_bus_id);
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
        // The driver stack; the PCIe links go with their devices below.
        let mut facts: Vec<_> = h
            .platform
            .iter()
            .filter(|(k, _)| !k.starts_with("pcie_link"))
            .collect();
        facts.sort();
        for (k, v) in facts {
            let _ = writeln!(out, "  {k}: {v}");
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
        device_line(&mut out, d, info);
    }
    // GPUs the host probe found on the bus that no backend claims (a card whose driver stack is
    // gone still shows its link).
    let mut unclaimed: Vec<&str> = info
        .host
        .iter()
        .flat_map(|h| h.platform.keys())
        .filter_map(|k| k.strip_prefix("pcie_link:"))
        .filter(|bdf| info.devices.iter().all(|d| d.pci_bus_id != *bdf))
        .collect();
    unclaimed.sort();
    if !unclaimed.is_empty() {
        let _ = writeln!(out, "other GPUs on the PCI bus (no backend device):");
    }
    for bdf in unclaimed {
        pcie_lines(&mut out, &format!("  {bdf}  "), info, "", bdf);
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
    fn pcie_links_go_with_their_devices_and_unclaimed_gpus_are_listed() {
        let platform = [
            ("nvidia_driver", "550.54.15"),
            ("pcie_link:0000:0a:00.0", "gen3 x4"),
            ("pcie_link_max:0000:0a:00.0", "gen3 x16"),
            (
                "pcie_link_warning:0000:0a:00.0",
                "runs at gen3 x4, below its gen3 x16: x4 is the width of the link at 0000:00:03.1",
            ),
            ("pcie_link:0000:0b:00.0", "gen4 x16"),
            ("pcie_link_max:0000:0b:00.0", "gen4 x16"),
            ("pcie_link:0000:05:00.0", "gen3 x16"),
        ];
        let gpu = |id: &str, bdf: &str, kind: &str| Device {
            id: id.into(),
            pci_bus_id: bdf.into(),
            device_type: kind.into(),
            ..Default::default()
        };
        let info = AgentInfo {
            host: Some(HostInfo {
                platform: platform
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..Default::default()
            }),
            devices: vec![
                gpu("vulkan:0000:0a:00.0", "0000:0a:00.0", "discrete_gpu"),
                gpu("vulkan:0000:05:00.0", "0000:05:00.0", "integrated_gpu"),
                gpu("cpu:0", "", "cpu"),
            ],
            ..Default::default()
        };
        let t = agent_info_text(&info);
        let rx580 = t.split("vulkan:0000:0a:00.0").nth(1).unwrap();
        assert!(
            rx580.contains("pcie gen3 x4 (max gen3 x16)\n      warning: runs at gen3 x4"),
            "{t}"
        );
        let apu = t.split("vulkan:0000:05:00.0").nth(1).unwrap();
        assert!(
            apu.contains("pcie none: an integrated GPU shares system memory"),
            "{t}"
        );
        assert!(t.contains("  nvidia_driver: 550.54.15\n"), "{t}");
        assert!(
            !t.contains("pcie_link"),
            "the links are shown with their devices: {t}"
        );
        // A GPU no backend claims is still listed with its link.
        let other = t.split("other GPUs on the PCI bus").nth(1).unwrap();
        assert!(
            other.contains("0000:0b:00.0  pcie gen4 x16 (max gen4 x16)"),
            "{t}"
        );
        assert!(!other.contains("0000:0a:00.0"), "{t}");
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
