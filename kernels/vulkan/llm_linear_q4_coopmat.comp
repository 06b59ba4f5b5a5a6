#version 450
// llm_linear_q4_coopmat: the Linear step for many rows with Q4_0 weights on NVIDIA's cooperative
// matrices (a quantized model's prefill). Interface in include/llm_linear_coopmat.glsl.
//
// Compiled without glslc's -O (build_spv.sh reads the marker below): its optimizer crashes on the
// sum of two cooperative matrices.
// build_spv: no -O
#extension GL_GOOGLE_include_directive : require
#define Q4 1
#include "include/llm_linear_coopmat.glsl"
