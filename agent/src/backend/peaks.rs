//! Theoretical peaks of GPUs: a small spec table for memory bandwidth (which
//! no API reports) and per-architecture formulas for FP32 throughput (units
//! × lanes × 2 for FMA × clock). Shared by the GPU backends. Pure.

use super::Peaks;

/// Memory bandwidth in GB/s from the device name (spec sheets).
const MEMORY_GBPS: &[(&str, f64)] = &[
    ("H200", 4800.0),
    ("H100 PCIe", 2000.0),
    ("H100 NVL", 3900.0),
    ("H100", 3350.0),
    ("A100-SXM4-80GB", 2039.0),
    ("A100", 1555.0),
    ("L40S", 864.0),
    ("RTX 4090", 1008.0),
    ("RTX 3090", 936.0),
    ("MI300X", 5300.0),
    ("MI250X", 3277.0),
    ("MI210", 1638.0),
    ("MI100", 1229.0),
    ("RX 7900 XTX", 960.0),
    ("RX 6800 XT", 512.0),
    ("RX 5600 XT", 288.0),
    ("RX 580", 256.0),
    ("RX 570", 224.0),
];

/// FP32 lanes per compute unit / SM for an architecture.
fn fp32_lanes(arch: &str) -> Option<(f64, &'static str)> {
    let a = arch.to_ascii_lowercase();
    let lanes = match a.as_str() {
        "sm_90" | "sm_89" | "sm_86" | "sm_87" => (128.0, "128 FP32 lanes/SM"),
        "sm_80" | "sm_70" | "sm_72" | "sm_75" => (64.0, "64 FP32 lanes/SM"),
        "sm_60" => (64.0, "64 FP32 lanes/SM"),
        "sm_61" | "sm_62" | "sm_52" | "sm_50" => (128.0, "128 FP32 lanes/SM"),
        // CDNA3 issues packed FP32: 128 lanes per CU.
        "gfx942" | "gfx940" | "gfx941" => (128.0, "128 FP32 lanes/CU (packed)"),
        // RDNA3 dual-issue.
        a if a.starts_with("gfx11") => (128.0, "64 FP32 lanes/CU × dual issue"),
        a if a.starts_with("gfx") => (64.0, "64 FP32 lanes/CU"),
        _ => return None,
    };
    Some(lanes)
}

/// Peaks for a GPU from its name, architecture, unit count and clock.
pub fn gpu_peaks(name: &str, arch: &str, units: u32, clock_mhz: u32) -> Peaks {
    let mut p = Peaks::default();
    match fp32_lanes(arch) {
        Some((lanes, note)) if units > 0 && clock_mhz > 0 => {
            p.fp32_flops = units as f64 * lanes * 2.0 * clock_mhz as f64 * 1e6;
            p.fp32_source = format!("formula: {units} units × {note} × 2 (FMA) × {clock_mhz} MHz");
        }
        _ => p.fp32_source = format!("unknown: no formula for arch `{arch}`"),
    }
    match MEMORY_GBPS.iter().find(|(n, _)| name.contains(n)) {
        Some((n, gbps)) => {
            p.memory_bytes_per_s = gbps * 1e9;
            p.memory_source = format!("spec table: {n} {gbps} GB/s");
        }
        None => p.memory_source = format!("unknown: `{name}` is not in the spec table"),
    }
    p.fp16_source = "unknown: not tabulated yet".to_string();
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn h100_from_formula_and_table() {
        let p = gpu_peaks("NVIDIA H100 80GB HBM3", "sm_90", 132, 1980);
        assert!((p.fp32_flops / 1e12 - 66.9).abs() < 0.1, "{}", p.fp32_flops);
        assert_eq!(p.memory_bytes_per_s, 3350e9);
        assert!(p.fp32_source.contains("132 units"));
    }

    #[test]
    fn more_specific_names_win() {
        assert_eq!(
            gpu_peaks("NVIDIA H100 PCIe", "sm_90", 114, 1755).memory_bytes_per_s,
            2000e9
        );
        assert_eq!(
            gpu_peaks("Radeon RX 580 Series", "gfx803", 36, 1340).fp32_flops,
            36.0 * 64.0 * 2.0 * 1340e6
        );
    }

    #[test]
    fn unknown_devices_say_so() {
        let p = gpu_peaks("Mystery", "weird", 4, 1000);
        assert_eq!(p.fp32_flops, 0.0);
        assert!(p.fp32_source.starts_with("unknown") && p.memory_source.starts_with("unknown"));
    }
}
