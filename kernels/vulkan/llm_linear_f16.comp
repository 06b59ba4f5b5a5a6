#version 450
// llm_linear_f16: the transformer's linear step with IEEE half weights (16-bit storage, f32
// arithmetic). Interface in include/llm_linear.glsl.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_16bit_storage : require
#define HALF 1
#include "include/llm_linear.glsl"
