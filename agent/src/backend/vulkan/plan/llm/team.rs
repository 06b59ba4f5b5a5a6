//! One-row projections by teams (`llm_gemv_team`) with the steps [`folded`](super::folded)
//! gives them: the RMSNorm before, the SwiGLU, residual add or RoPE after.

use super::{
    QUANT_BLOCKS, QUANT_TEAMS_PER_UNIT, SHIFT, SPEC_ADD, SPEC_ADVANCE, SPEC_ALIGNED, SPEC_GLU,
    SPEC_NORM, SPEC_QUANT_BLOCKS, SPEC_ROPE, SPEC_TEAM, SPEC_TEAM_SPLIT, StepPlanner,
    TEAM_FEATURES, TEAMS_PER_UNIT, UNITS_UNKNOWN, binding,
};
use crate::backend::planning::llm::Folded;
use crate::backend::vulkan::plan::args::{SPEC_LOCAL_X, dispatch, pow2_floor};
use crate::backend::vulkan::plan::types::{Binding, Dispatch, SpecValue, Unsupported};
use gpufleet_kernels::NORM_EPS;
use gpufleet_kernels::llm::Op;
use gpufleet_kernels::quant::QK;

impl StepPlanner<'_> {
    /// The `llm_gemv_team` dispatch of a one-row projection with the steps it folds in.
    pub(super) fn team(&self, f: &Folded) -> Result<Dispatch, Unsupported> {
        let rows = self.graph.steps[f.linear].rows.rows;
        let x_stride = f.norm.map_or(f.k, |(_, stride)| stride);
        // With the SwiGLU, n outputs from 2n weight rows (gate j and up n + j); with the RoPE,
        // n/2 features of two rows each (the halves of a head).
        let n = if f.glu || f.rope.is_some() {
            f.n / 2
        } else {
            f.n
        };
        let res = f.add.unwrap_or(f.out);
        // Where the weights and gains lie in the bound slice: elements of it, or (packed) the
        // matrix's values' and scales' bytes with elements counted from the matrix's start and
        // the gains in words.
        let (weights, w, g_off, quant) = match self.packed {
            None => {
                let mut read = vec![(f.w, f.n * f.k)];
                read.extend(f.norm.map(|(g, _)| (g, f.k)));
                let (weights, base) = self.weights(&read)?;
                self.words(&[("weights", f.w - base + f.n * f.k)])?;
                let g_off = f.norm.map_or(0, |(g, _)| g - base);
                (weights, f.w - base, g_off, None)
            }
            Some(layout) => {
                let (m, blocks) = (layout.matrix(f.w), f.n * f.k / QK);
                let format = layout.format();
                let mut read = vec![
                    (m.values, blocks * format.quant_bytes()),
                    (m.scales, 2 * blocks),
                ];
                let gains = f.norm.map(|(g, _)| layout.vector(g));
                read.extend(gains.map(|g| (g, 4 * f.k)));
                let (weights, base) = self.weights(&read)?;
                self.words(&[
                    ("scales", m.scales - base + 2 * blocks),
                    ("gains", gains.map_or(0, |g| (g - base) / 4 + f.k)),
                ])?;
                let at = self.words(&[("values", m.values - base), ("scales", m.scales - base)])?;
                let g_off = gains.map_or(0, |g| (g - base) / 4);
                (weights, 0, g_off, Some((format, [at[0], at[1]])))
            }
        };
        self.words(&[
            ("input", x_stride * rows + f.x.off),
            ("output", n * rows + f.out.off),
        ])?;
        let mut push = self.words(&[
            ("rows", rows),
            ("k", f.k),
            ("n", n),
            ("x offset", f.x.off),
            ("row stride", x_stride),
            ("w", w),
            ("gains", g_off),
            ("out offset", f.out.off),
            ("addend offset", res.off),
        ])?;
        push.push((NORM_EPS as f32).to_bits());
        let (rope, table) = self.rope_words(f)?;
        push.extend(rope);
        if let Some((_, at)) = quant {
            push.extend(at);
        }
        // Packed weights take a block's worth of k a lane a trip where aligned (a quarter of each
        // of four blocks: the values in whole words, the inputs in 16-byte pieces).
        let aligned = [f.k, f.x.off, x_stride, w, g_off]
            .iter()
            .all(|v| v.is_multiple_of(8))
            && quant.is_none_or(|(_, at)| at[0].is_multiple_of(16));
        // Packed weights take a quarter of `qb` blocks a lane a trip where aligned.
        let qb = match self.caps.quant_blocks {
            0 => QUANT_BLOCKS,
            b => b,
        };
        let per_lane = if quant.is_some() && aligned {
            QK / 4 * qb as usize
        } else {
            8
        };
        let flag = |id, on: bool| (id, SpecValue::U32(u32::from(on)));
        let (group, team) = self.teams();
        let mut spec = vec![
            (SPEC_LOCAL_X, SpecValue::U32(group)),
            (SPEC_TEAM, SpecValue::U32(team)),
            flag(SPEC_ALIGNED, aligned),
            flag(SPEC_NORM, f.norm.is_some()),
            flag(SPEC_GLU, f.glu),
            flag(SPEC_ADD, f.add.is_some()),
            flag(SPEC_ROPE, f.rope.is_some()),
        ];
        // Packed weights on integer dot products where `quant_dot` takes their format.
        let mut shader = match quant {
            Some((format, _)) if self.caps.quant_dot.takes(format) => {
                format!("llm_gemv_team_{}_dot", format.suffix())
            }
            Some((format, _)) => format!("llm_gemv_team_{}", format.suffix()),
            None => self.weighted("llm_gemv_team"),
        };
        // A team writes its features from its first lanes: a subgroup must have that many, and
        // the group whole subgroups.
        let sub = self.caps.subgroup_size;
        if self.caps.subgroup_arithmetic
            && sub as usize >= TEAM_FEATURES
            && group.is_multiple_of(sub)
        {
            shader.push_str("_subgroup");
            spec.retain(|(id, _)| *id != SPEC_TEAM);
        }
        let teams = group / team;
        // Packed weights take more arithmetic a byte: more, shorter teams keep the memory busy
        // while others compute.
        let per_unit = if quant.is_some() {
            QUANT_TEAMS_PER_UNIT
        } else {
            TEAMS_PER_UNIT
        };
        let split = self.team_split(f.k, n, team, teams, per_lane, per_unit);
        spec.push((SPEC_TEAM_SPLIT, SpecValue::U32(split)));
        spec.push(flag(SPEC_ADVANCE, false));
        if quant.is_some() {
            spec.push((SPEC_QUANT_BLOCKS, SpecValue::U32(qb)));
        }
        let per_group = TEAM_FEATURES * (teams / split) as usize;
        let groups = [self.groups(n.div_ceil(per_group), 0), 1, 1];
        let shift = Binding::Scratch(SHIFT);
        dispatch(
            &shader,
            spec,
            push,
            vec![
                binding(f.x),
                weights,
                Binding::Output,
                binding(res),
                shift,
                table,
            ],
            groups,
        )
    }

    /// Teams a feature block of an `llm_gemv_team` over `k` inputs and `n` outputs, with teams of
    /// `lanes` and `teams` a group: enough that `per_unit` teams a compute unit are in flight, a
    /// power of two dividing the group's teams, and no more than leave each lane a whole load of k
    /// (`per_lane` weights: 8, or 8 a packed block it takes a quarter of).
    fn team_split(
        &self,
        k: usize,
        n: usize,
        lanes: u32,
        teams: u32,
        per_lane: usize,
        per_unit: usize,
    ) -> u32 {
        let units = self.units();
        let blocks = n.div_ceil(TEAM_FEATURES).max(1);
        let want = (per_unit * units).div_ceil(blocks);
        let most = (k / per_lane / lanes as usize).clamp(1, teams as usize);
        pow2_floor(want.next_power_of_two().min(most) as u32)
    }

    /// The device's compute units, or [`UNITS_UNKNOWN`] where it does not say.
    pub(super) fn units(&self) -> usize {
        match self.caps.compute_units {
            0 => UNITS_UNKNOWN,
            u => u as usize,
        }
    }

    /// `llm_gemv_team`'s group size and team size: [`REDUCE_GROUP`] (or what the device's groups
    /// and shared memory hold) and teams of the device's subgroup size, which is what a team is
    /// with subgroup arithmetic (at least [`TEAM_FEATURES`], whose features its first lanes write).
    pub(super) fn teams(&self) -> (u32, u32) {
        let partials = 4 * (2 * TEAM_FEATURES + 1);
        let group = self.group(0, partials);
        let least = TEAM_FEATURES as u32;
        let team = pow2_floor(self.caps.subgroup_size.clamp(least, 128)).min(group);
        (group, team)
    }

    /// The RoPE's push constants of a team dispatch (the table's offset, the cache's, the
    /// positions and heads; zeros where it folds in no RoPE) and the table's binding.
    fn rope_words(&self, f: &Folded) -> Result<(Vec<u32>, Binding), Unsupported> {
        let Some(s) = f.rope.map(|i| &self.graph.steps[i]) else {
            return Ok((vec![0; 10], Binding::Output));
        };
        let Op::Rope {
            heads,
            table,
            positions,
            cache,
        } = s.op
        else {
            unreachable!("folded() takes a RoPE step only")
        };
        let words = self.words(&[
            ("table offset", table.off),
            ("cache k offset", cache.k.off),
            ("cache v offset", cache.v.off),
            ("per_seq", s.rows.per_seq),
            ("pos0", s.rows.pos0),
            ("heads", heads.heads),
            ("kv_heads", heads.kv_heads),
            ("positions", positions),
            ("batch", cache.batch),
            ("head_dim", heads.head_dim),
        ])?;
        Ok((words, binding(table)))
    }
}
