//! `compute_peak` on the CPU: the catalog's chains of fused multiply-adds (see
//! `gpufleet_kernels::CeilingKernel`) in f32, f64 or i32, for every work-item of the output.
//!
//! A block of work-items runs together so the vector unit has enough independent chains: the
//! block's chains are one fixed-size array of `L` lanes that LLVM keeps in vector registers (64
//! lanes of f32 or i32, 32 of f64: eight 256-bit registers, the FMA latency of 4 cycles times 2
//! ports), every pair one multiply-add per register. Blocks of 256 work-items are one rayon task.
//! There is no fp16 variant: the CPUs we run on have no half arithmetic worth the name. `int8`
//! runs where the CPU has VNNI's `vpdpbusd` (AVX-512 VNNI on 512-bit vectors, else AVX-VNNI on
//! 256-bit ones; see [`Int8Dot`]), `u8 × s8` dot products of four bytes: the chain's low byte is
//! read unsigned, which the catalog's int8 chain allows.
//! `roofline` runs the same chain on every element of a buffer, 64 elements at a time.

use super::fmadd;
use gpufleet_kernels::CHAINS;
use rayon::prelude::*;

/// Work-items per rayon task.
const TASK: usize = 256;

/// One arithmetic type of the chains.
trait Lane: Copy + Default {
    fn from_f32(v: f32) -> Self;
    fn to_f32(self) -> f32;
    /// `x·a + b`, fused in the FMA copy.
    fn mad<const FMA: bool>(self, a: Self, b: Self) -> Self;
}

impl Lane for f32 {
    fn from_f32(v: f32) -> Self {
        v
    }
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn mad<const FMA: bool>(self, a: Self, b: Self) -> Self {
        fmadd::<FMA>(self, a, b)
    }
}

impl Lane for f64 {
    fn from_f32(v: f32) -> Self {
        f64::from(v)
    }
    fn to_f32(self) -> f32 {
        self as f32
    }
    #[inline(always)]
    fn mad<const FMA: bool>(self, a: Self, b: Self) -> Self {
        if FMA {
            self.mul_add(a, b)
        } else {
            self * a + b
        }
    }
}

impl Lane for i32 {
    fn from_f32(v: f32) -> Self {
        v as i32
    }
    fn to_f32(self) -> f32 {
        self as f32
    }
    #[inline(always)]
    fn mad<const FMA: bool>(self, a: Self, b: Self) -> Self {
        self.wrapping_mul(a).wrapping_add(b)
    }
}

/// The chains of work-items `first..first + out.len()` into `out`, `L / CHAINS` work-items a block.
#[inline(always)]
fn chains<T: Lane, const FMA: bool, const L: usize>(
    k: &[f32],
    out: &mut [f32],
    first: usize,
    pairs: usize,
) {
    let (a, b, c) = (T::from_f32(k[0]), T::from_f32(k[1]), T::from_f32(k[2]));
    let per_block = L / CHAINS;
    for (block, outs) in out.chunks_mut(per_block).enumerate() {
        let item0 = first + block * per_block;
        let mut x = [T::default(); L];
        for (lane, v) in x.iter_mut().enumerate() {
            *v = T::from_f32(((item0 + lane / CHAINS) % 8 + lane % CHAINS) as f32);
        }
        for _ in 0..pairs {
            for v in &mut x {
                *v = v.mad::<FMA>(a, b);
            }
            for v in &mut x {
                *v = v.mad::<FMA>(a, c);
            }
        }
        for (item, o) in outs.iter_mut().enumerate() {
            let lanes = &x[item * CHAINS..(item + 1) * CHAINS];
            *o = lanes.iter().map(|v| v.to_f32()).sum();
        }
    }
}

#[inline(always)]
fn chains_f32<const FMA: bool>(k: &[f32], out: &mut [f32], first: usize, pairs: usize) {
    chains::<f32, FMA, 64>(k, out, first, pairs);
}

#[inline(always)]
fn chains_f64<const FMA: bool>(k: &[f32], out: &mut [f32], first: usize, pairs: usize) {
    chains::<f64, FMA, 32>(k, out, first, pairs);
}

#[inline(always)]
fn chains_i32<const FMA: bool>(k: &[f32], out: &mut [f32], first: usize, pairs: usize) {
    chains::<i32, FMA, 64>(k, out, first, pairs);
}

fma_dispatch!(
    /// f32 chains, AVX2+FMA where the CPU has them.
    fn run_f32(k: &[f32], out: &mut [f32], first: usize, pairs: usize) => chains_f32::<FMA>
);
fma_dispatch!(
    /// f64 chains, AVX2+FMA where the CPU has them.
    fn run_f64(k: &[f32], out: &mut [f32], first: usize, pairs: usize) => chains_f64::<FMA>
);
fma_dispatch!(
    /// i32 chains, AVX2 where the CPU has it.
    fn run_i32(k: &[f32], out: &mut [f32], first: usize, pairs: usize) => chains_i32::<FMA>
);

/// Generates a VNNI runner of the int8 chains: `$regs` vectors of `$lanes` i32 lanes (lane `l`
/// is chain `l mod 8` of work-item `l / 8` of the block), each pair two `vpdpbusd` per vector
/// (`x = b + u8(bytes(x)) · s8(bytes(A))`, `A = a & 0xFF`), then each work-item's low bytes
/// summed.
#[cfg(target_arch = "x86_64")]
macro_rules! vnni_chains {
    ($(#[$doc:meta])* $name:ident, $features:literal, $vec:ty, $lanes:literal, $regs:literal,
     $set1:ident, $dot:ident) => {
        $(#[$doc])*
        #[target_feature(enable = $features)]
        fn $name(k: &[f32], out: &mut [f32], first: usize, pairs: usize) {
            use std::arch::x86_64::*;
            const L: usize = $lanes * $regs;
            let a = $set1((k[0] as i32) & 0xFF);
            let (b, c) = ($set1(k[1] as i32), $set1(k[2] as i32));
            for (block, outs) in out.chunks_mut(L / CHAINS).enumerate() {
                let item0 = first + block * (L / CHAINS);
                let mut lanes = [0i32; L];
                for (lane, v) in lanes.iter_mut().enumerate() {
                    *v = ((item0 + lane / CHAINS) % 8 + lane % CHAINS) as i32;
                }
                // SAFETY: the same size (L i32s), and every bit pattern is a valid vector.
                let mut x: [$vec; $regs] = unsafe { std::mem::transmute(lanes) };
                for _ in 0..pairs {
                    for v in &mut x {
                        *v = $dot(b, *v, a);
                    }
                    for v in &mut x {
                        *v = $dot(c, *v, a);
                    }
                }
                // SAFETY: `[$vec; $regs]` and `[i32; L]` have the same size (L i32s), and every bit
                // pattern is a valid i32.
                let lanes: [i32; L] = unsafe { std::mem::transmute(x) };
                for (item, o) in outs.iter_mut().enumerate() {
                    let chains = &lanes[item * CHAINS..(item + 1) * CHAINS];
                    *o = chains.iter().map(|v| v & 0xFF).sum::<i32>() as f32;
                }
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
vnni_chains!(
    /// int8 chains on AVX-512 VNNI: 16 vectors of 16 lanes (32 work-items), enough for
    /// `vpdpbusd`'s latency of 5 cycles on 2 ports.
    chains_vnni512, "avx512f,avx512vnni", __m512i, 16, 16, _mm512_set1_epi32, _mm512_dpbusd_epi32
);
#[cfg(target_arch = "x86_64")]
vnni_chains!(
    /// int8 chains on AVX-VNNI: 12 vectors of 8 lanes (12 work-items) and the three constants
    /// fill the 16 ymm registers.
    chains_avxvnni, "avx2,avxvnni", __m256i, 8, 12, _mm256_set1_epi32, _mm256_dpbusd_avx_epi32
);

/// The CPU's dot product of four bytes, compute_peak's int8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Int8Dot {
    /// AVX-512 VNNI, `vpdpbusd` on zmm.
    Avx512Vnni,
    /// AVX-VNNI, `vpdpbusd` on ymm (Alder Lake and later cores, Zen 5).
    AvxVnni,
}

impl Int8Dot {
    /// The instruction set this process uses for int8 dot products: what the CPU has within
    /// [`super::Isa::active`] (`avx2` keeps AVX-VNNI, `portable` none); `None` without VNNI.
    pub fn active() -> Option<Int8Dot> {
        #[cfg(target_arch = "x86_64")]
        {
            use super::Isa;
            use std::arch::is_x86_feature_detected as has;
            let isa = Isa::active();
            if isa >= Isa::Avx512 && has!("avx512vnni") {
                return Some(Int8Dot::Avx512Vnni);
            }
            if isa >= Isa::Avx2Fma && has!("avxvnni") {
                return Some(Int8Dot::AvxVnni);
            }
        }
        None
    }

    /// The name in results' `isa` config.
    pub fn name(self) -> &'static str {
        match self {
            Int8Dot::Avx512Vnni => "avx512_vnni",
            Int8Dot::AvxVnni => "avx_vnni",
        }
    }

    /// The chains of work-items `first..first + out.len()` into `out`.
    fn run(self, k: &[f32], out: &mut [f32], first: usize, pairs: usize) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `self` came from `active()`, which checked that this CPU has the features.
        unsafe {
            match self {
                Int8Dot::Avx512Vnni => chains_vnni512(k, out, first, pairs),
                Int8Dot::AvxVnni => chains_avxvnni(k, out, first, pairs),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (k, out, first, pairs);
    }
}

/// The arithmetic types the CPU runs compute_peak in (its variants but fp16; int8 only with
/// [`Int8Dot`]).
pub const VARIANTS: [&str; 4] = ["fp32", "fp64", "int32", "int8"];

/// compute_peak `variant` with constants `k` (`[a, b, c, 0]`) and `pairs` pairs per chain, one
/// value per work-item into `out`; `None` for a variant the CPU does not run (fp16, and int8
/// without VNNI).
pub fn compute_peak(variant: &str, k: &[f32], out: &mut [f32], pairs: usize) -> Option<()> {
    type Run = fn(&[f32], &mut [f32], usize, usize, bool);
    let run: Run = match variant {
        "fp32" => run_f32,
        "fp64" => run_f64,
        "int32" => run_i32,
        "int8" => {
            let dot = Int8Dot::active()?;
            super::check_len("k", k.len(), 4);
            out.par_chunks_mut(TASK)
                .enumerate()
                .for_each(|(task, chunk)| dot.run(k, chunk, task * TASK, pairs));
            return Some(());
        }
        _ => return None,
    };
    super::check_len("k", k.len(), 4);
    let fma = super::has_avx2_fma();
    if out.len() <= TASK {
        run(k, out, 0, pairs, fma);
    } else {
        out.par_chunks_mut(TASK)
            .enumerate()
            .for_each(|(task, chunk)| run(k, chunk, task * TASK, pairs, fma));
    }
    Some(())
}

/// Elements a roofline block runs together (eight 256-bit vectors of f32).
const ROOF_LANES: usize = 64;

/// roofline over `x` into `y`: each element through `pairs` pairs of the chain, blocks of
/// [`ROOF_LANES`] elements in vector registers.
#[inline(always)]
fn roofline_chunk<const FMA: bool>(x: &[f32], k: &[f32], y: &mut [f32], pairs: usize) {
    let (a, b, c) = (k[0], k[1], k[2]);
    for (xs, ys) in x.chunks(ROOF_LANES).zip(y.chunks_mut(ROOF_LANES)) {
        let mut v = [0.0f32; ROOF_LANES];
        v[..xs.len()].copy_from_slice(xs);
        for _ in 0..pairs {
            for e in &mut v {
                *e = fmadd::<FMA>(*e, a, b);
            }
            for e in &mut v {
                *e = fmadd::<FMA>(*e, a, c);
            }
        }
        ys.copy_from_slice(&v[..ys.len()]);
    }
}

fma_dispatch!(
    /// One task's elements of roofline, AVX2+FMA where the CPU has them.
    fn roofline_task(x: &[f32], k: &[f32], y: &mut [f32], pairs: usize) => roofline_chunk::<FMA>
);

/// Elements per rayon task of roofline (256 KiB of f32, as the element-wise kernels).
const ROOF_TASK: usize = 1 << 16;

/// roofline with constants `k` (`[a, b, c, 0]`): `y = x` after `pairs` pairs on each element.
pub fn roofline(x: &[f32], k: &[f32], y: &mut [f32], pairs: usize) {
    super::check_len("y", y.len(), x.len());
    super::check_len("k", k.len(), 4);
    let fma = super::has_avx2_fma();
    if y.len() <= ROOF_TASK {
        roofline_task(x, k, y, pairs, fma);
    } else {
        y.par_chunks_mut(ROOF_TASK)
            .zip(x.par_chunks(ROOF_TASK))
            .for_each(|(ys, xs)| roofline_task(xs, k, ys, pairs, fma));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpufleet_kernels::{PEAK_CONSTANTS, peak_item_value};

    #[test]
    fn every_variant_gives_the_closed_form_on_ragged_lengths() {
        for variant in VARIANTS {
            if variant == "int8" && Int8Dot::active().is_none() {
                eprintln!("skipping int8: this CPU has no VNNI (AVX-512 VNNI or AVX-VNNI)");
                assert!(compute_peak(variant, &PEAK_CONSTANTS, &mut [0.0], 1).is_none());
                continue;
            }
            for (items, pairs) in [(1, 1), (13, 5), (TASK + 9, 33), (3 * TASK, 300)] {
                let mut out = vec![f32::NAN; items];
                compute_peak(variant, &PEAK_CONSTANTS, &mut out, pairs).unwrap();
                for (i, v) in out.iter().enumerate() {
                    assert_eq!(
                        f64::from(*v),
                        peak_item_value(variant, i, pairs as i64),
                        "{variant} item {i} of {items}, pairs {pairs}"
                    );
                }
            }
        }
        assert!(compute_peak("fp16", &PEAK_CONSTANTS, &mut [0.0], 1).is_none());
    }

    /// Both VNNI widths where the CPU has them (the active one is covered above).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn both_vnni_widths_give_the_closed_form() {
        use std::arch::is_x86_feature_detected as has;
        for (dot, present) in [
            (Int8Dot::Avx512Vnni, has!("avx512f") && has!("avx512vnni")),
            (Int8Dot::AvxVnni, has!("avx2") && has!("avxvnni")),
        ] {
            if !present {
                eprintln!("skipping {}: not on this CPU", dot.name());
                continue;
            }
            let (items, pairs) = (77, 261);
            let mut out = vec![f32::NAN; items];
            dot.run(&PEAK_CONSTANTS, &mut out, 5, pairs);
            for (i, v) in out.iter().enumerate() {
                let want = peak_item_value("int8", i + 5, pairs as i64);
                assert_eq!(f64::from(*v), want, "{} item {i}", dot.name());
            }
        }
    }

    #[test]
    fn roofline_adds_pairs_to_every_element() {
        for (n, pairs) in [(1, 0), (67, 3), (ROOF_TASK + 5, 2)] {
            let x = crate::backend::cpu::ops::test_values(n, 3, 0.0, 1.0);
            let mut y = vec![f32::NAN; n];
            roofline(&x, &PEAK_CONSTANTS, &mut y, pairs);
            for (i, (a, b)) in x.iter().zip(&y).enumerate() {
                assert_eq!(*b, *a + pairs as f32, "n {n} pairs {pairs} element {i}");
            }
        }
    }
}
