//! Element-wise functions: the STREAM trio (`copy`, `vec_add`, `triad`) and the activations `relu`,
//! `sigmoid`, `tanh`, `gelu`.
//!
//! Work is cut into chunks of `CHUNK` elements (256 KiB of f32), one rayon task each: big enough that
//! task overhead is noise, small enough that both cores stay busy down to a few hundred KiB. Inputs of
//! one chunk or less run inline. `copy`, `vec_add`, `triad` and `relu` are memory-bound and
//! vectorize on any target. `sigmoid`, `tanh` and `gelu` are compute-bound (an exponential per
//! element), so they use `exp_approx`, a branch-free exponential that vectorizes (the C library's
//! `expf` is a call per element), and run an AVX2+FMA copy when the CPU has it.

use rayon::prelude::*;

use super::{check_len, fmadd, has_avx2_fma};

/// Elements per rayon task.
pub(super) const CHUNK: usize = 64 * 1024;

/// `c[i] = a[i] + b[i]`.
///
/// # Panics
///
/// Panics if `a`, `b` and `c` differ in length.
pub fn vec_add(a: &[f32], b: &[f32], c: &mut [f32]) {
    check_len("b", b.len(), a.len());
    check_len("c", c.len(), a.len());
    for_each_chunk(c, |offset, c| {
        let (a, b) = (&a[offset..][..c.len()], &b[offset..][..c.len()]);
        for ((c, &a), &b) in c.iter_mut().zip(a).zip(b) {
            *c = a + b;
        }
    });
}

/// `b[i] = a[i]`.
///
/// # Panics
///
/// Panics if `a` and `b` differ in length.
pub fn copy(a: &[f32], b: &mut [f32]) {
    check_len("b", b.len(), a.len());
    for_each_chunk(b, |offset, b| b.copy_from_slice(&a[offset..][..b.len()]));
}

/// STREAM triad: `a[i] = b[i] + scalar * c[i]`.
///
/// A separate multiply and add (not fused) on every target, so results do not depend on the CPU.
///
/// # Panics
///
/// Panics if `a`, `b` and `c` differ in length.
pub fn triad(b: &[f32], c: &[f32], a: &mut [f32], scalar: f32) {
    check_len("c", c.len(), b.len());
    check_len("a", a.len(), b.len());
    for_each_chunk(a, |offset, a| {
        let (b, c) = (&b[offset..][..a.len()], &c[offset..][..a.len()]);
        for ((a, &b), &c) in a.iter_mut().zip(b).zip(c) {
            *a = b + scalar * c;
        }
    });
}

/// `y[i] = max(x[i], 0)`; NaN stays NaN.
///
/// # Panics
///
/// Panics if `x` and `y` differ in length.
pub fn relu(x: &[f32], y: &mut [f32]) {
    check_len("y", y.len(), x.len());
    for_each_chunk(y, |offset, y| {
        let x = &x[offset..][..y.len()];
        for (y, &x) in y.iter_mut().zip(x) {
            *y = if x < 0.0 { 0.0 } else { x };
        }
    });
}

/// `y = f(x)` over parallel chunks, `f` a dispatcher made by `fma_dispatch!`.
///
/// # Panics
///
/// Panics if `x` and `y` differ in length.
fn map_chunks(x: &[f32], y: &mut [f32], f: fn(&[f32], &mut [f32], bool)) {
    check_len("y", y.len(), x.len());
    let fma = has_avx2_fma();
    for_each_chunk(y, |offset, y| f(&x[offset..][..y.len()], y, fma));
}

/// `y[i] = 1 / (1 + exp(-x[i]))`, within about 1e-6 relative of the exact value for every result in
/// the normal f32 range (below about 1.2e-38, when x < -87.3, the result is a subnormal or 0).
///
/// # Panics
///
/// Panics if `x` and `y` differ in length.
pub fn sigmoid(x: &[f32], y: &mut [f32]) {
    map_chunks(x, y, sigmoid_chunk);
}

fma_dispatch! {
    /// One chunk of [`sigmoid`], dispatched on `fma`.
    fn sigmoid_chunk(x: &[f32], y: &mut [f32]) => sigmoid_impl::<FMA>
}

#[inline(always)]
fn sigmoid_impl<const FMA: bool>(x: &[f32], y: &mut [f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = 1.0 / (1.0 + exp_approx::<FMA>(-x));
    }
}

/// `y[i] = tanh(x[i])`, within about 1e-6 relative (and absolute) of the exact value.
///
/// Small arguments (|x| < 0.625) use an odd polynomial, so tiny inputs keep their relative accuracy
/// instead of losing it to the cancellation in `1 - 2/(exp(2x) + 1)`.
///
/// # Panics
///
/// Panics if `x` and `y` differ in length.
pub fn tanh(x: &[f32], y: &mut [f32]) {
    map_chunks(x, y, tanh_chunk);
}

fma_dispatch! {
    /// One chunk of [`tanh`], dispatched on `fma`.
    fn tanh_chunk(x: &[f32], y: &mut [f32]) => tanh_impl::<FMA>
}

#[inline(always)]
fn tanh_impl<const FMA: bool>(x: &[f32], y: &mut [f32]) {
    // Cephes tanhf: odd minimax polynomial on |x| < 0.625.
    const T0: f32 = -5.704_988_7e-3;
    const T1: f32 = 2.063_909e-2;
    const T2: f32 = -5.373_971_6e-2;
    const T3: f32 = 1.333_144_2e-1;
    const T4: f32 = -3.333_328e-1;
    for (y, &x) in y.iter_mut().zip(x) {
        let ax = x.abs();
        let z = x * x;
        let mut p = fmadd::<FMA>(T0, z, T1);
        p = fmadd::<FMA>(p, z, T2);
        p = fmadd::<FMA>(p, z, T3);
        p = fmadd::<FMA>(p, z, T4);
        let small = fmadd::<FMA>(p * z, x, x);
        // exp overflows to +inf for |x| > 44, giving exactly 1.
        let large = (1.0 - 2.0 / (exp_approx::<FMA>(2.0 * ax) + 1.0)).copysign(x);
        *y = if ax < 0.625 { small } else { large };
    }
}

/// `y[i] = gelu(x[i])` with PyTorch's `approximate="tanh"`: `0.5·x·(1 + tanh(u))`,
/// `u = √(2/π)·(x + 0.044715·x³)`, within about `(4·|2u| + 8)` f32 epsilons relative of the exact
/// value (the rounding of `u` is amplified by the exponential; subnormal results aside).
///
/// Computed as `x / (1 + exp(-2u))`, the same value: one exponential, and no cancellation in
/// `1 + tanh(u)` for negative `x`. For very negative `x` the exponential is +inf and the result -0.
///
/// # Panics
///
/// Panics if `x` and `y` differ in length.
pub fn gelu(x: &[f32], y: &mut [f32]) {
    map_chunks(x, y, gelu_chunk);
}

fma_dispatch! {
    /// One chunk of [`gelu`], dispatched on `fma`.
    fn gelu_chunk(x: &[f32], y: &mut [f32]) => gelu_impl::<FMA>
}

#[inline(always)]
fn gelu_impl<const FMA: bool>(x: &[f32], y: &mut [f32]) {
    // 2·√(2/π) and 2·√(2/π)·0.044715: -2u = -x·(K + C·x²).
    const K: f32 = 1.595_769_2;
    const C: f32 = 0.071_354_816;
    for (y, &x) in y.iter_mut().zip(x) {
        let two_u = x * fmadd::<FMA>(C, x * x, K);
        *y = x / (1.0 + exp_approx::<FMA>(-two_u));
    }
}

/// Above this, [`exp_approx`] returns +inf (the true overflow point is 88.72; the gap only affects
/// results above 2.2e38, which no caller here needs).
const EXP_HI: f32 = 88.3;
/// Below this, [`exp_approx`] returns 0 (the exact result would be subnormal).
const EXP_LO: f32 = -87.33;

/// `exp(x)` within about 2 ulp for `EXP_LO <= x <= EXP_HI`, +inf above, 0 below, NaN for NaN.
///
/// Cephes `expf`: `x = n·ln2 + r` with |r| <= ln2/2, a degree-6 polynomial for `exp(r)`, and `2^n`
/// built in the exponent bits. No table and no branch, so loops over it vectorize.
#[inline(always)]
pub(super) fn exp_approx<const FMA: bool>(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split so that n·LN2_HI is exact for the n in range.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // 1.5·2^23: adding it rounds to an integer held in the low mantissa bits.
    const MAGIC: f32 = 12_582_912.0;
    const MAGIC_BITS: i32 = 0x4B40_0000;
    const P0: f32 = 1.987_569_2e-4;
    const P1: f32 = 1.398_2e-3;
    const P2: f32 = 8.333_452e-3;
    const P3: f32 = 4.166_579_6e-2;
    const P4: f32 = 1.666_666_5e-1;
    const P5: f32 = 0.5;
    // `clamp` passes NaN through, so NaN flows through the arithmetic and comes out NaN.
    let xc = x.clamp(EXP_LO, EXP_HI);
    let t = fmadd::<FMA>(xc, LOG2E, MAGIC);
    let n_f = t - MAGIC;
    let n = (t.to_bits() as i32).wrapping_sub(MAGIC_BITS);
    let r = fmadd::<FMA>(n_f, -LN2_HI, xc);
    let r = fmadd::<FMA>(n_f, -LN2_LO, r);
    let mut p = fmadd::<FMA>(P0, r, P1);
    p = fmadd::<FMA>(p, r, P2);
    p = fmadd::<FMA>(p, r, P3);
    p = fmadd::<FMA>(p, r, P4);
    p = fmadd::<FMA>(p, r, P5);
    let e = fmadd::<FMA>(p, r * r, r) + 1.0;
    // n is in -126..=127 here, so 2^n is a normal float.
    let scale = f32::from_bits((n.wrapping_add(127) << 23) as u32);
    let y = e * scale;
    if x > EXP_HI {
        f32::INFINITY
    } else if x < EXP_LO {
        0.0
    } else {
        y
    }
}

/// Runs `body(offset, chunk)` over `out` in chunks of [`CHUNK`], in parallel unless one chunk covers it.
#[inline]
fn for_each_chunk(out: &mut [f32], body: impl Fn(usize, &mut [f32]) + Sync) {
    if out.len() <= CHUNK {
        body(0, out);
    } else {
        out.par_chunks_mut(CHUNK)
            .enumerate()
            .for_each(|(index, chunk)| body(index * CHUNK, chunk));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lengths around the chunk size: empty, one, odd small, one chunk, ragged multi-chunk.
    const LENS: [usize; 6] = [0, 1, 7, CHUNK, CHUNK + 3, 3 * CHUNK + 17];

    /// Deterministic values in [-scale, scale) from a 64-bit LCG.
    fn data(len: usize, seed: u64, scale: f32) -> Vec<f32> {
        crate::backend::cpu::ops::test_values(len, seed, 0.0, scale)
    }

    /// Arguments for the activations: a sweep over many magnitudes plus the special values.
    fn activation_inputs() -> Vec<f32> {
        let mut x = data(3 * CHUNK + 5, 11, 20.0);
        for e in -30..=7 {
            let v = 2.0f32.powi(e) * 1.37;
            x.extend([v, -v]);
        }
        x.extend([
            0.0, -0.0, 0.624, 0.626, -0.625, 44.0, -44.5, 87.0, -87.0, 88.5, -88.5,
        ]);
        x.extend([100.0, -100.0, 1e30, -1e30, f32::INFINITY, f32::NEG_INFINITY]);
        x
    }

    #[test]
    fn stream_kernels_match_reference() {
        for len in LENS {
            let a = data(len, 1, 3.0);
            let b = data(len, 2, 3.0);
            let mut out = vec![f32::NAN; len];
            vec_add(&a, &b, &mut out);
            for i in 0..len {
                assert_eq!(out[i], a[i] + b[i], "vec_add len={len} i={i}");
            }
            let mut out = vec![f32::NAN; len];
            copy(&a, &mut out);
            assert_eq!(out, a, "copy len={len}");
            let mut out = vec![f32::NAN; len];
            triad(&a, &b, &mut out, 2.5);
            for i in 0..len {
                let exact = f64::from(a[i]) + 2.5 * f64::from(b[i]);
                let tol = 1e-6 * (f64::from(a[i]).abs() + 2.5 * f64::from(b[i]).abs());
                assert!(
                    (f64::from(out[i]) - exact).abs() <= tol,
                    "triad len={len} i={i}: {} vs {exact}",
                    out[i]
                );
            }
        }
    }

    #[test]
    fn relu_matches_reference() {
        for len in LENS {
            let x = data(len, 3, 1.0);
            let mut y = vec![f32::NAN; len];
            relu(&x, &mut y);
            for i in 0..len {
                assert_eq!(y[i], if x[i] > 0.0 { x[i] } else { 0.0 }, "i={i}");
            }
        }
        let mut y = [0.0; 2];
        relu(&[f32::NAN, -0.5], &mut y);
        assert!(y[0].is_nan() && y[1] == 0.0, "{y:?}");
    }

    fn check_sigmoid(x: &[f32], y: &[f32], what: &str) {
        for (&x, &y) in x.iter().zip(y) {
            let exact = 1.0 / (1.0 + (-f64::from(x)).exp());
            let err = (f64::from(y) - exact).abs();
            // Relative in the normal range; below it the f32 result is subnormal or 0.
            let tol = (1e-6 * exact).max(1.2e-38);
            assert!(err <= tol, "{what}: sigmoid({x}) = {y}, expected {exact}");
        }
    }

    fn check_tanh(x: &[f32], y: &[f32], what: &str) {
        for (&x, &y) in x.iter().zip(y) {
            let exact = f64::from(x).tanh();
            let err = (f64::from(y) - exact).abs();
            assert!(
                err <= 1e-6 * exact.abs(),
                "{what}: tanh({x}) = {y}, expected {exact}"
            );
        }
    }

    #[test]
    fn sigmoid_matches_reference_on_every_path() {
        let x = activation_inputs();
        let mut y = vec![f32::NAN; x.len()];
        sigmoid(&x, &mut y);
        check_sigmoid(&x, &y, "dispatched");
        sigmoid_impl::<false>(&x, &mut y);
        check_sigmoid(&x, &y, "baseline");
        sigmoid_impl::<true>(&x, &mut y);
        check_sigmoid(&x, &y, "fma");
        for len in [0, 1] {
            let mut y = vec![f32::NAN; len];
            sigmoid(&x[..len], &mut y);
            check_sigmoid(&x[..len], &y, "short");
        }
        let mut y = [0.0];
        sigmoid(&[f32::NAN], &mut y);
        assert!(y[0].is_nan());
    }

    #[test]
    fn tanh_matches_reference_on_every_path() {
        let x = activation_inputs();
        let mut y = vec![f32::NAN; x.len()];
        tanh(&x, &mut y);
        check_tanh(&x, &y, "dispatched");
        tanh_impl::<false>(&x, &mut y);
        check_tanh(&x, &y, "baseline");
        tanh_impl::<true>(&x, &mut y);
        check_tanh(&x, &y, "fma");
        let mut y = [0.0];
        tanh(&[f32::NAN], &mut y);
        assert!(y[0].is_nan());
    }

    fn check_gelu(x: &[f32], y: &[f32], what: &str) {
        for (&x, &y) in x.iter().zip(y) {
            let v = f64::from(x);
            let u = (2.0 / std::f64::consts::PI).sqrt() * (v + 0.044_715 * v * v * v);
            // 0.5·(1 + tanh(u)) as 1 / (1 + e^-2u): in f64 too, 1 + tanh(u) is 0 below x ≈ -5.5.
            let exact = v / (1.0 + (-2.0 * u).exp());
            let err = (f64::from(y) - exact).abs();
            // The rounding of 2u moves exp(-2u) by |2u| ulps; below the normal range the f32
            // result is subnormal or 0.
            let tol = f64::from(f32::EPSILON) * (4.0 * (2.0 * u).abs() + 8.0) * exact.abs();
            assert!(
                err <= tol.max(1e-37),
                "{what}: gelu({x}) = {y}, expected {exact}"
            );
        }
    }

    #[test]
    fn gelu_matches_reference_on_every_path() {
        // Beyond ±1e12 the cube overflows f64's tanh argument to ±inf, which still gives the
        // exact limits x and -0; -inf is NaN both ways (-inf·0).
        let x: Vec<f32> = activation_inputs()
            .into_iter()
            .filter(|v| v.abs() < 1e12)
            .collect();
        let mut y = vec![f32::NAN; x.len()];
        gelu(&x, &mut y);
        check_gelu(&x, &y, "dispatched");
        gelu_impl::<false>(&x, &mut y);
        check_gelu(&x, &y, "baseline");
        gelu_impl::<true>(&x, &mut y);
        check_gelu(&x, &y, "fma");
        let mut y = [0.0; 3];
        gelu(&[f32::NAN, f32::INFINITY, -30.0], &mut y);
        assert!(y[0].is_nan(), "{y:?}");
        assert_eq!(y[1], f32::INFINITY);
        assert_eq!(y[2], 0.0);
    }

    #[test]
    fn exp_approx_is_within_a_few_ulp() {
        let mut x = data(200_000, 5, 87.0);
        x.extend([0.0, 1.0, -1.0, EXP_LO, EXP_HI, 0.5 * std::f32::consts::LN_2]);
        type Exp = fn(f32) -> f32;
        let copies: [(&str, Exp); 2] = [
            ("baseline", exp_approx::<false>),
            ("fma", exp_approx::<true>),
        ];
        for (name, exp) in copies {
            for &v in &x {
                let got = exp(v);
                let exact = f64::from(v).exp();
                let rel = (f64::from(got) - exact).abs() / exact;
                assert!(rel <= 3e-7, "{name}: exp({v}) = {got}, expected {exact}");
            }
            assert_eq!(exp(89.0), f32::INFINITY, "{name}: overflow");
            assert_eq!(exp(-90.0), 0.0, "{name}: underflow");
            assert!(exp(f32::NAN).is_nan(), "{name}: NaN");
        }
    }

    #[test]
    #[should_panic(expected = "slice c has length 3, expected 4")]
    fn wrong_length_panics_with_the_slice_name() {
        vec_add(&[0.0; 4], &[0.0; 4], &mut [0.0; 3]);
    }
}
