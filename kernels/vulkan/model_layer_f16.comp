#version 450
// model_layer_f16: model_layer on IEEE half images, weights and arena (16-bit storage, f32
// arithmetic); op 4 still reads f32 partial sums. Interface in include/model_layer.glsl.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_16bit_storage : require
#define HALF 1
#include "include/model_layer.glsl"
