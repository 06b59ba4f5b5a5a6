//! Small value types shared by the catalog, problems and suites.
//!
//! They live apart from [`crate::Problem`] because the agent and the coordinator name them on their own
//! (a dtype in a CLI flag, a metric kind in a report column) without building a problem.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Element type a kernel runs in.
///
/// `F16` means fp16 storage with fp32 accumulation: inputs are generated so that fp16 storage does not
/// change them, and the tolerance accounts for the output being rounded to fp16. `Q8_0` and `Q4_0`
/// are llama.cpp's block formats for a model's weight matrices (see [`crate::quant`]): the
/// activations, the norms and the results stay f32, and the weights are generated so that the
/// blocks hold them exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Dtype {
    /// 32-bit IEEE float storage and arithmetic.
    #[default]
    F32,
    /// 16-bit IEEE float storage, 32-bit accumulation.
    F16,
    /// Weights in blocks of 32 int8 values with one f16 scale (34 bytes), f32 activations.
    Q8_0,
    /// Weights in blocks of 32 4-bit values (offset by 8) with one f16 scale (18 bytes), f32
    /// activations.
    Q4_0,
}

impl Dtype {
    /// Every dtype, in display order.
    pub const ALL: [Dtype; 4] = [Dtype::F32, Dtype::F16, Dtype::Q8_0, Dtype::Q4_0];

    /// Canonical lowercase name (`"f32"`, `"f16"`, `"q8_0"`), as used in spec keys and suites.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::Q8_0 => "q8_0",
            Dtype::Q4_0 => "q4_0",
        }
    }

    /// Parses a name case-insensitively (`"f32"`, `"F16"`); `None` for anything else, the empty string
    /// included (callers decide what an empty dtype defaults to).
    pub fn parse(s: &str) -> Option<Dtype> {
        Dtype::ALL
            .into_iter()
            .find(|d| d.name().eq_ignore_ascii_case(s.trim()))
    }

    /// The block format of a quantized dtype, `None` for f32 and f16.
    pub fn block_format(self) -> Option<crate::quant::BlockFormat> {
        match self {
            Dtype::F32 | Dtype::F16 => None,
            Dtype::Q8_0 => Some(crate::quant::BlockFormat::Q8_0),
            Dtype::Q4_0 => Some(crate::quant::BlockFormat::Q4_0),
        }
    }

    /// Bytes `n` elements take in this dtype: a quantized dtype's whole blocks with their scales
    /// (`n` a multiple of the block; a partial block counts whole).
    pub fn storage_bytes(self, n: u128) -> u128 {
        match self.block_format() {
            Some(f) => n.div_ceil(crate::quant::QK as u128) * f.block_bytes() as u128,
            None if self == Dtype::F16 => 2 * n,
            None => 4 * n,
        }
    }

    /// Bytes one element takes on average (34/32 for q8_0, 18/32 for q4_0).
    pub fn bytes_per_element(self) -> f64 {
        self.storage_bytes(crate::quant::QK as u128) as f64 / crate::quant::QK as f64
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Dtype {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Dtype {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Dtype::parse(&s).ok_or_else(|| {
            serde::de::Error::custom(format!("unknown dtype `{s}` (known: f32, f16, q8_0, q4_0)"))
        })
    }
}

/// What a kernel's headline number measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Arithmetic throughput: `flops / median_s / 1e9`.
    Gflops,
    /// Memory throughput: `bytes / median_s / 1e9`.
    Gbps,
    /// Latency of one launch in microseconds.
    Micros,
    /// Dependent-load latency in nanoseconds per pointer-chasing hop.
    NsPerHop,
    /// Inference throughput: images per second (`batch / median_s`).
    ImagesPerS,
    /// Language-model throughput: tokens per second (prefilled or generated per iteration /
    /// `median_s`).
    TokensPerS,
}

impl MetricKind {
    /// Every metric kind.
    pub const ALL: [MetricKind; 6] = [
        MetricKind::Gflops,
        MetricKind::Gbps,
        MetricKind::Micros,
        MetricKind::NsPerHop,
        MetricKind::ImagesPerS,
        MetricKind::TokensPerS,
    ];

    /// Stable machine name (`"gflops"`, `"gbps"`, `"us"`, `"ns_per_hop"`, `"images_per_s"`), stored
    /// in the database.
    pub fn name(self) -> &'static str {
        match self {
            MetricKind::Gflops => "gflops",
            MetricKind::Gbps => "gbps",
            MetricKind::Micros => "us",
            MetricKind::NsPerHop => "ns_per_hop",
            MetricKind::ImagesPerS => "images_per_s",
            MetricKind::TokensPerS => "tokens_per_s",
        }
    }

    /// Unit for display (`"GFLOP/s"`, `"GB/s"`, `"µs"`, `"ns/hop"`, `"img/s"`).
    pub fn unit(self) -> &'static str {
        match self {
            MetricKind::Gflops => "GFLOP/s",
            MetricKind::Gbps => "GB/s",
            MetricKind::Micros => "µs",
            MetricKind::NsPerHop => "ns/hop",
            MetricKind::ImagesPerS => "img/s",
            MetricKind::TokensPerS => "tok/s",
        }
    }

    /// Whether a larger value is an improvement (throughputs) or a regression (latencies).
    pub fn higher_is_better(self) -> bool {
        matches!(
            self,
            MetricKind::Gflops | MetricKind::Gbps | MetricKind::ImagesPerS | MetricKind::TokensPerS
        )
    }

    /// Inverse of [`MetricKind::name`].
    pub fn parse(s: &str) -> Option<MetricKind> {
        MetricKind::ALL.into_iter().find(|k| k.name() == s)
    }
}

impl std::fmt::Display for MetricKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for MetricKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for MetricKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        MetricKind::parse(&s).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown metric kind `{s}` (known: gflops, gbps, us, ns_per_hop, images_per_s, tokens_per_s)"
            ))
        })
    }
}

/// A kernel's derived headline number.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricValue {
    /// What `value` measures; serialized as [`MetricKind::name`].
    pub kind: MetricKind,
    /// The number, in [`MetricKind::unit`].
    pub value: f64,
}

/// Host-side contents of one kernel input or output.
///
/// Values are held as f32 (or u32): for [`Dtype::F16`] problems the backend converts to fp16 on
/// upload and back on download, which is lossless for inputs by construction. A transformer's
/// weights are the exception: quantized, they are drawn straight into their blocks
/// ([`Buffer::Packed`]), and in f16 straight into half words ([`Buffer::Half`]), never held as
/// f32 (an 8B model's 32 GB).
#[derive(Debug, Clone, PartialEq)]
pub enum Buffer {
    /// Floating-point data.
    F32(Vec<f32>),
    /// Index data (the pointer-chasing table of `memlat_cpu`).
    U32(Vec<u32>),
    /// A quantized transformer's weights as a device holds them: the bytes of the graph's
    /// [`crate::llm::PackedLayout`] (its length is in bytes).
    Packed(Vec<u8>),
    /// An f16 transformer's weights as a device holds them: IEEE half bit patterns, one an
    /// element.
    Half(Vec<u16>),
}

impl Buffer {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Buffer::F32(v) => v.len(),
            Buffer::U32(v) => v.len(),
            Buffer::Packed(v) => v.len(),
            Buffer::Half(v) => v.len(),
        }
    }

    /// Whether the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The f32 contents, or `None` for another kind.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match self {
            Buffer::F32(v) => Some(v),
            _ => None,
        }
    }

    /// The u32 contents, or `None` for another kind.
    pub fn as_u32(&self) -> Option<&[u32]> {
        match self {
            Buffer::U32(v) => Some(v),
            _ => None,
        }
    }

    /// The packed weights' bytes, or `None` for another kind.
    pub fn as_packed(&self) -> Option<&[u8]> {
        match self {
            Buffer::Packed(v) => Some(v),
            _ => None,
        }
    }

    /// The half words, or `None` for another kind.
    pub fn as_half(&self) -> Option<&[u16]> {
        match self {
            Buffer::Half(v) => Some(v),
            _ => None,
        }
    }

    /// The element kind of this buffer.
    pub fn kind(&self) -> BufferKind {
        match self {
            Buffer::F32(_) => BufferKind::F32,
            Buffer::U32(_) => BufferKind::U32,
            Buffer::Packed(_) => BufferKind::Packed,
            Buffer::Half(_) => BufferKind::Half,
        }
    }
}

/// Element kind of a [`Buffer`], known before the buffer exists (for allocating outputs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferKind {
    /// f32 elements.
    F32,
    /// u32 elements.
    U32,
    /// Packed weights' bytes ([`Buffer::Packed`]).
    Packed,
    /// f16 weights' half words ([`Buffer::Half`]).
    Half,
}

impl BufferKind {
    /// Lowercase name for messages.
    pub fn name(self) -> &'static str {
        match self {
            BufferKind::F32 => "f32",
            BufferKind::U32 => "u32",
            BufferKind::Packed => "packed",
            BufferKind::Half => "f16",
        }
    }
}
