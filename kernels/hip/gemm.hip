/*
 * gemm.hip: C = A·B with row-major A (m×k), B (k×n) and C (m×n). Same semantics and arguments as
 * kernels/opencl/gemm.cl:
 *   (a, b, c, m, n, k, a_batch, b_batch, c_batch, c_first)
 * Work-group z multiplies matrix z of a batch: A starts at a + z·a_batch, B at b + z·b_batch and
 * C at c + (c_first + z)·c_batch (plain GEMM: one batch, all four 0); conv2d's im2col path uses
 * it to multiply the weights with several images' column matrices in one launch.
 *
 * Arithmetic is always float. The `_f16` kernels read and write IEEE half buffers (_Float16),
 * converting each element on load and rounding to nearest even on store, like vload_half /
 * vstore_half in the OpenCL kernels.
 *
 * Code objects are compiled ahead of time, so the parameters the OpenCL planner passes as -D are
 * template arguments here and each instantiation is its own extern "C" kernel:
 *   gemm_naive_{f32,f16}       one work-item per element of C, blocks of 16×16
 *   gemm_tiled_{f32,f16}       16×16 tiles of A and B in LDS, blocks of 16×16
 *   gemm_blocked_{f32,f16}_<TM>x<TN>x<TK>_<WM>x<WN>
 *                              register blocking: a block computes a TM×TN tile of C with
 *                              (TN/WN)×(TM/WM) work-items (x, y), each accumulating WM×WN outputs;
 *                              per TK step the block stages a TM×TK slice of A (transposed, so the
 *                              rows a work-item needs at one k are adjacent) and a TK×TN slice of
 *                              B in LDS. Work-item (tx, ty) owns rows ty + i·TPM and columns
 *                              tx + j·TPN, so the work-items of a wavefront read consecutive LDS
 *                              words of B and one broadcast word of A.
 * The instantiations (the agent's hip planner lists the same ones):
 *   128x128x8_8x8 (256 work-items), 64x64x16_4x4 (256), 32x32x16_4x4 (64).
 * Every load and store is bounds-checked, so any m, n, k work.
 */

#include "common.h"

template <typename T> GF_DEVICE float gemm_load(const T *p) { return (float)*p; }
template <typename T> GF_DEVICE void gemm_store(T *p, float v) { *p = (T)v; }

#define GEMM_ARGS(T)                                                                           \
    const T *GF_RESTRICT a, const T *GF_RESTRICT b, T *GF_RESTRICT c, int m, int n, int k,     \
        int a_batch, int b_batch, int c_batch, int c_first
#define GEMM_PASS a, b, c, m, n, k, a_batch, b_batch, c_batch, c_first

#define GEMM_SIDE 16

template <typename T> GF_DEVICE void gemm_naive(GEMM_ARGS(T))
{
    const int col = gf_group_x() * GEMM_SIDE + gf_lid_x();
    const int row = gf_group_y() * GEMM_SIDE + gf_lid_y();
    const long z = gf_group_z();
    if (row >= m || col >= n)
        return;
    const T *ar = a + z * a_batch + (long)row * k;
    const T *bc = b + z * b_batch + col;
    float acc = 0.0f;
    for (int p = 0; p < k; ++p)
        acc += gemm_load(ar + p) * gemm_load(bc + (long)p * n);
    gemm_store(c + (z + c_first) * c_batch + (long)row * n + col, acc);
}

template <typename T> GF_DEVICE void gemm_tiled(GEMM_ARGS(T))
{
    GF_SHARED float as[GEMM_SIDE][GEMM_SIDE + 1];
    GF_SHARED float bs[GEMM_SIDE][GEMM_SIDE + 1];
    const int lx = gf_lid_x();
    const int ly = gf_lid_y();
    const int col = gf_group_x() * GEMM_SIDE + lx;
    const int row = gf_group_y() * GEMM_SIDE + ly;
    const long z = gf_group_z();
    a += z * a_batch;
    b += z * b_batch;
    const T *ar = a + (long)row * k;
    float acc = 0.0f;
    for (int t = 0; t < k; t += GEMM_SIDE) {
        const int ka = t + lx;
        const int kb = t + ly;
        as[ly][lx] = (row < m && ka < k) ? gemm_load(ar + ka) : 0.0f;
        bs[ly][lx] = (kb < k && col < n) ? gemm_load(b + (long)kb * n + col) : 0.0f;
        gf_barrier();
#pragma unroll
        for (int p = 0; p < GEMM_SIDE; ++p)
            acc += as[ly][p] * bs[p][lx];
        gf_barrier();
    }
    if (row < m && col < n)
        gemm_store(c + (z + c_first) * c_batch + (long)row * n + col, acc);
}

template <typename T, int TM, int TN, int TK, int WM, int WN>
GF_DEVICE void gemm_blocked(GEMM_ARGS(T))
{
    constexpr int TPM = TM / WM;
    constexpr int TPN = TN / WN;
    constexpr int THREADS = TPM * TPN;
    static_assert(TM % WM == 0 && TN % WN == 0, "tile must be a multiple of the work per item");
    static_assert((TM * TK) % THREADS == 0 && (TK * TN) % THREADS == 0,
                  "slices must split evenly over the work-items");
    /* +1 on A's rows spreads the transposing stores over the LDS banks. */
    GF_SHARED float as[TK][TM + 1];
    GF_SHARED float bs[TK][TN];

    const int tx = gf_lid_x();
    const int ty = gf_lid_y();
    const int tid = ty * TPN + tx;
    const int row0 = gf_group_y() * TM;
    const int col0 = gf_group_x() * TN;
    const long z = gf_group_z();
    a += z * a_batch;
    b += z * b_batch;
    c += (z + c_first) * c_batch;

    float acc[WM][WN];
#pragma unroll
    for (int i = 0; i < WM; ++i)
#pragma unroll
        for (int j = 0; j < WN; ++j)
            acc[i][j] = 0.0f;

    for (int kt = 0; kt < k; kt += TK) {
        /* A slice: consecutive work-items take consecutive k of one row. */
#pragma unroll
        for (int l = 0; l < (TM * TK) / THREADS; ++l) {
            const int v = tid + l * THREADS;
            const int r = v / TK;
            const int kk = v % TK;
            const int gr = row0 + r;
            const int gk = kt + kk;
            as[kk][r] = (gr < m && gk < k) ? gemm_load(a + (long)gr * k + gk) : 0.0f;
        }
        /* B slice: consecutive work-items take consecutive columns of one row. */
#pragma unroll
        for (int l = 0; l < (TK * TN) / THREADS; ++l) {
            const int v = tid + l * THREADS;
            const int kr = v / TN;
            const int cn = v % TN;
            const int gk = kt + kr;
            const int gc = col0 + cn;
            bs[kr][cn] = (gk < k && gc < n) ? gemm_load(b + (long)gk * n + gc) : 0.0f;
        }
        gf_barrier();
#pragma unroll
        for (int kk = 0; kk < TK; ++kk) {
            float af[WM];
            float bf[WN];
#pragma unroll
            for (int i = 0; i < WM; ++i)
                af[i] = as[kk][ty + i * TPM];
#pragma unroll
            for (int j = 0; j < WN; ++j)
                bf[j] = bs[kk][tx + j * TPN];
#pragma unroll
            for (int i = 0; i < WM; ++i)
#pragma unroll
                for (int j = 0; j < WN; ++j)
                    acc[i][j] += af[i] * bf[j];
        }
        gf_barrier();
    }

#pragma unroll
    for (int i = 0; i < WM; ++i) {
        const int r = row0 + ty + i * TPM;
        if (r >= m)
            continue;
#pragma unroll
        for (int j = 0; j < WN; ++j) {
            const int cc = col0 + tx + j * TPN;
            if (cc < n)
                gemm_store(c + (long)r * n + cc, acc[i][j]);
        }
    }
}

GF_KERNEL(GEMM_SIDE *GEMM_SIDE) void gemm_naive_f32(GEMM_ARGS(float))
{
    gemm_naive<float>(GEMM_PASS);
}
GF_KERNEL(GEMM_SIDE *GEMM_SIDE) void gemm_naive_f16(GEMM_ARGS(gf_half))
{
    gemm_naive<gf_half>(GEMM_PASS);
}
GF_KERNEL(GEMM_SIDE *GEMM_SIDE) void gemm_tiled_f32(GEMM_ARGS(float))
{
    gemm_tiled<float>(GEMM_PASS);
}
GF_KERNEL(GEMM_SIDE *GEMM_SIDE) void gemm_tiled_f16(GEMM_ARGS(gf_half))
{
    gemm_tiled<gf_half>(GEMM_PASS);
}

/* One f32 and one f16 kernel per blocked configuration. */
#define GEMM_BLOCKED(TM, TN, TK, WM, WN)                                                       \
    GF_KERNEL((TM / WM) * (TN / WN))                                                           \
    void gemm_blocked_f32_##TM##x##TN##x##TK##_##WM##x##WN(GEMM_ARGS(float))                   \
    {                                                                                          \
        gemm_blocked<float, TM, TN, TK, WM, WN>(GEMM_PASS);                                    \
    }                                                                                          \
    GF_KERNEL((TM / WM) * (TN / WN))                                                           \
    void gemm_blocked_f16_##TM##x##TN##x##TK##_##WM##x##WN(GEMM_ARGS(gf_half))                 \
    {                                                                                          \
        gemm_blocked<gf_half, TM, TN, TK, WM, WN>(GEMM_PASS);                                  \
    }

GEMM_BLOCKED(128, 128, 8, 8, 8)
GEMM_BLOCKED(64, 64, 16, 4, 4)
GEMM_BLOCKED(32, 32, 16, 4, 4)
