//! The launches of a CNN (`simple_cnn`, `resnet18`, `mobilenet_v2`) on a GPU backend, one or two
//! per layer of the [`Graph`], in order, each writing its output tensor into the arena (the
//! problem's output buffer). Both sources (`kernels/opencl/model.cl`,
//! `kernels/vulkan/model_conv.comp` and `model_layer.comp`) take the same arguments in the same
//! order; OpenCL passes them as `int` arguments, Vulkan as `uint` push constants.
//!
//! - Dense convolutions and linear layers (a linear layer is the 1×1 convolution of a 1×1 image)
//!   run `model_conv`, an implicit GEMM over 64×64 tiles of (output channels × output pixels of the
//!   whole batch). When the tiles are too few to fill the device ([`conv_split`]: ResNet-18's last
//!   stage at batch 1 has 8 tiles of 4608-long dot products), the dot products are cut into chunks
//!   whose partial sums go to the scratch buffer, and a `model_layer` op 4 launch adds them up with
//!   the bias and the activation.
//! - Depthwise convolutions, pooling and residual adds run `model_layer`, which grid-strides over
//!   the layer's outputs and switches on the op code in its first argument. So do the dense
//!   convolutions and linear layers (op 0, one output per work-item) on a device whose groups
//!   cannot hold `model_conv`'s [`CONV_GROUP`] work-items.
//!
//! Offsets are in elements.

use gpufleet_kernels::Problem;
use gpufleet_kernels::model::{Graph, Layer, Op};

use super::{Unsupported, bounded};

/// `model_layer` op codes shared with the sources.
const OP_CONV: usize = 0;
const OP_MAXPOOL: usize = 1;
const OP_AVGPOOL: usize = 2;
const OP_ADD: usize = 3;
const OP_REDUCE: usize = 4;

/// Names of a `model_layer` launch's scalar arguments, in the sources' order. For op 4 (reduce),
/// `groups` is the number of partial sums.
pub const LAYER_ARGS: [&str; 18] = [
    "op", "total", "x_off", "w_off", "b_off", "s_off", "out_off", "cin", "h", "w", "cout", "oh",
    "ow", "k", "stride", "pad", "groups", "act",
];

/// Names of a `model_conv` launch's scalar arguments, in the sources' order.
pub const CONV_ARGS: [&str; 18] = [
    "x_off", "w_off", "b_off", "out_off", "cin", "h", "w", "cout", "oh", "ow", "k", "stride",
    "pad", "act", "ncols", "kdim", "k_chunk", "splits",
];

/// Outputs per `model_conv` tile side (output channels × output pixels), and its work-items.
pub const CONV_TILE: usize = 64;
/// Depth of one `model_conv` k step; a split's chunk is a multiple of it.
pub const CONV_TK: usize = 16;
/// Work-items of a `model_conv` group (4×4 outputs each).
pub const CONV_GROUP: usize = 256;

/// Where a buffer a launch binds lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tensor {
    /// Input 0, the images.
    Images,
    /// The output buffer, the arena.
    Arena,
    /// Scratch buffer 0, the partial sums of a split convolution.
    Partials,
}

/// Which kernel a launch runs, with its grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKernel {
    /// `model_layer`, grid-striding over `total` outputs.
    Layer {
        /// Outputs of the launch (all images).
        total: usize,
    },
    /// `model_conv` on `[tiles_n, tiles_m, splits]` groups of [`CONV_GROUP`] work-items.
    Conv {
        /// Groups along the output pixels (64 each).
        tiles_n: usize,
        /// Groups along the output channels (64 each).
        tiles_m: usize,
        /// Chunks of the dot products.
        splits: usize,
    },
}

/// One launch: its kernel, the buffers it binds besides the weights (input 1) and the arena (the
/// output), and its scalar arguments ([`LAYER_ARGS`] or [`CONV_ARGS`]).
#[derive(Debug, Clone, PartialEq)]
pub struct LayerStep {
    /// The layer's name (for messages).
    pub name: String,
    /// The kernel and its grid.
    pub kernel: StepKernel,
    /// The buffer bound first (the layer's input, or the partial sums a reduce reads).
    pub x: Tensor,
    /// The buffer bound fourth (a residual addend, or the partial sums a split conv writes).
    pub s: Tensor,
    /// The scalar arguments, each checked to fit an `i32`.
    pub args: Vec<usize>,
}

/// The launches of a network and the scratch they need.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelPlan {
    /// In order.
    pub steps: Vec<LayerStep>,
    /// Floats of the partial-sum scratch buffer (0 when no convolution is split).
    pub partial_floats: usize,
}

/// How a convolution's `kdim`-long dot products are chunked when its `tiles` 64×64 tiles would
/// leave most of a device of `compute_units` idle: `(splits, k_chunk)`. Enough chunks for about
/// four groups per compute unit, each at least four k steps long (shorter chunks would spend
/// more on the partial sums' traffic than they gain). `compute_units` 0 (unknown) counts as 4.
pub fn conv_split(tiles: usize, kdim: usize, compute_units: usize) -> (usize, usize) {
    let target = 4 * if compute_units == 0 { 4 } else { compute_units };
    let most = (kdim / (4 * CONV_TK)).max(1);
    let splits = target.div_ceil(tiles.max(1)).clamp(1, most);
    let k_chunk = kdim.div_ceil(splits).next_multiple_of(CONV_TK);
    (kdim.div_ceil(k_chunk), k_chunk)
}

/// The launches of `problem`'s network (a model kernel) on a device of `compute_units`; `tiled`:
/// whether the device runs groups of [`CONV_GROUP`] work-items (`model_conv`).
///
/// # Errors
/// [`Unsupported`] when an offset or size exceeds `i32::MAX` (a very large batch), naming the
/// layer and the quantity.
pub fn layer_steps(
    problem: &Problem,
    compute_units: usize,
    tiled: bool,
) -> Result<ModelPlan, Unsupported> {
    let g = problem.graph();
    let mut plan = ModelPlan {
        steps: Vec::new(),
        partial_floats: 0,
    };
    for l in &g.layers {
        steps_of(problem, &g, l, compute_units, tiled, &mut plan)?;
    }
    bounded(
        problem,
        "partial sums",
        plan.partial_floats,
        i32::MAX,
        "int offset",
    )?;
    Ok(plan)
}

/// Tensor `t` of `g`: where it lives and its offset there.
fn tensor(g: &Graph, t: usize) -> (Tensor, usize) {
    if t == 0 {
        (Tensor::Images, 0)
    } else {
        (Tensor::Arena, g.layers[t - 1].out_offset)
    }
}

fn checked(
    problem: &Problem,
    l: &Layer,
    names: &[&str],
    values: &[usize],
) -> Result<(), Unsupported> {
    for (what, &v) in names.iter().zip(values) {
        bounded(
            problem,
            &format!("{} {what}", l.name),
            v,
            i32::MAX,
            "int argument",
        )?;
    }
    Ok(())
}

fn steps_of(
    problem: &Problem,
    g: &Graph,
    l: &Layer,
    compute_units: usize,
    tiled: bool,
    plan: &mut ModelPlan,
) -> Result<(), Unsupported> {
    let (x, x_off) = tensor(g, l.input);
    let total = g.batch * l.out.len();
    // The arena's end bounds every offset into it.
    bounded(
        problem,
        &format!("{} arena end", l.name),
        l.out_offset + total,
        i32::MAX,
        "int offset",
    )?;
    // A dense convolution, or a linear layer as the 1×1 convolution of a 1×1 image.
    let dense = match l.op {
        Op::Conv(c) if c.groups == 1 => Some((
            l.inp.c,
            l.inp.h,
            l.inp.w,
            c.k,
            c.stride,
            c.pad,
            c.act.code() as usize,
        )),
        Op::Linear { act, .. } => Some((l.inp.len(), 1, 1, 1, 1, 0, act.code() as usize)),
        _ => None,
    };
    let b_off = l.w_offset + l.w_len;
    if let (true, Some((cin, h, w, k, stride, pad, act))) = (tiled, dense) {
        let (cout, plane) = (l.out.c, l.out.h * l.out.w);
        let ncols = g.batch * plane;
        let kdim = cin * k * k;
        let (tiles_n, tiles_m) = (ncols.div_ceil(CONV_TILE), cout.div_ceil(CONV_TILE));
        let (splits, k_chunk) = conv_split(tiles_n * tiles_m, kdim, compute_units);
        let (oh, ow) = (l.out.h, l.out.w);
        let args = vec![
            x_off,
            l.w_offset,
            b_off,
            l.out_offset,
            cin,
            h,
            w,
            cout,
            oh,
            ow,
            k,
            stride,
            pad,
            act,
            ncols,
            kdim,
            k_chunk,
            splits,
        ];
        checked(problem, l, &CONV_ARGS, &args)?;
        plan.steps.push(LayerStep {
            name: l.name.clone(),
            kernel: StepKernel::Conv {
                tiles_n,
                tiles_m,
                splits,
            },
            x,
            s: if splits > 1 {
                Tensor::Partials
            } else {
                Tensor::Arena
            },
            args,
        });
        if splits > 1 {
            plan.partial_floats = plan.partial_floats.max(splits * cout * ncols);
            let args = vec![
                OP_REDUCE,
                total,
                0,
                l.w_offset,
                b_off,
                0,
                l.out_offset,
                cout,
                1,
                1,
                cout,
                oh,
                ow,
                1,
                1,
                0,
                splits,
                act,
            ];
            checked(problem, l, &LAYER_ARGS, &args)?;
            plan.steps.push(LayerStep {
                name: format!("{} (sum of {splits} partial sums)", l.name),
                kernel: StepKernel::Layer { total },
                x: Tensor::Partials,
                s: Tensor::Arena,
                args,
            });
        }
        return Ok(());
    }
    let (mut s, mut s_off) = (Tensor::Arena, 0);
    let (mut k, mut stride, mut pad, mut groups, mut act) = (1, 1, 0, 1, 0);
    // A linear layer on op 0: the 1×1 convolution of a 1×1 image of its flattened input.
    let mut inp = l.inp;
    let op = match l.op {
        Op::Conv(c) => {
            (k, stride, pad, groups, act) = (c.k, c.stride, c.pad, c.groups, c.act.code() as usize);
            OP_CONV
        }
        Op::MaxPool {
            k: kk,
            stride: st,
            pad: p,
        } => {
            (k, stride, pad) = (kk, st, p);
            OP_MAXPOOL
        }
        Op::GlobalAvgPool => OP_AVGPOOL,
        Op::Add { skip, act: a } => {
            (s, s_off) = tensor(g, skip);
            act = a.code() as usize;
            OP_ADD
        }
        Op::Linear { act: a, .. } => {
            inp = gpufleet_kernels::model::Shape {
                c: l.inp.len(),
                h: 1,
                w: 1,
            };
            act = a.code() as usize;
            OP_CONV
        }
    };
    let args = vec![
        op,
        total,
        x_off,
        l.w_offset,
        b_off,
        s_off,
        l.out_offset,
        inp.c,
        inp.h,
        inp.w,
        l.out.c,
        l.out.h,
        l.out.w,
        k,
        stride,
        pad,
        groups,
        act,
    ];
    checked(problem, l, &LAYER_ARGS, &args)?;
    plan.steps.push(LayerStep {
        name: l.name.clone(),
        kernel: StepKernel::Layer { total },
        x,
        s,
        args,
    });
    Ok(())
}

/// The configuration every GPU model plan records.
pub fn model_config(
    problem: &Problem,
    plan: &ModelPlan,
    group: usize,
) -> std::collections::BTreeMap<String, String> {
    let g = problem.graph();
    let split = plan
        .steps
        .iter()
        .filter(|s| matches!(s.kernel, StepKernel::Conv { splits, .. } if splits > 1))
        .count();
    [
        ("kernel", "model_conv + model_layer".to_string()),
        ("layers", g.layers.len().to_string()),
        ("launches", plan.steps.len().to_string()),
        ("split_convolutions", split.to_string()),
        ("local", group.to_string()),
        ("gflop_per_batch", format!("{:.3}", g.flops() / 1e9)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn problem(net: &str, batch: i64) -> Problem {
        let params = BTreeMap::from([("batch".to_string(), batch)]);
        Problem::new(net, "", &params, "f32", false).unwrap()
    }

    #[test]
    fn few_tiles_are_split_and_many_are_not() {
        // ResNet-18's last stage at batch 1 on an H100: 8 tiles of 4608-long dot products.
        let (splits, chunk) = conv_split(8, 4608, 132);
        assert_eq!((splits, chunk), (58, 80));
        assert!(splits * chunk >= 4608 && (splits - 1) * chunk < 4608);
        // Enough tiles already: one chunk, the whole dot product.
        assert_eq!(conv_split(2000, 576, 132), (1, 576));
        // Short dot products are never cut below four k steps.
        assert_eq!(conv_split(1, 147, 132).0, 2);
        assert_eq!(conv_split(1, 27, 132), (1, 32));
    }

    #[test]
    fn every_layer_is_planned_with_reduces_after_split_convolutions() {
        let p = problem("resnet18", 1);
        let g = p.graph();
        let plan = layer_steps(&p, 132, true).unwrap();
        let reduces = plan
            .steps
            .iter()
            .filter(|s| s.x == Tensor::Partials)
            .count();
        let split = plan
            .steps
            .iter()
            .filter(|s| s.s == Tensor::Partials)
            .count();
        assert!(
            split > 0,
            "an H100 splits ResNet-18's last stage at batch 1"
        );
        assert_eq!(
            reduces, split,
            "each split convolution is followed by its reduce"
        );
        assert_eq!(plan.steps.len(), g.layers.len() + split);
        // The scratch holds the largest split's partial sums.
        let largest = plan
            .steps
            .iter()
            .filter_map(|s| match s.kernel {
                StepKernel::Conv { splits, .. } if splits > 1 => {
                    Some(splits * s.args[7] * s.args[14])
                }
                _ => None,
            })
            .max()
            .unwrap();
        assert_eq!(plan.partial_floats, largest);
        // On a 2-core CPU device nothing of ResNet-18 is split.
        let cpu = layer_steps(&p, 2, true).unwrap();
        assert_eq!(cpu.partial_floats, 0);
        assert_eq!(cpu.steps.len(), g.layers.len());
        // The depthwise convolutions of MobileNetV2 stay on model_layer (op 0).
        let m = problem("mobilenet_v2", 1);
        let mplan = layer_steps(&m, 2, true).unwrap();
        let dw = mplan
            .steps
            .iter()
            .filter(|s| s.name.ends_with(".dw"))
            .collect::<Vec<_>>();
        assert_eq!(dw.len(), 17);
        assert!(
            dw.iter()
                .all(|s| matches!(s.kernel, StepKernel::Layer { .. }) && s.args[0] == OP_CONV)
        );
    }

    #[test]
    fn small_groups_run_every_layer_on_model_layer() {
        let p = problem("simple_cnn", 2);
        let plan = layer_steps(&p, 132, false).unwrap();
        assert_eq!(plan.partial_floats, 0);
        assert_eq!(plan.steps.len(), p.graph().layers.len());
        assert!(
            plan.steps
                .iter()
                .all(|s| matches!(s.kernel, StepKernel::Layer { .. }))
        );
        // The linear head as op 0: a 1×1 convolution over the 2048 flattened inputs.
        let fc = plan.steps.last().unwrap();
        assert_eq!(fc.args[0], OP_CONV);
        assert_eq!(&fc.args[7..10], &[128 * 4 * 4, 1, 1]);
        assert_eq!(fc.args[10], 10);
    }

    #[test]
    fn the_largest_catalog_batch_keeps_every_offset_in_an_int() {
        // The catalog's batch bound (256) is what keeps the int arguments safe: every network
        // plans at it, split or not.
        for net in ["simple_cnn", "resnet18", "mobilenet_v2"] {
            let p = problem(net, 256);
            for tiled in [true, false] {
                layer_steps(&p, 132, tiled).unwrap_or_else(|e| panic!("{net}: {}", e.0));
            }
        }
    }
}
