// layernorm.glsl: y = (x - mean) / sqrt(var + eps) · gamma + beta per row (biased variance, two
// passes); included by layernorm.comp and layernorm_subgroup.comp. Bindings: 0 x, 1 gamma, 2 beta
// (inputs), 3 y (output). Push constants: rows, cols, eps (f32). The rest in rows.glsl.
#include "rows.glsl"

layout(set = 0, binding = 0, std430) readonly buffer X { float x[]; };
layout(set = 0, binding = 1, std430) readonly buffer G { float gamma[]; };
layout(set = 0, binding = 2, std430) readonly buffer Bt { float beta[]; };
layout(set = 0, binding = 3, std430) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push { uint rows; uint cols; float eps; } pc;

#include "row_stats.glsl"

void main()
{
    ROW_BEGIN() {
        ROW_START(x)
        ROW_MEAN_RSTD(x, base, pc.eps)
        for (uint j = 0u; j < nch; ++j) {
            const uint c = lid + j * WG;
            if (c < cols)
                y[base + c] = (ROW_X(x, base, j, c) - mean) * rstd * gamma[c] + beta[c];
        }
    }
}
