#version 450
// vec_add: c = a + b, one vec4 per iteration of the grid-stride loop; also debug_wrong.
//
// Bindings: 0 a, 1 b (inputs), 2 c (output); each is declared twice, as float[] and as vec4[] (the
// buffers are bound at offset 0, so vec4 i is aligned). Push constants: n (elements).
// Specialization: 0 local size x; 2 WRONG: add 1 to element min(n, 8) - 1, for debug_wrong, a
// deliberate error the validation must catch.
#extension GL_GOOGLE_include_directive : require
#include "include/grid.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 2) const bool WRONG = false;

layout(set = 0, binding = 0, std430) readonly buffer A { float a[]; };
layout(set = 0, binding = 0, std430) readonly buffer A4 { vec4 a4[]; };
layout(set = 0, binding = 1, std430) readonly buffer B { float b[]; };
layout(set = 0, binding = 1, std430) readonly buffer B4 { vec4 b4[]; };
layout(set = 0, binding = 2, std430) writeonly buffer C { float c[]; };
layout(set = 0, binding = 2, std430) writeonly buffer C4 { vec4 c4[]; };

layout(push_constant) uniform Push { uint n; } pc;

void main()
{
    const uint n = pc.n;
    const uint wrong = min(n, 8u) - 1u;
    GRID_LOOP(i, (n + 3u) / 4u) {
        const uint e = i * 4u;
        if (e + 4u <= n) {
            vec4 v = a4[i] + b4[i];
            if (WRONG && wrong >= e && wrong < e + 4u)
                v[wrong - e] += 1.0;
            c4[i] = v;
        } else {
            for (uint j = e; j < n; ++j)
                c[j] = a[j] + b[j] + ((WRONG && j == wrong) ? 1.0 : 0.0);
        }
    }
}
