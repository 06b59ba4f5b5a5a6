// gemm_blocked.glsl: register-blocked GEMM; included by gemm_blocked.comp (f32) and
// gemm_f16acc32.comp (HALF: f16 storage, f32 accumulation). Interface in gemm_io.glsl.
//
// A workgroup computes a TM×TN tile of C with (TN/WN)×(TM/WM) invocations, each accumulating WM×WN
// outputs in registers. Per TK step the group stages a TM×TK slice of A, transposed to as[k][m] so
// that at each k the rows an invocation needs are one vec4 read, and a TK×TN slice of B in shared
// memory; the next slice is fetched into registers while the current one is multiplied (double
// buffering, one barrier per step). This is the OpenCL gemm_blocked (on an H100 at 4096³, 128×128×8
// tiles with 16×8 per invocation: 46.5 TFLOP/s, 0.91 of cuBLAS SGEMM in the same run) with its -D
// parameters turned into specialization constants, so one SPIR-V module serves every tuning.
//
// When WM and WN are multiples of 4 an invocation owns groups of 4 adjacent rows (columns) spaced
// TPM·4 (TPN·4) apart, so its shared reads are vec4 and the invocations of a subgroup read
// consecutive vec4s (no bank conflicts); otherwise single rows spaced TPM (TPN) apart. The A tile's
// rows are padded by one vec4 so the transposing stores spread over the banks.
//
// Specialization:
//   0, 1   local size x = TN/WN, y = TM/WM (the planner sets both; the shader relies on them)
//   2, 3   TM, TN: the workgroup's tile of C, multiples of 4 and of WM, WN
//   4      TK: the k step, a multiple of 4
//   5, 6   WM, WN: outputs per invocation
//   7      VEC4: k, n, a_batch, b_batch and c_batch are multiples of 4, so A and B are fetched and C
//          stored as aligned 4-vectors (otherwise element by element)
//   8      EXACT: m, n, k are multiples of TM, TN, TK: bounds checks compiled out
// Groups: ceil(n/TN) × ceil(m/TM) × batch.
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x_id = 0, local_size_y_id = 1) in;
layout(constant_id = 2) const uint TM = 64;
layout(constant_id = 3) const uint TN = 64;
layout(constant_id = 4) const uint TK = 16;
layout(constant_id = 5) const uint WM = 4;
layout(constant_id = 6) const uint WN = 4;
layout(constant_id = 7) const bool VEC4 = false;
layout(constant_id = 8) const bool EXACT = false;

#include "gemm_io.glsl"

const uint TPM = TM / WM;
const uint TPN = TN / WN;
const uint THREADS = TPM * TPN;
// Elements per global load, and per shared read of the compute loop.
const uint LW = VEC4 ? 4u : 1u;
// LV = 4 when WM and WN are multiples of 4, else 1, in integer arithmetic: spirv-opt mishandles a
// specialization-constant select on a compound condition.
const uint LV = 4u - 3u * ((WM % 4u + WN % 4u + 6u) / 7u);
// Loads of one slice, per row of the slice, and per invocation (the last round leaves some
// invocations idle when a slice does not split evenly).
const uint KA = TK / LW;
const uint NB = TN / LW;
const uint A_VECS = TM * KA;
const uint B_VECS = TK * NB;
const uint A_LOADS = (A_VECS + THREADS - 1u) / THREADS;
const uint B_LOADS = (B_VECS + THREADS - 1u) / THREADS;
// Row lengths in vec4 of the two shared tiles (A transposed and padded).
const uint LDA4 = TM / 4u + 1u;
const uint LDB4 = TN / 4u;

shared vec4 as4[2u * TK * LDA4];
shared vec4 bs4[2u * TK * LDB4];

void main()
{
    const uint tx = gl_LocalInvocationID.x;
    const uint ty = gl_LocalInvocationID.y;
    const uint tid = ty * TPN + tx;
    const uint row0 = gl_WorkGroupID.y * TM;
    const uint col0 = gl_WorkGroupID.x * TN;
    const uint z = gl_WorkGroupID.z;
    const uint m = pc.m, n = pc.n, k = pc.k;
    const uint abase = z * pc.a_batch + row0 * k;
    const uint bbase = z * pc.b_batch + col0;
    const uint cbase = (z + pc.c_first) * pc.c_batch;

    float acc[WM * WN];
    [[unroll]] for (uint i = 0u; i < WM * WN; ++i)
        acc[i] = 0.0;
    vec4 ra[A_LOADS];
    vec4 rb[B_LOADS];
    const uint tiles = (k + TK - 1u) / TK;

    // Step t stores slice t - 1 (fetched during step t - 1) into buffer (t - 1) & 1, waits,
    // fetches slice t into registers and multiplies slice t - 1 while that fetch travels. One
    // barrier per step suffices: the buffer was last read in step t - 2, which every invocation
    // finished before it passed the barrier of step t - 1. Step 0 only fetches slice 0.
    for (uint t = 0u; t <= tiles; ++t) {
        const uint cur = (t + 1u) & 1u;
        if (t > 0u) {
            [[unroll]] for (uint i = 0u; i < A_LOADS; ++i) {
                const uint v0 = tid + i * THREADS;
                if (A_VECS % THREADS == 0u || v0 < A_VECS) {
                    const uint r = v0 / KA;
                    const uint kk = (v0 % KA) * LW;
                    [[unroll]] for (uint v = 0u; v < LW; ++v)
                        as4[(cur * TK + kk + v) * LDA4 + r / 4u][r % 4u] = ra[i][v];
                }
            }
            [[unroll]] for (uint i = 0u; i < B_LOADS; ++i) {
                const uint v0 = tid + i * THREADS;
                if (B_VECS % THREADS == 0u || v0 < B_VECS) {
                    const uint kr = v0 / NB;
                    const uint cn = (v0 % NB) * LW;
                    if (LW == 4u)
                        bs4[(cur * TK + kr) * LDB4 + cn / 4u] = rb[i];
                    else
                        bs4[(cur * TK + kr) * LDB4 + cn / 4u][cn % 4u] = rb[i].x;
                }
            }
            barrier();
        }
        if (t < tiles) {
            const uint kt = t * TK;
            [[unroll]] for (uint i = 0u; i < A_LOADS; ++i) {
                const uint v0 = tid + i * THREADS;
                const uint r = v0 / KA;
                const uint kk = (v0 % KA) * LW;
                vec4 val = vec4(0.0);
                // With VEC4, k is a multiple of 4, so a vector is either wholly inside or out.
                if ((A_VECS % THREADS == 0u || v0 < A_VECS)
                    && (EXACT || (row0 + r < m && kt + kk < k))) {
                    const uint e = abase + r * k + kt + kk;
                    if (LW == 4u)
                        val = LOAD_A4(e / 4u);
                    else
                        val.x = LOAD_A(e);
                }
                ra[i] = val;
            }
            [[unroll]] for (uint i = 0u; i < B_LOADS; ++i) {
                const uint v0 = tid + i * THREADS;
                const uint kr = v0 / NB;
                const uint cn = (v0 % NB) * LW;
                vec4 val = vec4(0.0);
                if ((B_VECS % THREADS == 0u || v0 < B_VECS)
                    && (EXACT || (kt + kr < k && col0 + cn < n))) {
                    const uint e = bbase + (kt + kr) * n + cn;
                    if (LW == 4u)
                        val = LOAD_B4(e / 4u);
                    else
                        val.x = LOAD_B(e);
                }
                rb[i] = val;
            }
        }
        if (t == 0u)
            continue;
        [[unroll]] for (uint kk = 0u; kk < TK; ++kk) {
            const uint sa = (cur * TK + kk) * LDA4;
            const uint sb = (cur * TK + kk) * LDB4;
            float af[WM];
            float bf[WN];
            if (LV == 4u) {
                [[unroll]] for (uint g = 0u; g < WM / 4u; ++g) {
                    const vec4 v = as4[sa + g * TPM + ty];
                    af[g * 4u + 0u] = v.x;
                    af[g * 4u + 1u] = v.y;
                    af[g * 4u + 2u] = v.z;
                    af[g * 4u + 3u] = v.w;
                }
                [[unroll]] for (uint g = 0u; g < WN / 4u; ++g) {
                    const vec4 v = bs4[sb + g * TPN + tx];
                    bf[g * 4u + 0u] = v.x;
                    bf[g * 4u + 1u] = v.y;
                    bf[g * 4u + 2u] = v.z;
                    bf[g * 4u + 3u] = v.w;
                }
            } else {
                [[unroll]] for (uint i = 0u; i < WM; ++i) {
                    const uint r = i * TPM + ty;
                    af[i] = as4[sa + r / 4u][r % 4u];
                }
                [[unroll]] for (uint j = 0u; j < WN; ++j) {
                    const uint cc = j * TPN + tx;
                    bf[j] = bs4[sb + cc / 4u][cc % 4u];
                }
            }
            [[unroll]] for (uint i = 0u; i < WM; ++i)
                [[unroll]] for (uint j = 0u; j < WN; ++j)
                    acc[i * WN + j] = fma(af[i], bf[j], acc[i * WN + j]);
        }
    }

    [[unroll]] for (uint i = 0u; i < WM; ++i) {
        const uint r = row0 + (LV == 4u ? (i / 4u) * (TPM * 4u) + ty * 4u + i % 4u : i * TPM + ty);
        if (!EXACT && r >= m)
            continue;
        const uint cr = cbase + r * n + col0;
        if (LV == 4u && LW == 4u) {
            [[unroll]] for (uint g = 0u; g < WN / 4u; ++g) {
                const uint cc = g * (TPN * 4u) + tx * 4u;
                if (!EXACT && col0 + cc >= n)
                    continue;
                const uint o = i * WN + g * 4u;
                STORE_C4((cr + cc) / 4u, vec4(acc[o], acc[o + 1u], acc[o + 2u], acc[o + 3u]));
            }
        } else {
            [[unroll]] for (uint j = 0u; j < WN; ++j) {
                const uint cc = LV == 4u ? (j / 4u) * (TPN * 4u) + tx * 4u + j % 4u : j * TPN + tx;
                if (!EXACT && col0 + cc >= n)
                    continue;
                STORE_C(cr + cc, acc[i * WN + j]);
            }
        }
    }
}
