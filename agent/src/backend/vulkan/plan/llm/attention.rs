//! The Attention step: `llm_attention`, a group per (row, head); a prefill's many rows a
//! sequence by `llm_attention_tile`, a group per (32 rows, head) reading each tile of keys and
//! values once for the 32; and decode attention split along the sequence (flash-decoding) where a
//! step's rows × heads are too few groups for the device: `llm_attention` in chunks writing
//! partials to the scratch buffer, then `llm_attention_merge` adding them up by log-sum-exp.

use super::{
    ATTENTION_DIMS, MAX_HEAD_DIM, PARTIALS, SHIFT, SPEC_VEC4, StepPlanner, binding, dispatch,
};
use crate::backend::planning::llm;
use crate::backend::vulkan::plan::args::SPEC_LOCAL_X;
use crate::backend::vulkan::plan::types::{Binding, Dispatch, SpecValue, Unsupported};
use gpufleet_kernels::llm::{Op, Step};

/// Rows a sequence from which attention runs `llm_attention_tile` (a prefill's; a decode has one).
pub(crate) const TILE_ROWS: usize = 16;
/// `llm_attention_tile`'s positions a tile (BK in its source), its group, its widest head, and
/// its specialization constants HD4 (the head's 4-vectors) and BQ (rows a group: 32, or 16 where
/// the shared memory does not hold 32 rows' queries).
const TILE: usize = 32;
const TILE_GROUP: u32 = 128;
const TILE_MAX_HEAD_DIM: usize = 128;
const SPEC_HD4: u32 = 2;
const SPEC_TILE_ROWS: u32 = 3;

/// The shared memory of `llm_attention_tile` for `bq` rows a group and heads of `hd4` 4-vectors:
/// the queries and one tile (padded rows), the tile's p (`bq` × 33 floats) and a float an
/// invocation.
fn tile_shared_bytes(bq: usize, hd4: usize) -> usize {
    (bq + TILE) * (hd4 + 1) * 16 + bq * (TILE + 1) * 4 + TILE_GROUP as usize * 4
}

impl StepPlanner<'_> {
    /// The dispatch of attention step `s` (reading the queries at `x`).
    pub(super) fn attention(&self, s: &Step, x: Binding) -> Result<Dispatch, Unsupported> {
        let Op::Attention { heads, cache } = s.op else {
            unreachable!("attention() is called on Attention steps");
        };
        let rows = s.rows.rows;
        // The query, and per invocation a score, a reduction and a 4-vector of sums.
        let mut spec = self.reducing(4 * MAX_HEAD_DIM, 24);
        let group = self.group(4 * MAX_HEAD_DIM, 24) as usize;
        let vec4 = !self.caps.scalar_attention
            && [heads.head_dim, cache.k.off, cache.v.off]
                .iter()
                .all(|n| n % 4 == 0);
        spec.push((SPEC_VEC4, SpecValue::U32(u32::from(vec4))));
        let widest = MAX_HEAD_DIM.min(ATTENTION_DIMS * group);
        if heads.head_dim > widest {
            return Err(Unsupported(format!(
                "head_dim={} of {} exceeds the {widest} llm_attention takes on groups of \
                 {group} invocations",
                heads.head_dim, self.problem.kernel.name
            )));
        }
        let mut push = self.words(&[
            ("rows", rows),
            ("per_seq", s.rows.per_seq),
            ("pos0", s.rows.pos0),
            ("heads", heads.heads),
            ("heads/kv_heads", (heads.heads / heads.kv_heads).max(1)),
            ("head_dim", heads.head_dim),
            ("kv_dim", heads.kv_dim()),
            ("batch", cache.batch),
            ("x offset", s.x.off),
            ("cache k offset", cache.k.off),
            ("cache v offset", cache.v.off),
            ("out offset", s.out.off),
        ])?;
        push.push((heads.scale() as f32).to_bits());
        let (chunk, chunks) = self.attention_chunks(s);
        push.extend(self.words(&[("chunk", chunk), ("chunks", chunks)])?);
        // The partials of a split attention go to the scratch buffer (see `merge`).
        let part = if chunks > 1 {
            Binding::Scratch(PARTIALS)
        } else {
            Binding::Output
        };
        let mut bindings = vec![x, binding(cache.k), binding(cache.v), Binding::Output];
        let (per_seq, hd4) = (s.rows.per_seq, heads.head_dim / 4);
        let caps = self.caps;
        let tiled = vec4
            && chunks == 1
            && !caps.no_tile_attention
            && per_seq >= TILE_ROWS
            && rows.is_multiple_of(per_seq)
            && heads.head_dim <= TILE_MAX_HEAD_DIM
            && caps.max_workgroup_invocations >= TILE_GROUP
            && caps.max_workgroup_size[0] >= TILE_GROUP;
        let shared = caps.max_shared_memory_bytes as usize;
        let bq = [32, 16]
            .into_iter()
            .find(|&bq| tile_shared_bytes(bq, hd4) <= shared);
        if tiled && let Some(bq) = bq {
            let tasks = rows / per_seq * per_seq.div_ceil(bq) * heads.heads;
            let spec = vec![
                (SPEC_LOCAL_X, SpecValue::U32(TILE_GROUP)),
                (SPEC_HD4, SpecValue::U32(hd4 as u32)),
                (SPEC_TILE_ROWS, SpecValue::U32(bq as u32)),
            ];
            let groups = self.groups(tasks, 0);
            // Never split: no partials.
            bindings.push(Binding::Scratch(SHIFT));
            return dispatch("llm_attention_tile", spec, push, bindings, [groups, 1, 1]);
        }
        bindings.extend([part, Binding::Scratch(SHIFT)]);
        let groups = self.groups(rows * heads.heads * chunks, 0);
        dispatch("llm_attention", spec, push, bindings, [groups, 1, 1])
    }

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
