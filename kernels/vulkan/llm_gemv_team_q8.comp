#version 450
// llm_gemv_team_q8: one-row projections by teams, Q8_0 weights. Interface in
// include/llm_gemv_team.glsl.
#extension GL_GOOGLE_include_directive : require
#define Q8 1
#include "include/llm_gemv_team.glsl"
