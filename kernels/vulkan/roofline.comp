#version 450
// roofline: y = x after `pairs` pairs of compute_peak's chain on each element (y = x + pairs
// exactly; kernels/src/catalog/ceilings.rs), one vec4 per invocation and iteration of the
// grid-stride loop, 4 pairs per loop trip.
//
// Bindings: 0 x, 2 y (each also as vec4[]), 1 k (the constants a, b, c). Push constants: n
// (elements), pairs. Specialization: 0 local size x.
#extension GL_GOOGLE_include_directive : require
#include "include/grid.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0, std430) readonly buffer X { float x[]; };
layout(set = 0, binding = 0, std430) readonly buffer X4 { vec4 x4[]; };
layout(set = 0, binding = 1, std430) readonly buffer K { float k[]; };
layout(set = 0, binding = 2, std430) writeonly buffer Y { float y[]; };
layout(set = 0, binding = 2, std430) writeonly buffer Y4 { vec4 y4[]; };

layout(push_constant) uniform Push { uint n; uint pairs; } pc;

#define PAIR(v, a, b, c) v = fma(v, a, b); v = fma(v, a, c)

void main()
{
    const uint n = pc.n, pairs = pc.pairs;
    const float a = k[0], b = k[1], c = k[2];
    const vec4 a4 = vec4(a), b4 = vec4(b), c4 = vec4(c);
    GRID_LOOP(i, (n + 3u) / 4u) {
        const uint e = i * 4u;
        if (e + 4u <= n) {
            vec4 v = x4[i];
            for (uint p = 0u; p < pairs / 4u; ++p) {
                PAIR(v, a4, b4, c4); PAIR(v, a4, b4, c4);
                PAIR(v, a4, b4, c4); PAIR(v, a4, b4, c4);
            }
            for (uint p = 0u; p < pairs % 4u; ++p) {
                PAIR(v, a4, b4, c4);
            }
            y4[i] = v;
        } else {
            for (uint j = e; j < n; ++j) {
                float v = x[j];
                for (uint p = 0u; p < pairs; ++p) {
                    PAIR(v, a, b, c);
                }
                y[j] = v;
            }
        }
    }
}
