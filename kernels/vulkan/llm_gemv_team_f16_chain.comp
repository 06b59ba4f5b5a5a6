#version 450
// llm_gemv_team_f16_chain: one-row projections by teams, half weights, each group waiting on the dispatch before it (include/chain.glsl). Interface in
// include/llm_gemv_team.glsl.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_16bit_storage : require
#define HALF 1
#define CHAIN 1
#include "include/llm_gemv_team.glsl"
