#version 450
// model_conv: a CNN's dense convolutions and linear layers (an implicit GEMM) on f32 tensors.
// Interface in include/model_conv.glsl.
#extension GL_GOOGLE_include_directive : require
#include "include/model_conv.glsl"
