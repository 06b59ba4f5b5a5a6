#version 450
// tanh: y = tanh(x) computed from exp as sign(x)·(1 - e^-2|x|) / (1 + e^-2|x|). Vulkan leaves the
// built-in tanh's precision to sinh/cosh, which some drivers approximate beyond the validation's
// 1e-5; exp's bound (3 + 2|x| ulp) is documented, e^-2|x| never overflows, and near 0 the quotient
// errs by about one ulp of 1, far below 1e-5. Interface in include/unary.glsl.
#extension GL_GOOGLE_include_directive : require

float f1(float v)
{
    const float t = exp(-2.0 * abs(v));
    return sign(v) * ((1.0 - t) / (1.0 + t));
}

vec4 f4(vec4 v)
{
    const vec4 t = exp(-2.0 * abs(v));
    return sign(v) * ((vec4(1.0) - t) / (vec4(1.0) + t));
}

#include "include/unary.glsl"
