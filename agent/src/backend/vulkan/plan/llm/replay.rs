//! A decode's passes replayed from one of them (`kernel/record.rs` records it).

use super::SPEC_ADVANCE;
use crate::backend::vulkan::plan::types::{Dispatch, Replay, Replayed, SpecValue};
use gpufleet_kernels::llm::LlmGraph;
use std::ops::Range;

/// How a decode's passes are replayed (see [`Replay`]), given the dispatch each step starts and
/// the dispatches, whose body's LM head then moves the shift on (`llm_gemv_team`'s ADVANCE);
/// `None` where the graph has no passes, a pass does not start a dispatch, kept regions differ or
/// the body does not end in `llm_gemv_team`.
pub(super) fn replay(
    graph: &LlmGraph,
    starts: &[Option<usize>],
    all: &mut [Dispatch],
) -> Option<Replay> {
    let dispatches = all.len();
    let passes = &graph.passes;
    let range = |i: usize| -> Option<Range<usize>> {
        let end = match passes.get(i + 1) {
            Some(next) => starts[next.steps.start]?,
            None if passes[i].steps.end == graph.steps.len() => dispatches,
            None => return None,
        };
        Some(starts[passes[i].steps.start]?..end)
    };
    let b = (0..passes.len())
        .rev()
        .find(|&i| passes[i].region.is_none())
        .or(passes.len().checked_sub(1))?;
    let body = &passes[b];
    let region = body.region.clone();
    let runs = (0..passes.len())
        .map(|i| {
            let p = &passes[i];
            let shift = (p.index as u32).wrapping_sub(body.index as u32);
            match (&region, &p.region) {
                (None, Some(_)) => Some(Replayed::Own(range(i)?)),
                (None, None) => Some(Replayed::Body {
                    shift,
                    copy_to: None,
                }),
                (Some(br), Some(r)) if r.len() == br.len() => Some(Replayed::Body {
                    shift,
                    copy_to: (i != b).then_some(r.start),
                }),
                _ => None,
            }
        })
        .collect::<Option<Vec<_>>>()?;
    let (body, prologue) = (range(b)?, range(0)?.start);
    // Last: a plan that is not replayed must not move the shift.
    let head = &mut all[body.end - 1];
    if !head.shader.starts_with("llm_gemv_team") {
        return None;
    }
    head.spec.iter_mut().find(|(id, _)| *id == SPEC_ADVANCE)?.1 = SpecValue::U32(1);
    Some(Replay {
        prologue,
        body,
        region,
        passes: runs,
    })
}
