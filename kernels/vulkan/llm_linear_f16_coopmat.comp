#version 450
// llm_linear_f16_coopmat: the Linear step for many rows with IEEE half weights on NVIDIA's
// cooperative matrices. Interface in include/llm_linear_coopmat.glsl.
//
// Compiled without glslc's -O (build_spv.sh reads the marker below): its optimizer crashes on the
// sum of two cooperative matrices.
// build_spv: no -O
#extension GL_GOOGLE_include_directive : require
#include "include/llm_linear_coopmat.glsl"
