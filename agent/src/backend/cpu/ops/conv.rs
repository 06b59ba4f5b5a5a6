//! 2-D convolution, NCHW, square kernels, zero padding: input `(batch, channels, height, width)`,
//! weights `(filters, channels, ksize, ksize)`, output `(batch, filters, out_h, out_w)` with
//! `out_h = (height + 2·pad - ksize) / stride + 1`.
//!
//! Two ways, like the GPU kernels:
//!
//! - [`conv2d_direct`]: one task per (image, filter) output plane. For each weight, the valid range
//!   of output columns is computed once, so the inner loop is a bounds-check-free `out += w · in` over
//!   a row (contiguous when stride is 1, so it vectorizes) and the output plane stays in L1/L2.
//! - [`Im2col`] / [`im2col_with`]: unfolds each image into a `(channels·ksize²) × (out_h·out_w)`
//!   matrix in a workspace allocated once (by [`Im2col::new`], or shared by a network's layers),
//!   then multiplies `weights (filters × channels·ksize²)` by it with
//!   [`gemm_blocked_tiles`]. Costs memory, gains the GEMM's speed; the workspace is reused
//!   across images and calls so the timed loop allocates nothing.

use std::fmt;

use rayon::prelude::*;

use super::gemm::gemm_blocked_tiles;
use super::{check_len, fmadd, has_avx2_fma};

/// Below this many multiply-adds a convolution (or an unfold) runs on the calling thread.
const SERIAL_LIMIT: usize = 64 * 64 * 64;

/// Dimensions of one convolution: the catalog's, so the cpu backend and the GPU planners read one
/// geometry (`out_h`, `out_w` included) from [`gpufleet_kernels::Problem::conv_shape`].
pub use gpufleet_kernels::ConvShape;

/// Elements of the input, the weights and the output of `s` (saturating at `usize::MAX`).
fn lens(s: &ConvShape) -> [usize; 3] {
    [
        product(&[s.batch, s.channels, s.height, s.width]),
        product(&[s.filters, s.channels, s.ksize, s.ksize]),
        product(&[s.batch, s.filters, s.out_h, s.out_w]),
    ]
}

/// Multiply-adds of the whole convolution, `output·channels·ksize²` (saturating).
fn macs(s: &ConvShape) -> usize {
    product(&[lens(s)[2], s.channels, s.ksize, s.ksize])
}

/// Asserts that the slices have the lengths `s` implies, naming the slice.
#[track_caller]
fn check(s: &ConvShape, input: &[f32], weights: &[f32], out: &[f32]) {
    let [input_len, weights_len, output_len] = lens(s);
    check_len(
        "input (batch×channels×height×width)",
        input.len(),
        input_len,
    );
    check_len(
        "weights (filters×channels×ksize×ksize)",
        weights.len(),
        weights_len,
    );
    check_len("out (batch×filters×out_h×out_w)", out.len(), output_len);
}

/// Output size along one axis, `(size + 2·pad - ksize) / stride + 1`; 0 when the kernel does not
/// fit in the padded input or `stride`/`ksize` is 0 (the tests build such shapes by hand).
#[cfg(test)]
fn out_dim(size: usize, ksize: usize, stride: usize, pad: usize) -> usize {
    if stride == 0 || ksize == 0 {
        return 0;
    }
    match size
        .saturating_add(pad.saturating_mul(2))
        .checked_sub(ksize)
    {
        Some(span) => span / stride + 1,
        None => 0,
    }
}

fn product(factors: &[usize]) -> usize {
    factors.iter().fold(1usize, |acc, &f| acc.saturating_mul(f))
}

/// The output positions `lo..hi` (clamped to `0..out_len`) whose input coordinate
/// `o·stride + kpos - pad` lies inside `0..size`.
fn valid_range(
    size: usize,
    kpos: usize,
    stride: usize,
    pad: usize,
    out_len: usize,
) -> (usize, usize) {
    let lo = if kpos >= pad {
        0
    } else {
        (pad - kpos).div_ceil(stride)
    };
    let hi = match (size + pad).checked_sub(kpos + 1) {
        Some(last) => (last / stride + 1).min(out_len),
        None => 0,
    };
    (lo.min(hi), hi)
}

/// Direct convolution, parallel over (image, filter) output planes.
///
/// # Panics
///
/// Panics if `input`, `weights` or `out` does not have the length `shape` implies.
pub fn conv2d_direct(shape: &ConvShape, input: &[f32], weights: &[f32], out: &mut [f32]) {
    check(shape, input, weights, out);
    let plane = shape.out_h * shape.out_w;
    if out.is_empty() {
        return;
    }
    let image_len = shape.channels * shape.height * shape.width;
    let filter_len = shape.channels * shape.ksize * shape.ksize;
    let fma = has_avx2_fma();
    let task = |(index, out_plane): (usize, &mut [f32])| {
        let (image, filter) = (index / shape.filters, index % shape.filters);
        let image = &input[image * image_len..][..image_len];
        let filter = &weights[filter * filter_len..][..filter_len];
        direct_plane(shape, image, filter, out_plane, fma);
    };
    if macs(shape) < SERIAL_LIMIT {
        out.chunks_mut(plane).enumerate().for_each(task);
    } else {
        out.par_chunks_mut(plane).enumerate().for_each(task);
    }
}

fma_dispatch! {
    /// One output plane of [`conv2d_direct`], dispatched on `fma`.
    fn direct_plane(shape: &ConvShape, image: &[f32], filter: &[f32], out: &mut [f32]) => direct_plane_impl::<FMA>
}

#[inline(always)]
fn direct_plane_impl<const FMA: bool>(
    shape: &ConvShape,
    image: &[f32],
    filter: &[f32],
    out: &mut [f32],
) {
    let (h, w, r) = (shape.height, shape.width, shape.ksize);
    let (stride, pad) = (shape.stride, shape.pad);
    let (oh, ow) = (shape.out_h, shape.out_w);
    out.fill(0.0);
    if h * w == 0 {
        // Only padding: the output is all zeros.
        return;
    }
    for (channel, weights) in image.chunks_exact(h * w).zip(filter.chunks_exact(r * r)) {
        for kr in 0..r {
            let (oy_lo, oy_hi) = valid_range(h, kr, stride, pad, oh);
            for kc in 0..r {
                let (ox_lo, ox_hi) = valid_range(w, kc, stride, pad, ow);
                if ox_lo == ox_hi {
                    continue;
                }
                let weight = weights[kr * r + kc];
                let ix0 = ox_lo * stride + kc - pad;
                for oy in oy_lo..oy_hi {
                    let iy = oy * stride + kr - pad;
                    let in_row = &channel[iy * w..][..w];
                    let out_row = &mut out[oy * ow + ox_lo..oy * ow + ox_hi];
                    let span = &in_row[ix0..ix0 + (out_row.len() - 1) * stride + 1];
                    match stride {
                        1 => row_fma::<FMA, 1>(weight, span, out_row),
                        2 => row_fma::<FMA, 2>(weight, span, out_row),
                        _ => {
                            for (o, group) in out_row.iter_mut().zip(span.chunks(stride)) {
                                *o = fmadd::<FMA>(weight, group[0], *o);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `out[j] += weight · span[j·STRIDE]` for every `j < out.len()`.
///
/// `chunks_exact` with a constant width gives LLVM a counted loop without bounds checks and a
/// constant stride, so it vectorizes (stride 2 as contiguous loads plus shuffles). The last element is
/// separate because its `STRIDE`-wide group may run past the end of the row.
#[inline(always)]
fn row_fma<const FMA: bool, const STRIDE: usize>(weight: f32, span: &[f32], out: &mut [f32]) {
    let Some((last, body)) = out.split_last_mut() else {
        return;
    };
    let end = body.len() * STRIDE;
    for (o, group) in body.iter_mut().zip(span[..end].chunks_exact(STRIDE)) {
        *o = fmadd::<FMA>(weight, group[0], *o);
    }
    *last = fmadd::<FMA>(weight, span[end], *last);
}

/// Convolution through [`im2col_with`], owning a workspace of one unfolded image.
pub struct Im2col {
    /// The shape the workspace was sized for; `run` checks its slices against it.
    shape: ConvShape,
    /// One unfolded image: `(channels·ksize²) × (out_h·out_w)`, row-major.
    workspace: Vec<f32>,
}

impl fmt::Debug for Im2col {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Im2col")
            .field("shape", &self.shape)
            .field("workspace_len", &self.workspace.len())
            .finish()
    }
}

impl Im2col {
    /// Allocates the workspace for one image of `shape` (`channels·ksize²·out_h·out_w` floats).
    ///
    /// # Panics
    ///
    /// Panics if the workspace size overflows `usize` or cannot be allocated.
    pub fn new(shape: &ConvShape) -> Im2col {
        Im2col {
            shape: *shape,
            workspace: vec![0.0; unfold_len(shape)],
        }
    }

    /// Convolves `input` with `weights` into `out` through [`im2col_with`] and this workspace.
    ///
    /// # Panics
    ///
    /// Panics if `input`, `weights` or `out` does not have the length the shape given to
    /// [`Im2col::new`] implies.
    pub fn run(&mut self, input: &[f32], weights: &[f32], out: &mut [f32]) {
        im2col_with(&self.shape, input, weights, out, &mut self.workspace);
    }
}

/// Elements of one unfolded image of `shape`: `(channels·ksize²) × (out_h·out_w)`.
///
/// # Panics
///
/// Panics if that overflows `usize`.
pub fn unfold_len(shape: &ConvShape) -> usize {
    (shape.channels * shape.ksize * shape.ksize)
        .checked_mul(shape.out_h * shape.out_w)
        .expect("im2col workspace size overflows usize")
}

/// Convolution through im2col: as many images as `workspace` holds ([`unfold_len`] each, at least
/// one) are unfolded at a time, then each image's
/// `out_image (filters × out_h·out_w) = weights (filters × channels·ksize²) · columns` runs as
/// [`gemm_blocked_tiles`], the images' products side by side on the pool.
///
/// # Panics
///
/// Panics if `input`, `weights` or `out` does not have the length `shape` implies, or the
/// workspace holds less than one unfolded image.
pub fn im2col_with(
    shape: &ConvShape,
    input: &[f32],
    weights: &[f32],
    out: &mut [f32],
    workspace: &mut [f32],
) {
    check(shape, input, weights, out);
    if out.is_empty() {
        return;
    }
    let image_len = shape.channels * shape.height * shape.width;
    let k = shape.channels * shape.ksize * shape.ksize;
    let n = shape.out_h * shape.out_w;
    if k == 0 {
        // No taps: every output is an empty sum.
        out.fill(0.0);
        return;
    }
    let per_image = unfold_len(shape);
    let at_once = workspace.len() / per_image;
    assert!(at_once > 0, "im2col workspace smaller than one image");
    let workspace = &mut workspace[..at_once * per_image];
    let out_image_len = shape.filters * n;
    // By image index, since an image may be empty (height or width 0 with padding) while its
    // outputs are not.
    for first in (0..shape.batch).step_by(at_once) {
        let images = at_once.min(shape.batch - first);
        let inputs = &input[first * image_len..(first + images) * image_len];
        let outs = &mut out[first * out_image_len..(first + images) * out_image_len];
        let columns = &mut workspace[..images * per_image];
        columns
            .par_chunks_mut(per_image)
            .enumerate()
            .map(|(i, cols)| (cols, &inputs[i * image_len..(i + 1) * image_len]))
            .for_each(|(cols, image)| unfold(shape, image, cols));
        outs.par_chunks_mut(out_image_len)
            .zip(columns.par_chunks(per_image))
            .for_each(|(out_image, cols)| {
                gemm_blocked_tiles(weights, cols, out_image, shape.filters, n, k);
            });
    }
}

/// Writes the im2col matrix of one image: row `(c, kr, kc)`, column `(oy, ox)` holds
/// `image[c][oy·stride + kr - pad][ox·stride + kc - pad]`, or 0 in the padding.
fn unfold(shape: &ConvShape, image: &[f32], columns: &mut [f32]) {
    let (h, w, r) = (shape.height, shape.width, shape.ksize);
    let (stride, pad) = (shape.stride, shape.pad);
    let (oh, ow) = (shape.out_h, shape.out_w);
    let row = |(index, dst): (usize, &mut [f32])| {
        let (channel, kr, kc) = (index / (r * r), index / r % r, index % r);
        let channel = &image[channel * h * w..][..h * w];
        let (oy_lo, oy_hi) = valid_range(h, kr, stride, pad, oh);
        let (ox_lo, ox_hi) = valid_range(w, kc, stride, pad, ow);
        for (oy, dst_row) in dst.chunks_exact_mut(ow).enumerate() {
            if oy < oy_lo || oy >= oy_hi || ox_lo == ox_hi {
                dst_row.fill(0.0);
                continue;
            }
            let iy = oy * stride + kr - pad;
            let ix0 = ox_lo * stride + kc - pad;
            let in_row = &channel[iy * w..][..w];
            dst_row[..ox_lo].fill(0.0);
            dst_row[ox_hi..].fill(0.0);
            let inside = &mut dst_row[ox_lo..ox_hi];
            if stride == 1 {
                inside.copy_from_slice(&in_row[ix0..ix0 + inside.len()]);
            } else {
                let span = &in_row[ix0..ix0 + (inside.len() - 1) * stride + 1];
                for (j, d) in inside.iter_mut().enumerate() {
                    *d = span[j * stride];
                }
            }
        }
    };
    let n = oh * ow;
    if columns.len() < SERIAL_LIMIT {
        columns.chunks_exact_mut(n).enumerate().for_each(row);
    } else {
        columns.par_chunks_exact_mut(n).enumerate().for_each(row);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::backend::cpu::ops::test_data as data;

    fn shape(
        batch: usize,
        channels: usize,
        hw: (usize, usize),
        filters: usize,
        ksp: (usize, usize, usize),
    ) -> ConvShape {
        ConvShape {
            batch,
            channels,
            height: hw.0,
            width: hw.1,
            filters,
            ksize: ksp.0,
            stride: ksp.1,
            pad: ksp.2,
            out_h: out_dim(hw.0, ksp.0, ksp.1, ksp.2),
            out_w: out_dim(hw.1, ksp.0, ksp.1, ksp.2),
        }
    }

    /// Scalar f64 reference with explicit padding checks; returns (value, Σ|w·x|) per output.
    fn reference(s: &ConvShape, input: &[f32], weights: &[f32]) -> Vec<(f64, f64)> {
        let (oh, ow) = (s.out_h, s.out_w);
        let mut out = Vec::with_capacity(s.output_len());
        for b in 0..s.batch {
            for f in 0..s.filters {
                for oy in 0..oh {
                    for ox in 0..ow {
                        let (mut sum, mut mag) = (0.0f64, 0.0f64);
                        for c in 0..s.channels {
                            for kr in 0..s.ksize {
                                for kc in 0..s.ksize {
                                    let iy = (oy * s.stride + kr) as isize - s.pad as isize;
                                    let ix = (ox * s.stride + kc) as isize - s.pad as isize;
                                    if iy < 0
                                        || ix < 0
                                        || iy >= s.height as isize
                                        || ix >= s.width as isize
                                    {
                                        continue;
                                    }
                                    let x = input[((b * s.channels + c) * s.height + iy as usize)
                                        * s.width
                                        + ix as usize];
                                    let w = weights
                                        [((f * s.channels + c) * s.ksize + kr) * s.ksize + kc];
                                    let t = f64::from(x) * f64::from(w);
                                    sum += t;
                                    mag += t.abs();
                                }
                            }
                        }
                        out.push((sum, mag));
                    }
                }
            }
        }
        out
    }

    fn check(what: &str, s: &ConvShape, got: &[f32], exact: &[(f64, f64)]) {
        let terms = (s.channels * s.ksize * s.ksize) as f64;
        assert_eq!(got.len(), exact.len(), "{what} {s:?}: length");
        for (i, (&g, &(e, mag))) in got.iter().zip(exact).enumerate() {
            let tol = 2.0 * terms * f64::from(f32::EPSILON) * mag + 1e-30;
            assert!(
                (f64::from(g) - e).abs() <= tol,
                "{what} {s:?}: out[{i}] = {g}, expected {e}"
            );
        }
    }

    fn shapes() -> Vec<ConvShape> {
        let mut v = Vec::new();
        for ksize in [3, 5] {
            for stride in [1, 2] {
                for pad in [0, 1, 2] {
                    v.push(shape(2, 3, (9, 11), 4, (ksize, stride, pad)));
                }
            }
        }
        v.push(shape(1, 2, (2, 3), 3, (3, 1, 1))); // image smaller than the kernel, padding makes it fit
        v.push(shape(1, 1, (1, 1), 1, (1, 1, 0))); // 1×1 everything
        v.push(shape(3, 5, (7, 6), 2, (1, 2, 0))); // 1×1 kernel, strided
        v.push(shape(1, 2, (5, 5), 2, (3, 3, 2))); // stride equal to the kernel, large pad
        v.push(shape(2, 16, (20, 19), 8, (3, 1, 1))); // big enough for the parallel paths
        v.push(shape(1, 8, (33, 30), 5, (5, 2, 2)));
        v.push(shape(1, 2, (0, 3), 2, (3, 1, 2))); // no input rows: all padding
        v
    }

    #[test]
    fn output_dimensions_follow_the_formula() {
        let s = shape(1, 1, (9, 11), 1, (3, 2, 0));
        assert_eq!((s.out_h, s.out_w), ((9 - 3) / 2 + 1, (11 - 3) / 2 + 1));
        let s = shape(2, 3, (9, 11), 4, (5, 2, 2));
        assert_eq!(
            (s.out_h, s.out_w),
            ((9 + 4 - 5) / 2 + 1, (11 + 4 - 5) / 2 + 1)
        );
        assert_eq!(s.output_len(), 2 * 4 * s.out_h * s.out_w);
        assert_eq!(s.input_len(), 2 * 3 * 9 * 11);
        assert_eq!(s.weights_len(), 4 * 3 * 5 * 5);
        // Kernel larger than the padded input, zero stride, zero kernel: no output, no panic.
        assert_eq!(shape(1, 1, (2, 2), 1, (5, 1, 1)).output_len(), 0);
        assert_eq!(shape(1, 1, (8, 8), 1, (3, 0, 1)).output_len(), 0);
        assert_eq!(shape(1, 1, (8, 8), 1, (0, 1, 1)).output_len(), 0);
    }

    #[test]
    fn valid_range_matches_brute_force() {
        for size in 0..7 {
            for kpos in 0..5 {
                for stride in 1..4 {
                    for pad in 0..4 {
                        let out_len = out_dim(size, 5, stride, pad);
                        let inside: Vec<usize> = (0..out_len)
                            .filter(|&o| {
                                let i = (o * stride + kpos) as isize - pad as isize;
                                i >= 0 && i < size as isize
                            })
                            .collect();
                        let (lo, hi) = valid_range(size, kpos, stride, pad, out_len);
                        let got: Vec<usize> = (lo..hi).collect();
                        assert_eq!(
                            got, inside,
                            "size={size} kpos={kpos} stride={stride} pad={pad}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn direct_matches_reference() {
        for s in shapes() {
            let input = data(s.input_len(), 1);
            let weights = data(s.weights_len(), 2);
            let mut out = vec![f32::NAN; s.output_len()];
            conv2d_direct(&s, &input, &weights, &mut out);
            check("direct", &s, &out, &reference(&s, &input, &weights));
        }
    }

    #[test]
    fn direct_baseline_copy_without_fma_matches_reference() {
        for s in shapes() {
            let input = data(s.input_len(), 6);
            let weights = data(s.weights_len(), 7);
            let mut out = vec![f32::NAN; s.output_len()];
            let (image_len, filter_len) = (s.input_len() / s.batch, s.weights_len() / s.filters);
            let plane = s.out_h * s.out_w;
            for (index, out_plane) in out.chunks_mut(plane).enumerate() {
                let image = &input[index / s.filters * image_len..][..image_len];
                let filter = &weights[index % s.filters * filter_len..][..filter_len];
                direct_plane_impl::<false>(&s, image, filter, out_plane);
            }
            check(
                "direct baseline",
                &s,
                &out,
                &reference(&s, &input, &weights),
            );
        }
    }

    #[test]
    fn im2col_matches_reference_and_reuses_its_workspace() {
        for s in shapes() {
            let mut conv = Im2col::new(&s);
            let weights = data(s.weights_len(), 3);
            // The second run must not see anything the first left in the workspace.
            for seed in [4, 5] {
                let input = data(s.input_len(), seed);
                let mut out = vec![f32::NAN; s.output_len()];
                conv.run(&input, &weights, &mut out);
                check("im2col", &s, &out, &reference(&s, &input, &weights));
            }
        }
    }

    #[test]
    fn empty_outputs_do_nothing() {
        let s = shape(1, 1, (2, 2), 1, (5, 1, 1));
        conv2d_direct(&s, &[1.0; 4], &[1.0; 25], &mut []);
        Im2col::new(&s).run(&[1.0; 4], &[1.0; 25], &mut []);
        let s = shape(0, 2, (4, 4), 3, (3, 1, 1));
        conv2d_direct(&s, &[], &[1.0; 54], &mut []);
    }

    #[test]
    #[should_panic(
        expected = "slice weights (filters×channels×ksize×ksize) has length 10, expected 12"
    )]
    fn wrong_length_panics_with_the_slice_name() {
        let s = shape(1, 3, (4, 4), 1, (2, 1, 0));
        conv2d_direct(&s, &[0.0; 48], &[0.0; 10], &mut [0.0; 9]);
    }
}
