#version 450
// llm_qgemv_q8: the transformer's linear step with Q8_0 weights. Interface in include/llm_quant.glsl.
#extension GL_GOOGLE_include_directive : require
#define Q8 1
#include "include/llm_quant.glsl"
