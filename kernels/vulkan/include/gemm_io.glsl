// gemm_io.glsl: the buffers, push constants and element access shared by every GEMM shader.
//
// C = A·B with row-major A (m×k), B (k×n) and C (m×n). Bindings: 0 A, 1 B (inputs), 2 C (output),
// each declared as scalars and as 4-vectors (the vector views are used only where the planner
// guarantees alignment). Push constants, all uint:
//   m, n, k                 the product's shape
//   a_batch, b_batch,       workgroup z multiplies matrix z of a batch: A starts at element
//   c_batch, c_first        z·a_batch, B at z·b_batch and C at (c_first + z)·c_batch; a plain GEMM
//                           is one batch with all four 0. conv2d's im2col path multiplies the
//                           weights (a_batch 0) by several images' column matrices at once.
// Indices are uint: the planner refuses buffers above 2^32 - 1 bytes. The inputs are `restrict
// readonly` (their two views alias, but nothing writes them), which lets drivers use their read-only
// data caches.
//
// With HALF defined the buffers hold IEEE half (GL_EXT_shader_16bit_storage only: the arithmetic is
// f32, so no shaderFloat16 is needed); loads convert exactly and stores round to nearest even in
// integer arithmetic (f32_to_f16), because Vulkan leaves the rounding of a float16_t conversion to
// the implementation and the validation allows half an fp16 ulp.

#ifdef HALF
layout(set = 0, binding = 0, std430) restrict readonly buffer A { float16_t a[]; };
layout(set = 0, binding = 0, std430) restrict readonly buffer A4 { f16vec4 a4[]; };
layout(set = 0, binding = 1, std430) restrict readonly buffer B { float16_t b[]; };
layout(set = 0, binding = 1, std430) restrict readonly buffer B4 { f16vec4 b4[]; };
layout(set = 0, binding = 2, std430) writeonly buffer C { uint16_t c[]; };
layout(set = 0, binding = 2, std430) writeonly buffer C4 { u16vec4 c4[]; };

// IEEE half bits of f, rounded to nearest even; overflow gives infinity, NaN stays NaN.
uint f32_to_f16(float f)
{
    const uint x = floatBitsToUint(f);
    const uint sign = (x >> 16) & 0x8000u;
    const uint ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u)
        return sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u);
    if (ax >= 0x477ff000u) // 65520 and above round to infinity
        return sign | 0x7c00u;
    if (ax < 0x38800000u) // below 2^-14: subnormal; f·2^24 is exact, roundEven rounds to even
        return sign | uint(roundEven(uintBitsToFloat(ax) * 16777216.0));
    const uint r = ax - 0x38000000u; // rebias the exponent from 127 to 15
    return sign | ((r + 0x0fffu + ((r >> 13) & 1u)) >> 13);
}

#define LOAD_A(i) float(a[i])
#define LOAD_B(i) float(b[i])
#define LOAD_A4(i) vec4(a4[i])
#define LOAD_B4(i) vec4(b4[i])
#define STORE_C(i, v) c[i] = uint16_t(f32_to_f16(v))
#define STORE_C4(i, v)                                                                         \
    c4[i] = u16vec4(uvec4(f32_to_f16((v).x), f32_to_f16((v).y), f32_to_f16((v).z),           \
                          f32_to_f16((v).w)))
#else
layout(set = 0, binding = 0, std430) restrict readonly buffer A { float a[]; };
layout(set = 0, binding = 0, std430) restrict readonly buffer A4 { vec4 a4[]; };
layout(set = 0, binding = 1, std430) restrict readonly buffer B { float b[]; };
layout(set = 0, binding = 1, std430) restrict readonly buffer B4 { vec4 b4[]; };
layout(set = 0, binding = 2, std430) writeonly buffer C { float c[]; };
layout(set = 0, binding = 2, std430) writeonly buffer C4 { vec4 c4[]; };

#define LOAD_A(i) a[i]
#define LOAD_B(i) b[i]
#define LOAD_A4(i) a4[i]
#define LOAD_B4(i) b4[i]
#define STORE_C(i, v) c[i] = (v)
#define STORE_C4(i, v) c4[i] = (v)
#endif

layout(push_constant) uniform Push {
    uint m;
    uint n;
    uint k;
    uint a_batch;
    uint b_batch;
    uint c_batch;
    uint c_first;
} pc;
