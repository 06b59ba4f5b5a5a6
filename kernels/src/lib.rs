//! gpufleet's kernel catalog: what each benchmark kernel computes, its parameters and their bounds,
//! its FLOP and byte counts, seeded inputs, an f64 reference with a tolerance per dtype, and the
//! suites that list what to run.
//!
//! It exists as its own crate so the agent (which runs kernels) and the coordinator (which schedules
//! and compares them) agree on one definition of every kernel: the same spec gives the same spec key,
//! the same inputs and the same verdict on any machine. A number counts only if its output passed
//! [`Problem::check`] in the same run. The crate does no I/O except reading a user's suite file.
//!
//! # Layout
//! - `types.rs`: [`Dtype`], [`MetricKind`], [`MetricValue`], [`Buffer`], [`BufferKind`].
//! - `backend.rs`: [`BackendKind`], the one list of backend names the agent's registry, the
//!   coordinator's `--backend` checks and the catalog share.
//! - `catalog/`: one module per kernel family, each the whole definition of its kernels (see
//!   `catalog/mod.rs`): the table entries ([`KernelDef`]: name, variants, parameters with bounds,
//!   dtypes, metric, backends; [`catalog`], [`find_kernel`]), the device entry-point stems, and
//!   the family's computation (cross-parameter rules, FLOP/byte counts, sizes, input value sets,
//!   the f64 reference and its tolerance). `mod.rs` holds [`KernelId`], [`Problem`] and the
//!   `Family` trait with its one dispatch; `dense.rs` (gemm, conv2d, [`ConvShape`]),
//!   `elementwise.rs`, `rows.rs`, `model.rs` (the CNNs), `host.rs`, `debug.rs`.
//! - `error.rs`: [`SpecError`], why a spec was refused, naming the field and the bound.
//! - `problem.rs`: validating a spec into a [`Problem`], and what derives from it (sizes, FLOP/byte
//!   counts, inputs, metric, spec key) asked of its family (its tests in `problem/tests.rs`).
//! - `run.rs`: how a spec is measured: [`Mode`]; the settings as given ([`PartialSettings`]) and as
//!   decided ([`RunSettings`], its defaults written once), their one bound check ([`SettingError`]).
//! - `noise.rs`: how far a result can be trusted: the robust spread ([`robust_cv`], [`Robust`]),
//!   the median's interval ([`median_ci`]) and the one noise rule ([`NoiseFigures`]).
//! - `json.rs`: stored or received JSON read into a typed value, an error naming the field
//!   ([`from_json_str`], [`from_json_value`], [`JsonError`]).
//! - `inputs.rs`: seeded value sets (values exact in fp16) the families draw their inputs from.
//! - `quant.rs`: llama.cpp's Q8_0 and Q4_0 weight blocks: the quantizer, the device's split layout,
//!   seeded weights the blocks hold exactly.
//! - `check/`: [`Validation`]: the harness pieces (`harness.rs`), a whole validation
//!   ([`Problem::check`], `mod.rs`), and a network's layer by layer (`model.rs`).
//! - `llm/`: the transformer workloads ([`llm::LlmGraph`]: steps over tensors at fixed offsets,
//!   seeded weights, the f64 reference of each step and of a whole block in `reference.rs`).
//! - `model/`: the CNN workloads ([`model::Graph`]: layers, seeded weights with batch norm folded,
//!   the f64 reference of each layer in `reference.rs`, the networks' layer lists in `nets.rs`).
//! - `sources.rs`: the device code, embedded: OpenCL C files and the Vulkan SPIR-V table
//!   `build.rs` generates from `kernels/vulkan/*.comp`.
//! - `suite/`: [`Suite`] and [`SuiteRun`] (`mod.rs`), the TOML format and its validation (`file.rs`);
//!   the builtin suites live in `kernels/suites/*.toml` and are embedded at build time.
//! - `env.rs`: the allowlist of per-run environment overrides; `secret.rs`: the rule for tokens;
//!   `process.rs`: process-wide behaviour both binaries share (broken pipes).
//!
//! # Lifecycle
//! 1. A spec (kernel, variant, params, dtype) arrives from a suite or a request.
//! 2. [`Problem::new`] validates and resolves it (defaults filled in) or returns a [`SpecError`];
//!    [`Problem::spec_key`] names it for comparisons, [`Problem::footprint_bytes`] sizes it for the
//!    device memory check.
//! 3. [`Problem::inputs`] makes the seeded inputs, deterministic for `(problem, seed)`.
//! 4. A backend runs the kernel on them and returns one output [`Buffer`].
//! 5. [`Problem::check`] compares the output with the f64 reference (sampled for huge problems).
//! 6. [`Problem::metric`] turns the median time into GFLOP/s, GB/s, µs, ns/hop or images/s.

#![warn(missing_docs)]

mod backend;
mod catalog;
mod check;
mod draw;
pub mod env;
mod error;
mod inputs;
mod json;
pub mod llm;
pub mod model;
mod noise;
mod problem;
mod process;
pub mod quant;
mod run;
mod secret;
pub mod sources;
mod suite;
mod types;

pub use backend::BackendKind;
pub use catalog::{
    ACHIEVED_GBPS, CHAINS, CeilingKernel, CeilingSource, ConvShape, DEVICE_CEILINGS, DebugKernel,
    DeviceCeiling, ElementwiseKernel, HostKernel, INT8_DOT, KernelDef, KernelGroup, KernelId,
    LlmKernel, ModelKernel, NORM_EPS, PEAK_CONSTANTS, PEAK_VARIANTS, ParamDef, Problem, RoofPart,
    RowKernel, SplitStats, TRANSFER_VARIANTS, TRIAD_SCALAR, catalog, debug_noise_factor,
    find_kernel, peak_item_value, show_param, variant_arithmetic, variant_feature, variant_unit,
};
pub use check::harness::Validation;
pub use error::{QUOTE_MAX_BYTES, SpecError, error_chain, human_bytes, prefix, quote};
pub use json::{JsonError, flattened, from_json_str, from_json_value};
pub use noise::{
    MAD_TO_SIGMA, NOISY_SPREAD, NoiseFigures, Robust, TUKEY_K, ci_pct, median_ci, noisy_rule,
    percentile, quartile_cv, robust_cv,
};
pub use problem::{MAX_FOOTPRINT_BYTES, lookup_kernel};
pub use process::{panic_message, quiet_broken_pipes};
pub use run::{Mode, PartialSettings, RunSettings, SettingError};
pub use secret::{MIN_SECRET_CHARS, secrets_equal, weak_secret};
pub use suite::{BUILTIN_SUITES, Suite, SuiteError, SuiteRun};
pub use types::{Buffer, BufferKind, Dtype, MetricKind, MetricValue};

/// Version of the kernels' semantics (definitions, inputs, tolerances); bump it when any of them
/// changes, because results measured before are no longer comparable.
pub const KERNELS_VERSION: &str = "2";
