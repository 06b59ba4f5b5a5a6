//! CNN inference on the CPU: a [`Graph`](gpufleet_kernels::model::Graph)'s layers in order, each
//! writing its output tensor into the arena.
//!
//! Dense convolutions go through [`im2col_with`] (unfold + [`gemm_blocked_tiles`], one
//! workspace shared by every layer, holding as many unfolded images as [`WORKSPACE_FLOATS`] allows)
//! or, for a 1×1 stride-1 convolution, straight into [`gemm_blocked_tiles`] on the input
//! planes; the images of a batch run their products side by side on the pool. Then one pass adds
//! the bias and applies the activation. Depthwise convolutions, pooling, the residual add and the
//! linear head are direct loops over channels on the rayon pool.

use gpufleet_kernels::ConvShape;
use gpufleet_kernels::model::{Act, Conv, Graph, Layer, Op};
use rayon::prelude::*;

use super::conv::{im2col_with, unfold_len};
use super::gemm::gemm_blocked_tiles;

/// Most floats of the shared unfold workspace (128 MiB) when a batch's images would need more: the
/// images are then unfolded a few at a time. One image always fits, whatever its size.
const WORKSPACE_FLOATS: usize = 32 << 20;

/// A network ready to run: its graph and the unfold workspace its convolutions share.
pub struct ModelRunner {
    graph: Graph,
    /// Unfolded images of the dense convolutions other than 1×1 stride 1, one layer at a time.
    workspace: Vec<f32>,
}

impl std::fmt::Debug for ModelRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelRunner")
            .field("net", &self.graph.net)
            .field("layers", &self.graph.layers.len())
            .field("workspace_len", &self.workspace.len())
            .finish()
    }
}

/// The catalog's conv2d geometry of `batch` images through `layer`'s convolution `c`.
fn conv_shape(layer: &Layer, c: &Conv, batch: usize) -> ConvShape {
    ConvShape {
        batch,
        channels: layer.inp.c,
        height: layer.inp.h,
        width: layer.inp.w,
        filters: c.cout,
        ksize: c.k,
        stride: c.stride,
        pad: c.pad,
        out_h: layer.out.h,
        out_w: layer.out.w,
    }
}

fn pointwise(c: &Conv) -> bool {
    c.k == 1 && c.stride == 1 && c.pad == 0
}

impl ModelRunner {
    /// Sizes the workspace of `graph`: the largest unfolded image of its layers, times the images
    /// that fit [`WORKSPACE_FLOATS`] (at least one, at most the batch).
    pub fn new(graph: Graph) -> ModelRunner {
        let per_image = graph
            .layers
            .iter()
            .filter_map(|l| match &l.op {
                Op::Conv(c) if c.groups == 1 && !pointwise(c) => {
                    Some(unfold_len(&conv_shape(l, c, 1)))
                }
                _ => None,
            })
            .max()
            .unwrap_or(0);
        let images = (WORKSPACE_FLOATS / per_image.max(1)).clamp(1, graph.batch.max(1));
        ModelRunner {
            workspace: vec![0.0; per_image * images],
            graph,
        }
    }

    /// Runs every layer on `images` with `weights`, writing the arena.
    ///
    /// # Panics
    /// If the buffers do not have the graph's lengths (the backend checks them first).
    pub fn run(&mut self, images: &[f32], weights: &[f32], arena: &mut [f32]) {
        let g = &self.graph;
        assert_eq!(arena.len(), g.arena_len, "arena length");
        for l in &g.layers {
            // Every layer reads tensors written before its own (lower arena offsets).
            let (before, rest) = arena.split_at_mut(l.out_offset);
            let out = &mut rest[..g.batch * l.out.len()];
            let tensor = |t: usize| -> &[f32] {
                if t == 0 {
                    images
                } else {
                    let src = &g.layers[t - 1];
                    &before[src.out_offset..src.out_offset + g.batch * src.out.len()]
                }
            };
            let x = tensor(l.input);
            let w = &weights[l.w_offset..l.w_offset + l.w_len];
            let bias = &weights[l.w_offset + l.w_len..l.w_offset + l.w_len + l.bias_len()];
            match l.op {
                Op::Conv(c) if c.groups > 1 => depthwise(l, &c, x, w, bias, out),
                Op::Conv(c) => {
                    if pointwise(&c) {
                        let (plane, k) = (l.out.h * l.out.w, l.inp.c);
                        out.par_chunks_exact_mut(l.out.len())
                            .zip(x.par_chunks_exact(l.inp.len()))
                            .for_each(|(img_out, img_in)| {
                                gemm_blocked_tiles(w, img_in, img_out, c.cout, plane, k);
                            });
                    } else {
                        let shape = conv_shape(l, &c, g.batch);
                        im2col_with(&shape, x, w, out, &mut self.workspace);
                    }
                    bias_act(out, bias, l.out.h * l.out.w, c.act);
                }
                Op::MaxPool { k, stride, pad } => max_pool(l, k, stride, pad, x, out),
                Op::GlobalAvgPool => {
                    let n = l.inp.h * l.inp.w;
                    for (o, plane) in out.iter_mut().zip(x.chunks_exact(n)) {
                        *o = plane.iter().sum::<f32>() / n as f32;
                    }
                }
                Op::Add { skip, act } => {
                    let s = tensor(skip);
                    out.par_chunks_mut(1 << 16)
                        .zip(x.par_chunks(1 << 16).zip(s.par_chunks(1 << 16)))
                        .for_each(|(o, (a, b))| {
                            for ((o, a), b) in o.iter_mut().zip(a).zip(b) {
                                *o = act.apply32(a + b);
                            }
                        });
                }
                Op::Linear { cout, act } => {
                    let cin = l.inp.len();
                    for (img_in, img_out) in x.chunks_exact(cin).zip(out.chunks_exact_mut(cout)) {
                        img_out.par_iter_mut().enumerate().for_each(|(o, y)| {
                            let row = &w[o * cin..(o + 1) * cin];
                            let dot: f32 = row.iter().zip(img_in).map(|(a, b)| a * b).sum();
                            *y = act.apply32(dot + bias[o]);
                        });
                    }
                }
            }
        }
    }
}

/// Adds each channel's bias to its planes and applies `act` (`out` is images × channels × plane).
fn bias_act(out: &mut [f32], bias: &[f32], plane: usize, act: Act) {
    let channels = bias.len();
    out.par_chunks_exact_mut(plane)
        .enumerate()
        .for_each(|(i, p)| {
            let b = bias[i % channels];
            for v in p {
                *v = act.apply32(*v + b);
            }
        });
}

/// Depthwise convolution (one filter per channel), bias and activation, one task per plane.
fn depthwise(l: &Layer, c: &Conv, x: &[f32], w: &[f32], bias: &[f32], out: &mut [f32]) {
    let (inp, o) = (l.inp, l.out);
    let kk = c.k * c.k;
    out.par_chunks_exact_mut(o.h * o.w)
        .enumerate()
        .for_each(|(i, plane_out)| {
            let ch = i % o.c;
            let img = i / o.c;
            let plane_in = &x[(img * inp.c + ch) * inp.h * inp.w..][..inp.h * inp.w];
            let filt = &w[ch * kk..(ch + 1) * kk];
            for oy in 0..o.h {
                for ox in 0..o.w {
                    let mut acc = bias[ch];
                    for ky in 0..c.k {
                        let iy = (oy * c.stride + ky) as isize - c.pad as isize;
                        if iy < 0 || iy >= inp.h as isize {
                            continue;
                        }
                        let row = &plane_in[iy as usize * inp.w..][..inp.w];
                        for kx in 0..c.k {
                            let ix = (ox * c.stride + kx) as isize - c.pad as isize;
                            if ix >= 0 && (ix as usize) < inp.w {
                                acc += filt[ky * c.k + kx] * row[ix as usize];
                            }
                        }
                    }
                    plane_out[oy * o.w + ox] = c.act.apply32(acc);
                }
            }
        });
}

/// Max pooling over k×k windows; padding never wins.
fn max_pool(l: &Layer, k: usize, stride: usize, pad: usize, x: &[f32], out: &mut [f32]) {
    let (inp, o) = (l.inp, l.out);
    out.par_chunks_exact_mut(o.h * o.w)
        .enumerate()
        .for_each(|(i, plane_out)| {
            let plane_in = &x[i * inp.h * inp.w..][..inp.h * inp.w];
            for oy in 0..o.h {
                for ox in 0..o.w {
                    let mut m = f32::NEG_INFINITY;
                    for ky in 0..k {
                        let iy = (oy * stride + ky) as isize - pad as isize;
                        if iy < 0 || iy >= inp.h as isize {
                            continue;
                        }
                        for kx in 0..k {
                            let ix = (ox * stride + kx) as isize - pad as isize;
                            if ix >= 0 && (ix as usize) < inp.w {
                                m = m.max(plane_in[iy as usize * inp.w + ix as usize]);
                            }
                        }
                    }
                    plane_out[oy * o.w + ox] = m;
                }
            }
        });
}
