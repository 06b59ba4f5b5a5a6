//! The weights buffer of a quantized graph as a device holds it ([`PackedLayout`]): every matrix
//! (the projections, the embedding, the LM head) split into its blocks' values then their f16
//! scales ([`crate::quant::split`]), every norm's gains in f32, each tensor starting on a
//! [`ALIGN`]-byte boundary, in the order of their element offsets.
//!
//! Steps keep naming their weights by element offset in the f32 weights (what the reference
//! reads); a backend asks the layout where those bytes went: [`PackedLayout::matrix`] for a
//! `Linear`'s `w` or an `Embed`'s `table`, [`PackedLayout::vector`] for an `RmsNorm`'s `gamma`.

use std::borrow::Cow;

use super::shape::{Draw, weight_tensors};
use super::{Config, LlmGraph, Op};
use crate::quant::{BlockFormat, QK, dequantize_split};

/// Byte alignment of every tensor in the buffer (a 16-byte vector load anywhere).
pub const ALIGN: usize = 64;

/// Where a matrix's blocks lie, in bytes from the buffer's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackedMatrix {
    /// The blocks' values: row `j`'s block `b` at `values + (j·k/32 + b)·quant_bytes`.
    pub values: usize,
    /// The blocks' f16 scales, in the same order, 2 bytes each.
    pub scales: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tensor {
    /// Element offset in the f32 weights.
    elem: usize,
    /// Elements.
    len: usize,
    /// Byte offset in the packed buffer.
    byte: usize,
    /// Whether it is a matrix (blocks) rather than a norm (f32).
    matrix: bool,
}

/// The packed weights' layout of one graph in one format.
#[derive(Debug, Clone, PartialEq)]
pub struct PackedLayout {
    format: BlockFormat,
    tensors: Vec<Tensor>,
    bytes: usize,
}

impl PackedLayout {
    /// The layout of `graph`'s weights in `format`: the tensors its steps read.
    ///
    /// # Panics
    /// If a matrix's rows are not whole blocks (the catalog refuses such problems), or two steps
    /// read different extents at one offset.
    pub fn of(graph: &LlmGraph, format: BlockFormat) -> PackedLayout {
        let found = graph
            .steps
            .iter()
            .filter_map(|s| match s.op {
                Op::Linear { k, n, w } => Some((w, k * n, true, k)),
                Op::Embed {
                    dim, vocab, table, ..
                } => Some((table, dim * vocab, true, dim)),
                Op::RmsNorm { dim, gamma, .. } => Some((gamma, dim, false, dim)),
                _ => None,
            })
            .collect();
        PackedLayout::from_tensors(format, found)
    }

    /// The layout of every tensor of a model of shape `c` in `format`: what [`PackedLayout::of`]
    /// gives for the whole model's graphs (each reads every tensor), without building a graph.
    pub fn of_model(c: &Config, format: BlockFormat) -> PackedLayout {
        let found = weight_tensors(c)
            .into_iter()
            .map(|t| {
                let row = match t.draw {
                    Draw::Gains => t.len,
                    Draw::Projection { fan_in, .. } => fan_in,
                    Draw::Embedding => c.dim,
                };
                (t.elem, t.len, t.is_matrix(), row)
            })
            .collect();
        PackedLayout::from_tensors(format, found)
    }

    /// The layout of `found`: `(element offset, elements, matrix, row length)` a tensor.
    fn from_tensors(
        format: BlockFormat,
        mut found: Vec<(usize, usize, bool, usize)>,
    ) -> PackedLayout {
        found.sort_unstable();
        found.dedup();
        let mut tensors: Vec<Tensor> = Vec::with_capacity(found.len());
        let mut bytes = 0;
        for (elem, len, matrix, row) in found {
            if let Some(last) = tensors.last() {
                assert!(
                    last.elem != elem,
                    "two extents of the weights at element {elem}"
                );
            }
            let size = if matrix {
                assert_eq!(row % QK, 0, "rows of {row} weights are not whole blocks");
                len / QK * format.block_bytes()
            } else {
                4 * len
            };
            tensors.push(Tensor {
                elem,
                len,
                byte: bytes,
                matrix,
            });
            bytes = (bytes + size).next_multiple_of(ALIGN);
        }
        PackedLayout {
            format,
            tensors,
            bytes,
        }
    }

    /// The block format.
    pub fn format(&self) -> BlockFormat {
        self.format
    }

    /// Bytes of the buffer.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    fn tensor(&self, elem: usize) -> &Tensor {
        self.find(elem)
            .unwrap_or_else(|| panic!("no tensor of the graph's weights at element {elem}"))
    }

    fn find(&self, elem: usize) -> Option<&Tensor> {
        let i = self.tensors.binary_search_by_key(&elem, |t| t.elem).ok()?;
        Some(&self.tensors[i])
    }

    /// The tensor holding element `elem`, anywhere in it.
    fn holding(&self, elem: usize) -> Option<&Tensor> {
        let i = self
            .tensors
            .partition_point(|t| t.elem <= elem)
            .checked_sub(1)?;
        let t = &self.tensors[i];
        (elem < t.elem + t.len).then_some(t)
    }

    fn blocks_at(&self, t: &Tensor) -> PackedMatrix {
        PackedMatrix {
            values: t.byte,
            scales: t.byte + t.len / QK * self.format.quant_bytes(),
        }
    }

    /// Where the matrix at element offset `w` lies.
    ///
    /// # Panics
    /// If no step reads a matrix at `w`.
    pub fn matrix(&self, w: usize) -> PackedMatrix {
        let t = self.tensor(w);
        assert!(t.matrix, "the weights at element {w} are a norm's gains");
        self.blocks_at(t)
    }

    /// Where the matrix at element offset `w` lies, if the layout holds one there.
    pub fn find_matrix(&self, w: usize) -> Option<PackedMatrix> {
        self.find(w).filter(|t| t.matrix).map(|t| self.blocks_at(t))
    }

    /// Byte offset of the f32 gains at element offset `gamma`.
    ///
    /// # Panics
    /// If no step reads gains at `gamma`.
    pub fn vector(&self, gamma: usize) -> usize {
        let t = self.tensor(gamma);
        assert!(!t.matrix, "the weights at element {gamma} are a matrix");
        t.byte
    }

    /// Byte offset of the f32 gains at element offset `gamma`, if the layout holds gains there.
    pub fn find_vector(&self, gamma: usize) -> Option<usize> {
        self.find(gamma).filter(|t| !t.matrix).map(|t| t.byte)
    }

    /// The buffer of `weights` (f32 weights): each matrix quantized with llama.cpp's quantizer
    /// and split, each norm copied; the gaps zero. What the catalog's weights drawn packed
    /// (`model_weights_packed`) are held to, in tests.
    #[cfg(test)]
    pub fn pack(&self, weights: &[f32]) -> Vec<u8> {
        let mut out = vec![0u8; self.bytes];
        for t in &self.tensors {
            let src = &weights[t.elem..t.elem + t.len];
            if t.matrix {
                let s = crate::quant::split(self.format, src);
                out[t.byte..t.byte + s.len()].copy_from_slice(&s);
            } else {
                for (o, v) in out[t.byte..].chunks_exact_mut(4).zip(src) {
                    o.copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        out
    }

    /// Weights `off..off + len` (in the f32 weights' elements, within one tensor) that `buf`
    /// holds, as f32: a matrix's covering blocks dequantized, or gains read. Empty where the
    /// layout holds no tensor at `off`, the range leaves its tensor, or `buf` is short.
    pub fn read(&self, buf: &[u8], off: usize, len: usize) -> Vec<f32> {
        let Some(t) = self.holding(off).filter(|t| off + len <= t.elem + t.len) else {
            return Vec::new();
        };
        let at = off - t.elem;
        if !t.matrix {
            let Some(bytes) = buf.get(t.byte + 4 * at..t.byte + 4 * (at + len)) else {
                return Vec::new();
            };
            return bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
        }
        let (m, qb) = (self.blocks_at(t), self.format.quant_bytes());
        let (b0, b1) = (at / QK, (at + len).div_ceil(QK));
        let (Some(values), Some(scales)) = (
            buf.get(m.values + b0 * qb..m.values + b1 * qb),
            buf.get(m.scales + 2 * b0..m.scales + 2 * b1),
        ) else {
            return Vec::new();
        };
        let mut w = dequantize_split(self.format, values, scales);
        w.drain(..at - b0 * QK);
        w.truncate(len);
        w
    }

    /// Multiplies the tensor at element offset `elem` in `buf` by `factor`: a matrix's f16
    /// scales, or gains. `false` if the layout holds no tensor there or `buf` is short.
    pub fn scale(&self, buf: &mut [u8], elem: usize, factor: f32) -> bool {
        let Some(t) = self.find(elem) else {
            return false;
        };
        if t.matrix {
            let m = self.blocks_at(t);
            let Some(scales) = buf.get_mut(m.scales..m.scales + 2 * (t.len / QK)) else {
                return false;
            };
            for s in scales.chunks_exact_mut(2) {
                let d = half::f16::from_bits(u16::from_le_bytes([s[0], s[1]])).to_f32();
                s.copy_from_slice(&half::f16::from_f32(d * factor).to_bits().to_le_bytes());
            }
        } else {
            let Some(gains) = buf.get_mut(t.byte..t.byte + 4 * t.len) else {
                return false;
            };
            for g in gains.chunks_exact_mut(4) {
                let v = f32::from_le_bytes([g[0], g[1], g[2], g[3]]);
                g.copy_from_slice(&(v * factor).to_le_bytes());
            }
        }
        true
    }
}

/// Where a transformer's weights are read from: the f32 weights, the f16 ones (half words), or a
/// packed buffer and its layout.
#[derive(Debug, Clone, Copy)]
pub enum Weights<'a> {
    /// The f32 weights.
    F32(&'a [f32]),
    /// The f16 weights, IEEE half words ([`crate::Buffer::Half`]).
    Half(&'a [u16]),
    /// A quantized model's packed weights.
    Packed(&'a PackedLayout, &'a [u8]),
}

impl<'a> Weights<'a> {
    /// The weights of a graph whose weights input (`weights_input`) is among `inputs`: packed by
    /// `layout` when it is given and the input is packed, else the half or f32 input (empty if
    /// none).
    pub fn of_inputs(
        inputs: &'a [crate::Buffer],
        weights_input: Option<usize>,
        layout: Option<&'a PackedLayout>,
    ) -> Weights<'a> {
        let b = weights_input.and_then(|i| inputs.get(i));
        match (layout, b.and_then(crate::Buffer::as_packed)) {
            (Some(layout), Some(buf)) => Weights::Packed(layout, buf),
            _ => match b.and_then(crate::Buffer::as_half) {
                Some(h) => Weights::Half(h),
                None => Weights::F32(b.and_then(crate::Buffer::as_f32).unwrap_or(&[])),
            },
        }
    }

    /// Weights `off..off + len` as f32 (within one tensor; widened from half words, dequantized
    /// when packed); empty past the end.
    pub fn read(self, off: usize, len: usize) -> Cow<'a, [f32]> {
        match self {
            Weights::F32(w) => Cow::Borrowed(w.get(off..off + len).unwrap_or(&[])),
            Weights::Half(w) => {
                use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
                let h = w.get(off..off + len).unwrap_or(&[]);
                Cow::Owned(h.reinterpret_cast::<half::f16>().to_f32_vec())
            }
            Weights::Packed(layout, buf) => Cow::Owned(layout.read(buf, off, len)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Dtype;
    use crate::llm::weights::model_weights_packed;
    use crate::llm::{LlmModel, Phase, model_graph, model_weights};
    use crate::quant::dequantize;

    #[test]
    fn every_tensor_is_found_where_the_layout_says() {
        let g = model_graph(&LlmModel::Tiny.config(), Phase::Decode { steps: 2 }, 1, 0);
        let c = g.config;
        for f in [BlockFormat::Q8_0, BlockFormat::Q4_0] {
            let dtype = if f == BlockFormat::Q8_0 {
                Dtype::Q8_0
            } else {
                Dtype::Q4_0
            };
            let w = model_weights(&c, 3, dtype);
            let layout = PackedLayout::of(&g, f);
            let buf = layout.pack(&w);
            assert_eq!(buf.len(), layout.bytes());
            // The down projection of block 2: its values then its scales, rejoined as blocks.
            let b = c.block_weights(2);
            let m = layout.matrix(b.w_down);
            assert_eq!(m.values % ALIGN, 0);
            let n_blocks = c.dim * c.ffn / QK;
            let mut blocks = Vec::new();
            for i in 0..n_blocks {
                blocks.extend_from_slice(&buf[m.scales + 2 * i..][..2]);
                blocks.extend_from_slice(&buf[m.values + i * f.quant_bytes()..][..f.quant_bytes()]);
            }
            let down = &w[b.w_down..b.w_down + c.dim * c.ffn];
            assert_eq!(dequantize(f, &blocks), down);
            assert_eq!(layout.read(&buf, b.w_down, down.len()), down);
            // A norm's gains are its f32 values.
            let at = layout.vector(b.ffn_norm);
            let gains: Vec<f32> = buf[at..at + 4 * c.dim]
                .chunks_exact(4)
                .map(|v| f32::from_le_bytes([v[0], v[1], v[2], v[3]]))
                .collect();
            assert_eq!(gains, &w[b.ffn_norm..b.ffn_norm + c.dim]);
            // The tied LM head is the embedding's one matrix.
            assert_eq!(layout.matrix(c.lm_head()), layout.matrix(c.embedding()));
            // Bytes near the weights' own in the format (the alignment adds a little).
            let want = c.stored_bytes(dtype) as usize;
            assert!(layout.bytes() >= want && layout.bytes() < want + ALIGN * 64);
        }
    }

    #[test]
    fn weights_drawn_packed_are_the_packed_weights_drawn() {
        // `small` is tied; `tiny` with an own LM head too, and a prefill's graph beside decode's.
        let mut untied = LlmModel::Tiny.config();
        untied.tied = false;
        for c in [LlmModel::Tiny.config(), untied, LlmModel::Small.config()] {
            for (dtype, f) in [
                (Dtype::Q8_0, BlockFormat::Q8_0),
                (Dtype::Q4_0, BlockFormat::Q4_0),
            ] {
                let layout = PackedLayout::of_model(&c, f);
                for phase in [Phase::Decode { steps: 2 }, Phase::Prefill { prompt: 3 }] {
                    let g = model_graph(&c, phase, 1, 0);
                    assert_eq!(
                        PackedLayout::of(&g, f),
                        layout,
                        "{phase:?}, tied {}",
                        c.tied
                    );
                }
                let w = model_weights(&c, 5, dtype);
                let buf = model_weights_packed(&c, &layout, 5, dtype);
                assert!(
                    buf == layout.pack(&w),
                    "{f:?}, tied {}: the bytes differ",
                    c.tied
                );
                // Reads within a tensor give the weights, wherever they start and end.
                let weights = Weights::Packed(&layout, &buf);
                let b = c.block_weights(1);
                for (off, len) in [
                    (b.wqkv, 3 * c.dim),
                    (b.w_down + 7, 40),
                    (b.ffn_norm + 1, c.dim - 1),
                    (c.lm_head() + 5 * c.dim + 31, 1),
                ] {
                    assert_eq!(&*weights.read(off, len), &w[off..off + len], "{off}+{len}");
                }
                assert!(
                    weights.read(b.ffn_norm, c.dim + 1).is_empty(),
                    "past a tensor"
                );
                assert!(
                    layout.read(&buf[..64], b.w_down, 32).is_empty(),
                    "a short buffer"
                );
            }
        }
    }

    #[test]
    fn scaling_a_packed_tensor_scales_its_weights() {
        let c = LlmModel::Tiny.config();
        let layout = PackedLayout::of_model(&c, BlockFormat::Q4_0);
        let mut buf = model_weights_packed(&c, &layout, 2, Dtype::Q4_0);
        let before = buf.clone();
        let b = c.block_weights(0);
        for (at, len) in [(b.wo, c.dim * c.q_dim()), (b.attn_norm, c.dim)] {
            assert!(layout.scale(&mut buf, at, 1.0625));
            let (was, now) = (layout.read(&before, at, len), layout.read(&buf, at, len));
            assert!(was.iter().zip(&now).all(|(a, b)| a * 1.0625 == *b));
            assert!(was.iter().any(|&v| v != 0.0));
        }
        // Nothing else moved: the next tensor reads as before.
        let (at, len) = (b.ffn_norm, c.dim);
        assert_eq!(layout.read(&before, at, len), layout.read(&buf, at, len));
        assert!(
            !layout.scale(&mut buf, b.wo + 1, 2.0),
            "no tensor starts there"
        );
    }
}
