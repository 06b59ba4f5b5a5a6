#version 450
// softmax with shared-memory tree reductions (any device). Interface in include/softmax.glsl.
#extension GL_GOOGLE_include_directive : require
#include "include/softmax.glsl"
