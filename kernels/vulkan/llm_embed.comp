#version 450
// llm_embed: the transformer's embed step with f32 weights. Interface in include/llm_embed.glsl.
#extension GL_GOOGLE_include_directive : require
#include "include/llm_embed.glsl"
