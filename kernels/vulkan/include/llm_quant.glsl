// llm_quant.glsl: the Embed and Linear steps of a quantized model (llm_qembed_*, llm_qgemv_*): every
// matrix in llama.cpp's Q8_0 (Q8 defined) or Q4_0 blocks of 32 weights, kept on the device as
// kernels/src/quant.rs `split` lays them out — a matrix's blocks' values (32 bytes, or 16 of nibbles:
// weight j in the low nibble of byte j, weight j + 16 in its high nibble, offset by 8), then their f16
// scales — and read as uint words, so no 8- or 16-bit storage is needed. The values' and scales'
// offsets are bytes from the start of the bound weights slice (the values' a multiple of 4).
//
// llm_qembed: out[r] = the dequantized row token(r) of the table (as llm_embed). Bindings: 0 x (the
// token ids), 1 the weights, 2 the arena, 3 the pass shift. Push constants (uint): llm_embed's
// (total = rows·dim, dim, vocab, table = v_off, tok_stride, x_off, out_off), then s_off.
// llm_qgemv: out[r][j] = Σ_i x[r][i] · W[j][i], an invocation per output feature over the rows, each
// block's 32 products summed then scaled once. Bindings: 0 x, 1 the weights, 2 the arena. Push
// constants (uint): rows, k (a multiple of 32), n, x_off, v_off, s_off, out_off.
// Specialization: 0 local size x.

#include "grid.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0, std430) readonly buffer X { float x[]; };
layout(set = 0, binding = 1, std430) readonly buffer W { uint wq[]; };
layout(set = 0, binding = 2, std430) writeonly buffer Out { float dst[]; };

#include "quant_blocks.glsl"

// Σ_i x[xo + i] · q_i over block b, unscaled.
float q_block_dot(uint v_off, uint b, uint xo)
{
    vec4 s = vec4(0.0);
#ifdef Q8
    const uint w0 = (v_off >> 2) + b * 8u;
    for (uint t = 0u; t < 8u; t++) {
        const int w = int(wq[w0 + t]);
        const vec4 q = vec4(ivec4(w << 24, w << 16, w << 8, w) >> 24);
        s += q * vec4(x[xo + 4u * t], x[xo + 4u * t + 1u], x[xo + 4u * t + 2u], x[xo + 4u * t + 3u]);
    }
#else
    const uint w0 = (v_off >> 2) + b * 4u;
    for (uint t = 0u; t < 4u; t++) {
        const uvec4 w = uvec4(wq[w0 + t]);
        const vec4 lo = vec4((w >> uvec4(0u, 8u, 16u, 24u)) & 15u) - 8.0;
        const vec4 hi = vec4((w >> uvec4(4u, 12u, 20u, 28u)) & 15u) - 8.0;
        const uint a = xo + 4u * t, c = xo + 16u + 4u * t;
        s += lo * vec4(x[a], x[a + 1u], x[a + 2u], x[a + 3u]);
        s += hi * vec4(x[c], x[c + 1u], x[c + 2u], x[c + 3u]);
    }
#endif
    return (s.x + s.y) + (s.z + s.w);
}

#ifdef EMBED
layout(set = 0, binding = 3, std430) readonly buffer Shift { uint pass_shift; };

layout(push_constant) uniform Push {
    uint total;
    uint dim;
    uint vocab;
    uint v_off;
    uint tok_stride;
    uint x_off;
    uint out_off;
    uint s_off;
} pc;

void main()
{
    GRID_LOOP(i, pc.total) {
        const uint r = i / pc.dim;
        const uint c = i - r * pc.dim;
        const float t = x[pc.x_off + pass_shift + r * pc.tok_stride];
        const uint tok = uint(min(max(t, 0.0), float(pc.vocab - 1u)));
        const uint e = tok * pc.dim + c;
        dst[pc.out_off + i] = q_value(pc.v_off, e >> 5, e & 31u) * q_scale(pc.s_off, e >> 5);
    }
}
#else
layout(push_constant) uniform Push {
    uint rows;
    uint k;
    uint n;
    uint x_off;
    uint v_off;
    uint s_off;
    uint out_off;
} pc;

void main()
{
    const uint nb = pc.k / 32u;
    GRID_LOOP(j, pc.n) {
        for (uint r = 0u; r < pc.rows; r++) {
            const uint xo = pc.x_off + r * pc.k;
            float acc = 0.0;
            for (uint b = 0u; b < nb; b++)
                acc += q_block_dot(pc.v_off, j * nb + b, xo + 32u * b) * q_scale(pc.s_off, j * nb + b);
            dst[pc.out_off + r * pc.n + j] = acc;
        }
    }
}
#endif
