//! Linear steps of packed weights (q8_0, q4_0) with many rows: `llm_linear_q8` / `_q4`, or
//! `llm_linear_q8_coopmat` / `_q4_coopmat` on NVIDIA's cooperative matrices.

use super::{StepPlanner, binding};
use crate::backend::vulkan::plan::types::{Binding, Dispatch, Unsupported};
use gpufleet_kernels::llm::{Op, PackedLayout, Step};
use gpufleet_kernels::quant::QK;

impl StepPlanner<'_> {
    /// The dispatch of a Linear step of packed weights (`None` for other steps): `llm_linear`'s
    /// design (four features × four rows a group) reading the blocks four weights a load, or tiles
    /// of 64 rows × 128 features on cooperative matrices where the device has them.
    pub(super) fn quantized(
        &self,
        s: &Step,
        layout: &PackedLayout,
    ) -> Result<Option<Dispatch>, Unsupported> {
        let Op::Linear { k, n, w } = s.op else {
            return Ok(None);
        };
        let (m, blocks, format) = (layout.matrix(w), n * k / QK, layout.format());
        let (wb, base) = self.weights(&[
            (m.values, blocks * format.quant_bytes()),
            (m.scales, 2 * blocks),
        ])?;
        self.words(&[("scales", m.scales - base + 2 * blocks)])?;
        let mut push = self.words(&[
            ("rows", s.rows.rows),
            ("k", k),
            ("n", n),
            ("x offset", s.x.off),
            ("w", 0),
            ("out offset", s.out.off),
        ])?;
        push.extend(self.words(&[("values", m.values - base), ("scales", m.scales - base)])?);
        // k is whole blocks; the values' words are 4-byte aligned.
        let vec4 = s.x.off.is_multiple_of(4);
        let shader = format!("llm_linear_{}", format.suffix());
        let bindings = vec![binding(s.x), wb, Binding::Output];
        self.linear(shader, true, vec4, s.rows.rows, n, push, bindings)
            .map(Some)
    }
}
