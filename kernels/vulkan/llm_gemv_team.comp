#version 450
// llm_gemv_team: one-row projections by teams. Interface in
// include/llm_gemv_team.glsl.
#extension GL_GOOGLE_include_directive : require
#include "include/llm_gemv_team.glsl"
