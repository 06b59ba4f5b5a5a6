//! Unit tests of `Problem`: resolution, bounds, sizes, spec keys.
use super::*;
use crate::catalog::KernelId;

fn params(list: &[(&str, i64)]) -> BTreeMap<String, i64> {
    list.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

fn new(kernel: &str, list: &[(&str, i64)]) -> Result<Problem, SpecError> {
    Problem::new(kernel, "", &params(list), "", false)
}

#[test]
fn empty_fields_resolve_to_defaults() {
    let p = new("gemm", &[("m", 1024)]).unwrap();
    assert_eq!(p.variant, "blocked");
    assert_eq!(p.dtype, Dtype::F32);
    assert_eq!(p.params, params(&[("m", 1024), ("n", 256), ("k", 256)]));
    assert_eq!(p.param("m"), 1024);
    assert_eq!(p.id(), KernelId::Gemm);
    let p = Problem::new("gemm", "naive", &params(&[]), "F16", false).unwrap();
    assert_eq!((p.variant.as_str(), p.dtype), ("naive", Dtype::F16));
    assert_eq!(new("vec_add", &[]).unwrap().variant, "default");
}

#[test]
fn spec_key_and_params_string_are_canonical() {
    let p = new("gemm", &[("n", 1024), ("m", 1024), ("k", 1024)]).unwrap();
    assert_eq!(p.params_string(), "k=1024,m=1024,n=1024");
    assert_eq!(
        p.spec_key(Mode::ComputeOnly),
        "gemm/blocked/k=1024,m=1024,n=1024/f32/compute_only"
    );
    // Explicit defaults and omitted ones give the same key.
    assert_eq!(
        new("gemm", &[]).unwrap().spec_key(Mode::WithTransfers),
        new("gemm", &[("m", 256)])
            .unwrap()
            .spec_key(Mode::WithTransfers)
    );
    assert_eq!(
        new("noop", &[]).unwrap().spec_key(Mode::WithTransfers),
        "noop/default/-/f32/with_transfers"
    );
}

#[test]
fn unknown_names_list_what_is_known() {
    let e = new("gemmm", &[]).unwrap_err();
    assert_eq!(e.field(), "kernel");
    let msg = e.to_string();
    assert!(
        msg.starts_with("unknown kernel `gemmm` (known: gemm, vec_add, copy"),
        "{msg}"
    );
    assert!(
        !msg.contains("debug_"),
        "debug kernels hidden when disabled: {msg}"
    );
    let e = Problem::new("gemmm", "", &params(&[]), "", true).unwrap_err();
    assert!(e.to_string().contains("debug_wrong"));

    let e = Problem::new("gemm", "fast", &params(&[]), "", false).unwrap_err();
    assert_eq!(e.field(), "variant");
    assert_eq!(
        e.to_string(),
        "unknown variant `fast` for gemm (known: naive, tiled, blocked)"
    );
    let e = new("gemm", &[("q", 1)]).unwrap_err();
    assert_eq!(e.field(), "params");
    assert_eq!(e.to_string(), "unknown param `q` for gemm (known: m, n, k)");
}

#[test]
fn bounds_are_enforced_with_the_bound_in_the_message() {
    let e = new("gemm", &[("n", 1_000_000_000)]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "param n=1000000000 exceeds the maximum 65536 for gemm"
    );
    let e = new("gemm", &[("m", 0)]).unwrap_err();
    assert_eq!(e.to_string(), "param m=0 is below the minimum 1 for gemm");
    assert!(new("gemm", &[("m", 65536)]).is_ok());
    let e = new("memlat_cpu", &[("size_kib", 2)]).unwrap_err();
    assert!(matches!(e, SpecError::ParamOutOfRange { min: 4, .. }));
}

#[test]
fn conv2d_cross_rules() {
    let e = new("conv2d", &[("ksize", 4)]).unwrap_err();
    assert_eq!(e.field(), "params");
    assert_eq!(
        e.to_string(),
        "invalid params for conv2d: ksize=4 must be 3 or 5"
    );
    let e = new("conv2d", &[("height", 2), ("pad", 0), ("ksize", 5)]).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("output height") && msg.contains("height=2") && msg.contains("ksize=5"),
        "{msg}"
    );
    // Exactly one output row is fine, also with a stride that would round a negative size to 0.
    let p = new(
        "conv2d",
        &[("height", 1), ("width", 1), ("pad", 1), ("stride", 4)],
    )
    .unwrap();
    assert_eq!((p.conv_shape().out_h, p.conv_shape().out_w), (1, 1));
    let e = new("conv2d", &[("width", 1), ("pad", 0), ("stride", 2)]).unwrap_err();
    assert!(e.to_string().contains("output width"), "{e}");
}

#[test]
fn dtypes_and_debug_kernels() {
    let e = Problem::new("vec_add", "", &params(&[]), "f16", false).unwrap_err();
    assert_eq!(e.field(), "dtype");
    assert_eq!(
        e.to_string(),
        "dtype `f16` is not supported by vec_add (supported: f32)"
    );
    let e = Problem::new("gemm", "", &params(&[]), "f64", false).unwrap_err();
    assert!(e.to_string().contains("supported: f32, f16"), "{e}");

    let e = new("debug_crash", &[]).unwrap_err();
    assert_eq!(e.field(), "kernel");
    assert!(e.to_string().contains("--enable-debug-kernels"));
    let p = Problem::new("debug_crash", "", &params(&[("mode", 1)]), "", true).unwrap();
    assert_eq!(p.param("mode"), 1);
}

#[test]
fn absurd_sizes_are_refused_without_overflow() {
    let e = new("softmax", &[("rows", 1 << 24), ("cols", 1 << 20)]).unwrap_err();
    assert_eq!(e.field(), "params");
    assert!(
        matches!(e, SpecError::TooLarge { bytes, limit, .. } if bytes == 1 << 47 && limit == 1 << 40)
    );
    assert!(e.to_string().contains("128.0 TiB"), "{e}");
    let e = new(
        "conv2d",
        &[
            ("batch", 4096),
            ("channels", 4096),
            ("height", 16384),
            ("width", 16384),
            ("filters", 4096),
        ],
    )
    .unwrap_err();
    assert!(matches!(e, SpecError::TooLarge { bytes, .. } if bytes > 1 << 54));
}

#[test]
fn flops_bytes_and_footprint() {
    let p = new("gemm", &[("m", 2), ("n", 3), ("k", 4)]).unwrap();
    assert_eq!(p.flops(), 48.0);
    assert_eq!(p.bytes(), 4.0 * (8.0 + 12.0 + 6.0));
    assert_eq!(p.footprint_bytes(), 4 * 26);
    let h = Problem::new(
        "gemm",
        "",
        &params(&[("m", 2), ("n", 3), ("k", 4)]),
        "f16",
        false,
    )
    .unwrap();
    assert_eq!((h.bytes(), h.footprint_bytes()), (52.0, 52));

    let t = new("triad", &[("n", 10)]).unwrap();
    assert_eq!(
        (t.flops(), t.bytes(), t.footprint_bytes()),
        (20.0, 120.0, 120)
    );
    let s = new("softmax", &[("rows", 2), ("cols", 8)]).unwrap();
    assert_eq!((s.flops(), s.bytes()), (80.0, 128.0));
    let l = new("layernorm_rmsnorm_fused", &[("rows", 2), ("cols", 8)]).unwrap();
    assert_eq!((l.flops(), l.bytes()), (192.0, 4.0 * (32.0 + 24.0)));
    assert_eq!(l.input_lens(), vec![16, 8, 8, 8]);

    let c = new("conv2d", &[]).unwrap();
    let s = c.conv_shape();
    assert_eq!((s.out_h, s.out_w), (64, 64));
    assert_eq!(c.flops(), 2.0 * 32.0 * 64.0 * 64.0 * 16.0 * 9.0);
    assert_eq!(c.output_len(), 32 * 64 * 64);
    let c = new("conv2d", &[("stride", 2), ("pad", 0), ("ksize", 5)]).unwrap();
    assert_eq!(c.conv_shape().out_h, (64 - 5) / 2 + 1);

    let m = new("memlat_cpu", &[("size_kib", 4)]).unwrap();
    assert_eq!(m.input_kinds(), vec![BufferKind::U32]);
    assert_eq!((m.output_kind(), m.output_len()), (BufferKind::U32, 1));
    assert_eq!(m.footprint_bytes(), 4096 + 4);
    let n = new("noop", &[]).unwrap();
    assert_eq!((n.flops(), n.bytes(), n.output_len()), (0.0, 0.0, 1));
}

#[test]
fn metrics_follow_the_kind() {
    let g = new("gemm", &[("m", 1000), ("n", 1000), ("k", 500)]).unwrap();
    let v = g.metric(0.5);
    assert_eq!(v.kind, MetricKind::Gflops);
    assert!((v.value - 2.0).abs() < 1e-12);
    let c = new("copy", &[("n", 1 << 20)]).unwrap();
    assert!((c.metric(1e-3).value - 8.0 * 1048576.0 / 1e-3 / 1e9).abs() < 1e-9);
    let n = new("noop", &[]).unwrap();
    assert_eq!(
        n.metric(5e-6),
        MetricValue {
            kind: MetricKind::Micros,
            value: 5e-6 * 1e6
        }
    );
    let m = new("memlat_cpu", &[("hops", 1000)]).unwrap();
    let v = m.metric(1e-4);
    assert_eq!(v.kind, MetricKind::NsPerHop);
    assert!((v.value - 100.0).abs() < 1e-9);
    assert_eq!(g.metric(0.0).value, 0.0);
    assert_eq!(g.metric(f64::NAN).value, 0.0);
    let json = serde_json::to_value(&v).unwrap();
    assert_eq!(json["kind"], "ns_per_hop");
    assert_eq!(json["value"].as_f64(), Some(v.value));
}

#[test]
fn a_user_who_did_not_enable_debug_kernels_is_never_offered_them() {
    let e = Problem::new("gemmm", "", &params(&[]), "", true)
        .unwrap_err()
        .without_debug_kernels();
    let msg = e.to_string();
    assert!(msg.contains("softmax") && !msg.contains("debug_"), "{msg}");
    // Other errors pass through unchanged.
    let e = Problem::new("gemm", "fast", &params(&[]), "", true).unwrap_err();
    assert_eq!(e.clone().without_debug_kernels(), e);
}
