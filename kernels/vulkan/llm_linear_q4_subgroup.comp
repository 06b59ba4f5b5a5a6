#version 450
// llm_linear_q4_subgroup: llm_linear with Q4_0 weights reducing with subgroupAdd, for devices with
// subgroup arithmetic in compute shaders. Interface in include/llm_linear.glsl.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#define Q4 1
#define SUBGROUP 1
#include "include/llm_linear.glsl"
