//! CNN inference workloads: `simple_cnn`, `resnet18` and `mobilenet_v2` as a list of layers every
//! backend runs in order, their seeded weights (batch norm folded into the convolutions, as
//! inference does) and an f64 reference of each layer.
//!
//! A network's tensors are NCHW f32. Tensor 0 is the input images; tensor `i + 1` is the output of
//! layer `i`. A backend writes every layer's output into one *arena*, which is the problem's
//! output buffer: tensor `i + 1` starts at [`Layer::out_offset`] and holds `batch` images of
//! [`Layer::out`]. The logits are the last tensor. Keeping every activation lets validation
//! check each layer against an f64 reference computed from the backend's own input to that layer,
//! and name the first layer that diverges.
//!
//! Weights are one buffer. A convolution's are `[cout][cin/groups][k][k]` then `cout` biases; a
//! linear layer's are `[cout][cin]` then `cout` biases (cin = the input tensor flattened per image).
//! They are drawn from PCG64 streams like every other input: He-uniform filters, batch-norm
//! statistics (γ in [0.5, 1.5], β and the mean in [-0.1, 0.1], the variance in [0.5, 1.5]; the last
//! batch norm of a residual branch has γ in [0.2, 0.5], which keeps the residual sum's scale near
//! the trained networks') folded as `w·γ/√(var+ε)` and `β − mean·γ/√(var+ε)`.

mod nets;
pub(crate) mod reference;

use nets::{Builder, mobilenet_v2, resnet18, simple_cnn};
pub use reference::{LayerRef, layer_element, layer_forward};

use rand::RngCore;
use rand_pcg::Pcg64;

/// Which network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Net {
    /// One layer alone, the network of the `cnn_*` operator kernels: `op` on `image`-shaped
    /// inputs.
    Layer {
        /// Per-image shape of the layer's input.
        image: Shape,
        /// What it computes.
        op: Op,
    },
    /// A small CIFAR-sized network: three 3×3 conv + ReLU + 2×2 max-pool stages (32, 64, 128
    /// channels) and a linear head to 10 classes, on 3×32×32 images.
    SimpleCnn,
    /// ResNet-18 (He et al. 2015) on 3×224×224 images, 1000 classes.
    Resnet18,
    /// MobileNetV2 (Sandler et al. 2018), width 1.0, on 3×224×224 images, 1000 classes.
    MobilenetV2,
}

/// Activation applied to a layer's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Act {
    /// None (linear).
    None,
    /// max(x, 0).
    Relu,
    /// min(max(x, 0), 6).
    Relu6,
}

impl Act {
    /// Applies the activation in f64.
    pub fn apply(self, x: f64) -> f64 {
        match self {
            Act::None => x,
            Act::Relu => x.max(0.0),
            Act::Relu6 => x.clamp(0.0, 6.0),
        }
    }

    /// Applies the activation in f32 (what the backends do).
    pub fn apply32(self, x: f32) -> f32 {
        match self {
            Act::None => x,
            Act::Relu => x.max(0.0),
            Act::Relu6 => x.clamp(0.0, 6.0),
        }
    }

    /// Name in configs and docs (`none`, `relu`, `relu6`).
    pub fn name(self) -> &'static str {
        match self {
            Act::None => "none",
            Act::Relu => "relu",
            Act::Relu6 => "relu6",
        }
    }

    /// The activation of code `c` (see [`Act::code`]); `None` for another number.
    pub fn from_code(c: i64) -> Option<Act> {
        match c {
            0 => Some(Act::None),
            1 => Some(Act::Relu),
            2 => Some(Act::Relu6),
            _ => None,
        }
    }

    /// Code shared with device kernels: 0 none, 1 relu, 2 relu6.
    pub fn code(self) -> u32 {
        match self {
            Act::None => 0,
            Act::Relu => 1,
            Act::Relu6 => 2,
        }
    }
}

/// Per-image shape of a tensor: channels, height, width.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    /// Channels.
    pub c: usize,
    /// Height.
    pub h: usize,
    /// Width.
    pub w: usize,
}

impl Shape {
    /// Elements per image.
    pub fn len(&self) -> usize {
        self.c * self.h * self.w
    }

    /// Whether the tensor is empty (never, for a built graph).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A convolution with its folded batch norm and bias, then an activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Conv {
    /// Output channels.
    pub cout: usize,
    /// Square filter side (1, 3 or 7 in these networks).
    pub k: usize,
    /// Stride in both directions.
    pub stride: usize,
    /// Zero padding on every side.
    pub pad: usize,
    /// Channel groups: 1 for a dense convolution, cin (= cout) for a depthwise one.
    pub groups: usize,
    /// Activation after the bias.
    pub act: Act,
}

/// What a layer computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// Convolution + bias + activation.
    Conv(Conv),
    /// Max pooling over k×k windows (padding never wins).
    MaxPool {
        /// Window side.
        k: usize,
        /// Stride.
        stride: usize,
        /// Padding on every side.
        pad: usize,
    },
    /// Mean over each channel's plane: C×H×W → C×1×1.
    GlobalAvgPool,
    /// `act(x + tensor[skip])`, the residual connection.
    Add {
        /// Tensor index of the other addend (same shape as the input).
        skip: usize,
        /// Activation after the sum.
        act: Act,
    },
    /// Fully connected layer over the flattened input + bias + activation.
    Linear {
        /// Output features.
        cout: usize,
        /// Activation after the bias.
        act: Act,
    },
}

impl Op {
    /// Short kind name for messages and per-layer tables (`conv3x3/2`, `dwconv3x3`, `maxpool`, ...).
    pub fn kind(&self) -> String {
        match self {
            Op::Conv(c) if c.groups > 1 => format!("dwconv{}x{}/{}", c.k, c.k, c.stride),
            Op::Conv(c) => format!("conv{}x{}/{}", c.k, c.k, c.stride),
            Op::MaxPool { k, stride, .. } => format!("maxpool{k}x{k}/{stride}"),
            Op::GlobalAvgPool => "avgpool".into(),
            Op::Add { .. } => "add".into(),
            Op::Linear { .. } => "linear".into(),
        }
    }
}

/// One layer of a network.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Layer {
    /// Name, PyTorch-like (`layer2.0.conv1`, `features.4.dw`).
    pub name: String,
    /// What it computes.
    pub op: Op,
    /// Tensor index of its input (0 = the images, i + 1 = layer i's output).
    pub input: usize,
    /// Per-image shape of the input.
    pub inp: Shape,
    /// Per-image shape of the output.
    pub out: Shape,
    /// Offset of its weights (then biases) in the weights buffer.
    pub w_offset: usize,
    /// Filter elements (without the biases); 0 for layers without weights.
    pub w_len: usize,
    /// Offset of its output tensor (all images) in the arena.
    pub out_offset: usize,
}

impl Layer {
    /// Multiply-adds per image (comparisons and additions for pools and adds).
    pub fn macs(&self) -> u64 {
        let out = self.out.len() as u64;
        match self.op {
            Op::Conv(c) => out * ((self.inp.c / c.groups) * c.k * c.k) as u64,
            Op::MaxPool { k, .. } => out * (k * k) as u64,
            Op::GlobalAvgPool => self.inp.len() as u64,
            Op::Add { .. } => out,
            Op::Linear { .. } => out * self.inp.len() as u64,
        }
    }

    /// Bias elements (follow the filters in the weights buffer).
    pub fn bias_len(&self) -> usize {
        match self.op {
            Op::Conv(c) => c.cout,
            Op::Linear { cout, .. } => cout,
            _ => 0,
        }
    }
}

/// A network at a batch size: its layers in execution order and the buffer sizes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Graph {
    /// Which network.
    pub net: Net,
    /// Images per run.
    pub batch: usize,
    /// Shape of one input image.
    pub image: Shape,
    /// Layers in execution order; each reads only the images or earlier layers.
    pub layers: Vec<Layer>,
    /// Elements of the weights buffer (at least 1).
    pub weights_len: usize,
    /// Elements of the arena (every layer's output, all images).
    pub arena_len: usize,
}

impl Graph {
    /// `net` at `batch` images.
    pub fn new(net: Net, batch: usize) -> Graph {
        let mut b = Builder::new(net, batch);
        match net {
            Net::Layer { op, .. } => {
                let name = match op {
                    Op::Conv(c) if c.groups > 1 => "dwconv",
                    Op::Conv(_) => "conv",
                    Op::MaxPool { .. } => "maxpool",
                    Op::GlobalAvgPool => "avgpool",
                    Op::Add { .. } => "add",
                    Op::Linear { .. } => "linear",
                };
                b.push(name.into(), op, 0);
            }
            Net::SimpleCnn => simple_cnn(&mut b),
            Net::Resnet18 => resnet18(&mut b),
            Net::MobilenetV2 => mobilenet_v2(&mut b),
        }
        // A pooling layer alone has no weights; its (unused) weights buffer still has one
        // element, since a device buffer cannot be empty.
        b.graph.weights_len = b.graph.weights_len.max(1);
        b.graph
    }

    /// Per-image shape of tensor `t` (0 = the images).
    pub fn shape(&self, t: usize) -> Shape {
        if t == 0 {
            self.image
        } else {
            self.layers[t - 1].out
        }
    }

    /// The logits' per-image length (classes).
    pub fn classes(&self) -> usize {
        self.layers.last().map_or(0, |l| l.out.len())
    }

    /// Floating-point operations of one batch: 2 per multiply-add.
    pub fn flops(&self) -> f64 {
        2.0 * self.batch as f64 * self.layers.iter().map(Layer::macs).sum::<u64>() as f64
    }

    /// Tensor `t` of image `img`, from the images buffer (t = 0) or the arena.
    pub fn tensor<'a>(
        &self,
        t: usize,
        img: usize,
        images: &'a [f32],
        arena: &'a [f32],
    ) -> &'a [f32] {
        let len = self.shape(t).len();
        if t == 0 {
            &images[img * len..(img + 1) * len]
        } else {
            let at = self.layers[t - 1].out_offset + img * len;
            &arena[at..at + len]
        }
    }

    /// The whole network in f64 on image `img` of `images`: its logits (each layer as
    /// [`layer_forward`] computes it, from the previous layers' f64 outputs).
    pub fn forward_f64(&self, img: usize, images: &[f32], weights: &[f32]) -> Vec<f64> {
        let first = self.tensor(0, img, images, &[]);
        let mut tensors: Vec<Vec<f64>> = vec![first.iter().map(|&v| f64::from(v)).collect()];
        for l in &self.layers {
            let skip = match l.op {
                Op::Add { skip, .. } => Some(tensors[skip].as_slice()),
                _ => None,
            };
            let out = layer_forward(l, &tensors[l.input], skip, weights).value;
            tensors.push(out);
        }
        tensors.pop().unwrap_or_default()
    }

    /// The layer called `name`.
    pub fn layer(&self, name: &str) -> Option<&Layer> {
        self.layers.iter().find(|l| l.name == name)
    }

    /// Scales every filter weight of layer `name` by [`PERTURB_FACTOR`]: the debug switch
    /// ([`PERTURB_ENV`]) that shows validation catching a wrong weight and naming its layer.
    ///
    /// # Errors
    /// An unknown layer or one without weights, with the layers that have weights.
    pub fn perturb(&self, weights: &mut [f32], name: &str) -> Result<(), String> {
        let with_weights = || {
            let names: Vec<&str> = self
                .layers
                .iter()
                .filter(|l| l.w_len > 0)
                .map(|l| l.name.as_str())
                .collect();
            let shown = names.iter().take(6).copied().collect::<Vec<_>>().join(", ");
            format!("layers with weights: {shown}, … ({} in all)", names.len())
        };
        let Some(l) = self.layer(name) else {
            return Err(format!(
                "{PERTURB_ENV}: no layer {} in this network ({})",
                crate::error::quote(name),
                with_weights()
            ));
        };
        if l.w_len == 0 {
            return Err(format!(
                "{PERTURB_ENV}: layer `{name}` ({}) has no weights ({})",
                l.op.kind(),
                with_weights()
            ));
        }
        for v in &mut weights[l.w_offset..l.w_offset + l.w_len] {
            *v *= PERTURB_FACTOR;
        }
        Ok(())
    }

    /// Seeded weights (see the module doc), `weights_len` elements.
    pub fn weights(&self, rng: &mut Pcg64) -> Vec<f32> {
        let mut w = vec![0f32; self.weights_len];
        // The last convolution of a residual branch: the one whose output an `add` reads as input.
        let branch_end: Vec<usize> = self
            .layers
            .iter()
            .filter(|l| matches!(l.op, Op::Add { .. }))
            .map(|l| l.input)
            .collect();
        for (i, l) in self.layers.iter().enumerate() {
            let (filters, bias) =
                w[l.w_offset..l.w_offset + l.w_len + l.bias_len()].split_at_mut(l.w_len);
            match l.op {
                Op::Conv(c) => {
                    let fan_in = (l.inp.c / c.groups) * c.k * c.k;
                    let bound = (6.0 / fan_in as f64).sqrt();
                    for v in filters.iter_mut() {
                        *v = (uniform(rng, -bound, bound)) as f32;
                    }
                    let per_filter = fan_in;
                    let gamma_range = if branch_end.contains(&(i + 1)) {
                        (0.2, 0.5)
                    } else {
                        (0.5, 1.5)
                    };
                    for (o, b) in bias.iter_mut().enumerate() {
                        let gamma = uniform(rng, gamma_range.0, gamma_range.1);
                        let beta = uniform(rng, -0.1, 0.1);
                        let mean = uniform(rng, -0.1, 0.1);
                        let var = uniform(rng, 0.5, 1.5);
                        let scale = gamma / (var + BN_EPS).sqrt();
                        for v in &mut filters[o * per_filter..(o + 1) * per_filter] {
                            *v = (f64::from(*v) * scale) as f32;
                        }
                        *b = (beta - mean * scale) as f32;
                    }
                }
                Op::Linear { .. } => {
                    let bound = 1.0 / (l.inp.len() as f64).sqrt();
                    for v in filters.iter_mut().chain(bias.iter_mut()) {
                        *v = uniform(rng, -bound, bound) as f32;
                    }
                }
                _ => {}
            }
        }
        w
    }
}

/// Debug switch, set per run (`--env GPUFLEET_DEBUG_PERTURB_LAYER=layer3.0.conv1`) on an agent
/// with debug kernels enabled: the backend gets that layer's weights scaled by
/// [`PERTURB_FACTOR`] while validation keeps the true ones.
pub const PERTURB_ENV: &str = "GPUFLEET_DEBUG_PERTURB_LAYER";

/// How much [`Graph::perturb`] scales a layer's weights: 1 + 1/16.
pub const PERTURB_FACTOR: f32 = 1.0625;

/// Epsilon of the folded batch norms.
pub const BN_EPS: f64 = 1e-5;

/// Uniform in [lo, hi) from 53 random bits (independent of `rand`'s distribution code).
fn uniform(rng: &mut Pcg64, lo: f64, hi: f64) -> f64 {
    let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    lo + (hi - lo) * u
}

#[cfg(test)]
mod tests;
