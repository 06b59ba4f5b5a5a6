// softmax.glsl: y = exp(x - max(x)) / Σ exp(x - max(x)) per row; included by softmax.comp and
// softmax_subgroup.comp, and with LOG_SOFTMAX defined, y = (x - max(x)) - log Σ exp(x - max(x)), by
// log_softmax.comp and log_softmax_subgroup.comp. Bindings: 0 x (input), 1 y (output). Push
// constants: rows, cols. The rest of the interface is in rows.glsl.
#include "rows.glsl"

layout(set = 0, binding = 0, std430) readonly buffer X { float x[]; };
layout(set = 0, binding = 1, std430) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push { uint rows; uint cols; } pc;

void main()
{
    ROW_BEGIN() {
        ROW_START(x)
        float mx = NEG_INF;
        for (uint j = 0u; j < nch; ++j) {
            const uint c = lid + j * WG;
            if (c < cols)
                mx = max(mx, ROW_X(x, base, j, c));
        }
        mx = group_max(mx);
        float sum = 0.0;
        for (uint j = 0u; j < nch; ++j) {
            const uint c = lid + j * WG;
            if (c < cols) {
                const float e = exp(ROW_X(x, base, j, c) - mx);
#ifndef LOG_SOFTMAX
                // softmax's last pass reads exp(x - max) from the cache; log_softmax's reads x.
                if (CHUNKS > 0u)
                    XV(j) = e;
#endif
                sum += e;
            }
        }
        sum = group_sum(sum);
#ifdef LOG_SOFTMAX
        const float log_sum = log(sum);
#endif
        for (uint j = 0u; j < nch; ++j) {
            const uint c = lid + j * WG;
            if (c < cols)
#ifdef LOG_SOFTMAX
                y[base + c] = (ROW_X(x, base, j, c) - mx) - log_sum;
#else
                y[base + c] = (CHUNKS > 0u ? XV(j) : exp(x[base + c] - mx)) / sum;
#endif
        }
    }
}
