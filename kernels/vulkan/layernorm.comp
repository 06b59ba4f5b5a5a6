#version 450
// layernorm with shared-memory tree reductions (any device). Interface in include/layernorm.glsl.
#extension GL_GOOGLE_include_directive : require
#include "include/layernorm.glsl"
