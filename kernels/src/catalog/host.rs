//! The host memory kernels, which only the cpu backend runs: `membw_cpu` (the sum of a large
//! array: read bandwidth) and `memlat_cpu` (pointer chasing over one random cycle: latency).
//! Their catalog entries, sizes, inputs (the chase table) and references: the sum exactly in f64,
//! the chase's end entry exactly.

use rand::RngCore;
use rand_pcg::Pcg64;

use super::{
    CPU_ONLY, Family, KernelDef, KernelId, ParamDef, Problem, Visit, default_variant_def, p,
};
use crate::check::harness::{EPS32, Validation};
use crate::inputs::{UNIT, rng_for, seeded};
use crate::types::{Buffer, BufferKind, MetricKind};

/// The host memory kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostKernel {
    /// `membw_cpu`: sum of a large array, host memory bandwidth.
    MembwCpu,
    /// `memlat_cpu`: pointer chasing over a random cycle, host memory latency.
    MemlatCpu,
}

const MEMBW_PARAMS: &[ParamDef] = &[p("n", 1 << 24, 1, 1 << 32, "f32 elements summed")];
const MEMLAT_PARAMS: &[ParamDef] = &[
    p(
        "size_kib",
        65536,
        4,
        1 << 24,
        "size of the chased table in KiB",
    ),
    p("hops", 1 << 20, 1, 1 << 28, "dependent loads per iteration"),
];

/// Every host kernel, in display order.
pub(super) static TABLE: [KernelDef; 2] = [
    KernelDef {
        host_only: true,
        backends: CPU_ONLY,
        ..default_variant_def(
            KernelId::Host(HostKernel::MembwCpu),
            "membw_cpu",
            "sum of a large f32 array; host memory read bandwidth",
            MEMBW_PARAMS,
            MetricKind::Gbps,
        )
    },
    KernelDef {
        host_only: true,
        backends: CPU_ONLY,
        ..default_variant_def(
            KernelId::Host(HostKernel::MemlatCpu),
            "memlat_cpu",
            "pointer chasing over one random cycle of 64-byte lines; host memory latency",
            MEMLAT_PARAMS,
            MetricKind::NsPerHop,
        )
    },
];

impl HostKernel {
    /// Every host kernel.
    pub const ALL: [HostKernel; 2] = [HostKernel::MembwCpu, HostKernel::MemlatCpu];
}

impl Family for HostKernel {
    fn flops(&self, p: &Problem) -> f64 {
        match self {
            HostKernel::MembwCpu => p.fparam("n"),
            HostKernel::MemlatCpu => 0.0,
        }
    }

    /// `memlat_cpu` counts one 64-byte line per hop.
    fn bytes(&self, p: &Problem) -> f64 {
        match self {
            HostKernel::MembwCpu => 4.0 * p.fparam("n"),
            HostKernel::MemlatCpu => 64.0 * p.fparam("hops"),
        }
    }

    fn input_lens(&self, p: &Problem) -> Vec<u128> {
        match self {
            HostKernel::MembwCpu => vec![p.wparam("n")],
            HostKernel::MemlatCpu => vec![p.wparam("size_kib") * 1024 / 4],
        }
    }

    fn output_len(&self, _p: &Problem) -> u128 {
        1
    }

    /// The chase's table and end entry are u32 whatever the dtype.
    fn elem(&self) -> BufferKind {
        match self {
            HostKernel::MembwCpu => BufferKind::F32,
            HostKernel::MemlatCpu => BufferKind::U32,
        }
    }

    fn make_inputs(&self, p: &Problem, seed: u64) -> Vec<Buffer> {
        let len = super::lens(&self.input_lens(p))[0];
        match self {
            HostKernel::MembwCpu => seeded(&[UNIT], &[len], seed),
            HostKernel::MemlatCpu => vec![Buffer::U32(chase_table(len, &mut rng_for(seed, 0)))],
        }
    }

    fn validate(&self, p: &Problem, inputs: &[Buffer], output: &Buffer) -> Option<Validation> {
        match (self, output) {
            (HostKernel::MemlatCpu, Buffer::U32(out)) => Some(check_memlat(p, inputs, out)),
            (HostKernel::MembwCpu | HostKernel::MemlatCpu, _) => None,
        }
    }

    fn visit(&self, p: &Problem, x: &[&[f32]], f: Visit<'_>) -> Result<bool, String> {
        match self {
            HostKernel::MembwCpu => {
                let (sum, n) = (exact_sum(x[0]), x[0].len() as f64);
                // Output rounding to f32 (one ulp) plus a little room for a blocked fp32
                // accumulation; on these inputs fp32 partial sums stay exact below 2^16.
                f(0, sum, 2.0 * EPS32 * (sum.abs() + n.sqrt()));
                Ok(false)
            }
            HostKernel::MemlatCpu => Err(format!("{} output must be u32", p.kernel.name)),
        }
    }

    #[cfg(test)]
    fn reference(&self, p: &Problem, inputs: &[Buffer]) -> Buffer {
        match self {
            HostKernel::MembwCpu => {
                let mut out = vec![f32::NAN];
                let x: Vec<&[f32]> = inputs.iter().filter_map(Buffer::as_f32).collect();
                self.visit(p, &x, &mut |i, e, _| out[i] = e as f32).unwrap();
                Buffer::F32(out)
            }
            HostKernel::MemlatCpu => Buffer::U32(vec![memlat_reference(p, inputs).unwrap()]),
        }
    }
}

/// The pointer-chasing table of `memlat_cpu`: `entries / 16` nodes of 64 bytes; the first u32 of each
/// node holds the entry index of the next node in one random cycle over all nodes (Sattolo's
/// algorithm), the rest are 0.
fn chase_table(entries: usize, rng: &mut Pcg64) -> Vec<u32> {
    let nodes = entries / 16;
    let mut next: Vec<u32> = (0..nodes as u32).collect();
    for i in (1..nodes).rev() {
        // j uniform in 0..i (Sattolo: strictly below i, which makes one single cycle).
        let j = ((u128::from(rng.next_u64()) * i as u128) >> 64) as usize;
        next.swap(i, j);
    }
    let mut table = vec![0u32; entries];
    for (node, &to) in next.iter().enumerate() {
        table[node * 16] = to * 16;
    }
    table
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
fn memlat_reference(problem: &Problem, inputs: &[Buffer]) -> Result<u32, String> {
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
fn check_memlat(problem: &Problem, inputs: &[Buffer], out: &[u32]) -> Validation {
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
    use super::super::testing::problem;
    use super::*;

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

    #[test]
    fn chase_table_is_one_cycle_over_all_nodes() {
        let p = problem("memlat_cpu", &[("size_kib", 64)]);
        let inputs = p.inputs(42);
        let table = inputs[0].as_u32().unwrap();
        let nodes = table.len() / 16;
        assert_eq!(nodes, 1024);
        let mut seen = vec![false; nodes];
        let mut at = 0usize;
        for _ in 0..nodes {
            assert!(!seen[at / 16], "node {} visited twice", at / 16);
            seen[at / 16] = true;
            assert_eq!(at % 16, 0);
            at = table[at] as usize;
        }
        assert_eq!(at, 0, "cycle closes after visiting every node");
        assert!(
            table
                .iter()
                .enumerate()
                .all(|(i, v)| i % 16 == 0 || *v == 0)
        );
    }
}
