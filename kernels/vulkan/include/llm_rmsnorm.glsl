// llm_rmsnorm.glsl: the RmsNorm step, out[r] = x[r] / sqrt(mean(x[r]²) + eps) · gamma, `dim` wide,
// row r of x at x_off + r·in_stride. One workgroup of WG invocations per row, the groups striding
// over the rows; invocation l handles columns l, l + WG, ...
//
// Bindings: 0 x, 1 the weights (f32, or half with HALF), 2 the arena.
// Push constants: rows, dim, gamma, in_stride, x_off, out_off (uint), eps (float).
// Specialization: 0 local size x = WG (see llm.glsl).

#define WEIGHTS_BINDING 1
#define SPEC_WG 1
#define REDUCE 1
#include "llm.glsl"

layout(set = 0, binding = 0, std430) readonly buffer X { float x[]; };
layout(set = 0, binding = 2, std430) writeonly buffer Out { float dst[]; };

layout(push_constant) uniform Push {
    uint rows;
    uint dim;
    uint gamma;
    uint in_stride;
    uint x_off;
    uint out_off;
    float eps;
} pc;

void main()
{
    const uint lid = gl_LocalInvocationID.x;
    for (uint r = gl_WorkGroupID.x; r < pc.rows; r += gl_NumWorkGroups.x) {
        const uint base = pc.x_off + r * pc.in_stride;
        float ss = 0.0;
        for (uint c = lid; c < pc.dim; c += WG) {
            const float v = x[base + c];
            ss += v * v;
        }
        ss = group_sum(ss);
        const float rstd = 1.0 / sqrt(ss / float(pc.dim) + pc.eps);
        const uint o = pc.out_off + r * pc.dim;
        for (uint c = lid; c < pc.dim; c += WG)
            dst[o + c] = x[base + c] * rstd * LOAD_W(pc.gamma + c);
    }
}
