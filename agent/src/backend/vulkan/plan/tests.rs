//! Unit tests of the planners: pure, no device. Besides the plans' own invariants they read the
//! embedded SPIR-V and check each dispatch against the module it names: the descriptor bindings,
//! the push-constant block's size and the specialization-constant ids.

use super::args::{SPEC_LOCAL_Y, SPEC_SPLIT, SPEC_SPLIT_SOFTMAX};
use super::tuning::{blocked_local, blocked_shared_bytes, tuning_error};
use super::*;
use gpufleet_kernels::TRIAD_SCALAR;
use gpufleet_kernels::sources::vulkan as spv;
use std::collections::BTreeSet;

mod llm;

/// An NVIDIA H100-like GPU, lavapipe on a 256-bit CPU, RADV on a Polaris (no shaderFloat16), and a
/// very small device without subgroup arithmetic.
fn nvidia() -> VkCaps {
    VkCaps {
        subgroup_size: 32,
        subgroup_arithmetic: true,
        max_workgroup_invocations: 1024,
        max_workgroup_size: [1024, 1024, 64],
        max_shared_memory_bytes: 49152,
        shader_float16: true,
        shader_float64: true,
        integer_dot_product: true,
        quant_dot: QuantDot::Q8,
        storage_buffer_16bit: true,
        max_compute_workgroup_count: [2_147_483_647, 65535, 65535],
        vendor_id: 0x10de,
        compute_units: 132,
        scalar_attention: false,
        no_tile_attention: false,
        coopmat_f16: false,
        quant_blocks: 0,
    }
}

fn lavapipe() -> VkCaps {
    VkCaps {
        subgroup_size: 8,
        subgroup_arithmetic: true,
        max_workgroup_invocations: 1024,
        max_workgroup_size: [1024, 1024, 1024],
        max_shared_memory_bytes: 32768,
        shader_float16: true,
        shader_float64: true,
        integer_dot_product: true,
        quant_dot: QuantDot::Off,
        storage_buffer_16bit: true,
        max_compute_workgroup_count: [65535, 65535, 65535],
        vendor_id: 0x10005,
        compute_units: 0,
        scalar_attention: false,
        no_tile_attention: false,
        coopmat_f16: false,
        quant_blocks: 0,
    }
}

fn polaris() -> VkCaps {
    VkCaps {
        subgroup_size: 64,
        subgroup_arithmetic: true,
        max_workgroup_invocations: 1024,
        max_workgroup_size: [1024, 1024, 1024],
        max_shared_memory_bytes: 65536,
        shader_float16: false,
        shader_float64: true,
        integer_dot_product: false,
        quant_dot: QuantDot::Off,
        storage_buffer_16bit: true,
        max_compute_workgroup_count: [u32::MAX, 65535, 65535],
        vendor_id: 0x1002,
        compute_units: 36,
        scalar_attention: false,
        no_tile_attention: false,
        coopmat_f16: false,
        quant_blocks: 0,
    }
}

fn tiny() -> VkCaps {
    VkCaps {
        subgroup_size: 4,
        subgroup_arithmetic: false,
        max_workgroup_invocations: 64,
        max_workgroup_size: [64, 64, 64],
        max_shared_memory_bytes: 4096,
        shader_float16: false,
        shader_float64: false,
        integer_dot_product: false,
        quant_dot: QuantDot::Off,
        storage_buffer_16bit: false,
        max_compute_workgroup_count: [65535, 65535, 65535],
        vendor_id: 0,
        compute_units: 0,
        scalar_attention: false,
        no_tile_attention: false,
        coopmat_f16: false,
        quant_blocks: 0,
    }
}

fn devices() -> Vec<VkCaps> {
    vec![nvidia(), lavapipe(), polaris(), tiny()]
}

use crate::backend::planning::testing::{
    assert_common_refusals, assert_im2col_chunks, big_im2col, blocked_gemm, catalog_entries,
    check_candidates, for_every_listed, plan_label, problem,
};

fn spec(d: &Dispatch, id: u32) -> Option<u32> {
    d.spec.iter().find(|(i, _)| *i == id).map(|(_, v)| match v {
        SpecValue::U32(u) => *u,
        other => panic!("{}: spec {id} is {other:?}", d.shader),
    })
}

/// What a SPIR-V module declares that a dispatch must match.
#[derive(Debug, Default)]
struct Module {
    /// `Binding` decorations (every one in descriptor set 0).
    bindings: BTreeSet<u32>,
    /// Bytes of the push-constant block, 0 without one.
    push_bytes: usize,
    /// `SpecId` decorations, with whether the constant is a bool.
    spec_ids: BTreeSet<(u32, bool)>,
    capabilities: BTreeSet<u32>,
}

const OP_CAPABILITY: u32 = 17;
const OP_TYPE_INT: u32 = 21;
const OP_TYPE_FLOAT: u32 = 22;
const OP_TYPE_STRUCT: u32 = 30;
const OP_TYPE_POINTER: u32 = 32;
const OP_SPEC_CONSTANT_TRUE: u32 = 48;
const OP_SPEC_CONSTANT_FALSE: u32 = 49;
const OP_VARIABLE: u32 = 59;
const OP_DECORATE: u32 = 71;
const OP_MEMBER_DECORATE: u32 = 72;
const DECORATION_SPEC_ID: u32 = 1;
const DECORATION_BINDING: u32 = 33;
const DECORATION_DESCRIPTOR_SET: u32 = 34;
const DECORATION_OFFSET: u32 = 35;
const STORAGE_PUSH_CONSTANT: u32 = 9;
const CAPABILITY_STORAGE_BUFFER_16BIT: u32 = 4433;
const CAPABILITY_GROUP_NON_UNIFORM_ARITHMETIC: u32 = 63;

/// Reads the few instructions [`Module`] needs; panics on a malformed module (a test failure).
fn parse(name: &str, bytes: &[u8]) -> Module {
    assert!(bytes.len().is_multiple_of(4), "{name}");
    let words: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(words[0], 0x0723_0203, "{name}: not SPIR-V");
    let mut m = Module::default();
    let mut spec_targets = Vec::new();
    let mut bools = BTreeSet::new();
    let mut scalar_bits = std::collections::BTreeMap::new();
    let mut structs = std::collections::BTreeMap::new();
    let mut pointers = std::collections::BTreeMap::new();
    let mut offsets: Vec<(u32, u32)> = Vec::new();
    let mut push_pointer = None;
    let mut at = 5;
    while at < words.len() {
        let (count, op) = ((words[at] >> 16) as usize, words[at] & 0xffff);
        assert!(
            count > 0 && at + count <= words.len(),
            "{name}: bad word count"
        );
        let w = &words[at + 1..at + count];
        match op {
            OP_CAPABILITY => {
                m.capabilities.insert(w[0]);
            }
            OP_TYPE_INT | OP_TYPE_FLOAT => {
                scalar_bits.insert(w[0], w[1]);
            }
            OP_TYPE_STRUCT => {
                structs.insert(w[0], w[1..].to_vec());
            }
            OP_TYPE_POINTER => {
                pointers.insert(w[0], (w[1], w[2]));
            }
            OP_SPEC_CONSTANT_TRUE | OP_SPEC_CONSTANT_FALSE => {
                bools.insert(w[1]);
            }
            OP_VARIABLE if w[2] == STORAGE_PUSH_CONSTANT => push_pointer = Some(w[0]),
            OP_DECORATE => match w[1] {
                DECORATION_SPEC_ID => spec_targets.push((w[0], w[2])),
                DECORATION_BINDING => {
                    m.bindings.insert(w[2]);
                }
                DECORATION_DESCRIPTOR_SET => assert_eq!(w[2], 0, "{name}: set {}", w[2]),
                _ => {}
            },
            OP_MEMBER_DECORATE if w[2] == DECORATION_OFFSET => offsets.push((w[0], w[3])),
            _ => {}
        }
        at += count;
    }
    m.spec_ids = spec_targets
        .into_iter()
        .map(|(target, id)| (id, bools.contains(&target)))
        .collect();
    if let Some(pointer) = push_pointer {
        let (_, block) = pointers[&pointer];
        for member in &structs[&block] {
            assert_eq!(
                scalar_bits.get(member),
                Some(&32),
                "{name}: push constants must be 32-bit scalars"
            );
        }
        let last = offsets
            .iter()
            .filter(|(s, _)| *s == block)
            .map(|(_, o)| *o as usize)
            .max()
            .unwrap_or(0);
        m.push_bytes = last + 4;
        assert_eq!(m.push_bytes, 4 * structs[&block].len(), "{name}: packed");
    }
    m
}

/// Structural checks every plan must pass on `caps`, including each dispatch against its module.
fn check_plan(p: &Problem, plan: &Plan, caps: &VkCaps) {
    let what = plan_label(p, plan.input_storage.len(), plan.dispatches.is_empty());
    let mut output_written = false;
    for d in &plan.dispatches {
        let what = format!("{what} {}", d.shader);
        assert_eq!(spv::spirv(&d.shader), Some(d.spirv), "{what}: wrong module");
        let module = parse(&d.shader, d.spirv);
        // Bindings: 0..N in the shader, one Dispatch entry each.
        let expected: BTreeSet<u32> = (0..d.bindings.len() as u32).collect();
        assert_eq!(
            module.bindings, expected,
            "{what}: bindings {:?}",
            d.bindings
        );
        for b in &d.bindings {
            match b {
                Binding::Input(i) => assert!(*i < plan.input_storage.len(), "{what}: {b:?}"),
                Binding::Scratch(i) => assert!(*i < plan.scratch_bytes.len(), "{what}: {b:?}"),
                Binding::Output => output_written = true,
                Binding::Slice { input, first, len } => {
                    let elem = plan.input_storage[*input].size();
                    assert!(len > &0, "{what}: {b:?}");
                    assert_eq!(first * elem % SLICE_ALIGN, 0, "{what}: {b:?}");
                }
            }
        }
        // Push constants: exactly the block's size, within the guaranteed 128 bytes.
        assert_eq!(
            module.push_bytes,
            4 * d.push.len(),
            "{what}: push {:?}",
            d.push
        );
        assert!(4 * d.push.len() <= MAX_PUSH_BYTES, "{what}");
        // Specialization: every constant of the module set once, bools as 0 or 1.
        let ids: Vec<u32> = d.spec.iter().map(|(i, _)| *i).collect();
        let unique: BTreeSet<u32> = ids.iter().copied().collect();
        assert_eq!(ids.len(), unique.len(), "{what}: spec ids repeated");
        let declared: BTreeSet<u32> = module.spec_ids.iter().map(|(i, _)| *i).collect();
        assert_eq!(unique, declared, "{what}: spec {:?}", d.spec);
        for (id, is_bool) in &module.spec_ids {
            let v = spec(d, *id).unwrap();
            if *is_bool {
                assert!(v <= 1, "{what}: bool spec {id}={v}");
            }
        }
        // Local size and groups within the device's limits.
        let x = spec(d, SPEC_LOCAL_X).unwrap();
        let y = spec(d, SPEC_LOCAL_Y).unwrap_or(1);
        assert!(x >= 1 && y >= 1, "{what}");
        assert!(
            x <= caps.max_workgroup_size[0] && y <= caps.max_workgroup_size[1],
            "{what}"
        );
        assert!(x * y <= caps.max_workgroup_invocations, "{what}: {x}×{y}");
        for (g, limit) in d.groups.iter().zip(caps.max_compute_workgroup_count) {
            assert!(*g >= 1 && *g <= limit, "{what}: groups {:?}", d.groups);
        }
        // Capabilities the device must have.
        let half = module
            .capabilities
            .contains(&CAPABILITY_STORAGE_BUFFER_16BIT);
        // The transformers and the CNNs store half (the transformers their weights, the CNNs
        // their images, weights and arena) and compute in f32, so their half shaders need only
        // 16-bit storage; the others store their every buffer as half and compute in it.
        let storage_only = p.id().f16_is_storage();
        let stores_half = if storage_only {
            plan.input_storage.contains(&Storage::F16)
        } else {
            plan.output_storage == Storage::F16
        };
        if storage_only {
            assert!(!half || stores_half, "{what}");
        } else {
            assert_eq!(half, stores_half, "{what}");
        }
        assert!(
            !half || (caps.storage_buffer_16bit && (storage_only || caps.shader_float16)),
            "{what}"
        );
        let subgroup = module
            .capabilities
            .contains(&CAPABILITY_GROUP_NON_UNIFORM_ARITHMETIC);
        assert!(!subgroup || caps.subgroup_arithmetic, "{what}");
    }
    assert!(output_written, "{what}: no dispatch writes the output");
    assert!(!plan.config.is_empty(), "{what}");
}

#[test]
fn supported_lists_every_device_kernel_with_the_catalog_variants_and_dtypes() {
    for caps in devices() {
        let listed = supported(&caps);
        for (k, (_, variants, dtypes)) in catalog_entries(BackendKind::Vulkan, &listed) {
            let f16 = caps.shader_float16 && caps.storage_buffer_16bit;
            let mut expected = k.variants.to_vec();
            if !f16 {
                expected.retain(|v| *v != F16ACC32);
            }
            if k.name == "compute_peak" {
                expected.retain(|v| {
                    (*v != "fp16" || caps.shader_float16)
                        && (*v != "fp64" || caps.shader_float64)
                        && (*v != "int8" || caps.integer_dot_product)
                });
            }
            assert_eq!(variants, &expected, "{}", k.name);
            let mut names: Vec<&str> = k.dtypes.iter().map(|d| d.name()).collect();
            if k.name == "gemm" && !f16 {
                names.retain(|d| *d == "f32");
            }
            // f16 storage needs 16-bit storage buffers; the packed q8_0 / q4_0 weights are read as
            // words and need nothing.
            if k.id.f16_is_storage() && !caps.storage_buffer_16bit {
                names.retain(|d| *d != "f16");
            }
            assert_eq!(dtypes, &names, "{} on {caps:?}", k.name);
        }
        assert_eq!(listed.len(), 31);
    }
    let f16 = |caps: &VkCaps| supported(caps)[0].2.contains(&"f16");
    assert!(f16(&nvidia()) && f16(&lavapipe()));
    assert!(!f16(&polaris()) && !f16(&tiny()));
}

#[test]
fn every_supported_combination_plans_on_every_device_at_default_and_awkward_sizes() {
    let odd: &[(&str, &[(&str, i64)])] = &[
        ("gemm", &[("m", 37), ("n", 53), ("k", 29)]),
        ("gemm", &[("m", 1), ("n", 1), ("k", 1)]),
        ("gemm", &[("m", 4096), ("n", 4096), ("k", 4096)]),
        ("vec_add", &[("n", 7)]),
        ("vec_add", &[("n", 1 << 26)]),
        ("softmax", &[("rows", 3), ("cols", 1)]),
        ("layernorm", &[("rows", 100_000), ("cols", 1000)]),
        ("rmsnorm", &[("rows", 2), ("cols", 1 << 20)]),
        (
            "conv2d",
            &[("batch", 3), ("height", 5), ("width", 6), ("ksize", 5)],
        ),
        (
            "conv2d",
            &[
                ("batch", 64),
                ("channels", 64),
                ("height", 56),
                ("width", 56),
            ],
        ),
    ];
    for caps in devices() {
        for_every_listed(supported(&caps), odd, |what, p| {
            let plan = plan(p, &caps, None).unwrap_or_else(|e| panic!("{what} on {caps:?}: {e}"));
            check_plan(p, &plan, &caps);
        });
    }
}

#[test]
fn unsupported_kernels_dtypes_and_devices_say_why() {
    let gpu = &nvidia();
    assert_common_refusals(|p| plan(p, gpu, None));
    let half = problem("gemm", "blocked", &[], "f16");
    let err = plan(&half, &polaris(), None).unwrap_err();
    assert!(
        err.0.contains("dtype f16 of gemm") && err.0.contains("shaderFloat16 (false)"),
        "{err}"
    );
    let int8 = problem(
        "compute_peak",
        "int8",
        &[("items", 10), ("pairs", 3)],
        "f32",
    );
    let err = plan(&int8, &polaris(), None).unwrap_err();
    assert!(err.0.contains("`int8` of compute_peak"), "{err}");
    let ok = plan(&int8, &lavapipe(), None).unwrap();
    assert_eq!(ok.dispatches[0].shader, "compute_peak_int8");
    let p = problem("vec_add", "", &[], "f32");
    let broken = VkCaps {
        max_workgroup_invocations: 0,
        ..nvidia()
    };
    let err = plan(&p, &broken, None).unwrap_err();
    assert!(err.0.contains("maxComputeWorkGroupInvocations=0"), "{err}");
    let broken = VkCaps {
        max_compute_workgroup_count: [65535, 0, 65535],
        ..nvidia()
    };
    let err = plan(&p, &broken, None).unwrap_err();
    assert!(err.0.contains("maxComputeWorkGroupCount"), "{err}");
}

#[test]
fn buffers_beyond_one_binding_are_refused_and_half_buffers_count_two_bytes() {
    let gpu = &nvidia();
    // 2^30 floats are 4 GiB, one byte more than a binding's range.
    let err = plan(&problem("copy", "", &[("n", 1 << 30)], "f32"), gpu, None).unwrap_err();
    assert!(
        err.0.contains("input 0 of copy binds 4294967296 bytes") && err.0.contains("4294967295"),
        "{err}"
    );
    assert!(
        plan(
            &problem("copy", "", &[("n", (1 << 30) - 1)], "f32"),
            gpu,
            None
        )
        .is_ok()
    );
    let big = [("m", 32768), ("n", 32768), ("k", 32768)];
    let err = plan(&problem("gemm", "blocked", &big, "f32"), gpu, None).unwrap_err();
    assert!(err.0.contains("input 0 of gemm"), "{err}");
    assert!(plan(&problem("gemm", "blocked", &big, "f16"), gpu, None).is_ok());
}

#[test]
fn dispatches_beyond_the_group_count_are_refused() {
    let narrow = VkCaps {
        max_compute_workgroup_count: [64, 64, 64],
        ..nvidia()
    };
    let p = problem(
        "gemm",
        "naive",
        &[("m", 4096), ("n", 4096), ("k", 1)],
        "f32",
    );
    let err = plan(&p, &narrow, None).unwrap_err();
    assert!(
        err.0.contains("256 workgroups along x") && err.0.contains("maxComputeWorkGroupCount 64"),
        "{err}"
    );
    // Grid-stride shaders fit any limit.
    let p = problem("vec_add", "", &[("n", 1 << 26)], "f32");
    let pl = plan(&p, &narrow, None).unwrap();
    assert_eq!(pl.dispatches[0].groups, [64, 1, 1]);
    let p = problem("softmax", "", &[("rows", 1 << 20), ("cols", 8)], "f32");
    assert_eq!(
        plan(&p, &narrow, None).unwrap().dispatches[0].groups,
        [64, 1, 1]
    );
}

#[test]
fn a_tuning_the_device_cannot_run_is_refused_with_the_limit() {
    let small = VkCaps {
        max_workgroup_invocations: 64,
        max_shared_memory_bytes: 4096,
        ..nvidia()
    };
    let p = problem("gemm", "blocked", &[], "f32");
    let t = |tile_m, tile_n, tile_k, work_m, work_n| {
        GemmTuning::new([tile_m, tile_n, tile_k, work_m, work_n])
    };
    let err = plan(&p, &small, Some(&t(128, 128, 8, 8, 8))).unwrap_err();
    assert!(
        err.0.contains("256 invocations") && err.0.contains("maxComputeWorkGroupInvocations 64"),
        "{err}"
    );
    let err = plan(&p, &small, Some(&t(64, 64, 16, 8, 8))).unwrap_err();
    assert!(err.0.contains("shared memory"), "{err}");
    let flat = VkCaps {
        max_workgroup_size: [8, 1024, 64],
        ..nvidia()
    };
    let err = plan(&p, &flat, Some(&t(64, 64, 8, 4, 4))).unwrap_err();
    assert!(err.0.contains("local size 16×16"), "{err}");
    let gpu = &nvidia();
    let err = plan(&p, gpu, Some(&t(30, 32, 8, 3, 4))).unwrap_err();
    assert!(err.0.contains("multiples of 4"), "{err}");
    let err = plan(&p, gpu, Some(&t(32, 32, 8, 3, 4))).unwrap_err();
    assert!(err.0.contains("work per invocation 3×4"), "{err}");
    let err = plan(&p, gpu, Some(&t(256, 256, 8, 16, 16))).unwrap_err();
    assert!(err.0.contains("work_m·work_n=256 exceeds 128"), "{err}");
    let err = plan(&p, gpu, Some(&t(0, 32, 8, 4, 4))).unwrap_err();
    assert!(err.0.contains("between 1 and 1024"), "{err}");
}

#[test]
fn candidates_respect_the_device_and_put_big_tiles_first_on_gpus() {
    let within_limits = |c: &GemmTuning, caps: &VkCaps| {
        let (x, y) = blocked_local(c);
        x * y <= caps.max_workgroup_invocations
            && blocked_shared_bytes(c) <= u64::from(caps.max_shared_memory_bytes)
    };
    let search_space = (
        gemm_candidates as fn(&_) -> _,
        default_gemm_tuning as fn(&_) -> _,
    );
    check_candidates(
        &devices(),
        4..=20,
        search_space,
        tuning_error,
        within_limits,
    );
    let big = |t: &GemmTuning| t.tile_m == 128 && t.tile_n == 128 && t.work_m * t.work_n == 64;
    for gpu in [nvidia(), polaris()] {
        let cands = gemm_candidates(&gpu);
        assert!(big(&cands[0]), "{:?}", cands[0]);
        assert!(
            cands.iter().any(|t| t.tile_m <= 32),
            "small tiles for small problems"
        );
    }
    let cpu = gemm_candidates(&lavapipe());
    assert!(!big(&cpu[0]) && cpu.iter().any(big), "{cpu:?}");
    // On a CPU the first (default) tile is the cheapest to build: 4×4 outputs per work-item.
    assert!(cpu[0].work_m * cpu[0].work_n <= 16, "{:?}", cpu[0]);
}

#[test]
fn default_tuning_is_valid_even_on_a_tiny_device() {
    let one = VkCaps {
        max_workgroup_invocations: 1,
        max_workgroup_size: [1, 1, 1],
        max_shared_memory_bytes: 384,
        ..tiny()
    };
    let t = default_gemm_tuning(&one);
    assert_eq!(tuning_error(&t, &one), None, "{t:?}");
    let p = problem("gemm", "blocked", &[("m", 5), ("n", 3), ("k", 9)], "f32");
    check_plan(&p, &plan(&p, &one, None).unwrap(), &one);
    let p = problem("gemm", "tiled", &[("m", 5), ("n", 3), ("k", 9)], "f32");
    let pl = plan(&p, &one, None).unwrap();
    assert_eq!(spec(&pl.dispatches[0], 2), Some(1));
}

#[test]
fn blocked_gemm_spec_constants_follow_the_tuning_and_the_shape() {
    let gpu = &nvidia();
    let t = GemmTuning::new([128, 64, 8, 8, 4]);
    let shaped = |m, n, k, dtype| plan(&blocked_gemm(m, n, k, dtype), gpu, Some(&t)).unwrap();
    let pl = shaped(4096, 4096, 4096, "f32");
    let d = &pl.dispatches[0];
    assert_eq!(d.shader, "gemm_blocked");
    let values: Vec<u32> = (0..9).map(|id| spec(d, id).unwrap()).collect();
    assert_eq!(values, [16, 16, 128, 64, 8, 8, 4, 1, 1]);
    assert_eq!(d.groups, [4096 / 64, 4096 / 128, 1]);
    assert_eq!(d.push, [4096, 4096, 4096, 0, 0, 0, 0]);
    assert_eq!(
        d.bindings,
        [Binding::Input(0), Binding::Input(1), Binding::Output]
    );
    assert_eq!(pl.config.get("tile_m").map(String::as_str), Some("128"));
    // Ragged sizes: bounds checks on; vec4 only when k and n are multiples of 4.
    let d = &shaped(37, 52, 28, "f32").dispatches[0];
    assert_eq!((spec(d, 7), spec(d, 8)), (Some(1), Some(0)));
    assert_eq!(d.groups, [1, 1, 1]);
    let d = &shaped(128, 64, 30, "f32").dispatches[0];
    assert_eq!((spec(d, 7), spec(d, 8)), (Some(0), Some(0)));
    let d = &shaped(128, 66, 8, "f32").dispatches[0];
    assert_eq!(spec(d, 7), Some(0));
    // f16: the f16acc32 module, half buffers, the same rules.
    let pl = shaped(37, 53, 29, "f16");
    assert_eq!(pl.dispatches[0].shader, "gemm_f16acc32");
    assert_eq!(spec(&pl.dispatches[0], 7), Some(0));
    assert_eq!(pl.input_storage, [Storage::F16, Storage::F16]);
    assert_eq!(pl.output_storage, Storage::F16);
    let half = |v| plan(&problem("gemm", v, &[], "f16"), gpu, None).unwrap();
    assert_eq!(half("naive").dispatches[0].shader, "gemm_naive_f16");
    assert_eq!(half("tiled").dispatches[0].shader, "gemm_tiled_f16");
}

#[test]
fn the_f16acc32_variant_is_the_blocked_f16_gemm_where_the_catalog_names_it() {
    // The catalog may or may not list the variant; Problem's fields are public either way.
    let gpu = &nvidia();
    let mut p = problem("gemm", "blocked", &[("m", 67), ("n", 45), ("k", 33)], "f16");
    let blocked = plan(&p, gpu, None).unwrap();
    p.variant = F16ACC32.into();
    let listed = find_kernel("gemm").unwrap().variants.contains(&F16ACC32);
    match plan(&p, gpu, None) {
        Ok(pl) => {
            assert!(listed);
            assert_eq!(pl.dispatches, blocked.dispatches);
            check_plan(&p, &pl, gpu);
        }
        Err(e) => assert!(!listed && e.0.contains("variant `f16acc32`"), "{e}"),
    }
    let err = plan(&p, &polaris(), None).unwrap_err();
    assert!(err.0.contains("shaderFloat16 (false)"), "{err}");
    if listed {
        p.dtype = Dtype::F32;
        let err = plan(&p, gpu, None).unwrap_err();
        assert!(err.0.contains("runs as `blocked`"), "{err}");
    }
}

#[test]
fn row_kernels_size_their_groups_and_pick_subgroup_shaders_where_available() {
    let rows = |caps: &VkCaps, kernel, r, c| {
        plan(
            &problem(kernel, "", &[("rows", r), ("cols", c)], "f32"),
            caps,
            None,
        )
        .unwrap()
    };
    let gpu = &nvidia();
    let pl = rows(gpu, "softmax", 10, 1);
    let d = &pl.dispatches[0];
    assert_eq!(d.shader, "softmax_subgroup");
    assert_eq!((spec(d, 0), spec(d, 2)), (Some(32), Some(1)));
    assert_eq!(d.groups, [10, 1, 1]);
    assert_eq!(d.push, [10, 1]);
    let pl = rows(gpu, "layernorm", 1 << 18, 1024);
    let d = &pl.dispatches[0];
    assert_eq!((spec(d, 0), spec(d, 2)), (Some(256), Some(4)));
    assert_eq!(d.groups, [65535, 1, 1], "groups stride over rows");
    assert_eq!(d.push[2], 1e-5f32.to_bits());
    let d = &rows(gpu, "rmsnorm", 2, 1 << 20).dispatches[0];
    assert_eq!(
        (spec(d, 0), spec(d, 2)),
        (Some(1024), Some(0)),
        "too long for registers"
    );
    let d = &rows(&tiny(), "layernorm_rmsnorm_fused", 2, 1000).dispatches[0];
    assert_eq!(d.shader, "layernorm_rmsnorm");
    assert_eq!((spec(d, 0), spec(d, 2)), (Some(64), Some(16)));
    assert_eq!(d.bindings.len(), 5);
}

#[test]
fn elementwise_plans_cover_n_with_a_grid_stride_of_vec4s() {
    let gpu = &nvidia();
    for n in [1usize, 4, 5, 1 << 20, 1 << 26] {
        let pl = plan(&problem("triad", "", &[("n", n as i64)], "f32"), gpu, None).unwrap();
        let d = &pl.dispatches[0];
        let group = spec(d, 0).unwrap() as usize;
        let vectors = n.div_ceil(4);
        assert_eq!(
            d.groups[0] as usize,
            vectors.div_ceil(group).min(65535),
            "n={n}"
        );
        assert_eq!(d.push, [n as u32, TRIAD_SCALAR.to_bits()]);
        assert_eq!(
            d.bindings,
            [Binding::Input(0), Binding::Input(1), Binding::Output]
        );
    }
    let wrong = plan(&problem("debug_wrong", "", &[], "f32"), gpu, None).unwrap();
    assert_eq!(wrong.dispatches[0].shader, "vec_add");
    assert_eq!(spec(&wrong.dispatches[0], 2), Some(1));
    let right = plan(&problem("vec_add", "", &[], "f32"), gpu, None).unwrap();
    assert_eq!(spec(&right.dispatches[0], 2), Some(0));
    let noop = plan(&problem("noop", "", &[], "f32"), gpu, None).unwrap();
    assert_eq!(noop.dispatches[0].groups, [1, 1, 1]);
    assert!(noop.dispatches[0].push.is_empty());
}

#[test]
fn im2col_chunks_the_batch_and_batches_the_gemm_over_images() {
    let gpu = &nvidia();
    let pl = plan(&big_im2col(), gpu, None).unwrap();
    // 36 MiB per image: 3 images per 128 MiB chunk.
    assert_im2col_chunks(&pl.config, pl.dispatches.len(), &pl.scratch_bytes, 3);
    let (im2col, gemm) = (&pl.dispatches[42], &pl.dispatches[43]);
    assert_eq!(im2col.shader, "im2col");
    assert_eq!(
        im2col.push[..2],
        [63, 1],
        "the last chunk holds the remaining image"
    );
    assert_eq!(gemm.shader, "gemm_blocked");
    let plane = 128 * 128;
    assert_eq!(
        gemm.push,
        [32, plane, 64 * 9, 0, 64 * 9 * plane, 32 * plane, 63]
    );
    assert_eq!(gemm.groups[2], 1);
    assert_eq!(pl.dispatches[1].groups[2], 3);
    assert_eq!(spec(gemm, 7), Some(1), "aligned: vec4 loads");
    assert!(
        spec(gemm, 2).unwrap() <= 32,
        "32 filters: a tile that is not mostly padding"
    );
}

#[test]
fn few_wide_rows_of_softmax_and_layernorm_are_split() {
    let gpu = nvidia(); // 132 SMs: 8 groups per row at 256×65536
    for (kernel, inputs) in [("softmax", 1), ("log_softmax", 1), ("layernorm", 3)] {
        let p = problem(kernel, "", &[("rows", 256), ("cols", 65536)], "f32");
        let pl = plan(&p, &gpu, None).unwrap();
        let shaders: Vec<_> = pl.dispatches.iter().map(|d| d.shader.as_str()).collect();
        assert_eq!(
            shaders,
            [
                "split_stats_subgroup".to_string(),
                format!("{kernel}_split_apply")
            ]
        );
        for d in &pl.dispatches {
            assert_eq!(d.groups, [256 * 8, 1, 1], "{kernel}");
            assert_eq!(spec(d, SPEC_SPLIT), Some(8));
        }
        let softmax = spec(&pl.dispatches[0], SPEC_SPLIT_SOFTMAX);
        assert_eq!(softmax, Some(u32::from(kernel != "layernorm")));
        assert_eq!(pl.scratch_bytes, [4 * 2 * 256 * 8]);
        let apply = &pl.dispatches[1].bindings;
        assert_eq!(
            apply[inputs..],
            [Binding::Scratch(0), Binding::Output],
            "{kernel}"
        );
        assert_eq!(pl.config["groups_per_row"], "8");
        // The SPIR-V's bindings, push constants and specialization ids match the dispatches.
        check_plan(&p, &pl, &gpu);
    }
    // rmsnorm and the fused kernel are not split; nor are rows that fit in registers.
    for (kernel, cols) in [
        ("rmsnorm", 65536),
        ("layernorm_rmsnorm_fused", 65536),
        ("softmax", 4096),
    ] {
        let p = problem(kernel, "", &[("rows", 256), ("cols", cols)], "f32");
        assert_eq!(
            plan(&p, &gpu, None).unwrap().dispatches.len(),
            1,
            "{kernel}"
        );
    }
    // Without a compute-unit count (lavapipe) only very few rows are split.
    let p = problem("softmax", "", &[("rows", 2), ("cols", 70_001)], "f32");
    let pl = plan(&p, &lavapipe(), None).unwrap();
    assert!(pl.dispatches[0].shader.starts_with("split_stats"));
    assert_eq!(pl.config["groups_per_row"], "4");
}
