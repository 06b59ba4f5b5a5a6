//! Unit tests of the planners: pure, no device.

use super::tuning::{blocked_local_bytes, blocked_threads, tuning_error};
use super::*;
use gpufleet_kernels::TRIAD_SCALAR;

fn caps(max_wg: usize, local: u64, c: (u32, u32), multiple: usize) -> DeviceCaps {
    DeviceCaps {
        max_work_group_size: max_wg,
        local_mem_bytes: local,
        fp16: false,
        fp64: false,
        int8_dot: false,
        opencl_c: c,
        vendor: "test".into(),
        compute_units: 8,
        preferred_multiple: multiple,
        cpu: multiple == 8,
        unfused_rope: false,
        wide_quant_teams: false,
    }
}

/// An NVIDIA-like GPU, a CPU (PoCL), Clover on an old Radeon, and a very small device.
fn devices() -> Vec<DeviceCaps> {
    vec![
        caps(1024, 48 * 1024, (1, 2), 32),
        caps(4096, 512 * 1024, (1, 2), 8),
        caps(256, 32 * 1024, (1, 1), 64),
        caps(64, 4 * 1024, (1, 1), 1),
    ]
}

use crate::backend::planning::testing::{
    assert_common_refusals, assert_im2col_chunks, big_im2col, blocked_gemm, catalog_entries,
    check_candidates, for_every_listed, plan_label, problem,
};

fn define(plan: &Plan, name: &str) -> Option<String> {
    plan.program.options.split(' ').find_map(|o| {
        let rest = o.strip_prefix("-D")?.strip_prefix(name)?;
        match rest.strip_prefix('=') {
            Some(v) => Some(v.to_string()),
            None => rest.is_empty().then(String::new),
        }
    })
}

/// Structural checks every plan must pass on `caps`.
fn check_plan(p: &Problem, plan: &Plan, caps: &DeviceCaps) {
    let what = plan_label(p, plan.input_storage.len(), plan.launches.is_empty());
    let mut output_written = false;
    for l in &plan.launches {
        assert!(
            plan.program.source.contains(&format!("{}(", l.kernel)),
            "{what}: {} not in {}",
            l.kernel,
            plan.program.name
        );
        let local = l.local.as_ref().expect("every launch sets its local size");
        assert_eq!(local.len(), l.global.len(), "{what}: {l:?}");
        assert!((1..=3).contains(&l.global.len()), "{what}: {l:?}");
        for (g, lo) in l.global.iter().zip(local) {
            assert!(
                *lo > 0 && g.is_multiple_of(*lo),
                "{what}: global {g} vs local {lo}"
            );
        }
        let items: usize = local.iter().product();
        assert!(items <= caps.max_work_group_size, "{what}: {items} items");
        for a in &l.args {
            match a {
                Arg::Input(i) => assert!(*i < plan.input_storage.len(), "{what}: {a:?}"),
                Arg::Scratch(i) => assert!(*i < plan.scratch_bytes.len(), "{what}: {a:?}"),
                Arg::Output => output_written = true,
                Arg::Int(v) => assert!(*v >= 0, "{what}: {a:?}"),
                Arg::Long(v) => assert!(*v >= 0, "{what}: {a:?}"),
                Arg::Float(_) => {}
            }
        }
    }
    assert!(output_written, "{what}: no launch writes the output");
    let std = if caps.opencl_c == (1, 1) {
        "CL1.1"
    } else {
        "CL1.2"
    };
    assert!(
        plan.program.options.starts_with(&format!("-cl-std={std}")),
        "{what}: {}",
        plan.program.options
    );
    assert!(!plan.config.is_empty(), "{what}");
}

#[test]
fn supported_lists_every_device_kernel_with_the_catalog_variants_and_dtypes() {
    let listed = supported();
    for (k, (_, variants, dtypes)) in
        catalog_entries(gpufleet_kernels::BackendKind::OpenCl, &listed)
    {
        assert_eq!(variants.as_slice(), k.variants, "{}", k.name);
        let names: Vec<&str> = k.dtypes.iter().map(|d| d.name()).collect();
        assert_eq!(dtypes, &names, "{}", k.name);
    }
    assert_eq!(listed.len(), 31);
}

#[test]
fn every_supported_combination_plans_on_every_device_at_default_and_awkward_sizes() {
    let odd: &[(&str, &[(&str, i64)])] = &[
        ("gemm", &[("m", 37), ("n", 53), ("k", 29)]),
        ("gemm", &[("m", 1), ("n", 1), ("k", 1)]),
        ("vec_add", &[("n", 7)]),
        ("softmax", &[("rows", 3), ("cols", 1)]),
        ("layernorm", &[("rows", 100_000), ("cols", 1_000_000)]),
        (
            "conv2d",
            &[("batch", 3), ("height", 5), ("width", 6), ("ksize", 5)],
        ),
    ];
    for caps in devices() {
        for_every_listed(supported(), odd, |what, p| {
            // The list holds for any device; compute_peak's fp16, fp64 and int8 need the
            // extensions.
            let lacks = match (p.kernel.name, p.variant.as_str()) {
                ("compute_peak", "fp16") => (!caps.fp16).then_some("cl_khr_fp16"),
                ("compute_peak", "fp64") => (!caps.fp64).then_some("cl_khr_fp64"),
                ("compute_peak", "int8") => {
                    (!caps.int8_dot).then_some("cl_khr_integer_dot_product")
                }
                _ => None,
            };
            if let Some(ext) = lacks {
                let err = plan(p, &caps, None).unwrap_err();
                assert!(err.0.contains(ext), "{what}: {err}");
                return;
            }
            let plan = plan(p, &caps, None).unwrap_or_else(|e| panic!("{what} on {caps:?}: {e}"));
            check_plan(p, &plan, &caps);
        });
    }
}

#[test]
fn language_version_follows_the_device_and_never_exceeds_1_2() {
    let p = problem("vec_add", "", &[], "f32");
    let opts = |c| {
        plan(&p, &caps(256, 32768, c, 32), None)
            .unwrap()
            .program
            .options
    };
    assert!(opts((1, 1)).starts_with("-cl-std=CL1.1"));
    assert!(opts((1, 2)).starts_with("-cl-std=CL1.2"));
    assert!(opts((3, 0)).starts_with("-cl-std=CL1.2"));
    let err = plan(&p, &caps(256, 32768, (1, 0), 32), None).unwrap_err();
    assert!(err.0.contains("OpenCL C 1.0"), "{err}");
    let err = plan(&p, &caps(0, 32768, (1, 2), 32), None).unwrap_err();
    assert!(err.0.contains("max_work_group_size=0"), "{err}");
    let mut fp16 = caps(256, 32768, (1, 2), 32);
    fp16.fp16 = true;
    assert_eq!(
        define(&plan(&p, &fp16, None).unwrap(), "GPUFLEET_HAS_FP16"),
        Some(String::new())
    );
    assert_eq!(
        define(
            &plan(&p, &caps(256, 32768, (1, 2), 32), None).unwrap(),
            "GPUFLEET_HAS_FP16"
        ),
        None
    );
}

#[test]
fn unsupported_kernels_and_dtypes_say_why() {
    let gpu = &devices()[0];
    assert_common_refusals(|p| plan(p, gpu, None));
}

#[test]
fn a_tuning_the_device_cannot_run_is_refused_with_the_limit() {
    let small = caps(64, 4096, (1, 2), 32);
    let p = problem("gemm", "blocked", &[], "f32");
    let big = GemmTuning::new([128, 128, 8, 8, 8], 4);
    let err = plan(&p, &small, Some(&big)).unwrap_err();
    assert!(
        err.0.contains("256 work-items") && err.0.contains("max_work_group_size 64"),
        "{err}"
    );
    let wide = GemmTuning::new([64, 64, 16, 8, 8], 4);
    let err = plan(&p, &small, Some(&wide)).unwrap_err();
    assert!(err.0.contains("local memory"), "{err}");
    let ragged = GemmTuning::new([30, 32, 8, 4, 4], 4);
    assert!(plan(&p, &devices()[0], Some(&ragged)).is_err());
    let odd_vector = GemmTuning { vector: 3, ..wide };
    let err = plan(&p, &devices()[1], Some(&odd_vector)).unwrap_err();
    assert!(err.0.contains("vector=3"), "{err}");
}

#[test]
fn candidates_respect_the_device_and_put_big_tiles_first_on_gpus() {
    let fits = |c: &GemmTuning, caps: &DeviceCaps| {
        blocked_threads(c) <= caps.max_work_group_size
            && blocked_local_bytes(c) <= caps.local_mem_bytes
    };
    let tuner = (
        gemm_candidates as fn(&_) -> _,
        default_gemm_tuning as fn(&_) -> _,
    );
    check_candidates(&devices(), 4..=24, tuner, tuning_error, fits);
    let gpu = gemm_candidates(&devices()[0]);
    let big = |t: &GemmTuning| t.tile_m == 128 && t.tile_n == 128 && t.work_m * t.work_n == 64;
    assert!(big(&gpu[0]), "{:?}", gpu[0]);
    assert!(
        gpu.iter().any(|t| t.tile_m <= 32),
        "small tiles for small problems"
    );
    let cpu = gemm_candidates(&devices()[1]);
    assert!(!big(&cpu[0]) && cpu.iter().any(big), "{cpu:?}");
    // On a CPU the first (default) tile is the cheapest to build: 4×4 outputs per work-item.
    assert!(cpu[0].work_m * cpu[0].work_n <= 16, "{:?}", cpu[0]);
}

#[test]
fn default_tuning_is_valid_even_on_a_tiny_device() {
    let tiny = caps(1, 512, (1, 1), 1);
    let t = default_gemm_tuning(&tiny);
    assert_eq!(tuning_error(&t, &tiny), None, "{t:?}");
    let p = problem("gemm", "blocked", &[("m", 5), ("n", 3), ("k", 9)], "f16");
    check_plan(&p, &plan(&p, &tiny, None).unwrap(), &tiny);
}

#[test]
fn blocked_gemm_parameters_follow_the_tuning_and_the_shape() {
    let gpu = &devices()[0];
    let t = GemmTuning::new([128, 64, 8, 8, 4], 4);
    let shaped = |m, n, k, dtype| plan(&blocked_gemm(m, n, k, dtype), gpu, Some(&t)).unwrap();
    let pl = shaped(4096, 4096, 4096, "f32");
    for (name, value) in [
        ("TILE_M", "128"),
        ("TILE_N", "64"),
        ("TILE_K", "8"),
        ("WORK_M", "8"),
    ] {
        assert_eq!(
            define(&pl, &format!("GPUFLEET_{name}")).as_deref(),
            Some(value)
        );
    }
    assert_eq!(define(&pl, "GPUFLEET_VEC").as_deref(), Some("4"));
    assert_eq!(define(&pl, "GPUFLEET_EXACT"), Some(String::new()));
    assert_eq!(pl.launches[0].global, [4096 / 64 * 16, 4096 / 128 * 16]);
    assert_eq!(pl.launches[0].local, Some(vec![16, 16]));
    assert_eq!(pl.config.get("tile_m").map(String::as_str), Some("128"));
    // Ragged sizes: bounds checks on, f32 vectors only as wide as k and n allow.
    let pl = shaped(37, 54, 30, "f32");
    assert_eq!(define(&pl, "GPUFLEET_EXACT"), None);
    assert_eq!(define(&pl, "GPUFLEET_VEC").as_deref(), Some("2"));
    assert_eq!(pl.launches[0].global, [16, 16]);
    assert_eq!(
        define(&shaped(37, 53, 29, "f32"), "GPUFLEET_VEC").as_deref(),
        Some("1")
    );
    // vload_half needs no alignment, so f16 keeps the tuned width.
    let pl = shaped(37, 53, 29, "f16");
    assert_eq!(define(&pl, "GPUFLEET_VEC").as_deref(), Some("4"));
    assert_eq!(define(&pl, "GPUFLEET_HALF"), Some(String::new()));
    assert_eq!(pl.input_storage, [Storage::F16, Storage::F16]);
    assert_eq!(pl.output_storage, Storage::F16);
}

/// The plan of row kernel `kernel` at `r`×`c` on the test GPU (8 compute units).
fn rows(kernel: &str, r: i64, c: i64) -> Plan {
    let p = problem(kernel, "", &[("rows", r), ("cols", c)], "f32");
    plan(&p, &devices()[0], None).unwrap()
}

#[test]
fn row_kernels_size_their_groups_to_the_row() {
    let pl = rows("softmax", 10, 1);
    assert_eq!(define(&pl, "GPUFLEET_WG").as_deref(), Some("32"));
    assert_eq!(define(&pl, "GPUFLEET_CHUNKS").as_deref(), Some("1"));
    assert_eq!(pl.launches[0].global, [320]);
    let pl = rows("layernorm", 1 << 20, 1024);
    assert_eq!(define(&pl, "GPUFLEET_WG").as_deref(), Some("256"));
    assert_eq!(define(&pl, "GPUFLEET_CHUNKS").as_deref(), Some("4"));
    assert_eq!(
        pl.launches[0].global,
        [ROW_GROUPS_MAX * 256],
        "groups stride over rows"
    );
    assert!(matches!(pl.launches[0].args.last(), Some(Arg::Float(e)) if (*e - 1e-5).abs() < 1e-12));
    // Too long for registers and many rows: one 1024-wide group per row, the row read again.
    let pl = rows("rmsnorm", 4096, 1 << 20);
    assert_eq!(define(&pl, "GPUFLEET_WG").as_deref(), Some("1024"));
    assert_eq!(
        define(&pl, "GPUFLEET_CHUNKS").as_deref(),
        Some("0"),
        "too long for registers"
    );
    assert_eq!(pl.launches.len(), 1);
}

#[test]
fn few_wide_rows_are_split_over_several_groups() {
    // 8 compute units: 64 groups wanted.
    for (kernel, inputs, parts) in [
        ("softmax", 1, 2),
        ("log_softmax", 1, 2),
        ("layernorm", 3, 2),
    ] {
        let pl = rows(kernel, 2, 1 << 20);
        assert_eq!(
            define(&pl, "GPUFLEET_SPLIT").as_deref(),
            Some("32"),
            "{kernel}"
        );
        assert_eq!(define(&pl, "GPUFLEET_WG").as_deref(), Some("256"));
        let names: Vec<_> = pl.launches.iter().map(|l| l.kernel.as_str()).collect();
        assert_eq!(
            names,
            ["split_stats".to_string(), format!("{kernel}_split_apply")]
        );
        for l in &pl.launches {
            assert_eq!(l.global, [2 * 32 * 256], "{kernel}: rows × split groups");
        }
        assert_eq!(pl.scratch_bytes, [4 * parts * 64], "{kernel}: partials");
        assert_eq!(pl.launches[0].args[..2], [Arg::Input(0), Arg::Scratch(0)]);
        let apply = &pl.launches[1].args;
        assert_eq!(apply[inputs], Arg::Scratch(0), "{kernel}");
        assert_eq!(apply[inputs + 1], Arg::Output, "{kernel}");
        let chunk = (1usize << 20) / 32;
        assert!(
            apply.contains(&Arg::Int(chunk as i32)),
            "{kernel}: {apply:?}"
        );
        assert_eq!(pl.config["groups_per_row"], "32");
        assert_eq!(
            pl.config["kernel"],
            format!("split_stats + {kernel}_split_apply")
        );
        let softmax = define(&pl, "GPUFLEET_SPLIT_SOFTMAX").is_some();
        assert_eq!(
            softmax,
            kernel != "layernorm",
            "the statistics the kernel computes"
        );
    }
    // rmsnorm reads a row twice either way, and the fused kernel has three dependent
    // reductions: neither is split.
    assert_eq!(rows("rmsnorm", 2, 1 << 20).launches.len(), 1);
    // The fused kernel has three dependent reductions: not split.
    assert_eq!(
        rows("layernorm_rmsnorm_fused", 2, 1 << 20).launches.len(),
        1
    );
    // Rows that fit in registers, or enough of them to fill the device: not split.
    assert_eq!(rows("softmax", 2, 4096).launches.len(), 1);
    assert_eq!(rows("softmax", 64, 1 << 20).launches.len(), 1);
}

#[test]
fn the_split_gives_every_compute_unit_groups_without_tiny_chunks() {
    use crate::backend::planning::row_split;
    // An H100 (132 SMs) at 256×65536: 8 groups per row, 2048 in all.
    assert_eq!(row_split(256, 65536, 0, 132), 8);
    // In registers, or rows enough: one group per row.
    assert_eq!(row_split(4096, 4096, 4, 132), 1);
    assert_eq!(row_split(16384, 1024, 1, 132), 1);
    assert_eq!(row_split(2000, 100_000, 0, 132), 1);
    // A short row is never cut below 4 columns per work-item of 256.
    assert_eq!(row_split(1, 8192, 0, 132), 8);
    assert_eq!(row_split(1, 1000, 0, 132), 1);
    // At most SPLIT_MAX groups per row.
    assert_eq!(row_split(1, 1 << 24, 0, 132), 64);
}

#[test]
fn elementwise_plans_cover_n_with_one_float4_per_item() {
    let gpu = &devices()[0];
    for n in [1, 4, 5, 1 << 26] {
        let pl = plan(&problem("triad", "", &[("n", n)], "f32"), gpu, None).unwrap();
        let l = &pl.launches[0];
        assert!(l.global[0] * 4 >= n as usize && l.global[0] < (n as usize).div_ceil(4) + 256);
        assert_eq!(l.args[3], Arg::Float(TRIAD_SCALAR));
        assert_eq!(l.args[4], Arg::Int(n as i32));
    }
    let wrong = plan(&problem("debug_wrong", "", &[], "f32"), gpu, None).unwrap();
    assert_eq!(define(&wrong, "GPUFLEET_WRONG"), Some(String::new()));
    assert_eq!(wrong.launches[0].kernel, "vec_add_f32");
    let right = plan(&problem("vec_add", "", &[], "f32"), gpu, None).unwrap();
    assert_eq!(define(&right, "GPUFLEET_WRONG"), None);
    let noop = plan(&problem("noop", "", &[], "f32"), gpu, None).unwrap();
    assert_eq!(noop.launches[0].global, [1]);
}

#[test]
fn im2col_chunks_the_batch_and_refuses_int_overflow() {
    let gpu = &devices()[0];
    let pl = plan(&big_im2col(), gpu, None).unwrap();
    // 36 MiB per image: 7 images per 256 MiB chunk.
    assert_im2col_chunks(&pl.config, pl.launches.len(), &pl.scratch_bytes, 7);
    let last = pl.launches.last().unwrap();
    assert_eq!(
        last.global.get(2).copied().unwrap_or(1),
        64 - 9 * 7,
        "the last chunk holds the remaining images"
    );
    assert_eq!(last.args[9], Arg::Int(63));
    // channels·25·512·512 does not fit an int stride.
    let huge = [
        ("channels", 512),
        ("height", 512),
        ("width", 512),
        ("ksize", 5),
        ("pad", 2),
    ];
    let err = plan(&problem("conv2d", "im2col", &huge, "f32"), gpu, None).unwrap_err();
    assert!(err.0.contains("exceeds the largest OpenCL int"), "{err}");
    assert!(plan(&problem("conv2d", "direct", &huge, "f32"), gpu, None).is_ok());
}

/// A transformer on a GPU: tiled projections for prefill's rows (half-height tiles where full ones
/// would leave compute units idle) and tiled attention, teams for one-row projections with the
/// unchecked norms, SwiGLUs and residual adds folded in, `llm_gemv` for a few rows; on a CPU
/// device (PoCL) every projection is `llm_gemv_rows`; f16 stores the weights alone as half; the
/// 8b weights' offsets pass as `long`.
#[test]
fn transformer_plans_pick_their_projection_kernels() {
    let (gpu, cpu) = (&devices()[0], &devices()[1]);
    let count = |plan: &Plan, k: &str| plan.launches.iter().filter(|l| l.kernel == k).count();
    let prefill = problem("llm", "prefill", &[("prompt", 32)], "f32");
    let g = prefill.llm_graph().unwrap();
    let plan = plan(&prefill, gpu, None).unwrap();
    assert_eq!(plan.launches.len(), g.steps.len());
    // 4 blocks × 4 projections over 32 rows: on 8 compute units q/k/v (4 tiles of 128), wo and
    // w2 (2) run 64-row tiles, gate/up (11) full ones; the LM head over the last row by teams.
    assert_eq!(count(&plan, "llm_matmul_64"), 12);
    assert_eq!(count(&plan, "llm_matmul"), 4);
    assert_eq!(count(&plan, "llm_gemv_team"), 1);
    assert_eq!(count(&plan, "llm_attention_tiled"), 4);
    assert_eq!(define(&plan, "BQ").as_deref(), Some("64"));
    check_plan(&prefill, &plan, gpu);
    let on_cpu = super::plan(&prefill, cpu, None).unwrap();
    assert_eq!(count(&on_cpu, "llm_gemv_rows"), 17);
    assert_eq!(count(&on_cpu, "llm_attention"), 4);
    assert_eq!(define(&on_cpu, "ATT_TILED"), None);
    // PoCL compiles every kernel of a program: the GPU ones are left out.
    assert_eq!(define(&on_cpu, "ROWS_ONLY").as_deref(), Some(""));
    assert_eq!(define(&on_cpu, "TEAM_WG"), None);
    assert_eq!(define(&plan, "ROWS_ONLY"), None);
    // Packed weights take the same tiles (their `llm_qmatmul` twins); the LM head by teams; on
    // the CPU a work-item a feature.
    for dtype in ["q8_0", "q4_0"] {
        let packed = problem("llm", "prefill", &[("prompt", 32)], dtype);
        let plan = super::plan(&packed, gpu, None).unwrap();
        assert_eq!(count(&plan, "llm_qmatmul_64"), 12, "{dtype}");
        assert_eq!(count(&plan, "llm_qmatmul"), 4, "{dtype}");
        assert_eq!(count(&plan, "llm_qgemv_team_32"), 1, "{dtype}");
        assert_eq!(count(&plan, "llm_matmul") + count(&plan, "llm_qgemv"), 0);
        assert!(
            plan.config["projections"].starts_with("16 tiled")
                && plan.config["projections"].contains("; 16 of quantized blocks"),
            "{dtype}: {:?}",
            plan.config
        );
        check_plan(&packed, &plan, gpu);
        let on_cpu = super::plan(&packed, cpu, None).unwrap();
        assert_eq!(count(&on_cpu, "llm_qgemv"), 17, "{dtype}");
    }

    // Three passes, every one kept: blocks 0 and 3 keep their 11 checked steps, blocks 1 and 2
    // fold theirs into 5 launches (norm+wqkv+rope, sdpa, wo+add, norm+gate/up+swiglu, w2+add).
    let decode = problem("llm", "decode", &[("gen", 3)], "f16");
    let g = decode.llm_graph().unwrap();
    let plan = plan_of(&decode, gpu);
    assert_eq!(plan.launches.len(), g.steps.len() - 3 * 2 * 6);
    assert_eq!(plan.config["folded_steps"], "36");
    assert_eq!(count(&plan, "llm_rope"), 3 * 2);
    assert_eq!(count(&plan, "llm_matmul"), 0);
    assert_eq!(count(&plan, "llm_gemv"), 0);
    assert_eq!(count(&plan, "llm_gemv_team"), 3 * 17);
    assert_eq!(count(&plan, "llm_rmsnorm"), 3 * (2 * 2 + 1));
    assert_eq!(count(&plan, "llm_swiglu"), 3 * 2);
    assert_eq!(count(&plan, "llm_add"), 3 * 2 * 2);
    check_plan(&decode, &plan, gpu);
    let team_args = |l: &Launch| {
        let a = &l.args;
        (a[10].clone(), a[13].clone(), a[15].clone(), a[17].clone())
    };
    let folded: Vec<_> = plan
        .launches
        .iter()
        .filter(|l| l.kernel == "llm_gemv_team")
        .map(team_args)
        .collect();
    // Block 1 of pass 0: norm + wqkv + RoPE, wo + add, norm + gate/up + SwiGLU, w2 + add.
    let norm = |a: &Arg| *a == Arg::Int(1);
    let added = |a: &Arg| *a == Arg::Int(1);
    let b1 = &folded[4..8];
    assert_eq!(
        b1.iter().map(|f| f.3.clone()).collect::<Vec<_>>(),
        [Arg::Int(1), Arg::Int(0), Arg::Int(0), Arg::Int(0)]
    );
    // The RoPE'd projection takes (8 + 2·4)·32 / 2 pairs of rows, writing q to the RoPE's output.
    let roped = plan
        .launches
        .iter()
        .filter(|l| l.kernel == "llm_gemv_team")
        .nth(4)
        .unwrap();
    let rope = plan
        .launches
        .iter()
        .find(|l| l.kernel == "llm_rope")
        .unwrap();
    assert_eq!(roped.args[8], Arg::Int(256));
    // The same table as block 0's RoPE (every block's).
    assert_eq!(
        (&roped.args[18], &roped.args[19]),
        (&rope.args[1], &rope.args[4])
    );
    assert!(norm(&b1[0].0) && !added(&b1[0].1) && b1[0].2 == Arg::Int(0));
    assert!(!norm(&b1[1].0) && added(&b1[1].1) && b1[1].2 == Arg::Int(0));
    assert!(norm(&b1[2].0) && !added(&b1[2].1) && b1[2].2 == Arg::Int(1));
    assert!(!norm(&b1[3].0) && added(&b1[3].1) && b1[3].2 == Arg::Int(0));
    // Block 0 (checked) folds nothing.
    assert!(
        folded[..4]
            .iter()
            .all(|(g, a, u, r)| !norm(g) && !added(a) && *u == Arg::Int(0) && !norm(r))
    );
    assert_eq!(define(&plan, "TEAM").as_deref(), Some("32"));
    assert_eq!(define(&plan, "TEAM_WG").as_deref(), Some("256"));
    assert_eq!(define(&plan, "FT").as_deref(), Some("4"));
    // Two rows a pass: llm_gemv, nothing folded.
    let two = plan_of(
        &problem("llm", "decode", &[("gen", 3), ("batch", 2)], "f16"),
        gpu,
    );
    assert_eq!(count(&two, "llm_gemv"), 3 * 17);
    assert_eq!(two.config["folded_steps"], "0");
    let wide = plan_of(
        &problem("llm", "decode", &[("model", 2), ("gen", 1)], "f16"),
        gpu,
    );
    assert_eq!(count(&wide, "llm_gemv_team"), 16 * 4 + 1);
    assert_eq!(wide.config["folded_steps"], (14 * 6).to_string());
    assert_eq!(plan.input_storage[1], Storage::F16);
    assert_eq!(plan.input_storage[0], Storage::F32);
    assert_eq!(define(&plan, "W_HALF").as_deref(), Some(""));
    assert_eq!(define(&plan, "HEAD_DIM").as_deref(), Some("32"));

    let big = problem("llm", "decode", &[("model", 3), ("gen", 1)], "f16");
    let plan = plan_of(&big, gpu);
    let head = plan
        .launches
        .iter()
        .rev()
        .find(|l| l.kernel == "llm_gemv_team")
        .unwrap();
    // The LM head of the untied 8b sits past 2^31 elements of the weights.
    let Arg::Long(off) = head.args[4] else {
        panic!("the weight offset is a long: {:?}", head.args[4])
    };
    assert!(off > i64::from(i32::MAX));
}

fn plan_of(p: &Problem, caps: &DeviceCaps) -> Plan {
    super::plan(p, caps, None).unwrap()
}

#[test]
fn compute_peak_builds_its_type_where_the_device_has_it() {
    let mut gpu = devices().remove(0);
    (gpu.fp16, gpu.fp64, gpu.int8_dot) = (true, true, true);
    for v in gpufleet_kernels::PEAK_VARIANTS {
        let p = problem("compute_peak", v, &[("items", 1000), ("pairs", 3)], "f32");
        let plan = plan(&p, &gpu, None).unwrap();
        assert_eq!(plan.launches[0].kernel, format!("compute_peak_{v}"));
        // 1000 items in groups of 256: 4 groups, the last one partly idle (the kernel checks).
        assert_eq!(plan.launches[0].global, vec![1024]);
        assert_eq!(
            plan.launches[0].args,
            vec![Arg::Input(0), Arg::Output, Arg::Int(1000), Arg::Int(3)]
        );
        assert!(define(&plan, "GPUFLEET_HAS_FP64").is_some());
        assert!(define(&plan, "GPUFLEET_HAS_FP16").is_some());
        assert!(define(&plan, "GPUFLEET_HAS_INT8_DOT").is_some());
    }
    // Without the extension int8 is refused, naming it, and no other variant asks for it.
    gpu.int8_dot = false;
    let int8 = problem(
        "compute_peak",
        "int8",
        &[("items", 10), ("pairs", 3)],
        "f32",
    );
    let err = plan(&int8, &gpu, None).unwrap_err();
    assert!(err.0.contains("cl_khr_integer_dot_product"), "{err}");
    let fp32 = problem(
        "compute_peak",
        "fp32",
        &[("items", 10), ("pairs", 3)],
        "f32",
    );
    assert!(define(&plan(&fp32, &gpu, None).unwrap(), "GPUFLEET_HAS_INT8_DOT").is_none());
}

/// Decode attention over a long cache with fewer (row, head) groups than two a compute unit is
/// split along the sequence: `llm_attention` writes each chunk's partials to scratch 0 and
/// `llm_attention_merge` follows it; a short cache, or enough groups, is not split.
#[test]
fn long_decode_attention_is_split_and_merged_on_scratch() {
    let gpu = &devices()[0];
    let count = |plan: &Plan, k: &str| plan.launches.iter().filter(|l| l.kernel == k).count();
    // tiny: 8 heads on 8 compute units, 301 positions: 4 chunks of 76 (about 4 groups a unit).
    let long = problem("llm", "decode", &[("gen", 1), ("context", 300)], "f32");
    let plan = plan_of(&long, gpu);
    check_plan(&long, &plan, gpu);
    assert_eq!(count(&plan, "llm_attention"), 4);
    assert_eq!(count(&plan, "llm_attention_merge"), 4);
    assert_eq!(plan.scratch_bytes, vec![4 * 8 * 4 * (32 + 2)]);
    for (i, l) in plan.launches.iter().enumerate() {
        if l.kernel == "llm_attention" {
            assert_eq!(l.args[4], Arg::Scratch(0));
            assert_eq!(l.args[16..], [Arg::Int(76), Arg::Int(4)]);
            assert_eq!(l.global, vec![8 * 4 * l.local.as_ref().unwrap()[0]]);
            let merge = &plan.launches[i + 1];
            assert_eq!(merge.kernel, "llm_attention_merge");
            assert_eq!(
                (&merge.args[0], &merge.args[1]),
                (&Arg::Scratch(0), &Arg::Output)
            );
            // Written where the unsplit attention writes.
            assert_eq!(merge.args[2], l.args[8]);
            assert_eq!(
                merge.args[3..],
                [Arg::Int(8 * 32), Arg::Int(32), Arg::Int(4)]
            );
        }
    }
    assert!(plan.config["attention_split"].starts_with("4 split"));
    // The merges are launches, not folded steps.
    let g = long.llm_graph().unwrap();
    assert_eq!(
        plan.config["folded_steps"],
        (g.steps.len() + 4 - plan.launches.len()).to_string()
    );
    for short in [
        problem("llm", "decode", &[("gen", 1), ("context", 20)], "f32"),
        problem(
            "llm",
            "decode",
            &[("gen", 1), ("context", 300), ("batch", 2)],
            "f32",
        ),
    ] {
        let plan = plan_of(&short, gpu);
        assert_eq!(count(&plan, "llm_attention_merge"), 0);
        assert!(plan.scratch_bytes.is_empty());
        assert!(!plan.config.contains_key("attention_split"));
        let att = plan.launches.iter().find(|l| l.kernel == "llm_attention");
        assert_eq!(att.unwrap().args[17], Arg::Int(1));
    }
}

/// A packed decode's team gemvs widen their teams (the kernel `llm_qgemv_team_<lanes>`) where a
/// projection has too few features to give every compute unit 2,048 work-items: on 132 compute
/// units, `8b`'s down projection (14,336 × 4,096) takes teams of the whole group and its unfolded
/// gate/up (4,096 × 28,672) twice the 32, capped at a block a work-item (k / 32), under the
/// experiment switch; by default every team stays at 32; the grid covers the features the wider
/// teams take; the folds are `llm_gemv_team`'s.
#[test]
fn packed_team_gemvs_widen_their_teams_for_narrow_projections() {
    let mut gpu = devices().remove(0);
    gpu.compute_units = 132;
    let lanes_of = |plan: &Plan| -> Vec<(i32, i32, usize)> {
        let int = |a: &Arg| match a {
            Arg::Int(v) => *v,
            other => panic!("an int argument: {other:?}"),
        };
        plan.launches
            .iter()
            .filter_map(|l| {
                let lanes: usize = l.kernel.strip_prefix("llm_qgemv_team_")?.parse().ok()?;
                let (k, n) = (int(&l.args[8]), int(&l.args[9]));
                assert_eq!(l.args.len(), 29, "{l:?}");
                let covered = l.global[0] / 256 * (256 / lanes) * 4;
                assert!(covered >= n as usize || l.global[0] / 256 == 65536, "{l:?}");
                Some((k, n, lanes))
            })
            .collect()
    };
    for dtype in ["q4_0", "q8_0"] {
        let p = problem("llm", "decode", &[("model", 3), ("gen", 1)], dtype);
        gpu.wide_quant_teams = true;
        let plan = plan_of(&p, &gpu);
        gpu.wide_quant_teams = false;
        check_plan(&p, &plan, &gpu);
        let wide = lanes_of(&plan);
        let lanes = |k, n| wide.iter().find(|s| (s.0, s.1) == (k, n)).map(|s| s.2);
        assert_eq!(lanes(14336, 4096), Some(256), "{dtype}: {wide:?}");
        assert_eq!(lanes(4096, 4096), Some(128), "{dtype}: {wide:?}");
        assert_eq!(lanes(4096, 28672), Some(64), "{dtype}: {wide:?}");
        assert_eq!(lanes(4096, 128256), Some(32), "{dtype}: {wide:?}");
        assert!(
            wide.iter().all(|s| s.2 <= s.0 as usize / 32),
            "{dtype}: {wide:?}"
        );
        // Past the checked first block the packed teams fold as llm_gemv_team does: the norm
        // before (argument 11), the residual add (14), the SwiGLU (16) and the RoPE (18) after.
        for (at, what) in [(11, "norm"), (14, "add"), (16, "glu"), (18, "rope")] {
            let on = plan
                .launches
                .iter()
                .filter(|l| l.kernel.starts_with("llm_qgemv_team_") && l.args[at] == Arg::Int(1))
                .count();
            assert!(on >= 30, "{dtype}: {what} folded into {on} launches");
        }
        assert_eq!(lanes(4096, 14336), Some(128), "{dtype}: the folded gate/up");
        assert_eq!(lanes(4096, 3072), Some(128), "{dtype}: the folded q/k/v");
        let narrow = lanes_of(&plan_of(&p, &gpu));
        assert_eq!(narrow.len(), wide.len());
        assert!(narrow.iter().all(|s| s.2 == 32), "{dtype}: {narrow:?}");
    }
}
