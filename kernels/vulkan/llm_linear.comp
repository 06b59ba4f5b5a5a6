#version 450
// llm_linear: the transformer's linear step with f32 weights. Interface in include/llm_linear.glsl.
#extension GL_GOOGLE_include_directive : require
#include "include/llm_linear.glsl"
