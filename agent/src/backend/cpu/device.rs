//! CPU discovery from /proc and /sys: model, cores, clock, memory, ISA
//! features, and a formula peak (there is no spec table for every CPU).

use super::spec_table::{self, TableMatch};
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

/// The theoretical peaks of `cores` cores of the CPU: from the data-sheet table
/// ([`spec_table`](super::spec_table)) where `table` found the CPU in it, else a formula on the
/// clock the host reports (which in a VM is often the base clock, so measured rows may exceed it).
pub fn cpu_peaks(
    table: Option<&TableMatch>,
    cores: u32,
    sockets: u32,
    reported_mhz: u32,
    fpc: (f64, &str),
) -> Peaks {
    let none_f16 = "none: the cpu backend runs f32 only".to_string();
    if let Some(TableMatch { spec: s, found_by }) = table {
        return Peaks {
            fp32_flops: f64::from(cores) * f64::from(s.boost_mhz) * 1e6 * s.flops_per_cycle,
            fp16_flops: 0.0,
            memory_bytes_per_s: s.memory_gbps * 1e9 * f64::from(sockets.max(1)),
            fp32_source: format!(
                "cpu table ({found_by}): {cores} cores × {} MHz max boost × {} flop/cycle",
                s.boost_mhz, s.flops_per_cycle
            ),
            fp16_source: none_f16,
            memory_source: format!(
                "cpu table ({found_by}): {} GB/s per socket × {}",
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

/// What /proc/cpuinfo says about the CPU that decides its peaks.
#[derive(Debug, Clone, PartialEq)]
struct CpuInfo {
    model: String,
    vendor: String,
    cpuid: Option<host::CpuId>,
    /// Distinct `physical id`s (0 where the file has none).
    sockets: u32,
    /// The ISA flags that matter here, of the first processor.
    features: Vec<String>,
}

impl CpuInfo {
    fn parse(cpuinfo: &str) -> CpuInfo {
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
        let sockets = cpuinfo
            .lines()
            .filter_map(|l| l.split_once(':').filter(|(k, _)| k.trim() == "physical id"))
            .map(|(_, v)| v.trim())
            .collect::<std::collections::BTreeSet<_>>()
            .len() as u32;
        CpuInfo {
            model: host::cpu_model(cpuinfo),
            vendor: host::cpu_vendor(cpuinfo),
            cpuid: host::cpu_id(cpuinfo),
            sockets,
            features: host::cpu_flags(cpuinfo)
                .into_iter()
                .filter(|f| wanted.contains(&f.as_str()))
                .collect(),
        }
    }

    /// The peaks of `cores` of its cores, `reported_mhz` being the clock the host reports.
    fn peaks(&self, cores: u32, reported_mhz: u32) -> Peaks {
        let table = spec_table::lookup_cpu(&self.model, &self.vendor, self.cpuid);
        let family = self.cpuid.map_or(0, |id| id.family);
        cpu_peaks(
            table.as_ref(),
            cores,
            self.sockets,
            reported_mhz,
            flops_per_cycle(&self.features, &self.vendor, family),
        )
    }
}

/// Describes the host CPU as one device, `cpu:0`.
pub fn discover() -> DeviceInfo {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let host = host::HostFacts::read();
    let cpu = CpuInfo::parse(&cpuinfo);
    let clock_mhz = host::cpu_max_mhz(&cpuinfo);
    let mut peaks = cpu.peaks(host.physical_cores.max(1), clock_mhz);
    // In a virtual machine the table's DRAM bandwidth is the host socket's, shared with every
    // other guest on it: said with the figure, so a small % of it reads as what it is.
    if host::cpu_flags(&cpuinfo).iter().any(|f| f == "hypervisor") && peaks.memory_bytes_per_s > 0.0
    {
        peaks.memory_source += &format!(
            "; the whole socket's, which this virtual machine ({} threads) shares: its own share is unknown and lower",
            host.logical_cores
        );
    }
    let CpuInfo {
        vendor, features, ..
    } = cpu;
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
        // Every CPU does double arithmetic (compute_peak's fp64 asks for the feature); VNNI's
        // dot products of bytes are compute_peak's int8.
        features: features
            .into_iter()
            .chain(["fp64".to_string()])
            .chain(
                crate::backend::cpu::ops::peak::Int8Dot::active()
                    .map(|_| gpufleet_kernels::INT8_DOT.to_string()),
            )
            .collect(),
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

    /// /proc/cpuinfo of a 2-vCPU cloud VM: one socket, `model name` as given, AVX2 and FMA.
    fn vm_cpuinfo(name: &str, family: u32, model: u32) -> String {
        (0..2)
            .map(|i| {
                format!(
                    "processor\t: {i}\nvendor_id\t: AuthenticAMD\ncpu family\t: {family}\n\
                     model\t\t: {model}\nmodel name\t: {name}\ncpu MHz\t\t: 2450.000\n\
                     physical id\t: 0\ncore id\t\t: {i}\nflags\t\t: fpu sse4_2 avx2 fma f16c\n\n"
                )
            })
            .collect()
    }

    #[test]
    fn a_table_model_uses_its_boost_clock_and_an_unknown_one_says_the_clock_may_be_base() {
        // A Milan VM reporting its 2.45 GHz base clock: the table's 3.5 GHz boost rules.
        let p =
            CpuInfo::parse(&vm_cpuinfo("AMD EPYC 7B13 64-Core Processor", 25, 1)).peaks(2, 2450);
        assert_eq!(p.fp32_flops, 2.0 * 3500e6 * 32.0);
        assert_eq!(p.memory_bytes_per_s, 204.8e9);
        assert!(
            p.fp32_source.starts_with("cpu table (EPYC 7B13)"),
            "{}",
            p.fp32_source
        );
        // A Ryzen the table lacks keeps the formula, whatever its CPUID.
        let p = CpuInfo::parse(&vm_cpuinfo(
            "AMD Ryzen 9 7950X3D 16-Core Processor",
            25,
            0x61,
        ))
        .peaks(2, 4200);
        assert_eq!(p.fp32_flops, 2.0 * 4200e6 * 32.0);
        assert!(
            p.fp32_source.contains("may be the base clock"),
            "{}",
            p.fp32_source
        );
        assert_eq!(p.memory_bytes_per_s, 0.0);
    }

    #[test]
    fn a_masked_epyc_gets_its_generation_by_cpuid() {
        let cpu = CpuInfo::parse(&vm_cpuinfo("AMD EPYC", 25, 1));
        assert_eq!(
            cpu.cpuid,
            Some(host::CpuId {
                family: 25,
                model: 1
            })
        );
        assert_eq!(cpu.sockets, 1);
        let p = cpu.peaks(2, 2450);
        assert_eq!(p.fp32_flops, 2.0 * 3500e6 * 32.0, "{}", p.fp32_source);
        assert_eq!(p.memory_bytes_per_s, 204.8e9);
        assert_eq!(
            p.fp32_source,
            "cpu table (Zen 3 EPYC 7003 \"Milan\", by CPUID family 25 model 1, as the EPYC 7B13): \
             2 cores × 3500 MHz max boost × 32 flop/cycle"
        );
        assert!(p.memory_source.contains("Milan"), "{}", p.memory_source);

        // Zen 5 Turin: 4.1 GHz, full-width AVX-512 and 12 channels of DDR5-6000.
        let p = CpuInfo::parse(&vm_cpuinfo("AMD EPYC", 26, 2)).peaks(2, 2450);
        assert_eq!(p.fp32_flops, 2.0 * 4100e6 * 64.0, "{}", p.fp32_source);
        assert_eq!(p.memory_bytes_per_s, 576e9);
        assert!(
            p.fp32_source
                .contains("Turin\", by CPUID family 26 model 2"),
            "{}",
            p.fp32_source
        );

        // A family no generation knows keeps the formula on the reported clock.
        let p = CpuInfo::parse(&vm_cpuinfo("AMD EPYC", 27, 1)).peaks(2, 2596);
        assert_eq!(p.fp32_flops, 2.0 * 2596e6 * 32.0);
        assert!(p.fp32_source.starts_with("formula:"), "{}", p.fp32_source);
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
