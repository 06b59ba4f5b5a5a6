#version 450
// The partials of one chunk of a split row, shared-memory reductions. Interface in
// include/split_stats.glsl.
#extension GL_GOOGLE_include_directive : require
#include "include/split_stats.glsl"
