#version 450
// llm_qembed_q8: the transformer's embed step with Q8_0 weights. Interface in include/llm_quant.glsl.
#extension GL_GOOGLE_include_directive : require
#define Q8 1
#define EMBED 1
#include "include/llm_quant.glsl"
