//! Peaks of common CPUs from their data sheets: the maximum boost clock, FP32 FLOP per cycle per
//! core, and the memory bandwidth of one socket. In VMs /proc/cpuinfo reports the base clock (or
//! a masked name), so a formula on it makes CPU rows exceed 100% of "peak"; where the model is
//! in this table its figures are used instead, and the result names the table as its source.

/// One CPU model's data-sheet figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuSpec {
    /// Matched against the model name as a whole word sequence (`EPYC 7B13`).
    pub model: &'static str,
    /// Highest single-core boost clock, MHz.
    pub boost_mhz: u32,
    /// FP32 FLOP per cycle per core at the widest FMA (2 × 256-bit FMA = 32).
    pub flops_per_cycle: f64,
    /// Peak DRAM bandwidth of one socket, GB/s (channels × MT/s × 8 bytes); 0 unknown.
    pub memory_gbps: f64,
}

const fn spec(model: &'static str, boost_mhz: u32, fpc: f64, memory_gbps: f64) -> CpuSpec {
    CpuSpec {
        model,
        boost_mhz,
        flops_per_cycle: fpc,
        memory_gbps,
    }
}

/// Zen 2–4 (Zen 4's AVX-512 runs on 256-bit datapaths) and Intel client cores: 2 × 256-bit FMA.
const FMA256: f64 = 32.0;
/// Intel Xeon Scalable with two AVX-512 FMA units, and Zen 5 server parts.
const FMA512: f64 = 64.0;
/// Zen 1 / Zen+: 2 × 128-bit FMA.
const FMA128: f64 = 16.0;

/// DDR4-3200 × 8 channels (EPYC 7002/7003, Ice Lake-SP).
const DDR4_3200_X8: f64 = 204.8;
/// DDR5-4800 × 12 channels (EPYC 9004).
const DDR5_4800_X12: f64 = 460.8;
/// DDR5-6000 × 12 channels (EPYC 9005).
const DDR5_6000_X12: f64 = 576.0;
/// DDR5-4800 × 8 channels (Sapphire Rapids).
const DDR5_4800_X8: f64 = 307.2;
/// Dual-channel desktop memory at the highest speed the part supports officially.
const DDR4_3200_X2: f64 = 51.2;
const DDR5_5200_X2: f64 = 83.2;
const DDR5_5600_X2: f64 = 89.6;

/// The table. Clocks are the maximum boost of the data sheet (cloud SKUs: the provider's
/// documented maximum); a part whose figures could not be confirmed is left out rather than
/// guessed.
pub const CPU_TABLE: &[CpuSpec] = &[
    // AMD EPYC 7002 / 7003 (Zen 2 / Zen 3).
    spec("EPYC 7702", 3350, FMA256, DDR4_3200_X8),
    spec("EPYC 7742", 3400, FMA256, DDR4_3200_X8),
    spec("EPYC 7B12", 3300, FMA256, DDR4_3200_X8),
    spec("EPYC 7413", 3600, FMA256, DDR4_3200_X8),
    spec("EPYC 7543", 3700, FMA256, DDR4_3200_X8),
    spec("EPYC 7713", 3675, FMA256, DDR4_3200_X8),
    spec("EPYC 7763", 3500, FMA256, DDR4_3200_X8),
    spec("EPYC 7B13", 3500, FMA256, DDR4_3200_X8),
    spec("EPYC 7R13", 3600, FMA256, DDR4_3200_X8),
    // AMD EPYC 9004 (Zen 4; Bergamo Zen 4c).
    spec("EPYC 9354", 3800, FMA256, DDR5_4800_X12),
    spec("EPYC 9454", 3800, FMA256, DDR5_4800_X12),
    spec("EPYC 9474F", 4100, FMA256, DDR5_4800_X12),
    spec("EPYC 9554", 3750, FMA256, DDR5_4800_X12),
    spec("EPYC 9654", 3700, FMA256, DDR5_4800_X12),
    spec("EPYC 9754", 3100, FMA256, DDR5_4800_X12),
    spec("EPYC 9B14", 3700, FMA256, DDR5_4800_X12),
    spec("EPYC 9R14", 3700, FMA256, DDR5_4800_X12),
    // AMD EPYC 9005 (Zen 5, full 512-bit datapaths).
    spec("EPYC 9755", 4100, FMA512, DDR5_6000_X12),
    spec("EPYC 9965", 3700, FMA512, DDR5_6000_X12),
    // Intel Xeon Scalable (two AVX-512 FMA units).
    spec("Platinum 8175M", 3500, FMA512, 128.0),
    spec("Platinum 8259CL", 3500, FMA512, 140.8),
    spec("Platinum 8358", 3400, FMA512, DDR4_3200_X8),
    spec("Platinum 8375C", 3500, FMA512, DDR4_3200_X8),
    spec("Platinum 8380", 3400, FMA512, DDR4_3200_X8),
    spec("Gold 6338", 3200, FMA512, DDR4_3200_X8),
    spec("Platinum 8468", 3800, FMA512, DDR5_4800_X8),
    spec("Platinum 8480", 3800, FMA512, DDR5_4800_X8),
    // AMD Ryzen desktop and APUs.
    spec("Ryzen 7 1700", 3700, FMA128, 42.7),
    spec("Ryzen 5 2600", 3900, FMA128, 46.9),
    spec("Ryzen 5 3600", 4200, FMA256, DDR4_3200_X2),
    spec("Ryzen 5 5600G", 4400, FMA256, DDR4_3200_X2),
    spec("Ryzen 5 5600X", 4600, FMA256, DDR4_3200_X2),
    spec("Ryzen 7 5700G", 4600, FMA256, DDR4_3200_X2),
    spec("Ryzen 7 5800X", 4700, FMA256, DDR4_3200_X2),
    spec("Ryzen 9 5950X", 4900, FMA256, DDR4_3200_X2),
    spec("Ryzen 7 7700X", 5400, FMA256, DDR5_5200_X2),
    spec("Ryzen 9 7950X", 5700, FMA256, DDR5_5200_X2),
    spec("Ryzen 5 8600G", 5000, FMA256, DDR5_5600_X2),
    spec("Ryzen 7 8700G", 5100, FMA256, DDR5_5600_X2),
    // Intel desktop (P-cores only parts).
    spec("Core(TM) i7-8700K", 4700, FMA256, 41.6),
    spec("Core(TM) i9-9900K", 5000, FMA256, 41.6),
];

/// The table entry whose model occurs in `model_name` as whole words (so `Ryzen 9 7950X` does
/// not match `Ryzen 9 7950X3D`); the longest such entry.
pub fn lookup(model_name: &str) -> Option<&'static CpuSpec> {
    CPU_TABLE
        .iter()
        .filter(|s| contains_words(model_name, s.model))
        .max_by_key(|s| s.model.len())
}

fn contains_words(haystack: &str, needle: &str) -> bool {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    haystack.match_indices(needle).any(|(i, _)| {
        !word(haystack[..i].chars().next_back())
            && !word(haystack[i + needle.len()..].chars().next())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_model_names_find_their_entry_and_only_it() {
        let m = |name: &str| lookup(name).map(|s| s.model);
        assert_eq!(m("AMD EPYC 7B13 64-Core Processor"), Some("EPYC 7B13"));
        assert_eq!(
            m("AMD Ryzen 5 8600G w/ Radeon 760M Graphics"),
            Some("Ryzen 5 8600G")
        );
        assert_eq!(m("Intel(R) Xeon(R) Platinum 8480+"), Some("Platinum 8480"));
        assert_eq!(m("AMD Ryzen 9 7950X3D 16-Core Processor"), None);
        assert_eq!(m("AMD EPYC"), None, "a masked VM name matches nothing");
        assert_eq!(m("Intel(R) Xeon(R) CPU @ 2.20GHz"), None);
    }

    #[test]
    fn every_entry_is_plausible_and_unique() {
        let mut names: Vec<&str> = CPU_TABLE.iter().map(|s| s.model).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), CPU_TABLE.len());
        for s in CPU_TABLE {
            assert!((2000..=6000).contains(&s.boost_mhz), "{s:?}");
            assert!([16.0, 32.0, 64.0].contains(&s.flops_per_cycle), "{s:?}");
            assert!(s.memory_gbps > 20.0 && s.memory_gbps < 1000.0, "{s:?}");
        }
    }
}
