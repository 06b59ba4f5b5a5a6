#version 450
// llm_attention_chain: the transformer's Attention step, each group waiting on the dispatch before it (include/chain.glsl). Interface in include/llm_attention.glsl.
#extension GL_GOOGLE_include_directive : require
#define CHAIN 1
#include "include/llm_attention.glsl"
