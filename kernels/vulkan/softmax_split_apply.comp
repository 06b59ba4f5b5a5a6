#version 450
// softmax of a split row: merges the row's partials, writes this group's chunk (see
// include/split.glsl). Bindings: 0 x, 1 part, 2 y. Push constants: rows, cols, len.
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0) in;
#include "include/split.glsl"

layout(set = 0, binding = 0, std430) readonly buffer X { float x[]; };
layout(set = 0, binding = 1, std430) readonly buffer Part { float part[]; };
layout(set = 0, binding = 2, std430) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push { uint rows; uint cols; uint len; } pc;

void main()
{
    SPLIT_CHUNK()
    const uint pr = 2u * row * SPLIT;
    float mx = -1.0 / 0.0;
    for (uint t = 0u; t < SPLIT; ++t)
        mx = max(mx, part[pr + 2u * t]);
    float sum = 0.0;
    for (uint t = 0u; t < SPLIT; ++t)
        sum += part[pr + 2u * t + 1u] * exp(part[pr + 2u * t] - mx);
    CHUNK_LOOP(c) y[base + c] = exp(x[base + c] - mx) / sum;
}
