use super::*;
use crate::check::harness::Validation;
use crate::check::model::{LOGITS_REL_TOL_F16, Storage, check_model};
use crate::problem::Problem;
use crate::types::Buffer;
use rand::SeedableRng;
use std::collections::BTreeMap;

fn problem(kernel: &str, batch: i64) -> Problem {
    let params: BTreeMap<String, i64> = [("batch".to_string(), batch)].into();
    Problem::new(kernel, "", &params, "", false).expect("valid spec")
}

fn conv_linear_macs(g: &Graph) -> u64 {
    g.layers
        .iter()
        .filter(|l| matches!(l.op, Op::Conv(_) | Op::Linear { .. }))
        .map(Layer::macs)
        .sum()
}

/// Channels of the batch norms folded into the convolutions: one bias each.
fn folded_norms(g: &Graph) -> usize {
    g.layers
        .iter()
        .filter_map(|l| match l.op {
            Op::Conv(c) => Some(c.cout),
            _ => None,
        })
        .sum()
}

#[test]
fn the_networks_match_the_published_sizes() {
    // torchvision's parameter counts (conv weights, BN γ and β, fc) and multiply-adds.
    let r = Graph::new(Net::Resnet18, 1);
    assert_eq!(r.weights_len + folded_norms(&r), 11_689_512);
    let macs = conv_linear_macs(&r) as f64;
    assert!((1.80e9..1.83e9).contains(&macs), "resnet18 {macs}");
    assert_eq!(r.classes(), 1000);
    assert_eq!(
        r.layers
            .iter()
            .filter(|l| matches!(l.op, Op::Add { .. }))
            .count(),
        8
    );
    let m = Graph::new(Net::MobilenetV2, 1);
    assert_eq!(m.weights_len + folded_norms(&m), 3_504_872);
    let macs = conv_linear_macs(&m) as f64;
    assert!((0.29e9..0.32e9).contains(&macs), "mobilenet_v2 {macs}");
    assert_eq!(
        m.layers
            .iter()
            .filter(|l| matches!(l.op, Op::Add { .. }))
            .count(),
        10
    );
    let s = Graph::new(Net::SimpleCnn, 1);
    assert_eq!(s.classes(), 10);
    assert_eq!(s.layers.last().unwrap().inp.len(), 128 * 4 * 4);
    // Every layer reads an earlier tensor of the shape it expects, and the arena tiles exactly.
    for g in [&r, &m, &s] {
        let mut end = 0;
        for (i, l) in g.layers.iter().enumerate() {
            assert!(l.input <= i, "{}", l.name);
            assert_eq!(g.shape(l.input), l.inp, "{}", l.name);
            if let Op::Add { skip, .. } = l.op {
                assert_eq!(g.shape(skip), l.inp, "{}", l.name);
            }
            assert_eq!(l.out_offset, end, "{}", l.name);
            end += g.batch * l.out.len();
        }
        assert_eq!(end, g.arena_len);
    }
    assert_eq!(Graph::new(Net::Resnet18, 8).arena_len, 8 * r.arena_len);
}

#[test]
fn weights_are_seeded_and_scaled_per_layer() {
    let g = Graph::new(Net::Resnet18, 1);
    let w = g.weights(&mut Pcg64::seed_from_u64(3));
    assert_eq!(w, g.weights(&mut Pcg64::seed_from_u64(3)));
    assert_ne!(w, g.weights(&mut Pcg64::seed_from_u64(4)));
    assert!(w.iter().all(|v| v.is_finite()));
    // He-uniform with γ/√var ≤ 1.5/√0.5: conv1 (fan-in 147) stays under 0.43, layer4 (4608) under 0.077.
    let max_abs = |name: &str| {
        let l = g.layer(name).unwrap();
        w[l.w_offset..l.w_offset + l.w_len]
            .iter()
            .fold(0f32, |m, v| m.max(v.abs()))
    };
    assert!(max_abs("conv1") > 0.1 && max_abs("conv1") < 0.43);
    assert!(max_abs("layer4.1.conv1") < 0.077);
}

#[test]
fn one_element_and_the_whole_layer_agree() {
    // The plane loops of `layer_forward` against the direct sums of `layer_element`, on layers
    // with padding, strides 1 and 2, 7×7, 1×1, depthwise, pools, adds and the linear heads.
    let mut rng = Pcg64::seed_from_u64(9);
    for net in [Net::SimpleCnn, Net::Resnet18, Net::MobilenetV2] {
        let g = Graph::new(net, 1);
        let w = g.weights(&mut rng);
        let kinds: Vec<&Layer> = g
            .layers
            .iter()
            .filter(|l| l.inp.len() <= 200_000 || matches!(l.op, Op::Conv(c) if c.k == 7))
            .collect();
        for l in kinds {
            let x: Vec<f64> = (0..l.inp.len())
                .map(|_| uniform(&mut rng, -1.0, 1.0))
                .collect();
            let skip: Vec<f64> = (0..l.inp.len())
                .map(|_| uniform(&mut rng, -1.0, 1.0))
                .collect();
            let full = layer_forward(l, &x, Some(&skip), &w);
            let n = l.out.len();
            for o in [0, 1, l.out.w - 1, n / 2, n - l.out.w, n - 1] {
                let (v, t) = layer_element(l, &x, Some(&skip), &w, o);
                assert!(
                    (v - full.value[o]).abs() <= 1e-12 * (1.0 + v.abs()),
                    "{} [{o}]",
                    l.name
                );
                assert!(
                    (t - full.tol[o]).abs() <= 1e-9 * t.max(1e-30),
                    "{} tol [{o}]",
                    l.name
                );
            }
        }
    }
}

fn run_check(p: &Problem, arena: Vec<f32>) -> Validation {
    p.check(&p.inputs(5), &Buffer::F32(arena))
}

#[test]
fn a_perfect_arena_passes_and_a_wrong_layer_is_named() {
    let p = problem("simple_cnn", 2);
    let inputs = p.inputs(5);
    let g = p.graph();
    let (images, weights) = (inputs[0].as_f32().unwrap(), inputs[1].as_f32().unwrap());
    let good = crate::check::model::reference_arena(&g, Storage::F32, images, weights);
    let v = run_check(&p, good.clone());
    assert!(v.passed, "{}", v.message);
    assert!(v.worst_ratio <= 1.0 && v.elements_checked > 1000);
    // One element of pool2 of the last image off: the sampled check may miss one element, so
    // offset a whole plane (what a real indexing bug does).
    let l = g.layer("conv2").unwrap();
    let mut bad = good.clone();
    let plane = l.out.h * l.out.w;
    let at = l.out_offset + l.out.len() + 3 * plane;
    for v in &mut bad[at..at + plane] {
        *v += 0.01;
    }
    let v = run_check(&p, bad);
    assert!(!v.passed);
    assert!(
        v.message.contains("`conv2`") && v.message.contains("diverges first"),
        "{}",
        v.message
    );
    assert!(v.message.contains("element [1,3,"), "{}", v.message);
}

#[test]
fn each_layer_kernel_passes_its_reference_and_fails_a_wrong_output() {
    let cases: [(&str, &[(&str, i64)]); 6] = [
        (
            "cnn_conv",
            &[
                ("channels", 5),
                ("height", 9),
                ("width", 7),
                ("filters", 6),
                ("stride", 2),
            ],
        ),
        (
            "cnn_conv/depthwise",
            &[
                ("channels", 6),
                ("height", 8),
                ("width", 8),
                ("filters", 6),
                ("act", 2),
            ],
        ),
        (
            "cnn_conv",
            &[
                ("channels", 4),
                ("height", 5),
                ("width", 5),
                ("filters", 3),
                ("ksize", 7),
                ("act", 0),
            ],
        ),
        (
            "cnn_maxpool",
            &[("channels", 3), ("height", 9), ("width", 10)],
        ),
        (
            "cnn_avgpool",
            &[("batch", 3), ("channels", 4), ("height", 5), ("width", 3)],
        ),
        (
            "cnn_linear",
            &[("batch", 2), ("inputs", 70), ("outputs", 9), ("act", 1)],
        ),
    ];
    for (kernel, params) in cases {
        let params: BTreeMap<String, i64> =
            params.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let (kernel, variant) = kernel.split_once('/').unwrap_or((kernel, ""));
        let p = Problem::new(kernel, variant, &params, "", false).expect("valid spec");
        let g = p.graph();
        assert_eq!(g.layers.len(), 1, "{kernel}");
        if variant == "depthwise" {
            assert!(matches!(g.layers[0].op, Op::Conv(c) if c.groups == 6));
        }
        let inputs = p.inputs(5);
        let (images, weights) = (inputs[0].as_f32().unwrap(), inputs[1].as_f32().unwrap());
        let good = crate::check::model::reference_arena(&g, Storage::F32, images, weights);
        assert_eq!(good.len(), p.output_len(), "{kernel}");
        let v = run_check(&p, good.clone());
        assert!(v.passed, "{kernel} {params:?}: {}", v.message);
        // Every output element off by a little more than its tolerance allows.
        let bad: Vec<f32> = good.iter().map(|v| v + 0.01 + v.abs() * 0.01).collect();
        let v = run_check(&p, bad);
        assert!(!v.passed, "{kernel} {params:?}");
        assert!(
            v.message.contains("diverges first"),
            "{kernel}: {}",
            v.message
        );
    }
}

#[test]
fn layer_kernels_refuse_what_has_no_meaning() {
    let make = |kernel: &str, params: &[(&str, i64)]| {
        let params: BTreeMap<String, i64> =
            params.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let (kernel, variant) = kernel.split_once('/').unwrap_or((kernel, ""));
        Problem::new(kernel, variant, &params, "", false)
            .unwrap_err()
            .to_string()
    };
    let e = make("cnn_conv/depthwise", &[("channels", 8), ("filters", 16)]);
    assert!(
        e.contains("filters = channels") && e.contains("filters=16"),
        "{e}"
    );
    let e = make("cnn_maxpool", &[("ksize", 2), ("pad", 2)]);
    assert!(e.contains("pad=2 must be below ksize=2"), "{e}");
    let e = make("cnn_maxpool", &[("height", 1), ("ksize", 5), ("pad", 1)]);
    assert!(e.contains("output height would be below 1"), "{e}");
}

#[test]
fn perturbed_weights_are_caught_and_the_layer_named() {
    // The debug switch's effect, end to end: a backend that ran with one layer's weights scaled.
    for (kernel, layer) in [("simple_cnn", "conv3"), ("mobilenet_v2", "features.13.dw")] {
        let p = problem(kernel, 1);
        let inputs = p.inputs(5);
        let g = p.graph();
        let mut wrong = inputs[1].as_f32().unwrap().to_vec();
        g.perturb(&mut wrong, layer).unwrap();
        let arena = crate::check::model::reference_arena(
            &g,
            Storage::F32,
            inputs[0].as_f32().unwrap(),
            &wrong,
        );
        let v = p.check(&inputs, &Buffer::F32(arena));
        assert!(!v.passed, "{kernel}");
        assert!(
            v.message.contains(&format!("`{layer}`")),
            "{kernel}: {}",
            v.message
        );
    }
    let g = Graph::new(Net::Resnet18, 1);
    let mut w = vec![0f32; g.weights_len];
    let err = g.perturb(&mut w, "maxpool").unwrap_err();
    assert!(
        err.contains("has no weights") && err.contains("conv1"),
        "{err}"
    );
    let err = g.perturb(&mut w, "layer9.conv").unwrap_err();
    assert!(
        err.contains("no layer") && err.contains("(21 in all)"),
        "{err}"
    );
}

#[test]
fn model_problems_size_and_measure_in_images() {
    let p = problem("resnet18", 4);
    assert_eq!(
        p.input_lens(),
        vec![4 * 3 * 224 * 224, p.graph().weights_len]
    );
    assert_eq!(p.output_len(), p.graph().arena_len);
    let m = p.metric(0.5);
    assert_eq!(m.kind, crate::types::MetricKind::ImagesPerS);
    assert!((m.value - 8.0).abs() < 1e-9);
    assert!((p.flops() / 4.0 - 2.0 * 1.82e9).abs() < 0.05e9 * 2.0);
    let err = Problem::new(
        "resnet18",
        "",
        &[("batch".to_string(), 0)].into(),
        "",
        false,
    );
    assert!(err.unwrap_err().to_string().contains("batch"));
    let err = Problem::new("mobilenet_v2", "", &BTreeMap::new(), "f64", false);
    assert!(err.is_err());
    // f16 storage halves the bytes moved.
    let half = Problem::new("cnn_maxpool", "", &BTreeMap::new(), "f16", false).unwrap();
    let full = Problem::new("cnn_maxpool", "", &BTreeMap::new(), "", false).unwrap();
    assert_eq!(2.0 * half.bytes(), full.bytes());
}

#[test]
fn f16_storage_is_checked_with_its_own_tolerance_and_still_names_a_wrong_layer() {
    let batch: BTreeMap<String, i64> = [("batch".to_string(), 1)].into();
    for kernel in ["simple_cnn", "mobilenet_v2", "resnet18"] {
        let p = Problem::new(kernel, "", &batch, "f16", false).expect("valid spec");
        let inputs = p.inputs(5);
        let g = p.graph();
        let (images, weights) = (inputs[0].as_f32().unwrap(), inputs[1].as_f32().unwrap());
        let in_f16 = |v: &f32| half::f16::from_f32(*v).to_f32() == *v;
        assert!(images.iter().chain(weights).all(in_f16), "{kernel}");
        // A perfect f16-storage backend passes, well inside the logits' tolerance.
        let good = crate::check::model::reference_arena(&g, Storage::F16, images, weights);
        let v = p.check(&inputs, &Buffer::F32(good.clone()));
        assert!(v.passed, "{kernel}: {}", v.message);
        let reference = g.forward_f64(0, images, weights);
        let scale = reference.iter().fold(0f64, |m, r| m.max(r.abs()));
        let logits = g.tensor(g.layers.len(), 0, images, &good);
        let worst = logits
            .iter()
            .zip(&reference)
            .map(|(&l, r)| (f64::from(l) - r).abs() / scale)
            .fold(0f64, f64::max);
        println!("{kernel}: f16 logits off the f64 network by {worst:.2e} of the largest");
        assert!(worst < LOGITS_REL_TOL_F16 / 3.0, "{kernel}: {worst:e}");
        // The rounding is real: the same arena fails the f32 check.
        let strict = check_model(&g, Storage::F32, images, weights, &good);
        assert!(!strict.passed, "{kernel}");
    }
    // The perturbed layer is still named.
    let p = Problem::new("simple_cnn", "", &batch, "f16", false).expect("valid spec");
    let inputs = p.inputs(5);
    let g = p.graph();
    let mut wrong = inputs[1].as_f32().unwrap().to_vec();
    g.perturb(&mut wrong, "conv2").unwrap();
    let images = inputs[0].as_f32().unwrap();
    let arena = crate::check::model::reference_arena(&g, Storage::F16, images, &wrong);
    let v = p.check(&inputs, &Buffer::F32(arena));
    assert!(!v.passed && v.message.contains("`conv2`"), "{}", v.message);
}
