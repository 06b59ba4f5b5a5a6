#version 450
// gelu: y = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) (PyTorch's approximate="tanh"), computed
// as x / (1 + e^-2u) with u the tanh's argument: the same value, without the built-in tanh (whose
// precision Vulkan leaves to sinh/cosh, see tanh.comp) and without the cancellation of
// 1 + tanh(u) for negative x. e^-2u overflows to +inf for very negative x, giving -0. Interface
// in include/unary.glsl.
#extension GL_GOOGLE_include_directive : require

// 2·√(2/π) and 2·√(2/π)·0.044715.
const float K = 1.5957691216057308;
const float C = 0.0713548162726003;

float f1(float v) { return v / (1.0 + exp(-v * (K + C * v * v))); }
vec4 f4(vec4 v) { return v / (vec4(1.0) + exp(-v * (K + C * v * v))); }

#include "include/unary.glsl"
