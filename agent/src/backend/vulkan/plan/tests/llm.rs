//! The transformer planner (`plan/llm.rs`): one dispatch per step with its tensors' buffers bound,
//! but a one-row projection's `llm_gemv_team` with the steps it folds in; half weights where the
//! device has 16-bit storage, and groups within every device's limits.

use super::*;
use crate::backend::planning::llm::folded;
use crate::backend::vulkan::plan::llm::{COOPMAT_ROWS, COOPMAT_TILE_FEATURES, COOPMAT_TILE_ROWS};
use gpufleet_kernels::llm::{Buf, LlmGraph, Op};

/// `llm` tiny at the smoke suite's sizes.
fn tiny_llm(variant: &str, dtype: &str) -> Problem {
    problem(
        "llm",
        variant,
        &[("model", 0), ("prompt", 32), ("context", 16), ("gen", 8)],
        dtype,
    )
}

/// The binding of a tensor's buffer, as the planner makes it.
fn bound(buf: Buf) -> Binding {
    match buf {
        Buf::Input(i) => Binding::Input(i),
        Buf::Arena => Binding::Output,
    }
}

/// The steps each dispatch does, in order: a folded projection's, or one step.
fn dispatched_steps(graph: &LlmGraph) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < graph.steps.len() {
        let n = folded(graph, at, true).map_or(1, |f| f.steps);
        out.push(at..at + n);
        at += n;
    }
    out
}

/// Whether `b` binds a slice of the weights (input 1).
fn weights_slice(b: &Binding) -> bool {
    matches!(b, Binding::Slice { input: 1, .. })
}

#[test]
fn every_step_is_one_dispatch_reading_its_buffers_and_writing_the_arena() {
    for variant in ["prefill", "decode"] {
        let p = tiny_llm(variant, "f32");
        let graph = p.llm_graph().unwrap();
        let ranges = dispatched_steps(&graph);
        for caps in devices() {
            let plan = plan(&p, &caps, None).unwrap_or_else(|e| panic!("{variant}: {e}"));
            check_plan(&p, &plan, &caps);
            // A split attention's merge follows its attention step and is no step of its own.
            let stepped: Vec<&Dispatch> = plan
                .dispatches
                .iter()
                .filter(|d| d.shader != "llm_attention_merge")
                .collect();
            assert_eq!(stepped.len(), ranges.len(), "{variant}");
            assert_eq!(plan.input_storage, vec![Storage::F32; 4]);
            for (r, d) in ranges.iter().zip(stepped) {
                let s = &graph.steps[r.start];
                let what = format!("{variant} {}", s.name);
                if let Some(f) = folded(&graph, r.start, true) {
                    // x (the norm's input where one is folded in), W, the arena, the addend.
                    assert!(
                        d.shader.starts_with("llm_gemv_team"),
                        "{what}: {}",
                        d.shader
                    );
                    assert_eq!(d.bindings[0], bound(f.x.buf), "{what}");
                    assert!(weights_slice(&d.bindings[1]), "{what}");
                    assert_eq!(d.bindings[2], Binding::Output, "{what}");
                    assert_eq!(d.bindings[3], bound(f.add.unwrap_or(f.out).buf), "{what}");
                    continue;
                }
                assert!(d.shader.starts_with("llm_"), "{what}: {}", d.shader);
                assert_eq!(d.bindings[0], bound(s.x.buf), "{what}");
                // Attention writes the arena at binding 3 and its partials (split) at 4, which
                // the tiled one has not; it, the embedding and RoPE read the pass shift last.
                let written = match s.op {
                    Op::Attention { .. } if d.shader == "llm_attention_tile" => {
                        assert_eq!(d.bindings[4..], [Binding::Scratch(0)], "{what}");
                        3
                    }
                    Op::Attention { .. } => {
                        assert!(
                            [Binding::Output, Binding::Scratch(1)].contains(&d.bindings[4]),
                            "{what}"
                        );
                        assert_eq!(d.bindings[5], Binding::Scratch(0), "{what}");
                        3
                    }
                    Op::Embed { .. } | Op::Rope { .. } => {
                        assert_eq!(d.bindings[3], Binding::Scratch(0), "{what}");
                        2
                    }
                    _ => d.bindings.len() - 1,
                };
                assert_eq!(d.bindings[written], Binding::Output, "{what}");
                let weights = matches!(
                    s.op,
                    Op::Embed { .. } | Op::RmsNorm { .. } | Op::Linear { .. }
                );
                if weights {
                    assert!(weights_slice(&d.bindings[1]), "{what}");
                }
                if let Op::Attention { cache, .. } = s.op {
                    assert_eq!(d.bindings[1..3], [bound(cache.k.buf), bound(cache.v.buf)]);
                }
            }
        }
    }
}

#[test]
fn half_weights_are_stored_and_read_as_half_where_the_device_has_16_bit_storage() {
    for (kernel, p) in [
        ("llm", tiny_llm("decode", "f16")),
        (
            "gemv",
            problem("gemv", "", &[("k", 256), ("n", 688)], "f16"),
        ),
    ] {
        let planned = plan(&p, &polaris(), None).unwrap();
        check_plan(&p, &planned, &polaris());
        assert_eq!(planned.input_storage[1], Storage::F16, "{kernel}");
        assert_eq!(planned.output_storage, Storage::F32, "{kernel}");
        let linear: Vec<&str> = planned
            .dispatches
            .iter()
            .map(|d| d.shader.as_str())
            .filter(|s| s.starts_with("llm_linear") || s.starts_with("llm_gemv_team"))
            .collect();
        assert!(
            !linear.is_empty()
                && linear
                    .iter()
                    .all(|s| ["llm_linear_f16_subgroup", "llm_gemv_team_f16_subgroup"].contains(s)),
            "{linear:?}"
        );
        // The inputs other than the weights stay f32.
        for (i, s) in planned.input_storage.iter().enumerate() {
            assert_eq!(*s == Storage::F16, i == 1, "{kernel} input {i}");
        }
        let err = plan(&p, &tiny(), None).unwrap_err();
        assert!(
            err.0.contains(&format!("dtype f16 of {kernel}"))
                && err.0.contains("storageBuffer16BitAccess"),
            "{err}"
        );
    }
}

#[test]
fn groups_stay_within_the_device_and_shared_memory_and_the_widest_head_fits() {
    // The widest gemv: more feature blocks than one dispatch's groups, strided.
    let p = problem(
        "gemv",
        "",
        &[("batch", 300), ("k", 64), ("n", 262_144)],
        "f32",
    );
    for caps in devices() {
        let plan = plan(&p, &caps, None).unwrap();
        check_plan(&p, &plan, &caps);
        let d = &plan.dispatches[0];
        assert_eq!(d.groups[0], 65535);
        assert_eq!(d.groups[1], 75, "300 rows, 4 a group");
        // The partials fit the device's shared memory.
        let g = spec(d, SPEC_LOCAL_X).unwrap() as usize;
        assert!(64 * g <= caps.max_shared_memory_bytes as usize, "{g}");
    }
    let heads = |hd| {
        problem(
            "attention",
            "decode",
            &[
                ("batch", 1),
                ("tokens", 1),
                ("context", 8),
                ("heads", 2),
                ("kv_heads", 1),
                ("head_dim", hd),
            ],
            "f32",
        )
    };
    for caps in devices() {
        for hd in [2, 62, 64, 130, 512] {
            let p = heads(hd);
            let plan = plan(&p, &caps, None).unwrap_or_else(|e| panic!("hd {hd}: {e}"));
            check_plan(&p, &plan, &caps);
        }
    }
    // One (row, head) a group, strided past 65535.
    let p = problem(
        "attention",
        "prefill",
        &[
            ("batch", 64),
            ("tokens", 1024),
            ("heads", 32),
            ("kv_heads", 8),
        ],
        "f32",
    );
    let plan = plan(&p, &nvidia(), None).unwrap();
    assert_eq!(plan.dispatches[0].groups, [65535, 1, 1]);
}

#[test]
fn the_configuration_names_the_shaders_and_the_weights() {
    let p = tiny_llm("decode", "f16");
    let plan = plan(&p, &lavapipe(), None).unwrap();
    let c = &plan.config;
    assert_eq!(c["dispatches"], plan.dispatches.len().to_string());
    assert!(
        c["shaders"].contains("llm_gemv_team_f16_subgroup ×"),
        "{c:?}"
    );
    let folded: usize = c["folded_steps"].parse().unwrap();
    assert_eq!(
        folded + plan.dispatches.len(),
        c["steps"].parse::<usize>().unwrap()
    );
    assert!(c["weights"].starts_with("f16"), "{c:?}");
}

#[test]
fn projections_read_4_vectors_where_every_row_is_aligned_and_reduce_by_subgroups_where_they_can() {
    let vec4 = |k: i64, caps: &VkCaps| {
        let p = problem("gemv", "", &[("batch", 2), ("k", k), ("n", 9)], "f32");
        let plan = plan(&p, caps, None).unwrap();
        check_plan(&p, &plan, caps);
        let d = &plan.dispatches[0];
        (spec(d, 2).unwrap(), d.shader.clone())
    };
    assert_eq!(vec4(256, &nvidia()), (1, "llm_linear_subgroup".into()));
    assert_eq!(vec4(257, &nvidia()), (0, "llm_linear_subgroup".into()));
    assert_eq!(vec4(256, &tiny()), (1, "llm_linear".into()));
    // Every projection of the model is aligned (the team gemv's ALIGNED is constant 2 too).
    let p = tiny_llm("decode", "f32");
    let plan = plan(&p, &lavapipe(), None).unwrap();
    let projections: Vec<&Dispatch> = plan
        .dispatches
        .iter()
        .filter(|d| d.shader.starts_with("llm_linear") || d.shader.starts_with("llm_gemv_team"))
        .collect();
    assert!(!projections.is_empty());
    for d in projections {
        assert_eq!(spec(d, 2), Some(1), "{d:?}");
    }
}

/// A decode block's 11 steps take 6 dispatches: the norms, the SwiGLU and the residual adds go
/// into the projections' `llm_gemv_team`, teams of subgroups where the device reduces by them and
/// of shared memory otherwise (sized to the device's subgroup, within the group).
#[test]
fn a_decode_block_is_five_dispatches_with_the_norms_swiglu_adds_and_rope_folded_in() {
    let p = problem(
        "llm",
        "decode",
        &[("model", 0), ("prompt", 32), ("context", 16), ("gen", 1)],
        "f32",
    );
    let graph = p.llm_graph().unwrap();
    for caps in devices() {
        let plan = plan(&p, &caps, None).unwrap();
        check_plan(&p, &plan, &caps);
        let first = plan
            .dispatches
            .iter()
            .find(|d| d.shader.starts_with("llm_gemv_team"))
            .unwrap();
        let group = spec(first, 0).unwrap();
        let by_subgroups = caps.subgroup_arithmetic
            && caps.subgroup_size >= 4
            && group.is_multiple_of(caps.subgroup_size);
        let team = if by_subgroups {
            "llm_gemv_team_subgroup"
        } else {
            "llm_gemv_team"
        };
        // A block that keeps its tensors for the step-by-step check folds nothing; the others
        // are norm+wqkv+rope, attention, wo+add, norm+gate/up+SwiGLU, w2+add.
        let pattern = [team, "llm_attention", team, team, team];
        let at = plan
            .dispatches
            .windows(5)
            .position(|w| w.iter().map(|d| d.shader.as_str()).eq(pattern))
            .unwrap_or_else(|| panic!("no folded block on {caps:?}"));
        let block = &plan.dispatches[at..at + 5];
        // NORM, GLU, ADD, ROPE.
        let flags = |d: &Dispatch| [3, 4, 5, 9].map(|id| spec(d, id).unwrap());
        assert_eq!(flags(&block[0]), [1, 0, 0, 1]);
        assert_eq!(flags(&block[2]), [0, 0, 1, 0]);
        assert_eq!(flags(&block[3]), [1, 1, 0, 0]);
        assert_eq!(flags(&block[4]), [0, 0, 1, 0]);
        // The RoPE'd projection: (8 + 2·4)·32 / 2 pairs of rows; the table bound at 5.
        assert_eq!(block[0].push[2], 256);
        assert_eq!(block[0].bindings.len(), 6);
        let teams = [&block[0]];
        if !by_subgroups {
            let (group, team) = (spec(teams[0], 0).unwrap(), spec(teams[0], 6).unwrap());
            assert!(
                team >= 1 && team <= group && group % team == 0,
                "{group} {team}"
            );
        }
        assert!(plan.dispatches.len() < graph.steps.len());
    }
}

#[test]
fn weights_past_4_gib_are_bound_a_tensor_at_a_time_with_offsets_from_the_slice() {
    // 8b in f16 (7.0e9 halves) and 1b in f32 (4.9 GB): past one binding and a `uint` offset.
    for (model, dtype) in [(3, "f16"), (2, "f32")] {
        let p = problem(
            "llm",
            "decode",
            &[("model", model), ("prompt", 4), ("context", 8), ("gen", 2)],
            dtype,
        );
        let caps = nvidia();
        let planned = plan(&p, &caps, None).unwrap_or_else(|e| panic!("{model} {dtype}: {e}"));
        check_plan(&p, &planned, &caps);
        let elem = planned.input_storage[1].size();
        let mut last_end = 0;
        for d in &planned.dispatches {
            let Some(&Binding::Slice { first, len, .. }) = d.bindings.get(1) else {
                continue;
            };
            // One tensor (or a norm's gains and the projection after it): far below 4 GiB.
            assert!(len * elem < 1 << 31, "{}: {len}", d.shader);
            last_end = last_end.max(first + len);
        }
        // The slices reach the end of the weights (the last block and the head).
        let weights = gpufleet_kernels::llm::LlmModel::from_index(model)
            .unwrap()
            .config()
            .weights_len();
        assert!(last_end * elem > 1 << 32, "{model} {dtype}: {last_end}");
        assert!(last_end <= weights, "{last_end} of {weights}");
    }
}

/// The checked plan of `1b` f16 decode of two tokens after `context` cached positions on the
/// H200 (132 SMs).
fn h200_1b_decode(context: i64) -> Plan {
    let p = problem(
        "llm",
        "decode",
        &[
            ("model", 2),
            ("prompt", 4),
            ("context", context),
            ("gen", 2),
        ],
        "f16",
    );
    let planned = plan(&p, &h200(), None).unwrap();
    check_plan(&p, &planned, &h200());
    planned
}

/// NVIDIA's capabilities with the H200's 132 SMs.
fn h200() -> VkCaps {
    VkCaps {
        compute_units: 132,
        ..nvidia()
    }
}

/// Packed weights' decode projections read whole words of aligned blocks, a lane a quarter of QB
/// blocks a trip (2, or what the debug switch put in `quant_blocks`), with every lane's split
/// leaving it at least one trip of k.
#[test]
fn quantized_decode_projections_take_quarters_of_aligned_blocks_a_lane() {
    for (quant_blocks, want) in [(0, 2), (1, 1), (4, 4)] {
        let caps = VkCaps {
            quant_blocks,
            ..h200()
        };
        for dtype in ["q4_0", "q8_0"] {
            let p = problem(
                "llm",
                "decode",
                &[("model", 2), ("prompt", 4), ("gen", 2)],
                dtype,
            );
            let planned = plan(&p, &caps, None).unwrap();
            check_plan(&p, &planned, &caps);
            let teams: Vec<_> = planned
                .dispatches
                .iter()
                .filter(|d| d.shader.starts_with("llm_gemv_team_q"))
                .collect();
            assert!(teams.len() >= 4, "{dtype}: {:?}", planned.config);
            for d in teams {
                // k, and the values' byte offset (the next-to-last push constant) a 16-byte load's.
                let (k, values) = (d.push[1], d.push[d.push.len() - 2]);
                assert_eq!(spec(d, 2), Some(1), "{dtype} {}: aligned", d.label);
                assert_eq!(values % 16, 0, "{dtype} {}", d.label);
                assert_eq!(spec(d, 10), Some(want), "{dtype} {}: QB", d.label);
                // A trip of a subgroup of 32 is 8·QB blocks; a split leaves each team one.
                let split = spec(d, 7).unwrap();
                assert!(
                    split >= 1 && k / 32 / (8 * want) >= split,
                    "{dtype} {}: split {split}",
                    d.label
                );
            }
        }
    }
}

/// Packed weights' team gemvs take their dot products in integers as the device's `quant_dot` says:
/// Q8_0 only where the device accelerates dot products of packed bytes, both formats with the
/// debug switch, neither without.
#[test]
fn quantized_team_gemvs_run_on_integer_dot_products_as_the_device_says() {
    for (quant_dot, dot_formats) in [
        (QuantDot::Q8, &["q8"][..]),
        (QuantDot::All, &["q8", "q4"][..]),
        (QuantDot::Off, &[][..]),
    ] {
        let caps = VkCaps {
            quant_dot,
            ..h200()
        };
        for dtype in ["q4_0", "q8_0"] {
            let p = problem("llm", "decode", &[("model", 1), ("gen", 2)], dtype);
            let planned = plan(&p, &caps, None).unwrap();
            check_plan(&p, &planned, &caps);
            let format = &dtype[..2];
            let dot = if dot_formats.contains(&format) {
                "_dot"
            } else {
                ""
            };
            let want = format!("llm_gemv_team_{format}{dot}_subgroup");
            let teams: Vec<&str> = planned
                .dispatches
                .iter()
                .map(|d| d.shader.as_str())
                .filter(|s| s.starts_with("llm_gemv_team"))
                .collect();
            assert!(
                !teams.is_empty() && teams.iter().all(|s| *s == want),
                "{dtype} {quant_dot:?}: {teams:?}"
            );
        }
    }
}

#[test]
fn packed_prefill_projections_run_the_linear_groups_four_weights_a_load() {
    // 1b prefill of 64 rows: every projection llm_linear_q*'s groups (four features × four rows),
    // reading four weights a load; no shader an invocation per feature.
    for (dtype, shader) in [
        ("q8_0", "llm_linear_q8_subgroup"),
        ("q4_0", "llm_linear_q4_subgroup"),
    ] {
        let p = problem("llm", "prefill", &[("model", 2), ("prompt", 64)], dtype);
        let planned = plan(&p, &h200(), None).unwrap();
        check_plan(&p, &planned, &h200());
        let linear: Vec<_> = planned
            .dispatches
            .iter()
            .filter(|d| d.shader == shader)
            .collect();
        // Q/K/V, output, gate/up and down of 16 blocks, and the head.
        assert!(linear.len() >= 16 * 4, "{dtype}: {:?}", planned.config);
        for d in linear {
            let (rows, n) = (d.push[0], d.push[2]);
            assert_eq!(
                spec(d, 2),
                Some(1),
                "{dtype} {}: four weights a load",
                d.label
            );
            assert_eq!(
                d.push[4], 0,
                "{dtype} {}: elements count from the matrix",
                d.label
            );
            assert_eq!(
                d.push.len(),
                8,
                "{dtype} {}: values and scales last",
                d.label
            );
            assert!(
                d.push[6] % 4 == 0 && d.push[7] > d.push[6],
                "{dtype} {}",
                d.label
            );
            assert!(
                d.groups[0] >= 1 && d.groups[0] <= n.div_ceil(4),
                "{dtype} {}",
                d.label
            );
            assert!(
                d.groups[1] >= 1 && d.groups[1] <= rows.div_ceil(4),
                "{dtype} {}",
                d.label
            );
        }
        assert!(
            planned
                .dispatches
                .iter()
                .all(|d| !d.shader.starts_with("llm_qgemv")),
            "{dtype}"
        );
    }
}

#[test]
fn packed_projections_aim_at_more_teams_in_flight_than_half_ones() {
    // 8b's folded gate/up projection (4,096 × 28,672 +norm +SwiGLU: 3,584 teams of 4 features) on
    // 132 SMs: f16 aims at 16 teams a unit and leaves it whole; q8_0 and q4_0 aim at 64 and split
    // it four ways (the group's teams; each lane still a block's worth of k a trip). w2 (14,336 ×
    // 4,096) is split four ways either way.
    let splits = |dtype: &str, label: &str| -> Vec<u32> {
        let p = problem(
            "llm",
            "decode",
            &[("model", 3), ("prompt", 4), ("gen", 2)],
            dtype,
        );
        let planned = plan(&p, &h200(), None).unwrap();
        let found: Vec<u32> = planned
            .dispatches
            .iter()
            .filter(|d| d.label.starts_with(label))
            .map(|d| spec(d, 7).unwrap())
            .collect();
        assert!(!found.is_empty(), "{dtype}: no {label}");
        found
    };
    let glu = "gemv 4096×28672 +norm +swiglu";
    assert!(splits("f16", glu).iter().all(|&s| s == 1));
    assert!(splits("f16", "gemv 14336×4096").iter().all(|&s| s == 4));
    for dtype in ["q8_0", "q4_0"] {
        let packed = splits(dtype, glu);
        assert!(packed.iter().all(|&s| s == 4), "{dtype}: {packed:?}");
        let w2 = splits(dtype, "gemv 14336×4096");
        assert!(w2.iter().all(|&s| s == 4), "{dtype}: {w2:?}");
    }
}

#[test]
fn narrow_projections_split_k_over_teams_so_enough_are_in_flight() {
    let split_of = |d: &Dispatch| spec(d, 7).unwrap();
    // Teams of 32, four a group.
    let planned = h200_1b_decode(8);
    let team = |label: &str| {
        planned
            .dispatches
            .iter()
            .find(|d| d.label.starts_with(label))
            .unwrap_or_else(|| panic!("{label}"))
    };
    // Aiming at 16 × 132 teams: 512 teams of 4 features (w2, wo) and 768 (wqkv) split four
    // ways, the group's teams; the folded gate/up (2,048 teams: 8,192 SwiGLU outputs) in two;
    // 4,096 (gate and up unfolded) and 32,064 (the head) not at all.
    assert_eq!(split_of(team("gemv 8192×2048")), 4);
    assert_eq!(split_of(team("gemv 2048×2048")), 4);
    assert_eq!(split_of(team("gemv 2048×3072")), 4);
    assert_eq!(split_of(team("gemv 2048×16384 +norm +swiglu")), 2);
    assert_eq!(split_of(team("gemv 2048×16384")), 1);
    assert_eq!(split_of(team("gemv 2048×128256")), 1);
}

#[test]
fn decode_attention_over_a_long_cache_is_split_along_the_sequence_and_merged() {
    // After 512 cached positions: 32 heads, one row, on 132 SMs.
    let planned = h200_1b_decode(512);
    let d = &planned.dispatches;
    let attention: Vec<usize> = (0..d.len())
        .filter(|&i| d[i].shader == "llm_attention")
        .collect();
    assert!(!attention.is_empty());
    for &i in &attention {
        // chunk, chunks: the last two words; 513 or 514 positions in 17 chunks (about four
        // groups an SM: 528 / 32 heads) of 31.
        let chunks = *d[i].push.last().unwrap() as usize;
        let chunk = d[i].push[d[i].push.len() - 2] as usize;
        assert_eq!(chunk, 31, "{:?}", d[i].push);
        assert_eq!(chunks, 17, "{:?}", d[i].push);
        assert_eq!(d[i].groups[0], 32 * 17);
        assert_eq!(d[i].bindings[4], Binding::Scratch(1));
        let merge = &d[i + 1];
        assert_eq!(merge.shader, "llm_attention_merge");
        assert_eq!(merge.push[..3], [32 * 64, 64, 17]);
        assert_eq!(merge.bindings, [Binding::Scratch(1), Binding::Output]);
        assert!(planned.scratch_bytes[1] >= 4 * 32 * 17 * 66);
    }
    assert!(planned.config["attention_split"].starts_with(&attention.len().to_string()));
    // A short cache is not split: tiny after at most 24 positions.
    let short = tiny_llm("decode", "f32");
    let planned = plan(&short, &h200(), None).unwrap();
    assert!(
        planned
            .dispatches
            .iter()
            .all(|d| d.shader != "llm_attention_merge")
    );
    // Only the pass shift.
    assert_eq!(planned.scratch_bytes, [4]);
}

#[test]
fn a_decode_replays_its_last_pass_after_the_cache_prefix() {
    let planned = h200_1b_decode(8);
    let r = planned.passes.replay.as_ref().expect("replayed");
    // The prefix: a copy of each block's keys and values; then two passes, both kept (one pass
    // back, then the last itself), the last's dispatches the body.
    assert_eq!(r.prologue, 2 * 16);
    assert!(
        planned.dispatches[..r.prologue]
            .iter()
            .all(|d| d.shader == "llm_eltwise")
    );
    assert_eq!(r.body.end, planned.dispatches.len());
    assert_eq!(
        r.body.len(),
        planned.dispatches.len() - r.prologue - r.body.len()
    );
    let shifts: Vec<_> = (r.passes.iter())
        .map(|p| match p {
            Replayed::Body { shift, copy_to } => (*shift, *copy_to),
            Replayed::Own(_) => panic!("{p:?}"),
        })
        .collect();
    let region = r.region.clone().unwrap();
    assert_eq!(shifts[1], (0, None));
    assert_eq!(shifts[0].0, u32::MAX);
    assert!(shifts[0].1.unwrap() + region.len() <= region.start);
    assert_eq!(planned.passes.shift, Some(0));
    // Only the body's LM head moves the shift on.
    let advancing: Vec<usize> = (0..planned.dispatches.len())
        .filter(|&i| spec(&planned.dispatches[i], 8) == Some(1))
        .collect();
    assert_eq!(advancing, [planned.dispatches.len() - 1]);
    // Eight passes, three kept (0, 4, 7): the last one not kept (6) is the body, the kept ones
    // run their own dispatches.
    let p = problem("llm", "decode", &[("model", 2), ("gen", 8)], "f16");
    let planned = plan(&p, &h200(), None).unwrap();
    let r = planned.passes.replay.as_ref().expect("replayed");
    assert_eq!(r.region, None);
    let own: Vec<usize> = (0..8)
        .filter(|&i| matches!(r.passes[i], Replayed::Own(_)))
        .collect();
    assert_eq!(own, [0, 4, 7]);
    assert!(matches!(
        r.passes[6],
        Replayed::Body {
            shift: 0,
            copy_to: None
        }
    ));
    assert!(matches!(r.passes[1], Replayed::Body { shift, .. } if shift == 1u32.wrapping_sub(6)));
    let Replayed::Own(last) = &r.passes[7] else {
        unreachable!()
    };
    // The body folds every block: fewer dispatches than a kept pass.
    assert!(r.body.len() < last.len(), "{:?} {last:?}", r.body);
    assert_eq!(spec(&planned.dispatches[r.body.end - 1], 8), Some(1));
}

/// Half and packed weights over 16 rows or more (a prefill's projections) run on NVIDIA's
/// cooperative matrices where the device has them; one row (decode's team gemv), a few rows, f32
/// weights and a device without them keep their shaders.
#[test]
fn a_prefills_half_and_packed_projections_run_on_cooperative_matrices_where_the_device_has_them() {
    let coopmat = VkCaps {
        coopmat_f16: true,
        ..nvidia()
    };
    let linear = |variant: &str, dtype: &str, caps: &VkCaps| {
        let p = tiny_llm(variant, dtype);
        let plan = plan(&p, caps, None).unwrap();
        check_plan(&p, &plan, caps);
        let shaders: Vec<String> = plan
            .dispatches
            .iter()
            .filter(|d| d.shader.starts_with("llm_linear") || d.shader.starts_with("llm_gemv"))
            .map(|d| d.shader.clone())
            .collect();
        assert!(!shaders.is_empty(), "{variant} {dtype}");
        (plan, shaders)
    };
    for (dtype, shader, push_len) in [
        ("f16", "llm_linear_f16_coopmat", 6),
        ("q8_0", "llm_linear_q8_coopmat", 8),
        ("q4_0", "llm_linear_q4_coopmat", 8),
    ] {
        let (prefill, shaders) = linear("prefill", dtype, &coopmat);
        assert!(shaders.iter().any(|s| s == shader), "{dtype}: {shaders:?}");
        for d in &prefill.dispatches {
            if d.shader != shader {
                // Every projection of 16 rows or more is on cooperative matrices.
                assert!(
                    !d.shader.starts_with("llm_linear") || (d.push[0] as usize) < COOPMAT_ROWS,
                    "{dtype}: {d:?}"
                );
                continue;
            }
            // rows, k, n, x_off, w_off, out_off (then values and scales): tiles over features and
            // rows.
            let (rows, n) = (d.push[0], d.push[2]);
            assert!(rows as usize >= COOPMAT_ROWS, "{d:?}");
            let (tm, tn) = (COOPMAT_TILE_ROWS as u32, COOPMAT_TILE_FEATURES as u32);
            assert_eq!(d.groups, [n.div_ceil(tn), rows.div_ceil(tm), 1], "{d:?}");
            assert_eq!(spec(d, 2), Some(1), "{d:?}");
            assert_eq!(d.push.len(), push_len, "{d:?}");
        }
        assert!(
            prefill.config["linear"].starts_with("cooperative matrices"),
            "{dtype}: {:?}",
            prefill.config
        );
        let (_, shaders) = linear("decode", dtype, &coopmat);
        assert!(
            !shaders.iter().any(|s| s.contains("coopmat")),
            "{dtype}: {shaders:?}"
        );
    }
    for (dtype, caps) in [("f32", &coopmat), ("f16", &nvidia()), ("q4_0", &nvidia())] {
        let (_, shaders) = linear("prefill", dtype, caps);
        assert!(
            !shaders.iter().any(|s| s.contains("coopmat")),
            "{dtype} {shaders:?}"
        );
    }
}

#[test]
fn a_prefills_attention_takes_blocks_of_rows_where_the_shared_memory_holds_them() {
    let attention = |variant: &str, tokens: i64, head_dim: i64| {
        let params = [
            ("batch", 2),
            ("tokens", tokens),
            ("context", 3),
            ("heads", 4),
            ("kv_heads", 2),
            ("head_dim", head_dim),
        ];
        problem("attention", variant, &params, "f32")
    };
    let no_tiles = VkCaps {
        no_tile_attention: true,
        ..h200()
    };
    // (variant, rows a sequence, head width, device, rows a group; 0: `llm_attention`).
    let cases = [
        ("prefill", 40, 64, h200(), 32),
        ("prefill", 40, 128, h200(), 32),
        ("prefill", 40, 64, lavapipe(), 32),
        // 38,528 bytes for 32 rows of 128-wide heads: past lavapipe's 32 KiB.
        ("prefill", 40, 128, lavapipe(), 16),
        ("prefill", 40, 136, h200(), 0),
        ("prefill", 40, 62, h200(), 0),
        ("prefill", 15, 64, h200(), 0),
        ("prefill", 40, 64, tiny(), 0),
        ("prefill", 40, 64, no_tiles, 0),
        ("decode", 1, 64, h200(), 0),
    ];
    for (variant, tokens, head_dim, caps, bq) in cases {
        let what = format!("{variant} {tokens} rows, heads of {head_dim}, bq {bq}");
        let p = attention(variant, tokens, head_dim);
        let planned = plan(&p, &caps, None).unwrap_or_else(|e| panic!("{what}: {e}"));
        check_plan(&p, &planned, &caps);
        let d = &planned.dispatches[0];
        if bq == 0 {
            assert_eq!(d.shader, "llm_attention", "{what}");
            continue;
        }
        assert_eq!(d.shader, "llm_attention_tile", "{what}");
        let hd4 = head_dim as u32 / 4;
        assert_eq!(
            d.spec,
            [
                (0, SpecValue::U32(128)),
                (2, SpecValue::U32(hd4)),
                (3, SpecValue::U32(bq))
            ],
            "{what}"
        );
        // Two sequences of 40 rows, four heads.
        assert_eq!(d.groups[0], 2 * 40u32.div_ceil(bq) * 4, "{what}");
    }
}
