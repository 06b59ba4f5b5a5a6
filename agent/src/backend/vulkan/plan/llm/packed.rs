//! Linear steps of packed weights (q8_0, q4_0) with many rows: `llm_linear_q8` / `_q4`.

use super::{LINEAR_FEATURES, LINEAR_ROWS, SPEC_VEC4, StepPlanner, binding};
use crate::backend::vulkan::plan::args::dispatch;
use crate::backend::vulkan::plan::types::{Binding, Dispatch, SpecValue, Unsupported};
use gpufleet_kernels::llm::{Op, PackedLayout, Step};
use gpufleet_kernels::quant::QK;

impl StepPlanner<'_> {
    /// The dispatch of a Linear step of packed weights (`None` for other steps): `llm_linear`'s
    /// design (four features × four rows a group) reading the blocks four weights a load.
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
        let groups = [
            self.groups(n.div_ceil(LINEAR_FEATURES), 0),
            self.groups(s.rows.rows.div_ceil(LINEAR_ROWS), 1),
            1,
        ];
        let mut spec = self.reducing(0, 4 * LINEAR_FEATURES * LINEAR_ROWS);
        spec.push((SPEC_VEC4, SpecValue::U32(u32::from(vec4))));
        let mut shader = format!("llm_linear_{}", format.suffix());
        if self.caps.subgroup_arithmetic {
            shader.push_str("_subgroup");
        }
        let bindings = vec![binding(s.x), wb, Binding::Output];
        dispatch(&shader, spec, push, bindings, groups).map(Some)
    }
}
