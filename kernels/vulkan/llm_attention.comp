#version 450
// llm_attention: the transformer's Attention step. Interface in include/llm_attention.glsl.
#extension GL_GOOGLE_include_directive : require
#include "include/llm_attention.glsl"
