// softmax_split_apply.glsl: softmax of a split row (log_softmax with LOG_SOFTMAX defined): merges
// the row's partials into its maximum M and Σ exp(x - M), writes this group's chunk (see
// split.glsl). Included by softmax_split_apply.comp and log_softmax_split_apply.comp.
// Bindings: 0 x, 1 part, 2 y. Push constants: rows, cols, len.

layout(local_size_x_id = 0) in;
#include "split.glsl"

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
#ifdef LOG_SOFTMAX
    const float log_sum = log(sum);
    CHUNK_LOOP(c) y[base + c] = (x[base + c] - mx) - log_sum;
#else
    CHUNK_LOOP(c) y[base + c] = exp(x[base + c] - mx) / sum;
#endif
}
