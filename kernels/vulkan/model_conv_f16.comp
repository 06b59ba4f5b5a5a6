#version 450
// model_conv_f16: model_conv on IEEE half images, weights and arena (16-bit storage, f32
// arithmetic, f32 partial sums). Interface in include/model_conv.glsl.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_16bit_storage : require
#define HALF 1
#include "include/model_conv.glsl"
