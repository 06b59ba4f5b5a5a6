//! Compute functions of the CPU backend: the reference row of every benchmark table.
//!
//! Every function works on row-major `f32` slices and fully overwrites its output.
//!
//! | file | functions | what they compute |
//! | --- | --- | --- |
//! | [`gemm`] | `gemm_naive`, `gemm_tiled`, `gemm_blocked` | `C(m×n) = A(m×k)·B(k×n)`: a plain i-k-j loop, our own cache-blocked and register-tiled version, and the `gemm` crate |
//! | [`elementwise`] | `vec_add`, `copy`, `triad`, `relu`, `sigmoid`, `tanh`, `gelu` | one output element per input element (STREAM-style add/copy/triad and activations) |
//! | [`rows`] | `softmax`, `log_softmax`, `layernorm`, `rmsnorm`, `layernorm_rmsnorm_fused` | one independent reduction-then-map per row of a `rows×cols` matrix |
//! | [`conv`] | `conv2d_direct`, `Im2col` | NCHW 2-D convolution with zero padding and a square kernel, directly or via im2col + GEMM |
//! | [`model`] | `ModelRunner` | CNN inference: a network's layers in order (convolutions through im2col + GEMM, depthwise, pooling, residual add, linear) |
//! | [`memory`] | `sum_f64`, `pointer_chase`, `pool_roundtrip` | read bandwidth, dependent-load latency, and the backend's "launch latency" |
//! | [`peak`] | `compute_peak` | chains of fused multiply-adds in f32, f64 or i32: peak arithmetic |
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
//! inside the loop). The compute-heavy ones (`gemm_naive`, `gemm_tiled`, `sigmoid`, `tanh`, `gelu`,
//! `softmax`, `conv2d_direct`, and `sum_f64` for in-cache data) are compiled twice: once for the
//! baseline target and once with AVX2+FMA enabled (`#[target_feature]`), picked at run time by
//! `has_avx2_fma`, because a portable build (x86-64 v1, SSE2 only) would otherwise leave half the
//! vector width and the fused multiply-add unused on every machine we run on. The plain memory-bound
//! loops do not need it.
//! `gemm_blocked` runs the `gemm` crate's AVX-512, AVX2+FMA or portable microkernels, and the
//! quantized dot products ([`quant::dots`]) integer copies on the input's 8-bit digits (`digits`,
//! `digit_dots`: Q4_0 with AVX2, Q4_0 and Q8_0 with AVX-512 VNNI) or f32 ones (AVX-512 without
//! VNNI, Q8_0 on AVX2), picked the same way ([`Isa::active`]); `GPUFLEET_CPU_ISA` caps all of them.
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
#[cfg(target_arch = "x86_64")]
mod digit_dots;
#[cfg(target_arch = "x86_64")]
mod digits;
pub mod elementwise;
pub mod gemm;
pub mod llm;
pub mod memory;
pub mod model;
pub mod peak;
mod qrow;
pub mod quant;
pub mod rows;

use gpufleet_kernels::{ElementwiseKernel, TRIAD_SCALAR};

/// Runs element-wise kernel `kernel` on its inputs `x` (in the catalog's order) into `y`; noop is
/// the pool round trip that stands for a launch ([`memory::pool_roundtrip`]).
pub fn elementwise(kernel: ElementwiseKernel, x: &[&[f32]], y: &mut [f32]) {
    match kernel {
        ElementwiseKernel::VecAdd => elementwise::vec_add(x[0], x[1], y),
        ElementwiseKernel::Copy => elementwise::copy(x[0], y),
        ElementwiseKernel::Triad => elementwise::triad(x[0], x[1], y, TRIAD_SCALAR),
        ElementwiseKernel::Noop => memory::pool_roundtrip(x[0], y),
        ElementwiseKernel::Relu => elementwise::relu(x[0], y),
        ElementwiseKernel::Sigmoid => elementwise::sigmoid(x[0], y),
        ElementwiseKernel::Tanh => elementwise::tanh(x[0], y),
        ElementwiseKernel::Gelu => elementwise::gelu(x[0], y),
    }
}

/// The widest vector instruction set the CPU kernels use: what the CPU has, capped by
/// [`ISA_ENV`] so one machine can measure its AVX2 figure next to its AVX-512 one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    /// The baseline target (SSE2 on x86-64), no FMA.
    Portable,
    /// AVX2 with fused multiply-add and F16C (x86-64 v3).
    Avx2Fma,
    /// AVX-512F (x86-64 v4): [`gemm::gemm_blocked`] and the quantized block dot products
    /// ([`quant::dots`]) have kernels for it; the other hot loops stay on AVX2+FMA.
    Avx512,
}

/// Environment variable that caps [`Isa`]: `avx512`, `avx2` or `portable` (unset or `auto`: what
/// the CPU has). A cap above what the CPU has changes nothing. Runs may set it per run
/// (`--env GPUFLEET_CPU_ISA=avx2`); the result's `isa` config says what ran.
pub const ISA_ENV: &str = "GPUFLEET_CPU_ISA";

impl Isa {
    /// The name in results' `isa` config and in [`ISA_ENV`].
    pub fn name(self) -> &'static str {
        match self {
            Isa::Portable => "portable",
            Isa::Avx2Fma => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    /// The widest set this CPU has.
    pub fn detected() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let v3 = has!("avx2") && has!("fma") && has!("f16c");
            if has!("avx512f") && v3 {
                return Isa::Avx512;
            }
            if v3 {
                return Isa::Avx2Fma;
            }
        }
        Isa::Portable
    }

    /// [`Isa::detected`] capped by `cap` (a value of [`ISA_ENV`]; `None` or `auto`: no cap).
    ///
    /// # Errors
    ///
    /// An unknown value, with the variable's name and (a short piece of) the value.
    pub fn capped(cap: Option<&str>) -> Result<Isa, String> {
        let detected = Isa::detected();
        let limit = match cap.map(str::trim) {
            None | Some("") | Some("auto") => return Ok(detected),
            Some("avx512") => Isa::Avx512,
            Some("avx2") => Isa::Avx2Fma,
            Some("portable") => Isa::Portable,
            Some(other) => {
                return Err(format!(
                    "{ISA_ENV}={} (use auto, avx512, avx2 or portable)",
                    gpufleet_kernels::quote(other)
                ));
            }
        };
        Ok(detected.min(limit))
    }

    /// The set this process uses: [`Isa::capped`] by [`ISA_ENV`], read once. An unknown value
    /// counts as no cap here; [`Isa::from_env`] is what reports it (the backend does when it
    /// prepares a run).
    pub fn active() -> Isa {
        static ACTIVE: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
        *ACTIVE.get_or_init(|| Isa::from_env().unwrap_or_else(|_| Isa::detected()))
    }

    /// [`Isa::capped`] by the value of [`ISA_ENV`] in this process's environment.
    ///
    /// # Errors
    ///
    /// As [`Isa::capped`].
    pub fn from_env() -> Result<Isa, String> {
        Isa::capped(std::env::var(ISA_ENV).ok().as_deref())
    }
}

/// Whether the `#[target_feature(enable = "avx2,fma")]` copies of the hot loops (`avx2,fma,f16c`
/// for the quantized ones) may run: the CPU has AVX2, FMA and F16C and [`ISA_ENV`] does not cap
/// below them.
#[inline]
fn has_avx2_fma() -> bool {
    Isa::active() >= Isa::Avx2Fma
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
