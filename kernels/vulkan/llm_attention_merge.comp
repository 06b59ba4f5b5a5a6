#version 450
// llm_attention_merge: the second half of a split attention (llm_attention with chunks > 1): for
// each (row, head) task and dimension d, the chunks' partials (hd unnormalised sums, then the
// maximum score m and the sum of p, hd + 2 floats each, chunk after chunk) merged by log-sum-exp:
//   M = max_c m_c,  out[d] = Σ_c sum_c[d]·exp(m_c - M) / Σ_c l_c·exp(m_c - M).
// An empty chunk (m = -inf, l = 0) weighs 0; the first chunk of a task is never empty.
// Grid-stride over rows·heads·hd outputs, written at out_off + task·hd + d.
//
// Bindings: 0 the partials, 1 the arena. Push constants (uint): n (rows·heads·hd), hd, chunks,
// out_off. Specialization: 0 local size x.
#extension GL_GOOGLE_include_directive : require
#include "include/grid.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0, std430) readonly buffer Part { float part[]; };
layout(set = 0, binding = 1, std430) writeonly buffer Out { float dst[]; };

layout(push_constant) uniform Push {
    uint n;
    uint hd;
    uint chunks;
    uint out_off;
} pc;

void main()
{
    const uint w = pc.hd + 2u;
    GRID_LOOP(i, pc.n) {
        const uint task = i / pc.hd;
        const uint d = i - task * pc.hd;
        const uint base = task * pc.chunks * w;
        float mx = part[base + pc.hd];
        for (uint c = 1u; c < pc.chunks; ++c)
            mx = max(mx, part[base + c * w + pc.hd]);
        float num = 0.0, den = 0.0;
        for (uint c = 0u; c < pc.chunks; ++c) {
            const uint at = base + c * w;
            const float l = part[at + pc.hd + 1u];
            if (l > 0.0) {
                const float s = exp(part[at + pc.hd] - mx);
                num += part[at + d] * s;
                den += l * s;
            }
        }
        dst[pc.out_off + i] = num / den;
    }
}
