#version 450
// copy: b = a (STREAM copy), one vec4 per iteration of the grid-stride loop.
//
// Bindings: 0 a (input), 1 b (output), each as float[] and vec4[]. Push constants: n.
// Specialization: 0 local size x.
#extension GL_GOOGLE_include_directive : require
#include "include/grid.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0, std430) readonly buffer A { float a[]; };
layout(set = 0, binding = 0, std430) readonly buffer A4 { vec4 a4[]; };
layout(set = 0, binding = 1, std430) writeonly buffer B { float b[]; };
layout(set = 0, binding = 1, std430) writeonly buffer B4 { vec4 b4[]; };

layout(push_constant) uniform Push { uint n; } pc;

void main()
{
    const uint n = pc.n;
    GRID_LOOP(i, (n + 3u) / 4u) {
        const uint e = i * 4u;
        if (e + 4u <= n) {
            b4[i] = a4[i];
        } else {
            for (uint j = e; j < n; ++j)
                b[j] = a[j];
        }
    }
}
