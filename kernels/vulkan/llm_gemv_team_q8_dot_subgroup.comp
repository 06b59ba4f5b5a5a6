#version 450
// llm_gemv_team_q8_dot_subgroup: one-row projections by teams, Q8_0 weights, a quarter-row's dot product in packed 8-bit integer dot products (QDOT), teams are subgroups reducing with subgroupAdd. Interface in
// include/llm_gemv_team.glsl.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#define Q8 1
#define QDOT 1
#define SUBGROUP 1
#include "include/llm_gemv_team.glsl"
