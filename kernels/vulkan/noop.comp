#version 450
// noop: out[0] = in[0], one invocation; measures dispatch latency.
//
// Bindings: 0 in (input), 1 out (output). No push constants. Specialization: 0 local size x (1).
layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0, std430) readonly buffer In { float src[]; };
layout(set = 0, binding = 1, std430) writeonly buffer Out { float dst[]; };

void main()
{
    if (gl_GlobalInvocationID.x == 0u)
        dst[0] = src[0];
}
