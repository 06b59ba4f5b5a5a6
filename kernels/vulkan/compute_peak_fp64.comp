#version 450
// compute_peak_fp64: compute_peak's chains in double (include/peak.glsl documents the shader).
// Needs shaderFloat64.
#define T double
#define MAD(x, m, add) fma(x, m, add)
#extension GL_GOOGLE_include_directive : require
#include "include/peak.glsl"
