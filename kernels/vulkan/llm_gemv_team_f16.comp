#version 450
// llm_gemv_team_f16: one-row projections by teams, half weights. Interface in
// include/llm_gemv_team.glsl.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_16bit_storage : require
#define HALF 1
#include "include/llm_gemv_team.glsl"
