// llm_linear_coopmat.glsl: the transformer's Linear step for many rows (prefill) on NVIDIA's
// cooperative matrices (VK_NV_cooperative_matrix, 16×16×16, f16 × f16 → f32, subgroups of 32):
// out[r][j] = Σ_i x[r][i] · W[j][i], W `[n][k]`, as llm_linear. The weights are IEEE halves
// (llm_linear_f16_coopmat) or llama.cpp's Q8_0 / Q4_0 blocks (Q8 or Q4 defined: llm_linear_q8_coopmat
// / _q4_coopmat, laid out and bound as words as in llm_linear.glsl with QUANT).
//
// A group of 8 subgroups computes a tile of BM = 64 rows × BN = 128 features, each subgroup a
// 32 × 32 part (2 × 2 accumulators), stepping k by BK = 32 (one quantized block a weight row): the
// group stages the step's x rows and weight rows in shared memory as halves, and each subgroup
// multiplies its fragments. Each step's x and weights are loaded into registers a step ahead, while
// the step before is multiplied.
//
// The activations are f32: each is split into two halves, hi (x with its 13 lowest mantissa bits
// cleared: a half exactly, by bit masking, which no compiler may fold away as it may fold a round
// trip through half) and lo = half((x − hi) · 2^11) (scaled so that it stays a normal half),
// multiplied into two sets of f32 accumulators added at the end, lo's scaled back: x keeps 22 bits
// of its 24, so the sums stay within the fp32 tolerance the reference sets for a dot product. Half
// weights are exact as they are (a product of halves is exact in f32). A quantized weight is its
// value times its block's f16 scale, up to 15 significant bits (Q4_0) or 19 (Q8_0), made as a float
// exactly while staging and split as x is: hi · hi goes to the first accumulators, lo · hi and
// hi · lo (both scaled by 2^11) to the second, so the weight too keeps every bit but the product of
// the two lows (2^-22 of a product). The fragments and accumulators are plain variables, not arrays
// a loop indexes (which would put them in local memory).
//
// A whole tile whose output rows start on 16 bytes is stored straight from the accumulators; at the
// edges each 16 × 16 block goes through its subgroup's slice of shared memory, cut to the rows and
// features that exist. Rows, features and k need not be multiples of the tile (what lies past them
// is staged as zero; k is whole blocks for quantized weights).
//
// Bindings: 0 x (f32), 1 the weights (half, or words), 2 the arena. Push constants (uint): rows, k,
// n, x_off, w_off, out_off (llm_linear's), with Q8 or Q4 then q_values, q_scales (bytes; w_off 0).
// Specialization: 0 the local size (256, which the planner sets); 2 VEC4: k and x_off (and w_off)
// are multiples of 4, so x rows (and half weight rows) are read as 4-vectors. Groups stride over
// feature tiles along x and row tiles along y.
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require

#if defined(Q8) || defined(Q4)
#define QUANT 1
#endif

#define BM 64u
#define BN 128u
#define BK 32u
// Row stride of the staged tiles, padded (a multiple of 8 halves: 16 bytes, as the loads need).
#define AS (BK + 8u)
// The group the planner sets (array sizes cannot depend on a specialization constant).
#define WG_SIZE 256u
// 4-vectors of x an invocation loads a step.
#define XV (BM * BK / 4u / WG_SIZE)

layout(local_size_x_id = 0) in;

#include "llm_linear_io.glsl"

shared float16_t a_hi[BM * AS];
shared float16_t a_lo[BM * AS];
shared float16_t b_hi[BN * AS];
#ifdef QUANT
shared float16_t b_lo[BN * AS];
#endif
// Each subgroup's 16 × 16 block on its way to an edge of the output.
shared float edge[WG_SIZE / 32u * 256u];

#define FRAG fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define ACC fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
// lo's scale, and its inverse for the sums.
const float LO_SCALE = 2048.0;
const float LO_UNSCALE = 1.0 / 2048.0;

// Loads into REG[COUNT] an invocation's 4-vectors of the step at k0 of rows ROW0.. (of ROWS) of a
// row-major matrix (V4 or V1, from element OFF, rows k long): zeros past the rows and past k.
#define FETCH4(REG, COUNT, V4, V1, OFF, ROW0, ROWS, ZERO4, ZERO)                             \
    [[unroll]] for (uint t = 0u; t < COUNT; ++t) {                                         \
        const uint e = lid + t * WG_SIZE;                                                  \
        const uint r = ROW0 + e / (BK / 4u);                                               \
        const uint i = k0 + (e % (BK / 4u)) * 4u;                                          \
        const uint at = OFF + r * pc.k + i;                                                \
        if (VEC4) {                                                                        \
            REG[t] = r < ROWS && i < pc.k ? V4[at / 4u] : ZERO4;                           \
        } else {                                                                           \
            [[unroll]] for (uint c = 0u; c < 4u; ++c)                                      \
                REG[t][c] = r < ROWS && i + c < pc.k ? V1[at + c] : ZERO;                  \
        }                                                                                  \
    }

#ifdef QUANT
layout(set = 0, binding = 1, std430) readonly buffer WQ { uint wq[]; };

#include "quant_blocks.glsl"

// Words of a block's values (8 of Q8_0's bytes, 4 of Q4_0's nibbles), and the words an invocation
// loads a step: BN rows of one block each.
#ifdef Q8
#define QW 8u
#else
#define QW 4u
#endif
#define WV (BN * QW / WG_SIZE)

// Element e of the step's words: its weight row in the tile, and which word of the row's block.
#define W_ROW(e) ((e) / QW)
#define W_WORD(e) ((e) % QW)

// The step's words and scales, a step ahead.
uint wr[WV];
float ws[WV];

// Loads the words and scales of the block at k0 of each of the invocation's weight rows (zeros past
// n, so that those rows multiply to zero).
void fetch_w(uint lid, uint j0, uint k0)
{
    const uint per_row = pc.k / BK;
    [[unroll]] for (uint t = 0u; t < WV; ++t) {
        const uint e = lid + t * WG_SIZE;
        const uint j = j0 + W_ROW(e);
        const uint b = j * per_row + k0 / BK;
        const bool inside = j < pc.n && k0 < pc.k;
        wr[t] = inside ? wq[(pc.q_values + b * QW * 4u) / 4u + W_WORD(e)] : 0u;
        ws[t] = inside ? q_scale(pc.q_scales, b) : 0.0;
    }
}
#else
layout(set = 0, binding = 1, std430) readonly buffer W { float16_t wt[]; };
layout(set = 0, binding = 1, std430) readonly buffer W4 { f16vec4 wt4[]; };

// 4-vectors of the weights an invocation loads a step.
#define WV (BN * BK / 4u / WG_SIZE)
f16vec4 wr[WV];

// Loads the weight rows j0.. at k0 (zeros past n and past k).
void fetch_w(uint lid, uint j0, uint k0)
{
    FETCH4(wr, WV, wt4, wt, pc.w_off, j0, pc.n, f16vec4(0.0), float16_t(0.0));
}
#endif

// The step's x, a step ahead.
vec4 xr[XV];

// Loads x's rows r0.. at k0 (zeros past the rows and past k).
void fetch_x(uint lid, uint r0, uint k0)
{
    FETCH4(xr, XV, x4, x, pc.x_off, r0, pc.rows, vec4(0.0), 0.0);
}

// Stores v's hi and lo halves at element `at` of HI and LO.
#define SPLIT(HI, LO, at, v)                                                           \
    {                                                                                  \
        const float v_ = (v);                                                          \
        const float h_ = uintBitsToFloat(floatBitsToUint(v_) & 0xffffe000u);           \
        HI[at] = float16_t(h_);                                                        \
        LO[at] = float16_t((v_ - h_) * LO_SCALE);                                      \
    }

// Writes the registers of the step into shared memory.
void stage(uint lid)
{
    [[unroll]] for (uint t = 0u; t < XV; ++t) {
        const uint e = lid + t * WG_SIZE;
        const uint at = (e / (BK / 4u)) * AS + (e % (BK / 4u)) * 4u;
        [[unroll]] for (uint c = 0u; c < 4u; ++c)
            SPLIT(a_hi, a_lo, at + c, xr[t][c]);
    }
#ifdef QUANT
    const uvec4 magic = q_magic(Q_MAGIC_BYTES);
#ifdef Q4
    const uvec4 magic_high = q_magic(Q_MAGIC_HIGH);
#endif
    [[unroll]] for (uint t = 0u; t < WV; ++t) {
        const uint e = lid + t * WG_SIZE;
        const uint at = W_ROW(e) * AS + 4u * W_WORD(e);
#ifdef Q8
        const vec4 w = q8_word(wr[t], magic) * ws[t];
        [[unroll]] for (uint c = 0u; c < 4u; ++c)
            SPLIT(b_hi, b_lo, at + c, w[c]);
#else
        // The low nibbles are weights 4·word.., the high ones 16 + 4·word...
        const vec4 low = q4_low(wr[t], magic) * ws[t];
        const vec4 high = q4_high(wr[t], magic_high) * ws[t];
        [[unroll]] for (uint c = 0u; c < 4u; ++c) {
            SPLIT(b_hi, b_lo, at + c, low[c]);
            SPLIT(b_hi, b_lo, at + 16u + c, high[c]);
        }
#endif
    }
#else
    [[unroll]] for (uint t = 0u; t < WV; ++t) {
        const uint e = lid + t * WG_SIZE;
        const uint at = (e / (BK / 4u)) * AS + (e % (BK / 4u)) * 4u;
        [[unroll]] for (uint c = 0u; c < 4u; ++c)
            b_hi[at + c] = wr[t][c];
    }
#endif
}

// Loads the fragments of the staged rows q.. and q + 16.. at kk of TILE into F0 and F1 (the weights'
// transposed: their rows are the columns of the right-hand matrix, k × features).
#define LOAD_PAIR(F0, F1, TILE, q, T)                                                  \
    coopMatLoadNV(F0, TILE, (q) * AS + kk, AS, T);                                     \
    coopMatLoadNV(F1, TILE, ((q) + 16u) * AS + kk, AS, T)

// Adds the products of the row fragments A0, A1 and the feature fragments W0, W1 into the 2 × 2
// accumulators P00..P11.
#define MMA_2X2(P, A0, A1, W0, W1)                                                     \
    P##00 = coopMatMulAddNV(A0, W0, P##00);                                            \
    P##01 = coopMatMulAddNV(A0, W1, P##01);                                            \
    P##10 = coopMatMulAddNV(A1, W0, P##10);                                            \
    P##11 = coopMatMulAddNV(A1, W1, P##11)

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
            fetch_x(lid, r0, 0u);
            fetch_w(lid, j0, 0u);
            for (uint k0 = 0u; k0 < pc.k; k0 += BK) {
                stage(lid);
                barrier();
                // The next step's, while this one is multiplied (zeros past k).
                fetch_x(lid, r0, k0 + BK);
                fetch_w(lid, j0, k0 + BK);
                [[unroll]] for (uint kk = 0u; kk < BK; kk += 16u) {
                    FRAG a0, a1, w0, w1;
                    LOAD_PAIR(w0, w1, b_hi, qn, true);
                    LOAD_PAIR(a0, a1, a_hi, qm, false);
                    MMA_2X2(h, a0, a1, w0, w1);
#ifdef QUANT
                    FRAG v0, v1;
                    LOAD_PAIR(v0, v1, b_lo, qn, true);
                    MMA_2X2(l, a0, a1, v0, v1);
#endif
                    LOAD_PAIR(a0, a1, a_lo, qm, false);
                    MMA_2X2(l, a0, a1, w0, w1);
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
