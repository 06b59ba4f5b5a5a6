//! What pages and results ask of a kernel beyond what it computes: how pages group it, whether
//! its f16 is storage only, whether its output starts zeroed, whether the device's peaks bound it,
//! whether it records its bandwidth, whether it runs a whole transformer. Each is answered here or
//! by its family (`Family`), never by a caller naming kernels.

use super::KernelId;

/// How pages group kernels (the roofline chart's colours, its legend).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelGroup {
    /// `gemm`.
    Gemm,
    /// `conv2d`.
    Conv,
    /// The CNNs and their layers.
    Network,
    /// The transformer and its layers.
    Transformer,
    /// One output per input element: bound by memory.
    Memory,
    /// A reduction then a map per row.
    Rows,
    /// A device's ceilings.
    Ceiling,
    /// Host and debug kernels.
    Other,
}

impl KernelGroup {
    /// The group's name on pages.
    pub fn name(self) -> &'static str {
        match self {
            KernelGroup::Gemm => "gemm",
            KernelGroup::Conv => "conv",
            KernelGroup::Network => "network",
            KernelGroup::Transformer => "transformer",
            KernelGroup::Memory => "memory",
            KernelGroup::Rows => "rows",
            KernelGroup::Ceiling => "ceiling",
            KernelGroup::Other => "other",
        }
    }
}

/// The key of the GB/s a kernel that [records its bandwidth](KernelId::records_bandwidth) writes
/// into its result's configuration.
pub const ACHIEVED_GBPS: &str = "achieved_gbps";

impl KernelId {
    /// How pages group this kernel.
    pub fn group(self) -> KernelGroup {
        match self {
            KernelId::Gemm => KernelGroup::Gemm,
            KernelId::Conv2d => KernelGroup::Conv,
            KernelId::Model(_) => KernelGroup::Network,
            KernelId::Llm(_) => KernelGroup::Transformer,
            KernelId::Elementwise(_) => KernelGroup::Memory,
            KernelId::Rows(_) => KernelGroup::Rows,
            KernelId::Ceiling(_) => KernelGroup::Ceiling,
            KernelId::Host(_) | KernelId::Debug(_) => KernelGroup::Other,
        }
    }

    /// Whether the kernel's f16 dtype stores halves and computes in f32 (the networks and the
    /// transformer: 16-bit storage suffices, no f16 arithmetic), rather than computing in f16.
    pub fn f16_is_storage(self) -> bool {
        match self {
            KernelId::Model(_) | KernelId::Llm(_) => true,
            KernelId::Gemm
            | KernelId::Conv2d
            | KernelId::Elementwise(_)
            | KernelId::Rows(_)
            | KernelId::Host(_)
            | KernelId::Ceiling(_)
            | KernelId::Debug(_) => false,
        }
    }

    /// Whether the kernel runs a whole transformer of a model shape (`export-model` writes that
    /// model's weights for it), not one of its layers.
    pub fn whole_transformer(self) -> bool {
        match self {
            KernelId::Llm(k) => k.whole_model(),
            KernelId::Gemm
            | KernelId::Conv2d
            | KernelId::Elementwise(_)
            | KernelId::Rows(_)
            | KernelId::Model(_)
            | KernelId::Host(_)
            | KernelId::Ceiling(_)
            | KernelId::Debug(_) => false,
        }
    }

    /// Whether the device's output buffer must start zeroed (see `Family::zeroed_output`).
    pub fn zeroed_output(self) -> bool {
        self.family().zeroed_output()
    }

    /// Whether the device's theoretical peaks bound this kernel (not a host transfer's).
    pub fn has_device_peak(self) -> bool {
        self.family().has_device_peak()
    }

    /// Whether a result records its achieved GB/s under [`ACHIEVED_GBPS`] (a roofline point).
    pub fn records_bandwidth(self) -> bool {
        self.family().records_bandwidth()
    }
}
