//! Test helpers the planners' unit tests share: problems, and the checks every GPU planner must
//! pass (refusals, candidate lists, the support list against the catalog, im2col chunking).

use super::SupportEntry;
use gpufleet_kernels::Problem;

/// `kernel`/`variant` in `dtype` with `params` over the catalog defaults.
pub fn problem(kernel: &str, variant: &str, params: &[(&str, i64)], dtype: &str) -> Problem {
    let params = params.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    Problem::new(kernel, variant, &params, dtype, true).unwrap()
}

/// The catalog kernels GPU backend `backend` must list, each with `listed`'s entry for it: every
/// kernel the catalog says it runs (not the host-only ones, the crashing debug kernels, nor the
/// ones it has no code for yet), which must be absent. Also checks that nothing else is listed.
pub fn catalog_entries(
    backend: gpufleet_kernels::BackendKind,
    listed: &[SupportEntry],
) -> Vec<(&'static gpufleet_kernels::KernelDef, &SupportEntry)> {
    let mut out = Vec::new();
    for k in gpufleet_kernels::catalog() {
        let entry = listed.iter().find(|(name, _, _)| *name == k.name);
        if !k.backends.contains(&backend) {
            assert!(entry.is_none(), "{} must not be listed", k.name);
        } else {
            out.push((k, entry.unwrap_or_else(|| panic!("{} missing", k.name))));
        }
    }
    assert_eq!(
        listed.len(),
        out.len(),
        "a listed kernel is not in the catalog"
    );
    out
}

/// The label of `p` in a planner test's messages, after the checks every plan's shape must pass:
/// one storage per input (`inputs` of them), and some launch (`no_launch` false).
pub fn plan_label(p: &Problem, inputs: usize, no_launch: bool) -> String {
    let what = format!("{}/{}/{} {:?}", p.kernel.name, p.variant, p.dtype, p.params);
    assert_eq!(inputs, p.input_lens().len(), "{what}");
    assert!(!no_launch, "{what}");
    what
}

/// An autotuner's search space: the candidates for a device and the untuned default.
pub type SearchSpace<C, T> = (fn(&C) -> Vec<T>, fn(&C) -> T);

/// Checks an autotuner's candidates on each of `devices`: as many as `count` says, each valid
/// (`error` gives `None`) and within the device's limits (`fits`), none listed twice, and the
/// untuned default the first of them.
pub fn check_candidates<C: std::fmt::Debug, T: PartialEq + std::fmt::Debug>(
    devices: &[C],
    count: std::ops::RangeInclusive<usize>,
    (candidates, default): SearchSpace<C, T>,
    error: fn(&T, &C) -> Option<String>,
    fits: impl Fn(&T, &C) -> bool,
) {
    for device in devices {
        let all = candidates(device);
        let n = all.len();
        assert!(count.contains(&n), "{n} candidates on {device:?}");
        for (i, c) in all.iter().enumerate() {
            assert_eq!(error(c, device), None, "{c:?}");
            assert!(fits(c, device), "{c:?} exceeds the limits of {device:?}");
            assert!(!all[..i].contains(c), "{c:?} listed twice");
        }
        assert_eq!(default(device), all[0]);
    }
}

/// Asserts the refusals every GPU planner gives through `plan`: host-only and crashing
/// kernels name the reason; a dtype (f16 softmax) or a variant (gemm `strassen`) the backend
/// does not list is named with the alternatives.
pub fn assert_common_refusals<P: std::fmt::Debug>(
    plan: impl Fn(&Problem) -> Result<P, super::Unsupported>,
) {
    for (kernel, word) in [
        ("membw_cpu", "host memory"),
        ("memlat_cpu", "host memory"),
        ("debug_crash", "on purpose"),
        ("debug_hang", "on purpose"),
        ("debug_alloc", "on purpose"),
    ] {
        let err = plan(&problem(kernel, "", &[], "f32")).unwrap_err();
        assert!(err.0.contains(kernel) && err.0.contains(word), "{err}");
    }
    // Problem::new refuses these, but Problem's fields are public.
    let mut p = problem("softmax", "", &[], "f32");
    p.dtype = gpufleet_kernels::Dtype::F16;
    let err = plan(&p).unwrap_err();
    assert!(err.0.contains("dtype f16 of softmax"), "{err}");
    let mut p = problem("gemm", "", &[], "f32");
    p.variant = "strassen".into();
    let err = plan(&p).unwrap_err();
    assert!(
        err.0.contains("strassen") && err.0.contains("blocked"),
        "{err}"
    );
}

/// gemm `blocked` of an m×n×k product in `dtype`.
pub fn blocked_gemm(m: i64, n: i64, k: i64, dtype: &str) -> Problem {
    problem("gemm", "blocked", &[("m", m), ("n", n), ("k", k)], dtype)
}

/// conv2d `im2col` over 64 images of 64×128×128 with 3×3 filters: 64·9·128·128 floats
/// (36 MiB) of columns per image, so the planners must chunk the batch.
pub fn big_im2col() -> Problem {
    let params = [
        ("batch", 64),
        ("channels", 64),
        ("height", 128),
        ("width", 128),
    ];
    problem("conv2d", "im2col", &params, "f32")
}

/// Asserts that a plan of [`big_im2col`] holds `chunk` images per chunk: its `config` says
/// so, it has two steps (unfold, GEMM) per chunk, and one scratch buffer of a chunk's columns.
pub fn assert_im2col_chunks(
    config: &std::collections::BTreeMap<String, String>,
    steps: usize,
    scratch_bytes: &[usize],
    chunk: usize,
) {
    let images_per_chunk = config.get("images_per_chunk").map(String::as_str);
    assert_eq!(images_per_chunk, Some(chunk.to_string().as_str()));
    assert_eq!(steps, 2 * 64usize.div_ceil(chunk));
    assert_eq!(scratch_bytes, [chunk * 64 * 9 * 128 * 128 * 4]);
}

/// Calls `check` with every listed kernel, variant and dtype, at the catalog defaults and at
/// each of the `odd` sizes given for that kernel.
pub fn for_every_listed(
    list: Vec<SupportEntry>,
    odd: &[(&str, &[(&str, i64)])],
    mut check: impl FnMut(&str, &Problem),
) {
    // transfer launches nothing (each backend's `transfer.rs` runs it without a plan).
    for (kernel, variants, dtypes) in list.into_iter().filter(|(k, _, _)| *k != "transfer") {
        for v in &variants {
            for d in &dtypes {
                let sizes = odd.iter().filter(|(k, _)| *k == kernel).map(|(_, p)| *p);
                for params in std::iter::once(&[][..]).chain(sizes) {
                    check(&format!("{kernel}/{v}/{d}"), &problem(kernel, v, params, d));
                }
            }
        }
    }
}
