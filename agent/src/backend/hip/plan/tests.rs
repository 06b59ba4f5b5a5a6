//! Unit tests of the HIP planner: pure, no device.

use super::*;
use gpufleet_kernels::{Dtype, TRIAD_SCALAR};

fn problem(kernel: &str, variant: &str, dtype: &str, params: &[(&str, i64)]) -> Problem {
    crate::backend::planning::testing::problem(kernel, variant, params, dtype)
}

#[test]
fn every_launched_kernel_is_a_known_symbol() {
    let symbols = kernel_symbols();
    let caps = HipCaps::default();
    for (kernel, variants, dtypes) in supported() {
        for v in &variants {
            for d in &dtypes {
                let p = problem(kernel, v, d, &[]);
                if kernel == "transfer" {
                    // A copy, run by transfer.rs without a plan.
                    assert!(
                        plan(&p, &caps)
                            .unwrap_err()
                            .0
                            .contains("launches no kernel")
                    );
                    continue;
                }
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

#[test]
fn networks_run_model_conv_and_model_layer_in_blocks_of_256() {
    // ResNet-18 at batch 1 on a 304-CU MI300X: the last stage's few tiles are split.
    let caps = HipCaps {
        compute_units: 304,
        ..HipCaps::default()
    };
    let p = problem("resnet18", "default", "f32", &[("batch", 1)]);
    let plan = plan(&p, &caps).unwrap();
    assert!(plan.launches.iter().all(|l| l.block == [256, 1, 1]));
    let convs = plan.launches.iter().filter(|l| l.kernel == "model_conv");
    let split = convs.filter(|l| l.grid[2] > 1).count();
    assert!(split > 0, "an MI300X splits ResNet-18's last stage");
    assert_eq!(plan.scratch_bytes.len(), 1, "the partial sums");
    let reduces = plan
        .launches
        .iter()
        .filter(|l| l.kernel == "model_layer" && l.args[0] == Arg::Scratch(0))
        .count();
    assert_eq!(reduces, split);
    assert_eq!(plan.config["split_convolutions"], split.to_string());
}

/// A transformer on HIP: the dtype and head width pick the instantiation, prefill's projections
/// are tiled (grid in blocks of 64×64), decode's are gemv; heads the code objects have no
/// attention for are refused naming the widths that exist.
#[test]
fn transformer_plans_pick_their_instantiations() {
    let caps = HipCaps::default();
    let count = |plan: &Plan, k: &str| plan.launches.iter().filter(|l| l.kernel == k).count();
    let prefill = problem("llm", "prefill", "f32", &[("prompt", 70)]);
    let planned = plan(&prefill, &caps).unwrap();
    assert_eq!(
        planned.launches.len(),
        prefill.llm_graph().unwrap().steps.len()
    );
    assert_eq!(count(&planned, "llm_matmul_f32"), 16);
    assert_eq!(count(&planned, "llm_attention_hd32"), 4);
    let tiled = planned
        .launches
        .iter()
        .find(|l| l.kernel == "llm_matmul_f32")
        .unwrap();
    // The first QKV projection: 256 + 2·128 features over 70 rows.
    assert_eq!(tiled.grid, [8, 2, 1]);
    assert_eq!(tiled.block, [16, 16, 1]);
    // Packed weights: the same tiles by format (`llm_qmatmul_q8` / `_q4`), the norms f32.
    for (dtype, format) in [("q8_0", "q8"), ("q4_0", "q4")] {
        let packed = problem("llm", "prefill", dtype, &[("prompt", 70)]);
        let planned = plan(&packed, &caps).unwrap();
        assert_eq!(count(&planned, &format!("llm_qmatmul_{format}")), 16);
        let tiled = planned
            .launches
            .iter()
            .find(|l| l.kernel.starts_with("llm_qmatmul"))
            .unwrap();
        assert_eq!((tiled.grid, tiled.block), ([8, 2, 1], [16, 16, 1]));
        assert!(
            planned
                .launches
                .iter()
                .all(|l| kernel_symbols().contains(&l.kernel)),
            "{dtype}"
        );
    }

    let decode = problem("llm", "decode", "f16", &[("gen", 2)]);
    let planned = plan(&decode, &caps).unwrap();
    assert_eq!(count(&planned, "llm_gemv_f16"), 2 * 17);
    assert_eq!(count(&planned, "llm_rmsnorm_f16"), 2 * 9);
    assert_eq!(planned.input_storage[1], crate::backend::storage::Elem::F16);
    assert!(planned.launches.iter().all(|l| !l.kernel.ends_with("_f32")));

    // 8 heads over 301 positions on 64 compute units: split in 19 chunks of 16, then merged.
    let long = problem("llm", "decode", "f32", &[("gen", 1), ("context", 300)]);
    let planned = plan(&long, &caps).unwrap();
    assert_eq!(count(&planned, "llm_attention_merge"), 4);
    assert_eq!(planned.scratch_bytes, vec![4 * 8 * 19 * (32 + 2)]);
    let att = planned
        .launches
        .iter()
        .find(|l| l.kernel == "llm_attention_hd32")
        .unwrap();
    assert_eq!(att.grid[0], 8 * 19);
    assert_eq!(att.args[16..], [Arg::Int(16), Arg::Int(19)]);

    let odd = problem("attention", "decode", "f32", &[("head_dim", 48)]);
    let e = plan(&odd, &caps).unwrap_err();
    assert!(
        e.0.contains("32, 64, 128, 256") && e.0.contains("head_dim=48"),
        "{e}"
    );
}
