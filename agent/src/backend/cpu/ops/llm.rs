//! Transformer inference on the CPU: an [`LlmGraph`]'s steps in order, each reading and writing
//! tensors at their offsets in the inputs and the arena, on the rayon pool.
//!
//! Projections over many rows (prefill) run through [`gemm_blocked`] (the `gemm` crate's own
//! threading, which splits these wide products well: 1.4× the row-and-column tasks of
//! `gemm_blocked_tiles` on a 16-core Xeon) on the weight matrix transposed once when the run is
//! prepared; over a few rows (decode) each task takes a block of
//! output features and streams their weight rows once for all the rows (the pass is bound by
//! reading the weights). Attention over many rows of a sequence (prefill) runs a task per head and
//! [`ATTENTION_ROWS`] rows: the scores of the block as one product with the keys (gathered
//! transposed), a causal softmax per row, the weighted values as a second product; over a few rows
//! (decode), one task per row and head: the scores over the causal window of the cache, a softmax,
//! the weighted sum of the values.
//!
//! Quantized weights (q8_0, q4_0) come packed ([`PackedLayout`], drawn so by the catalog) and
//! every step reads them there: a decode projection through the block dot products of
//! [`super::quant`], the embedding a row of blocks at a time, the norms' f32 gains; a prefill
//! projection multiplies the matrix dequantized (and transposed) once, as f32.

use std::collections::HashMap;
use std::marker::PhantomData;

use gpufleet_kernels::llm::{
    Buf, Cache, Heads, LlmGraph, Op, PackedLayout, PackedMatrix, Ref, Step, Weights,
};
use gpufleet_kernels::quant::{BlockFormat, QK};
use gpufleet_kernels::{Buffer, NORM_EPS};
use rayon::prelude::*;

use super::elementwise::exp_approx;
use super::gemm::{gemm_blocked, gemm_strided_serial};
use super::has_avx2_fma;
use super::quant::{Input, QRow, dequantize_block};
use super::rows::{blocked_sum, row_max};

/// Projections with at least this many rows go through the blocked GEMM (on the matrix transposed
/// once, an f32 copy the host-memory model counts).
pub const GEMM_ROWS: usize = 16;
/// Output features per decode task.
const GEMV_BLOCK: usize = 32;
/// Query rows of one sequence a prefill attention task takes at once (as two products).
const ATTENTION_ROWS: usize = 32;

/// A graph ready to run, with the transposed weights of its many-row projections.
pub struct LlmRunner {
    graph: LlmGraph,
    /// `Wᵀ` (`[k][n]`) by the offset of `W` in the weights.
    transposed: HashMap<usize, Vec<f32>>,
    /// The layout of the weights when they come packed in a quantized format.
    layout: Option<PackedLayout>,
}

/// Row `j` of the `[n][k]` matrix whose blocks lie at `m` (packed in `layout`).
fn qrow<'a>(layout: &PackedLayout, buf: &'a [u8], m: PackedMatrix, k: usize, j: usize) -> QRow<'a> {
    qrows(layout, buf, m, k, j..j + 1).next().expect("one row")
}

/// Rows `rows` of the `[n][k]` matrix whose blocks lie at `m` (packed in `layout`): the range
/// sliced once, its rows by `chunks_exact` (per row a bounds-checked slice pair, as `qrow`
/// makes it, was a tenth of a `small` quantized decode on 24-block rows).
fn qrows<'a>(
    layout: &PackedLayout,
    buf: &'a [u8],
    m: PackedMatrix,
    k: usize,
    rows: std::ops::Range<usize>,
) -> impl Iterator<Item = QRow<'a>> {
    let (f, blocks) = (layout.format(), k / QK);
    let (vb, sb) = (blocks * f.quant_bytes(), 2 * blocks);
    let values = &buf[m.values + rows.start * vb..m.values + rows.end * vb];
    let scales = &buf[m.scales + rows.start * sb..m.scales + rows.end * sb];
    values
        .chunks_exact(vb)
        .zip(scales.chunks_exact(sb))
        .map(|(values, scales)| QRow { values, scales })
}

impl std::fmt::Debug for LlmRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmRunner")
            .field("steps", &self.graph.steps.len())
            .field("transposed", &self.transposed.len())
            .finish()
    }
}

/// The arena `run` borrows mutably for the whole run, as a pointer a step's tasks share: each
/// writes elements no other task writes and no task of the step reads.
#[derive(Clone, Copy)]
struct Shared<'a> {
    ptr: *mut f32,
    len: usize,
    _arena: PhantomData<&'a mut [f32]>,
}

// SAFETY: `Shared` is a `&'a mut [f32]` whose accesses are split between threads. Moving it to a
// pool thread hands over nothing but the pointer: every element access goes through `read` or
// `write`, unsafe functions whose callers promise no other thread touches those elements at once.
unsafe impl Send for Shared<'_> {}
// SAFETY: `&Shared` allows only copying the pointer and calling `read`/`write`, whose callers
// promise that no two threads access the same elements at once with one of them writing.
unsafe impl Sync for Shared<'_> {}

impl<'a> Shared<'a> {
    /// Shares `arena` (borrowed for `'a`, so the pointer stays valid and unaliased that long).
    fn new(arena: &'a mut [f32]) -> Shared<'a> {
        Shared {
            ptr: arena.as_mut_ptr(),
            len: arena.len(),
            _arena: PhantomData,
        }
    }

    /// `len` elements at `off`.
    ///
    /// # Safety
    /// Nothing writes them while the slice lives.
    unsafe fn read(self, off: usize, len: usize) -> &'a [f32] {
        assert!(off + len <= self.len, "arena read past its end");
        // SAFETY: `off..off + len` is inside the borrowed arena (asserted), and the caller
        // guarantees no write to those elements while the slice lives.
        unsafe { std::slice::from_raw_parts(self.ptr.add(off), len) }
    }

    /// `len` elements at `off`, for writing.
    ///
    /// # Safety
    /// Nothing else reads or writes them while the slice lives.
    unsafe fn write(self, off: usize, len: usize) -> &'a mut [f32] {
        assert!(off + len <= self.len, "arena write past its end");
        // SAFETY: `off..off + len` is inside the borrowed arena (asserted), and the caller
        // guarantees exclusive access to those elements while the slice lives.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(off), len) }
    }
}

/// What one step reads: the inputs, and the arena elements the step does not write (made only by
/// [`StepReads::new`], whose caller promises that).
struct StepReads<'a> {
    inputs: &'a [&'a [f32]],
    arena: Shared<'a>,
}

impl<'a> StepReads<'a> {
    /// # Safety
    /// While the value lives, nothing writes the arena elements read through [`StepReads::get`].
    unsafe fn new(inputs: &'a [&'a [f32]], arena: Shared<'a>) -> StepReads<'a> {
        StepReads { inputs, arena }
    }

    /// `len` elements at `r`.
    fn get(&self, r: Ref, len: usize) -> &[f32] {
        match r.buf {
            Buf::Input(i) => &self.inputs[i][r.off..r.off + len],
            // SAFETY: by `new`'s contract nothing writes what is read through `self` while it
            // lives, and the slice borrows `self`.
            Buf::Arena => unsafe { self.arena.read(r.off, len) },
        }
    }
}

/// `Σ a·b` with eight partial sums (vectorizes).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

fma_dispatch! {
    /// `row = softmax(row · scale)` in place (`scale` > 0), through the exponential that vectorizes.
    fn softmax_scaled(row: &mut [f32], scale: f32) => softmax_scaled_impl::<FMA>
}

#[inline(always)]
fn softmax_scaled_impl<const FMA: bool>(row: &mut [f32], scale: f32) {
    let max = row_max(row) * scale;
    for v in row.iter_mut() {
        *v = exp_approx::<FMA>(*v * scale - max);
    }
    let inv = (1.0 / blocked_sum(row, |v| v)) as f32;
    row.iter_mut().for_each(|v| *v *= inv);
}

fma_dispatch! {
    /// `y = silu(g) · u`, through the exponential that vectorizes.
    fn swiglu_row(g: &[f32], u: &[f32], y: &mut [f32]) => swiglu_row_impl::<FMA>
}

#[inline(always)]
fn swiglu_row_impl<const FMA: bool>(g: &[f32], u: &[f32], y: &mut [f32]) {
    for ((y, &g), &u) in y.iter_mut().zip(g).zip(u) {
        *y = g / (1.0 + exp_approx::<FMA>(-g)) * u;
    }
}

impl LlmRunner {
    /// Prepares `graph` for `inputs` (the problem's; the weights packed in `format` when given):
    /// transposes the weights of its projections over [`GEMM_ROWS`] rows or more (dequantized
    /// first when packed).
    pub fn new(graph: LlmGraph, inputs: &[Buffer], format: Option<BlockFormat>) -> LlmRunner {
        let mut runner = LlmRunner {
            layout: format.map(|f| PackedLayout::of(&graph, f)),
            graph,
            transposed: HashMap::new(),
        };
        let weights = runner.weights(inputs);
        let mut transposed = HashMap::new();
        for s in &runner.graph.steps {
            if let Op::Linear { k, n, w } = s.op
                && s.rows.rows >= GEMM_ROWS
                && !transposed.contains_key(&w)
            {
                let src = weights.read(w, k * n);
                let mut t = vec![0f32; k * n];
                t.par_chunks_mut(n).enumerate().for_each(|(i, row)| {
                    for (j, v) in row.iter_mut().enumerate() {
                        *v = src[j * k + i];
                    }
                });
                transposed.insert(w, t);
            }
        }
        runner.transposed = transposed;
        runner
    }

    /// The weights among `inputs`: packed by the graph's layout when quantized, else f32.
    pub fn weights<'a>(&'a self, inputs: &'a [Buffer]) -> Weights<'a> {
        Weights::of_inputs(inputs, self.graph.weights_input, self.layout.as_ref())
    }

    /// Runs every step on `inputs` (as f32; the weights read from `weights`), writing the arena.
    ///
    /// # Panics
    /// If the buffers do not have the graph's lengths (the backend checks them first).
    pub fn run(&self, inputs: &[&[f32]], weights: Weights<'_>, arena: &mut [f32]) {
        assert_eq!(arena.len(), self.graph.arena_len, "arena length");
        let arena = Shared::new(arena);
        for step in &self.graph.steps {
            let out_len = step.rows.rows * step.op.out_width();
            // SAFETY: steps run one after another and `run` holds the arena's only borrow, so
            // only this step touches it until `reads` and `out` are dropped at the end of the
            // iteration. Within the step, the graph's layout (`gpufleet_kernels::llm`: every
            // tensor and cache has an arena range of its own, handed out by the builders) keeps
            // what it writes — its output, `rows × out_width` elements at `out`, and for RoPE
            // its rows' cache entries — apart from what it reads (`x`, `other`, the table, the
            // attention's cache). So nothing read through `reads` is written, and `out` is
            // touched through this slice alone.
            let (reads, out) = unsafe {
                (
                    StepReads::new(inputs, arena),
                    arena.write(step.out.off, out_len),
                )
            };
            self.step(step, &reads, arena, out, weights);
        }
    }

    /// Runs step `s`, reading through `b` and writing `out` (its output) and, for RoPE, the cache
    /// in `arena`.
    fn step(
        &self,
        s: &Step,
        b: &StepReads<'_>,
        arena: Shared<'_>,
        out: &mut [f32],
        weights: Weights<'_>,
    ) {
        let rows = s.rows.rows;
        let fma = has_avx2_fma();
        match s.op {
            Op::Embed {
                dim,
                vocab,
                table,
                tok_stride,
            } => out.par_chunks_mut(dim).enumerate().for_each(|(r, o)| {
                let tok = b.get(s.x.at(r * tok_stride), 1)[0];
                let tok = (tok.max(0.0) as usize).min(vocab - 1);
                match weights {
                    Weights::F32(_) | Weights::Half(_) => {
                        o.copy_from_slice(&weights.read(table + tok * dim, dim));
                    }
                    Weights::Packed(layout, buf) => {
                        let row = qrow(layout, buf, layout.matrix(table), dim, tok);
                        for (blk, ob) in o.chunks_exact_mut(QK).enumerate() {
                            dequantize_block(layout.format(), row, blk, ob);
                        }
                    }
                }
            }),
            Op::RmsNorm {
                dim,
                gamma,
                in_stride,
            } => {
                let gains = weights.read(gamma, dim);
                out.par_chunks_mut(dim).enumerate().for_each(|(r, o)| {
                    let x = b.get(s.x.at(r * in_stride), dim);
                    let ms = dot(x, x) / dim as f32;
                    let rstd = 1.0 / (ms + NORM_EPS as f32).sqrt();
                    for ((y, v), g) in o.iter_mut().zip(x).zip(gains.iter()) {
                        *y = v * rstd * g;
                    }
                })
            }
            Op::Linear { k, n, w } => {
                let x = b.get(s.x, rows * k);
                if let Some(t) = self.transposed.get(&w).filter(|_| rows >= GEMM_ROWS) {
                    gemm_blocked(x, t, out, rows, n, k);
                } else if let Weights::Packed(layout, buf) = weights {
                    let (f, m) = (layout.format(), layout.matrix(w));
                    // The input rows as the dot products read them, made once for the matrix.
                    let inputs: Vec<Input<'_>> =
                        x.chunks_exact(k).map(|xr| Input::new(f, xr)).collect();
                    let out = Shared::new(out);
                    (0..n.div_ceil(GEMV_BLOCK)).into_par_iter().for_each(|blk| {
                        let j0 = blk * GEMV_BLOCK;
                        let j1 = (j0 + GEMV_BLOCK).min(n);
                        let mut w = [QRow::EMPTY; GEMV_BLOCK];
                        for (wj, row) in w.iter_mut().zip(qrows(layout, buf, m, k, j0..j1)) {
                            *wj = row;
                        }
                        let w = &w[..j1 - j0];
                        for (r, input) in inputs.iter().enumerate() {
                            // SAFETY: as the f32 loop below: elements (r, j0..j1) are this task's
                            // alone, written once, in the step's own output.
                            let o = unsafe { out.write(r * n + j0, j1 - j0) };
                            super::quant::dots(f, w, input, o);
                        }
                    });
                } else {
                    let Weights::F32(weights) = weights else {
                        unreachable!("packed weights took the branch above")
                    };
                    let wm = &weights[w..w + k * n];
                    let out = Shared::new(out);
                    (0..n.div_ceil(GEMV_BLOCK)).into_par_iter().for_each(|blk| {
                        let j0 = blk * GEMV_BLOCK;
                        for j in j0..(j0 + GEMV_BLOCK).min(n) {
                            let wr = &wm[j * k..(j + 1) * k];
                            for r in 0..rows {
                                let v = dot(&x[r * k..(r + 1) * k], wr);
                                // SAFETY: element (r, j) of the `[rows][n]` output is written by
                                // the task of block `j / GEMV_BLOCK` alone, and only once; `out`
                                // is this step's output, which nothing else reads or writes.
                                let o = unsafe { out.write(r * n + j, 1) };
                                o[0] = v;
                            }
                        }
                    });
                }
            }
            Op::Rope {
                heads,
                table,
                positions,
                cache,
            } => {
                let (q, kv, hd) = (heads.q_dim(), heads.kv_dim(), heads.head_dim);
                let half = hd / 2;
                let in_w = q + 2 * kv;
                let tab = b.get(table, 2 * positions * half);
                out.par_chunks_mut(q).enumerate().for_each(|(r, oq)| {
                    let (seq, pos) = s.rows.of(r);
                    let x = b.get(s.x.at(r * in_w), in_w);
                    let (cos, sin) = (
                        &tab[pos * half..][..half],
                        &tab[(positions + pos) * half..][..half],
                    );
                    let turn = |src: &[f32], dst: &mut [f32]| {
                        for (hs, hd_out) in src.chunks_exact(hd).zip(dst.chunks_exact_mut(hd)) {
                            for i in 0..half {
                                let (a, bb) = (hs[i], hs[i + half]);
                                hd_out[i] = a * cos[i] - bb * sin[i];
                                hd_out[i + half] = bb * cos[i] + a * sin[i];
                            }
                        }
                    };
                    turn(&x[..q], oq);
                    let at = cache.index(seq, pos, kv);
                    // SAFETY: the `kv` keys and values at `at` are row `r`'s alone: the step's
                    // rows are distinct (sequence, position) pairs with the sequence below
                    // `cache.batch` (rows = batch × per_seq), which `Cache::index` maps to
                    // distinct `kv`-wide entries, and the keys and values are separate arena
                    // ranges. The step neither reads the cache nor has it in `out` (see `run`).
                    let (kdst, vdst) = unsafe {
                        (
                            write_ref(arena, cache.k.at(at), kv),
                            write_ref(arena, cache.v.at(at), kv),
                        )
                    };
                    turn(&x[q..q + kv], kdst);
                    vdst.copy_from_slice(&x[q + kv..]);
                });
            }
            Op::Attention { heads, cache } if s.rows.per_seq >= GEMM_ROWS => {
                attention_blocks(s, b, out, heads, cache, fma)
            }
            Op::Attention { heads, cache } => {
                let (q, kv, hd) = (heads.q_dim(), heads.kv_dim(), heads.head_dim);
                let scale = heads.scale() as f32;
                // Task `r · heads + h` is head `h` of row `r`: `hd` elements at `r·q + h·hd`.
                out.par_chunks_mut(hd).enumerate().for_each(|(task, o)| {
                    let (r, h) = (task / heads.heads, task % heads.heads);
                    let (seq, pos) = s.rows.of(r);
                    let g = heads.kv_head(h);
                    let qv = b.get(s.x.at(r * q + h * hd), hd);
                    let key = |t: usize| b.get(cache.k.at(cache.index(seq, t, kv) + g * hd), hd);
                    let val = |t: usize| b.get(cache.v.at(cache.index(seq, t, kv) + g * hd), hd);
                    let mut p: Vec<f32> = (0..=pos).map(|t| dot(qv, key(t))).collect();
                    softmax_scaled(&mut p, scale, fma);
                    o.fill(0.0);
                    for (t, w) in p.iter().enumerate() {
                        for (y, v) in o.iter_mut().zip(val(t)) {
                            *y += w * v;
                        }
                    }
                });
            }
            Op::SwiGlu { ffn } => out.par_chunks_mut(ffn).enumerate().for_each(|(r, o)| {
                let x = b.get(s.x.at(r * 2 * ffn), 2 * ffn);
                swiglu_row(&x[..ffn], &x[ffn..], o, fma);
            }),
            Op::Add { dim, other } => out.par_chunks_mut(dim).enumerate().for_each(|(r, o)| {
                let a = b.get(s.x.at(r * dim), dim);
                let c = b.get(other.at(r * dim), dim);
                for ((y, u), v) in o.iter_mut().zip(a).zip(c) {
                    *y = u + v;
                }
            }),
            Op::Copy { len } => out.copy_from_slice(b.get(s.x, len)),
        }
    }
}

/// Prefill attention: a task per sequence, head and block of [`ATTENTION_ROWS`] consecutive rows
/// (positions `p0..p1`), over keys `0..p1`: `S = Q·Kᵀ` (the block's keys gathered transposed),
/// each row's softmax over its causal window (later keys get weight 0), `O = P·V` straight from
/// the cache (its rows `batch · kv_dim` apart), written to `out`, the step's output.
fn attention_blocks(
    s: &Step,
    b: &StepReads<'_>,
    out: &mut [f32],
    heads: Heads,
    cache: Cache,
    fma: bool,
) {
    let (q, kv, hd) = (heads.q_dim(), heads.kv_dim(), heads.head_dim);
    let scale = heads.scale() as f32;
    let per_seq = s.rows.per_seq;
    let blocks = per_seq.div_ceil(ATTENTION_ROWS);
    let seqs = s.rows.rows / per_seq;
    let stride = cache.batch * kv;
    let out = Shared::new(out);
    (0..seqs * heads.heads * blocks)
        .into_par_iter()
        .for_each(|task| {
            let (seq, rest) = (task / (heads.heads * blocks), task % (heads.heads * blocks));
            let (h, blk) = (rest / blocks, rest % blocks);
            let g = heads.kv_head(h);
            let i0 = blk * ATTENTION_ROWS;
            let m = ATTENTION_ROWS.min(per_seq - i0);
            let r0 = seq * per_seq + i0;
            let p0 = s.rows.pos0 + i0;
            let t = p0 + m; // keys 0..t
            let first = cache.index(seq, 0, kv) + g * hd;
            let span = (t - 1) * stride + hd;
            let keys = b.get(cache.k.at(first), span);
            let vals = b.get(cache.v.at(first), span);
            let mut kt = vec![0f32; hd * t];
            for (j, key) in keys.chunks(stride).take(t).enumerate() {
                for (d, v) in key[..hd].iter().enumerate() {
                    kt[d * t + j] = *v;
                }
            }
            let qs = b.get(s.x.at(r0 * q + h * hd), (m - 1) * q + hd);
            let mut sc = vec![0f32; m * t];
            gemm_strided_serial(qs, q, &kt, t, &mut sc, t, m, t, hd);
            for (i, row) in sc.chunks_exact_mut(t).enumerate() {
                let live = p0 + i + 1;
                softmax_scaled(&mut row[..live], scale, fma);
                row[live..].fill(0.0);
            }
            let mut o = vec![0f32; m * hd];
            gemm_strided_serial(&sc, t, vals, stride, &mut o, hd, m, hd, t);
            for (i, row) in o.chunks_exact(hd).enumerate() {
                // SAFETY: head `h` of rows `r0..r0 + m` (`hd` elements at `row·q + h·hd`) is this
                // task's alone: tasks are distinct (sequence, head, block) triples and a block's
                // rows are its sequence's `i0..i0 + m`. `out` is the step's output, which only
                // these tasks touch.
                let dst = unsafe { out.write((r0 + i) * q + h * hd, hd) };
                dst.copy_from_slice(row);
            }
        });
}

/// `len` arena elements at `r` for writing (a step's second output, the KV cache).
///
/// # Safety
/// As [`Shared::write`]; `r` must be in the arena.
unsafe fn write_ref<'a>(arena: Shared<'a>, r: Ref, len: usize) -> &'a mut [f32] {
    debug_assert_eq!(r.buf, Buf::Arena, "a step writes only the arena");
    // SAFETY: the caller guarantees exclusive access to these elements (`Shared::write`'s
    // contract, passed on unchanged).
    unsafe { arena.write(r.off, len) }
}
