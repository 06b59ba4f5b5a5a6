#version 450
// llm_linear_q4: llm_linear with Q4_0 weights (prefill's projections of a quantized model).
// Interface in include/llm_linear.glsl.
#extension GL_GOOGLE_include_directive : require
#define Q4 1
#include "include/llm_linear.glsl"
