//! The CNN kernels: the networks (`simple_cnn`, `resnet18`, `mobilenet_v2`) and their layers one at
//! a time (`cnn_*`), all run as a [`Graph`] of layers (see [`crate::model`]) and validated layer
//! by layer (`check/model.rs`). This module holds their catalog entries, the one-layer network of
//! each `cnn_*` kernel with its cross-parameter rules, and their sizes.

use super::{
    EVERY_BACKEND, F32_F16, Family, KernelDef, KernelId, ParamDef, Problem, Visit,
    default_variant_def, join, nchw, p, stride,
};
use crate::check::harness::Validation;
use crate::check::model::{Storage, check_model};
use crate::inputs::{UNIT, fill, rng_for};
use crate::model::{Act, Conv, Graph, Net, Op, Shape};
use crate::types::{Buffer, Dtype, MetricKind};

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

const MODEL_PARAMS: &[ParamDef] = &[p("batch", 1, 1, 256, "images per inference (N)")];
// The networks' layers one at a time. The bounds keep every size of the one-layer graph far inside
// u64 (the footprint check then refuses what does not fit the host).
const ACT_DOC: &str = "activation after the bias: 0 none, 1 ReLU, 2 ReLU6";
const CNN_CONV_PARAMS: &[ParamDef] = &join::<4, 4, 8>(
    nchw(
        256,
        (64, "input channels"),
        (56, 4096),
        ["input height", "input width"],
    ),
    [
        p(
            "filters",
            64,
            1,
            4096,
            "output channels (the depthwise variant: = channels)",
        ),
        p("ksize", 3, 1, 7, "square filter side; padding is ksize/2"),
        stride(1),
        p("act", 1, 0, 2, ACT_DOC),
    ],
);
const CNN_POOL_PARAMS: &[ParamDef] = &join::<4, 3, 7>(
    nchw(
        256,
        (64, "channels"),
        (112, 4096),
        ["input height", "input width"],
    ),
    [
        p("ksize", 3, 1, 7, "square window side"),
        stride(2),
        p(
            "pad",
            1,
            0,
            3,
            "padding on each side (never the maximum); below ksize",
        ),
    ],
);
const CNN_AVGPOOL_PARAMS: &[ParamDef] = &nchw(
    256,
    (512, "channels"),
    (7, 4096),
    ["plane height", "plane width"],
);
const CNN_LINEAR_PARAMS: &[ParamDef] = &[
    p("batch", 1, 1, 4096, "rows of the input (N)"),
    p("inputs", 512, 1, 65536, "input features"),
    p("outputs", 1000, 1, 65536, "output features"),
    p("act", 0, 0, 2, ACT_DOC),
];
use ModelKernel as MK;

/// `def` in f16 storage too: images, weights and every layer's output stored as IEEE half (each
/// rounded once, when stored), the arithmetic and the partial sums of a split convolution f32.
const fn half_too(def: KernelDef) -> KernelDef {
    KernelDef {
        dtypes: F32_F16,
        ..def
    }
}

/// Every model kernel, in display order.
pub(super) static TABLE: [KernelDef; 7] = [
    half_too(default_variant_def(
        KernelId::Model(MK::SimpleCnn),
        "simple_cnn",
        "CNN inference on 3×32×32 images: 3 × (3×3 conv + ReLU + 2×2 max-pool), linear to 10 \
         classes; seeded weights; fp32, or f16 storage with fp32 arithmetic",
        MODEL_PARAMS,
        MetricKind::ImagesPerS,
    )),
    half_too(default_variant_def(
        KernelId::Model(MK::Resnet18),
        "resnet18",
        "ResNet-18 inference on 3×224×224 images, batch norm folded, seeded weights; fp32, or f16 \
         storage with fp32 arithmetic",
        MODEL_PARAMS,
        MetricKind::ImagesPerS,
    )),
    half_too(default_variant_def(
        KernelId::Model(MK::MobilenetV2),
        "mobilenet_v2",
        "MobileNetV2 (width 1.0) inference on 3×224×224 images, batch norm folded, seeded \
         weights; fp32, or f16 storage with fp32 arithmetic",
        MODEL_PARAMS,
        MetricKind::ImagesPerS,
    )),
    KernelDef {
        id: KernelId::Model(MK::CnnConv),
        name: "cnn_conv",
        description: "one CNN convolution layer: NCHW, zero padding ksize/2, bias, activation; \
                      dense (1×1, strided, 7×7 alike) or depthwise (one filter per channel); \
                      validated like a network's layer",
        variants: &["dense", "depthwise"],
        default_variant: "dense",
        params: CNN_CONV_PARAMS,
        dtypes: F32_F16,
        metric: MetricKind::Gflops,
        host_only: false,
        debug: false,
        backends: EVERY_BACKEND,
    },
    half_too(default_variant_def(
        KernelId::Model(MK::CnnMaxPool),
        "cnn_maxpool",
        "one CNN max-pooling layer over ksize×ksize windows (padding never wins)",
        CNN_POOL_PARAMS,
        MetricKind::Gbps,
    )),
    half_too(default_variant_def(
        KernelId::Model(MK::CnnAvgPool),
        "cnn_avgpool",
        "one CNN global-average-pooling layer: the mean of each channel's plane",
        CNN_AVGPOOL_PARAMS,
        MetricKind::Gbps,
    )),
    half_too(default_variant_def(
        KernelId::Model(MK::CnnLinear),
        "cnn_linear",
        "one fully connected layer: y = act(W·x + b) per row of the input",
        CNN_LINEAR_PARAMS,
        MetricKind::Gflops,
    )),
];

impl ModelKernel {
    /// Every model kernel.
    pub const ALL: [ModelKernel; 7] = [
        MK::SimpleCnn,
        MK::Resnet18,
        MK::MobilenetV2,
        MK::CnnConv,
        MK::CnnMaxPool,
        MK::CnnAvgPool,
        MK::CnnLinear,
    ];

    /// The network `p` runs: a whole CNN, or the one layer of a `cnn_*` kernel.
    fn network(self, p: &Problem) -> Net {
        let u = |name: &str| p.uparam(name);
        let act = || Act::from_code(p.param("act")).unwrap_or(Act::None);
        let plane = || Shape {
            c: u("channels"),
            h: u("height"),
            w: u("width"),
        };
        let layer = |image: Shape, op: Op| Net::Layer { image, op };
        match self {
            MK::SimpleCnn => Net::SimpleCnn,
            MK::Resnet18 => Net::Resnet18,
            MK::MobilenetV2 => Net::MobilenetV2,
            MK::CnnConv => {
                let k = u("ksize");
                let conv = Conv {
                    cout: u("filters"),
                    k,
                    stride: u("stride"),
                    pad: k / 2,
                    groups: if p.variant == "depthwise" {
                        u("channels")
                    } else {
                        1
                    },
                    act: act(),
                };
                layer(plane(), Op::Conv(conv))
            }
            MK::CnnMaxPool => layer(
                plane(),
                Op::MaxPool {
                    k: u("ksize"),
                    stride: u("stride"),
                    pad: u("pad"),
                },
            ),
            MK::CnnAvgPool => layer(plane(), Op::GlobalAvgPool),
            MK::CnnLinear => layer(
                Shape {
                    c: u("inputs"),
                    h: 1,
                    w: 1,
                },
                Op::Linear {
                    cout: u("outputs"),
                    act: act(),
                },
            ),
        }
    }

    /// The layer graph `p` runs, at its batch size.
    fn graph(self, p: &Problem) -> Graph {
        Graph::new(self.network(p), p.uparam("batch"))
    }
}

impl Family for ModelKernel {
    fn check_params(&self, p: &Problem) -> Result<(), String> {
        match self {
            MK::CnnConv if p.variant == "depthwise" => {
                let (c, f) = (p.param("channels"), p.param("filters"));
                if c != f {
                    return Err(format!(
                        "the depthwise variant needs filters = channels (one filter per channel): filters={f}, channels={c}"
                    ));
                }
                Ok(())
            }
            MK::CnnMaxPool => {
                let (k, pad) = (p.param("ksize"), p.param("pad"));
                if pad >= k {
                    return Err(format!(
                        "pad={pad} must be below ksize={k} (a window of padding alone has no maximum)"
                    ));
                }
                p.window_fits()
            }
            MK::SimpleCnn
            | MK::Resnet18
            | MK::MobilenetV2
            | MK::CnnConv
            | MK::CnnAvgPool
            | MK::CnnLinear => Ok(()),
        }
    }

    fn flops(&self, p: &Problem) -> f64 {
        self.graph(p).flops()
    }

    /// Images, weights and logits (a layer kernel: its input, weights and output) at the dtype's
    /// size; the activations in between are the backend's business.
    fn bytes(&self, p: &Problem) -> f64 {
        let g = self.graph(p);
        let size = if p.dtype == Dtype::F16 { 2.0 } else { 4.0 };
        size * (g.batch * (g.image.len() + g.classes()) + g.weights_len) as f64
    }

    fn input_lens(&self, p: &Problem) -> Vec<u128> {
        let g = self.graph(p);
        vec![(g.batch * g.image.len()) as u128, g.weights_len as u128]
    }

    /// Every layer's output (the arena), so each layer can be validated.
    fn output_len(&self, p: &Problem) -> u128 {
        self.graph(p).arena_len as u128
    }

    fn net(&self, p: &Problem) -> Option<Net> {
        Some(self.network(p))
    }

    /// Images like every other input (multiples of 1/256, exact in f16); weights scaled per layer
    /// by the model, rounded to f16 in the f16 dtype so that the reference computes on the values
    /// the device holds.
    fn make_inputs(&self, p: &Problem, seed: u64) -> Vec<Buffer> {
        let g = self.graph(p);
        let images = fill(UNIT, g.batch * g.image.len(), &mut rng_for(seed, 0));
        let mut weights = g.weights(&mut rng_for(seed, 1));
        if p.dtype == Dtype::F16 {
            for w in &mut weights {
                *w = half::f16::from_f32(*w).to_f32();
            }
        }
        vec![Buffer::F32(images), Buffer::F32(weights)]
    }

    fn validate(&self, p: &Problem, inputs: &[Buffer], output: &Buffer) -> Option<Validation> {
        let f32s: Vec<&[f32]> = inputs.iter().filter_map(Buffer::as_f32).collect();
        let arena = output.as_f32()?;
        let storage = Storage::of(p.dtype);
        Some(check_model(
            &self.graph(p),
            storage,
            f32s[0],
            f32s[1],
            arena,
        ))
    }

    fn visit(&self, p: &Problem, _x: &[&[f32]], _f: Visit<'_>) -> Result<bool, String> {
        Err(format!(
            "{} validates layer by layer, not element by element",
            p.kernel.name
        ))
    }

    #[cfg(test)]
    fn reference(&self, p: &Problem, inputs: &[Buffer]) -> Buffer {
        let f32s: Vec<&[f32]> = inputs.iter().filter_map(Buffer::as_f32).collect();
        let storage = Storage::of(p.dtype);
        let arena = crate::check::model::reference_arena(&self.graph(p), storage, f32s[0], f32s[1]);
        Buffer::F32(arena)
    }
}
