#version 450
// sigmoid: y = 1 / (1 + e^-x), with the full exp (validation allows 1e-5). Interface in
// include/unary.glsl.
#extension GL_GOOGLE_include_directive : require

float f1(float v) { return 1.0 / (1.0 + exp(-v)); }
vec4 f4(vec4 v) { return vec4(1.0) / (vec4(1.0) + exp(-v)); }

#include "include/unary.glsl"
