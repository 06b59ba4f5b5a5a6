// int_dot.glsl: dot products of four packed bytes (SPV_KHR_integer_dot_product), declared through
// GL_EXT_spirv_intrinsics (this glslc has no GL_EXT_integer_dot_product): capabilities DotProductKHR
// (6019) and DotProductInput4x8BitPackedKHR (6018); the format argument is PackedVectorFormat4x8Bit
// (0). The device must enable shaderIntegerDotProduct. Used by compute_peak_int8 and, with QDOT, by
// llm_gemv_team.glsl.
#extension GL_EXT_spirv_intrinsics : require
// OpSDot: both words' bytes signed.
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot4(uint a, uint b, spirv_literal int format);
// OpSUDot: a's bytes signed, b's unsigned.
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4452)
int sudot4(uint a, uint b, spirv_literal int format);
