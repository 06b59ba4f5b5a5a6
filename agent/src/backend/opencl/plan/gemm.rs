//! GEMM (naive, tiled, blocked) and conv2d (direct, im2col over the blocked
//! GEMM) planners.

use super::*;
use gpufleet_kernels::ConvShape;

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
        let t = &tuning;
        let exact = m.is_multiple_of(t.tile_m as usize)
            && n.is_multiple_of(t.tile_n as usize)
            && k.is_multiple_of(t.tile_k as usize);
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
        let t = &self.tuning;
        vec![
            ("tile_m", t.tile_m.to_string()),
            ("tile_n", t.tile_n.to_string()),
            ("tile_k", t.tile_k.to_string()),
            ("work_m", t.work_m.to_string()),
            ("work_n", t.work_n.to_string()),
            ("vector", self.vector.to_string()),
            ("exact_tiles", self.exact.to_string()),
        ]
    }
}

/// Side of `gemm_naive`'s work-group and `gemm_tiled`'s tile: 16, or less on small devices.
fn square_side(caps: &DeviceCaps) -> usize {
    let mut side = 16;
    while side > 1
        && (side * side > caps.max_work_group_size
            || (2 * side * (side + 1) * 4) as u64 > caps.local_mem_bytes)
    {
        side /= 2;
    }
    side
}

pub(super) fn plan_gemm(
    problem: &Problem,
    caps: &DeviceCaps,
    tuning: Option<&GemmTuning>,
) -> Result<Plan, Unsupported> {
    let (m, n, k) = (
        param(problem, "m"),
        param(problem, "n"),
        param(problem, "k"),
    );
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
    let args = vec![
        Arg::Input(0),
        Arg::Input(1),
        Arg::Output,
        int(problem, "m", m)?,
        int(problem, "n", n)?,
        int(problem, "k", k)?,
        Arg::Int(0),
        Arg::Int(0),
        Arg::Int(0),
        Arg::Int(0),
    ];
    let storage = if half { Storage::F16 } else { Storage::F32 };
    cfg.extend([
        ("kernel", kernel.to_string()),
        ("global", dims(&global)),
        ("local", dims(&local)),
    ]);
    Ok(Plan {
        program: "gemm.cl".into(),
        source: cl::GEMM.into(),
        options: options(caps, &defines),
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

/// The `int` arguments describing the input and the window, from `channels` on.
fn conv_args(
    s: &ConvShape,
    problem: &Problem,
    with_filters: bool,
) -> Result<Vec<Arg>, Unsupported> {
    let mut args = vec![
        int(problem, "channels", s.channels)?,
        int(problem, "height", s.height)?,
        int(problem, "width", s.width)?,
    ];
    if with_filters {
        args.push(int(problem, "filters", s.filters)?);
    }
    args.extend([
        int(problem, "stride", s.stride)?,
        int(problem, "pad", s.pad)?,
        int(problem, "out_h", s.out_h)?,
        int(problem, "out_w", s.out_w)?,
    ]);
    Ok(args)
}

pub(super) fn plan_conv_direct(problem: &Problem, caps: &DeviceCaps) -> Result<Plan, Unsupported> {
    let s = problem.conv_shape();
    let group = flat_group(caps);
    let total = s.batch * s.filters * s.out_h * s.out_w;
    let global = round_up(total, group);
    let mut args = vec![
        Arg::Input(0),
        Arg::Input(1),
        Arg::Output,
        int(problem, "batch", s.batch)?,
    ];
    args.extend(conv_args(&s, problem, true)?);
    let defines = [("GPUFLEET_KSIZE", s.ksize.to_string())];
    Ok(Plan {
        program: "conv.cl".into(),
        source: cl::CONV.into(),
        options: options(caps, &defines),
        input_storage: vec![Storage::F32; 2],
        output_storage: Storage::F32,
        scratch_bytes: Vec::new(),
        launches: vec![Launch {
            kernel: "conv2d_direct".into(),
            global: vec![global],
            local: Some(vec![group]),
            args,
        }],
        config: config(&[
            ("kernel", "conv2d_direct".into()),
            ("global", global.to_string()),
            ("local", group.to_string()),
        ]),
    })
}

/// im2col into scratch, then `gemm_blocked` of the weights (filters × channels·k²) with each
/// image's column matrix (channels·k² × out_h·out_w), whose product is that image's NCHW output.
/// Images go in chunks whose column matrices fit [`IM2COL_SCRATCH_BYTES`]; each chunk is one
/// im2col launch and one batched GEMM launch.
pub(super) fn plan_conv_im2col(
    problem: &Problem,
    caps: &DeviceCaps,
    tuning: Option<&GemmTuning>,
) -> Result<Plan, Unsupported> {
    let s = problem.conv_shape();
    let (ckk, plane) = (s.channels * s.ksize * s.ksize, s.out_h * s.out_w);
    let per_image = ckk * plane;
    // The GEMM's batch strides are int arguments.
    int(problem, "channels·ksize²·out_h·out_w", per_image)?;
    int(problem, "filters·out_h·out_w", s.filters * plane)?;
    let tuning = match tuning {
        Some(t) => *t,
        // Few filters make a short GEMM: the first candidate whose tile is not mostly padding.
        None => gemm_candidates(caps)
            .into_iter()
            .find(|t| t.tile_m as usize <= s.filters.next_power_of_two().max(16))
            .unwrap_or_else(|| default_gemm_tuning(caps)),
    };
    let blocked = Blocked::new(caps, tuning, false, (s.filters, plane, ckk))?;
    let chunk = (IM2COL_SCRATCH_BYTES / (per_image * 4).max(1)).clamp(1, s.batch.max(1));
    let group = flat_group(caps);
    let mut launches = Vec::new();
    for first in (0..s.batch).step_by(chunk) {
        let count = chunk.min(s.batch - first);
        let mut args = vec![
            Arg::Input(0),
            Arg::Scratch(0),
            int(problem, "first image", first)?,
            int(problem, "images per chunk", count)?,
        ];
        args.extend(conv_args(&s, problem, false)?);
        launches.push(Launch {
            kernel: "im2col".into(),
            global: vec![round_up(count * per_image, group)],
            local: Some(vec![group]),
            args,
        });
        let (global, local) = blocked.geometry(s.filters, plane, count);
        launches.push(Launch {
            kernel: "gemm_blocked".into(),
            global,
            local: Some(local),
            args: vec![
                Arg::Input(1),
                Arg::Scratch(0),
                Arg::Output,
                int(problem, "filters", s.filters)?,
                int(problem, "out_h·out_w", plane)?,
                int(problem, "channels·ksize²", ckk)?,
                Arg::Int(0),
                int(problem, "channels·ksize²·out_h·out_w", per_image)?,
                int(problem, "filters·out_h·out_w", s.filters * plane)?,
                int(problem, "first image", first)?,
            ],
        });
    }
    let mut defines = blocked.defines();
    defines.push(("GPUFLEET_KSIZE", s.ksize.to_string()));
    let mut cfg = blocked.config();
    cfg.extend([
        ("kernel", "im2col + gemm_blocked".to_string()),
        ("images_per_chunk", chunk.to_string()),
    ]);
    Ok(Plan {
        program: "gemm.cl+conv.cl".into(),
        source: format!("{}\n{}", cl::GEMM, cl::CONV),
        options: options(caps, &defines),
        input_storage: vec![Storage::F32; 2],
        output_storage: Storage::F32,
        scratch_bytes: vec![chunk * per_image * 4],
        launches,
        config: config(&cfg),
    })
}
