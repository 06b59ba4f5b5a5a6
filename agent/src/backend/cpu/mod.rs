//! The `cpu` backend: always built, always available, the baseline row.
//!
//! Internals: every kernel is plain Rust on f32 slices in [`ops`], spread
//! over the rayon pool of the worker process (one pool per process, sized
//! to the logical cores). GEMM `blocked` goes through the `gemm` crate's
//! register-blocked microkernels; `naive` and `tiled` are our own loops so
//! the three variants show what blocking buys on this host. Times come from
//! the monotonic clock around each call. "Transfers" in `with_transfers`
//! mode are the copies from the caller's host buffers into the working
//! buffers and back, which is what a unified-memory device pays too.
//!
//! The hot loops are compiled twice, baseline and AVX2+FMA, through one `fma_dispatch!` macro in
//! `ops/mod.rs`; conv2d takes its geometry from the catalog (`gpufleet_kernels::ConvShape`, from
//! `Problem::conv_shape`) like the GPU planners.

pub mod device;
pub mod kernel;
pub mod ops;
pub mod spec_table;

use super::{Backend, BackendError, DeviceInfo, KernelSupport, Prepare, PreparedKernel};
use gpufleet_kernels::{BackendKind, Dtype, catalog};

/// The CPU backend.
#[derive(Debug, Default)]
pub struct CpuBackend;

impl CpuBackend {
    pub fn new() -> Self {
        CpuBackend
    }
}

impl Backend for CpuBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Cpu
    }

    fn discover(&self) -> Result<Vec<DeviceInfo>, BackendError> {
        Ok(vec![device::discover()])
    }

    fn kernels(&self) -> Vec<KernelSupport> {
        // The CPU implements every catalog kernel that lists it (all of them), every variant, in
        // f32, and the quantized weights of those that take them (gemv, llm); compute_peak in the
        // arithmetic types it has (no fp16).
        catalog()
            .iter()
            .filter(|k| k.backends.contains(&BackendKind::Cpu))
            .map(|k| KernelSupport {
                kernel: k.name.to_string(),
                variants: k
                    .variants
                    .iter()
                    .filter(|v| kernel::runs_variant(k.id, v))
                    .map(|v| v.to_string())
                    .collect(),
                dtypes: k
                    .dtypes
                    .iter()
                    .filter(|d| **d == Dtype::F32 || d.block_format().is_some())
                    .map(|d| d.name().to_string())
                    .collect(),
            })
            .collect()
    }

    fn prepare(&self, job: &Prepare<'_>) -> Result<Box<dyn PreparedKernel>, BackendError> {
        Ok(Box::new(kernel::CpuKernel::new(
            job.problem,
            job.inputs,
            job.mode,
        )?))
    }
}
