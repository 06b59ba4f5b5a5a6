//! The static list of kernels: names, variants, parameters with bounds, dtypes and metric.
//!
//! It is data, not code, so the agent can advertise it in `Describe`, the coordinator can validate a
//! suite before any agent sees it, and a backend can tell which catalog entries it implements. What each
//! kernel *computes* lives in [`crate::Problem`] and the `check` module; this file only describes.

use crate::types::{Dtype, MetricKind};

/// Which kernel a [`KernelDef`] describes; matched on by backends to pick an implementation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelId {
    /// `gemm`: C = A·B.
    Gemm,
    /// `vec_add`: c = a + b.
    VecAdd,
    /// `copy`: b = a.
    Copy,
    /// `triad`: a = b + 3·c (STREAM triad).
    Triad,
    /// `noop`: `out[0] = in[0]`; measures launch latency.
    Noop,
    /// `softmax`: row-wise softmax.
    Softmax,
    /// `layernorm`: row-wise layer normalisation with gamma and beta.
    LayerNorm,
    /// `rmsnorm`: row-wise RMS normalisation with gamma.
    RmsNorm,
    /// `layernorm_rmsnorm_fused`: rmsnorm(layernorm(x)·g1 + b1)·g2.
    LayerNormRmsNormFused,
    /// `conv2d`: NCHW direct convolution with zero padding.
    Conv2d,
    /// `relu`: max(x, 0).
    Relu,
    /// `sigmoid`: 1 / (1 + e^-x).
    Sigmoid,
    /// `tanh`: tanh(x).
    Tanh,
    /// A CNN or one of its layers, run as a graph of layers (see [`ModelKernel`] and `model`).
    Model(ModelKernel),
    /// `membw_cpu`: sum of a large array, host memory bandwidth.
    MembwCpu,
    /// `memlat_cpu`: pointer chasing over a random cycle, host memory latency.
    MemlatCpu,
    /// `debug_crash`: the worker segfaults or aborts.
    DebugCrash,
    /// `debug_hang`: the worker never returns.
    DebugHang,
    /// `debug_wrong`: vec_add whose backend returns a wrong answer.
    DebugWrong,
    /// `debug_alloc`: the worker allocates and touches `gib` GiB of host memory.
    DebugAlloc,
}

/// The kernels that run a graph of CNN layers ([`crate::model::Graph`]): every backend runs them
/// with the same code, layer by layer, and validates them layer by layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModelKernel {
    /// `simple_cnn`: a small CIFAR-sized CNN's inference (see `model`).
    SimpleCnn,
    /// `resnet18`: ResNet-18 inference at 224×224.
    Resnet18,
    /// `mobilenet_v2`: MobileNetV2 inference at 224×224.
    MobilenetV2,
    /// `cnn_conv`: one convolution layer of a CNN (variants dense and depthwise) with bias and
    /// activation.
    CnnConv,
    /// `cnn_maxpool`: one max-pooling layer.
    CnnMaxPool,
    /// `cnn_avgpool`: one global-average-pooling layer.
    CnnAvgPool,
    /// `cnn_linear`: one fully connected layer with bias and activation.
    CnnLinear,
}

/// One integer parameter of a kernel, with its default and inclusive bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamDef {
    /// Name as written in specs and suites (`"n"`, `"rows"`).
    pub name: &'static str,
    /// Value used when a spec omits the parameter.
    pub default: i64,
    /// Smallest accepted value.
    pub min: i64,
    /// Largest accepted value (a sanity bound; the agent checks device memory separately).
    pub max: i64,
    /// One-line meaning, shown by `Describe` and the CLI.
    pub doc: &'static str,
}

/// Everything static about one kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelDef {
    /// Identity for matching in code.
    pub id: KernelId,
    /// Name in specs, suites and spec keys.
    pub name: &'static str,
    /// One-line description for `Describe` and reports.
    pub description: &'static str,
    /// Implementation strategies a backend may offer; all compute the same result.
    pub variants: &'static [&'static str],
    /// Variant used when a spec leaves it empty.
    pub default_variant: &'static str,
    /// Integer parameters, in display order.
    pub params: &'static [ParamDef],
    /// Dtypes the kernel is defined for.
    pub dtypes: &'static [Dtype],
    /// Headline number derived from the median time.
    pub metric: MetricKind,
    /// Only meaningful on the host (`membw_cpu`, `memlat_cpu`): only the cpu backend runs it.
    pub host_only: bool,
    /// Misbehaves on purpose (`debug_*`): only available when the agent enables debug kernels.
    pub debug: bool,
}

impl KernelDef {
    /// The definition of parameter `name`, if the kernel has it.
    pub fn param(&self, name: &str) -> Option<&'static ParamDef> {
        self.params.iter().find(|p| p.name == name)
    }
}

const F32_ONLY: &[Dtype] = &[Dtype::F32];
const F32_F16: &[Dtype] = &[Dtype::F32, Dtype::F16];
const DEFAULT_VARIANT: &[&str] = &["default"];

const fn p(name: &'static str, default: i64, min: i64, max: i64, doc: &'static str) -> ParamDef {
    ParamDef {
        name,
        default,
        min,
        max,
        doc,
    }
}

const GEMM_PARAMS: &[ParamDef] = &[
    p("m", 256, 1, 65536, "rows of A and C"),
    p("n", 256, 1, 65536, "columns of B and C"),
    p("k", 256, 1, 65536, "columns of A, rows of B"),
];
const N_PARAMS: &[ParamDef] = &[p("n", 1 << 20, 1, 1 << 30, "elements per vector")];
const ROW_PARAMS: &[ParamDef] = &[
    p("rows", 256, 1, 1 << 24, "independent rows"),
    p(
        "cols",
        1024,
        1,
        1 << 20,
        "elements per row (the reduced dimension)",
    ),
];
const CONV_PARAMS: &[ParamDef] = &[
    p("batch", 1, 1, 4096, "images (N)"),
    p("channels", 16, 1, 4096, "input channels (C)"),
    p("height", 64, 1, 16384, "input height (H)"),
    p("width", 64, 1, 16384, "input width (W)"),
    p("filters", 32, 1, 4096, "output channels (K)"),
    p("ksize", 3, 3, 5, "square filter size, 3 or 5"),
    p("stride", 1, 1, 4, "stride in both directions"),
    p("pad", 1, 0, 3, "zero padding on each side"),
];
const MODEL_PARAMS: &[ParamDef] = &[p("batch", 1, 1, 256, "images per inference (N)")];
// The networks' layers one at a time. The bounds keep every size of the one-layer graph far inside
// u64 (the footprint check then refuses what does not fit the host).
const ACT_DOC: &str = "activation after the bias: 0 none, 1 ReLU, 2 ReLU6";
const CNN_CONV_PARAMS: &[ParamDef] = &[
    p("batch", 1, 1, 256, "images (N)"),
    p("channels", 64, 1, 4096, "input channels"),
    p("height", 56, 1, 4096, "input height"),
    p("width", 56, 1, 4096, "input width"),
    p(
        "filters",
        64,
        1,
        4096,
        "output channels (the depthwise variant: = channels)",
    ),
    p("ksize", 3, 1, 7, "square filter side; padding is ksize/2"),
    p("stride", 1, 1, 4, "stride in both directions"),
    p("act", 1, 0, 2, ACT_DOC),
];
const CNN_POOL_PARAMS: &[ParamDef] = &[
    p("batch", 1, 1, 256, "images (N)"),
    p("channels", 64, 1, 4096, "channels"),
    p("height", 112, 1, 4096, "input height"),
    p("width", 112, 1, 4096, "input width"),
    p("ksize", 3, 1, 7, "square window side"),
    p("stride", 2, 1, 4, "stride in both directions"),
    p(
        "pad",
        1,
        0,
        3,
        "padding on each side (never the maximum); below ksize",
    ),
];
const CNN_AVGPOOL_PARAMS: &[ParamDef] = &[
    p("batch", 1, 1, 256, "images (N)"),
    p("channels", 512, 1, 4096, "channels"),
    p("height", 7, 1, 4096, "plane height"),
    p("width", 7, 1, 4096, "plane width"),
];
const CNN_LINEAR_PARAMS: &[ParamDef] = &[
    p("batch", 1, 1, 4096, "rows of the input (N)"),
    p("inputs", 512, 1, 65536, "input features"),
    p("outputs", 1000, 1, 65536, "output features"),
    p("act", 0, 0, 2, ACT_DOC),
];
const MEMBW_PARAMS: &[ParamDef] = &[p("n", 1 << 24, 1, 1 << 32, "f32 elements summed")];
const MEMLAT_PARAMS: &[ParamDef] = &[
    p(
        "size_kib",
        65536,
        4,
        1 << 24,
        "size of the chased table in KiB",
    ),
    p("hops", 1 << 20, 1, 1 << 28, "dependent loads per iteration"),
];
const CRASH_PARAMS: &[ParamDef] = &[p("mode", 0, 0, 1, "0 = SIGSEGV, 1 = abort")];
const DEBUG_WRONG_PARAMS: &[ParamDef] = &[p("n", 1024, 1, 1 << 30, "elements per vector")];
const DEBUG_ALLOC_PARAMS: &[ParamDef] = &[p(
    "gib",
    1,
    1,
    1024,
    "GiB of host memory the worker allocates and touches",
)];

const fn elementwise(
    id: KernelId,
    name: &'static str,
    description: &'static str,
    metric: MetricKind,
) -> KernelDef {
    default_variant_def(id, name, description, N_PARAMS, metric)
}

const fn rows(id: KernelId, name: &'static str, description: &'static str) -> KernelDef {
    default_variant_def(id, name, description, ROW_PARAMS, MetricKind::Gbps)
}

/// An f32 device kernel with one variant, `default` (debug and host-only entries override the flags).
const fn default_variant_def(
    id: KernelId,
    name: &'static str,
    description: &'static str,
    params: &'static [ParamDef],
    metric: MetricKind,
) -> KernelDef {
    KernelDef {
        id,
        name,
        description,
        variants: DEFAULT_VARIANT,
        default_variant: "default",
        params,
        dtypes: F32_ONLY,
        metric,
        host_only: false,
        debug: false,
    }
}

static CATALOG: [KernelDef; 26] = [
    KernelDef {
        id: KernelId::Gemm,
        name: "gemm",
        description: "dense matrix multiply C = A·B (row-major, m×k times k×n)",
        variants: &["naive", "tiled", "blocked"],
        default_variant: "blocked",
        params: GEMM_PARAMS,
        dtypes: F32_F16,
        metric: MetricKind::Gflops,
        host_only: false,
        debug: false,
    },
    elementwise(KernelId::VecAdd, "vec_add", "c = a + b", MetricKind::Gbps),
    elementwise(
        KernelId::Copy,
        "copy",
        "b = a (STREAM copy)",
        MetricKind::Gbps,
    ),
    elementwise(
        KernelId::Triad,
        "triad",
        "a = b + 3·c (STREAM triad)",
        MetricKind::Gbps,
    ),
    default_variant_def(
        KernelId::Noop,
        "noop",
        "out[0] = in[0]; measures launch latency",
        &[],
        MetricKind::Micros,
    ),
    rows(KernelId::Softmax, "softmax", "row-wise softmax"),
    rows(
        KernelId::LayerNorm,
        "layernorm",
        "row-wise layer normalisation y = (x-mean)/sqrt(var+1e-5)·gamma + beta",
    ),
    rows(
        KernelId::RmsNorm,
        "rmsnorm",
        "row-wise RMS normalisation y = x/sqrt(mean(x²)+1e-5)·gamma",
    ),
    rows(
        KernelId::LayerNormRmsNormFused,
        "layernorm_rmsnorm_fused",
        "y = rmsnorm(layernorm(x)·gamma1 + beta1)·gamma2 in one pass over x",
    ),
    KernelDef {
        id: KernelId::Conv2d,
        name: "conv2d",
        description: "2-D convolution, NCHW input, KCRS weights, zero padding",
        variants: &["direct", "im2col"],
        default_variant: "im2col",
        params: CONV_PARAMS,
        dtypes: F32_ONLY,
        metric: MetricKind::Gflops,
        host_only: false,
        debug: false,
    },
    elementwise(KernelId::Relu, "relu", "y = max(x, 0)", MetricKind::Gbps),
    elementwise(
        KernelId::Sigmoid,
        "sigmoid",
        "y = 1 / (1 + e^-x)",
        MetricKind::Gbps,
    ),
    elementwise(KernelId::Tanh, "tanh", "y = tanh(x)", MetricKind::Gbps),
    default_variant_def(
        KernelId::Model(ModelKernel::SimpleCnn),
        "simple_cnn",
        "CNN inference on 3×32×32 images: 3 × (3×3 conv + ReLU + 2×2 max-pool), linear to 10 \
         classes; seeded weights, fp32",
        MODEL_PARAMS,
        MetricKind::ImagesPerS,
    ),
    default_variant_def(
        KernelId::Model(ModelKernel::Resnet18),
        "resnet18",
        "ResNet-18 inference on 3×224×224 images, batch norm folded, seeded weights, fp32",
        MODEL_PARAMS,
        MetricKind::ImagesPerS,
    ),
    default_variant_def(
        KernelId::Model(ModelKernel::MobilenetV2),
        "mobilenet_v2",
        "MobileNetV2 (width 1.0) inference on 3×224×224 images, batch norm folded, seeded \
         weights, fp32",
        MODEL_PARAMS,
        MetricKind::ImagesPerS,
    ),
    KernelDef {
        id: KernelId::Model(ModelKernel::CnnConv),
        name: "cnn_conv",
        description: "one CNN convolution layer: NCHW, zero padding ksize/2, bias, activation; \
                      dense (1×1, strided, 7×7 alike) or depthwise (one filter per channel); \
                      validated like a network's layer",
        variants: &["dense", "depthwise"],
        default_variant: "dense",
        params: CNN_CONV_PARAMS,
        dtypes: F32_ONLY,
        metric: MetricKind::Gflops,
        host_only: false,
        debug: false,
    },
    default_variant_def(
        KernelId::Model(ModelKernel::CnnMaxPool),
        "cnn_maxpool",
        "one CNN max-pooling layer over ksize×ksize windows (padding never wins)",
        CNN_POOL_PARAMS,
        MetricKind::Gbps,
    ),
    default_variant_def(
        KernelId::Model(ModelKernel::CnnAvgPool),
        "cnn_avgpool",
        "one CNN global-average-pooling layer: the mean of each channel's plane",
        CNN_AVGPOOL_PARAMS,
        MetricKind::Gbps,
    ),
    default_variant_def(
        KernelId::Model(ModelKernel::CnnLinear),
        "cnn_linear",
        "one fully connected layer: y = act(W·x + b) per row of the input",
        CNN_LINEAR_PARAMS,
        MetricKind::Gflops,
    ),
    KernelDef {
        host_only: true,
        ..default_variant_def(
            KernelId::MembwCpu,
            "membw_cpu",
            "sum of a large f32 array; host memory read bandwidth",
            MEMBW_PARAMS,
            MetricKind::Gbps,
        )
    },
    KernelDef {
        host_only: true,
        ..default_variant_def(
            KernelId::MemlatCpu,
            "memlat_cpu",
            "pointer chasing over one random cycle of 64-byte lines; host memory latency",
            MEMLAT_PARAMS,
            MetricKind::NsPerHop,
        )
    },
    KernelDef {
        debug: true,
        ..default_variant_def(
            KernelId::DebugCrash,
            "debug_crash",
            "crashes the worker (SIGSEGV or abort) to exercise isolation",
            CRASH_PARAMS,
            MetricKind::Micros,
        )
    },
    KernelDef {
        debug: true,
        ..default_variant_def(
            KernelId::DebugHang,
            "debug_hang",
            "never returns, to exercise the watchdog",
            &[],
            MetricKind::Micros,
        )
    },
    KernelDef {
        debug: true,
        ..default_variant_def(
            KernelId::DebugWrong,
            "debug_wrong",
            "vec_add whose backend returns a wrong answer, to exercise validation",
            DEBUG_WRONG_PARAMS,
            MetricKind::Gbps,
        )
    },
    KernelDef {
        debug: true,
        ..default_variant_def(
            KernelId::DebugAlloc,
            "debug_alloc",
            "allocates and touches `gib` GiB of host memory in the worker (claiming a tiny \
             footprint), to exercise the worker's memory limit",
            DEBUG_ALLOC_PARAMS,
            MetricKind::Micros,
        )
    },
];

/// Every kernel, debug ones included, in display order.
pub fn catalog() -> &'static [KernelDef] {
    &CATALOG
}

/// The kernel named `name` (exact match), debug ones included.
pub fn find_kernel(name: &str) -> Option<&'static KernelDef> {
    CATALOG.iter().find(|k| k.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn names_and_ids_are_unique() {
        let names: HashSet<_> = catalog().iter().map(|k| k.name).collect();
        let ids: HashSet<_> = catalog().iter().map(|k| k.id).collect();
        assert_eq!(names.len(), catalog().len());
        assert_eq!(ids.len(), catalog().len());
    }

    #[test]
    fn defaults_are_within_bounds_and_variants_consistent() {
        for k in catalog() {
            assert!(
                k.variants.contains(&k.default_variant),
                "{}: default variant not listed",
                k.name
            );
            assert!(!k.dtypes.is_empty(), "{}", k.name);
            for p in k.params {
                assert!(
                    p.min <= p.default && p.default <= p.max,
                    "{}.{}: default {} outside {}..={}",
                    k.name,
                    p.name,
                    p.default,
                    p.min,
                    p.max
                );
            }
        }
    }

    #[test]
    fn find_kernel_matches_exact_names_only() {
        assert_eq!(find_kernel("gemm").map(|k| k.id), Some(KernelId::Gemm));
        assert_eq!(
            find_kernel("debug_wrong").map(|k| k.id),
            Some(KernelId::DebugWrong)
        );
        assert!(find_kernel("GEMM").is_none());
        assert!(find_kernel("gemmm").is_none());
    }

    #[test]
    fn flags_match_the_kernel_kind() {
        let host_only: Vec<_> = catalog()
            .iter()
            .filter(|k| k.host_only)
            .map(|k| k.name)
            .collect();
        assert_eq!(host_only, ["membw_cpu", "memlat_cpu"]);
        let debug: Vec<_> = catalog()
            .iter()
            .filter(|k| k.debug)
            .map(|k| k.name)
            .collect();
        assert_eq!(
            debug,
            ["debug_crash", "debug_hang", "debug_wrong", "debug_alloc"]
        );
    }
}
