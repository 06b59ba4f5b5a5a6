//! GEMM (naive, tiled, blocked) and conv2d (direct, im2col over the blocked
//! GEMM) planners.

use super::args::{flat_group, ints, options};
use super::tuning::{default_gemm_tuning, gemm_candidates, tuning_error};
use super::types::{
    Arg, DeviceCaps, GemmTuning, Launch, Plan, Planned, Program, Storage, Unsupported,
};
use crate::backend::config;
use crate::backend::planning::{self, Im2col, dims, exact_tiles, round_up, tile_config};
use gpufleet_kernels::sources::opencl as cl;
use gpufleet_kernels::{Dtype, Problem};

/// Bytes of im2col column matrices held at once; the batch is processed in chunks that fit.
const IM2COL_SCRATCH_BYTES: usize = 256 << 20;

/// `gemm_blocked` for one device and shape: the tuning, the vector width that is safe for the
/// shape, and whether the shape is a whole number of tiles.
struct Blocked {
    tuning: GemmTuning,
    /// Effective width of global loads: f32 vectors must stay aligned, so 4 (or 2) only when
    /// `k`, `n` and with them every row and batch offset are multiples of it; vload_half needs
    /// no alignment.
    vector: u32,
    exact: bool,
}

impl Blocked {
    fn new(
        caps: &DeviceCaps,
        tuning: GemmTuning,
        half: bool,
        (m, n, k): (usize, usize, usize),
    ) -> Result<Blocked, Unsupported> {
        if let Some(why) = tuning_error(&tuning, caps) {
            return Err(Unsupported(format!(
                "gemm tuning {tuning:?} cannot run on this device: {why}"
            )));
        }
        let vector = if half {
            tuning.vector
        } else {
            [4, 2, 1]
                .into_iter()
                .find(|&v| {
                    v <= tuning.vector
                        && k.is_multiple_of(v as usize)
                        && n.is_multiple_of(v as usize)
                })
                .unwrap_or(1)
        };
        let exact = exact_tiles(&tuning, m, n, k);
        Ok(Blocked {
            tuning,
            vector,
            exact,
        })
    }

    fn defines(&self) -> Vec<(&'static str, String)> {
        let t = &self.tuning;
        let mut d = vec![
            ("GPUFLEET_TILE_M", t.tile_m.to_string()),
            ("GPUFLEET_TILE_N", t.tile_n.to_string()),
            ("GPUFLEET_TILE_K", t.tile_k.to_string()),
            ("GPUFLEET_WORK_M", t.work_m.to_string()),
            ("GPUFLEET_WORK_N", t.work_n.to_string()),
            ("GPUFLEET_VEC", self.vector.to_string()),
        ];
        if self.exact {
            d.push(("GPUFLEET_EXACT", String::new()));
        }
        d
    }

    /// Global and local sizes covering an m×n product, `batch` products deep.
    fn geometry(&self, m: usize, n: usize, batch: usize) -> (Vec<usize>, Vec<usize>) {
        let t = &self.tuning;
        let (tpm, tpn) = (
            (t.tile_m / t.work_m) as usize,
            (t.tile_n / t.work_n) as usize,
        );
        let global = vec![
            n.div_ceil(t.tile_n as usize) * tpn,
            m.div_ceil(t.tile_m as usize) * tpm,
        ];
        let local = vec![tpn, tpm];
        if batch == 1 {
            (global, local)
        } else {
            ([global, vec![batch]].concat(), [local, vec![1]].concat())
        }
    }

    fn config(&self) -> Vec<(&'static str, String)> {
        let vector = ("vector", self.vector.to_string());
        tile_config(
            &self.tuning,
            [vector, ("exact_tiles", self.exact.to_string())],
        )
    }
}

/// Side of `gemm_naive`'s work-group and `gemm_tiled`'s tile: 16, or less on small devices.
fn square_side(caps: &DeviceCaps) -> usize {
    planning::square_side(|side| {
        side * side <= caps.max_work_group_size
            && (2 * side * (side + 1) * 4) as u64 <= caps.local_mem_bytes
    })
}

pub(super) fn plan_gemm(
    problem: &Problem,
    caps: &DeviceCaps,
    tuning: Option<&GemmTuning>,
) -> Result<Plan, Unsupported> {
    let (m, n, k) = planning::gemm_dims(problem);
    let half = problem.dtype == Dtype::F16;
    let tuning = tuning.copied().unwrap_or_else(|| default_gemm_tuning(caps));
    let blocked = Blocked::new(caps, tuning, half, (m, n, k))?;
    let side = square_side(caps);
    let mut defines = blocked.defines();
    defines.push(("GPUFLEET_TS", side.to_string()));
    if half {
        defines.push(("GPUFLEET_HALF", String::new()));
    }
    let (kernel, global, local, mut cfg) = match problem.variant.as_str() {
        "naive" => (
            "gemm_naive",
            vec![round_up(n, side), round_up(m, side)],
            vec![side, side],
            vec![],
        ),
        "tiled" => (
            "gemm_tiled",
            vec![round_up(n, side), round_up(m, side)],
            vec![side, side],
            vec![("tile", side.to_string())],
        ),
        _ => {
            let (g, l) = blocked.geometry(m, n, 1);
            ("gemm_blocked", g, l, blocked.config())
        }
    };
    let mut args = vec![Arg::Input(0), Arg::Input(1), Arg::Output];
    args.extend(ints(problem, &planning::gemm_args(m, n, k))?);
    let storage = if half { Storage::F16 } else { Storage::F32 };
    cfg.extend([
        ("kernel", kernel.to_string()),
        ("global", dims(&global)),
        ("local", dims(&local)),
    ]);
    Ok(Plan {
        program: Program::new(("gemm.cl", cl::GEMM), options(caps, &defines)),
        input_storage: vec![storage; 2],
        output_storage: storage,
        scratch_bytes: Vec::new(),
        launches: vec![Launch {
            kernel: kernel.into(),
            global,
            local: Some(local),
            args,
        }],
        config: config(&cfg),
    })
}

pub(super) fn plan_conv_direct(problem: &Problem, caps: &DeviceCaps) -> Result<Plan, Unsupported> {
    let s = problem.conv_shape();
    let group = flat_group(caps);
    let total = s.batch * s.filters * s.out_h * s.out_w;
    let global = round_up(total, group);
    let mut args = vec![Arg::Input(0), Arg::Input(1), Arg::Output];
    args.extend(ints(problem, &planning::conv_direct_args(&s))?);
    let defines = [("GPUFLEET_KSIZE", s.ksize.to_string())];
    let launch = Launch {
        kernel: "conv2d_direct".into(),
        global: vec![global],
        local: Some(vec![group]),
        args,
    };
    Ok(Plan::one_launch(
        Program::new(("conv.cl", cl::CONV), options(caps, &defines)),
        2,
        launch,
        config(&[
            ("kernel", "conv2d_direct".into()),
            ("global", global.to_string()),
            ("local", group.to_string()),
        ]),
    ))
}

/// conv2d `im2col` as [`Im2col`] chunks it: per chunk of images one `im2col` launch into scratch 0,
/// then one `gemm_blocked` launch batched over the chunk along dimension 2.
pub(super) fn plan_conv_im2col(
    p: &Problem,
    caps: &DeviceCaps,
    tuning: Option<&GemmTuning>,
) -> Planned {
    let s = p.conv_shape();
    let im = Im2col::new(&s, IM2COL_SCRATCH_BYTES);
    // The GEMM's batch strides are int arguments.
    ints(p, &im.gemm_args(0))?;
    let tuning = planning::im2col_tuning(tuning, gemm_candidates(caps), s.filters, || {
        default_gemm_tuning(caps)
    });
    let blocked = Blocked::new(caps, tuning, false, (s.filters, im.plane, im.ckk))?;
    let group = flat_group(caps);
    let mut launches = Vec::new();
    for (first, count) in im.chunks() {
        let mut args = vec![Arg::Input(0), Arg::Scratch(0)];
        args.extend(ints(p, &im.unfold_args(first, count))?);
        launches.push(Launch {
            kernel: "im2col".into(),
            global: vec![round_up(count * im.per_image, group)],
            local: Some(vec![group]),
            args,
        });
        let (global, local) = blocked.geometry(s.filters, im.plane, count);
        let mut args = vec![Arg::Input(1), Arg::Scratch(0), Arg::Output];
        args.extend(ints(p, &im.gemm_args(first))?);
        launches.push(Launch {
            kernel: "gemm_blocked".into(),
            global,
            local: Some(local),
            args,
        });
    }
    let mut defines = blocked.defines();
    defines.push(("GPUFLEET_KSIZE", s.ksize.to_string()));
    let mut cfg = blocked.config();
    cfg.extend([
        ("kernel", "im2col + gemm_blocked".to_string()),
        ("images_per_chunk", im.chunk.to_string()),
    ]);
    Ok(Plan {
        program: Program {
            name: "gemm.cl+conv.cl".into(),
            source: format!("{}\n{}", cl::GEMM, cl::CONV),
            options: options(caps, &defines),
        },
        input_storage: vec![Storage::F32; 2],
        output_storage: Storage::F32,
        scratch_bytes: vec![im.scratch_bytes()],
        launches,
        config: config(&cfg),
    })
}
