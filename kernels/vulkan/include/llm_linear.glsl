// llm_linear.glsl: the Linear step, out[r][j] = Σ_i x[r][i] · W[j][i] with W `[n][k]` (PyTorch's
// nn.Linear without bias), the decode projections' gemv and, for now, prefill's too.
//
// A workgroup of WG invocations computes NF output features for RB rows at a time: invocation l
// walks i = l, l + WG, ... of the NF weight rows (coalesced reads, each weight loaded once for the
// RB rows; 4-vectors with VEC4) and the RB input rows, then the NF·RB sums are reduced: with
// SUBGROUP (the *_subgroup shaders) by subgroupAdd then the subgroups' partials through shared
// memory, otherwise by a tree in shared memory. Groups stride over the feature blocks along x and
// over the row blocks along y, so a decode pass (a few rows) reads each weight once.
//
// With Q8 or Q4 (QUANT, the llm_linear_q8 / _q4 shaders: q8_0 / q4_0 weights, prefill's
// projections and a batch's) the weights are packed in llama.cpp's blocks as quant_blocks.glsl reads
// them (bound as uint words): a row's element e lies in the matrix's values at byte q_values and its
// block's f16 scale at byte q_scales (w_off is 0: elements count from the matrix's start); four
// weights a load where VEC4 (one word of the block's values: Q8_0's bytes p..p+3, Q4_0's low or high
// nibbles of bytes p % 16..), made floats exactly (see load_quant4), else weight by weight.
//
// Bindings: 0 x, 1 the weights (f32, or half with HALF, or words with QUANT), 2 the arena.
// Push constants (uint): rows, k, n, x_off, w_off, out_off, with QUANT then q_values, q_scales.
// Specialization: 0 local size x = WG (see llm.glsl; the partials take NF·RB·WG floats of shared
// memory); 2 VEC4: k, x_off and w_off are multiples of 4, so rows are read as 4-vectors (16 bytes
// of f32, 8 of half, 4 of q8_0, 2 of q4_0).

#if defined(Q8) || defined(Q4)
#define QUANT 1
#else
#define WEIGHTS_BINDING 1
#define WEIGHTS_VEC4 1
#endif
#define SPEC_WG 1
#include "llm.glsl"

#define NF 4u
#define RB 4u

#include "llm_linear_io.glsl"

#ifdef QUANT
layout(set = 0, binding = 1, std430) readonly buffer WQ { uint wq[]; };

#include "quant_blocks.glsl"

// Weights e..e+3 (e a multiple of 4) with their block's scale, exactly: one word of the values
// made floats (quant_blocks.glsl), times the scale.
vec4 load_quant4(uint e)
{
    const uint b = e >> 5, p = e & 31u;
    const float d = q_scale(pc.q_scales, b);
#ifdef Q8
    return q8_word(wq[(pc.q_values + b * 32u + p) >> 2], q_magic(Q_MAGIC_BYTES)) * d;
#else
    const uint w = wq[(pc.q_values + b * 16u + (p & 15u)) >> 2];
    return (p < 16u ? q4_low(w, q_magic(Q_MAGIC_BYTES)) : q4_high(w, q_magic(Q_MAGIC_HIGH))) * d;
#endif
}
#define LOAD_W4(i) load_quant4(4u * (i))
#define LOAD_W(e) q_weight(pc.q_values, pc.q_scales, e)
#endif

shared float part[NF * RB][WG];

void main()
{
    const uint lid = gl_LocalInvocationID.x;
    const uint blocks = (pc.n + NF - 1u) / NF;
    for (uint blk = gl_WorkGroupID.x; blk < blocks; blk += gl_NumWorkGroups.x) {
        const uint j0 = blk * NF;
        for (uint r0 = gl_WorkGroupID.y * RB; r0 < pc.rows; r0 += gl_NumWorkGroups.y * RB) {
            float acc[NF][RB];
            for (uint f = 0u; f < NF; ++f)
                for (uint r = 0u; r < RB; ++r)
                    acc[f][r] = 0.0;
            if (VEC4) {
                const uint k4 = pc.k / 4u;
                for (uint i = lid; i < k4; i += WG) {
                    vec4 xv[RB];
                    for (uint r = 0u; r < RB; ++r)
                        xv[r] = r0 + r < pc.rows ? x4[(pc.x_off + (r0 + r) * pc.k) / 4u + i]
                                                 : vec4(0.0);
                    for (uint f = 0u; f < NF; ++f) {
                        if (j0 + f < pc.n) {
                            const vec4 w = LOAD_W4((pc.w_off + (j0 + f) * pc.k) / 4u + i);
                            for (uint r = 0u; r < RB; ++r)
                                acc[f][r] += dot(w, xv[r]);
                        }
                    }
                }
            } else {
                for (uint i = lid; i < pc.k; i += WG) {
                    float xv[RB];
                    for (uint r = 0u; r < RB; ++r)
                        xv[r] = r0 + r < pc.rows ? x[pc.x_off + (r0 + r) * pc.k + i] : 0.0;
                    for (uint f = 0u; f < NF; ++f) {
                        if (j0 + f < pc.n) {
                            const float w = LOAD_W(pc.w_off + (j0 + f) * pc.k + i);
                            for (uint r = 0u; r < RB; ++r)
                                acc[f][r] += w * xv[r];
                        }
                    }
                }
            }
#ifdef SUBGROUP
            for (uint f = 0u; f < NF; ++f)
                for (uint r = 0u; r < RB; ++r) {
                    const float v = subgroupAdd(acc[f][r]);
                    if (gl_SubgroupInvocationID == 0u)
                        part[f * RB + r][gl_SubgroupID] = v;
                }
            barrier();
            if (lid < NF * RB) {
                float v = 0.0;
                for (uint s = 0u; s < gl_NumSubgroups; ++s)
                    v += part[lid][s];
                part[lid][0] = v;
            }
#else
            for (uint f = 0u; f < NF; ++f)
                for (uint r = 0u; r < RB; ++r)
                    part[f * RB + r][lid] = acc[f][r];
            barrier();
            for (uint s = WG / 2u; s > 0u; s >>= 1u) {
                if (lid < s)
                    for (uint a = 0u; a < NF * RB; ++a)
                        part[a][lid] += part[a][lid + s];
                barrier();
            }
#endif
            if (lid < NF * RB) {
                const uint f = lid / RB;
                const uint r = lid - f * RB;
                if (j0 + f < pc.n && r0 + r < pc.rows)
                    dst[pc.out_off + (r0 + r) * pc.n + j0 + f] = part[lid][0];
            }
            // The partials are overwritten by the next block.
            barrier();
        }
    }
}
