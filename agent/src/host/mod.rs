//! Facts about the host from /proc, /etc and /sys. Parsers take the file
//! text so tests feed them fixtures. A module of its own (not inside
//! `inventory/`) because the cpu backend reads the CPU's facts too, and the
//! inventory depends on the backends.
//!
//! # Layout
//! - this file: [`HostFacts`] for Describe (CPU, memory, OS, container hints).
//! - [`memory`]: what a new worker may take now (`MemAvailable`, the agent's cgroup limit), the
//!   kernel's OOM-kill counter, and [`memory::HostMemoryShortage`], the refusal of a run that
//!   does not fit.
//! - [`pci`]: PCI addresses normalised, the join key between backends and power sensors.
//! - [`probe`]: the driver-stack facts that decide whether two runs are comparable (amdgpu
//!   module parameters, driver and ROCm versions, PCIe atomics), for `host.platform`.

pub mod memory;
pub mod pci;
pub mod probe;

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// What Describe reports about the machine itself.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct HostFacts {
    pub hostname: String,
    pub os: String,
    pub kernel_version: String,
    pub cpu_model: String,
    pub logical_cores: u32,
    pub physical_cores: u32,
    pub memory_bytes: u64,
    pub container_hints: Vec<String>,
    pub arch: String,
    /// See [`platform`].
    pub platform: std::collections::BTreeMap<String, String>,
}

/// Environment variables that say where a host runs, and the key each is reported under.
const PLATFORM_VARS: [(&str, &str); 4] = [
    ("RUNPOD_POD_ID", "runpod_pod_id"),
    ("RUNPOD_DC_ID", "runpod_dc_id"),
    ("RUNPOD_GPU_COUNT", "runpod_gpu_count"),
    ("RUNPOD_PUBLIC_IP", "runpod_public_ip"),
];

/// Where the host runs (a Runpod pod's id, data centre, GPU count and public IP), from `var`
/// (the process environment in the agent); values are cut to 128 bytes.
pub fn platform(
    var: impl Fn(&str) -> Option<String>,
) -> std::collections::BTreeMap<String, String> {
    PLATFORM_VARS
        .iter()
        .filter_map(|(name, key)| {
            let v = var(name).filter(|v| !v.is_empty())?;
            Some((
                key.to_string(),
                gpufleet_kernels::prefix(&v, 128).to_string(),
            ))
        })
        .collect()
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The kernel's host name, if it has one.
pub fn hostname() -> Option<String> {
    Some(read("/proc/sys/kernel/hostname").trim().to_string()).filter(|h| !h.is_empty())
}

/// The name /etc/passwd gives user `uid`, if it lists it.
pub fn user_name(uid: u32) -> Option<String> {
    read("/etc/passwd").lines().find_map(|line| {
        let mut f = line.split(':');
        let name = f.next()?;
        (f.nth(1)?.parse::<u32>().ok()? == uid).then(|| name.to_string())
    })
}

impl HostFacts {
    /// Reads the running host.
    pub fn read() -> HostFacts {
        let cpuinfo = read("/proc/cpuinfo");
        let logical = std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1);
        let env_has = |k: &str| std::env::var_os(k).is_some();
        HostFacts {
            hostname: hostname().unwrap_or_default(),
            os: os_pretty_name(&read("/etc/os-release")),
            kernel_version: read("/proc/sys/kernel/osrelease").trim().to_string(),
            cpu_model: cpu_model(&cpuinfo),
            logical_cores: logical,
            physical_cores: physical_cores(&cpuinfo).unwrap_or(logical),
            memory_bytes: mem_total_bytes(&read("/proc/meminfo")),
            container_hints: container_hints(
                std::path::Path::new("/.dockerenv").exists(),
                std::path::Path::new("/run/.containerenv").exists(),
                &read("/proc/1/cgroup"),
                env_has("KUBERNETES_SERVICE_HOST"),
                env_has("RUNPOD_POD_ID"),
            ),
            arch: std::env::consts::ARCH.to_string(),
            platform: platform(|k| std::env::var(k).ok()),
        }
    }
}

/// `PRETTY_NAME` from os-release text.
pub fn os_pretty_name(os_release: &str) -> String {
    os_release
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| "unknown".into())
}

fn cpuinfo_field<'a>(cpuinfo: &'a str, key: &str) -> impl Iterator<Item = &'a str> {
    let key = key.to_string();
    cpuinfo.lines().filter_map(move |l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == key).then(|| v.trim())
    })
}

/// The first `model name` (x86) or `Model`/`Hardware` (Arm) line.
pub fn cpu_model(cpuinfo: &str) -> String {
    ["model name", "Model", "Hardware", "cpu model"]
        .iter()
        .find_map(|k| cpuinfo_field(cpuinfo, k).next())
        .map(str::to_string)
        .unwrap_or_else(|| "unknown CPU".into())
}

/// `AuthenticAMD` → `AMD`, `GenuineIntel` → `Intel`, else the raw id.
pub fn cpu_vendor(cpuinfo: &str) -> String {
    match cpuinfo_field(cpuinfo, "vendor_id").next() {
        Some("AuthenticAMD") => "AMD".into(),
        Some("GenuineIntel") => "Intel".into(),
        Some(v) => v.to_string(),
        None => "unknown".into(),
    }
}

/// The CPUID family and model of an x86 CPU, as /proc/cpuinfo prints them (`cpu family` and
/// `model`, decimal, the extended fields already added in): they name the core generation when a
/// VM masks the model name (`AMD EPYC`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuId {
    /// `cpu family`: 23 Zen/Zen 2, 25 Zen 3/Zen 4, 26 Zen 5 on AMD; 6 on most Intel cores.
    pub family: u32,
    /// `model`: which die within the family (1 Milan, 17 Genoa, ...).
    pub model: u32,
}

/// The first processor's CPUID family and model; `None` where either line is missing or not a
/// number (Arm, some emulators).
pub fn cpu_id(cpuinfo: &str) -> Option<CpuId> {
    let number = |key: &str| -> Option<u32> { cpuinfo_field(cpuinfo, key).next()?.parse().ok() };
    Some(CpuId {
        family: number("cpu family")?,
        model: number("model")?,
    })
}

/// The flag words of the first processor (`flags` on x86, `Features` on Arm).
pub fn cpu_flags(cpuinfo: &str) -> Vec<String> {
    cpuinfo_field(cpuinfo, "flags")
        .chain(cpuinfo_field(cpuinfo, "Features"))
        .next()
        .map(|v| v.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Distinct (physical id, core id) pairs; `None` when the file lacks them.
pub fn physical_cores(cpuinfo: &str) -> Option<u32> {
    let mut cores = BTreeSet::new();
    let mut phys = None;
    for line in cpuinfo.lines() {
        if let Some((k, v)) = line.split_once(':') {
            match k.trim() {
                "physical id" => phys = Some(v.trim().to_string()),
                "core id" => {
                    cores.insert((phys.clone(), v.trim().to_string()));
                }
                _ => {}
            }
        }
    }
    (!cores.is_empty()).then_some(cores.len() as u32)
}

/// The highest clock the host reports, in MHz: cpufreq's maximum where it
/// exists, else the largest `cpu MHz` line.
pub fn cpu_max_mhz(cpuinfo: &str) -> u32 {
    let sysfs = read("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
    if let Ok(khz) = sysfs.trim().parse::<u64>() {
        return (khz / 1000) as u32;
    }
    cpuinfo_field(cpuinfo, "cpu MHz")
        .filter_map(|v| v.parse::<f64>().ok())
        .fold(0.0f64, f64::max)
        .round() as u32
}

/// `MemTotal` from /proc/meminfo, in bytes (0 if absent).
pub fn mem_total_bytes(meminfo: &str) -> u64 {
    memory::meminfo_bytes(meminfo, "MemTotal").unwrap_or(0)
}

/// Signs that the agent runs in a container, and which kind.
pub fn container_hints(
    dockerenv: bool,
    containerenv: bool,
    init_cgroup: &str,
    kubernetes_env: bool,
    runpod_env: bool,
) -> Vec<String> {
    let mut hints = Vec::new();
    if dockerenv || init_cgroup.contains("docker") {
        hints.push("docker".to_string());
    }
    if containerenv {
        hints.push("podman".to_string());
    }
    if kubernetes_env || init_cgroup.contains("kubepods") {
        hints.push("kubernetes".to_string());
    }
    if init_cgroup.contains("lxc") {
        hints.push("lxc".to_string());
    }
    if runpod_env {
        hints.push("runpod".to_string());
    }
    hints
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPUINFO: &str = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD Ryzen 5 8600G\n\
        flags\t\t: fpu sse avx2 fma f16c\ncpu MHz\t\t: 3800.000\nphysical id\t: 0\ncore id\t\t: 0\n\n\
        processor\t: 1\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD Ryzen 5 8600G\ncpu MHz\t\t: 4350.5\n\
        physical id\t: 0\ncore id\t\t: 0\n\nprocessor\t: 2\nphysical id\t: 0\ncore id\t\t: 1\n";

    #[test]
    fn runpod_ids_come_from_the_environment() {
        let env = |k: &str| match k {
            "RUNPOD_POD_ID" => Some("abc123xyz".to_string()),
            "RUNPOD_DC_ID" => Some("EU-RO-1".to_string()),
            "RUNPOD_PUBLIC_IP" => Some(String::new()),
            _ => None,
        };
        let p = platform(env);
        assert_eq!(
            p.get("runpod_pod_id").map(String::as_str),
            Some("abc123xyz")
        );
        assert_eq!(p.get("runpod_dc_id").map(String::as_str), Some("EU-RO-1"));
        assert_eq!(p.len(), 2, "empty values are left out: {p:?}");
        assert!(platform(|_| None).is_empty());
    }

    #[test]
    fn parses_cpuinfo() {
        assert_eq!(cpu_model(CPUINFO), "AMD Ryzen 5 8600G");
        assert_eq!(cpu_vendor(CPUINFO), "AMD");
        assert_eq!(
            cpu_flags(CPUINFO),
            vec!["fpu", "sse", "avx2", "fma", "f16c"]
        );
        assert_eq!(physical_cores(CPUINFO), Some(2));
        assert_eq!(physical_cores("processor: 0\n"), None);
        assert_eq!(cpu_id(CPUINFO), None, "no family and model lines");
        // `model name` is not `model`.
        let milan =
            "vendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC\n";
        assert_eq!(
            cpu_id(milan),
            Some(CpuId {
                family: 25,
                model: 1
            })
        );
        assert_eq!(cpu_id("cpu family\t: 25\nmodel\t\t: x\n"), None);
    }

    #[test]
    fn parses_meminfo_and_os_release() {
        assert_eq!(
            mem_total_bytes("MemTotal:       16384 kB\nMemFree: 1 kB\n"),
            16384 * 1024
        );
        assert_eq!(mem_total_bytes("garbage"), 0);
        assert_eq!(
            os_pretty_name("ID=debian\nPRETTY_NAME=\"Debian GNU/Linux 12\"\n"),
            "Debian GNU/Linux 12"
        );
        assert_eq!(os_pretty_name(""), "unknown");
    }

    #[test]
    fn detects_containers() {
        assert!(container_hints(false, false, "0::/", false, false).is_empty());
        assert_eq!(
            container_hints(true, false, "", false, true),
            vec!["docker", "runpod"]
        );
        assert_eq!(
            container_hints(false, false, "0::/kubepods/burstable/pod1", false, false),
            vec!["kubernetes"]
        );
    }
}
