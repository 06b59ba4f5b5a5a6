//! Compute functions of the CPU backend: the reference row of every benchmark table.
//!
//! Every function works on row-major `f32` slices and fully overwrites its output.
//!
//! | file | functions | what they compute |
//! | --- | --- | --- |
//! | [`gemm`] | `gemm_naive`, `gemm_tiled`, `gemm_blocked` | `C(m×n) = A(m×k)·B(k×n)`: a plain i-k-j loop, our own cache-blocked and register-tiled version, and the `gemm` crate |
//! | [`elementwise`] | `vec_add`, `copy`, `triad`, `relu`, `sigmoid`, `tanh` | one output element per input element (STREAM-style add/copy/triad and activations) |
//! | [`rows`] | `softmax`, `layernorm`, `rmsnorm`, `layernorm_rmsnorm_fused` | one independent reduction-then-map per row of a `rows×cols` matrix |
//! | [`conv`] | `conv2d_direct`, `Im2col` | NCHW 2-D convolution with zero padding and a square kernel, directly or via im2col + GEMM |
//! | [`memory`] | `sum_f64`, `pointer_chase`, `pool_roundtrip` | read bandwidth, dependent-load latency, and the backend's "launch latency" |
//!
//! # Threading model
//!
//! Everything runs on the *current* rayon pool (`rayon::current_num_threads()`, `par_*` iterators,
//! `rayon::scope`): these functions never build a pool of their own. The caller decides the thread count
//! by installing its pool (`ThreadPool::install`) around the call, so a benchmark can sweep 1..N threads
//! and the worker process keeps one pool alive across iterations instead of paying thread start-up inside
//! the timed window. Work is split into tasks big enough that rayon's overhead is noise (about 64K
//! elements for element-wise work, several rows for row work, 64-row blocks for GEMM); inputs so small
//! that one task would do run inline on the calling thread, because a pool round trip (a few µs) would
//! otherwise dominate what is measured.
//!
//! # Why the code looks like this
//!
//! These numbers sit next to GPU numbers, so a slow CPU row would flatter every GPU. The hot loops are
//! written so that LLVM vectorizes them (fixed-width lane accumulators, `chunks_exact`, no bounds checks
//! inside the loop). The compute-heavy ones (`gemm_naive`, `gemm_tiled`, `sigmoid`, `tanh`, `softmax`,
//! `conv2d_direct`, and `sum_f64` for in-cache data) are compiled twice: once for the baseline target
//! and once with AVX2+FMA enabled (`#[target_feature]`), picked at run time by `has_avx2_fma`, because
//! a portable build (x86-64 v1, SSE2 only) would otherwise leave half the vector width and the fused
//! multiply-add unused on every machine we run on. The plain memory-bound loops do not need it.
//! `gemm_blocked` gets the same from the `gemm` crate's own run-time dispatch.
//!
//! Preconditions are the caller's job (the backend validates run parameters before it allocates): a
//! slice whose length does not match the dimensions is a programming error here and panics with a
//! message naming the slice, before any unsafe code could read past it. The only `unsafe` is the call
//! into a `#[target_feature]` copy after the run-time check, and the `gemm::gemm` call (raw pointers
//! and strides) after the length checks; each carries its `// SAFETY:` argument.

/// Defines `$name(args.., fma: bool)`, the dispatcher of a hot loop compiled twice: it runs the
/// loop's `#[target_feature(enable = "avx2,fma")]` copy when `fma` (from [`has_avx2_fma`], asked
/// once per op) says the CPU has both, else the baseline copy. `=> f::<FMA>` instantiates a loop
/// generic over [`fmadd`]'s `FMA`; `=> f` compiles the same function twice.
macro_rules! fma_dispatch {
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? => $f:ident::<FMA>) => {
        fma_dispatch!(@emit $(#[$doc])* $name ($($arg: $ty),*) ($($ret)?) ($f::<true>) ($f::<false>));
    };
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? => $f:ident) => {
        fma_dispatch!(@emit $(#[$doc])* $name ($($arg: $ty),*) ($($ret)?) ($f) ($f));
    };
    (@emit $(#[$doc:meta])* $name:ident ($($arg:ident: $ty:ty),*) ($($ret:ty)?) ($($fast:tt)*) ($($base:tt)*)) => {
        $(#[$doc])*
        fn $name($($arg: $ty,)* fma: bool) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma")]
                fn avx2($($arg: $ty),*) $(-> $ret)? {
                    $($fast)*($($arg),*)
                }
                if fma {
                    // SAFETY: `fma` comes from `has_avx2_fma()`, which checked that this CPU has AVX2
                    // and FMA.
                    return unsafe { avx2($($arg),*) };
                }
            }
            let _ = fma;
            $($base)*($($arg),*)
        }
    };
}

pub mod conv;
pub mod elementwise;
pub mod gemm;
pub mod memory;
pub mod rows;

/// Whether the running CPU has AVX2 and FMA, so the `#[target_feature]` copies of the hot loops may run.
///
/// `is_x86_feature_detected!` caches its answer, so this is a couple of loads per call.
#[inline]
fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `a*b + c`, fused when the caller is the FMA copy of a kernel.
///
/// Without FMA enabled at compile time `f32::mul_add` would call the C library's `fmaf` (slow, never
/// vectorized), so the baseline copy uses a separate multiply and add instead.
#[inline(always)]
fn fmadd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA { a.mul_add(b, c) } else { a * b + c }
}

/// Asserts that a slice has the length its dimensions imply; names the slice and both numbers.
#[track_caller]
fn check_len(name: &str, actual: usize, expected: usize) {
    assert!(
        actual == expected,
        "slice {name} has length {actual}, expected {expected}"
    );
}

/// `a * b`, panicking with the operand names on overflow instead of wrapping to a wrong length.
#[track_caller]
fn checked_len(what: &str, a: usize, b: usize) -> usize {
    a.checked_mul(b)
        .unwrap_or_else(|| panic!("{what}: {a}×{b} overflows usize"))
}

/// Deterministic test values in [-1, 1) from a 64-bit LCG, shared by the
/// ops' unit tests.
#[cfg(test)]
fn test_data(len: usize, seed: u64) -> Vec<f32> {
    test_values(len, seed, 0.0, 1.0)
}

/// Deterministic test values in [offset - scale, offset + scale) from a 64-bit LCG.
#[cfg(test)]
fn test_values(len: usize, seed: u64, offset: f32, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            offset + (((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0) * scale
        })
        .collect()
}
