//! The host probe: the driver-stack facts that decide whether two runs on one card are comparable
//! (from the RDNA1 investigation gpufleet grew out of, where a changed `amdgpu.noretry` or missing
//! PCIe atomics changed results): amdgpu module parameters, the NVIDIA kernel driver and ROCm
//! versions, and whether each GPU's PCIe AtomicOp requests are enabled. They go into Describe's
//! `host.platform` and every result's fingerprint.
//!
//! Everything is read under a root (`--sysfs-root`), so tests and containers that mount the host's
//! /sys elsewhere give a tree; a fact that cannot be read is left out, never guessed.

use std::collections::BTreeMap;
use std::path::Path;

/// amdgpu module parameters that change behaviour or numbers.
const AMDGPU_PARAMS: [&str; 3] = ["noretry", "vm_fragment_size", "ppfeaturemask"];

fn read_trim(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let t = text.trim();
    (!t.is_empty()).then(|| gpufleet_kernels::prefix(t, 128).to_string())
}

/// The probe's facts under `root`: `amdgpu.<param>`, `nvidia_driver`, `rocm_version`,
/// `pcie_atomics:<pci bus id>` (`enabled`, `disabled` or `unknown: why`).
pub fn probe(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for p in AMDGPU_PARAMS {
        if let Some(v) = read_trim(&root.join("sys/module/amdgpu/parameters").join(p)) {
            out.insert(format!("amdgpu.{p}"), v);
        }
    }
    if let Some(v) = read_trim(&root.join("proc/driver/nvidia/version"))
        .as_deref()
        .and_then(nvidia_version)
    {
        out.insert("nvidia_driver".into(), v);
    }
    for dir in ["opt/rocm/.info/version", "usr/share/rocm/.info/version"] {
        if let Some(v) = read_trim(&root.join(dir)) {
            out.insert("rocm_version".into(), v);
            break;
        }
    }
    let pci = root.join("sys/bus/pci/devices");
    let mut gpus: Vec<_> = std::fs::read_dir(&pci)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            // Display controllers (0x03) and processing accelerators (0x12).
            read_trim(&e.path().join("class"))
                .is_some_and(|c| c.starts_with("0x03") || c.starts_with("0x12"))
        })
        .collect();
    gpus.sort_by_key(|e| e.file_name());
    for e in gpus {
        let bdf = e.file_name().to_string_lossy().to_string();
        let state = match std::fs::read(e.path().join("config")) {
            Ok(config) => atomics(&config),
            Err(err) => format!("unknown: {err}"),
        };
        out.insert(format!("pcie_atomics:{bdf}"), state);
    }
    out
}

/// The version in `/proc/driver/nvidia/version` (`NVRM version: NVIDIA UNIX x86_64 Kernel Module
/// 550.54.15  Tue Mar  5 …`).
fn nvidia_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version"))?;
    let after = line.split("Kernel Module").nth(1)?;
    after.split_whitespace().next().map(str::to_string)
}

/// Whether the function's PCIe AtomicOp requests are enabled (Device Control 2, bit 6), from its
/// configuration space; `unknown: …` when the capability cannot be read (unprivileged readers
/// see only the first 64 bytes).
pub fn atomics(config: &[u8]) -> String {
    let byte = |at: usize| config.get(at).copied();
    let word = |at: usize| Some(u16::from_le_bytes([byte(at)?, byte(at + 1)?]));
    // Status register bit 4: a capability list exists.
    if word(0x06).is_none_or(|s| s & 0x10 == 0) {
        return "unknown: no capability list".into();
    }
    let mut at = byte(0x34).unwrap_or(0) as usize & !3;
    for _ in 0..48 {
        if at < 0x40 {
            break;
        }
        let (Some(id), Some(next)) = (byte(at), byte(at + 1)) else {
            return "unknown: configuration space not readable (needs root)".into();
        };
        if id == 0x10 {
            return match word(at + 0x28) {
                Some(ctl2) if ctl2 & 0x40 != 0 => "enabled".into(),
                Some(_) => "disabled".into(),
                None => "unknown: configuration space not readable (needs root)".into(),
            };
        }
        at = next as usize & !3;
    }
    if config.len() <= 0x40 {
        return "unknown: configuration space not readable (needs root)".into();
    }
    "unknown: no PCI Express capability".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A configuration space with a capability list: power management at 0x50, then PCI Express
    /// at 0x70 with Device Control 2 = `ctl2`.
    fn config(ctl2: u16) -> Vec<u8> {
        let mut c = vec![0u8; 256];
        c[0x06] = 0x10;
        c[0x34] = 0x50;
        c[0x50] = 0x01;
        c[0x51] = 0x70;
        c[0x70] = 0x10;
        c[0x71] = 0x00;
        c[0x70 + 0x28..0x70 + 0x2a].copy_from_slice(&ctl2.to_le_bytes());
        c
    }

    #[test]
    fn atomics_from_device_control_2() {
        assert_eq!(atomics(&config(0x0040)), "enabled");
        assert_eq!(atomics(&config(0x0000)), "disabled");
        // What an unprivileged reader gets: the first 64 bytes.
        assert!(atomics(&config(0x0040)[..64]).contains("needs root"));
        assert!(atomics(&[0u8; 64]).contains("no capability list"));
    }

    #[test]
    fn probe_reads_a_fixture_tree() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let params = root.join("sys/module/amdgpu/parameters");
        std::fs::create_dir_all(&params).unwrap();
        std::fs::write(params.join("noretry"), "1\n").unwrap();
        std::fs::write(params.join("ppfeaturemask"), "0xfff7bfff\n").unwrap();
        let gpu = root.join("sys/bus/pci/devices/0000:03:00.0");
        std::fs::create_dir_all(&gpu).unwrap();
        std::fs::write(gpu.join("class"), "0x030000\n").unwrap();
        std::fs::write(gpu.join("config"), config(0x0040)).unwrap();
        let nic = root.join("sys/bus/pci/devices/0000:05:00.0");
        std::fs::create_dir_all(&nic).unwrap();
        std::fs::write(nic.join("class"), "0x020000\n").unwrap();
        std::fs::create_dir_all(root.join("proc/driver/nvidia")).unwrap();
        std::fs::write(
            root.join("proc/driver/nvidia/version"),
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\nGCC version: gcc 12\n",
        )
        .unwrap();
        std::fs::create_dir_all(root.join("opt/rocm/.info")).unwrap();
        std::fs::write(root.join("opt/rocm/.info/version"), "6.2.4-120\n").unwrap();
        let p = probe(root);
        assert_eq!(p["amdgpu.noretry"], "1");
        assert_eq!(p["amdgpu.ppfeaturemask"], "0xfff7bfff");
        assert!(!p.contains_key("amdgpu.vm_fragment_size"));
        assert_eq!(p["nvidia_driver"], "550.54.15");
        assert_eq!(p["rocm_version"], "6.2.4-120");
        assert_eq!(p["pcie_atomics:0000:03:00.0"], "enabled");
        assert!(!p.keys().any(|k| k.contains("0000:05:00.0")), "{p:?}");
        assert!(probe(&root.join("missing")).is_empty());
    }
}
