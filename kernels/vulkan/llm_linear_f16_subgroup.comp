#version 450
// llm_linear_f16_subgroup: llm_linear_f16 reducing with subgroupAdd, for devices with subgroup
// arithmetic in compute shaders. Interface in include/llm_linear.glsl.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_shader_16bit_storage : require
#define HALF 1
#define SUBGROUP 1
#include "include/llm_linear.glsl"
