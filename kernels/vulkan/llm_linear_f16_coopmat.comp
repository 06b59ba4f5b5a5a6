#version 450
// llm_linear_f16_coopmat: the transformer's Linear step for many rows (prefill) with IEEE half
// weights on NVIDIA's cooperative matrices (VK_NV_cooperative_matrix, 16×16×16, f16 × f16 → f32,
// subgroups of 32): out[r][j] = Σ_i x[r][i] · W[j][i], W `[n][k]`, as llm_linear.
//
// A group of 8 subgroups computes a tile of BM = 64 rows × BN = 128 features, each subgroup a
// 32 × 32 part (2 × 2 accumulators), stepping k by BK = 32: the group stages the step's x rows and
// weight rows in shared memory as halves, and each subgroup multiplies its fragments. With VEC4 the
// next step's x and weights are loaded into registers while this step's are multiplied.
//
// The activations are f32: each is split into two halves, hi (x with its 13 lowest mantissa bits
// cleared: a half exactly, by bit masking, which no compiler may fold away as it may fold a round
// trip through half) and lo = half((x − hi) · 2^11) (scaled so that it stays a normal half),
// multiplied into two sets of f32 accumulators added at the end, lo's scaled back: x keeps 22 bits
// of its 24 (the weights are halves already; a product of halves is exact in f32), so the sums stay
// within the fp32 tolerance the reference sets for a dot product. The fragments and accumulators
// are plain variables, not arrays a loop indexes (which would put them in local memory).
//
// A whole tile whose output rows start on 16 bytes is stored straight from the accumulators; at the
// edges each 16 × 16 block goes through its subgroup's slice of shared memory, cut to the rows and
// features that exist. Rows, features and k need not be multiples of the tile (what lies past them
// is staged as zero).
//
// Bindings: 0 x (f32), 1 the weights (half), 2 the arena. Push constants (uint): rows, k, n, x_off,
// w_off, out_off (llm_linear's). Specialization: 0 the local size (256, which the planner sets);
// 2 VEC4: k, x_off and w_off are multiples of 4, so rows are read as 4-vectors. Groups stride over
// feature tiles along x and row tiles along y.
//
// Compiled without glslc's -O (build_spv.sh reads the marker below): its optimizer crashes on the
// sum of two cooperative matrices.
// build_spv: no -O
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require

#define BM 64u
#define BN 128u
#define BK 32u
// Row stride of the staged tiles, padded (a multiple of 8 halves: 16 bytes, as the loads need).
#define AS (BK + 8u)
// The group the planner sets (array sizes cannot depend on a specialization constant).
#define WG_SIZE 256u
// 4-vectors of x and of the weights an invocation loads a step.
#define XV (BM * BK / 4u / WG_SIZE)
#define WV (BN * BK / 4u / WG_SIZE)

layout(local_size_x_id = 0) in;
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
// Each subgroup's 16 × 16 block on its way to an edge of the output.
shared float edge[WG_SIZE / 32u * 256u];

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

// Writes a 16 × 16 block of sums whose first element is row r, feature j of the output, cut to
// what exists, through the subgroup's slice of `edge`.
void store_edge(ACC m, uint sg, uint r, uint j)
{
    coopMatStoreNV(m, edge, sg * 256u, 16u, false);
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    for (uint e = gl_SubgroupInvocationID; e < 256u; e += 32u) {
        const uint rr = r + e / 16u;
        const uint jj = j + e % 16u;
        if (rr < pc.rows && jj < pc.n)
            dst[pc.out_off + rr * pc.n + jj] = edge[sg * 256u + e];
    }
    subgroupBarrier();
}

void main()
{
    const uint lid = gl_LocalInvocationID.x;
    const uint sg = lid / 32u;
    // The subgroup's part of the tile: rows qm, qm + 16; features qn, qn + 16.
    const uint qm = (sg / 4u) * 32u;
    const uint qn = (sg % 4u) * 32u;
    const uint tiles_n = (pc.n + BN - 1u) / BN;
    const uint tiles_m = (pc.rows + BM - 1u) / BM;
    for (uint tm = gl_WorkGroupID.y; tm < tiles_m; tm += gl_NumWorkGroups.y) {
        for (uint tn = gl_WorkGroupID.x; tn < tiles_n; tn += gl_NumWorkGroups.x) {
            const uint r0 = tm * BM;
            const uint j0 = tn * BN;
            ACC h00 = ACC(0.0), h01 = ACC(0.0), h10 = ACC(0.0), h11 = ACC(0.0);
            ACC l00 = ACC(0.0), l01 = ACC(0.0), l10 = ACC(0.0), l11 = ACC(0.0);
            // The step's 4-vectors, loaded a step ahead (VEC4).
            vec4 xr[XV];
            f16vec4 wr[WV];
            if (VEC4) {
                [[unroll]] for (uint t = 0u; t < XV; ++t) {
                    const uint e = lid + t * WG_SIZE;
                    const uint r = e / (BK / 4u);
                    const uint i = (e % (BK / 4u)) * 4u;
                    xr[t] = r0 + r < pc.rows && i < pc.k
                        ? x4[(pc.x_off + (r0 + r) * pc.k + i) / 4u] : vec4(0.0);
                }
                [[unroll]] for (uint t = 0u; t < WV; ++t) {
                    const uint e = lid + t * WG_SIZE;
                    const uint r = e / (BK / 4u);
                    const uint i = (e % (BK / 4u)) * 4u;
                    wr[t] = j0 + r < pc.n && i < pc.k
                        ? wt4[(pc.w_off + (j0 + r) * pc.k + i) / 4u] : f16vec4(0.0);
                }
            }
            for (uint k0 = 0u; k0 < pc.k; k0 += BK) {
                if (VEC4) {
                    [[unroll]] for (uint t = 0u; t < XV; ++t) {
                        const uint e = lid + t * WG_SIZE;
                        const uint r = e / (BK / 4u);
                        const uint i = (e % (BK / 4u)) * 4u;
                        stage_x(r, i, xr[t].x);
                        stage_x(r, i + 1u, xr[t].y);
                        stage_x(r, i + 2u, xr[t].z);
                        stage_x(r, i + 3u, xr[t].w);
                    }
                    [[unroll]] for (uint t = 0u; t < WV; ++t) {
                        const uint e = lid + t * WG_SIZE;
                        const uint r = e / (BK / 4u);
                        const uint i = (e % (BK / 4u)) * 4u;
                        b_s[r * AS + i] = wr[t].x;
                        b_s[r * AS + i + 1u] = wr[t].y;
                        b_s[r * AS + i + 2u] = wr[t].z;
                        b_s[r * AS + i + 3u] = wr[t].w;
                    }
                } else {
                    for (uint e = lid; e < BM * BK; e += WG_SIZE) {
                        const uint r = e / BK;
                        const uint i = e % BK;
                        stage_x(r, i, r0 + r < pc.rows && k0 + i < pc.k
                            ? x[pc.x_off + (r0 + r) * pc.k + k0 + i] : 0.0);
                    }
                    for (uint e = lid; e < BN * BK; e += WG_SIZE) {
                        const uint r = e / BK;
                        const uint i = e % BK;
                        b_s[r * AS + i] = j0 + r < pc.n && k0 + i < pc.k
                            ? wt[pc.w_off + (j0 + r) * pc.k + k0 + i] : float16_t(0.0);
                    }
                }
                barrier();
                if (VEC4) {
                    // The next step's, while this one is multiplied (k is a multiple of 4, so
                    // a 4-vector is all in k or all past it).
                    const uint k1 = k0 + BK;
                    [[unroll]] for (uint t = 0u; t < XV; ++t) {
                        const uint e = lid + t * WG_SIZE;
                        const uint r = e / (BK / 4u);
                        const uint i = k1 + (e % (BK / 4u)) * 4u;
                        xr[t] = r0 + r < pc.rows && i < pc.k
                            ? x4[(pc.x_off + (r0 + r) * pc.k + i) / 4u] : vec4(0.0);
                    }
                    [[unroll]] for (uint t = 0u; t < WV; ++t) {
                        const uint e = lid + t * WG_SIZE;
                        const uint r = e / (BK / 4u);
                        const uint i = k1 + (e % (BK / 4u)) * 4u;
                        wr[t] = j0 + r < pc.n && i < pc.k
                            ? wt4[(pc.w_off + (j0 + r) * pc.k + i) / 4u] : f16vec4(0.0);
                    }
                }
                [[unroll]] for (uint kk = 0u; kk < BK; kk += 16u) {
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
            h00 = h00 + l00 * LO_UNSCALE;
            h01 = h01 + l01 * LO_UNSCALE;
            h10 = h10 + l10 * LO_UNSCALE;
            h11 = h11 + l11 * LO_UNSCALE;
            const uint r = r0 + qm;
            const uint j = j0 + qn;
            if (r0 + BM <= pc.rows && j0 + BN <= pc.n && pc.out_off % 4u == 0u && pc.n % 4u == 0u) {
                const uint at = pc.out_off + r * pc.n + j;
                coopMatStoreNV(h00, dst, at, pc.n, false);
                coopMatStoreNV(h01, dst, at + 16u, pc.n, false);
                coopMatStoreNV(h10, dst, at + 16u * pc.n, pc.n, false);
                coopMatStoreNV(h11, dst, at + 16u * pc.n + 16u, pc.n, false);
            } else {
                store_edge(h00, sg, r, j);
                store_edge(h01, sg, r, j + 16u);
                store_edge(h10, sg, r + 16u, j);
                store_edge(h11, sg, r + 16u, j + 16u);
            }
        }
    }
}
