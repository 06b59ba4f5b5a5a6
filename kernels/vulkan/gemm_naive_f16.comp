#version 450
// gemm_naive_f16: gemm_naive on IEEE half buffers (16-bit storage), f32 arithmetic; C is rounded to
// half on store. Interface in include/gemm_naive.glsl and include/gemm_io.glsl.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_16bit_storage : require
#define HALF 1
#include "include/gemm_naive.glsl"
