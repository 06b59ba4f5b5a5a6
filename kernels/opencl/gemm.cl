/*
 * gemm.cl: C = A·B with row-major A (m×k), B (k×n) and C (m×n).
 *
 * Written for `-cl-std=CL1.1` so it builds on Clover, rusticl, ROCm, PoCL and NVIDIA alike: no
 * `inline`/`static`, no OpenCL 2.0 feature, half data only through vload_half/vstore_half (which
 * need no cl_khr_fp16). Arithmetic is always float; with -DGPUFLEET_HALF the buffers hold IEEE
 * half and every element is converted on load and rounded to nearest even on store.
 *
 * All three kernels take the same arguments:
 *   (a, b, c, m, n, k, a_batch, b_batch, c_batch, c_first)
 * Work-group z of dimension 2 multiplies matrix z of a batch: A starts at a + z·a_batch, B at
 * b + z·b_batch and C at c + (c_first + z)·c_batch (plain GEMM: one batch, all four 0). conv2d's
 * im2col path uses this to multiply the weights with several images' column matrices at once.
 * Sizes are `int` (portable across host and device); every element offset that can pass 2^31
 * (a 65536×65536 matrix) is computed in `long`.
 *
 * Build parameters (-D), set by the planner from the device's capabilities:
 *   GPUFLEET_HALF            buffers are half (f16 dtype)
 *   GPUFLEET_HAS_FP16        the device has cl_khr_fp16 (enabled, never required)
 *   GPUFLEET_TS              tile side of gemm_tiled (work-group TS×TS)
 *   GPUFLEET_TILE_M/N/K      gemm_blocked's work-group tile of C (M×N) and its k step
 *   GPUFLEET_WORK_M/N        outputs per work-item of gemm_blocked (WORK_M×WORK_N)
 *   GPUFLEET_VEC             width of gemm_blocked's global loads (1, 2, 4); with f32 data the
 *                            planner sets 4 or 2 only when k, n and the batch strides are multiples
 *                            of it, so the float4/float2 loads and stores are aligned (vload_half
 *                            needs no alignment); partial vectors at the edges go element-wise
 *   GPUFLEET_EXACT           m, n, k are multiples of the tiles: bounds checks compiled out
 */

#ifdef GPUFLEET_HAS_FP16
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#endif

#ifdef GPUFLEET_HALF
#define ELEM half
#define LOAD1(p) vload_half(0, (p))
#define STORE1(p, v) vstore_half((v), 0, (p))
#else
#define ELEM float
#define LOAD1(p) (*(p))
#define STORE1(p, v) (*(p) = (v))
#endif

/* ------------------------------------------------------------------------------------------ */
/* naive: one work-item per element of C, no local memory.                                     */

__kernel void gemm_naive(__global const ELEM *restrict a, __global const ELEM *restrict b,
                         __global ELEM *restrict c, int m, int n, int k, int a_batch,
                         int b_batch, int c_batch, int c_first)
{
    const int col = (int)get_global_id(0);
    const int row = (int)get_global_id(1);
    const long z = (long)get_global_id(2);
    if (row >= m || col >= n)
        return;
    __global const ELEM *ar = a + z * a_batch + (long)row * k;
    __global const ELEM *bc = b + z * b_batch + col;
    float acc = 0.0f;
    for (int p = 0; p < k; ++p)
        acc += LOAD1(ar + p) * LOAD1(bc + (long)p * n);
    STORE1(c + (z + c_first) * c_batch + (long)row * n + col, acc);
}

/* ------------------------------------------------------------------------------------------ */
/* tiled: TS×TS tiles of A and B in local memory, one element of C per work-item.              */

#ifndef GPUFLEET_TS
#define GPUFLEET_TS 16
#endif
#define TS GPUFLEET_TS

__kernel __attribute__((reqd_work_group_size(TS, TS, 1))) void
gemm_tiled(__global const ELEM *restrict a, __global const ELEM *restrict b,
           __global ELEM *restrict c, int m, int n, int k, int a_batch, int b_batch,
           int c_batch, int c_first)
{
    __local float as[TS][TS + 1];
    __local float bs[TS][TS + 1];
    const int lx = (int)get_local_id(0);
    const int ly = (int)get_local_id(1);
    const int col = (int)get_group_id(0) * TS + lx;
    const int row = (int)get_group_id(1) * TS + ly;
    const long z = (long)get_group_id(2);
    a += z * a_batch;
    b += z * b_batch;
    __global const ELEM *ar = a + (long)row * k;
    float acc = 0.0f;
    for (int t = 0; t < k; t += TS) {
        const int ka = t + lx;
        const int kb = t + ly;
        as[ly][lx] = (row < m && ka < k) ? LOAD1(ar + ka) : 0.0f;
        bs[ly][lx] = (kb < k && col < n) ? LOAD1(b + (long)kb * n + col) : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
        for (int p = 0; p < TS; ++p)
            acc += as[ly][p] * bs[p][lx];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (row < m && col < n)
        STORE1(c + (z + c_first) * c_batch + (long)row * n + col, acc);
}

/* ------------------------------------------------------------------------------------------ */
/* blocked: register blocking. A work-group computes a TM×TN tile of C with (TN/WN)×(TM/WM)
 * work-items, each accumulating WM×WN outputs in registers. Per TK step the group stages a
 * TM×TK slice of A (transposed to as[k][m], so at each k the rows a work-item needs are read
 * with float4 loads) and a TK×TN slice of B in local memory; the next slice is fetched into
 * registers while the current one is multiplied (double buffering, one barrier per step).
 * Measured on an H100 (NVIDIA OpenCL 3.0, 4096³ f32): 128×128×8 tiles with 16×8 per work-item
 * (128 work-items, 128 accumulators each) run at 44.8 TFLOP/s, 0.87 of cuBLAS SGEMM in the same
 * run; 8×8 per work-item gave 42.1 (0.83).
 *
 * The slices are fetched as VEC-wide vectors spread over all work-items (some idle in the last
 * round when a slice does not split evenly).
 *
 * A work-item's rows are not contiguous: when WM and WN are multiples of 4 it owns groups of 4
 * adjacent rows (columns) spaced TPM·4 (TPN·4) apart, so its local reads are float4 and the
 * work-items of a warp read consecutive float4s (no bank conflicts); otherwise single rows spaced
 * TPM apart. The A tile's rows are padded so the transposing stores spread over the banks.
 */

#ifndef GPUFLEET_TILE_M
#define GPUFLEET_TILE_M 64
#endif
#ifndef GPUFLEET_TILE_N
#define GPUFLEET_TILE_N 64
#endif
#ifndef GPUFLEET_TILE_K
#define GPUFLEET_TILE_K 8
#endif
#ifndef GPUFLEET_WORK_M
#define GPUFLEET_WORK_M 4
#endif
#ifndef GPUFLEET_WORK_N
#define GPUFLEET_WORK_N 4
#endif
#ifndef GPUFLEET_VEC
#define GPUFLEET_VEC 1
#endif

#define TM GPUFLEET_TILE_M
#define TN GPUFLEET_TILE_N
#define TK GPUFLEET_TILE_K
#define WM GPUFLEET_WORK_M
#define WN GPUFLEET_WORK_N
#define VEC GPUFLEET_VEC
#define TPM (TM / WM)
#define TPN (TN / WN)
#define THREADS (TPM * TPN)
/* Vectors of each slice, and how many of them one work-item fetches (the last round may leave
 * some work-items idle when the slice does not split evenly). */
#define A_VECS ((TM * TK) / VEC)
#define B_VECS ((TK * TN) / VEC)
#define A_LOADS ((A_VECS + THREADS - 1) / THREADS)
#define B_LOADS ((B_VECS + THREADS - 1) / THREADS)
#if A_VECS % THREADS
#define A_MINE(i) (tid + (i) * THREADS < A_VECS)
#else
#define A_MINE(i) 1
#endif
#if B_VECS % THREADS
#define B_MINE(i) (tid + (i) * THREADS < B_VECS)
#else
#define B_MINE(i) 1
#endif

#if (WM % 4 == 0) && (WN % 4 == 0)
#define LV 4
#define PAD_A 4
#else
#define LV 1
#define PAD_A 1
#endif
#define LDA (TM + PAD_A)

#if (TM % WM) || (TN % WN) || (TK % VEC) || (TN % VEC)
#error "gemm_blocked: inconsistent tile parameters"
#endif
#if VEC != 1 && VEC != 2 && VEC != 4
#error "gemm_blocked: GPUFLEET_VEC must be 1, 2 or 4"
#endif

/* Row (column) of the work-group tile held in a work-item's accumulator row i (column j). */
#define ROW_OF(i, ty) (((i) / LV) * (TPM * LV) + (ty) * LV + ((i) % LV))
#define COL_OF(j, tx) (((j) / LV) * (TPN * LV) + (tx) * LV + ((j) % LV))

/* Full-width load of VEC elements at p into the float array dst. */
#if VEC == 4
#ifdef GPUFLEET_HALF
#define VLOAD(p) vload_half4(0, (p))
#else
#define VLOAD(p) (*((__global const float4 *)(p)))
#endif
#define GLOAD(p, dst)                                                                          \
    do {                                                                                       \
        const float4 v_ = VLOAD(p);                                                            \
        (dst)[0] = v_.s0;                                                                      \
        (dst)[1] = v_.s1;                                                                      \
        (dst)[2] = v_.s2;                                                                      \
        (dst)[3] = v_.s3;                                                                      \
    } while (0)
#elif VEC == 2
#ifdef GPUFLEET_HALF
#define VLOAD(p) vload_half2(0, (p))
#else
#define VLOAD(p) (*((__global const float2 *)(p)))
#endif
#define GLOAD(p, dst)                                                                          \
    do {                                                                                       \
        const float2 v_ = VLOAD(p);                                                            \
        (dst)[0] = v_.s0;                                                                      \
        (dst)[1] = v_.s1;                                                                      \
    } while (0)
#else
#define GLOAD(p, dst) ((dst)[0] = LOAD1(p))
#endif

__kernel __attribute__((reqd_work_group_size(TPN, TPM, 1))) void
gemm_blocked(__global const ELEM *restrict a, __global const ELEM *restrict b,
             __global ELEM *restrict c, int m, int n, int k, int a_batch, int b_batch,
             int c_batch, int c_first)
{
    __local float as[2][TK][LDA] __attribute__((aligned(16)));
    __local float bs[2][TK][TN] __attribute__((aligned(16)));

    const int tx = (int)get_local_id(0);
    const int ty = (int)get_local_id(1);
    const int tid = ty * TPN + tx;
    const int row0 = (int)get_group_id(1) * TM;
    const int col0 = (int)get_group_id(0) * TN;
    const long z = (long)get_group_id(2);
    a += z * a_batch + (long)row0 * k;
    b += z * b_batch + col0;
    c += (z + c_first) * c_batch;

    /* Where this work-item's loads start; they advance by TK columns of A, TK rows of B. */
    __global const ELEM *pa[A_LOADS];
    __global const ELEM *pb[B_LOADS];
#ifndef GPUFLEET_EXACT
    int a_ok[A_LOADS], a_k[A_LOADS], b_k[B_LOADS], b_n[B_LOADS];
#endif
#pragma unroll
    for (int i = 0; i < A_LOADS; ++i) {
        const int v0 = tid + i * THREADS;
        const int r = v0 / (TK / VEC);
        const int kk = (v0 % (TK / VEC)) * VEC;
        pa[i] = a + (long)r * k + kk;
#ifndef GPUFLEET_EXACT
        a_ok[i] = A_MINE(i) && row0 + r < m;
        a_k[i] = kk;
#endif
    }
#pragma unroll
    for (int i = 0; i < B_LOADS; ++i) {
        const int v0 = tid + i * THREADS;
        const int kr = v0 / (TN / VEC);
        const int cn = (v0 % (TN / VEC)) * VEC;
        pb[i] = b + (long)kr * n + cn;
#ifndef GPUFLEET_EXACT
        b_k[i] = B_MINE(i) ? kr : k; /* k: never in range */
        b_n[i] = col0 + cn;
#endif
    }

    float acc[WM][WN];
#pragma unroll
    for (int i = 0; i < WM; ++i)
#pragma unroll
        for (int j = 0; j < WN; ++j)
            acc[i][j] = 0.0f;

    float ra[A_LOADS][VEC];
    float rb[B_LOADS][VEC];
    const int tiles = (k + TK - 1) / TK;

    /* Step s stores slice s (fetched during step s-1) into buffer s&1, waits, fetches slice s+1
     * into registers and multiplies slice s while that fetch travels. One barrier per step
     * suffices: buffer s&1 was last read in step s-2, which every work-item finished before it
     * passed the barrier of step s-1. Iteration t = 0 only fetches slice 0. */
    for (int t = 0; t <= tiles; ++t) {
        const int s = t - 1;
        const int cur = s & 1;
        if (t > 0) {
#pragma unroll
            for (int i = 0; i < A_LOADS; ++i) {
                const int v0 = tid + i * THREADS;
                const int r = v0 / (TK / VEC);
                const int kk = (v0 % (TK / VEC)) * VEC;
                if (A_MINE(i)) {
#pragma unroll
                    for (int v = 0; v < VEC; ++v)
                        as[cur][kk + v][r] = ra[i][v];
                }
            }
#pragma unroll
            for (int i = 0; i < B_LOADS; ++i) {
                const int v0 = tid + i * THREADS;
                const int kr = v0 / (TN / VEC);
                const int cn = (v0 % (TN / VEC)) * VEC;
                if (B_MINE(i)) {
#pragma unroll
                    for (int v = 0; v < VEC; ++v)
                        bs[cur][kr][cn + v] = rb[i][v];
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (t < tiles) {
            const int kt = t * TK;
#pragma unroll
            for (int i = 0; i < A_LOADS; ++i) {
#ifdef GPUFLEET_EXACT
                if (A_MINE(i))
                    GLOAD(pa[i] + kt, ra[i]);
#else
                const int kc = kt + a_k[i];
                if (a_ok[i] && kc + VEC <= k) {
                    GLOAD(pa[i] + kt, ra[i]);
                } else {
#pragma unroll
                    for (int v = 0; v < VEC; ++v)
                        ra[i][v] = (a_ok[i] && kc + v < k) ? LOAD1(pa[i] + kt + v) : 0.0f;
                }
#endif
            }
#pragma unroll
            for (int i = 0; i < B_LOADS; ++i) {
                __global const ELEM *p = pb[i] + (long)kt * n;
#ifdef GPUFLEET_EXACT
                if (B_MINE(i))
                    GLOAD(p, rb[i]);
#else
                const int kr = kt + b_k[i];
                if (kr < k && b_n[i] + VEC <= n) {
                    GLOAD(p, rb[i]);
                } else {
#pragma unroll
                    for (int v = 0; v < VEC; ++v)
                        rb[i][v] = (kr < k && b_n[i] + v < n) ? LOAD1(p + v) : 0.0f;
                }
#endif
            }
        }
        if (t == 0)
            continue;
#pragma unroll
        for (int kk = 0; kk < TK; ++kk) {
            float af[WM];
            float bf[WN];
#if LV == 4
#pragma unroll
            for (int g = 0; g < WM / 4; ++g) {
                const float4 v = *((__local const float4 *)&as[cur][kk][g * TPM * 4 + ty * 4]);
                af[g * 4 + 0] = v.s0;
                af[g * 4 + 1] = v.s1;
                af[g * 4 + 2] = v.s2;
                af[g * 4 + 3] = v.s3;
            }
#pragma unroll
            for (int g = 0; g < WN / 4; ++g) {
                const float4 v = *((__local const float4 *)&bs[cur][kk][g * TPN * 4 + tx * 4]);
                bf[g * 4 + 0] = v.s0;
                bf[g * 4 + 1] = v.s1;
                bf[g * 4 + 2] = v.s2;
                bf[g * 4 + 3] = v.s3;
            }
#else
#pragma unroll
            for (int i = 0; i < WM; ++i)
                af[i] = as[cur][kk][i * TPM + ty];
#pragma unroll
            for (int j = 0; j < WN; ++j)
                bf[j] = bs[cur][kk][j * TPN + tx];
#endif
#pragma unroll
            for (int i = 0; i < WM; ++i)
#pragma unroll
                for (int j = 0; j < WN; ++j)
                    acc[i][j] += af[i] * bf[j];
        }
    }

#pragma unroll
    for (int i = 0; i < WM; ++i) {
        const int r = row0 + ROW_OF(i, ty);
#ifndef GPUFLEET_EXACT
        if (r >= m)
            continue;
#endif
        __global ELEM *cr = c + (long)r * n + col0;
#if LV == 4 && VEC == 4
#pragma unroll
        for (int g = 0; g < WN / 4; ++g) {
            const int cc = COL_OF(g * 4, tx);
#ifndef GPUFLEET_EXACT
            if (col0 + cc + 4 > n) {
#pragma unroll
                for (int v = 0; v < 4; ++v)
                    if (col0 + cc + v < n)
                        STORE1(cr + cc + v, acc[i][g * 4 + v]);
                continue;
            }
#endif
            const float4 v = (float4)(acc[i][g * 4], acc[i][g * 4 + 1], acc[i][g * 4 + 2],
                                      acc[i][g * 4 + 3]);
#ifdef GPUFLEET_HALF
            vstore_half4(v, 0, cr + cc);
#else
            *((__global float4 *)(cr + cc)) = v;
#endif
        }
#else
#pragma unroll
        for (int j = 0; j < WN; ++j) {
            const int cc = COL_OF(j, tx);
#ifndef GPUFLEET_EXACT
            if (col0 + cc >= n)
                continue;
#endif
            STORE1(cr + cc, acc[i][j]);
        }
#endif
    }
}
