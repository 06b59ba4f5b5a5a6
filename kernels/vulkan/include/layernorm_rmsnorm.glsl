// layernorm_rmsnorm.glsl: z = layernorm(x)·gamma1 + beta1; y = z / sqrt(mean(z²) + eps) · gamma2,
// one pass over x per row; included by layernorm_rmsnorm.comp and layernorm_rmsnorm_subgroup.comp.
// Bindings: 0 x, 1 gamma1, 2 beta1, 3 gamma2 (inputs), 4 y (output). Push constants: rows, cols,
// eps (f32). The rest in rows.glsl.
#include "rows.glsl"

layout(set = 0, binding = 0, std430) readonly buffer X { float x[]; };
layout(set = 0, binding = 1, std430) readonly buffer G1 { float gamma1[]; };
layout(set = 0, binding = 2, std430) readonly buffer B1 { float beta1[]; };
layout(set = 0, binding = 3, std430) readonly buffer G2 { float gamma2[]; };
layout(set = 0, binding = 4, std430) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push { uint rows; uint cols; float eps; } pc;

#include "row_stats.glsl"

void main()
{
    ROW_BEGIN() {
        ROW_START(x)
        ROW_MEAN_RSTD(x, base, pc.eps)
        float ss = 0.0;
        for (uint j = 0u; j < nch; ++j) {
            const uint c = lid + j * WG;
            if (c < cols) {
                const float z = (ROW_X(x, base, j, c) - mean) * rstd * gamma1[c] + beta1[c];
                if (CHUNKS > 0u)
                    XV(j) = z;
                ss += z * z;
            }
        }
        const float rstd2 = inversesqrt(group_sum(ss) / float(cols) + pc.eps);
        for (uint j = 0u; j < nch; ++j) {
            const uint c = lid + j * WG;
            if (c < cols) {
                const float z = CHUNKS > 0u
                    ? XV(j)
                    : (x[base + c] - mean) * rstd * gamma1[c] + beta1[c];
                y[base + c] = z * rstd2 * gamma2[c];
            }
        }
    }
}
