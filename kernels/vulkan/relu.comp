#version 450
// relu: y = max(x, 0). Interface in include/unary.glsl.
#extension GL_GOOGLE_include_directive : require

float f1(float v) { return max(v, 0.0); }
vec4 f4(vec4 v) { return max(v, vec4(0.0)); }

#include "include/unary.glsl"
