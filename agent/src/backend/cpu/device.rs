//! CPU discovery from /proc and /sys: model, cores, clock, memory, ISA
//! features, and a formula peak (there is no spec table for every CPU).

use crate::backend::{DeviceInfo, Peaks};
use crate::host;

/// FP32 FLOP per cycle per core assumed for the widest FMA the CPU reports
/// (two FMA pipes, as on recent x86 cores).
fn flops_per_cycle(features: &[String]) -> (f64, &'static str) {
    let has = |f: &str| features.iter().any(|x| x == f);
    if has("avx512f") {
        (64.0, "AVX-512 FMA, 2 units")
    } else if has("avx2") && has("fma") {
        (32.0, "AVX2 FMA, 2 units")
    } else if has("neon") || has("asimd") {
        (16.0, "NEON FMA, 2 units")
    } else {
        (8.0, "SSE, no FMA")
    }
}

/// Describes the host CPU as one device, `cpu:0`.
pub fn discover() -> DeviceInfo {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let host = host::HostFacts::read();
    let wanted = [
        "avx512f",
        "avx2",
        "fma",
        "f16c",
        "avx512_fp16",
        "neon",
        "asimd",
        "sse4_2",
    ];
    let features: Vec<String> = host::cpu_flags(&cpuinfo)
        .into_iter()
        .filter(|f| wanted.contains(&f.as_str()))
        .collect();
    let clock_mhz = host::cpu_max_mhz(&cpuinfo);
    let cores = host.physical_cores.max(1);
    let (fpc, fpc_note) = flops_per_cycle(&features);
    let (fp32, fp32_source) = if clock_mhz > 0 {
        (
            cores as f64 * clock_mhz as f64 * 1e6 * fpc,
            format!(
                "formula: {cores} cores × {clock_mhz} MHz × {fpc} flop/cycle ({fpc_note}); the reported clock, so boost can exceed it"
            ),
        )
    } else {
        (0.0, "unknown: no clock reported".to_string())
    };
    let isa = if features.iter().any(|f| f == "avx512f") {
        "avx512"
    } else if features.iter().any(|f| f == "avx2") {
        "avx2"
    } else {
        "base"
    };
    DeviceInfo {
        id: "cpu:0".to_string(),
        backend: "cpu".to_string(),
        vendor: host::cpu_vendor(&cpuinfo),
        name: host.cpu_model.clone(),
        arch: format!("{}-{isa}", std::env::consts::ARCH),
        pci_bus_id: String::new(),
        compute_units: host.logical_cores,
        clock_mhz,
        memory_bytes: host.memory_bytes,
        driver_version: String::new(),
        api_version: format!("rayon {} threads", rayon::current_num_threads()),
        features,
        peaks: Peaks {
            fp32_flops: fp32,
            fp16_flops: 0.0,
            memory_bytes_per_s: 0.0,
            fp32_source,
            fp16_source: "none: the cpu backend runs f32 only".to_string(),
            memory_source: "unknown: DRAM configuration is not readable without root".to_string(),
        },
        device_type: "cpu".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flops_per_cycle_picks_widest_fma() {
        let f = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(flops_per_cycle(&f(&["avx2", "fma", "avx512f"])).0, 64.0);
        assert_eq!(flops_per_cycle(&f(&["avx2", "fma"])).0, 32.0);
        assert_eq!(flops_per_cycle(&f(&["avx2"])).0, 8.0);
    }

    #[test]
    fn discovers_this_host() {
        let d = discover();
        assert_eq!(d.id, "cpu:0");
        assert!(d.compute_units >= 1);
        assert!(d.memory_bytes > 0);
        assert!(!d.name.is_empty());
    }
}
