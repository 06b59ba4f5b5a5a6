//! The debug kernels, which misbehave on purpose to exercise the agent: a crash, a hang, a wrong
//! answer and a memory hog, available only when the agent enables debug kernels. Each computes
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
pub(super) static TABLE: [KernelDef; 4] = [
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
];

impl DebugKernel {
    /// Every debug kernel.
    pub const ALL: [DebugKernel; 4] = [
        DebugKernel::Crash,
        DebugKernel::Hang,
        DebugKernel::Wrong,
        DebugKernel::Alloc,
    ];

    /// The element-wise kernel whose result it computes when it gets that far (and whose sizes,
    /// inputs and reference it has).
    pub fn computes(self) -> ElementwiseKernel {
        match self {
            DebugKernel::Wrong => ElementwiseKernel::VecAdd,
            DebugKernel::Crash | DebugKernel::Hang | DebugKernel::Alloc => ElementwiseKernel::Noop,
        }
    }

    /// The element-wise kernel a device backend runs for it, with a deliberate error
    /// (`debug_wrong`: vec_add); `None` for those only the cpu backend runs.
    pub fn on_device(self) -> Option<ElementwiseKernel> {
        match self {
            DebugKernel::Wrong => Some(self.computes()),
            DebugKernel::Crash | DebugKernel::Hang | DebugKernel::Alloc => None,
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
