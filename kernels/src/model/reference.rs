//! The f64 reference of one layer for one image, with the tolerance of each output element.
//!
//! Inputs are f32 tensors widened to f64 (exact), so a layer can be checked against the backend's
//! own input to it. Tolerances follow `check`'s rules for an fp32 implementation with any summation
//! order: dot products `c·2^-24·(Σ|w·x| + |b|)` with `c = max(16, 4·√K)`; the mean of a plane
//! `(8 + √n)·2^-24·Σ|x|/n`; a sum of two `2·2^-24·(|a| + |b|)`; a max exact; plus the rounding of
//! the f32 output (`2^-24·|y|`). Activations are 1-Lipschitz, so they do not widen a bound.

use super::{Layer, Op};

/// Unit roundoff of f32.
const EPS32: f64 = 1.0 / 16_777_216.0;

/// One layer's reference output for one image: values and per-element tolerances.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerRef {
    /// Output values, the layer's per-image shape in NCHW order.
    pub value: Vec<f64>,
    /// Tolerance of each value for an fp32 implementation.
    pub tol: Vec<f64>,
}

/// The factor `c = max(16, 4·√K)` of a K-long dot product's tolerance `c·2^-24·Σ|w·x|`.
pub(crate) fn dot_factor(k: usize) -> f64 {
    (4.0 * (k as f64).sqrt()).max(16.0)
}

/// Output element `o` of `layer` for one image: `(value, tolerance)`. `x` is the input tensor,
/// `skip` the other addend of an `add`, `w` the whole weights buffer.
pub fn layer_element(
    layer: &Layer,
    x: &[f64],
    skip: Option<&[f64]>,
    w: &[f32],
    o: usize,
) -> (f64, f64) {
    let (inp, out) = (layer.inp, layer.out);
    let plane = out.h * out.w;
    let (ch, oy, ox) = (o / plane, (o % plane) / out.w, o % out.w);
    let (value, tol) = match layer.op {
        Op::Conv(c) => {
            let cin_g = inp.c / c.groups;
            let group = ch / (c.cout / c.groups);
            let filt = &w[layer.w_offset + ch * cin_g * c.k * c.k..][..cin_g * c.k * c.k];
            let bias = f64::from(w[layer.w_offset + layer.w_len + ch]);
            let (mut acc, mut abs) = (bias, bias.abs());
            for ci in 0..cin_g {
                let plane_in = &x[(group * cin_g + ci) * inp.h * inp.w..][..inp.h * inp.w];
                for ky in 0..c.k {
                    let iy = (oy * c.stride + ky) as isize - c.pad as isize;
                    if iy < 0 || iy >= inp.h as isize {
                        continue;
                    }
                    for kx in 0..c.k {
                        let ix = (ox * c.stride + kx) as isize - c.pad as isize;
                        if ix < 0 || ix >= inp.w as isize {
                            continue;
                        }
                        let t = f64::from(filt[(ci * c.k + ky) * c.k + kx])
                            * plane_in[iy as usize * inp.w + ix as usize];
                        acc += t;
                        abs += t.abs();
                    }
                }
            }
            let v = c.act.apply(acc);
            (v, dot_factor(cin_g * c.k * c.k + 1) * EPS32 * abs)
        }
        Op::MaxPool { k, stride, pad } => {
            let plane_in = &x[ch * inp.h * inp.w..][..inp.h * inp.w];
            let mut m = f64::NEG_INFINITY;
            for ky in 0..k {
                let iy = (oy * stride + ky) as isize - pad as isize;
                for kx in 0..k {
                    let ix = (ox * stride + kx) as isize - pad as isize;
                    if iy >= 0 && ix >= 0 && (iy as usize) < inp.h && (ix as usize) < inp.w {
                        m = m.max(plane_in[iy as usize * inp.w + ix as usize]);
                    }
                }
            }
            (m, 0.0)
        }
        Op::GlobalAvgPool => {
            let n = inp.h * inp.w;
            let plane_in = &x[ch * n..][..n];
            let sum: f64 = plane_in.iter().sum();
            let abs: f64 = plane_in.iter().map(|v| v.abs()).sum();
            (
                sum / n as f64,
                (8.0 + (n as f64).sqrt()) * EPS32 * abs / n as f64,
            )
        }
        Op::Add { act, .. } => {
            let (a, b) = (x[o], skip.map_or(0.0, |s| s[o]));
            (act.apply(a + b), 2.0 * EPS32 * (a.abs() + b.abs()))
        }
        Op::Linear { act, .. } => {
            let k = inp.len();
            let row = &w[layer.w_offset + ch * k..][..k];
            let bias = f64::from(w[layer.w_offset + layer.w_len + ch]);
            let (mut acc, mut abs) = (bias, bias.abs());
            for (wv, xv) in row.iter().zip(x) {
                let t = f64::from(*wv) * xv;
                acc += t;
                abs += t.abs();
            }
            (act.apply(acc), dot_factor(k + 1) * EPS32 * abs)
        }
    };
    (value, tol + EPS32 * value.abs())
}

/// Every output element of `layer` for one image (see [`layer_element`]). Convolutions run as
/// per-output-channel loops over the input planes so the f64 reference of a whole ResNet-18 image
/// takes about a second.
pub fn layer_forward(layer: &Layer, x: &[f64], skip: Option<&[f64]>, w: &[f32]) -> LayerRef {
    let n = layer.out.len();
    match layer.op {
        Op::Conv(c) => conv_forward(layer, c, x, w),
        _ => {
            let (mut value, mut tol) = (Vec::with_capacity(n), Vec::with_capacity(n));
            for o in 0..n {
                let (v, t) = layer_element(layer, x, skip, w, o);
                value.push(v);
                tol.push(t);
            }
            LayerRef { value, tol }
        }
    }
}

/// A convolution over whole planes: for each output channel, input channel and filter tap, one
/// strided pass over the output plane (vectorizes; same sums as [`layer_element`], other order).
fn conv_forward(layer: &Layer, c: super::Conv, x: &[f64], w: &[f32]) -> LayerRef {
    let (inp, out) = (layer.inp, layer.out);
    let plane = out.h * out.w;
    let cin_g = inp.c / c.groups;
    let per_group = c.cout / c.groups;
    let mut value = vec![0f64; out.len()];
    let mut tol = vec![0f64; out.len()];
    for ch in 0..c.cout {
        let group = ch / per_group;
        let acc = &mut value[ch * plane..(ch + 1) * plane];
        let abs = &mut tol[ch * plane..(ch + 1) * plane];
        let bias = f64::from(w[layer.w_offset + layer.w_len + ch]);
        acc.fill(bias);
        abs.fill(bias.abs());
        let filt = &w[layer.w_offset + ch * cin_g * c.k * c.k..][..cin_g * c.k * c.k];
        for ci in 0..cin_g {
            let plane_in = &x[(group * cin_g + ci) * inp.h * inp.w..][..inp.h * inp.w];
            for ky in 0..c.k {
                for kx in 0..c.k {
                    let wv = f64::from(filt[(ci * c.k + ky) * c.k + kx]);
                    if wv == 0.0 {
                        continue;
                    }
                    for oy in 0..out.h {
                        let iy = (oy * c.stride + ky) as isize - c.pad as isize;
                        if iy < 0 || iy >= inp.h as isize {
                            continue;
                        }
                        let row_in = &plane_in[iy as usize * inp.w..][..inp.w];
                        // Output columns whose input column is inside the row.
                        let lo = c.pad.saturating_sub(kx).div_ceil(c.stride);
                        let hi = ((inp.w + c.pad).saturating_sub(kx))
                            .div_ceil(c.stride)
                            .min(out.w);
                        let row_acc = &mut acc[oy * out.w..(oy + 1) * out.w];
                        let row_abs = &mut abs[oy * out.w..(oy + 1) * out.w];
                        for ox in lo..hi {
                            let t = wv * row_in[ox * c.stride + kx - c.pad];
                            row_acc[ox] += t;
                            row_abs[ox] += t.abs();
                        }
                    }
                }
            }
        }
    }
    let factor = dot_factor(cin_g * c.k * c.k + 1) * EPS32;
    for (v, t) in value.iter_mut().zip(tol.iter_mut()) {
        *v = c.act.apply(*v);
        *t = factor * *t + EPS32 * v.abs();
    }
    LayerRef { value, tol }
}
