//! Preparation and launch of catalog kernels on the CPU.

use super::ops;
use crate::backend::{BackendError, Mode, PreparedKernel};
use gpufleet_kernels::{Buffer, CeilingKernel, DebugKernel, HostKernel, KernelId, Problem};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Whether the CPU runs variant `variant` of kernel `id`: every variant, but compute_peak only in
/// the arithmetic types it has (no fp16).
pub fn runs_variant(id: KernelId, variant: &str) -> bool {
    match id {
        KernelId::Ceiling(CeilingKernel::ComputePeak) => ops::peak::VARIANTS.contains(&variant),
        KernelId::Gemm
        | KernelId::Conv2d
        | KernelId::Elementwise(_)
        | KernelId::Rows(_)
        | KernelId::Model(_)
        | KernelId::Llm(_)
        | KernelId::Host(_)
        | KernelId::Ceiling(CeilingKernel::Transfer | CeilingKernel::Roofline)
        | KernelId::Debug(_) => true,
    }
}

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
    /// A transformer's steps and transposed weights (`llm`, `rope`, `attention`, `swiglu`, `gemv`).
    llm: Option<ops::llm::LlmRunner>,
    /// The block format of quantized weights (`llm` and `gemv` in q8_0 / q4_0).
    format: Option<gpufleet_kernels::quant::BlockFormat>,
    /// Launches so far, warm-up included (`debug_noise` draws each one's time from its number).
    calls: u64,
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
        // Quantized weights (the catalog gives them to the transformer kernels alone); f32
        // otherwise (no f16 on the CPU).
        let quantized = problem.dtype.block_format();
        if problem.dtype == gpufleet_kernels::Dtype::F16 {
            return Err(unsupported(format!(
                "dtype {} (f32, and q8_0 / q4_0 for the transformer kernels)",
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
        if problem.id() == KernelId::Ceiling(CeilingKernel::ComputePeak)
            && problem.variant == "int8"
            && ops::peak::Int8Dot::active().is_none()
        {
            return Err(unsupported(format!(
                "variant int8 of compute_peak needs VNNI (AVX-512 VNNI or AVX-VNNI), which this \
                 CPU lacks or {} caps",
                ops::ISA_ENV
            )));
        }
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
            gpufleet_kernels::BufferKind::Packed | gpufleet_kernels::BufferKind::Half => {
                return Err(unsupported(format!(
                    "{} with a packed or half output",
                    problem.kernel.name
                )));
            }
        };
        let im2col = (problem.id() == KernelId::Conv2d && problem.variant == "im2col")
            .then(|| ops::conv::Im2col::new(&problem.conv_shape()));
        let conv = (problem.id() == KernelId::Conv2d).then(|| problem.conv_shape());
        let model = problem
            .net()
            .map(|_| ops::model::ModelRunner::new(problem.graph()));
        let llm = problem
            .llm_graph()
            .map(|g| ops::llm::LlmRunner::new(g, inputs, quantized));
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
            llm,
            format: quantized,
            calls: 0,
        })
    }

    fn compute(&mut self) -> Result<(), BackendError> {
        let p = &self.params;
        let ins = &self.inputs;
        let x: Vec<&[f32]> = ins.iter().map(f32s).collect();
        let out = match &mut self.output {
            Buffer::F32(v) => v.as_mut_slice(),
            // The pointer chase, the one kernel with a u32 output.
            Buffer::U32(v) => {
                let Some(next) = ins.first().and_then(Buffer::as_u32) else {
                    return Err(unsupported(format!("{:?} with a u32 output", self.id)));
                };
                v[0] = ops::memory::pointer_chase(next, 0, dim(p, "hops") as u64);
                return Ok(());
            }
            Buffer::Packed(_) | Buffer::Half(_) => {
                return Err(unsupported(format!(
                    "{:?} with a packed or half output",
                    self.id
                )));
            }
        };
        match self.id {
            KernelId::Gemm => {
                let (m, n, k) = (dim(p, "m"), dim(p, "n"), dim(p, "k"));
                match self.variant.as_str() {
                    "naive" => ops::gemm::gemm_naive(x[0], x[1], out, m, n, k),
                    "tiled" => ops::gemm::gemm_tiled(x[0], x[1], out, m, n, k),
                    _ => ops::gemm::gemm_blocked(x[0], x[1], out, m, n, k),
                }
            }
            KernelId::Conv2d => match (self.im2col.as_mut(), self.conv.as_ref()) {
                (Some(im2col), _) => im2col.run(x[0], x[1], out),
                (None, Some(shape)) => ops::conv::conv2d_direct(shape, x[0], x[1], out),
                (None, None) => return Err(unsupported("conv2d without its shape".into())),
            },
            KernelId::Elementwise(k) => ops::elementwise(k, &x, out),
            KernelId::Rows(k) => ops::rows::run(k, &x, out, dim(p, "rows"), dim(p, "cols")),
            KernelId::Model(_) => match self.model.as_mut() {
                Some(m) => m.run(x[0], x[1], out),
                None => return Err(unsupported("a model without its graph".into())),
            },
            KernelId::Llm(_) => match self.llm.as_ref() {
                Some(m) => m.run(&x, m.weights(ins), out),
                None => return Err(unsupported("a transformer without its graph".into())),
            },
            KernelId::Host(HostKernel::MembwCpu) => out[0] = ops::memory::sum_f64(x[0]) as f32,
            KernelId::Host(HostKernel::MemlatCpu) => {
                return Err(unsupported("memlat_cpu with an f32 output".into()));
            }
            // Host memory on both sides: a transfer is a memcpy whatever its direction.
            KernelId::Ceiling(CeilingKernel::Transfer) => out.copy_from_slice(x[0]),
            KernelId::Ceiling(CeilingKernel::Roofline) => {
                ops::peak::roofline(x[0], x[1], out, dim(p, "pairs"));
            }
            KernelId::Ceiling(CeilingKernel::ComputePeak) => {
                ops::peak::compute_peak(&self.variant, x[0], out, dim(p, "pairs")).ok_or_else(
                    || unsupported(format!("variant {} of compute_peak", self.variant)),
                )?;
            }
            KernelId::Debug(DebugKernel::Wrong) => {
                ops::elementwise(DebugKernel::Wrong.computes(), &x, out);
                // Deliberately wrong, so validation has something to catch.
                let i = out.len().min(8).saturating_sub(1);
                if let Some(v) = out.get_mut(i) {
                    *v += 1.0;
                }
            }
            KernelId::Debug(DebugKernel::Crash) => crash(dim(p, "mode")),
            KernelId::Debug(DebugKernel::Hang) => loop {
                std::thread::sleep(Duration::from_secs(3600));
            },
            KernelId::Debug(DebugKernel::Alloc) => {
                hoard(dim(p, "gib"));
                ops::elementwise(DebugKernel::Alloc.computes(), &x, out);
            }
            KernelId::Debug(DebugKernel::Noise) => {
                let factor = gpufleet_kernels::debug_noise_factor(p, self.calls);
                spin(Duration::from_secs_f64(
                    dim(p, "base_us") as f64 * 1e-6 * factor,
                ));
                // noop's result (out[0] = in[0]) by hand: the thread pool's wake-up that
                // `ops::elementwise` may pay would add tens of microseconds of its own.
                for (o, i) in out.iter_mut().zip(x[0]) {
                    *o = *i;
                }
            }
        }
        self.calls += 1;
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

/// Busy-waits for `d`: a sleep's wake-up is late by tens of microseconds, which would be noise of
/// its own; a spin is late only when the thread is preempted, as any kernel would be.
fn spin(d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        std::hint::spin_loop();
    }
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
        // What runs, and whether it reaches the gemm crate's microkernels: only those have an
        // AVX-512 copy; the other hot loops top out at AVX2+FMA (see `ops`).
        let loops = ("gpufleet loops", false);
        let (lib, gemm_crate) = match (self.id, self.variant.as_str()) {
            (KernelId::Gemm, "blocked") => ("gemm crate (register-blocked microkernels)", true),
            (KernelId::Gemm, "tiled") => ("gpufleet cache-tiled loops", false),
            (KernelId::Gemm, _) => loops,
            (KernelId::Conv2d, "im2col") => ("im2col + gemm crate", true),
            (KernelId::Conv2d, _) => loops,
            (KernelId::Model(_), _) => (
                "layer by layer: im2col + gemm crate, direct depthwise and pooling",
                true,
            ),
            (KernelId::Llm(_), _) => (
                "step by step: gemm crate for many-row projections, gpufleet loops for the rest",
                true,
            ),
            (KernelId::Ceiling(CeilingKernel::Transfer), _) => {
                ("memcpy (host memory on both sides, pinned or not)", false)
            }
            (
                KernelId::Elementwise(_)
                | KernelId::Rows(_)
                | KernelId::Host(_)
                | KernelId::Ceiling(_)
                | KernelId::Debug(_),
                _,
            ) => loops,
        };
        c.insert("implementation".to_string(), lib.to_string());
        let isa = if gemm_crate {
            ops::Isa::active()
        } else {
            ops::Isa::active().min(ops::Isa::Avx2Fma)
        };
        let int8 = (self.id == KernelId::Ceiling(CeilingKernel::ComputePeak)
            && self.variant == "int8")
            .then(ops::peak::Int8Dot::active)
            .flatten();
        let isa = int8.map_or(isa.name(), ops::peak::Int8Dot::name);
        c.insert("isa".to_string(), isa.to_string());
        if let Some(note) = self.format.and_then(ops::quant::rows_note) {
            c.insert("quant_rows".to_string(), note);
        }
        c
    }
}
