#version 450
// llm_gemv_team_chain: one-row projections by teams, each group waiting on the dispatch before it (include/chain.glsl). Interface in
// include/llm_gemv_team.glsl.
#extension GL_GOOGLE_include_directive : require
#define CHAIN 1
#include "include/llm_gemv_team.glsl"
