#version 450
// The partials of one chunk of a split row, subgroupAdd/subgroupMax reductions. Interface in
// include/split_stats.glsl.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#define SUBGROUP 1
#include "include/split_stats.glsl"
