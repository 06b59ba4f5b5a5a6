#version 450
// layernorm of a split row: merges the row's partials (Chan's parallel variance formula, no
// E[x²] - E[x]² cancellation), writes this group's chunk (see include/split.glsl). Bindings: 0 x,
// 1 gamma, 2 beta, 3 part, 4 y. Push constants: rows, cols, len, eps.
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;
#include "include/split.glsl"

layout(set = 0, binding = 0, std430) readonly buffer X { float x[]; };
layout(set = 0, binding = 1, std430) readonly buffer Gamma { float gamma[]; };
layout(set = 0, binding = 2, std430) readonly buffer Beta { float beta[]; };
layout(set = 0, binding = 3, std430) readonly buffer Part { float part[]; };
layout(set = 0, binding = 4, std430) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push { uint rows; uint cols; uint len; float eps; } pc;

void main()
{
    SPLIT_CHUNK()
    const uint pr = 2u * row * SPLIT;
    float n = 0.0, mean = 0.0, m2 = 0.0;
    for (uint t = 0u; t < SPLIT; ++t) {
        const float nb = float(min((t + 1u) * pc.len, pc.cols) - min(t * pc.len, pc.cols));
        if (nb <= 0.0)
            continue;
        const float d = part[pr + 2u * t] - mean;
        const float nn = n + nb;
        mean += d * nb / nn;
        m2 += part[pr + 2u * t + 1u] + d * d * n * nb / nn;
        n = nn;
    }
    const float rstd = inversesqrt(m2 / float(pc.cols) + pc.eps);
    CHUNK_LOOP(c) y[base + c] = (x[base + c] - mean) * rstd * gamma[c] + beta[c];
}
