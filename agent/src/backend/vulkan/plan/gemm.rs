//! GEMM (naive, tiled, blocked; f32 and f16) and conv2d (direct, im2col over the blocked GEMM)
//! planners.

use super::args::{
    SPEC_LOCAL_X, SPEC_LOCAL_Y, check_groups, dispatch, flat_group, grid_groups, word, words,
};
use super::tuning::{blocked_local, default_gemm_tuning, gemm_candidates, tuning_error};
use super::types::{
    Binding, GemmTuning, Passes, Plan, Planned, SpecValue, Storage, Unsupported, VkCaps,
};
use crate::backend::config;
use crate::backend::planning::{self, Im2col, dims, exact_tiles, tile_config};
use gpufleet_kernels::{ConvShape, Dtype, Problem};

/// gemm's variant naming the blocked f16 GEMM with f32 accumulation (f16 only).
pub(super) const F16ACC32: &str = "f16acc32";
/// Bytes of im2col column matrices held at once: 2^27, the smallest maxStorageBufferRange Vulkan
/// allows (lavapipe's), so the scratch binding fits any device unless one image needs more.
const IM2COL_SCRATCH_BYTES: usize = 128 << 20;

/// The GEMM push constants: m, n, k, a_batch, b_batch, c_batch, c_first (see `gemm_io.glsl`).
struct GemmPush {
    m: u32,
    n: u32,
    k: u32,
    a_batch: u32,
    b_batch: u32,
    c_batch: u32,
    c_first: u32,
}

impl GemmPush {
    /// The block from the seven size words in order (see [`planning::gemm_args`]).
    fn new(problem: &Problem, named: &[(&str, usize); 7]) -> Result<GemmPush, Unsupported> {
        let [m, n, k, a_batch, b_batch, c_batch, c_first] =
            named.map(|(what, v)| word(problem, what, v));
        Ok(GemmPush {
            m: m?,
            n: n?,
            k: k?,
            a_batch: a_batch?,
            b_batch: b_batch?,
            c_batch: c_batch?,
            c_first: c_first?,
        })
    }

    fn words(&self) -> Vec<u32> {
        vec![
            self.m,
            self.n,
            self.k,
            self.a_batch,
            self.b_batch,
            self.c_batch,
            self.c_first,
        ]
    }
}

/// `gemm_blocked` for one device and shape: the tuning, whether 4-vectors are aligned for the
/// shape, and whether the shape is a whole number of tiles.
struct Blocked {
    tuning: GemmTuning,
    /// k, n and the batch strides are multiples of 4, so every row and batch offset of A, B and C
    /// is too and the vec4 views are aligned (f16vec4 needs the same).
    vec4: bool,
    exact: bool,
}

impl Blocked {
    fn new(caps: &VkCaps, tuning: GemmTuning, push: &GemmPush) -> Result<Blocked, Unsupported> {
        if let Some(why) = tuning_error(&tuning, caps) {
            return Err(Unsupported(format!(
                "gemm tuning {tuning:?} cannot run on this device: {why}"
            )));
        }
        let vec4 = [push.k, push.n, push.a_batch, push.b_batch, push.c_batch]
            .iter()
            .all(|v| v.is_multiple_of(4));
        let exact = exact_tiles(&tuning, push.m as usize, push.n as usize, push.k as usize);
        Ok(Blocked {
            tuning,
            vec4,
            exact,
        })
    }

    fn spec(&self) -> Vec<(u32, SpecValue)> {
        let t = &self.tuning;
        let (x, y) = blocked_local(t);
        vec![
            (SPEC_LOCAL_X, SpecValue::U32(x)),
            (SPEC_LOCAL_Y, SpecValue::U32(y)),
            (2, SpecValue::U32(t.tile_m)),
            (3, SpecValue::U32(t.tile_n)),
            (4, SpecValue::U32(t.tile_k)),
            (5, SpecValue::U32(t.work_m)),
            (6, SpecValue::U32(t.work_n)),
            (7, SpecValue::U32(u32::from(self.vec4))),
            (8, SpecValue::U32(u32::from(self.exact))),
        ]
    }

    /// Groups covering an m×n product, `batch` products deep.
    fn groups(
        &self,
        problem: &Problem,
        caps: &VkCaps,
        push: &GemmPush,
        batch: usize,
    ) -> Result<[u32; 3], Unsupported> {
        let t = &self.tuning;
        check_groups(
            problem,
            caps,
            [
                u64::from(push.n.div_ceil(t.tile_n)),
                u64::from(push.m.div_ceil(t.tile_m)),
                batch as u64,
            ],
        )
    }

    fn config(&self) -> Vec<(&'static str, String)> {
        let exact = ("exact_tiles", self.exact.to_string());
        tile_config(&self.tuning, [("vec4", self.vec4.to_string()), exact])
    }
}

/// Side of `gemm_naive`'s workgroup and `gemm_tiled`'s tile: 16, or less on small devices.
fn square_side(caps: &VkCaps) -> u32 {
    let side = planning::square_side(|side| {
        let side = side as u32;
        side * side <= caps.max_workgroup_invocations
            && side <= caps.max_workgroup_size[0]
            && side <= caps.max_workgroup_size[1]
            && 2 * side * (side + 1) * 4 <= caps.max_shared_memory_bytes
    });
    side as u32
}

pub(super) fn plan_gemm(problem: &Problem, caps: &VkCaps, tuning: Option<&GemmTuning>) -> Planned {
    let (m, n, k) = planning::gemm_dims(problem);
    let push = GemmPush::new(problem, &planning::gemm_args(m, n, k))?;
    let half = problem.dtype == Dtype::F16;
    if problem.variant == F16ACC32 && !half {
        return Err(Unsupported(format!(
            "variant {F16ACC32} of gemm is the f16 GEMM (fp16 storage, fp32 accumulation); \
             dtype {} runs as `blocked`",
            problem.dtype
        )));
    }
    let suffix = if half { "_f16" } else { "" };
    let (shader, spec, groups, mut cfg) = match problem.variant.as_str() {
        "naive" | "tiled" => {
            let side = square_side(caps);
            let groups = check_groups(
                problem,
                caps,
                [
                    u64::from(push.n.div_ceil(side)),
                    u64::from(push.m.div_ceil(side)),
                    1,
                ],
            )?;
            let mut spec = vec![
                (SPEC_LOCAL_X, SpecValue::U32(side)),
                (SPEC_LOCAL_Y, SpecValue::U32(side)),
            ];
            let mut cfg = vec![("local", format!("{side}x{side}"))];
            if problem.variant == "tiled" {
                spec.push((2, SpecValue::U32(side)));
                cfg.push(("tile", side.to_string()));
            }
            (
                format!("gemm_{}{suffix}", problem.variant),
                spec,
                groups,
                cfg,
            )
        }
        _ => {
            let tuning = tuning.copied().unwrap_or_else(|| default_gemm_tuning(caps));
            let blocked = Blocked::new(caps, tuning, &push)?;
            let groups = blocked.groups(problem, caps, &push, 1)?;
            let shader = if half {
                "gemm_f16acc32"
            } else {
                "gemm_blocked"
            };
            let (x, y) = blocked_local(&tuning);
            let mut cfg = blocked.config();
            cfg.push(("local", format!("{x}x{y}")));
            (shader.to_string(), blocked.spec(), groups, cfg)
        }
    };
    let storage = if half { Storage::F16 } else { Storage::F32 };
    cfg.extend([
        ("shader", shader.clone()),
        ("groups", dims(&groups)),
        ("accumulate", "f32".to_string()),
    ]);
    Ok(Plan {
        input_storage: vec![storage; 2],
        output_storage: storage,
        scratch_bytes: Vec::new(),
        passes: Passes::default(),
        dispatches: vec![dispatch(
            &shader,
            spec,
            push.words(),
            vec![Binding::Input(0), Binding::Input(1), Binding::Output],
            groups,
        )?],
        config: config(&cfg),
    })
}

/// Specialization constants of the conv shaders: work-group size and filter side.
fn conv_spec(s: &ConvShape, group: u32) -> Vec<(u32, SpecValue)> {
    vec![
        (SPEC_LOCAL_X, SpecValue::U32(group)),
        (2, SpecValue::U32(s.ksize as u32)),
    ]
}

pub(super) fn plan_conv_direct(problem: &Problem, caps: &VkCaps) -> Result<Plan, Unsupported> {
    let s = problem.conv_shape();
    let group = flat_group(caps);
    let total = s.batch * s.filters * s.out_h * s.out_w;
    let groups = grid_groups(caps, total, group);
    let push = words(problem, &planning::conv_direct_args(&s))?;
    Ok(Plan {
        input_storage: vec![Storage::F32; 2],
        output_storage: Storage::F32,
        scratch_bytes: Vec::new(),
        passes: Passes::default(),
        dispatches: vec![dispatch(
            "conv2d_direct",
            conv_spec(&s, group),
            push,
            vec![Binding::Input(0), Binding::Input(1), Binding::Output],
            [groups, 1, 1],
        )?],
        config: config(&[
            ("shader", "conv2d_direct".into()),
            ("local", group.to_string()),
            ("groups", groups.to_string()),
        ]),
    })
}

/// conv2d `im2col` in [`Im2col`]'s chunks, two dispatches each: `im2col` fills scratch 0, then
/// `gemm_blocked` multiplies the weights by every image of the chunk (workgroup z).
pub(super) fn plan_conv_im2col(p: &Problem, caps: &VkCaps, tuning: Option<&GemmTuning>) -> Planned {
    let s = p.conv_shape();
    let im = Im2col::new(&s, IM2COL_SCRATCH_BYTES);
    let tuning = planning::im2col_tuning(tuning, gemm_candidates(caps), s.filters, || {
        default_gemm_tuning(caps)
    });
    let group = flat_group(caps);
    let mut dispatches = Vec::new();
    let mut blocked = None;
    for (first, count) in im.chunks() {
        dispatches.push(dispatch(
            "im2col",
            conv_spec(&s, group),
            words(p, &im.unfold_args(first, count))?,
            vec![Binding::Input(0), Binding::Scratch(0)],
            [grid_groups(caps, count * im.per_image, group), 1, 1],
        )?);
        let gemm = GemmPush::new(p, &im.gemm_args(first))?;
        let b = Blocked::new(caps, tuning, &gemm)?;
        dispatches.push(dispatch(
            "gemm_blocked",
            b.spec(),
            gemm.words(),
            vec![Binding::Input(1), Binding::Scratch(0), Binding::Output],
            b.groups(p, caps, &gemm, count)?,
        )?);
        blocked = Some(b);
    }
    let blocked = blocked.ok_or_else(|| Unsupported("conv2d with batch=0".into()))?;
    let mut cfg = blocked.config();
    cfg.extend([
        ("shader", "im2col + gemm_blocked".to_string()),
        ("images_per_chunk", im.chunk.to_string()),
    ]);
    Ok(Plan {
        input_storage: vec![Storage::F32; 2],
        output_storage: Storage::F32,
        scratch_bytes: vec![im.scratch_bytes()],
        passes: Passes::default(),
        dispatches,
        config: config(&cfg),
    })
}
