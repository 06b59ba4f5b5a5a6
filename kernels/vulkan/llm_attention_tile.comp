#version 450
// llm_attention_tile: a prefill's Attention step, many rows of one sequence at a time. The
// interface is llm_attention's (include/llm_attention.glsl: the same push constants, chunk and
// chunks unused, never split; its bindings but the partials, so the pass shift is binding 4), its
// result the same causal grouped-query attention.
//
// A group of 128 invocations takes a (sequence, block of BQ consecutive rows, head), the blocks
// with the most positions first: the block's queries stay in shared memory, and the keys and
// values of its positions come in tiles of BK = 32, each read from memory once for the BQ rows
// (llm_attention reads them once a row). Invocation (i, c) (i = id mod BQ, c = id / BQ, C = 128 /
// BQ of them a row) takes row i: the scores of the tile's positions KPI·c .. KPI·c + KPI - 1
// (KPI = 32 / C), and the output's 4-vectors c, c + C, ... The softmax is online as in
// llm_attention: a row's C invocations share their tile maxima through shared memory and each
// keeps the running maximum m (the same in all C), its own part of the sum of p and the sums of its
// dimensions, rescaled by exp(old m - new m); the C parts of the sum of p are added at the end.
// Within a subgroup of 32 invocations at most two values of c meet, so a tile's reads are
// broadcasts; the queries', the tile's and p's rows are padded (no bank conflicts).
//
// Specialization: 0 the local size (128), 2 HD4 = head_dim / 4 (at most 32), 3 BQ (32 or 16).
// The planner takes this shader where the head width, kv_dim and the cache offsets are multiples
// of 4 and the shared memory holds (BQ + 32) · (HD4 + 1) · 16 + BQ · 33 · 4 + 512 bytes
// (plan/llm/attention.rs).
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;
layout(constant_id = 2) const uint HD4 = 16u;
layout(constant_id = 3) const uint BQ = 32u;

const uint WG = gl_WorkGroupSize.x;
const uint BK = 32u;
// Invocations a row, a tile's positions each, and the widest head's output 4-vectors each.
const uint C = WG / BQ;
const uint KPI = BK / C;
const uint MAX_OUT = 8u;
// Padded rows: 4-vectors of a query, key or value row; floats of a row of p.
const uint RS = HD4 + 1u;
const uint PS = BK + 1u;

layout(set = 0, binding = 0, std430) readonly buffer X { float x[]; };
layout(set = 0, binding = 1, std430) readonly buffer K4 { vec4 kc4[]; };
layout(set = 0, binding = 2, std430) readonly buffer V4 { vec4 vc4[]; };
layout(set = 0, binding = 3, std430) writeonly buffer Out { float dst[]; };
layout(set = 0, binding = 4, std430) readonly buffer Shift { uint pass_shift; };

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
} pc;

shared vec4 qs[BQ * RS];
// The tile's keys, then its values.
shared vec4 kvs[BK * RS];
shared float ps[BQ * PS];
// Each invocation's tile maximum, then at the end its part of the sum of p.
shared float pm[WG];

// -infinity (a literal: uintBitsToFloat is not a constant expression).
const float NEG_INF = -1.0 / 0.0;

// The tile from position t0 of the cache at `off` (keys or values) into kvs: zeros past n.
void load_tile(bool values, uint t0, uint n, uint seq, uint head)
{
    const uint lid = gl_LocalInvocationID.x;
    const uint off = values ? pc.v_off : pc.k_off;
    for (uint e = lid; e < BK * HD4; e += WG) {
        const uint j = e / HD4;
        const uint d4 = e - j * HD4;
        const uint t = t0 + j;
        vec4 v = vec4(0.0);
        if (t < n) {
            const uint at = (off + (t * pc.batch + seq) * pc.kv_dim + head) / 4u + d4;
            v = values ? vc4[at] : kc4[at];
        }
        kvs[j * RS + d4] = v;
    }
}

void main()
{
    const uint lid = gl_LocalInvocationID.x;
    const uint i = lid % BQ;
    const uint c = lid / BQ;
    const uint hd = pc.hd;
    const uint blocks = (pc.per_seq + BQ - 1u) / BQ;
    const uint seqs = pc.rows / pc.per_seq;
    const uint outs = (HD4 + C - 1u) / C;
    for (uint task = gl_WorkGroupID.x; task < seqs * blocks * pc.heads;
         task += gl_NumWorkGroups.x) {
        const uint h = task % pc.heads;
        const uint sb = task / pc.heads;
        const uint seq = sb % seqs;
        const uint b = blocks - 1u - sb / seqs;
        const uint i0 = b * BQ;
        const uint nrows = min(BQ, pc.per_seq - i0);
        // The block's first position, and the last one's: the tiles cover 0 ..= last. A row past
        // the sequence's end takes the last row's positions and writes nothing.
        const uint first = pc.pos0 + pass_shift + i0;
        const uint n = first + nrows;
        const uint pos = first + min(i, nrows - 1u);
        const uint head = (h / pc.group) * hd;
        // The previous task's reads of qs, kvs, ps and pm are done.
        barrier();
        for (uint e = lid; e < BQ * HD4; e += WG) {
            const uint qi = e / HD4;
            const uint d4 = e - qi * HD4;
            vec4 q = vec4(0.0);
            if (qi < nrows) {
                const uint at = pc.x_off + (seq * pc.per_seq + i0 + qi) * pc.heads * hd + h * hd + 4u * d4;
                q = vec4(x[at], x[at + 1u], x[at + 2u], x[at + 3u]);
            }
            qs[qi * RS + d4] = q;
        }
        float m = NEG_INF;
        float l = 0.0;
        vec4 o[MAX_OUT];
        for (uint u = 0u; u < MAX_OUT; ++u)
            o[u] = vec4(0.0);
        for (uint t0 = 0u; t0 < n; t0 += BK) {
            // Last tile's reads of kvs and ps are done (and this task's queries are written).
            barrier();
            load_tile(false, t0, n, seq, head);
            barrier();
            float s[KPI];
            for (uint jj = 0u; jj < KPI; ++jj)
                s[jj] = 0.0;
            for (uint d4 = 0u; d4 < HD4; ++d4) {
                const vec4 q = qs[i * RS + d4];
                for (uint jj = 0u; jj < KPI; ++jj)
                    s[jj] += dot(q, kvs[(c * KPI + jj) * RS + d4]);
            }
            float mx = NEG_INF;
            for (uint jj = 0u; jj < KPI; ++jj) {
                s[jj] = t0 + c * KPI + jj <= pos ? s[jj] * pc.scale : NEG_INF;
                mx = max(mx, s[jj]);
            }
            pm[c * BQ + i] = mx;
            // Every invocation's maximum is written, and the keys are read.
            barrier();
            // Position 0 is in the first tile and before every row's own: mb is finite.
            float mb = m;
            for (uint cc = 0u; cc < C; ++cc)
                mb = max(mb, pm[cc * BQ + i]);
            const float rescale = exp(m - mb);
            m = mb;
            float sum = 0.0;
            for (uint jj = 0u; jj < KPI; ++jj) {
                const float p = exp(s[jj] - mb);
                ps[i * PS + c * KPI + jj] = p;
                sum += p;
            }
            l = l * rescale + sum;
            for (uint u = 0u; u < outs; ++u)
                o[u] *= rescale;
            load_tile(true, t0, n, seq, head);
            barrier();
            for (uint j = 0u; j < BK; ++j) {
                const float p = ps[i * PS + j];
                for (uint u = 0u; u < outs; ++u) {
                    const uint d4 = c + u * C;
                    if (d4 < HD4)
                        o[u] += p * kvs[j * RS + d4];
                }
            }
        }
        // The maxima are read: pm takes the parts of the sum of p.
        barrier();
        pm[c * BQ + i] = l;
        barrier();
        float total = 0.0;
        for (uint cc = 0u; cc < C; ++cc)
            total += pm[cc * BQ + i];
        if (i < nrows) {
            const uint row = pc.out_off + (seq * pc.per_seq + i0 + i) * pc.heads * hd + h * hd;
            for (uint u = 0u; u < outs; ++u) {
                const uint d4 = c + u * C;
                if (d4 < HD4) {
                    const vec4 r = o[u] / total;
                    for (uint e = 0u; e < 4u; ++e)
                        dst[row + 4u * d4 + e] = r[e];
                }
            }
        }
    }
}
