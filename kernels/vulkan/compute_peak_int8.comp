#version 450
// compute_peak_int8: compute_peak's chains with a dot product of four packed bytes in place of the
// multiply (include/peak.glsl documents the shader; kernels/src/catalog/ceilings.rs the int8
// chain). OpSDot (include/int_dot.glsl). a = k[0] & 0xFF packs the bytes (-1, 0, 0, 0); a chain's
// low byte is what is summed.
#extension GL_GOOGLE_include_directive : require
#include "include/int_dot.glsl"
#define T int
#define PEAK_A(v) (int(v) & 255)
#define PEAK_END(x) float((x) & 255)
#define MAD(x, m, add) (sdot4(uint(x), uint(m), 0) + (add))
#extension GL_GOOGLE_include_directive : require
#include "include/peak.glsl"
