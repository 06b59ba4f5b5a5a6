#version 450
// gemm_blocked: register-blocked f32 GEMM. Interface in include/gemm_blocked.glsl and
// include/gemm_io.glsl.
#extension GL_GOOGLE_include_directive : require
#include "include/gemm_blocked.glsl"
