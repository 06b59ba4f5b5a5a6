#version 450
// compute_peak_fp32: compute_peak's chains in float (include/peak.glsl documents the shader).
#define T float
#define MAD(x, m, add) fma(x, m, add)
#extension GL_GOOGLE_include_directive : require
#include "include/peak.glsl"
