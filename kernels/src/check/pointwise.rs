//! References for the element-by-element kernels (vec_add, copy, triad, activations, noop and the debug
//! kernels), the host sum `membw_cpu` and the pointer chase `memlat_cpu`.
//!
//! The arithmetic ones are exact on our inputs (sums of multiples of 1/256), so they get a few ulps;
//! sigmoid and tanh get `1e-5` absolute plus relative, which admits GPUs' fast transcendental functions.
//! Large vectors are sampled in contiguous blocks so the sample stays cache-friendly.

use super::{EPS32, Plan, SAMPLE_OPS, Validation, pick};
use crate::catalog::KernelId;
use crate::problem::{Problem, TRIAD_SCALAR};
use crate::types::Buffer;

/// Elements per sampled block.
const BLOCK: usize = 1024;

/// Four ulps of `v` in f32, with a floor so an exact zero still has a non-zero tolerance.
fn ulps(v: f64) -> f64 {
    8.0 * EPS32 * v.abs() + f64::from(f32::MIN_POSITIVE)
}

fn transcendental(v: f64) -> f64 {
    1e-5 + 1e-5 * v.abs()
}

/// Visits the reference of an element-wise kernel (or a one-element one); returns whether it sampled.
pub(super) fn elementwise(
    problem: &Problem,
    x: &[&[f32]],
    f: &mut impl FnMut(usize, f64, f64),
) -> bool {
    let at = |i: usize, j: usize| f64::from(x[i][j]);
    match problem.id() {
        KernelId::VecAdd | KernelId::DebugWrong => each(problem, 1.0, f, |j| {
            let v = at(0, j) + at(1, j);
            (v, ulps(v))
        }),
        KernelId::Copy => each(problem, 1.0, f, |j| (at(0, j), ulps(at(0, j)))),
        KernelId::Triad => each(problem, 1.0, f, |j| {
            let v = at(0, j) + f64::from(TRIAD_SCALAR) * at(1, j);
            (v, ulps(v))
        }),
        KernelId::Relu => each(problem, 1.0, f, |j| {
            let v = at(0, j).max(0.0);
            (v, ulps(v))
        }),
        KernelId::Sigmoid => each(problem, 10.0, f, |j| {
            let v = 1.0 / (1.0 + (-at(0, j)).exp());
            (v, transcendental(v))
        }),
        KernelId::Tanh => each(problem, 10.0, f, |j| {
            let v = at(0, j).tanh();
            (v, transcendental(v))
        }),
        KernelId::Noop | KernelId::DebugCrash | KernelId::DebugHang | KernelId::DebugAlloc => {
            f(0, at(0, 0), ulps(at(0, 0)));
            false
        }
        KernelId::MembwCpu => {
            let (sum, n) = (exact_sum(x[0]), x[0].len() as f64);
            // Output rounding to f32 (one ulp) plus a little room for a blocked fp32 accumulation;
            // on these inputs fp32 partial sums stay exact below 2^16.
            f(0, sum, 2.0 * EPS32 * (sum.abs() + n.sqrt()));
            false
        }
        _ => unreachable!("pointwise::elementwise called for {}", problem.kernel.name),
    }
}

/// Feeds `reference(j)` for every element, or for sampled blocks when `ops` per element times the
/// length is too expensive; returns whether it sampled.
fn each(
    problem: &Problem,
    ops: f64,
    f: &mut impl FnMut(usize, f64, f64),
    reference: impl Fn(usize) -> (f64, f64),
) -> bool {
    let n = problem.output_len();
    match Plan::for_cost(problem, ops * n as f64) {
        Plan::Full => {
            for j in 0..n {
                let (v, tol) = reference(j);
                f(j, v, tol);
            }
            false
        }
        Plan::Sampled(mut rng) => {
            let blocks = n.div_ceil(BLOCK);
            let count = ((SAMPLE_OPS / (ops * BLOCK as f64)) as usize).max(2);
            for block in pick(&mut rng, blocks, count, &[0, blocks - 1]) {
                for j in block * BLOCK..((block + 1) * BLOCK).min(n) {
                    let (v, tol) = reference(j);
                    f(j, v, tol);
                }
            }
            true
        }
    }
}

/// Sum in f64, exact for our inputs (multiples of 2^-8 with |sum| ≤ 2^32 need at most 40 bits).
fn exact_sum(x: &[f32]) -> f64 {
    let mut lanes = [0.0f64; 8];
    let chunks = x.chunks_exact(8);
    let tail: f64 = chunks.remainder().iter().map(|&v| f64::from(v)).sum();
    for chunk in chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane += f64::from(v);
        }
    }
    lanes.iter().sum::<f64>() + tail
}

/// Where `hops` hops from entry 0 end, following the table in `inputs`; `Err` when the table is not
/// a chase table (an index out of range, or no cycle through entry 0).
pub(super) fn memlat_reference(problem: &Problem, inputs: &[Buffer]) -> Result<u32, String> {
    let table = inputs
        .first()
        .and_then(Buffer::as_u32)
        .ok_or("memlat_cpu input must be one u32 table")?;
    let hops = problem.uparam("hops");
    let step = |at: u32| -> Result<u32, String> {
        table.get(at as usize).copied().ok_or_else(|| {
            format!(
                "input table entry points to {at}, outside the table of {} entries",
                table.len()
            )
        })
    };
    let nodes = table.len() / 16;
    let mut at = 0u32;
    if hops <= nodes {
        for _ in 0..hops {
            at = step(at)?;
        }
        return Ok(at);
    }
    // More hops than nodes: find the cycle length through entry 0 and only walk the remainder.
    let mut cycle = 0usize;
    loop {
        at = step(at)?;
        cycle += 1;
        if at == 0 {
            break;
        }
        if cycle > nodes {
            return Err("input table has no cycle through entry 0".to_string());
        }
    }
    for _ in 0..hops % cycle {
        at = step(at)?;
    }
    Ok(at)
}

/// Exact check of memlat_cpu's single u32 output.
pub(super) fn check_memlat(problem: &Problem, inputs: &[Buffer], out: &[u32]) -> Validation {
    let expected = match memlat_reference(problem, inputs) {
        Ok(v) => v,
        Err(message) => return Validation::failed(1, message),
    };
    let got = out[0];
    let passed = got == expected;
    let err = f64::from(got.abs_diff(expected));
    Validation {
        passed,
        max_abs_error: err,
        worst_ratio: if passed { 0.0 } else { f64::MAX },
        elements_checked: 1,
        elements_total: 1,
        sampled: false,
        message: if passed {
            format!("reached entry {got} as expected")
        } else {
            format!("element [0]: got {got}, expected {expected} (exact)")
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn problem(kernel: &str, params: &[(&str, i64)]) -> Problem {
        let params: BTreeMap<String, i64> =
            params.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        Problem::new(kernel, "", &params, "f32", true).unwrap()
    }

    fn reference(p: &Problem, inputs: &[Vec<f32>]) -> Vec<f64> {
        let x: Vec<&[f32]> = inputs.iter().map(Vec::as_slice).collect();
        let mut out = vec![f64::NAN; p.output_len()];
        assert!(!elementwise(p, &x, &mut |i, e, _| out[i] = e));
        out
    }

    #[test]
    fn elementwise_definitions() {
        let a = vec![-1.0, 0.5, 2.0];
        let b = vec![0.25, 0.25, -4.0];
        let n = [("n", 3)];
        assert_eq!(
            reference(&problem("vec_add", &n), &[a.clone(), b.clone()]),
            [-0.75, 0.75, -2.0]
        );
        assert_eq!(
            reference(&problem("triad", &n), &[a.clone(), b]),
            [-0.25, 1.25, -10.0]
        );
        assert_eq!(
            reference(&problem("copy", &n), std::slice::from_ref(&a)),
            [-1.0, 0.5, 2.0]
        );
        assert_eq!(
            reference(&problem("relu", &n), std::slice::from_ref(&a)),
            [0.0, 0.5, 2.0]
        );
        let s = reference(&problem("sigmoid", &n), std::slice::from_ref(&a));
        assert!((s[0] - 0.268_941_421_369_995_1).abs() < 1e-12);
        let t = reference(&problem("tanh", &n), &[a]);
        assert!((t[2] - 0.964_027_580_075_817).abs() < 1e-12);
        assert_eq!(reference(&problem("noop", &[]), &[vec![0.75]]), [0.75]);
        assert_eq!(
            reference(
                &problem("membw_cpu", &[("n", 5)]),
                &[vec![1.0, 0.5, -0.25, 3.0, 0.0]]
            ),
            [4.25]
        );
    }

    #[test]
    fn exact_sum_handles_every_tail_length() {
        for len in 0..20 {
            let x: Vec<f32> = (0..len).map(|i| i as f32 / 256.0).collect();
            let expected = (0..len).sum::<usize>() as f64 / 256.0;
            assert_eq!(exact_sum(&x), expected, "len {len}");
        }
    }

    #[test]
    fn memlat_reference_wraps_around_the_cycle() {
        // Three nodes: 0 -> 32 -> 16 -> 0.
        let mut table = vec![0u32; 48];
        table[0] = 32;
        table[32] = 16;
        table[16] = 0;
        let inputs = [Buffer::U32(table)];
        for (hops, expected) in [(1, 32), (2, 16), (3, 0), (7, 32), (302, 16)] {
            let p = problem("memlat_cpu", &[("size_kib", 4), ("hops", hops)]);
            // The problem's table would be larger; the reference follows whatever table it is given.
            assert_eq!(memlat_reference(&p, &inputs), Ok(expected), "hops {hops}");
        }
        let mut broken = vec![0u32; 32];
        broken[0] = 5000;
        let broken = [Buffer::U32(broken)];
        let p = problem("memlat_cpu", &[("size_kib", 4), ("hops", 2)]);
        assert!(
            memlat_reference(&p, &broken)
                .unwrap_err()
                .contains("outside the table")
        );
    }
}
