#version 450
// llm_rmsnorm: the transformer's rmsnorm step with f32 weights. Interface in include/llm_rmsnorm.glsl.
#extension GL_GOOGLE_include_directive : require
#include "include/llm_rmsnorm.glsl"
