#version 450
// layernorm_rmsnorm with shared-memory tree reductions (any device). Interface in include/layernorm_rmsnorm.glsl.
#extension GL_GOOGLE_include_directive : require
#include "include/layernorm_rmsnorm.glsl"
