//! The debug kernels, which misbehave on purpose to exercise the agent: a crash, a hang, a wrong
//! answer, a memory hog and iteration times drawn to order (`debug_noise`, for the noise rule and
//! warm-up), available only when the agent enables debug kernels. Each computes
//! an element-wise kernel's result when it gets that far (`debug_wrong`: vec_add, which its
//! backend then gets wrong; the others: noop), so its sizes, inputs and reference are that
//! kernel's.

use super::{
    CPU_ONLY, ElementwiseKernel, Family, KernelDef, KernelId, ParamDef, Problem, Visit,
    default_variant_def, p,
};
use crate::types::{Buffer, MetricKind};

/// The debug kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DebugKernel {
    /// `debug_crash`: the worker segfaults or aborts.
    Crash,
    /// `debug_hang`: the worker never returns.
    Hang,
    /// `debug_wrong`: vec_add whose backend returns a wrong answer.
    Wrong,
    /// `debug_alloc`: the worker allocates and touches `gib` GiB of host memory.
    Alloc,
    /// `debug_noise`: iterations that take the times its parameters draw ([`debug_noise_factor`]).
    Noise,
}

const CRASH_PARAMS: &[ParamDef] = &[p("mode", 0, 0, 1, "0 = SIGSEGV, 1 = abort")];
const DEBUG_WRONG_PARAMS: &[ParamDef] = &[p("n", 1024, 1, 1 << 30, "elements per vector")];
const DEBUG_ALLOC_PARAMS: &[ParamDef] = &[p(
    "gib",
    1,
    1,
    1024,
    "GiB of host memory the worker allocates and touches",
)];

const DEBUG_NOISE_PARAMS: &[ParamDef] = &[
    p(
        "base_us",
        1000,
        10,
        1_000_000,
        "steady iteration time, microseconds",
    ),
    p("slow_pct", 0, 0, 100, "percent of iterations that are slow"),
    p(
        "slow_factor_pct",
        500,
        100,
        100_000,
        "a slow iteration's time, percent of the base",
    ),
    p(
        "ramp",
        0,
        0,
        100_000,
        "first iterations (warm-up included) that ramp down from ramp_factor_pct to the base",
    ),
    p(
        "ramp_factor_pct",
        300,
        100,
        100_000,
        "the first iteration's time, percent of the base",
    ),
    p(
        "plateau",
        0,
        0,
        1,
        "1: the ramp's iterations all take ramp_factor_pct (a step, not a slope)",
    ),
];

/// How many times the base time iteration `call` (0 for the first, warm-up included) of a
/// `debug_noise` run with these parameters takes: the ramp's share first, then a slow iteration
/// for `slow_pct` percent of the calls, picked by a fixed hash of the call's number so a run is
/// the same every time.
pub fn debug_noise_factor(params: &std::collections::BTreeMap<String, i64>, call: u64) -> f64 {
    let get = |name: &str, default: i64| params.get(name).copied().unwrap_or(default) as f64;
    let ramp = get("ramp", 0);
    let call_f = call as f64;
    if call_f < ramp {
        let top = get("ramp_factor_pct", 300) / 100.0;
        return if get("plateau", 0) > 0.0 {
            top
        } else {
            top - (top - 1.0) * call_f / ramp
        };
    }
    // splitmix64: any call's draw without the ones before it.
    let mut z = call.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    if ((z % 10_000) as f64) < get("slow_pct", 0) * 100.0 {
        get("slow_factor_pct", 500) / 100.0
    } else {
        1.0
    }
}

/// `def` as a debug kernel's entry: only with debug kernels enabled, only on the cpu backend
/// unless it runs on devices (`debug_wrong`).
const fn debug(def: KernelDef) -> KernelDef {
    KernelDef {
        debug: true,
        backends: CPU_ONLY,
        ..def
    }
}

use DebugKernel as D;

/// Every debug kernel, in display order.
pub(super) static TABLE: [KernelDef; 5] = [
    debug(default_variant_def(
        KernelId::Debug(D::Crash),
        "debug_crash",
        "crashes the worker (SIGSEGV or abort) to exercise isolation",
        CRASH_PARAMS,
        MetricKind::Micros,
    )),
    debug(default_variant_def(
        KernelId::Debug(D::Hang),
        "debug_hang",
        "never returns, to exercise the watchdog",
        &[],
        MetricKind::Micros,
    )),
    KernelDef {
        backends: super::EVERY_BACKEND,
        ..debug(default_variant_def(
            KernelId::Debug(D::Wrong),
            "debug_wrong",
            "vec_add whose backend returns a wrong answer, to exercise validation",
            DEBUG_WRONG_PARAMS,
            MetricKind::Gbps,
        ))
    },
    debug(default_variant_def(
        KernelId::Debug(D::Alloc),
        "debug_alloc",
        "allocates and touches `gib` GiB of host memory in the worker (claiming a tiny \
         footprint), to exercise the worker's memory limit",
        DEBUG_ALLOC_PARAMS,
        MetricKind::Micros,
    )),
    debug(default_variant_def(
        KernelId::Debug(D::Noise),
        "debug_noise",
        "iterations of `base_us` µs, `slow_pct`% of them `slow_factor_pct`% as long, after a \
         warm-up `ramp`: a known distribution of times, to exercise warm-up and the noise rule",
        DEBUG_NOISE_PARAMS,
        MetricKind::Micros,
    )),
];

impl DebugKernel {
    /// Every debug kernel.
    pub const ALL: [DebugKernel; 5] = [
        DebugKernel::Crash,
        DebugKernel::Hang,
        DebugKernel::Wrong,
        DebugKernel::Alloc,
        DebugKernel::Noise,
    ];

    /// The element-wise kernel whose result it computes when it gets that far (and whose sizes,
    /// inputs and reference it has).
    pub fn computes(self) -> ElementwiseKernel {
        match self {
            DebugKernel::Wrong => ElementwiseKernel::VecAdd,
            DebugKernel::Crash | DebugKernel::Hang | DebugKernel::Alloc | DebugKernel::Noise => {
                ElementwiseKernel::Noop
            }
        }
    }

    /// The element-wise kernel a device backend runs for it, with a deliberate error
    /// (`debug_wrong`: vec_add); `None` for those only the cpu backend runs.
    pub fn on_device(self) -> Option<ElementwiseKernel> {
        match self {
            DebugKernel::Wrong => Some(self.computes()),
            DebugKernel::Crash | DebugKernel::Hang | DebugKernel::Alloc | DebugKernel::Noise => {
                None
            }
        }
    }
}

impl Family for DebugKernel {
    fn flops(&self, p: &Problem) -> f64 {
        self.computes().flops(p)
    }

    fn bytes(&self, p: &Problem) -> f64 {
        self.computes().bytes(p)
    }

    /// `debug_alloc`'s `gib` is deliberately not part of its footprint.
    fn input_lens(&self, p: &Problem) -> Vec<u128> {
        self.computes().input_lens(p)
    }

    fn output_len(&self, p: &Problem) -> u128 {
        self.computes().output_len(p)
    }

    fn make_inputs(&self, p: &Problem, seed: u64) -> Vec<Buffer> {
        self.computes().make_inputs(p, seed)
    }

    fn visit(&self, p: &Problem, x: &[&[f32]], f: Visit<'_>) -> Result<bool, String> {
        self.computes().visit(p, x, f)
    }
}

#[cfg(test)]
mod tests {
    use super::debug_noise_factor;
    use std::collections::BTreeMap;

    fn params(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn slow_iterations_come_at_the_asked_share() {
        let p = params(&[("slow_pct", 30), ("slow_factor_pct", 150)]);
        let slow = (0..10_000)
            .filter(|c| debug_noise_factor(&p, *c) > 1.0)
            .count();
        assert!((2_800..3_200).contains(&slow), "{slow}");
        assert_eq!(debug_noise_factor(&p, 7), debug_noise_factor(&p, 7));
        assert!((0..10_000).all(|c| [1.0, 1.5].contains(&debug_noise_factor(&p, c))));
        assert!((0..1000).all(|c| debug_noise_factor(&params(&[]), c) == 1.0));
    }

    #[test]
    fn the_ramp_falls_to_the_base_or_holds_as_a_plateau() {
        let p = params(&[("ramp", 20), ("ramp_factor_pct", 500)]);
        assert_eq!(debug_noise_factor(&p, 0), 5.0);
        assert!(debug_noise_factor(&p, 10) < debug_noise_factor(&p, 9));
        assert!(debug_noise_factor(&p, 19) > 1.0);
        assert_eq!(debug_noise_factor(&p, 20), 1.0);
        let flat = params(&[("ramp", 20), ("ramp_factor_pct", 500), ("plateau", 1)]);
        assert_eq!(debug_noise_factor(&flat, 19), 5.0);
        assert_eq!(debug_noise_factor(&flat, 20), 1.0);
    }
}
