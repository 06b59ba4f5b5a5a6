//! A run's host memory: the model of a worker's peak, the admission against what the host can
//! give now, and the limit the worker then runs under. Pure: the host's state comes in as a
//! [`HostMemory`] reading.
//!
//! # The peak model and how it was calibrated
//! A worker holds more than the problem's buffers ([`Problem::footprint_bytes`]): the seeded
//! inputs, the backend's copies of them, the output and its readback. Host buffers are f32/u32
//! (4 bytes an element, whatever the dtype stored on the device) but a transformer's weights
//! (below). With `H` the host bytes of inputs and output, `I` those of the inputs alone and `F`
//! the footprint:
//!
//! - **cpu**: `64 MiB + 2·H (+ I with transfers) + the im2col workspace`. The kernel works on
//!   copies of the inputs and the validation gets a copy of the output (2·H); with transfers the
//!   untouched host inputs stay too (I). Validation never holds an f64 copy: it computes the
//!   reference element by element, sampled above 2e8 operations.
//! - **opencl, vulkan, hip**: `384 MiB + 3·H`, plus `F` and the im2col workspace when the
//!   device's memory is host memory (a `cpu` or `integrated_gpu` device: PoCL, lavapipe, APUs).
//!   The 3·H are the inputs, their upload copy (staging buffers, byte conversions) and the
//!   readback with its conversion.
//! - **A transformer's weights as the device stores them**: quantized (`llm`, `gemv` in q8_0 /
//!   q4_0) the catalog draws them straight into their packed bytes `P` (a sixth to a quarter of
//!   the f32 weights `W`; [`Problem::packed_input`]), in f16 into half words (`W/2`,
//!   [`Problem::half_input`]), and the uploads read them in place; either counts in `H` at those
//!   bytes. On a discrete GPU three times like every input (generous): measured on an H100 (`8b`
//!   decode, 2026-12-07), NVIDIA's OpenCL held `1·P`, Vulkan `2·P` + up to 4 GiB (the input, its
//!   staging, and a copy of each segment that 1966f30 removed; not re-measured since). Where the
//!   device's memory is host memory **once**, beside `F` (PoCL and lavapipe keep no other copy):
//!   PoCL `small` q4_0 390 MiB; `1b` f16 4,834 MiB (2026-12-08, Zen 5; 9,535 while the weights
//!   were drawn as f32 and converted). The cpu backend's
//!   transposed f32 matrices (projections over 16 rows or more, prefill; dequantized first when
//!   packed): `W` more.
//!
//! Measured as the worker's `ru_maxrss` (VmHWM) when a fresh worker process is fed one job
//! (warm-up 1, 3 iterations, validated; `bench/worker_peak.py` makes that measurement), on a 2-core AMD EPYC with 24 GiB, PoCL 3.1 and lavapipe
//! (Mesa 22.3): the `CALIBRATION` table in the tests below keeps every measurement and checks the
//! model against it. cpu: an empty worker peaks at 11 MiB, every kernel at that plus 2·H (and I
//! with transfers, and im2col's workspace) within 3%: vec_add n=2^26 at 1542 MiB for 11 + 1536.
//! GPU backends: an empty worker peaks at 67 MiB (lavapipe) and 84 MiB (PoCL), PoCL building
//! gemm at 279 MiB; the variable part is 2.0–2.6·H + F on both (softmax the most), so 3·H leaves
//! room.
//! Discrete GPUs were not measured: their device memory is not counted (it is not host memory)
//! and their drivers' own host memory is what the 384 MiB base is for.
//!
//! # The worker's limit
//! A run is admitted when its estimate fits [`HostMemory::allowance`]; the worker is then limited
//! to the estimate plus a headroom of a quarter (at least 1 GiB), never above the allowance, so a
//! model that is wrong ends one worker as `out_of_memory` instead of waking the OOM killer.

use crate::backend::cpu::ops::llm::GEMM_ROWS;
use crate::backend::{DeviceInfo, Mode};
use crate::host::memory::{HostMemory, gib};
use gpufleet_kernels::{KernelId, Problem};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// What a cpu worker holds besides the problem (the binary, rayon's threads): measured 11 MiB.
pub const CPU_BASE_BYTES: u64 = 64 * MIB;
/// What a GPU backend's worker holds besides the problem (the driver, its compiler): measured
/// 67–279 MiB with lavapipe and PoCL.
pub const GPU_BASE_BYTES: u64 = 384 * MIB;
/// Least headroom a worker gets above its estimate.
pub const MIN_HEADROOM_BYTES: u64 = GIB;

/// A run's host memory as admitted: the estimate and the limit its worker runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerMemory {
    /// [`host_peak_bytes`] of the run.
    pub estimate: u64,
    /// The worker's limit ([`limit_for`]); `None` when limits are turned off.
    pub limit: Option<u64>,
}

impl WorkerMemory {
    /// `a memory limit of 1.1 GiB (RLIMIT_DATA) for an estimated peak of 0.1 GiB`, for
    /// results' messages.
    pub fn describe(&self) -> String {
        match self.limit {
            Some(l) => format!(
                "a memory limit of {} (RLIMIT_DATA) for an estimated peak of {}",
                gib(l),
                gib(self.estimate)
            ),
            None => format!("no memory limit (estimated peak {})", gib(self.estimate)),
        }
    }
}

// The refusal `admit` raises lives with the host's memory, below the agent's error enum that
// wraps it.
use crate::host::memory::HostMemoryShortage;

/// Host bytes of the inputs and of the output: 4 bytes an element (host buffers are f32/u32), the
/// packed weights at their bytes, half weights at 2 bytes an element; and of those inputs, the
/// bytes held as a device stores them (packed or half weights), which an upload reads in place.
fn host_buffer_bytes(problem: &Problem) -> (u64, u64, u64) {
    let packed = problem.packed_input();
    let half = problem.half_input();
    let (mut inputs, mut as_stored) = (0, 0);
    for (i, &l) in problem.input_lens().iter().enumerate() {
        let stored = match packed {
            Some((at, bytes)) if at == i => Some(bytes),
            _ => (half == Some(i)).then_some(l as u64 * 2),
        };
        match stored {
            Some(bytes) => {
                inputs += bytes;
                as_stored += bytes;
            }
            None => inputs += l as u64 * 4,
        }
    }
    (inputs, problem.output_len() as u64 * 4, as_stored)
}

/// The im2col workspace of one image (conv2d `im2col`), 0 for anything else.
fn im2col_bytes(problem: &Problem) -> u64 {
    if problem.id() != KernelId::Conv2d || problem.variant != "im2col" {
        return 0;
    }
    let c = problem.conv_shape();
    (c.channels * c.ksize * c.ksize * c.out_h * c.out_w) as u64 * 4
}

/// Whether the device's buffers live in host memory (a software device, an APU).
pub fn device_memory_is_host(device: &DeviceInfo) -> bool {
    matches!(device.device_type.as_str(), "cpu" | "integrated_gpu")
}

/// The worker's estimated peak of host memory (resident) for `problem` on `device` in `mode`;
/// see this module for the model and its calibration.
pub fn host_peak_bytes(problem: &Problem, device: &DeviceInfo, mode: Mode) -> u64 {
    let (inputs, output, as_stored) = host_buffer_bytes(problem);
    let host = inputs + output;
    if device.backend == "cpu" {
        let kept_inputs = if mode == Mode::WithTransfers {
            inputs
        } else {
            0
        };
        return CPU_BASE_BYTES
            + 2 * host
            + kept_inputs
            + im2col_bytes(problem)
            + transposed_bytes(problem);
    }
    let on_host = if device_memory_is_host(device) {
        problem.footprint_bytes() + im2col_bytes(problem)
    } else {
        0
    };
    // Weights held as the device stores them are uploaded in place: on a device whose memory is
    // host memory nothing holds them but the input and the device's buffer (in `F`).
    let stored_copies = if device_memory_is_host(device) { 1 } else { 3 };
    GPU_BASE_BYTES + 3 * (host - as_stored) + stored_copies * as_stored + on_host
}

/// The host bytes of a model's f32 weights input (`llm`, `gemv`: the second input, after the
/// tokens or the input rows), `None` for kernels whose inputs are not a model's weights.
fn f32_weight_bytes(problem: &Problem) -> Option<u64> {
    problem.weight_bytes()?;
    Some(4 * *problem.input_lens().get(1)? as u64)
}

/// The cpu backend's f32 copies of a model's matrices, transposed (dequantized first when packed)
/// for projections over [`GEMM_ROWS`] rows or more: at most every weight once.
fn transposed_bytes(problem: &Problem) -> u64 {
    let Some(weights) = f32_weight_bytes(problem) else {
        return 0;
    };
    let batch = problem.param("batch").max(1);
    let rows = if problem.variant == "prefill" {
        batch * problem.param("prompt").max(1)
    } else {
        batch
    };
    if usize::try_from(rows).unwrap_or(usize::MAX) < GEMM_ROWS {
        return 0;
    }
    weights
}

/// The limit a worker with `estimate` gets under `allowance` (when the host's memory is known):
/// the estimate plus a quarter, at least [`MIN_HEADROOM_BYTES`], capped at the allowance.
pub fn limit_for(estimate: u64, allowance: Option<u64>) -> u64 {
    let wanted = estimate.saturating_add((estimate / 4).max(MIN_HEADROOM_BYTES));
    allowance.map_or(wanted, |a| wanted.min(a))
}

/// Admits a run whose worker peaks at `estimate` bytes when it fits what `host` can give now.
/// `limited` says whether its worker gets a limit. A host whose memory cannot be read admits
/// everything, with a limit from the estimate alone.
///
/// # Errors
/// [`HostMemoryShortage`] naming `what`, the estimate and the allowance.
pub fn admit(
    what: impl FnOnce() -> String,
    estimate: u64,
    host: &HostMemory,
    limited: bool,
) -> Result<WorkerMemory, HostMemoryShortage> {
    let allowance = host.allowance();
    if let Some(available) = allowance
        && estimate > available
    {
        return Err(HostMemoryShortage {
            what: what(),
            needed: estimate,
            available,
            why: host.explain(),
        });
    }
    Ok(WorkerMemory {
        estimate,
        limit: limited.then(|| limit_for(estimate, allowance)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::planning::testing;
    use crate::host::memory::CgroupLimit;

    fn problem(kernel: &str, params: &[(&str, i64)]) -> Problem {
        testing::problem(kernel, "", params, "f32")
    }

    fn device(backend: &str, device_type: &str) -> DeviceInfo {
        DeviceInfo {
            backend: backend.into(),
            device_type: device_type.into(),
            ..Default::default()
        }
    }

    /// Peaks measured as the module describes: `backend kernel mode params`, MiB of `ru_maxrss`.
    /// Modes: `c` compute only, `t` with transfers.
    const CALIBRATION: &[(&str, f64)] = &[
        ("cpu noop c", 11.4),
        ("cpu vec_add c n=16777216", 389.8),
        ("cpu vec_add c n=67108864", 1541.8),
        ("cpu vec_add t n=67108864", 2054.0),
        ("cpu copy t n=67108864", 1285.7),
        ("cpu gemm c m=2048 n=2048 k=2048", 104.7),
        ("cpu softmax c rows=16384 cols=4096", 1030.1),
        ("cpu membw_cpu c n=134217728", 1029.7),
        ("cpu memlat_cpu c size_kib=262144 hops=1000", 517.9),
        (
            "cpu conv2d c batch=8 channels=64 height=128 width=128 filters=64",
            172.0,
        ),
        ("opencl noop c", 84.2),
        ("opencl vec_add c n=16777216", 653.6),
        ("opencl vec_add c n=67108864", 2381.6),
        ("opencl vec_add t n=67108864", 2381.8),
        ("opencl softmax c rows=8192 cols=4096", 1003.5),
        ("opencl gemm c m=1024 n=1024 k=1024", 279.4),
        ("opencl copy t n=33554432", 845.6),
        (
            "opencl conv2d c batch=4 channels=64 height=128 width=128 filters=64",
            479.8,
        ),
        ("vulkan noop c", 66.6),
        ("vulkan vec_add c n=16777216", 708.6),
        ("vulkan vec_add c n=33554432", 1348.5),
        ("vulkan vec_add t n=33554432", 1348.4),
        ("vulkan softmax c rows=8192 cols=4096", 984.4),
        ("vulkan gemm c m=1024 n=1024 k=1024", 118.6),
        ("vulkan copy t n=33554432", 964.0),
        (
            "vulkan conv2d c batch=4 channels=64 height=128 width=128 filters=64",
            298.2,
        ),
    ];

    #[test]
    fn the_model_covers_every_measured_peak_without_gross_excess() {
        for &(case, measured_mib) in CALIBRATION {
            let words: Vec<&str> = case.split_whitespace().collect();
            let (backend, kernel) = (words[0], words[1]);
            let mode = if words[2] == "t" {
                Mode::WithTransfers
            } else {
                Mode::ComputeOnly
            };
            let params: Vec<(&str, i64)> = words[3..]
                .iter()
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap();
                    (k, v.parse().unwrap())
                })
                .collect();
            // PoCL and lavapipe report themselves as `cpu` devices.
            let est = host_peak_bytes(&problem(kernel, &params), &device(backend, "cpu"), mode);
            assert_covers(case, backend, est, measured_mib);
        }
    }

    /// The estimate `est` of `case` on `backend` covers the measured peak, by no more than 40 %
    /// and the backend's base.
    fn assert_covers(case: &str, backend: &str, est: u64, measured_mib: f64) {
        let est_mib = est as f64 / MIB as f64;
        let base = if backend == "cpu" {
            CPU_BASE_BYTES
        } else {
            GPU_BASE_BYTES
        } as f64
            / MIB as f64;
        assert!(
            est_mib >= measured_mib,
            "{case}: estimate {est_mib:.0} MiB below the measured {measured_mib} MiB"
        );
        assert!(
            est_mib <= measured_mib * 1.4 + base,
            "{case}: estimate {est_mib:.0} MiB far above the measured {measured_mib} MiB"
        );
    }

    /// Transformer peaks measured the same way (`small`, 100 M weights: 382 MiB in f32, 54 MiB in
    /// q4_0, 101 MiB in q8_0; lavapipe from Mesa 22.3, PoCL 3.1): `backend dtype variant`, MiB.
    /// Decode is gen 2, prefill a 64-token prompt. f32 on a 2-core Intel Xeon with 24 GiB; the
    /// quantized rows on a 2-core AMD EPYC (Zen 4) with 24 GiB, since the weights are drawn packed
    /// (the f32 rows there again: 784 and 1,600 MiB); the f16 rows on a 2-core AMD EPYC (Zen 5)
    /// since the weights are drawn as half words (before: opencl 859, vulkan 1,027 MiB).
    const LLM_CALIBRATION: &[(&str, f64)] = &[
        ("cpu f32 decode", 783.3),
        ("cpu q4_0 decode", 117.0),
        ("cpu q8_0 decode", 213.0),
        ("cpu f32 prefill", 1088.1),
        ("cpu q4_0 prefill", 468.0),
        ("vulkan f32 decode", 1599.2),
        ("vulkan q4_0 decode", 280.0),
        ("vulkan q4_0 prefill", 280.0),
        ("opencl q4_0 decode", 390.0),
        ("opencl q8_0 decode", 534.0),
        ("opencl f16 decode", 483.0),
        ("vulkan f16 decode", 651.0),
    ];

    #[test]
    fn packed_weights_count_as_packed_and_cpu_prefill_counts_its_transposed_copies() {
        for &(case, measured_mib) in LLM_CALIBRATION {
            let words: Vec<&str> = case.split_whitespace().collect();
            let (backend, dtype, variant) = (words[0], words[1], words[2]);
            let shape: &[(&str, i64)] = if variant == "prefill" {
                &[("model", 1), ("prompt", 64)]
            } else {
                &[("model", 1), ("gen", 2)]
            };
            let p = testing::problem("llm", variant, shape, dtype);
            let est = host_peak_bytes(&p, &device(backend, "cpu"), Mode::ComputeOnly);
            assert_covers(case, backend, est, measured_mib);
        }
        // An 8B model in q4_0 on a discrete GPU: its blocks three times and small buffers, never
        // its f32 weights (32 GB, which no 16 GB host of an RX 580 could give). Measured on an
        // H100 (gen 32, 2026-12-07): NVIDIA's OpenCL 4.5 GiB, Vulkan 11.6 GiB (before 1966f30).
        let p = testing::problem("llm", "decode", &[("model", 3), ("gen", 32)], "q4_0");
        let est = host_peak_bytes(&p, &device("opencl", "discrete_gpu"), Mode::ComputeOnly);
        let packed = p.packed_input().expect("packed weights").1;
        assert!(packed < 5 * GIB, "{packed} bytes packed");
        assert!(est as f64 >= 11.6 * GIB as f64, "{} GiB", est / GIB);
        assert!(est < 3 * packed + GPU_BASE_BYTES + GIB, "{} GiB", est / GIB);
        // In f16 its half words three times (16 GB each), not its f32 weights three times (the
        // 45 GiB measured on that H100 were the f32 weights and their conversion).
        let p = testing::problem("llm", "decode", &[("model", 3), ("gen", 32)], "f16");
        let est = host_peak_bytes(&p, &device("vulkan", "discrete_gpu"), Mode::ComputeOnly);
        let half = 2 * p.input_lens()[1] as u64;
        assert!(
            est >= 3 * half && est < 3 * half + GPU_BASE_BYTES + GIB,
            "{} GiB",
            est / GIB
        );
        // On PoCL or lavapipe the half words once beside the device's buffers (`F`): `1b` f16 on
        // PoCL measured 4,834 MiB (2026-12-08).
        let p = testing::problem("llm", "decode", &[("model", 2), ("gen", 2)], "f16");
        let est = host_peak_bytes(&p, &device("opencl", "cpu"), Mode::ComputeOnly);
        assert_covers("opencl f16 decode 1b", "opencl", est, 4834.0);
    }

    #[test]
    fn discrete_gpus_count_host_copies_only() {
        let p = problem("vec_add", &[("n", 1 << 28)]);
        let discrete = host_peak_bytes(&p, &device("vulkan", "discrete_gpu"), Mode::ComputeOnly);
        let software = host_peak_bytes(&p, &device("vulkan", "cpu"), Mode::ComputeOnly);
        assert_eq!(discrete, GPU_BASE_BYTES + 9 * GIB);
        assert_eq!(software, discrete + 3 * GIB);
    }

    #[test]
    fn the_probe_vec_add_needs_24_gib_on_the_cpu() {
        let p = problem("vec_add", &[("n", 1 << 30)]);
        let est = host_peak_bytes(&p, &device("cpu", "cpu"), Mode::ComputeOnly);
        assert_eq!(est, CPU_BASE_BYTES + 24 * GIB);
        // debug_alloc claims nothing of its `gib`, so its worker's limit stops it.
        let alloc = problem("debug_alloc", &[("gib", 1024)]);
        let est = host_peak_bytes(&alloc, &device("cpu", "cpu"), Mode::ComputeOnly);
        assert_eq!(est, CPU_BASE_BYTES + 16);
    }

    #[test]
    fn admission_refuses_what_does_not_fit_and_limits_what_does() {
        let host = HostMemory {
            total: 24 * GIB,
            available: 22 * GIB,
            cgroup: None,
        };
        let allowance = host.allowance().unwrap();
        let err = admit(|| "vec_add on cpu:0".into(), 24 * GIB, &host, true).unwrap_err();
        assert_eq!((err.needed, err.available), (24 * GIB, allowance));
        let msg = err.to_string();
        assert!(
            msg.contains("needs about 24.0 GiB")
                && msg.contains("19.6 GiB")
                && msg.contains("MemAvailable"),
            "{msg}"
        );
        let small = admit(String::new, 64 * MIB, &host, true).unwrap();
        assert_eq!(small.limit, Some(64 * MIB + GIB));
        assert!(
            small.describe().contains("memory limit of 1.1 GiB"),
            "{}",
            small.describe()
        );
        let big = admit(String::new, 16 * GIB, &host, true).unwrap();
        assert_eq!(big.limit, Some(allowance), "capped at the allowance");
        assert_eq!(
            admit(String::new, 16 * GIB, &host, false).unwrap().limit,
            None
        );
        let unknown = admit(String::new, 100 * GIB, &HostMemory::default(), true).unwrap();
        assert_eq!(unknown.limit, Some(125 * GIB));
        let cgroup = HostMemory {
            cgroup: Some(CgroupLimit {
                limit: 4 * GIB,
                usage: GIB,
            }),
            ..host
        };
        let err = admit(String::new, 3 * GIB, &cgroup, true).unwrap_err();
        assert!(err.to_string().contains("cgroup limit 4.0 GiB"), "{err}");
    }
}
