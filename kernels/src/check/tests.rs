//! Cross-kernel validation tests: every kernel passes its own reference, fails a perturbed output,
//! and realistic fp32 implementations fit the tolerances.

use std::collections::BTreeMap;

use crate::catalog::{KernelId, catalog};
use crate::problem::Problem;
use crate::types::Buffer;

/// The full reference output rounded to f32: what a perfect backend returns.
fn reference_output(problem: &Problem, inputs: &[Buffer]) -> Buffer {
    problem.kernel.id.family().reference(problem, inputs)
}

fn problem(kernel: &str, params: &[(&str, i64)], dtype: &str) -> Problem {
    let params: BTreeMap<String, i64> = params.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    Problem::new(kernel, "", &params, dtype, true).unwrap()
}

/// A small problem of every kernel in the catalog.
fn small_problems() -> Vec<Problem> {
    let mut out = Vec::new();
    // The networks, the `cnn_*` layers and the transformer kernels validate as graphs (their own
    // tests: `model/tests.rs`, `llm/tests.rs`).
    for k in catalog()
        .iter()
        .filter(|k| !matches!(k.id, KernelId::Model(_) | KernelId::Llm(_)))
    {
        let params: Vec<(&str, i64)> = match k.name {
            "gemm" => vec![("m", 5), ("n", 7), ("k", 9)],
            "softmax" | "log_softmax" | "layernorm" | "rmsnorm" | "layernorm_rmsnorm_fused" => {
                vec![("rows", 4), ("cols", 33)]
            }
            "conv2d" => vec![
                ("batch", 2),
                ("channels", 3),
                ("height", 7),
                ("width", 6),
                ("filters", 4),
                ("stride", 2),
            ],
            "memlat_cpu" => vec![("size_kib", 16), ("hops", 1000)],
            "compute_peak" => vec![("items", 300), ("pairs", 37)],
            "transfer" => vec![("bytes", 4000)],
            "roofline" => vec![("n", 1000), ("pairs", 3)],
            "noop" | "debug_hang" | "debug_crash" | "debug_alloc" | "debug_noise" => vec![],
            _ => vec![("n", 1000)],
        };
        out.push(problem(k.name, &params, "f32"));
    }
    out.push(problem("gemm", &[("m", 5), ("n", 7), ("k", 9)], "f16"));
    let mut int8 = problem("compute_peak", &[("items", 300), ("pairs", 300)], "f32");
    int8.variant = "int8".into();
    out.push(int8);
    out.push(problem(
        "conv2d",
        &[
            ("channels", 2),
            ("height", 5),
            ("width", 9),
            ("ksize", 5),
            ("pad", 3),
        ],
        "f32",
    ));
    out
}

/// Rounds to the nearest fp16 value (normal range), as an fp16-storing backend would.
fn round_to_f16(v: f32) -> f32 {
    if v == 0.0 {
        return 0.0;
    }
    let exp = v.abs().log2().floor().max(-14.0);
    let quantum = 2f32.powf(exp - 10.0);
    (v / quantum).round() * quantum
}

#[test]
fn every_kernel_passes_its_reference_and_fails_a_perturbed_output() {
    for p in small_problems() {
        let key = p.spec_key(crate::Mode::ComputeOnly);
        let inputs = p.inputs(11);
        let mut good = reference_output(&p, &inputs);
        if let (crate::Dtype::F16, Buffer::F32(v)) = (p.dtype, &mut good) {
            v.iter_mut().for_each(|x| *x = round_to_f16(*x));
        }
        let v = p.check(&inputs, &good);
        assert!(v.passed, "{key}: {}", v.message);
        assert!(
            !v.sampled && v.elements_checked == v.elements_total,
            "{key}"
        );
        assert!(v.worst_ratio <= 1.0, "{key}");

        let bad = match &good {
            Buffer::F32(v) => {
                let mut v = v.clone();
                let at = v.len() / 2;
                v[at] += 1e-2;
                Buffer::F32(v)
            }
            Buffer::U32(v) => Buffer::U32(vec![v[0] ^ 16]),
            Buffer::Packed(_) | Buffer::Half(_) => {
                unreachable!("{key}: outputs are never packed or half")
            }
        };
        let v = p.check(&inputs, &bad);
        assert!(!v.passed, "{key}: perturbed output passed: {}", v.message);
        assert!(v.worst_ratio > 1.0, "{key}");
        assert!(v.message.starts_with("element ["), "{key}: {}", v.message);
    }
}

#[test]
fn failure_messages_locate_the_element() {
    let p = problem("gemm", &[("m", 4), ("n", 8), ("k", 16)], "f32");
    let inputs = p.inputs(1);
    let Buffer::F32(mut out) = reference_output(&p, &inputs) else {
        panic!("gemm output is f32")
    };
    out[2 * 8 + 5] = 100.0;
    let v = p.check(&inputs, &Buffer::F32(out));
    assert!(!v.passed);
    assert!(
        v.message.starts_with("element [2,5]: got 100, expected "),
        "{}",
        v.message
    );
    assert!(
        v.message.contains("1 of 32 checked elements"),
        "{}",
        v.message
    );
}

#[test]
fn non_finite_wrong_length_and_wrong_kind_fail() {
    let p = problem("softmax", &[("rows", 2), ("cols", 8)], "f32");
    let inputs = p.inputs(2);
    let Buffer::F32(good) = reference_output(&p, &inputs) else {
        panic!("softmax output is f32")
    };
    let mut nan = good.clone();
    nan[9] = f32::NAN;
    let v = p.check(&inputs, &Buffer::F32(nan));
    assert!(!v.passed && v.message.contains("[1,1]") && v.message.contains("non-finite"));
    // Still serialisable to JSON (no infinities).
    let json = serde_json::to_string(&v).unwrap();
    let back: crate::Validation = serde_json::from_str(&json).unwrap();
    assert_eq!(back, v);

    let v = p.check(&inputs, &Buffer::F32(good[..15].to_vec()));
    assert!(
        !v.passed && v.message.contains("15 elements, expected f32 with 16"),
        "{}",
        v.message
    );
    let v = p.check(&inputs, &Buffer::U32(vec![0; 16]));
    assert!(
        !v.passed && v.message.contains("output is u32"),
        "{}",
        v.message
    );
    let v = p.check(&inputs[..0], &Buffer::F32(good.clone()));
    assert!(
        !v.passed && v.message.contains("input buffers"),
        "{}",
        v.message
    );
}

/// Plain fp32 implementations, the way a simple backend writes them, must pass.
#[test]
fn naive_fp32_implementations_fit_the_tolerances() {
    // GEMM with a long sequential fp32 accumulation.
    let (m, n, k) = (3, 4, 8192);
    let p = problem("gemm", &[("m", m), ("n", n), ("k", k)], "f32");
    let (m, n, k) = (m as usize, n as usize, k as usize);
    let x = p.inputs(5);
    let (a, b) = (x[0].as_f32().unwrap(), x[1].as_f32().unwrap());
    let mut c = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).fold(0f32, |acc, q| acc + a[i * k + q] * b[q * n + j]);
        }
    }
    let v = p.check(&x, &Buffer::F32(c));
    assert!(v.passed, "gemm: {}", v.message);

    // Row kernels in fp32 with one-pass sums.
    let (rows, cols) = (3usize, 8192usize);
    for kernel in [
        "softmax",
        "log_softmax",
        "layernorm",
        "rmsnorm",
        "layernorm_rmsnorm_fused",
    ] {
        let p = problem(
            kernel,
            &[("rows", rows as i64), ("cols", cols as i64)],
            "f32",
        );
        let x = p.inputs(9);
        let f: Vec<&[f32]> = x.iter().map(|b| b.as_f32().unwrap()).collect();
        let mut out = vec![0f32; rows * cols];
        for r in 0..rows {
            let row = &f[0][r * cols..(r + 1) * cols];
            let y = &mut out[r * cols..(r + 1) * cols];
            let layernorm = |row: &[f32], g: &[f32], b: &[f32], y: &mut [f32]| {
                let mean = row.iter().sum::<f32>() / cols as f32;
                let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / cols as f32;
                let rstd = 1.0 / (var + 1e-5).sqrt();
                for c in 0..cols {
                    y[c] = (row[c] - mean) * rstd * g[c] + b[c];
                }
            };
            let rmsnorm = |row: &[f32], g: &[f32], y: &mut [f32]| {
                let ms = row.iter().map(|v| v * v).sum::<f32>() / cols as f32;
                let rstd = 1.0 / (ms + 1e-5).sqrt();
                for c in 0..cols {
                    y[c] = row[c] * rstd * g[c];
                }
            };
            match kernel {
                "softmax" => {
                    let max = row.iter().copied().fold(f32::MIN, f32::max);
                    let sum: f32 = row.iter().map(|v| (v - max).exp()).sum();
                    for c in 0..cols {
                        y[c] = (row[c] - max).exp() / sum;
                    }
                }
                "log_softmax" => {
                    let max = row.iter().copied().fold(f32::MIN, f32::max);
                    let log_sum = row.iter().map(|v| (v - max).exp()).sum::<f32>().ln();
                    for c in 0..cols {
                        y[c] = (row[c] - max) - log_sum;
                    }
                }
                "layernorm" => layernorm(row, f[1], f[2], y),
                "rmsnorm" => rmsnorm(row, f[1], y),
                _ => {
                    let mut z = vec![0f32; cols];
                    layernorm(row, f[1], f[2], &mut z);
                    rmsnorm(&z, f[3], y);
                }
            }
        }
        let v = p.check(&x, &Buffer::F32(out));
        assert!(v.passed, "{kernel}: {}", v.message);
    }

    // Activations with f32 libm, and an fp32 sequential sum for membw_cpu.
    let p = problem("tanh", &[("n", 4096)], "f32");
    let x = p.inputs(3);
    let y = x[0].as_f32().unwrap().iter().map(|v| v.tanh()).collect();
    assert!(p.check(&x, &Buffer::F32(y)).passed);
    let p = problem("sigmoid", &[("n", 4096)], "f32");
    let y = x[0]
        .as_f32()
        .unwrap()
        .iter()
        .map(|v| 1.0 / (1.0 + (-v).exp()))
        .collect();
    assert!(p.check(&x, &Buffer::F32(y)).passed);
    // gelu as PyTorch writes it, in f32: 1 + tanh(u) cancels for negative x, within the tolerance.
    let p = problem("gelu", &[("n", 4096)], "f32");
    let y = x[0]
        .as_f32()
        .unwrap()
        .iter()
        .map(|v| 0.5 * v * (1.0 + (0.797_884_6 * (v + 0.044_715 * v * v * v)).tanh()))
        .collect();
    assert!(p.check(&x, &Buffer::F32(y)).passed);
    let p = problem("membw_cpu", &[("n", 1 << 20)], "f32");
    let x = p.inputs(3);
    let sum: f32 = x[0].as_f32().unwrap().iter().sum();
    let v = p.check(&x, &Buffer::F32(vec![sum]));
    assert!(v.passed, "membw_cpu: {}", v.message);
}

#[test]
fn f16_gemm_needs_the_looser_output_tolerance() {
    let p16 = problem("gemm", &[("m", 16), ("n", 16), ("k", 64)], "f16");
    let p32 = problem("gemm", &[("m", 16), ("n", 16), ("k", 64)], "f32");
    let x = p16.inputs(4);
    let Buffer::F32(mut out) = reference_output(&p16, &x) else {
        panic!("gemm output is f32")
    };
    out.iter_mut().for_each(|v| *v = round_to_f16(*v));
    let out = Buffer::F32(out);
    assert!(p16.check(&x, &out).passed);
    assert!(
        !p32.check(&x, &out).passed,
        "fp16 rounding must exceed the f32 tolerance"
    );
}

#[test]
fn large_gemm_is_sampled_and_still_catches_errors() {
    // 4096×4096×16 costs 5.4e8 reference operations: sampled, yet cheap to compute in full here.
    let p = problem("gemm", &[("m", 4096), ("n", 4096), ("k", 16)], "f32");
    let x = p.inputs(6);
    let good = reference_output(&p, &x);
    let v = p.check(&x, &good);
    assert!(v.passed && v.sampled, "{}", v.message);
    assert!(v.elements_checked < v.elements_total / 100 && v.elements_checked >= 64);
    assert!(v.message.contains("sampled"), "{}", v.message);
    let Buffer::F32(mut bad) = good else {
        panic!("gemm output is f32")
    };
    let last = bad.len() - 1;
    bad[last] += 1e-2; // the last corner is always in the sample
    let v = p.check(&x, &Buffer::F32(bad));
    assert!(
        !v.passed && v.message.contains("[4095,4095]"),
        "{}",
        v.message
    );

    // The 4096³ perf size: sampled, and a zero output is caught.
    let p = problem("gemm", &[("m", 4096), ("n", 4096), ("k", 4096)], "f32");
    let x = p.inputs(6);
    let start = std::time::Instant::now();
    let v = p.check(&x, &Buffer::F32(vec![0.0; 4096 * 4096]));
    eprintln!(
        "4096³ gemm sampled check: {:?}, {} elements",
        start.elapsed(),
        v.elements_checked
    );
    assert!(v.sampled && !v.passed);
}

#[test]
fn large_row_conv_and_elementwise_problems_are_sampled() {
    let p = problem("softmax", &[("rows", 1 << 15), ("cols", 1024)], "f32");
    let x = vec![Buffer::F32(vec![0.0; 1 << 25])];
    let mut out = vec![1.0 / 1024.0; 1 << 25];
    let v = p.check(&x, &Buffer::F32(out.clone()));
    assert!(v.passed && v.sampled, "{}", v.message);
    assert_eq!(v.elements_checked % 1024, 0, "whole rows are checked");
    out[(1 << 25) - 1] = 0.5; // last row is always sampled
    assert!(!p.check(&x, &Buffer::F32(out)).passed);

    let p = problem("sigmoid", &[("n", 1 << 25)], "f32");
    let x = vec![Buffer::F32(vec![0.0; 1 << 25])];
    let mut out = vec![0.5; 1 << 25];
    let v = p.check(&x, &Buffer::F32(out.clone()));
    assert!(
        v.passed && v.sampled && v.elements_checked < 1 << 22,
        "{}",
        v.message
    );
    out[3] = 0.51;
    assert!(!p.check(&x, &Buffer::F32(out)).passed);

    let p = problem(
        "conv2d",
        &[
            ("channels", 64),
            ("height", 56),
            ("width", 56),
            ("filters", 64),
            ("ksize", 5),
            ("pad", 2),
        ],
        "f32",
    );
    let x = p.inputs(8);
    let good = reference_output(&p, &x);
    let v = p.check(&x, &good);
    assert!(v.passed && v.sampled, "{}", v.message);
    let Buffer::F32(mut bad) = good else {
        panic!("conv2d output is f32")
    };
    bad[0] -= 1e-2;
    let v = p.check(&x, &Buffer::F32(bad));
    assert!(
        !v.passed && v.message.contains("[0,0,0,0]"),
        "{}",
        v.message
    );
}
