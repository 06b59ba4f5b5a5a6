//! Decode attention split along the sequence (flash-decoding) where a step's rows × heads are too
//! few groups for the device: `llm_attention` in chunks writing partials to the scratch buffer,
//! then `llm_attention_merge` adding them up by log-sum-exp.

use super::{PARTIALS, StepPlanner};
use crate::backend::vulkan::plan::types::{Binding, Dispatch, Unsupported};
use gpufleet_kernels::llm::{Op, Step};

/// The fewest positions a chunk of a split attention takes (`attention_chunks`).
/// 16 rather than 64: on the H200, `1b` decode from an empty cache 823 tok/s against 745 at gen 128
/// (docs/PERFORMANCE.md, issue 53).
const MIN_CHUNK: usize = 16;

impl StepPlanner<'_> {
    /// The chunk of positions and the chunks an attention step `s` is split into along the
    /// sequence (flash-decoding): where its rows × heads are fewer than two groups a compute unit
    /// and its longest row attends to at least two [`MIN_CHUNK`]s, chunks of at least
    /// [`MIN_CHUNK`] positions making about four groups a unit; else one chunk, unsplit.
    pub(super) fn attention_chunks(&self, s: &Step) -> (usize, usize) {
        let Op::Attention { heads, .. } = s.op else {
            return (0, 1);
        };
        let positions = s.rows.pos0 + s.rows.per_seq;
        let tasks = s.rows.rows * heads.heads;
        let units = self.units();
        if positions < 2 * MIN_CHUNK || tasks >= 2 * units {
            return (positions, 1);
        }
        let chunk = positions
            .div_ceil((4 * units).div_ceil(tasks))
            .max(MIN_CHUNK);
        (chunk, positions.div_ceil(chunk))
    }

    /// The `llm_attention_merge` dispatch after a split attention step `s`, and the bytes of its
    /// partials; `None` for an unsplit one.
    pub(super) fn merge(&self, s: &Step) -> Result<Option<(Dispatch, usize)>, Unsupported> {
        let (_, chunks) = self.attention_chunks(s);
        let Op::Attention { heads, .. } = s.op else {
            return Ok(None);
        };
        if chunks < 2 {
            return Ok(None);
        }
        let hd = heads.head_dim;
        let n = s.rows.rows * heads.heads * hd;
        let bytes = 4 * s.rows.rows * heads.heads * chunks * (hd + 2);
        self.words(&[("partials", bytes / 4)])?;
        let push = self.words(&[
            ("rows·heads·head_dim", n),
            ("head_dim", hd),
            ("chunks", chunks),
            ("out offset", s.out.off),
        ])?;
        let mut d = self.grid(
            "llm_attention_merge",
            n,
            push,
            vec![Binding::Scratch(PARTIALS), Binding::Output],
        )?;
        d.label = "attention merge".into();
        Ok(Some((d, bytes)))
    }
}
