#version 450
// llm_gemv_team_f16_subgroup_chain: one-row projections by teams, half weights, teams are subgroups reducing with subgroupAdd, each group waiting on the dispatch before it (include/chain.glsl). Interface in
// include/llm_gemv_team.glsl.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_shader_16bit_storage : require
#define HALF 1
#define SUBGROUP 1
#define CHAIN 1
#include "include/llm_gemv_team.glsl"
