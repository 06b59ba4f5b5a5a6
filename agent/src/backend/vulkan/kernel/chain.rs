//! A dependent launch made of counters (`kernels/vulkan/include/chain.glsl`), behind a debug switch
//! while it is measured: consecutive decode dispatches that both have a `_chain` twin (the team
//! gemv and attention) run with no barrier between them, each group of the second waiting on a
//! counter the first one's groups bump. The barriers they replace cost a `1b` decode 0.65× of its
//! time on an H100 (docs/PERFORMANCE.md, "the barrier bound").
//!
//! Each dispatch has its own counter (index i + 1; 0 is the error word), so a chained plan is
//! recorded inline, every pass's dispatches in the command buffer, never a replayed pass whose
//! counters would already hold the last pass's counts; the counters are filled with zeros at the
//! start of each submission.

use super::VulkanKernel;
use crate::backend::BackendError;
use crate::backend::vulkan::plan::{Binding, Plan};

/// A debug switch: `1` chains the dispatches that can be (see the module). The result's
/// configuration says how many barriers counters replaced.
pub const CHAIN_ENV: &str = "GPUFLEET_DEBUG_VULKAN_CHAIN";

/// The push-constant word where the three chain words start (bytes 116..127 of the 128 every
/// device allows): the wait's counter, the groups it waits for, the counter to bump.
const PUSH_AT: usize = 29;
/// The binding of the counters in every `_chain` twin (after the shader's own six).
const BINDING: usize = 6;
/// No counter to wait on.
const NONE: u32 = u32::MAX;

/// A plan's chain: its counters' scratch buffer, and for each dispatch whether the next one waits
/// on it instead of a barrier.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Chain {
    pub(crate) counters: usize,
    pub(crate) linked: Vec<bool>,
}

/// The `_chain` twin of a dispatch's shader, where `kernels/vulkan` has one.
fn twin(shader: &str) -> Option<&'static [u8]> {
    gpufleet_kernels::sources::vulkan::spirv(&format!("{shader}_chain"))
}

/// Rewrites the dispatches of `plan` that have a twin to run it, with the counters bound and the
/// chain's push constants, and adds the counters' scratch buffer; `None` (the plan untouched)
/// where no two such dispatches follow each other.
pub(crate) fn chain(plan: &mut Plan) -> Option<Chain> {
    let n = plan.dispatches.len();
    let twins: Vec<_> = (plan.dispatches.iter())
        .map(|d| twin(&d.shader).filter(|_| d.bindings.len() == BINDING && d.push.len() <= PUSH_AT))
        .collect();
    let linked: Vec<bool> = (0..n)
        .map(|i| i + 1 < n && twins[i].is_some() && twins[i + 1].is_some())
        .collect();
    let replaced = linked.iter().filter(|&&l| l).count();
    if replaced == 0 {
        return None;
    }
    let counters = plan.scratch_bytes.len();
    plan.scratch_bytes.push(4 * (n + 1));
    for (i, twin) in twins.into_iter().enumerate() {
        let Some(spirv) = twin else { continue };
        let wait = match i.checked_sub(1) {
            Some(p) if linked[p] => {
                let g = plan.dispatches[p].groups;
                [i as u32, g[0] * g[1] * g[2]]
            }
            _ => [NONE, 0],
        };
        let d = &mut plan.dispatches[i];
        d.shader = format!("{}_chain", d.shader);
        d.spirv = spirv;
        d.bindings.push(Binding::Scratch(counters));
        d.push.resize(PUSH_AT, 0);
        d.push.extend([wait[0], wait[1], i as u32 + 1]);
    }
    plan.config.insert(
        "chain".into(),
        format!(
            "{replaced} of {} barriers between dispatches replaced by counters (debug)",
            n.saturating_sub(1)
        ),
    );
    Some(Chain { counters, linked })
}

impl VulkanKernel {
    /// After a submission of a chained plan: an error if a wait gave up (the error word the
    /// command buffer copied out is set), for the results would then be a race's.
    pub(super) fn check_chain(&self) -> Result<(), BackendError> {
        let Some(word) = self.chain_error else {
            return Ok(());
        };
        let mut bytes = [0u8; 4];
        self.read_host_into(word, &mut bytes)?;
        if u32::from_le_bytes(bytes) == 0 {
            return Ok(());
        }
        Err(BackendError::Driver {
            backend: "vulkan".into(),
            call: format!("chained dispatches ({CHAIN_ENV})"),
            message: "a dispatch gave up waiting for the one before it (its spin limit, or a \
                      compiler's cap on a loop), so its results would be a race's: this device \
                      cannot replace barriers by counters; run without the switch"
                .into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::vulkan::plan::Dispatch;

    fn dispatch(shader: &str, bindings: usize, groups: u32) -> Dispatch {
        Dispatch {
            shader: shader.into(),
            label: shader.into(),
            spirv: gpufleet_kernels::sources::vulkan::spirv(shader).expect("a shader"),
            spec: Vec::new(),
            push: vec![7; 12],
            bindings: vec![Binding::Output; bindings],
            groups: [groups, 1, 1],
        }
    }

    fn plan(dispatches: Vec<Dispatch>) -> Plan {
        Plan {
            input_storage: Vec::new(),
            output_storage: crate::backend::vulkan::plan::Storage::F32,
            scratch_bytes: vec![4],
            dispatches,
            config: Default::default(),
            passes: Default::default(),
        }
    }

    #[test]
    fn consecutive_twins_wait_on_each_other_and_the_rest_keep_their_barriers() {
        let mut p = plan(vec![
            dispatch("llm_rmsnorm", 3, 1),
            dispatch("llm_gemv_team_q4_subgroup", 6, 40),
            dispatch("llm_attention", 6, 32),
            dispatch("llm_gemv_team", 6, 9),
            dispatch("llm_eltwise", 3, 5),
            dispatch("llm_gemv_team_f16", 6, 3),
        ]);
        let c = chain(&mut p).expect("two pairs chain");
        assert_eq!(c.linked, [false, true, true, false, false, false]);
        assert_eq!(c.counters, 1);
        assert_eq!(p.scratch_bytes, [4, 4 * 7]);
        let d = &p.dispatches;
        assert_eq!(d[0].shader, "llm_rmsnorm");
        assert_eq!(d[0].push.len(), 12);
        assert_eq!(d[1].shader, "llm_gemv_team_q4_subgroup_chain");
        // The first of a chain follows a barrier: it waits on nothing, bumps counter 2.
        assert_eq!(d[1].push[PUSH_AT..], [NONE, 0, 2]);
        assert_eq!(d[1].push[..12], [7; 12]);
        assert_eq!(d[1].push[12..PUSH_AT], [0; PUSH_AT - 12]);
        // Attention waits for the gemv's 40 groups; the next gemv for attention's 32.
        assert_eq!(d[2].push[PUSH_AT..], [2, 40, 3]);
        assert_eq!(d[3].push[PUSH_AT..], [3, 32, 4]);
        assert_eq!(d[3].bindings.last(), Some(&Binding::Scratch(1)));
        // After a barrier (the eltwise before it) a twin waits on nothing.
        assert_eq!(d[5].push[PUSH_AT..], [NONE, 0, 6]);
        assert_eq!(
            d[2].spirv,
            gpufleet_kernels::sources::vulkan::spirv("llm_attention_chain").unwrap()
        );
        assert!(p.config["chain"].starts_with("2 of 5 barriers"));
    }

    #[test]
    fn a_plan_without_two_twins_in_a_row_is_left_as_it_is() {
        let mut p = plan(vec![
            dispatch("llm_gemv_team", 6, 4),
            dispatch("llm_rmsnorm", 3, 1),
            dispatch("llm_attention", 6, 4),
        ]);
        let before = p.clone();
        assert_eq!(chain(&mut p), None);
        assert_eq!(p, before);
    }
}
