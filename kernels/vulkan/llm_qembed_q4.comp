#version 450
// llm_qembed_q4: the transformer's embed step with Q4_0 weights. Interface in include/llm_quant.glsl.
#extension GL_GOOGLE_include_directive : require
#define EMBED 1
#include "include/llm_quant.glsl"
