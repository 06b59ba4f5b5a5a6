#version 450
// log_softmax with subgroupAdd/subgroupMax reductions, for devices with subgroup arithmetic in
// compute shaders. Interface in include/softmax.glsl.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#define SUBGROUP 1
#define LOG_SOFTMAX 1
#include "include/softmax.glsl"
