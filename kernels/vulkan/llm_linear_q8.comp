#version 450
// llm_linear_q8: llm_linear with Q8_0 weights (prefill's projections of a quantized model).
// Interface in include/llm_linear.glsl.
#extension GL_GOOGLE_include_directive : require
#define Q8 1
#include "include/llm_linear.glsl"
