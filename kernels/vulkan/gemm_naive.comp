#version 450
// gemm_naive: f32 GEMM. Interface in include/gemm_naive.glsl and include/gemm_io.glsl.
#extension GL_GOOGLE_include_directive : require
#include "include/gemm_naive.glsl"
