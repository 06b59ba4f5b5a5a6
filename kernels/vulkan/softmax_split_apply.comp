#version 450
// softmax of a split row: merges the row's partials, writes this group's chunk. Interface in
// include/softmax_split_apply.glsl.
#extension GL_GOOGLE_include_directive : require
#include "include/softmax_split_apply.glsl"
