#version 450
// llm_gemv_team_q8_chain: one-row projections by teams, Q8_0 weights, each group waiting on the dispatch before it (include/chain.glsl). Interface in
// include/llm_gemv_team.glsl.
#extension GL_GOOGLE_include_directive : require
#define Q8 1
#define CHAIN 1
#include "include/llm_gemv_team.glsl"
