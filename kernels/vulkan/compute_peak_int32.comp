#version 450
// compute_peak_int32: compute_peak's chains in int (include/peak.glsl documents the shader).
#define T int
#define MAD(x, m, add) ((x) * (m) + (add))
#extension GL_GOOGLE_include_directive : require
#include "include/peak.glsl"
