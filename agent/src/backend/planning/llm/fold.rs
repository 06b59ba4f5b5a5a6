//! Which steps a one-row projection's `llm_gemv_team` launch takes over from its neighbours
//! (the OpenCL planner's and, through [`folded`], the Vulkan planner's).

use gpufleet_kernels::llm::{LlmGraph, Op, Ref};

/// A one-row projection run by `llm_gemv_team` (OpenCL and HIP, and its GLSL twin on Vulkan) with
/// what it takes over from the steps around it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Folded {
    /// The projection's step, and its input width, output width and weights' offset.
    pub(crate) linear: usize,
    pub(crate) k: usize,
    pub(crate) n: usize,
    pub(crate) w: usize,
    /// Steps the launch does (1 to 3).
    pub(crate) steps: usize,
    /// The RMSNorm before it: its gains' offset and the input's row stride.
    pub(crate) norm: Option<(usize, usize)>,
    /// The SwiGLU after it.
    pub(crate) glu: bool,
    /// The residual add after it: the other addend.
    pub(crate) add: Option<Ref>,
    /// The RoPE after it (a Q/K/V projection): its step, which also writes the keys and values
    /// into the cache.
    pub(crate) rope: Option<usize>,
    /// The launch's input and output.
    pub(crate) x: Ref,
    pub(crate) out: Ref,
}

/// The team launch starting at step `at`, if step `at` is a one-row projection, or an RMSNorm
/// that one reads. A step is folded in only when its output is neither checked nor read again
/// before it is next written (see [`unread`]): a detailed block keeps every layer's tensor. The
/// RoPE after a Q/K/V projection is folded in only where `rope` (the kernel takes it: OpenCL's).
pub(crate) fn folded(g: &LlmGraph, at: usize, rope: bool) -> Option<Folded> {
    let steps = &g.steps;
    let one_row = |i: usize| {
        steps
            .get(i)
            .filter(|s| s.rows.rows == 1 && matches!(s.op, Op::Linear { .. }))
    };
    let s = &steps[at];
    let (norm, li) = match s.op {
        Op::RmsNorm {
            dim,
            gamma,
            in_stride,
        } if !s.check => match one_row(at + 1) {
            Some(l)
                if l.x == s.out
                    && l.rows == s.rows
                    && matches!(l.op, Op::Linear { k, .. } if k == dim)
                    && unread(g, s.out, s.rows.rows * dim, at + 2) =>
            {
                (Some((gamma, in_stride)), at + 1)
            }
            _ => return None,
        },
        _ => (None, at),
    };
    let l = one_row(li)?;
    let Op::Linear { k, n, w } = l.op else {
        return None;
    };
    let next = steps
        .get(li + 1)
        .filter(|a| !l.check && a.x == l.out && a.rows == l.rows && unread(g, l.out, n, li + 2));
    let (glu, add, out, steps_done) = match next.map(|a| (a, a.op)) {
        Some((a, Op::SwiGlu { ffn })) if 2 * ffn == n => (true, None, a.out, li + 2 - at),
        Some((a, Op::Add { dim, other })) if dim == n && other != l.out => {
            (false, Some(other), a.out, li + 2 - at)
        }
        Some((a, Op::Rope { heads, cache, .. }))
            if rope
                && n == heads.q_dim() + 2 * heads.kv_dim()
                && cache.k.buf == a.out.buf
                && cache.v.buf == a.out.buf =>
        {
            (false, None, a.out, li + 2 - at)
        }
        _ => (false, None, l.out, li + 1 - at),
    };
    let roped = matches!(next.map(|a| a.op), Some(Op::Rope { .. })) && steps_done == li + 2 - at;
    Some(Folded {
        linear: li,
        k,
        n,
        w,
        steps: steps_done,
        norm,
        glu,
        add,
        rope: roped.then_some(li + 1),
        x: s.x,
        out,
    })
}

/// Whether the `len` elements at `t` are not read from step `from` on before a step writes `t`
/// again (the graph's work slots are reused by every block). Reads are a step's input rows and an
/// addend; the rest (tables, caches) never share a slot.
fn unread(g: &LlmGraph, t: Ref, len: usize, from: usize) -> bool {
    let overlaps = |r: Ref, n: usize| r.buf == t.buf && r.off < t.off + len && t.off < r.off + n;
    for s in &g.steps[from.min(g.steps.len())..] {
        let span = match s.op {
            Op::RmsNorm { in_stride, dim, .. } => (s.rows.rows - 1) * in_stride + dim,
            Op::Embed { tok_stride, .. } => (s.rows.rows - 1) * tok_stride + 1,
            op => s.rows.rows * op.in_width(),
        };
        let other = match s.op {
            Op::Add { other, dim } => overlaps(other, s.rows.rows * dim),
            _ => false,
        };
        if overlaps(s.x, span) || other {
            return false;
        }
        if s.out == t {
            return true;
        }
    }
    true
}
