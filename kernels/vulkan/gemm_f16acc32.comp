#version 450
// gemm_f16acc32: register-blocked GEMM on IEEE half buffers (16-bit storage) with f32 arithmetic
// and accumulation; C is rounded to half on store. Interface in include/gemm_blocked.glsl and
// include/gemm_io.glsl.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_16bit_storage : require
#define HALF 1
#include "include/gemm_blocked.glsl"
