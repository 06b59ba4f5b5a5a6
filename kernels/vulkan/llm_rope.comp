#version 450
// llm_rope: the transformer's Rope step. Rows of x are [q | k | v] (heads·hd, then kv_heads·hd
// twice); row r is sequence r / per_seq at position pos = pos0 + r % per_seq. The queries, turned
// (rotate-half pairs i, i + hd/2: a·cos - b·sin, b·cos + a·sin), go to out; the turned keys and the
// values to the KV cache at (pos·batch + seq)·kv_dim from k_off and v_off. The table is cos then
// sin, each [positions][hd/2], from table_off. Grid-stride over rows × (a pair of every query and
// key head, an element of every value).
//
// Bindings: 0 x, 1 the table, 2 the arena (out and the cache), 3 the pass shift (added to pos0).
// Push constants (uint): rows, per_seq, pos0, heads, kv_heads, half (hd/2), positions, batch,
// x_off, table_off, out_off, k_off, v_off. Specialization: 0 local size x.
#extension GL_GOOGLE_include_directive : require
#include "include/grid.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0, std430) readonly buffer X { float x[]; };
layout(set = 0, binding = 1, std430) readonly buffer T { float tab[]; };
layout(set = 0, binding = 2, std430) writeonly buffer Out { float dst[]; };
// The pass shift (binding 3), added to the positions mod 2^32: 0, or where a decode's last pass is
// replayed for an earlier one, that pass's number minus the last's (agent kernel/record.rs).
layout(set = 0, binding = 3, std430) readonly buffer Shift { uint pass_shift; };

layout(push_constant) uniform Push {
    uint rows;
    uint per_seq;
    uint pos0;
    uint heads;
    uint kv_heads;
    uint half_;
    uint positions;
    uint batch;
    uint x_off;
    uint table_off;
    uint out_off;
    uint k_off;
    uint v_off;
} pc;

void main()
{
    const uint hd = 2u * pc.half_;
    const uint q = pc.heads * hd;
    const uint kv = pc.kv_heads * hd;
    const uint in_w = q + 2u * kv;
    const uint qpairs = pc.heads * pc.half_;
    const uint kpairs = pc.kv_heads * pc.half_;
    const uint items = qpairs + kpairs + kv;
    GRID_LOOP(idx, pc.rows * items) {
        const uint r = idx / items;
        const uint i = idx - r * items;
        const uint seq = r / pc.per_seq;
        const uint pos = pc.pos0 + pass_shift + (r - seq * pc.per_seq);
        const uint src = pc.x_off + r * in_w;
        const uint at = (pos * pc.batch + seq) * kv;
        if (i < qpairs + kpairs) {
            const bool key = i >= qpairs;
            const uint j = key ? i - qpairs : i;
            const uint h = j / pc.half_;
            const uint p = j - h * pc.half_;
            const uint from = src + (key ? q : 0u) + h * hd + p;
            const uint to = key ? pc.k_off + at + h * hd + p : pc.out_off + r * q + h * hd + p;
            const float c = tab[pc.table_off + pos * pc.half_ + p];
            const float s = tab[pc.table_off + (pc.positions + pos) * pc.half_ + p];
            const float a = x[from];
            const float b = x[from + pc.half_];
            dst[to] = a * c - b * s;
            dst[to + pc.half_] = b * c + a * s;
        } else {
            const uint e = i - qpairs - kpairs;
            dst[pc.v_off + at + e] = x[src + q + kv + e];
        }
    }
}
