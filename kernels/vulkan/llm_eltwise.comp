#version 450
// llm_eltwise: the transformer's element-wise steps, by `op`: 0 Add (out = x + other, n elements),
// 1 Copy (out = x, n elements), 2 SwiGlu (rows of [gate | up], `width` = ffn each:
// out[r][i] = silu(gate) · up, n = rows·ffn; exp as the reference, no fast approximation).
// Grid-stride over n.
//
// Bindings: 0 x, 1 other (Add's addend; x again for the others), 2 the arena.
// Push constants (uint): op, n, width, x_off, other_off, out_off. Specialization: 0 local size x.
#extension GL_GOOGLE_include_directive : require
#include "include/grid.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0, std430) readonly buffer X { float x[]; };
layout(set = 0, binding = 1, std430) readonly buffer S { float other[]; };
layout(set = 0, binding = 2, std430) writeonly buffer Out { float dst[]; };

layout(push_constant) uniform Push {
    uint op;
    uint n;
    uint width;
    uint x_off;
    uint other_off;
    uint out_off;
} pc;

void main()
{
    GRID_LOOP(i, pc.n) {
        float v;
        if (pc.op == 0u) {
            v = x[pc.x_off + i] + other[pc.other_off + i];
        } else if (pc.op == 1u) {
            v = x[pc.x_off + i];
        } else {
            const uint r = i / pc.width;
            const uint c = i - r * pc.width;
            const uint at = pc.x_off + 2u * r * pc.width + c;
            const float g = x[at];
            v = g / (1.0 + exp(-g)) * x[at + pc.width];
        }
        dst[pc.out_off + i] = v;
    }
}
