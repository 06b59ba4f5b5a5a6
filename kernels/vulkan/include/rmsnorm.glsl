// rmsnorm.glsl: y = x / sqrt(mean(x²) + eps) · gamma per row; included by rmsnorm.comp and
// rmsnorm_subgroup.comp. Bindings: 0 x, 1 gamma (inputs), 2 y (output). Push constants: rows, cols,
// eps (f32). The rest in rows.glsl.
#include "rows.glsl"

layout(set = 0, binding = 0, std430) readonly buffer X { float x[]; };
layout(set = 0, binding = 1, std430) readonly buffer G { float gamma[]; };
layout(set = 0, binding = 2, std430) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push { uint rows; uint cols; float eps; } pc;

void main()
{
    ROW_BEGIN() {
        ROW_START(x)
        float ss = 0.0;
        for (uint j = 0u; j < nch; ++j) {
            const uint c = lid + j * WG;
            if (c < cols) {
                const float v = ROW_X(x, base, j, c);
                ss += v * v;
            }
        }
        const float rstd = inversesqrt(group_sum(ss) / float(cols) + pc.eps);
        for (uint j = 0u; j < nch; ++j) {
            const uint c = lid + j * WG;
            if (c < cols)
                y[base + c] = ROW_X(x, base, j, c) * rstd * gamma[c];
        }
    }
}
