/*
 * peak.hip: compute_peak, chains of fused multiply-adds in one arithmetic type, and roofline, the same
 * chain on every element of a buffer. Same semantics and
 * arguments as kernels/opencl/peak.cl (kernels/src/catalog/ceilings.rs has the chain and its
 * closed form): work-item i runs 8 chains from (i mod 8) + j, each pair x = a·x + b; x = a·x + c
 * with a, b, c = k[0..2] (-1, 1, 2) adds 1 exactly, and it writes the sum of its chains as a
 * float. Blocks of 256 over `items` work-items; the pair loop is written out 8 times per trip.
 *
 * Kernels (arguments k, out, items, pairs):
 *   compute_peak_fp32    float chains, fma
 *   compute_peak_fp16    four packed half pairs (v_pk_fma_f16 where the GPU has it)
 *   compute_peak_fp64    double chains, fma
 *   compute_peak_int32   int chains, x * a + b
 *   compute_peak_int8    int chains, dot of four packed bytes + b (v_dot4_i32_i8 where the GPU has
 *                        it: gfx906, gfx908, gfx90a, gfx94x, gfx1011/1012, gfx103x; v_dot4_i32_iu8
 *                        on gfx11/gfx12; the planner refuses the others); a = k[0] & 0xFF packs the
 *                        bytes (-1, 0, 0, 0), and the work-item sums its chains' low bytes
 *   roofline(x, k, y, n, pairs)  y = x after `pairs` pairs on each element (one float4 a
 *                        work-item, blocks of 256 over n / 4)
 */

#include "common.h"

typedef _Float16 gf_half2 __attribute__((ext_vector_type(2)));

GF_DEVICE float peak_mad(float x, float m, float add) { return __builtin_fmaf(x, m, add); }
GF_DEVICE double peak_mad(double x, double m, double add) { return __builtin_fma(x, m, add); }
GF_DEVICE int peak_mad(int x, int m, int add) { return x * m + add; }
GF_DEVICE gf_float4 peak_mad(gf_float4 x, gf_float4 m, gf_float4 add)
{
    return __builtin_elementwise_fma(x, m, add);
}
GF_DEVICE gf_half2 peak_mad(gf_half2 x, gf_half2 m, gf_half2 add)
{
    return __builtin_elementwise_fma(x, m, add);
}

/* A chain of compute_peak_int8: an int whose four bytes are one operand of the dot product. */
struct gf_dot8 {
    int v;
};

/* The dot product of the four signed bytes of a and b, plus c. */
GF_DEVICE int gf_sdot4(int a, int b, int c)
{
#if defined(__gfx906__) || defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx940__) ||      \
    defined(__gfx941__) || defined(__gfx942__) || defined(__gfx1011__) || defined(__gfx1012__) ||     \
    defined(__gfx1030__) || defined(__gfx1031__) || defined(__gfx1032__) || defined(__gfx1033__) ||   \
    defined(__gfx1034__) || defined(__gfx1035__) || defined(__gfx1036__)
    return __builtin_amdgcn_sdot4(a, b, c, false);
#elif defined(__GFX11__) || defined(__GFX12__)
    return __builtin_amdgcn_sudot4(true, a, true, b, c, false);
#else
    /* The host check, and GPUs without a dot instruction (never launched there). */
    int sum = c;
    for (int s = 0; s < 32; s += 8)
        sum += (int)(signed char)(a >> s) * (int)(signed char)(b >> s);
    return sum;
#endif
}

GF_DEVICE gf_dot8 peak_mad(gf_dot8 x, gf_dot8 m, gf_dot8 add) { return {gf_sdot4(x.v, m.v, add.v)}; }

/* `pairs` pairs on the N chains x[] (8 per trip, then one by one). */
template <typename T, int N>
GF_DEVICE void peak_chains(T (&x)[N], T a, T b, T c, int pairs)
{
    int p = 0;
    for (; p + 8 <= pairs; p += 8) {
#pragma unroll
        for (int u = 0; u < 8; ++u) {
#pragma unroll
            for (int j = 0; j < N; ++j)
                x[j] = peak_mad(x[j], a, b);
#pragma unroll
            for (int j = 0; j < N; ++j)
                x[j] = peak_mad(x[j], a, c);
        }
    }
    for (; p < pairs; ++p) {
#pragma unroll
        for (int j = 0; j < N; ++j) {
            x[j] = peak_mad(x[j], a, b);
            x[j] = peak_mad(x[j], a, c);
        }
    }
}

template <typename T>
GF_DEVICE void peak_scalar(const float *GF_RESTRICT k, float *GF_RESTRICT out, int items, int pairs)
{
    const long i = gf_global_x();
    if (i >= items)
        return;
    const T a = (T)k[0], b = (T)k[1], c = (T)k[2];
    T x[8];
#pragma unroll
    for (int j = 0; j < 8; ++j)
        x[j] = (T)((int)(i & 7) + j);
    peak_chains(x, a, b, c, pairs);
    out[i] = (((float)x[0] + (float)x[1]) + ((float)x[2] + (float)x[3])) +
             (((float)x[4] + (float)x[5]) + ((float)x[6] + (float)x[7]));
}

GF_KERNEL(256) void compute_peak_fp32(const float *k, float *out, int items, int pairs)
{
    peak_scalar<float>(k, out, items, pairs);
}

GF_KERNEL(256) void compute_peak_fp64(const float *k, float *out, int items, int pairs)
{
    peak_scalar<double>(k, out, items, pairs);
}

GF_KERNEL(256) void compute_peak_int32(const float *k, float *out, int items, int pairs)
{
    peak_scalar<int>(k, out, items, pairs);
}

GF_KERNEL(256) void compute_peak_int8(const float *k, float *out, int items, int pairs)
{
    const long i = gf_global_x();
    if (i >= items)
        return;
    const gf_dot8 a = {(int)k[0] & 255}, b = {(int)k[1]}, c = {(int)k[2]};
    gf_dot8 x[8];
#pragma unroll
    for (int j = 0; j < 8; ++j)
        x[j].v = (int)(i & 7) + j;
    peak_chains(x, a, b, c, pairs);
    int sum = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j)
        sum += x[j].v & 255;
    out[i] = (float)sum;
}

/* Lane 0 of x[j] is chain j, lane 1 chain j + 4. */
GF_KERNEL(256) void compute_peak_fp16(const float *k, float *out, int items, int pairs)
{
    const long i = gf_global_x();
    if (i >= items)
        return;
    const gf_half2 a = (gf_half2)((_Float16)k[0]), b = (gf_half2)((_Float16)k[1]);
    const gf_half2 c = (gf_half2)((_Float16)k[2]);
    gf_half2 x[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        x[j].x = (_Float16)((int)(i & 7) + j);
        x[j].y = (_Float16)((int)(i & 7) + j + 4);
    }
    peak_chains(x, a, b, c, pairs);
    const float lo = ((float)x[0].x + (float)x[1].x) + ((float)x[2].x + (float)x[3].x);
    const float hi = ((float)x[0].y + (float)x[1].y) + ((float)x[2].y + (float)x[3].y);
    out[i] = lo + hi;
}

/* roofline: y = x after `pairs` pairs of the chain on each element (y = x + pairs exactly), one
 * float4 per work-item over n / 4 work-items in blocks of 256 (the last one finishes a ragged tail
 * element by element); 4 pairs per loop trip. */
GF_KERNEL(256) void roofline(const float *GF_RESTRICT x, const float *GF_RESTRICT k,
                             float *GF_RESTRICT y, int n, int pairs)
{
    const long i = gf_global_x();
    const long e = i * 4;
    const float a = k[0], b = k[1], c = k[2];
    if (e + 4 <= n) {
        gf_float4 v[1] = {((const gf_float4 *)x)[i]};
        const gf_float4 a4 = a, b4 = b, c4 = c;
        peak_chains(v, a4, b4, c4, pairs);
        ((gf_float4 *)y)[i] = v[0];
    } else {
        for (long j = e; j < n; ++j) {
            float v[1] = {x[j]};
            peak_chains(v, a, b, c, pairs);
            y[j] = v[0];
        }
    }
}
