// llm_quant.glsl: the Embed step of a quantized model (llm_qembed_*; its Linear steps are
// llm_linear_q* and llm_gemv_team_q*): every matrix in llama.cpp's Q8_0 (Q8 defined) or Q4_0 blocks
// of 32 weights, kept on the device as
// kernels/src/quant.rs `split` lays them out — a matrix's blocks' values (32 bytes, or 16 of nibbles:
// weight j in the low nibble of byte j, weight j + 16 in its high nibble, offset by 8), then their f16
// scales — and read as uint words, so no 8- or 16-bit storage is needed. The values' and scales'
// offsets are bytes from the start of the bound weights slice (the values' a multiple of 4).
//
// llm_qembed: out[r] = the dequantized row token(r) of the table (as llm_embed). Bindings: 0 x (the
// token ids), 1 the weights, 2 the arena, 3 the pass shift. Push constants (uint): llm_embed's
// (total = rows·dim, dim, vocab, table = v_off, tok_stride, x_off, out_off), then s_off.
// Specialization: 0 local size x.

#include "grid.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0, std430) readonly buffer X { float x[]; };
layout(set = 0, binding = 1, std430) readonly buffer W { uint wq[]; };
layout(set = 0, binding = 2, std430) writeonly buffer Out { float dst[]; };

#include "quant_blocks.glsl"

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
        dst[pc.out_off + i] = q_weight(pc.v_off, pc.s_off, e);
    }
}
#endif
