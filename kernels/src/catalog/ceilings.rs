//! The ceiling kernels: what a device can do at most, to judge every other result against.
//! `transfer` copies `bytes` between host and device memory (`h2d`, `d2h`) or within the device
//! (`d2d`), from page-locked or pageable host memory (`pinned`), in GB/s; the output is what
//! arrived, checked against the input. `roofline` is one point of a sweep of operational
//! intensity: every element of a buffer too large for any cache goes through `pairs` pairs of the
//! chain below (`y = x + pairs`, exactly), so its flops per byte are `4·pairs / 8`: 0 (a copy),
//! 0.5, 1, ... 512; GFLOP/s, with the GB/s in the result's configuration. `compute_peak` runs long
//! chains of fused multiply-adds in one arithmetic type per variant (`fp32`, `fp16` packed in
//! pairs, `fp64`, `int32`, and `int8` dot products of four bytes), enough independent chains per
//! work-item to hide the latency and enough work-items to fill the device.
//!
//! # The chain and its closed form
//!
//! Work-item `i` runs [`CHAINS`] chains; chain `j` starts at `x = (i mod 8) + j` and applies
//! `pairs` times the pair `x = a·x + b; x = a·x + c` with `a = -1, b = 1, c = 2`, so each pair adds
//! `c - b = 1` exactly: the chain ends at `x0 + pairs`. The constants come from the one input
//! buffer (`[a, b, c, 0]`), so no compiler can fold the chain away, and a skipped pair changes the
//! result. Every intermediate is an integer of at most `x0 + pairs` in magnitude, exact in every
//! type while that stays within the type's integers (2048 for fp16, which bounds `pairs` there).
//! Work-item `i` writes the sum of its chains as f32: `8·(i mod 8) + 28 + 8·pairs`, exact below
//! 2^24, so the check is exact.
//!
//! One pair is 2 fused multiply-adds per chain, 4 operations (FLOPs, or integer operations for
//! `int32`); the metric is GFLOP/s for every variant (GOP/s for `int32` and `int8`).
//!
//! # The int8 chain
//!
//! `int8` runs the same pairs with a dot product of four bytes in place of the multiply:
//! `x = dot4(bytes(x), bytes(A)) + b`, where `A = a & 0xFF` packs the bytes `(-1, 0, 0, 0)`, so
//! only the low byte of `x` counts and the step is `-x + b` modulo 256, whether the hardware
//! reads that byte as signed (`sdot4`, `dp4a`, OpSDot) or unsigned (x86 VNNI's `u8 × s8`). Each
//! pair again adds `c - b = 1` modulo 256, and the work-item writes the sum of its chains' low
//! bytes, `Σ (x0 + pairs) mod 256`. A dot product of four bytes is 4 multiplies and 4 adds, so
//! an int8 pair is 16 operations per chain.

use super::{Family, KernelDef, KernelId, ParamDef, Problem, Visit, default_variant_def, p};
use crate::check::harness::EPS32;
use crate::inputs::{UNIT, seeded};
use crate::types::{Buffer, Dtype, MetricKind};

/// Independent chains per work-item (for fp16, four packed pairs).
pub const CHAINS: usize = 8;

/// The constants of the chain, the one input: `a`, `b`, `c` and a zero.
pub const PEAK_CONSTANTS: [f32; 4] = [-1.0, 1.0, 2.0, 0.0];

/// The largest chain start: `(i mod 8) + j` with `j < CHAINS`.
const X0_MAX: i64 = 7 + CHAINS as i64 - 1;

/// The ceiling kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CeilingKernel {
    /// `transfer`: host-to-device, device-to-host or device-to-device copies.
    Transfer,
    /// `compute_peak`: chains of fused multiply-adds, peak arithmetic per type.
    ComputePeak,
    /// `roofline`: one point of the operational-intensity sweep.
    Roofline,
}

impl CeilingKernel {
    /// Every ceiling kernel.
    pub const ALL: [CeilingKernel; 3] = [
        CeilingKernel::Transfer,
        CeilingKernel::ComputePeak,
        CeilingKernel::Roofline,
    ];
}

/// Where a device page reads one measured ceiling: the best among the latest ok results of
/// `kernel` (of `variant`, with parameter `param` at its value, where given), their metric or,
/// with `bandwidth`, the GB/s they recorded (see [`KernelId::records_bandwidth`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CeilingSource {
    /// The kernel's catalog name.
    pub kernel: &'static str,
    /// Only this variant.
    pub variant: Option<&'static str>,
    /// Only results with this parameter at this value.
    pub param: Option<(&'static str, i64)>,
    /// The recorded GB/s rather than the metric.
    pub bandwidth: bool,
}

/// Which measured roof of the roofline chart a ceiling is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoofPart {
    /// The flat roof: fp32 arithmetic.
    Compute,
    /// The slope: memory bandwidth.
    Bandwidth,
}

/// One row of a device page's ceilings table: what it measures, its unit, the results that
/// measure it (the best of them counts), the device's theoretical peak beside it (the keys of the
/// peak and of where it came from in the device's `peaks`), and its part in the roofline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceCeiling {
    /// The row's label.
    pub what: &'static str,
    /// The unit of the measured and theoretical values.
    pub unit: &'static str,
    /// The results that measure it.
    pub sources: &'static [CeilingSource],
    /// `(value key, source key)` of the theoretical peak in the device's `peaks`.
    pub peak: Option<(&'static str, &'static str)>,
    /// The roof it draws, if any.
    pub roof: Option<RoofPart>,
}

const fn metric_of(
    kernel: &'static str,
    variant: Option<&'static str>,
    param: Option<(&'static str, i64)>,
) -> CeilingSource {
    CeilingSource {
        kernel,
        variant,
        param,
        bandwidth: false,
    }
}

/// A device page's ceilings, in display order: arithmetic per type (`compute_peak`), memory
/// bandwidth (the best of `copy` and the roofline sweep's low end), host transfers (`transfer`,
/// from page-locked and pageable memory).
pub const DEVICE_CEILINGS: &[DeviceCeiling] = &[
    DeviceCeiling {
        what: "fp32 arithmetic (compute_peak)",
        unit: "GFLOP/s",
        sources: &[metric_of("compute_peak", Some("fp32"), None)],
        peak: Some(("fp32_flops", "fp32_source")),
        roof: Some(RoofPart::Compute),
    },
    DeviceCeiling {
        what: "fp16 arithmetic (compute_peak)",
        unit: "GFLOP/s",
        sources: &[metric_of("compute_peak", Some("fp16"), None)],
        peak: Some(("fp16_flops", "fp16_source")),
        roof: None,
    },
    DeviceCeiling {
        what: "fp64 arithmetic (compute_peak)",
        unit: "GFLOP/s",
        sources: &[metric_of("compute_peak", Some("fp64"), None)],
        peak: None,
        roof: None,
    },
    DeviceCeiling {
        what: "int32 arithmetic (compute_peak)",
        unit: "GOP/s",
        sources: &[metric_of("compute_peak", Some("int32"), None)],
        peak: None,
        roof: None,
    },
    DeviceCeiling {
        what: "int8 dot products (compute_peak)",
        unit: "GOP/s",
        sources: &[metric_of("compute_peak", Some("int8"), None)],
        peak: None,
        roof: None,
    },
    DeviceCeiling {
        what: "memory bandwidth (copy, roofline sweep)",
        unit: "GB/s",
        sources: &[
            metric_of("copy", None, None),
            CeilingSource {
                kernel: "roofline",
                variant: None,
                param: Some(("pairs", 0)),
                bandwidth: true,
            },
        ],
        peak: Some(("memory_bytes_per_s", "memory_source")),
        roof: Some(RoofPart::Bandwidth),
    },
    DeviceCeiling {
        what: "host to device, pinned (transfer)",
        unit: "GB/s",
        sources: &[metric_of("transfer", Some("h2d"), Some(("pinned", 1)))],
        peak: None,
        roof: None,
    },
    DeviceCeiling {
        what: "host to device, pageable (transfer)",
        unit: "GB/s",
        sources: &[metric_of("transfer", Some("h2d"), Some(("pinned", 0)))],
        peak: None,
        roof: None,
    },
    DeviceCeiling {
        what: "device to host, pinned (transfer)",
        unit: "GB/s",
        sources: &[metric_of("transfer", Some("d2h"), Some(("pinned", 1)))],
        peak: None,
        roof: None,
    },
    DeviceCeiling {
        what: "device to host, pageable (transfer)",
        unit: "GB/s",
        sources: &[metric_of("transfer", Some("d2h"), Some(("pinned", 0)))],
        peak: None,
        roof: None,
    },
    DeviceCeiling {
        what: "device to device (transfer)",
        unit: "GB/s",
        sources: &[metric_of("transfer", Some("d2d"), Some(("pinned", 1)))],
        peak: None,
        roof: None,
    },
];

/// The directions of `transfer`, its variants.
pub const TRANSFER_VARIANTS: &[&str] = &["h2d", "d2h", "d2d"];

const TRANSFER_PARAMS: &[ParamDef] = &[
    p(
        "bytes",
        1 << 26,
        4,
        1 << 32,
        "bytes copied, a multiple of 4",
    ),
    p(
        "pinned",
        1,
        0,
        1,
        "1: page-locked host memory (an APU's zero-copy path); 0: pageable",
    ),
];

/// The arithmetic types of `compute_peak`, its variants.
pub const PEAK_VARIANTS: &[&str] = &["fp32", "fp16", "fp64", "int32", "int8"];

/// How far a chain may run in each variant so every value stays an exact integer of its type:
/// fp16 holds the integers up to 2048, fp32 up to 2^24 (the sum of the chains must stay below that
/// too), int32 and fp64 much more than `pairs` allows.
fn pairs_max(variant: &str) -> i64 {
    match variant {
        "fp16" => 2048 - X0_MAX,
        _ => PAIRS_MAX,
    }
}

/// The largest `pairs` of every variant (the sums of the chains stay below 2^24).
const PAIRS_MAX: i64 = 1 << 20;

const PEAK_PARAMS: &[ParamDef] = &[
    p(
        "items",
        1 << 20,
        1,
        1 << 26,
        "work-items, each running 8 independent chains",
    ),
    p(
        "pairs",
        1024,
        1,
        PAIRS_MAX,
        "pairs of fused multiply-adds per chain (fp16: at most 2034)",
    ),
];

const ROOFLINE_PARAMS: &[ParamDef] = &[
    p(
        "n",
        1 << 26,
        1,
        1 << 30,
        "f32 elements read and written (make it larger than the caches)",
    ),
    p(
        "pairs",
        8,
        0,
        1024,
        "pairs of fused multiply-adds per element: pairs/2 flops per byte",
    ),
];

/// Every ceiling kernel, in display order.
pub(super) static TABLE: [KernelDef; 3] = [
    KernelDef {
        variants: TRANSFER_VARIANTS,
        default_variant: "h2d",
        ..default_variant_def(
            KernelId::Ceiling(CeilingKernel::Transfer),
            "transfer",
            "copies between host and device memory (variant: h2d, d2h, d2d), pinned or pageable; GB/s",
            TRANSFER_PARAMS,
            MetricKind::Gbps,
        )
    },
    KernelDef {
        variants: PEAK_VARIANTS,
        default_variant: "fp32",
        ..default_variant_def(
            KernelId::Ceiling(CeilingKernel::ComputePeak),
            "compute_peak",
            "chains of fused multiply-adds per arithmetic type (variant: fp32, fp16, fp64, int32, \
             int8 dot products); peak GFLOP/s (GOP/s for int32 and int8)",
            PEAK_PARAMS,
            MetricKind::Gflops,
        )
    },
    default_variant_def(
        KernelId::Ceiling(CeilingKernel::Roofline),
        "roofline",
        "one point of the operational-intensity sweep: y = x after `pairs` fused multiply-add \
         pairs; GFLOP/s (GB/s in the config)",
        ROOFLINE_PARAMS,
        MetricKind::Gflops,
    ),
];

/// The device feature (in a device's `features`) that `variant` of `kernel` needs beyond what its
/// backend lists: compute_peak's `fp16` and `fp64` need half and double arithmetic and `int8`
/// a dot product of four bytes, which a backend has on some devices only (NVIDIA's OpenCL has
/// no `cl_khr_fp16`, an RX 580 no dot instruction). A campaign skips the combination on a device
/// without it, as it skips what a backend does not implement.
pub fn variant_feature(kernel: &str, variant: &str) -> Option<&'static str> {
    match (kernel, variant) {
        ("compute_peak", "fp16") => Some("fp16"),
        ("compute_peak", "fp64") => Some("fp64"),
        ("compute_peak", "int8") => Some(INT8_DOT),
        _ => None,
    }
}

/// The arithmetic type a run of `kernel`'s `variant` computes in, where the variant chooses it
/// rather than the dtype (compute_peak: `fp64` is `f64` whatever dtype the spec stores), for
/// tables that would otherwise label it by the dtype.
pub fn variant_arithmetic(kernel: &str, variant: &str) -> Option<&'static str> {
    match (kernel, variant) {
        ("compute_peak", "fp32") => Some("f32"),
        ("compute_peak", "fp16") => Some("f16"),
        ("compute_peak", "fp64") => Some("f64"),
        ("compute_peak", "int32") => Some("i32"),
        ("compute_peak", "int8") => Some("i8"),
        _ => None,
    }
}

/// The unit of `kernel`'s `variant` measured in a metric of unit `unit`: operations on integers
/// are not floating-point ones, so compute_peak's `int32` and `int8` count GOP/s where the others
/// count GFLOP/s (as the device page's ceilings say).
pub fn variant_unit<'a>(kernel: &str, variant: &str, unit: &'a str) -> &'a str {
    match (kernel, variant, unit) {
        ("compute_peak", "int32" | "int8", "GFLOP/s") => "GOP/s",
        _ => unit,
    }
}

/// The device feature of a dot product of four bytes into an int (compute_peak's `int8`).
pub const INT8_DOT: &str = "int8_dot";

/// Operations per pair and chain of compute_peak `variant`: two multiply-adds (4), or two dot
/// products of four bytes with their accumulation (16) for `int8`.
pub fn peak_ops_per_pair(variant: &str) -> f64 {
    if variant == "int8" { 16.0 } else { 4.0 }
}

/// The value work-item `i` of compute_peak `variant` writes after `pairs` pairs: the sum of its
/// chains' ends (for `int8`, of their low bytes).
pub fn peak_item_value(variant: &str, i: usize, pairs: i64) -> f64 {
    let base = (i % 8) as i64;
    let end = |j: i64| {
        let x = base + j + pairs;
        if variant == "int8" { x % 256 } else { x }
    };
    (0..CHAINS as i64).map(|j| end(j) as f64).sum()
}

impl Family for CeilingKernel {
    fn arithmetic(&self, p: &Problem) -> Option<Dtype> {
        match self {
            CeilingKernel::Transfer | CeilingKernel::Roofline => Some(p.dtype),
            // The variant's type, where the device tables have its peak.
            CeilingKernel::ComputePeak => match p.variant.as_str() {
                "fp32" => Some(Dtype::F32),
                "fp16" => Some(Dtype::F16),
                _ => None,
            },
        }
    }

    fn has_device_peak(&self) -> bool {
        match self {
            CeilingKernel::Transfer => false,
            CeilingKernel::ComputePeak | CeilingKernel::Roofline => true,
        }
    }

    fn records_bandwidth(&self) -> bool {
        match self {
            CeilingKernel::Roofline => true,
            CeilingKernel::Transfer | CeilingKernel::ComputePeak => false,
        }
    }

    fn check_params(&self, p: &Problem) -> Result<(), String> {
        match self {
            CeilingKernel::Transfer => {
                let bytes = p.param("bytes");
                if bytes % 4 != 0 {
                    return Err(format!(
                        "bytes={bytes} must be a multiple of 4 (the data is f32 elements)"
                    ));
                }
            }
            CeilingKernel::Roofline => {}
            CeilingKernel::ComputePeak => {
                let max = pairs_max(&p.variant);
                let pairs = p.param("pairs");
                if pairs > max {
                    return Err(format!(
                        "pairs={pairs} is too long for variant {}: its chains stay exact \
                         integers only up to pairs={max}",
                        p.variant
                    ));
                }
            }
        }
        Ok(())
    }

    /// compute_peak: two fused multiply-adds (4 operations) per pair, chain and work-item, or two
    /// dot products of four bytes (16) for `int8`.
    fn flops(&self, p: &Problem) -> f64 {
        match self {
            CeilingKernel::Transfer => 0.0,
            CeilingKernel::Roofline => 4.0 * p.fparam("pairs") * p.fparam("n"),
            CeilingKernel::ComputePeak => {
                p.fparam("items")
                    * CHAINS as f64
                    * p.fparam("pairs")
                    * peak_ops_per_pair(&p.variant)
            }
        }
    }

    /// transfer: the bytes copied (once: GB/s is the link's rate); compute_peak: the one f32
    /// each work-item writes.
    fn bytes(&self, p: &Problem) -> f64 {
        match self {
            CeilingKernel::Transfer => p.fparam("bytes"),
            CeilingKernel::Roofline => 8.0 * p.fparam("n"),
            CeilingKernel::ComputePeak => 4.0 * p.fparam("items"),
        }
    }

    fn input_lens(&self, p: &Problem) -> Vec<u128> {
        match self {
            CeilingKernel::Transfer => vec![p.wparam("bytes") / 4],
            CeilingKernel::Roofline => vec![p.wparam("n"), PEAK_CONSTANTS.len() as u128],
            CeilingKernel::ComputePeak => vec![PEAK_CONSTANTS.len() as u128],
        }
    }

    fn output_len(&self, p: &Problem) -> u128 {
        match self {
            CeilingKernel::Transfer => p.wparam("bytes") / 4,
            CeilingKernel::Roofline => p.wparam("n"),
            CeilingKernel::ComputePeak => p.wparam("items"),
        }
    }

    fn make_inputs(&self, p: &Problem, seed: u64) -> Vec<Buffer> {
        match self {
            CeilingKernel::Transfer => seeded(&[UNIT], &super::lens(&self.input_lens(p)), seed),
            CeilingKernel::Roofline => {
                let mut x = seeded(&[UNIT], &super::lens(&[p.wparam("n")]), seed);
                x.push(Buffer::F32(PEAK_CONSTANTS.to_vec()));
                x
            }
            CeilingKernel::ComputePeak => vec![Buffer::F32(PEAK_CONSTANTS.to_vec())],
        }
    }

    /// transfer: what arrived is the input, element for element (sampled in blocks when large);
    /// roofline: `x + pairs`, exact (x a multiple of 1/256 in [-1, 1]) to a few ulps;
    /// compute_peak: the closed form, exactly (to one f32 ulp, which an exact result never
    /// uses): every value is an integer below 2^24, so any slip is caught.
    fn visit(&self, p: &Problem, x: &[&[f32]], f: Visit<'_>) -> Result<bool, String> {
        match self {
            CeilingKernel::Transfer => {
                let n = super::lens(&[self.output_len(p)])[0];
                Ok(super::elementwise::each(p, n, 1.0, f, |j| {
                    super::elementwise::same(x, j)
                }))
            }
            CeilingKernel::Roofline => {
                let n = super::lens(&[self.output_len(p)])[0];
                let pairs = p.fparam("pairs");
                Ok(super::elementwise::each(p, n, 1.0, f, |j| {
                    let v = f64::from(x[0][j]) + pairs;
                    (v, super::elementwise::ulps(v))
                }))
            }
            CeilingKernel::ComputePeak => {
                let pairs = p.param("pairs");
                for i in 0..p.uparam("items") {
                    let v = peak_item_value(&p.variant, i, pairs);
                    f(i, v, v.abs().max(1.0) * EPS32);
                }
                Ok(false)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::problem;

    #[test]
    fn every_device_ceiling_reads_a_catalog_kernel_variant_and_parameter() {
        for c in super::DEVICE_CEILINGS {
            assert!(!c.sources.is_empty(), "{}: no source", c.what);
            for s in c.sources {
                let k = crate::find_kernel(s.kernel)
                    .unwrap_or_else(|| panic!("{}: no kernel {}", c.what, s.kernel));
                if let Some(v) = s.variant {
                    assert!(
                        k.variants.contains(&v),
                        "{}: {} has no variant {v}",
                        c.what,
                        k.name
                    );
                }
                if let Some((name, value)) = s.param {
                    let d = k.param(name).unwrap_or_else(|| {
                        panic!("{}: {} has no parameter {name}", c.what, k.name)
                    });
                    assert!(
                        (d.min..=d.max).contains(&value),
                        "{}: {name}={value}",
                        c.what
                    );
                }
                assert!(
                    !s.bandwidth || k.id.records_bandwidth(),
                    "{}: {} records no bandwidth",
                    c.what,
                    k.name
                );
            }
        }
        // One compute roof and one bandwidth roof for the roofline chart.
        for part in [super::RoofPart::Compute, super::RoofPart::Bandwidth] {
            let n = super::DEVICE_CEILINGS
                .iter()
                .filter(|c| c.roof == Some(part))
                .count();
            assert_eq!(n, 1, "{part:?}");
        }
    }
    use super::*;

    /// The closed form against the chain itself, run in f32 as a device would.
    #[test]
    fn the_closed_form_is_what_the_chain_computes() {
        let [a, b, c, _] = PEAK_CONSTANTS;
        for pairs in [1i64, 2, 7, 300] {
            for i in 0..10usize {
                let mut sum = 0.0f32;
                for j in 0..CHAINS {
                    let mut x = (i % 8 + j) as f32;
                    for _ in 0..pairs {
                        x = x.mul_add(a, b);
                        x = x.mul_add(a, c);
                    }
                    sum += x;
                }
                assert_eq!(
                    f64::from(sum),
                    peak_item_value("fp32", i, pairs),
                    "i {i} pairs {pairs}"
                );
            }
        }
        // One pair fewer is caught.
        assert!((peak_item_value("fp32", 3, 99) - peak_item_value("fp32", 3, 100)).abs() > 0.5);
    }

    /// The int8 chain as the hardware runs it, the low byte read as signed (`sdot4`, `dp4a`) or
    /// unsigned (VNNI), against its closed form; past 256 pairs the low bytes wrap.
    #[test]
    fn the_int8_closed_form_holds_for_signed_and_unsigned_bytes() {
        let [a, b, c, _] = PEAK_CONSTANTS.map(|v| v as i32);
        let packed = a & 0xFF;
        let dot4 = |x: i32, signed: bool| -> i32 {
            (0..4)
                .map(|k| {
                    let xb = (x >> (8 * k)) & 0xFF;
                    let xb = if signed { xb as u8 as i8 as i32 } else { xb };
                    xb * ((packed >> (8 * k)) as u8 as i8 as i32)
                })
                .sum()
        };
        for signed in [true, false] {
            for pairs in [1i64, 2, 7, 255, 256, 300, 1000] {
                for i in 0..10usize {
                    let sum: i32 = (0..CHAINS)
                        .map(|j| {
                            let mut x = (i % 8 + j) as i32;
                            for _ in 0..pairs {
                                x = dot4(x, signed) + b;
                                x = dot4(x, signed) + c;
                            }
                            x & 0xFF
                        })
                        .sum();
                    assert_eq!(
                        f64::from(sum),
                        peak_item_value("int8", i, pairs),
                        "signed {signed} i {i} pairs {pairs}"
                    );
                }
            }
        }
        assert!((peak_item_value("int8", 3, 99) - peak_item_value("int8", 3, 100)).abs() > 0.5);
        let p = problem("compute_peak", &[("items", 10), ("pairs", 3)]);
        let mut int8 = p.clone();
        int8.variant = "int8".into();
        let ceiling = CeilingKernel::ComputePeak;
        assert_eq!(ceiling.flops(&int8), 4.0 * ceiling.flops(&p));
        assert_eq!(variant_feature("compute_peak", "int8"), Some(INT8_DOT));
    }

    #[test]
    fn fp16_chains_are_bounded_to_exact_halves() {
        let ok = problem("compute_peak", &[("pairs", 2034)]);
        let odd = problem("transfer", &[("bytes", 4)]);
        assert!(CeilingKernel::Transfer.check_params(&odd).is_ok());
        assert!(CeilingKernel::ComputePeak.check_params(&ok).is_ok());
        let mut long = problem("compute_peak", &[("pairs", 2035)]);
        assert!(CeilingKernel::ComputePeak.check_params(&long).is_ok());
        long.variant = "fp16".into();
        let err = CeilingKernel::ComputePeak.check_params(&long).unwrap_err();
        assert!(err.contains("pairs=2035") && err.contains("fp16"), "{err}");
    }

    #[test]
    fn counts_four_operations_per_pair_and_chain() {
        let p = problem("compute_peak", &[("items", 1000), ("pairs", 10)]);
        assert_eq!(
            CeilingKernel::ComputePeak.flops(&p),
            1000.0 * 8.0 * 10.0 * 4.0
        );
        assert_eq!(p.inputs(1)[0].as_f32().unwrap(), &PEAK_CONSTANTS[..]);
    }
}
