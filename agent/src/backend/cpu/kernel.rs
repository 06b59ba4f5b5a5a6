//! Preparation and launch of catalog kernels on the CPU.

use super::ops;
use crate::backend::{BackendError, Mode, PreparedKernel};
use gpufleet_kernels::{Buffer, KernelId, Problem};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const LAYERNORM_EPS: f32 = 1e-5;
const TRIAD_SCALAR: f32 = 3.0;

/// A problem bound to its working buffers on the host.
pub struct CpuKernel {
    id: KernelId,
    variant: String,
    mode: Mode,
    params: BTreeMap<String, i64>,
    /// The caller's inputs (the "host side" in with-transfers mode).
    host_inputs: Vec<Buffer>,
    /// Working copies the kernel reads.
    inputs: Vec<Buffer>,
    output: Buffer,
    im2col: Option<ops::conv::Im2col>,
    /// conv2d's geometry, from the catalog (`Problem::conv_shape`).
    conv: Option<ops::conv::ConvShape>,
    /// A network's layers and workspaces (`simple_cnn`, `resnet18`, `mobilenet_v2`).
    model: Option<ops::model::ModelRunner>,
}

fn dim(p: &BTreeMap<String, i64>, name: &str) -> usize {
    p.get(name).copied().unwrap_or(0).max(0) as usize
}

fn unsupported(what: String) -> BackendError {
    BackendError::Unsupported {
        backend: "cpu".into(),
        what,
    }
}

fn f32s(b: &Buffer) -> &[f32] {
    b.as_f32().unwrap_or(&[])
}

impl CpuKernel {
    /// Binds `problem` to copies of `inputs`.
    ///
    /// # Errors
    /// `Unsupported` for a dtype other than f32 or inputs of the wrong kind,
    /// `OutOfMemory` when the output cannot be allocated.
    pub fn new(problem: &Problem, inputs: &[Buffer], mode: Mode) -> Result<Self, BackendError> {
        if problem.dtype.name() != "f32" {
            return Err(unsupported(format!(
                "dtype {} (f32 only)",
                problem.dtype.name()
            )));
        }
        let kinds = problem.input_kinds();
        if kinds.len() != inputs.len() {
            return Err(unsupported(format!(
                "{} with {} inputs (expected {})",
                problem.kernel.name,
                inputs.len(),
                kinds.len()
            )));
        }
        // A mistyped cap is the run's error, not a silent full-width run.
        ops::Isa::from_env().map_err(unsupported)?;
        let len = problem.output_len();
        let mut output_vec: Vec<f32> = Vec::new();
        let output = match problem.output_kind() {
            gpufleet_kernels::BufferKind::F32 => {
                output_vec
                    .try_reserve_exact(len)
                    .map_err(|e| BackendError::OutOfMemory {
                        backend: "cpu".into(),
                        message: format!("output of {len} f32: {e}"),
                    })?;
                output_vec.resize(len, 0.0);
                Buffer::F32(output_vec)
            }
            gpufleet_kernels::BufferKind::U32 => Buffer::U32(vec![0; len]),
        };
        let im2col = (problem.id() == KernelId::Conv2d && problem.variant == "im2col")
            .then(|| ops::conv::Im2col::new(&problem.conv_shape()));
        let conv = (problem.id() == KernelId::Conv2d).then(|| problem.conv_shape());
        let model = problem
            .net()
            .map(|_| ops::model::ModelRunner::new(problem.graph()));
        Ok(CpuKernel {
            id: problem.id(),
            variant: problem.variant.clone(),
            mode,
            params: problem.params.clone(),
            host_inputs: if mode == Mode::WithTransfers {
                inputs.to_vec()
            } else {
                Vec::new()
            },
            inputs: inputs.to_vec(),
            output,
            im2col,
            conv,
            model,
        })
    }

    fn compute(&mut self) -> Result<(), BackendError> {
        let p = &self.params;
        let ins = &self.inputs;
        let out = &mut self.output;
        let o = match out {
            Buffer::F32(v) => Some(v.as_mut_slice()),
            Buffer::U32(_) => None,
        };
        match (self.id, o) {
            (KernelId::Gemm, Some(c)) => {
                let (m, n, k) = (dim(p, "m"), dim(p, "n"), dim(p, "k"));
                let (a, b) = (f32s(&ins[0]), f32s(&ins[1]));
                match self.variant.as_str() {
                    "naive" => ops::gemm::gemm_naive(a, b, c, m, n, k),
                    "tiled" => ops::gemm::gemm_tiled(a, b, c, m, n, k),
                    _ => ops::gemm::gemm_blocked(a, b, c, m, n, k),
                }
            }
            (KernelId::VecAdd, Some(c)) => {
                ops::elementwise::vec_add(f32s(&ins[0]), f32s(&ins[1]), c)
            }
            (KernelId::DebugWrong, Some(c)) => {
                ops::elementwise::vec_add(f32s(&ins[0]), f32s(&ins[1]), c);
                // Deliberately wrong, so validation has something to catch.
                let i = c.len().min(8).saturating_sub(1);
                if let Some(x) = c.get_mut(i) {
                    *x += 1.0;
                }
            }
            (KernelId::Copy, Some(b)) => ops::elementwise::copy(f32s(&ins[0]), b),
            (KernelId::Triad, Some(a)) => {
                ops::elementwise::triad(f32s(&ins[0]), f32s(&ins[1]), a, TRIAD_SCALAR)
            }
            (KernelId::Noop, Some(o)) => ops::memory::pool_roundtrip(f32s(&ins[0]), o),
            (KernelId::Relu, Some(y)) => ops::elementwise::relu(f32s(&ins[0]), y),
            (KernelId::Sigmoid, Some(y)) => ops::elementwise::sigmoid(f32s(&ins[0]), y),
            (KernelId::Tanh, Some(y)) => ops::elementwise::tanh(f32s(&ins[0]), y),
            (KernelId::Softmax, Some(y)) => {
                ops::rows::softmax(f32s(&ins[0]), y, dim(p, "rows"), dim(p, "cols"))
            }
            (KernelId::LayerNorm, Some(y)) => ops::rows::layernorm(
                f32s(&ins[0]),
                f32s(&ins[1]),
                f32s(&ins[2]),
                y,
                dim(p, "rows"),
                dim(p, "cols"),
                LAYERNORM_EPS,
            ),
            (KernelId::RmsNorm, Some(y)) => ops::rows::rmsnorm(
                f32s(&ins[0]),
                f32s(&ins[1]),
                y,
                dim(p, "rows"),
                dim(p, "cols"),
                LAYERNORM_EPS,
            ),
            (KernelId::LayerNormRmsNormFused, Some(y)) => ops::rows::layernorm_rmsnorm_fused(
                f32s(&ins[0]),
                f32s(&ins[1]),
                f32s(&ins[2]),
                f32s(&ins[3]),
                y,
                dim(p, "rows"),
                dim(p, "cols"),
                LAYERNORM_EPS,
            ),
            (KernelId::Conv2d, Some(y)) => match (self.im2col.as_mut(), self.conv.as_ref()) {
                (Some(im2col), _) => im2col.run(f32s(&ins[0]), f32s(&ins[1]), y),
                (None, Some(shape)) => {
                    ops::conv::conv2d_direct(shape, f32s(&ins[0]), f32s(&ins[1]), y)
                }
                (None, None) => return Err(unsupported("conv2d without its shape".into())),
            },
            (KernelId::Model(_), Some(arena)) => match self.model.as_mut() {
                Some(m) => m.run(f32s(&ins[0]), f32s(&ins[1]), arena),
                None => return Err(unsupported("a model without its graph".into())),
            },
            (KernelId::MembwCpu, Some(y)) => y[0] = ops::memory::sum_f64(f32s(&ins[0])) as f32,
            (KernelId::MemlatCpu, None) => {
                let next = ins[0].as_u32().unwrap_or(&[]);
                let end = ops::memory::pointer_chase(next, 0, dim(p, "hops") as u64);
                if let Buffer::U32(v) = out {
                    v[0] = end;
                }
            }
            (KernelId::DebugCrash, _) => crash(dim(p, "mode")),
            (KernelId::DebugHang, _) => loop {
                std::thread::sleep(Duration::from_secs(3600));
            },
            (KernelId::DebugAlloc, Some(o)) => {
                hoard(dim(p, "gib"));
                ops::memory::pool_roundtrip(f32s(&ins[0]), o)
            }
            (id, _) => return Err(unsupported(format!("kernel {id:?} with this output kind"))),
        }
        Ok(())
    }
}

/// Ends the process the way a faulting driver does: mode 0 raises SIGSEGV,
/// anything else aborts (SIGABRT).
fn crash(mode: usize) -> ! {
    // Listing the allowlisted variables the worker sees lets tests check
    // that a run's environment overrides reach the worker.
    let mut seen: Vec<String> = std::env::vars()
        .filter(|(k, _)| crate::env::check_override(k, "").is_ok())
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    seen.sort();
    eprintln!(
        "debug_crash: crashing on purpose (mode {mode}); overrides seen: [{}]",
        seen.join(" ")
    );
    if mode == 0 {
        // SAFETY: raise() only delivers a signal to this process; SIGSEGV's
        // default action terminates it, which is the point of this kernel.
        unsafe {
            libc::signal(libc::SIGSEGV, libc::SIG_DFL);
            libc::raise(libc::SIGSEGV);
        }
    }
    std::process::abort()
}

/// Allocates and touches `gib` GiB in 64 MiB chunks, holds them all, then frees them. It uses the
/// ordinary (aborting) allocator as the kernels' buffers do, so past the worker's memory limit it
/// ends the worker the way a real over-allocation does: `memory allocation of N bytes failed`
/// and SIGABRT.
fn hoard(gib: usize) {
    const CHUNK: usize = 64 << 20;
    let chunks: Vec<Vec<u8>> = (0..gib * 16).map(|i| vec![(i as u8) | 1; CHUNK]).collect();
    std::hint::black_box(&chunks);
}

fn copy_into(dst: &mut Buffer, src: &Buffer) {
    match (dst, src) {
        (Buffer::F32(d), Buffer::F32(s)) => d.copy_from_slice(s),
        (Buffer::U32(d), Buffer::U32(s)) => d.copy_from_slice(s),
        _ => {}
    }
}

impl PreparedKernel for CpuKernel {
    fn run(&mut self) -> Result<Duration, BackendError> {
        let start = Instant::now();
        if self.mode == Mode::WithTransfers {
            for (dst, src) in self.inputs.iter_mut().zip(&self.host_inputs) {
                copy_into(dst, src);
            }
        }
        self.compute()?;
        if self.mode == Mode::WithTransfers {
            // The readback: one copy of the output into a fresh host buffer.
            std::hint::black_box(self.output.clone());
        }
        Ok(start.elapsed())
    }

    fn output(&mut self) -> Result<Buffer, BackendError> {
        Ok(self.output.clone())
    }

    fn config(&self) -> BTreeMap<String, String> {
        let mut c = BTreeMap::new();
        c.insert(
            "threads".to_string(),
            rayon::current_num_threads().to_string(),
        );
        let lib = match (self.id, self.variant.as_str()) {
            (KernelId::Gemm, "blocked") => "gemm crate (register-blocked microkernels)",
            (KernelId::Gemm, "tiled") => "gpufleet cache-tiled loops",
            (KernelId::Conv2d, "im2col") => "im2col + gemm crate",
            (KernelId::Model(_), _) => {
                "layer by layer: im2col + gemm crate, direct depthwise and pooling"
            }
            _ => "gpufleet loops",
        };
        c.insert("implementation".to_string(), lib.to_string());
        // Only the gemm crate's microkernels have an AVX-512 copy; the other hot loops top out at
        // AVX2+FMA (see `ops`).
        let isa = match (self.id, self.variant.as_str()) {
            (KernelId::Gemm, "blocked")
            | (KernelId::Conv2d, "im2col")
            | (KernelId::Model(_), _) => ops::Isa::active(),
            _ => ops::Isa::active().min(ops::Isa::Avx2Fma),
        };
        c.insert("isa".to_string(), isa.name().to_string());
        c
    }
}
