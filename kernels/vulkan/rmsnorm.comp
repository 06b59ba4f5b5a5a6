#version 450
// rmsnorm with shared-memory tree reductions (any device). Interface in include/rmsnorm.glsl.
#extension GL_GOOGLE_include_directive : require
#include "include/rmsnorm.glsl"
