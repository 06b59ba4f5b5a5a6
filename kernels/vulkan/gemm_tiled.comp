#version 450
// gemm_tiled: f32 GEMM. Interface in include/gemm_tiled.glsl and include/gemm_io.glsl.
#extension GL_GOOGLE_include_directive : require
#include "include/gemm_tiled.glsl"
