#version 450
// llm_linear_f16_coopmat: the transformer's Linear step for many rows (prefill) with IEEE half
// weights on NVIDIA's cooperative matrices (VK_NV_cooperative_matrix, 16×16×16, f16 × f16 → f32,
// subgroups of 32): out[r][j] = Σ_i x[r][i] · W[j][i], W `[n][k]`, as llm_linear.
//
// A group of 4 subgroups computes a tile of BM rows × BN features, each subgroup a 32 × 32 quarter
// (2 × 2 accumulators), stepping k by BK: the group stages the tile's x rows and weight rows in
// shared memory as halves, and each subgroup multiplies its fragments. The activations are f32:
// each is split into two halves, hi (x with its 13 lowest mantissa bits cleared: a half exactly,
// by bit masking, which no compiler may fold away as it may fold a round trip through half) and lo
// = half((x − hi) · 2^11) (scaled so that it stays a normal half), multiplied into two sets of f32
// accumulators added at the end, lo's scaled back: x keeps 22 bits of its 24 (the weights are
// halves already; a product of halves is exact in f32), so the sums stay within the fp32
// tolerance the reference sets for a dot product. The fragments and accumulators are plain
// variables, not arrays a loop indexes (which would put them in local memory). Rows, features and k need not be multiples of the tile: what lies past them is staged as
// zero, and the tile is written through shared memory with its edges cut.
//
// Bindings: 0 x (f32), 1 the weights (half), 2 the arena. Push constants (uint): rows, k, n, x_off,
// w_off, out_off (llm_linear's). Specialization: 2 VEC4: k, x_off and w_off are multiples of 4, so
// rows are read as 4-vectors; 0 the local size (128). Groups stride over feature tiles along x and row tiles along y.
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require

#define BM 64u
#define BN 64u
#define BK 32u
// Row strides of the staged tiles, padded (a multiple of 8 halves: 16 bytes, as the loads need).
#define AS (BK + 8u)
#define CS (BN + 4u)

// Specialization constant 0, the local size, is 128: four subgroups of 32 (the planner sets it).
layout(local_size_x_id = 0) in;
const uint WG = gl_WorkGroupSize.x;
// The array size a specialization constant may not set: the group is 128 (4 subgroups of 32).
#define WG_MIN 128u
layout(constant_id = 2) const bool VEC4 = false;

layout(set = 0, binding = 0, std430) readonly buffer X { float x[]; };
layout(set = 0, binding = 0, std430) readonly buffer X4 { vec4 x4[]; };
layout(set = 0, binding = 1, std430) readonly buffer W { float16_t wt[]; };
layout(set = 0, binding = 1, std430) readonly buffer W4 { f16vec4 wt4[]; };
layout(set = 0, binding = 2, std430) writeonly buffer Out { float dst[]; };

layout(push_constant) uniform Push {
    uint rows;
    uint k;
    uint n;
    uint x_off;
    uint w_off;
    uint out_off;
} pc;

shared float16_t a_hi[BM * AS];
shared float16_t a_lo[BM * AS];
shared float16_t b_s[BN * AS];
shared float c_s[BM * CS];

#define FRAG fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define ACC fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
// lo's scale, and its inverse for the sums.
const float LO_SCALE = 2048.0;
const float LO_UNSCALE = 1.0 / 2048.0;

void stage_x(uint r, uint i, float v)
{
    const float hi = uintBitsToFloat(floatBitsToUint(v) & 0xffffe000u);
    a_hi[r * AS + i] = float16_t(hi);
    a_lo[r * AS + i] = float16_t((v - hi) * LO_SCALE);
}

void stage_w(uint r, uint i, f16vec4 w)
{
    b_s[r * AS + i] = w.x;
    b_s[r * AS + i + 1u] = w.y;
    b_s[r * AS + i + 2u] = w.z;
    b_s[r * AS + i + 3u] = w.w;
}

void main()
{
    const uint lid = gl_LocalInvocationID.x;
    const uint sg = lid / 32u;
    // The subgroup's quarter of the tile: rows qm, qm + 16; features qn, qn + 16.
    const uint qm = (sg / 2u) * 32u;
    const uint qn = (sg % 2u) * 32u;
    const uint tiles_n = (pc.n + BN - 1u) / BN;
    const uint tiles_m = (pc.rows + BM - 1u) / BM;
    for (uint tm = gl_WorkGroupID.y; tm < tiles_m; tm += gl_NumWorkGroups.y) {
        for (uint tn = gl_WorkGroupID.x; tn < tiles_n; tn += gl_NumWorkGroups.x) {
            const uint r0 = tm * BM;
            const uint j0 = tn * BN;
            ACC h00 = ACC(0.0), h01 = ACC(0.0), h10 = ACC(0.0), h11 = ACC(0.0);
            ACC l00 = ACC(0.0), l01 = ACC(0.0), l10 = ACC(0.0), l11 = ACC(0.0);
            for (uint k0 = 0u; k0 < pc.k; k0 += BK) {
                if (VEC4 && k0 + BK <= pc.k) {
                    // BM × BK/4 4-vectors of x and BN × BK/4 of the weights (BM = BN).
                    for (uint e = lid; e < BM * BK / 4u; e += WG) {
                        const uint r = e / (BK / 4u);
                        const uint i = (e % (BK / 4u)) * 4u;
                        const vec4 v = r0 + r < pc.rows
                            ? x4[(pc.x_off + (r0 + r) * pc.k + k0 + i) / 4u] : vec4(0.0);
                        stage_x(r, i, v.x);
                        stage_x(r, i + 1u, v.y);
                        stage_x(r, i + 2u, v.z);
                        stage_x(r, i + 3u, v.w);
                        stage_w(r, i, j0 + r < pc.n
                            ? wt4[(pc.w_off + (j0 + r) * pc.k + k0 + i) / 4u] : f16vec4(0.0));
                    }
                } else {
                    for (uint e = lid; e < BM * BK; e += WG) {
                        const uint r = e / BK;
                        const uint i = e % BK;
                        const bool in_k = k0 + i < pc.k;
                        stage_x(r, i, r0 + r < pc.rows && in_k
                            ? x[pc.x_off + (r0 + r) * pc.k + k0 + i] : 0.0);
                        b_s[r * AS + i] = j0 + r < pc.n && in_k
                            ? wt[pc.w_off + (j0 + r) * pc.k + k0 + i] : float16_t(0.0);
                    }
                }
                barrier();
                for (uint kk = 0u; kk < BK; kk += 16u) {
                    FRAG a0, a1, w0, w1;
                    // The weights' rows are the columns of the right-hand matrix (k × features).
                    coopMatLoadNV(w0, b_s, qn * AS + kk, AS, true);
                    coopMatLoadNV(w1, b_s, (qn + 16u) * AS + kk, AS, true);
                    coopMatLoadNV(a0, a_hi, qm * AS + kk, AS, false);
                    coopMatLoadNV(a1, a_hi, (qm + 16u) * AS + kk, AS, false);
                    h00 = coopMatMulAddNV(a0, w0, h00);
                    h01 = coopMatMulAddNV(a0, w1, h01);
                    h10 = coopMatMulAddNV(a1, w0, h10);
                    h11 = coopMatMulAddNV(a1, w1, h11);
                    coopMatLoadNV(a0, a_lo, qm * AS + kk, AS, false);
                    coopMatLoadNV(a1, a_lo, (qm + 16u) * AS + kk, AS, false);
                    l00 = coopMatMulAddNV(a0, w0, l00);
                    l01 = coopMatMulAddNV(a0, w1, l01);
                    l10 = coopMatMulAddNV(a1, w0, l10);
                    l11 = coopMatMulAddNV(a1, w1, l11);
                }
                // The staged tiles are overwritten by the next step.
                barrier();
            }
            // lo's sums, scaled back, through shared memory into registers, then hi's: the sum of
            // two accumulators is left to the invocations (glslang's optimizer fails on a
            // cooperative matrix + a cooperative matrix).
            coopMatStoreNV(l00 * LO_UNSCALE, c_s, qm * CS + qn, CS, false);
            coopMatStoreNV(l01 * LO_UNSCALE, c_s, qm * CS + qn + 16u, CS, false);
            coopMatStoreNV(l10 * LO_UNSCALE, c_s, (qm + 16u) * CS + qn, CS, false);
            coopMatStoreNV(l11 * LO_UNSCALE, c_s, (qm + 16u) * CS + qn + 16u, CS, false);
            barrier();
            float lo_sum[BM * BN / WG_MIN];
            for (uint t = 0u; t < BM * BN / WG; ++t) {
                const uint e = lid + t * WG;
                lo_sum[t] = c_s[(e / BN) * CS + e % BN];
            }
            barrier();
            coopMatStoreNV(h00, c_s, qm * CS + qn, CS, false);
            coopMatStoreNV(h01, c_s, qm * CS + qn + 16u, CS, false);
            coopMatStoreNV(h10, c_s, (qm + 16u) * CS + qn, CS, false);
            coopMatStoreNV(h11, c_s, (qm + 16u) * CS + qn + 16u, CS, false);
            barrier();
            for (uint t = 0u; t < BM * BN / WG; ++t) {
                const uint e = lid + t * WG;
                const uint r = e / BN;
                const uint j = e % BN;
                if (r0 + r < pc.rows && j0 + j < pc.n)
                    dst[pc.out_off + (r0 + r) * pc.n + j0 + j] = c_s[r * CS + j] + lo_sum[t];
            }
            // The staged result is overwritten by the next tile.
            barrier();
        }
    }
}
