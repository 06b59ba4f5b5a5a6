#version 450
// triad: a = b + scalar·c (STREAM triad; the catalog's scalar is 3), one vec4 per iteration.
//
// Bindings: 0 b, 1 c (inputs, in the catalog's order), 2 a (output), each as float[] and vec4[].
// Push constants: n, scalar (f32). Specialization: 0 local size x.
#extension GL_GOOGLE_include_directive : require
#include "include/grid.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0, std430) readonly buffer B { float b[]; };
layout(set = 0, binding = 0, std430) readonly buffer B4 { vec4 b4[]; };
layout(set = 0, binding = 1, std430) readonly buffer C { float c[]; };
layout(set = 0, binding = 1, std430) readonly buffer C4 { vec4 c4[]; };
layout(set = 0, binding = 2, std430) writeonly buffer A { float a[]; };
layout(set = 0, binding = 2, std430) writeonly buffer A4 { vec4 a4[]; };

layout(push_constant) uniform Push { uint n; float scalar; } pc;

void main()
{
    const uint n = pc.n;
    const float s = pc.scalar;
    GRID_LOOP(i, (n + 3u) / 4u) {
        const uint e = i * 4u;
        if (e + 4u <= n) {
            a4[i] = b4[i] + s * c4[i];
        } else {
            for (uint j = e; j < n; ++j)
                a[j] = b[j] + s * c[j];
        }
    }
}
