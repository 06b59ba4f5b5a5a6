// llm_attention.glsl (llm_attention.comp; with CHAIN, llm_attention_chain.comp): the transformer's
// Attention step, causal grouped-query attention of the queries x ([rows][heads·hd]) over a KV
// cache: row r (sequence seq = r / per_seq, position pos = pos0 + r % per_seq), head h attends to
// its sequence's positions 0..=pos of key/value head h / group, whose key at position t starts at
// k_off + (t·batch + seq)·kv_dim + (h / group)·hd (values alike from v_off). softmax(q·k · scale) ·
// V, with the maximum subtracted before exp.
//
// One workgroup of WG invocations per (row, head), the groups striding over them. The query is
// kept in shared memory. The positions are taken WG at a time, with the softmax kept online (as
// flash attention does): each invocation computes one score into shared memory, the block's
// maximum is found, the running sums are scaled by exp(old max - new max) and the block's
// p = exp(s - max) are added. The weighted sum of the values is accumulated with the invocations
// split into lanes of hd / W invocations, W dimensions each (VEC4: W = 4, 4-vector loads, else 1;
// each lane takes every lanes-th position, the lanes' sums added at the end) or, for heads wider
// than the group when W = 1, each invocation taking dimensions l, l + WG, ... (hd ≤ 512, WG ≥ 64).
// The sum of p divides at the end.
//
// Split along the sequence (flash-decoding; `chunks` > 1, decode over a long cache where rows ×
// heads are too few groups to fill the device): a task is a (row, head, chunk), the chunk's
// positions c·chunk .. (c + 1)·chunk - 1 (those up to pos), and it writes to `part` its
// unnormalised weighted sum of the values, its maximum score and its sum of p (hd + 2 floats at
// ((r·heads + h)·chunks + c)·(hd + 2)), which llm_attention_merge adds up by log-sum-exp.
//
// Bindings: 0 x (the queries), 1 the keys, 2 the values, 3 the arena, 4 the partials (split; the
// arena again otherwise), 5 the pass shift (added to pos0; a replayed split keeps its chunks, those
// past an earlier pass's positions empty), 6 with CHAIN the counters (include/chain.glsl). Push
// constants: rows, per_seq, pos0, heads, group, hd, kv_dim, batch, x_off, k_off, v_off, out_off
// (uint), scale (float), chunk, chunks (uint).
// Specialization: 0 local size x = WG (see llm.glsl); 2 VEC4: hd and the cache offsets are
// multiples of 4, so keys and values are read as 4-vectors (the planner's choice).
#define SPEC_WG 1
#define REDUCE 1
#include "llm.glsl"
#define CHAIN_BINDING 6
#include "chain.glsl"

// The widest head, and the dimensions per invocation it takes on 64 invocations.
#define MAX_HD 512u
#define ND 8u

layout(set = 0, binding = 0, std430) CHAIN_COHERENT readonly buffer X { float x[]; };
layout(set = 0, binding = 1, std430) CHAIN_COHERENT readonly buffer K { float kc[]; };
layout(set = 0, binding = 2, std430) CHAIN_COHERENT readonly buffer V { float vc[]; };
layout(set = 0, binding = 1, std430) CHAIN_COHERENT readonly buffer K4 { vec4 kc4[]; };
layout(set = 0, binding = 2, std430) CHAIN_COHERENT readonly buffer V4 { vec4 vc4[]; };
layout(constant_id = 2) const bool VEC4 = false;
layout(set = 0, binding = 3, std430) CHAIN_COHERENT writeonly buffer Out { float dst[]; };
layout(set = 0, binding = 4, std430) CHAIN_COHERENT writeonly buffer Part { float part_out[]; };
// The pass shift (binding 5), added to the positions mod 2^32: 0, or where a decode's last pass is
// replayed for an earlier one, that pass's number minus the last's (agent kernel/record.rs).
layout(set = 0, binding = 5, std430) CHAIN_COHERENT readonly buffer Shift { uint pass_shift; };

layout(push_constant) uniform Push {
    uint rows;
    uint per_seq;
    uint pos0;
    uint heads;
    uint group;
    uint hd;
    uint kv_dim;
    uint batch;
    uint x_off;
    uint k_off;
    uint v_off;
    uint out_off;
    float scale;
    uint chunk;
    uint chunks;
    CHAIN_PUSH
} pc;

shared vec4 qs[MAX_HD / 4u];
shared float ps[WG];
shared vec4 part[WG];

// -infinity (a literal: uintBitsToFloat is not a constant expression).
const float NEG_INF = -1.0 / 0.0;

// The query's dimension d.
float q_at(uint d)
{
    return qs[d >> 2u][d & 3u];
}

// The score q·k of the key starting at kb (a multiple of 4 with VEC4).
float score(uint kb, uint hd)
{
    float s = 0.0;
    if (VEC4) {
        const uint k4 = kb >> 2u;
        for (uint d = 0u; d < hd / 4u; ++d)
            s += dot(qs[d], kc4[k4 + d]);
    } else {
        for (uint d = 0u; d < hd; ++d)
            s += q_at(d) * kc[kb + d];
    }
    return s;
}

void main()
{
    CHAIN_WAIT();
    const uint lid = gl_LocalInvocationID.x;
    const uint hd = pc.hd;
    const uint w = VEC4 ? 4u : 1u;
    // Invocations a lane of the weighted sum takes (hd / w), and lanes (0: the wide path).
    const uint lw = hd / w;
    const bool lanes_split = lw <= WG;
    const uint lanes = lanes_split ? WG / lw : 1u;
    const uint d0 = lanes_split ? (lid % lw) * w : lid;
    const uint lane = lanes_split ? lid / lw : 0u;
    const bool split = pc.chunks > 1u;
    for (uint task = gl_WorkGroupID.x; task < pc.rows * pc.heads * pc.chunks;
         task += gl_NumWorkGroups.x) {
        const uint rh = task / pc.chunks;
        const uint ci = task - rh * pc.chunks;
        const uint r = rh / pc.heads;
        const uint h = rh - r * pc.heads;
        const uint seq = r / pc.per_seq;
        const uint pos = pc.pos0 + pass_shift + (r - seq * pc.per_seq);
        const uint head = (h / pc.group) * hd;
        const uint out_at = pc.out_off + r * pc.heads * hd + h * hd;
        const uint q_at0 = pc.x_off + r * pc.heads * hd + h * hd;
        for (uint d = lid; d < hd; d += WG)
            qs[d >> 2u][d & 3u] = x[q_at0 + d];
        barrier();
        // This task's positions t0 .. n - 1 (all of them, unsplit).
        const uint t0 = split ? min(ci * pc.chunk, pos + 1u) : 0u;
        const uint n = split ? min(t0 + pc.chunk, pos + 1u) : pos + 1u;
        // The running maximum score, this invocation's part of the sum of p, and its sums of the
        // weighted values (acc4 on the lanes path, acc on the wide one), all relative to m.
        float m = NEG_INF;
        float l = 0.0;
        vec4 acc4 = vec4(0.0);
        float acc[ND];
        for (uint j = 0u; j < ND; ++j)
            acc[j] = 0.0;
        for (uint c0 = t0; c0 < n; c0 += WG) {
            const uint t = c0 + lid;
            float s = NEG_INF;
            if (t < n)
                s = score(pc.k_off + (t * pc.batch + seq) * pc.kv_dim + head, hd) * pc.scale;
            // The block is not empty (c0 < n), so its maximum and the new m are finite.
            const float mb = max(m, group_max(s));
            const float rescale = exp(m - mb);
            m = mb;
            const float p = t < n ? exp(s - m) : 0.0;
            ps[lid] = p;
            l = l * rescale + p;
            acc4 *= rescale;
            for (uint j = 0u; j < ND; ++j)
                acc[j] *= rescale;
            barrier();
            const uint cn = min(WG, n - c0);
            if (lanes_split) {
                if (lane < lanes) {
                    const uint vb = pc.v_off + seq * pc.kv_dim + head + d0;
                    const uint stride = pc.batch * pc.kv_dim;
                    for (uint j = lane; j < cn; j += lanes) {
                        const uint at = vb + (c0 + j) * stride;
                        if (VEC4)
                            acc4 += ps[j] * vc4[at >> 2u];
                        else
                            acc4.x += ps[j] * vc[at];
                    }
                }
            } else {
                for (uint jj = 0u; jj < ND; ++jj) {
                    const uint d = lid + jj * WG;
                    if (d < hd)
                        for (uint j = 0u; j < cn; ++j)
                            acc[jj] += ps[j] * vc[pc.v_off + ((c0 + j) * pc.batch + seq) * pc.kv_dim + head + d];
                }
            }
            // ps is overwritten by the next block.
            barrier();
        }
        l = group_sum(l);
        // Unsplit: the output, the sums divided by l; split: the sums, m and l (an empty chunk
        // past pos has m = -inf and l = 0, which the merge weighs 0).
        const uint part_at = task * (hd + 2u);
        if (split && lid == 0u) {
            part_out[part_at + hd] = m;
            part_out[part_at + hd + 1u] = l;
        }
        if (lanes_split) {
            part[lid] = lane < lanes ? acc4 : vec4(0.0);
            barrier();
            if (lid < lw) {
                vec4 s = vec4(0.0);
                for (uint k = 0u; k < lanes; ++k)
                    s += part[k * lw + lid];
                for (uint e = 0u; e < w; ++e) {
                    const uint d = lid * w + e;
                    if (split)
                        part_out[part_at + d] = s[e];
                    else
                        dst[out_at + d] = s[e] / l;
                }
            }
        } else {
            for (uint jj = 0u; jj < ND; ++jj) {
                const uint d = lid + jj * WG;
                if (d < hd) {
                    if (split)
                        part_out[part_at + d] = acc[jj];
                    else
                        dst[out_at + d] = acc[jj] / l;
                }
            }
        }
        // qs and part are overwritten by the next task.
        barrier();
    }
    CHAIN_DONE();
}
