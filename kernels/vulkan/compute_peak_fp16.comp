#version 450
// compute_peak_fp16: compute_peak's chains in packed halves (include/peak.glsl documents the
// chain, bindings and push constants): four f16vec2, lane 0 of x(j) chain j and lane 1 chain
// j + 4, so each fma is a packed one where the device has it. Needs shaderFloat16.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "include/grid.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0, std430) readonly buffer K { float k[]; };
layout(set = 0, binding = 1, std430) writeonly buffer Out { float out_[]; };

layout(push_constant) uniform Push { uint items; uint pairs; } pc;

#define HALF_PAIR(m, add)                                                                      \
    x0 = fma(x0, m, add); x1 = fma(x1, m, add); x2 = fma(x2, m, add); x3 = fma(x3, m, add)
#define PAIR() HALF_PAIR(a, b); HALF_PAIR(a, c)
#define PAIR8() PAIR(); PAIR(); PAIR(); PAIR(); PAIR(); PAIR(); PAIR(); PAIR()

void main()
{
    const f16vec2 a = f16vec2(float16_t(k[0])), b = f16vec2(float16_t(k[1]));
    const f16vec2 c = f16vec2(float16_t(k[2]));
    // fp16 chains are at most 2034 pairs long (the catalog refuses more).
    const uint pairs = pc.pairs;
    GRID_LOOP(i, pc.items) {
        const float16_t base = float16_t(i & 7u);
        f16vec2 x0 = f16vec2(base, base + float16_t(4)), x1 = f16vec2(base + float16_t(1), base + float16_t(5));
        f16vec2 x2 = f16vec2(base + float16_t(2), base + float16_t(6)), x3 = f16vec2(base + float16_t(3), base + float16_t(7));
        for (uint t = 0u; t < pairs / 8u; ++t) {
            PAIR8();
        }
        for (uint r = 0u; r < pairs % 8u; ++r) {
            PAIR();
        }
        const vec2 s = (vec2(x0) + vec2(x1)) + (vec2(x2) + vec2(x3));
        out_[i] = s.x + s.y;
    }
}
