//! The weights buffer of a quantized graph as a device holds it ([`PackedLayout`]): every matrix
//! (the projections, the embedding, the LM head) split into its blocks' values then their f16
//! scales ([`crate::quant::split`]), every norm's gains in f32, each tensor starting on a
//! [`ALIGN`]-byte boundary, in the order of their element offsets.
//!
//! Steps keep naming their weights by element offset in the f32 weights (what the reference
//! reads); a backend asks the layout where those bytes went: [`PackedLayout::matrix`] for a
//! `Linear`'s `w` or an `Embed`'s `table`, [`PackedLayout::vector`] for an `RmsNorm`'s `gamma`.

use super::{LlmGraph, Op};
use crate::quant::{BlockFormat, QK, dequantize_split, split};

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
        let mut found: Vec<(usize, usize, bool, usize)> = graph
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
        let i = self
            .tensors
            .binary_search_by_key(&elem, |t| t.elem)
            .unwrap_or_else(|_| panic!("no tensor of the graph's weights at element {elem}"));
        &self.tensors[i]
    }

    /// Where the matrix at element offset `w` lies.
    ///
    /// # Panics
    /// If no step reads a matrix at `w`.
    pub fn matrix(&self, w: usize) -> PackedMatrix {
        let t = self.tensor(w);
        assert!(t.matrix, "the weights at element {w} are a norm's gains");
        PackedMatrix {
            values: t.byte,
            scales: t.byte + t.len / QK * self.format.quant_bytes(),
        }
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

    /// The `len` weights of the matrix at element offset `w` that `buf` (this layout's buffer)
    /// holds, dequantized.
    ///
    /// # Panics
    /// As [`PackedLayout::matrix`], or if `buf` is shorter than the layout.
    pub fn unpack_matrix(&self, buf: &[u8], w: usize) -> Vec<f32> {
        let m = self.matrix(w);
        let blocks = self.tensor(w).len / QK;
        dequantize_split(
            self.format,
            &buf[m.values..m.values + blocks * self.format.quant_bytes()],
            &buf[m.scales..m.scales + 2 * blocks],
        )
    }

    /// The buffer of `weights` (the f32 weights the reference reads): each matrix quantized with
    /// llama.cpp's quantizer and split, each norm copied; the gaps zero.
    pub fn pack(&self, weights: &[f32]) -> Vec<u8> {
        let mut out = vec![0u8; self.bytes];
        for t in &self.tensors {
            let src = &weights[t.elem..t.elem + t.len];
            if t.matrix {
                let s = split(self.format, src);
                out[t.byte..t.byte + s.len()].copy_from_slice(&s);
            } else {
                for (o, v) in out[t.byte..].chunks_exact_mut(4).zip(src) {
                    o.copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Dtype;
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
            assert_eq!(layout.unpack_matrix(&buf, b.w_down), down);
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
}
