//! GEMM (naive, tiled, blocked over the compiled tile configurations) and conv2d (direct,
//! im2col over the blocked GEMM) planners.

use super::args::{FLAT, blocks, ints};
use super::types::{Arg, HipCaps, Launch, Plan, Unsupported};
use crate::backend::config;
use crate::backend::planning::{self, Im2col, Tile, dims, tile_config};
use crate::backend::storage::Elem as Storage;
use gpufleet_kernels::{ConvShape, Dtype, Problem};

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
    pub(super) fn symbol(&self, half: bool) -> String {
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

impl Tile for Blocked {
    fn tile(&self) -> [u32; 5] {
        [self.tm, self.tn, self.tk, self.wm, self.wn]
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

pub(super) fn plan_gemm(problem: &Problem, caps: &HipCaps) -> Result<Plan, Unsupported> {
    let (m, n, k) = planning::gemm_dims(problem);
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
                tile_config(&b, []),
            )
        }
    };
    let mut args = vec![Arg::Input(0), Arg::Input(1), Arg::Output];
    args.extend(ints(problem, &planning::gemm_args(m, n, k))?);
    let storage = if half { Storage::F16 } else { Storage::F32 };
    cfg.push(("kernel", kernel.clone()));
    cfg.push(("grid", dims(&grid)));
    cfg.push(("block", dims(&block)));
    Ok(Plan {
        program: (),
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

pub(super) fn plan_conv_direct(problem: &Problem) -> Result<Plan, Unsupported> {
    let s = conv_shape(problem)?;
    let total = s.batch * s.filters * s.out_h * s.out_w;
    let grid = blocks(problem, "batch·filters·out_h·out_w", total, FLAT)?;
    let kernel = format!("conv2d_direct_k{}", s.ksize);
    let mut args = vec![Arg::Input(0), Arg::Input(1), Arg::Output];
    args.extend(ints(problem, &planning::conv_direct_args(&s))?);
    let launch = Launch {
        kernel: kernel.clone(),
        grid: [grid, 1, 1],
        block: [FLAT, 1, 1],
        args,
    };
    Ok(Plan::one_launch(
        (),
        2,
        launch,
        config(&[
            ("kernel", kernel),
            ("grid", grid.to_string()),
            ("block", FLAT.to_string()),
        ]),
    ))
}

/// conv2d `im2col` in [`Im2col`]'s chunks: `im2col_k*` into scratch, then the compiled blocked GEMM
/// over the chunk's images through the grid's z.
pub(super) fn plan_conv_im2col(problem: &Problem, caps: &HipCaps) -> Result<Plan, Unsupported> {
    let s = conv_shape(problem)?;
    let im = Im2col::new(&s, IM2COL_SCRATCH_BYTES);
    // The GEMM's batch strides are int arguments.
    ints(
        problem,
        &[
            ("channels·ksize²·out_h·out_w", im.per_image),
            ("filters·out_h·out_w", s.filters * im.plane),
        ],
    )?;
    let b = choose_blocked(s.filters, im.plane, im.chunk, caps);
    let [tx, ty] = b.threads();
    let mut launches = Vec::new();
    for (first, count) in im.chunks() {
        let mut args = vec![Arg::Input(0), Arg::Scratch(0)];
        args.extend(ints(problem, &im.unfold_args(first, count))?);
        launches.push(Launch {
            kernel: format!("im2col_k{}", s.ksize),
            grid: [blocks(problem, "im2col", count * im.per_image, FLAT)?, 1, 1],
            block: [FLAT, 1, 1],
            args,
        });
        let mut args = vec![Arg::Input(1), Arg::Scratch(0), Arg::Output];
        args.extend(ints(problem, &im.gemm_args(first))?);
        launches.push(Launch {
            kernel: b.symbol(false),
            grid: [
                blocks(problem, "out_h·out_w", im.plane, b.tn)?,
                blocks(problem, "filters", s.filters, b.tm)?,
                count as u32,
            ],
            block: [tx, ty, 1],
            args,
        });
    }
    let mut cfg = tile_config(&b, []);
    cfg.extend([
        (
            "kernel",
            format!("im2col_k{} + {}", s.ksize, b.symbol(false)),
        ),
        ("images_per_chunk", im.chunk.to_string()),
    ]);
    Ok(Plan {
        program: (),
        input_storage: vec![Storage::F32; 2],
        output_storage: Storage::F32,
        scratch_bytes: vec![im.scratch_bytes()],
        launches,
        config: config(&cfg),
    })
}
