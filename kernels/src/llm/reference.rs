//! The f64 reference of one element of a step, and of one row of a whole block, from the backend's
//! own tensors, each with its tolerance for an fp32 implementation (any summation order).
//!
//! Tolerances: a dot product `c·2^-24·Σ|w·x|` with `c = max(16, 4·√K)` (as the CNN layers'); a norm
//! `2·(12 + √n)·2^-24·|y|`; RoPE `4·2^-24·(|x·cos| + |x'·sin|)`; SwiGLU `(16 + 4·|g|)·2^-24·|y|`
//! (the exponential's own error grows with its argument); attention the scores' error (a dot product
//! of `head_dim`, scaled) carried through the exponentials into the weights, plus the weighted sum's
//! rounding; plus `2^-24·|y|` for the f32 result. A whole block is held to [`BLOCK_REL_TOL`] of its
//! row's largest element: errors compound through four projections and two norms.

use super::{BlockCheck, Buf, Cache, Config, Heads, LlmGraph, Op, Ref, Step, Weights};
use crate::check::harness::{EPS32, par_map};
use crate::model::reference::dot_factor;

/// Tolerance of a block's output, relative to the largest element of its row.
pub const BLOCK_REL_TOL: f64 = 5e-4;

/// The backend's buffers: the inputs as f32 and its arena.
#[derive(Debug, Clone, Copy)]
pub struct Tensors<'a> {
    /// Every input, in order.
    pub inputs: &'a [&'a [f32]],
    /// The arena.
    pub arena: &'a [f32],
}

impl<'a> Tensors<'a> {
    /// The buffer of `r`, from its offset on.
    pub fn at(&self, r: Ref) -> &'a [f32] {
        let b: &'a [f32] = match r.buf {
            Buf::Input(i) => self.inputs.get(i).copied().unwrap_or(&[]),
            Buf::Arena => self.arena,
        };
        b.get(r.off..).unwrap_or(&[])
    }

    /// `len` elements at `r` widened to f64 (empty past the end).
    pub fn row(&self, r: Ref, len: usize) -> Vec<f64> {
        self.at(r).iter().take(len).map(|&v| f64::from(v)).collect()
    }

    fn get(&self, r: Ref) -> f64 {
        self.at(r).first().map_or(f64::NAN, |&v| f64::from(v))
    }
}

/// Elements of one row a check compares: the output row, and for RoPE also the keys and values it
/// wrote into the cache.
pub fn check_width(op: &Op) -> usize {
    match op {
        Op::Rope { .. } => op.in_width(),
        _ => op.out_width(),
    }
}

/// Where element `j` of row `r` of `step` (see [`check_width`]) is written.
pub fn output_index(step: &Step, r: usize, j: usize) -> Ref {
    match step.op {
        Op::Rope { heads, cache, .. } if j >= heads.q_dim() => {
            let (seq, pos) = step.rows.of(r);
            let kv = heads.kv_dim();
            let j = j - heads.q_dim();
            let at = cache.index(seq, pos, kv) + j % kv;
            if j < kv {
                cache.k.at(at)
            } else {
                cache.v.at(at)
            }
        }
        _ => step.out.at(r * step.op.out_width() + j),
    }
}

fn linear(x: &[f64], w: &[f32]) -> (f64, f64) {
    let (mut acc, mut abs) = (0.0, 0.0);
    for (a, b) in x.iter().zip(w) {
        let t = a * f64::from(*b);
        acc += t;
        abs += t.abs();
    }
    (acc, dot_factor(x.len()) * EPS32 * abs)
}

fn rms_scale(x: &[f64]) -> f64 {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len().max(1) as f64;
    1.0 / (ms + crate::catalog::NORM_EPS).sqrt()
}

fn norm_rel(n: usize) -> f64 {
    2.0 * (12.0 + (n as f64).sqrt()) * EPS32
}

fn silu_glu(g: f64, u: f64) -> (f64, f64) {
    let y = g / (1.0 + (-g).exp()) * u;
    (y, (16.0 + 4.0 * g.abs()) * EPS32 * y.abs())
}

/// Rotates element `i` of a head (`x` the head's `head_dim` values) at position `pos`.
fn rotate(x: &[f64], i: usize, pos: usize, table: &[f32], positions: usize) -> (f64, f64) {
    let half = x.len() / 2;
    let (c, s) = (
        f64::from(table[pos * half + i % half]),
        f64::from(table[positions * half + pos * half + i % half]),
    );
    let (a, b) = if i < half {
        (x[i] * c, -x[i + half] * s)
    } else {
        (x[i] * c, x[i - half] * s)
    };
    (a + b, 4.0 * EPS32 * (a.abs() + b.abs()))
}

/// Head `h` of the attention of query `q` (`head_dim` values) at position `pos` of sequence `seq`
/// over `keys(t)` / `values(t)`: the output's `head_dim` values and tolerances.
fn attend(
    q: &[f64],
    heads: Heads,
    pos: usize,
    key: &dyn Fn(usize) -> Vec<f64>,
    value: &dyn Fn(usize) -> Vec<f64>,
) -> Vec<(f64, f64)> {
    let hd = heads.head_dim;
    let scale = heads.scale();
    let mut scores = Vec::with_capacity(pos + 1);
    let mut score_err: f64 = 0.0;
    for t in 0..=pos {
        let (mut s, mut abs) = (0.0, 0.0);
        for (a, b) in q.iter().zip(key(t)) {
            s += a * b;
            abs += (a * b).abs();
        }
        scores.push(s * scale);
        score_err = score_err.max(dot_factor(hd) * EPS32 * abs * scale);
    }
    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let min = scores.iter().copied().fold(f64::INFINITY, f64::min);
    let p: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
    let sum: f64 = p.iter().sum();
    let n = scores.len();
    // Relative error of each weight: the scores' absolute error twice (its own and the max's), the
    // exponential's, the normalisation's.
    let rel =
        2.0 * score_err + (16.0 + 4.0 * (max - min)) * EPS32 + norm_rel(n) + dot_factor(n) * EPS32;
    let mut out = vec![(0.0, 0.0); hd];
    for (t, pt) in p.iter().enumerate() {
        let v = value(t);
        let w = pt / sum;
        for (o, vd) in out.iter_mut().zip(&v) {
            o.0 += w * vd;
            o.1 += w * vd.abs();
        }
    }
    out.into_iter()
        .map(|(y, abs)| (y, 2.0 * rel * abs + EPS32 * y.abs()))
        .collect()
}

/// The f64 reference of element `j` of row `r` of `step` (see [`check_width`]) from the backend's
/// own tensors `t`, with `weights` the true weights: `(value, tolerance)`.
pub fn step_element(
    step: &Step,
    t: &Tensors<'_>,
    weights: Weights<'_>,
    r: usize,
    j: usize,
) -> (f64, f64) {
    let (seq, pos) = step.rows.of(r);
    let w_at = |off: usize, len: usize| weights.read(off, len);
    let (v, tol) = match step.op {
        Op::Embed {
            dim,
            vocab,
            table,
            tok_stride,
        } => {
            let tok = t.get(step.x.at(r * tok_stride));
            let tok = if tok.is_finite() {
                (tok.max(0.0) as usize).min(vocab - 1)
            } else {
                0
            };
            (
                f64::from(
                    w_at(table + tok * dim + j, 1)
                        .first()
                        .copied()
                        .unwrap_or(f32::NAN),
                ),
                0.0,
            )
        }
        Op::RmsNorm {
            dim,
            gamma,
            in_stride,
        } => {
            let x = t.row(step.x.at(r * in_stride), dim);
            let g = f64::from(w_at(gamma + j, 1).first().copied().unwrap_or(f32::NAN));
            let y = x.get(j).copied().unwrap_or(f64::NAN) * rms_scale(&x) * g;
            (y, norm_rel(dim) * y.abs() + f64::from(f32::MIN_POSITIVE))
        }
        Op::Linear { k, w, .. } => {
            let x = t.row(step.x.at(r * k), k);
            linear(&x, &w_at(w + j * k, k))
        }
        Op::Rope {
            heads,
            table,
            positions,
            ..
        } => {
            let width = step.op.in_width();
            let x = t.row(step.x.at(r * width), width);
            let (q, kv, hd) = (heads.q_dim(), heads.kv_dim(), heads.head_dim);
            if j >= q + kv {
                (x[j], 0.0)
            } else {
                let head = &x[j / hd * hd..][..hd];
                rotate(head, j % hd, pos, t.at(table), positions)
            }
        }
        Op::Attention { heads, cache } => {
            let hd = heads.head_dim;
            let h = j / hd;
            let q = t.row(step.x.at(r * heads.q_dim() + h * hd), hd);
            let out = attend_cache(&q, heads, h, seq, pos, &cache, t);
            out[j % hd]
        }
        Op::SwiGlu { ffn } => {
            let g = t.get(step.x.at(r * 2 * ffn + j));
            let u = t.get(step.x.at(r * 2 * ffn + ffn + j));
            silu_glu(g, u)
        }
        Op::Add { dim, other } => {
            let (a, b) = (t.get(step.x.at(r * dim + j)), t.get(other.at(r * dim + j)));
            (a + b, EPS32 * (a + b).abs())
        }
        Op::Copy { .. } => (t.get(step.x.at(j)), 0.0),
    };
    (v, tol + EPS32 * v.abs())
}

/// Head `h` of a query over the backend's cache.
fn attend_cache(
    q: &[f64],
    heads: Heads,
    h: usize,
    seq: usize,
    pos: usize,
    cache: &Cache,
    t: &Tensors<'_>,
) -> Vec<(f64, f64)> {
    let (kv, hd) = (heads.kv_dim(), heads.head_dim);
    let g = heads.kv_head(h);
    let read = |base: Ref| move |p: usize| t.row(base.at(cache.index(seq, p, kv) + g * hd), hd);
    attend(q, heads, pos, &read(cache.k), &read(cache.v))
}

/// Row `r` of block check `b` in f64 from the backend's input to the block and its cache (the
/// row's own key and value from this computation): the `dim` outputs with their tolerances.
pub fn block_row(
    g: &LlmGraph,
    b: &BlockCheck,
    t: &Tensors<'_>,
    weights: Weights<'_>,
    r: usize,
) -> Vec<(f64, f64)> {
    let c: &Config = &g.config;
    let w = c.block_weights(b.block);
    let d = c.dim;
    let heads = Heads::of(c);
    let (q_dim, kv, hd) = (c.q_dim(), c.kv_dim(), c.head_dim);
    let (seq, pos) = b.rows.of(r);
    let wt = |off: usize, len: usize| weights.read(off, len);
    let norm = |x: &[f64], gamma: usize| -> Vec<f64> {
        let s = rms_scale(x);
        x.iter()
            .zip(wt(gamma, d).iter())
            .map(|(v, g)| v * s * f64::from(*g))
            .collect()
    };
    // Each output one thread's (the same sums as in one thread): a whole `8b` block is 218 M
    // multiply-adds a row.
    let matvec = |x: &[f64], off: usize, n: usize| -> Vec<f64> {
        let k = x.len();
        par_map(n, k, |j| linear(x, &wt(off + j * k, k)).0)
    };
    let x = t.row(b.x.at(r * d), d);
    let n1 = norm(&x, w.attn_norm);
    let qkv = matvec(&n1, w.wqkv, c.qkv_dim());
    let Some(Step {
        op: Op::Rope {
            table, positions, ..
        },
        ..
    }) = g.steps.iter().find(|s| matches!(s.op, Op::Rope { .. }))
    else {
        return Vec::new();
    };
    let rot = |base: usize, j: usize| {
        let head = &qkv[base + j / hd * hd..][..hd];
        rotate(head, j % hd, pos, t.at(*table), *positions).0
    };
    let q: Vec<f64> = (0..q_dim).map(|j| rot(0, j)).collect();
    let k_own: Vec<f64> = (0..kv).map(|j| rot(q_dim, j)).collect();
    let v_own = &qkv[q_dim + kv..];
    let cache = b.cache;
    let mut attn = Vec::with_capacity(q_dim);
    for h in 0..heads.heads {
        let gh = heads.kv_head(h);
        let read = |base: Ref, own: &[f64]| {
            let own: Vec<f64> = own[gh * hd..][..hd].to_vec();
            move |p: usize| {
                if p == pos {
                    own.clone()
                } else {
                    t.row(base.at(cache.index(seq, p, kv) + gh * hd), hd)
                }
            }
        };
        let out = attend(
            &q[h * hd..][..hd],
            heads,
            pos,
            &read(cache.k, &k_own),
            &read(cache.v, v_own),
        );
        attn.extend(out.into_iter().map(|(v, _)| v));
    }
    let o = matvec(&attn, w.wo, d);
    let x1: Vec<f64> = x.iter().zip(&o).map(|(a, b)| a + b).collect();
    let n2 = norm(&x1, w.ffn_norm);
    let gu = matvec(&n2, w.w_gate_up, 2 * c.ffn);
    let h: Vec<f64> = (0..c.ffn)
        .map(|i| silu_glu(gu[i], gu[c.ffn + i]).0)
        .collect();
    let down = matvec(&h, w.w_down, d);
    let out: Vec<f64> = x1.iter().zip(&down).map(|(a, b)| a + b).collect();
    let scale = out.iter().fold(0f64, |m, v| m.max(v.abs()));
    out.into_iter()
        .map(|v| (v, BLOCK_REL_TOL * scale + EPS32 * v.abs()))
        .collect()
}
