// split_stats.glsl: the partials of one chunk (see split.glsl); included by split_stats.comp and
// split_stats_subgroup.comp. Bindings: 0 x, 1 part. Specialization 4 SOFTMAX: 1 for softmax's
// (and log_softmax's) partials, 0 for layernorm's.
#include "rows.glsl"
#include "split.glsl"

layout(constant_id = 4) const uint SOFTMAX = 0;

layout(set = 0, binding = 0, std430) readonly buffer X { float x[]; };
layout(set = 0, binding = 1, std430) writeonly buffer Part { float part[]; };

layout(push_constant) uniform Push { uint rows; uint cols; uint len; } pc;

void main()
{
    SPLIT_CHUNK()
    float p0, p1 = 0.0;
    if (SOFTMAX != 0u) {
        p0 = NEG_INF;
        CHUNK_LOOP(c) p0 = max(p0, x[base + c]);
        p0 = group_max(p0);
        CHUNK_LOOP(c) p1 += exp(x[base + c] - p0);
    } else {
        p0 = 0.0;
        CHUNK_LOOP(c) p0 += x[base + c];
        p0 = group_sum(p0) / float(max(int(c1) - int(c0), 1));
        CHUNK_LOOP(c) {
            const float d = x[base + c] - p0;
            p1 += d * d;
        }
    }
    p1 = group_sum(p1);
    if (lid == 0u && row < pc.rows) {
        part[2u * g_] = p0;
        part[2u * g_ + 1u] = p1;
    }
}
