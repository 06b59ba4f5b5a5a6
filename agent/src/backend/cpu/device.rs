//! CPU discovery from /proc and /sys: model, cores, clock, memory, ISA
//! features, and a formula peak (there is no spec table for every CPU).

use crate::backend::{DeviceInfo, Peaks};
use crate::host;

/// FP32 FLOP per cycle per core assumed for the widest FMA the CPU reports
/// (two FMA pipes, as on recent x86 cores). AMD's Zen 4 (family 25) runs AVX-512
/// on 256-bit datapaths, so it gets the AVX2 figure; Zen 5 (family 26) the full one.
fn flops_per_cycle(features: &[String], vendor: &str, family: u32) -> (f64, &'static str) {
    let has = |f: &str| features.iter().any(|x| x == f);
    if has("avx512f") && vendor == "AMD" && family < 26 {
        (32.0, "AVX-512 on 256-bit datapaths (Zen 4), 2 FMA units")
    } else if has("avx512f") {
        (64.0, "AVX-512 FMA, 2 units")
    } else if has("avx2") && has("fma") {
        (32.0, "AVX2 FMA, 2 units")
    } else if has("neon") || has("asimd") {
        (16.0, "NEON FMA, 2 units")
    } else {
        (8.0, "SSE, no FMA")
    }
}

/// The theoretical peaks of `cores` cores of the CPU named `model`: from the data-sheet table
/// ([`spec_table`](super::spec_table)) where the model is in it, else a formula on the clock
/// the host reports (which in a VM is often the base clock, so measured rows may exceed it).
pub fn cpu_peaks(
    model: &str,
    cores: u32,
    sockets: u32,
    reported_mhz: u32,
    fpc: (f64, &str),
) -> Peaks {
    let none_f16 = "none: the cpu backend runs f32 only".to_string();
    if let Some(s) = super::spec_table::lookup(model) {
        return Peaks {
            fp32_flops: f64::from(cores) * f64::from(s.boost_mhz) * 1e6 * s.flops_per_cycle,
            fp16_flops: 0.0,
            memory_bytes_per_s: s.memory_gbps * 1e9 * f64::from(sockets.max(1)),
            fp32_source: format!(
                "cpu table ({}): {cores} cores × {} MHz max boost × {} flop/cycle",
                s.model, s.boost_mhz, s.flops_per_cycle
            ),
            fp16_source: none_f16,
            memory_source: format!(
                "cpu table ({}): {} GB/s per socket × {}",
                s.model,
                s.memory_gbps,
                sockets.max(1)
            ),
        };
    }
    let (fpc, note) = fpc;
    let (fp32_flops, fp32_source) = if reported_mhz > 0 {
        (
            f64::from(cores) * f64::from(reported_mhz) * 1e6 * fpc,
            format!(
                "formula: {cores} cores × {reported_mhz} MHz as /proc/cpuinfo reports it × {fpc} flop/cycle ({note}); \
                 not in the cpu table, and the reported clock may be the base clock, so boost can exceed it"
            ),
        )
    } else {
        (0.0, "unknown: no clock reported".to_string())
    };
    Peaks {
        fp32_flops,
        fp16_flops: 0.0,
        memory_bytes_per_s: 0.0,
        fp32_source,
        fp16_source: none_f16,
        memory_source:
            "unknown: not in the cpu table, and DRAM configuration is not readable without root"
                .to_string(),
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
    let vendor = host::cpu_vendor(&cpuinfo);
    let family = cpuinfo
        .lines()
        .find_map(|l| l.split_once(':').filter(|(k, _)| k.trim() == "cpu family"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0);
    let sockets = cpuinfo
        .lines()
        .filter_map(|l| l.split_once(':').filter(|(k, _)| k.trim() == "physical id"))
        .map(|(_, v)| v.trim())
        .collect::<std::collections::BTreeSet<_>>()
        .len() as u32;
    let peaks = cpu_peaks(
        &host.cpu_model,
        cores,
        sockets,
        clock_mhz,
        flops_per_cycle(&features, &vendor, family),
    );
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
        vendor,
        name: host.cpu_model.clone(),
        arch: format!("{}-{isa}", std::env::consts::ARCH),
        pci_bus_id: String::new(),
        compute_units: host.logical_cores,
        clock_mhz,
        memory_bytes: host.memory_bytes,
        driver_version: String::new(),
        api_version: format!("rayon {} threads", rayon::current_num_threads()),
        features,
        peaks,
        device_type: "cpu".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flops_per_cycle_picks_widest_fma() {
        let f = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let intel = |v: &[&str]| flops_per_cycle(&f(v), "Intel", 6).0;
        assert_eq!(intel(&["avx2", "fma", "avx512f"]), 64.0);
        assert_eq!(intel(&["avx2", "fma"]), 32.0);
        assert_eq!(intel(&["avx2"]), 8.0);
        // Zen 4 has AVX-512 on 256-bit datapaths; Zen 5 (family 26) the full width.
        assert_eq!(
            flops_per_cycle(&f(&["avx2", "fma", "avx512f"]), "AMD", 25).0,
            32.0
        );
        assert_eq!(
            flops_per_cycle(&f(&["avx2", "fma", "avx512f"]), "AMD", 26).0,
            64.0
        );
    }

    #[test]
    fn a_table_model_uses_its_boost_clock_and_an_unknown_one_says_the_clock_may_be_base() {
        // A Milan VM reporting its 2.45 GHz base clock: the table's 3.5 GHz boost rules.
        let p = cpu_peaks(
            "AMD EPYC 7B13 64-Core Processor",
            2,
            1,
            2450,
            (32.0, "AVX2"),
        );
        assert_eq!(p.fp32_flops, 2.0 * 3500e6 * 32.0);
        assert_eq!(p.memory_bytes_per_s, 204.8e9);
        assert!(
            p.fp32_source.starts_with("cpu table (EPYC 7B13)"),
            "{}",
            p.fp32_source
        );
        let p = cpu_peaks("AMD EPYC", 2, 1, 2596, (32.0, "AVX2"));
        assert_eq!(p.fp32_flops, 2.0 * 2596e6 * 32.0);
        assert!(
            p.fp32_source.contains("may be the base clock"),
            "{}",
            p.fp32_source
        );
        assert_eq!(p.memory_bytes_per_s, 0.0);
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
