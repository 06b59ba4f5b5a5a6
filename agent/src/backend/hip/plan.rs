//! What to launch for each catalog kernel on a HIP device. Pure: a problem and the device's
//! capabilities in, a [`Plan`] out; `kernel.rs` executes plans without knowing any kernel.
//!
//! The code objects are compiled ahead of time, so where the OpenCL planner passes `-D`
//! parameters this one picks among the instantiations `kernels/hip/*.hip` define (named in each
//! file's header and in [`kernel_symbols`]): GEMM tile configurations, row-kernel block sizes,
//! the filter size of conv2d.

use crate::backend::storage::Elem as Storage;
use crate::backend::{config, param};
use gpufleet_kernels::{ConvShape, Dtype, KernelId, NORM_EPS, Problem, TRIAD_SCALAR};
use std::collections::BTreeMap;

/// What the planner may assume about a device.
#[derive(Debug, Clone, PartialEq)]
pub struct HipCaps {
    pub compute_units: u32,
    /// `maxThreadsPerBlock` (1024 on every AMD GPU).
    pub max_threads_per_block: u32,
    /// `sharedMemPerBlock` (64 KiB on every AMD GPU).
    pub shared_mem_per_block: u64,
}

impl Default for HipCaps {
    fn default() -> Self {
        HipCaps {
            compute_units: 64,
            max_threads_per_block: 1024,
            shared_mem_per_block: 64 * 1024,
        }
    }
}

/// One kernel argument.
#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    /// The problem's input buffer `i` (in `Problem::inputs` order).
    Input(usize),
    Output,
    /// Scratch buffer `i` of [`Plan::scratch_bytes`].
    Scratch(usize),
    Int(i32),
    Float(f32),
}

/// One hipModuleLaunchKernel.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    /// The extern "C" kernel name in the code object.
    pub kernel: String,
    /// Blocks in x, y, z.
    pub grid: [u32; 3],
    /// Work-items per block in x, y, z (the size the kernel was compiled for).
    pub block: [u32; 3],
    pub args: Vec<Arg>,
}

/// Buffers and the launches of one iteration (timed from an event before the first launch to one
/// after the last).
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub input_storage: Vec<Storage>,
    pub output_storage: Storage,
    pub scratch_bytes: Vec<usize>,
    pub launches: Vec<Launch>,
    /// The launch configuration, recorded with the result.
    pub config: BTreeMap<String, String>,
}

/// Why a plan cannot be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct Unsupported(pub String);

/// Block size of the one-dimensional kernels (element-wise, conv2d, im2col).
const FLAT: u32 = 256;
/// Blocks of a row kernel; more rows are strided over.
const ROW_GROUPS_MAX: usize = 65536;
/// Row elements a `_cached` row kernel keeps in registers per work-item.
const ROW_CHUNKS_CACHED: usize = 16;
/// From this many columns on, the row kernels use 1024 work-items.
const WIDE_ROW_COLS: usize = 8192;
/// Bytes of im2col column matrices held at once; the batch is processed in chunks that fit.
const IM2COL_SCRATCH_BYTES: usize = 256 << 20;
/// Side of gemm_naive's block and gemm_tiled's tile.
const GEMM_SIDE: u32 = 16;

/// A register-blocked GEMM instantiation of gemm.hip: tile TM×TN, k step TK, WM×WN per work-item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocked {
    pub tm: u32,
    pub tn: u32,
    pub tk: u32,
    pub wm: u32,
    pub wn: u32,
}

impl Blocked {
    fn threads(&self) -> [u32; 2] {
        [self.tn / self.wn, self.tm / self.wm]
    }
    fn symbol(&self, half: bool) -> String {
        format!(
            "gemm_blocked_{}_{}x{}x{}_{}x{}",
            if half { "f16" } else { "f32" },
            self.tm,
            self.tn,
            self.tk,
            self.wm,
            self.wn
        )
    }
}

/// The instantiations of gemm.hip, largest first.
pub const BLOCKED: [Blocked; 3] = [
    Blocked {
        tm: 128,
        tn: 128,
        tk: 8,
        wm: 8,
        wn: 8,
    },
    Blocked {
        tm: 64,
        tn: 64,
        tk: 16,
        wm: 4,
        wn: 4,
    },
    Blocked {
        tm: 32,
        tn: 32,
        tk: 16,
        wm: 4,
        wn: 4,
    },
];

/// Every kernel symbol the planner may launch; each must be in every code object (the build test
/// checks it).
pub fn kernel_symbols() -> Vec<String> {
    let mut out: Vec<String> = [
        "vec_add_f32",
        "vec_add_wrong_f32",
        "copy_f32",
        "triad_f32",
        "relu_f32",
        "sigmoid_f32",
        "tanh_f32",
        "noop_f32",
        "gemm_naive_f32",
        "gemm_naive_f16",
        "gemm_tiled_f32",
        "gemm_tiled_f16",
        "conv2d_direct_k3",
        "conv2d_direct_k5",
        "im2col_k3",
        "im2col_k5",
    ]
    .into_iter()
    .map(str::to_string)
    .collect();
    for b in BLOCKED {
        out.push(b.symbol(false));
        out.push(b.symbol(true));
    }
    for k in ["softmax", "layernorm", "rmsnorm", "layernorm_rmsnorm"] {
        for wg in [64, 256, 1024] {
            out.push(format!("{k}_rows_{wg}"));
        }
        for wg in [64, 256] {
            out.push(format!("{k}_rows_{wg}_cached"));
        }
    }
    out
}

/// Kernels/variants/dtypes the HIP backend implements: the OpenCL backend's list (every
/// non-host-only, non-debug catalog kernel with all its variants, gemm in f32 and f16, plus
/// debug_wrong).
pub fn supported() -> Vec<(&'static str, Vec<&'static str>, Vec<&'static str>)> {
    let mut out = vec![(
        "gemm",
        vec!["naive", "tiled", "blocked"],
        vec!["f32", "f16"],
    )];
    for name in [
        "vec_add",
        "copy",
        "triad",
        "noop",
        "softmax",
        "layernorm",
        "rmsnorm",
        "layernorm_rmsnorm_fused",
    ] {
        out.push((name, vec!["default"], vec!["f32"]));
    }
    out.push(("conv2d", vec!["direct", "im2col"], vec!["f32"]));
    for name in ["relu", "sigmoid", "tanh", "debug_wrong"] {
        out.push((name, vec!["default"], vec!["f32"]));
    }
    out
}

/// What to launch for `problem` on a device with `caps`.
///
/// # Errors
/// [`Unsupported`] naming the reason: a host-only or crashing kernel, a variant or dtype not
/// implemented, a size whose arguments do not fit an `int` or whose grid exceeds HIP's 2^32
/// work-items per dimension.
pub fn plan(problem: &Problem, caps: &HipCaps) -> Result<Plan, Unsupported> {
    let name = problem.kernel.name;
    crate::backend::check_listed(
        supported(),
        problem,
        "hip",
        "the HIP backend has no kernel for it",
    )
    .map_err(|m| Unsupported(m.message))?;
    if caps.max_threads_per_block < 1024 || caps.shared_mem_per_block < 32 * 1024 {
        return Err(Unsupported(format!(
            "the code objects need blocks of 1024 work-items and 32 KiB of LDS; the device \
             reports {} and {} bytes",
            caps.max_threads_per_block, caps.shared_mem_per_block
        )));
    }
    let plan = match problem.id() {
        KernelId::Gemm => plan_gemm(problem, caps)?,
        KernelId::Conv2d if problem.variant == "im2col" => plan_conv_im2col(problem, caps)?,
        KernelId::Conv2d => plan_conv_direct(problem)?,
        KernelId::Softmax
        | KernelId::LayerNorm
        | KernelId::RmsNorm
        | KernelId::LayerNormRmsNormFused => plan_rows(problem)?,
        _ => plan_elementwise(problem)?,
    };
    for l in &plan.launches {
        for d in 0..3 {
            if u64::from(l.grid[d]) * u64::from(l.block[d]) > u64::from(u32::MAX) {
                return Err(Unsupported(format!(
                    "{name}: launch of {} needs {} work-items in dimension {d}, above HIP's 2^32 - 1",
                    l.kernel,
                    u64::from(l.grid[d]) * u64::from(l.block[d])
                )));
            }
        }
    }
    Ok(plan)
}

/// `value` as an `int` kernel argument.
fn int(problem: &Problem, what: &str, value: usize) -> Result<Arg, Unsupported> {
    i32::try_from(value).map(Arg::Int).map_err(|_| {
        Unsupported(format!(
            "{what}={value} of {} exceeds the largest int kernel argument ({})",
            problem.kernel.name,
            i32::MAX
        ))
    })
}

/// Blocks covering `items` work-items in blocks of `block`.
fn blocks(problem: &Problem, what: &str, items: usize, block: u32) -> Result<u32, Unsupported> {
    u32::try_from(items.div_ceil(block as usize).max(1)).map_err(|_| {
        Unsupported(format!(
            "{what}: {items} work-items of {} exceed HIP's grid",
            problem.kernel.name
        ))
    })
}

fn plan_elementwise(problem: &Problem) -> Result<Plan, Unsupported> {
    let (kernel, inputs) = match problem.id() {
        KernelId::VecAdd => ("vec_add_f32", 2),
        KernelId::DebugWrong => ("vec_add_wrong_f32", 2),
        KernelId::Copy => ("copy_f32", 1),
        KernelId::Triad => ("triad_f32", 2),
        KernelId::Relu => ("relu_f32", 1),
        KernelId::Sigmoid => ("sigmoid_f32", 1),
        KernelId::Tanh => ("tanh_f32", 1),
        KernelId::Noop => ("noop_f32", 1),
        other => {
            return Err(Unsupported(format!(
                "kernel {other:?} has no element-wise plan"
            )));
        }
    };
    let mut args: Vec<Arg> = (0..inputs).map(Arg::Input).collect();
    args.push(Arg::Output);
    let (grid, block) = if problem.id() == KernelId::Noop {
        (1, 1)
    } else {
        let n = param(problem, "n");
        if problem.id() == KernelId::Triad {
            args.push(Arg::Float(TRIAD_SCALAR));
        }
        args.push(int(problem, "n", n)?);
        // One float4 per work-item.
        (blocks(problem, "n", n.div_ceil(4), FLAT)?, FLAT)
    };
    Ok(Plan {
        input_storage: vec![Storage::F32; inputs],
        output_storage: Storage::F32,
        scratch_bytes: Vec::new(),
        launches: vec![Launch {
            kernel: kernel.into(),
            grid: [grid, 1, 1],
            block: [block, 1, 1],
            args,
        }],
        config: config(&[
            ("kernel", kernel.into()),
            ("grid", grid.to_string()),
            ("block", block.to_string()),
        ]),
    })
}

fn plan_rows(problem: &Problem) -> Result<Plan, Unsupported> {
    let (rows, cols) = (param(problem, "rows"), param(problem, "cols"));
    let (base, inputs) = match problem.id() {
        KernelId::Softmax => ("softmax_rows", 1),
        KernelId::LayerNorm => ("layernorm_rows", 3),
        KernelId::RmsNorm => ("rmsnorm_rows", 2),
        _ => ("layernorm_rmsnorm_rows", 4),
    };
    let group: usize = if cols >= WIDE_ROW_COLS {
        1024
    } else if cols <= 64 {
        64
    } else {
        256
    };
    let cached = group <= 256 && cols <= group * ROW_CHUNKS_CACHED;
    let kernel = if cached {
        format!("{base}_{group}_cached")
    } else {
        format!("{base}_{group}")
    };
    let groups = rows.clamp(1, ROW_GROUPS_MAX);
    let mut args: Vec<Arg> = (0..inputs).map(Arg::Input).collect();
    args.push(Arg::Output);
    args.push(int(problem, "rows", rows)?);
    args.push(int(problem, "cols", cols)?);
    if problem.id() != KernelId::Softmax {
        args.push(Arg::Float(NORM_EPS as f32));
    }
    Ok(Plan {
        input_storage: vec![Storage::F32; inputs],
        output_storage: Storage::F32,
        scratch_bytes: Vec::new(),
        launches: vec![Launch {
            kernel: kernel.clone(),
            grid: [groups as u32, 1, 1],
            block: [group as u32, 1, 1],
            args,
        }],
        config: config(&[
            ("kernel", kernel),
            ("block", group.to_string()),
            ("groups", groups.to_string()),
            ("row_in_registers", if cached { "yes" } else { "no" }.into()),
        ]),
    })
}

/// The blocked instantiation for an m×n product (`batch` deep): the largest whose tiles are not
/// mostly padding and that still gives every compute unit a block, else the smallest.
fn choose_blocked(m: usize, n: usize, batch: usize, caps: &HipCaps) -> Blocked {
    let cus = caps.compute_units.max(1) as usize;
    BLOCKED
        .into_iter()
        .find(|b| {
            let (tm, tn) = (b.tm as usize, b.tn as usize);
            m >= tm && n >= tn && m.div_ceil(tm) * n.div_ceil(tn) * batch >= cus
        })
        .unwrap_or(BLOCKED[BLOCKED.len() - 1])
}

fn plan_gemm(problem: &Problem, caps: &HipCaps) -> Result<Plan, Unsupported> {
    let (m, n, k) = (
        param(problem, "m"),
        param(problem, "n"),
        param(problem, "k"),
    );
    let half = problem.dtype == Dtype::F16;
    let suffix = if half { "f16" } else { "f32" };
    let (kernel, grid, block, mut cfg) = match problem.variant.as_str() {
        "naive" | "tiled" => (
            format!("gemm_{}_{suffix}", problem.variant),
            [
                blocks(problem, "n", n, GEMM_SIDE)?,
                blocks(problem, "m", m, GEMM_SIDE)?,
                1,
            ],
            [GEMM_SIDE, GEMM_SIDE, 1],
            vec![("tile", GEMM_SIDE.to_string())],
        ),
        _ => {
            let b = choose_blocked(m, n, 1, caps);
            let [tx, ty] = b.threads();
            (
                b.symbol(half),
                [
                    blocks(problem, "n", n, b.tn)?,
                    blocks(problem, "m", m, b.tm)?,
                    1,
                ],
                [tx, ty, 1],
                blocked_config(&b),
            )
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
    cfg.push(("kernel", kernel.clone()));
    cfg.push(("grid", dims(&grid)));
    cfg.push(("block", dims(&block)));
    Ok(Plan {
        input_storage: vec![storage; 2],
        output_storage: storage,
        scratch_bytes: Vec::new(),
        launches: vec![Launch {
            kernel,
            grid,
            block,
            args,
        }],
        config: config(&cfg),
    })
}

fn blocked_config(b: &Blocked) -> Vec<(&'static str, String)> {
    vec![
        ("tile_m", b.tm.to_string()),
        ("tile_n", b.tn.to_string()),
        ("tile_k", b.tk.to_string()),
        ("work_m", b.wm.to_string()),
        ("work_n", b.wn.to_string()),
    ]
}

fn dims(v: &[u32; 3]) -> String {
    format!("{}x{}x{}", v[0], v[1], v[2])
}

/// conv2d's shape, for the kernel sizes the code objects have (3 and 5).
fn conv_shape(problem: &Problem) -> Result<ConvShape, Unsupported> {
    let s = problem.conv_shape();
    if s.ksize != 3 && s.ksize != 5 {
        return Err(Unsupported(format!(
            "conv2d ksize={}: the code objects have 3 and 5",
            s.ksize
        )));
    }
    Ok(s)
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

fn plan_conv_direct(problem: &Problem) -> Result<Plan, Unsupported> {
    let s = conv_shape(problem)?;
    let total = s.batch * s.filters * s.out_h * s.out_w;
    let grid = blocks(problem, "batch·filters·out_h·out_w", total, FLAT)?;
    let kernel = format!("conv2d_direct_k{}", s.ksize);
    let mut args = vec![
        Arg::Input(0),
        Arg::Input(1),
        Arg::Output,
        int(problem, "batch", s.batch)?,
    ];
    args.extend(conv_args(&s, problem, true)?);
    Ok(Plan {
        input_storage: vec![Storage::F32; 2],
        output_storage: Storage::F32,
        scratch_bytes: Vec::new(),
        launches: vec![Launch {
            kernel: kernel.clone(),
            grid: [grid, 1, 1],
            block: [FLAT, 1, 1],
            args,
        }],
        config: config(&[
            ("kernel", kernel),
            ("grid", grid.to_string()),
            ("block", FLAT.to_string()),
        ]),
    })
}

/// im2col into scratch, then the blocked GEMM of the weights (filters × channels·k²) with each
/// image's column matrix (channels·k² × out_h·out_w), batched over a chunk of images through the
/// grid's z; chunks are sized so their column matrices fit [`IM2COL_SCRATCH_BYTES`].
fn plan_conv_im2col(problem: &Problem, caps: &HipCaps) -> Result<Plan, Unsupported> {
    let s = conv_shape(problem)?;
    let (ckk, plane) = (s.channels * s.ksize * s.ksize, s.out_h * s.out_w);
    let per_image = ckk * plane;
    int(problem, "channels·ksize²·out_h·out_w", per_image)?;
    int(problem, "filters·out_h·out_w", s.filters * plane)?;
    let chunk = (IM2COL_SCRATCH_BYTES / (per_image * 4).max(1)).clamp(1, s.batch.max(1));
    let b = choose_blocked(s.filters, plane, chunk, caps);
    let [tx, ty] = b.threads();
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
            kernel: format!("im2col_k{}", s.ksize),
            grid: [blocks(problem, "im2col", count * per_image, FLAT)?, 1, 1],
            block: [FLAT, 1, 1],
            args,
        });
        launches.push(Launch {
            kernel: b.symbol(false),
            grid: [
                blocks(problem, "out_h·out_w", plane, b.tn)?,
                blocks(problem, "filters", s.filters, b.tm)?,
                count as u32,
            ],
            block: [tx, ty, 1],
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
    let mut cfg = blocked_config(&b);
    cfg.extend([
        (
            "kernel",
            format!("im2col_k{} + {}", s.ksize, b.symbol(false)),
        ),
        ("images_per_chunk", chunk.to_string()),
    ]);
    Ok(Plan {
        input_storage: vec![Storage::F32; 2],
        output_storage: Storage::F32,
        scratch_bytes: vec![chunk * per_image * 4],
        launches,
        config: config(&cfg),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(kernel: &str, variant: &str, dtype: &str, params: &[(&str, i64)]) -> Problem {
        let params = params.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        Problem::new(kernel, variant, &params, dtype, true).unwrap()
    }

    #[test]
    fn every_launched_kernel_is_a_known_symbol() {
        let symbols = kernel_symbols();
        let caps = HipCaps::default();
        for (kernel, variants, dtypes) in supported() {
            for v in &variants {
                for d in &dtypes {
                    let p = problem(kernel, v, d, &[]);
                    let plan = plan(&p, &caps).unwrap_or_else(|e| panic!("{kernel}/{v}/{d}: {e}"));
                    assert!(!plan.launches.is_empty());
                    for l in &plan.launches {
                        assert!(symbols.contains(&l.kernel), "{} is not built", l.kernel);
                        assert!(l.grid.iter().all(|&g| g >= 1), "{kernel}: empty grid");
                    }
                }
            }
        }
    }

    #[test]
    fn host_only_and_debug_kernels_are_refused_with_the_reason() {
        let caps = HipCaps::default();
        let e = plan(&problem("membw_cpu", "", "f32", &[]), &caps).unwrap_err();
        assert!(e.0.contains("only the cpu backend"), "{e}");
        // Problem::new refuses f16 softmax, but Problem's fields are public.
        let mut p = problem("softmax", "", "f32", &[]);
        p.dtype = Dtype::F16;
        let e = plan(&p, &caps).unwrap_err();
        assert!(e.0.contains("dtype f16"), "{e}");
    }

    #[test]
    fn gemm_blocks_match_the_compiled_sizes() {
        let caps = HipCaps::default();
        let p = problem(
            "gemm",
            "blocked",
            "f32",
            &[("m", 4096), ("n", 4096), ("k", 4096)],
        );
        let l = &plan(&p, &caps).unwrap().launches[0];
        assert_eq!(l.kernel, "gemm_blocked_f32_128x128x8_8x8");
        assert_eq!(l.block, [16, 16, 1]);
        assert_eq!(l.grid, [32, 32, 1]);
        // A small product gives every CU a block with smaller tiles.
        let p = problem(
            "gemm",
            "blocked",
            "f16",
            &[("m", 256), ("n", 256), ("k", 64)],
        );
        let l = &plan(&p, &caps).unwrap().launches[0];
        assert_eq!(l.kernel, "gemm_blocked_f16_32x32x16_4x4");
        assert_eq!(l.block, [8, 8, 1]);
        assert_eq!(l.grid, [8, 8, 1]);
        let p = problem("gemm", "tiled", "f32", &[("m", 100), ("n", 33), ("k", 7)]);
        let l = &plan(&p, &caps).unwrap().launches[0];
        assert_eq!((l.grid, l.block), ([3, 7, 1], [16, 16, 1]));
    }

    #[test]
    fn rows_pick_block_and_caching_by_columns() {
        let caps = HipCaps::default();
        for (cols, kernel, block) in [
            (1, "softmax_rows_64_cached", 64),
            (64, "softmax_rows_64_cached", 64),
            (65, "softmax_rows_256_cached", 256),
            (4096, "softmax_rows_256_cached", 256),
            (4097, "softmax_rows_256", 256),
            (8192, "softmax_rows_1024", 1024),
        ] {
            let p = problem("softmax", "", "f32", &[("rows", 3), ("cols", cols)]);
            let l = &plan(&p, &caps).unwrap().launches[0];
            assert_eq!(
                (l.kernel.as_str(), l.block[0]),
                (kernel, block),
                "cols={cols}"
            );
            assert_eq!(l.grid[0], 3);
        }
    }

    #[test]
    fn elementwise_moves_a_float4_per_work_item() {
        let caps = HipCaps::default();
        let p = problem("triad", "", "f32", &[("n", 1025)]);
        let l = &plan(&p, &caps).unwrap().launches[0];
        assert_eq!(l.grid, [2, 1, 1], "257 work-items in blocks of 256");
        assert_eq!(l.args[3], Arg::Float(TRIAD_SCALAR));
        let p = problem("debug_wrong", "", "f32", &[]);
        assert_eq!(
            plan(&p, &caps).unwrap().launches[0].kernel,
            "vec_add_wrong_f32"
        );
    }

    #[test]
    fn im2col_chunks_images_into_batched_gemms() {
        let caps = HipCaps::default();
        let p = problem(
            "conv2d",
            "im2col",
            "f32",
            &[
                ("batch", 4),
                ("channels", 3),
                ("height", 32),
                ("width", 32),
                ("filters", 8),
                ("ksize", 5),
            ],
        );
        let plan = plan(&p, &caps).unwrap();
        assert_eq!(plan.launches.len(), 2, "4 small images fit one chunk");
        assert_eq!(plan.launches[0].kernel, "im2col_k5");
        assert_eq!(plan.launches[1].grid[2], 4, "one z per image");
        assert_eq!(plan.scratch_bytes.len(), 1);
    }
}
