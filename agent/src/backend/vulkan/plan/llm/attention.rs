//! Decode attention split along the sequence (flash-decoding) where a step's rows × heads are too
//! few groups for the device: `llm_attention` in chunks writing partials to the scratch buffer,
//! then `llm_attention_merge` adding them up by log-sum-exp.

use super::{PARTIALS, StepPlanner};
use crate::backend::planning::llm;
use crate::backend::vulkan::plan::types::{Binding, Dispatch, Unsupported};
use gpufleet_kernels::llm::{Op, Step};

impl StepPlanner<'_> {
    /// The chunk of positions and the chunks attention step `s` is split into
    /// ([`llm::attention_chunks`] over the device's compute units).
    pub(super) fn attention_chunks(&self, s: &Step) -> (usize, usize) {
        llm::attention_chunks(s, self.units())
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
