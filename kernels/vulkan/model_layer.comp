#version 450
// model_layer: a CNN's other layers (grouped convolution, pooling, residual add, the sum of a split
// convolution's partial sums) on f32 tensors. Interface in include/model_layer.glsl.
#extension GL_GOOGLE_include_directive : require
#include "include/model_layer.glsl"
