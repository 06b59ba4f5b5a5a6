#version 450
// log_softmax with shared-memory tree reductions (any device). Interface in include/softmax.glsl.
#extension GL_GOOGLE_include_directive : require
#define LOG_SOFTMAX 1
#include "include/softmax.glsl"
