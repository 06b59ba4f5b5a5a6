#version 450
// llm_qgemv_q4: the transformer's linear step with Q4_0 weights. Interface in include/llm_quant.glsl.
#extension GL_GOOGLE_include_directive : require
#include "include/llm_quant.glsl"
