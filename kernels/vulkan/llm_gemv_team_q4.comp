#version 450
// llm_gemv_team_q4: one-row projections by teams, Q4_0 weights. Interface in
// include/llm_gemv_team.glsl.
#extension GL_GOOGLE_include_directive : require
#define Q4 1
#include "include/llm_gemv_team.glsl"
