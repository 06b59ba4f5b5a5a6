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

use gpufleet_kernels::model::{Graph, Layer, Op};
use gpufleet_kernels::{Dtype, Problem};

use super::{Arg, Unsupported, bounded};
use crate::backend::storage::Elem;

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

impl StepKernel {
    /// The entry point it launches: `model_layer` or `model_conv`.
    pub fn entry(&self) -> &'static str {
        match self {
            StepKernel::Layer { .. } => "model_layer",
            StepKernel::Conv { .. } => "model_conv",
        }
    }
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
    /// How the images, the weights and the arena are stored: f32, or IEEE half in the f16 dtype
    /// (the arithmetic and the partial sums stay f32; each output is rounded once, when stored).
    pub storage: Elem,
}

impl ModelPlan {
    /// The entry point of `kernel` in this plan's storage: `model_conv`, or `model_conv_f16` for
    /// half tensors (HIP's instantiation, Vulkan's module; OpenCL builds the one name with `HALF`
    /// defined instead).
    pub fn symbol(&self, kernel: StepKernel) -> String {
        match self.storage {
            Elem::F16 => format!("{}_f16", kernel.entry()),
            _ => kernel.entry().to_string(),
        }
    }

    /// The plan's scratch buffers in bytes: the partial sums, when a convolution is split.
    pub fn scratch_bytes(&self) -> Vec<usize> {
        if self.partial_floats > 0 {
            vec![self.partial_floats * 4]
        } else {
            Vec::new()
        }
    }
}

impl Tensor {
    /// The OpenCL or HIP argument of the buffer (Vulkan binds [`Tensor`]s as its own bindings).
    pub fn arg(self) -> Arg {
        match self {
            Tensor::Images => Arg::Input(0),
            Tensor::Arena => Arg::Output,
            Tensor::Partials => Arg::Scratch(0),
        }
    }
}

impl LayerStep {
    /// The step's OpenCL or HIP arguments: x, the weights, the arena, s, then the scalars as
    /// `int`s (`layer_steps` checked that each fits).
    pub fn launch_args(&self) -> Vec<Arg> {
        let mut args = vec![self.x.arg(), Arg::Input(1), Arg::Output, self.s.arg()];
        args.extend(self.args.iter().map(|&v| Arg::Int(v as i32)));
        args
    }
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
        storage: if problem.dtype == Dtype::F16 {
            Elem::F16
        } else {
            Elem::F32
        },
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

/// A convolution's geometry: a convolution layer's own, or a linear layer's as the 1×1
/// convolution of a 1×1 image whose channels are its flattened input.
struct Geometry {
    cin: usize,
    h: usize,
    w: usize,
    k: usize,
    stride: usize,
    pad: usize,
    groups: usize,
    act: usize,
}

fn geometry(l: &Layer) -> Option<Geometry> {
    match l.op {
        Op::Conv(c) => Some(Geometry {
            cin: l.inp.c,
            h: l.inp.h,
            w: l.inp.w,
            k: c.k,
            stride: c.stride,
            pad: c.pad,
            groups: c.groups,
            act: c.act.code() as usize,
        }),
        Op::Linear { act, .. } => Some(Geometry {
            cin: l.inp.len(),
            h: 1,
            w: 1,
            k: 1,
            stride: 1,
            pad: 0,
            groups: 1,
            act: act.code() as usize,
        }),
        _ => None,
    }
}

/// A `model_layer` launch's scalar arguments by name ([`LAYER_ARGS`] is their order).
struct LayerArgs {
    op: usize,
    total: usize,
    x_off: usize,
    w_off: usize,
    b_off: usize,
    s_off: usize,
    out_off: usize,
    cin: usize,
    h: usize,
    w: usize,
    cout: usize,
    oh: usize,
    ow: usize,
    k: usize,
    stride: usize,
    pad: usize,
    groups: usize,
    act: usize,
}

impl LayerArgs {
    /// The values in [`LAYER_ARGS`] order.
    fn values(&self) -> Vec<usize> {
        vec![
            self.op,
            self.total,
            self.x_off,
            self.w_off,
            self.b_off,
            self.s_off,
            self.out_off,
            self.cin,
            self.h,
            self.w,
            self.cout,
            self.oh,
            self.ow,
            self.k,
            self.stride,
            self.pad,
            self.groups,
            self.act,
        ]
    }
}

/// Appends a `model_layer` launch of `args` over all of layer `l`'s outputs, its arguments checked
/// to fit an `int`.
fn push_layer(
    problem: &Problem,
    l: &Layer,
    plan: &mut ModelPlan,
    name: String,
    x: Tensor,
    s: Tensor,
    args: LayerArgs,
) -> Result<(), Unsupported> {
    let values = args.values();
    checked(problem, l, &LAYER_ARGS, &values)?;
    plan.steps.push(LayerStep {
        name,
        kernel: StepKernel::Layer { total: args.total },
        x,
        s,
        args: values,
    });
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
    let geom = geometry(l);
    // Everything a model_layer launch of this layer does not set itself.
    let base = LayerArgs {
        op: OP_CONV,
        total,
        x_off,
        w_off: l.w_offset,
        b_off: l.w_offset + l.w_len,
        s_off: 0,
        out_off: l.out_offset,
        cin: l.inp.c,
        h: l.inp.h,
        w: l.inp.w,
        cout: l.out.c,
        oh: l.out.h,
        ow: l.out.w,
        k: 1,
        stride: 1,
        pad: 0,
        groups: 1,
        act: 0,
    };
    if let Some(c) = geom.as_ref().filter(|c| tiled && c.groups == 1) {
        let (cout, plane) = (l.out.c, l.out.h * l.out.w);
        let ncols = g.batch * plane;
        let kdim = c.cin * c.k * c.k;
        let (tiles_n, tiles_m) = (ncols.div_ceil(CONV_TILE), cout.div_ceil(CONV_TILE));
        let (splits, k_chunk) = conv_split(tiles_n * tiles_m, kdim, compute_units);
        let args = vec![
            x_off,
            base.w_off,
            base.b_off,
            base.out_off,
            c.cin,
            c.h,
            c.w,
            cout,
            l.out.h,
            l.out.w,
            c.k,
            c.stride,
            c.pad,
            c.act,
            ncols,
            kdim,
            k_chunk,
            splits,
        ];
        checked(problem, l, &CONV_ARGS, &args)?;
        let split = splits > 1;
        plan.steps.push(LayerStep {
            name: l.name.clone(),
            kernel: StepKernel::Conv {
                tiles_n,
                tiles_m,
                splits,
            },
            x,
            s: if split {
                Tensor::Partials
            } else {
                Tensor::Arena
            },
            args,
        });
        if split {
            plan.partial_floats = plan.partial_floats.max(splits * cout * ncols);
            let reduce = LayerArgs {
                op: OP_REDUCE,
                x_off: 0,
                cin: cout,
                h: 1,
                w: 1,
                groups: splits,
                act: c.act,
                ..base
            };
            let name = format!("{} (sum of {splits} partial sums)", l.name);
            push_layer(
                problem,
                l,
                plan,
                name,
                Tensor::Partials,
                Tensor::Arena,
                reduce,
            )?;
        }
        return Ok(());
    }
    let (s, args) = match (l.op, geom) {
        // Grouped (depthwise) convolutions, and dense ones where model_conv cannot run.
        (_, Some(c)) => (
            Tensor::Arena,
            LayerArgs {
                cin: c.cin,
                h: c.h,
                w: c.w,
                k: c.k,
                stride: c.stride,
                pad: c.pad,
                groups: c.groups,
                act: c.act,
                ..base
            },
        ),
        (Op::MaxPool { k, stride, pad }, None) => (
            Tensor::Arena,
            LayerArgs {
                op: OP_MAXPOOL,
                k,
                stride,
                pad,
                ..base
            },
        ),
        (Op::GlobalAvgPool, None) => (
            Tensor::Arena,
            LayerArgs {
                op: OP_AVGPOOL,
                ..base
            },
        ),
        (Op::Add { skip, act }, None) => {
            let (s, s_off) = tensor(g, skip);
            let args = LayerArgs {
                op: OP_ADD,
                s_off,
                act: act.code() as usize,
                ..base
            };
            (s, args)
        }
        (Op::Conv(_) | Op::Linear { .. }, None) => unreachable!("convolutions have a geometry"),
    };
    push_layer(problem, l, plan, l.name.clone(), x, s, args)
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
        (
            "storage",
            match plan.storage {
                Elem::F16 => "f16 (f32 arithmetic)",
                _ => "f32",
            }
            .to_string(),
        ),
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
    fn f16_storage_names_the_half_entry_points_and_keeps_the_partials_f32() {
        let params = BTreeMap::from([("batch".to_string(), 1)]);
        let half = Problem::new("resnet18", "", &params, "f16", false).unwrap();
        let plan = layer_steps(&half, 132, true).unwrap();
        let full = layer_steps(&problem("resnet18", 1), 132, true).unwrap();
        assert_eq!((plan.storage, full.storage), (Elem::F16, Elem::F32));
        // The same launches; only the entry points and the tensors' storage differ.
        assert_eq!(plan.steps, full.steps);
        assert_eq!(plan.scratch_bytes(), full.scratch_bytes());
        assert_eq!(plan.partial_floats * 4, plan.scratch_bytes()[0]);
        let conv = StepKernel::Conv {
            tiles_n: 1,
            tiles_m: 1,
            splits: 1,
        };
        assert_eq!(plan.symbol(conv), "model_conv_f16");
        assert_eq!(full.symbol(conv), "model_conv");
        assert_eq!(
            plan.symbol(StepKernel::Layer { total: 1 }),
            "model_layer_f16"
        );
        let config = model_config(&half, &plan, 256);
        assert_eq!(config["storage"], "f16 (f32 arithmetic)");
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
