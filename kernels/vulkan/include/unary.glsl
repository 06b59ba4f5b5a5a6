// unary.glsl: the body of the element-wise activations y = f(x), one vec4 per iteration of the
// grid-stride loop. The including file defines `float f1(float)` and `vec4 f4(vec4)` first.
//
// Bindings: 0 x (input), 1 y (output), each as float[] and vec4[]. Push constants: n.
// Specialization: 0 local size x.
#include "grid.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0, std430) readonly buffer X { float x[]; };
layout(set = 0, binding = 0, std430) readonly buffer X4 { vec4 x4[]; };
layout(set = 0, binding = 1, std430) writeonly buffer Y { float y[]; };
layout(set = 0, binding = 1, std430) writeonly buffer Y4 { vec4 y4[]; };

layout(push_constant) uniform Push { uint n; } pc;

void main()
{
    const uint n = pc.n;
    GRID_LOOP(i, (n + 3u) / 4u) {
        const uint e = i * 4u;
        if (e + 4u <= n) {
            y4[i] = f4(x4[i]);
        } else {
            for (uint j = e; j < n; ++j)
                y[j] = f1(x[j]);
        }
    }
}
