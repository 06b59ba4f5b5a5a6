#version 450
// compute_peak_int8: compute_peak's chains with a dot product of four packed bytes in place of the
// multiply (include/peak.glsl documents the shader; kernels/src/catalog/ceilings.rs the int8
// chain). OpSDot of SPV_KHR_integer_dot_product, declared through GL_EXT_spirv_intrinsics (this
// glslc has no GL_EXT_integer_dot_product): capabilities DotProductKHR (6019) and
// DotProductInput4x8BitPackedKHR (6018), the operands' format PackedVectorFormat4x8Bit (0). The
// device must enable shaderIntegerDotProduct. a = k[0] & 0xFF packs the bytes (-1, 0, 0, 0); a
// chain's low byte is what is summed.
#extension GL_EXT_spirv_intrinsics : require
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot4(uint a, uint b, spirv_literal int format);
#define T int
#define PEAK_A(v) (int(v) & 255)
#define PEAK_END(x) float((x) & 255)
#define MAD(x, m, add) (sdot4(uint(x), uint(m), 0) + (add))
#extension GL_GOOGLE_include_directive : require
#include "include/peak.glsl"
