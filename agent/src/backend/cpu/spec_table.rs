//! Peaks of common CPUs from their data sheets: the maximum boost clock, FP32 FLOP per cycle per
//! core, and the memory bandwidth of one socket. In VMs /proc/cpuinfo reports the base clock (or
//! a masked name), so a formula on it makes CPU rows exceed 100% of "peak"; where the model is
//! in this table its figures are used instead, and the result names the table as its source. A
//! masked AMD EPYC name (`AMD EPYC`) is told by its CPUID family and model instead
//! ([`EPYC_GENERATIONS`]), and gets the figures of its generation's representative cloud part.

use crate::host::CpuId;
use std::ops::RangeInclusive;

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

/// An AMD EPYC generation told by its CPUID family and model, for a VM whose model name is masked
/// (`AMD EPYC`, QEMU's `AMD EPYC-Milan Processor`).
#[derive(Debug, Clone, PartialEq)]
pub struct EpycGeneration {
    /// How the peaks' source names it: `Zen 3 EPYC 7003 "Milan"`.
    pub name: &'static str,
    /// /proc/cpuinfo's `cpu family`.
    pub family: u32,
    /// /proc/cpuinfo's `model` values of the generation's server dies.
    pub models: RangeInclusive<u32>,
    /// The table entry whose figures stand for the generation: a cloud provider's part (GCP's
    /// 7B12, 7B13, 9B14) where the table has one, else the generation's flagship, never a
    /// frequency-optimised part, whose boost a masked VM's cores would rarely reach.
    pub like: &'static str,
}

const fn generation(
    name: &'static str,
    family: u32,
    models: RangeInclusive<u32>,
    like: &'static str,
) -> EpycGeneration {
    EpycGeneration {
        name,
        family,
        models,
        like,
    }
}

/// The EPYC generations by CPUID (AMD's processor programming references; the Threadripper dies
/// that share these models carry Ryzen names, which never reach this list).
pub const EPYC_GENERATIONS: &[EpycGeneration] = &[
    generation("Zen 2 EPYC 7002 \"Rome\"", 23, 0x30..=0x3F, "EPYC 7B12"),
    generation("Zen 3 EPYC 7003 \"Milan\"", 25, 0x00..=0x0F, "EPYC 7B13"),
    generation("Zen 4 EPYC 9004 \"Genoa\"", 25, 0x10..=0x1F, "EPYC 9B14"),
    // Siena (8004) shares the die but has 6 memory channels, half of this figure; clouds use
    // Bergamo.
    generation("Zen 4c EPYC 9004 \"Bergamo\"", 25, 0xA0..=0xAF, "EPYC 9754"),
    generation("Zen 5 EPYC 9005 \"Turin\"", 26, 0x00..=0x0F, "EPYC 9755"),
    generation(
        "Zen 5c EPYC 9005 \"Turin Dense\"",
        26,
        0x10..=0x1F,
        "EPYC 9965",
    ),
];

/// A CPU's figures from the table, and what found them (for the peaks' sources).
#[derive(Debug, Clone, PartialEq)]
pub struct TableMatch {
    /// The figures.
    pub spec: &'static CpuSpec,
    /// `EPYC 7B13` for a model name in the table; for a masked EPYC the generation, the CPUID
    /// that told it and the entry whose figures it took.
    pub found_by: String,
}

/// The table's figures for the CPU named `model_name`: its entry where the name holds one
/// ([`lookup`]); else, for an AMD part whose name says EPYC but no model of the table (a VM's
/// masked `AMD EPYC`), the entry that stands for its generation by CPUID family and model.
/// Anything else (a Ryzen or Xeon not in the table, a family or model not in
/// [`EPYC_GENERATIONS`]) has none and keeps the formula on the reported clock.
pub fn lookup_cpu(model_name: &str, vendor: &str, cpuid: Option<CpuId>) -> Option<TableMatch> {
    if let Some(spec) = lookup(model_name) {
        return Some(TableMatch {
            spec,
            found_by: spec.model.to_string(),
        });
    }
    if vendor != "AMD" || !contains_words(model_name, "EPYC") {
        return None;
    }
    let id = cpuid?;
    let generation = EPYC_GENERATIONS
        .iter()
        .find(|g| g.family == id.family && g.models.contains(&id.model))?;
    let spec = CPU_TABLE.iter().find(|s| s.model == generation.like)?;
    Some(TableMatch {
        spec,
        found_by: format!(
            "{}, by CPUID family {} model {}, as the {}",
            generation.name, id.family, id.model, spec.model
        ),
    })
}

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
    fn a_masked_epyc_is_told_by_cpuid_and_nothing_else_is() {
        let id = |family, model| Some(CpuId { family, model });
        let found = |name: &str, vendor: &str, cpuid| {
            lookup_cpu(name, vendor, cpuid).map(|m| (m.spec.boost_mhz, m.found_by))
        };
        assert_eq!(
            found("AMD EPYC", "AMD", id(25, 1)),
            Some((
                3500,
                "Zen 3 EPYC 7003 \"Milan\", by CPUID family 25 model 1, as the EPYC 7B13".into()
            ))
        );
        assert_eq!(
            found("AMD EPYC Processor", "AMD", id(23, 0x31)).unwrap().0,
            3300
        );
        assert_eq!(
            found("AMD EPYC-Genoa Processor", "AMD", id(25, 0x11))
                .unwrap()
                .0,
            3700
        );
        assert_eq!(found("AMD EPYC 9B45", "AMD", id(26, 2)).unwrap().0, 4100);
        // A name in the table wins over the CPUID.
        assert_eq!(
            found("AMD EPYC 7763 64-Core Processor", "AMD", id(26, 2)),
            Some((3500, "EPYC 7763".into()))
        );
        // Not an EPYC name, not AMD, no CPUID, or a family/model of no known generation.
        assert_eq!(
            found("AMD Ryzen Threadripper PRO 5995WX", "AMD", id(25, 8)),
            None
        );
        assert_eq!(found("AMD Ryzen 9 7950X3D", "AMD", id(25, 0x61)), None);
        assert_eq!(found("AMD EPYC", "Intel", id(25, 1)), None);
        assert_eq!(found("AMD EPYC", "AMD", None), None);
        assert_eq!(found("AMD EPYC", "AMD", id(23, 1)), None, "Naples");
        assert_eq!(found("AMD EPYC", "AMD", id(27, 0)), None);
    }

    #[test]
    fn every_generation_stands_on_an_entry_of_its_own_kind() {
        for g in EPYC_GENERATIONS {
            let spec = CPU_TABLE.iter().find(|s| s.model == g.like);
            let spec = spec.unwrap_or_else(|| panic!("{g:?}: no entry {}", g.like));
            assert_eq!(spec.flops_per_cycle == FMA512, g.family >= 26, "{g:?}");
            let overlaps = EPYC_GENERATIONS.iter().filter(|o| {
                o.family == g.family
                    && o.models.start() <= g.models.end()
                    && g.models.start() <= o.models.end()
            });
            assert_eq!(overlaps.count(), 1, "{g:?} overlaps another generation");
        }
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
