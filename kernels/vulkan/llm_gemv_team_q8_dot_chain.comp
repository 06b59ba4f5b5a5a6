#version 450
// llm_gemv_team_q8_dot_chain: one-row projections by teams, Q8_0 weights, a quarter-row's dot product in packed 8-bit integer dot products (QDOT), each group waiting on the dispatch before it (include/chain.glsl). Interface in
// include/llm_gemv_team.glsl.
#extension GL_GOOGLE_include_directive : require
#define Q8 1
#define QDOT 1
#define CHAIN 1
#include "include/llm_gemv_team.glsl"
