/*
 * peak.cl: compute_peak, chains of fused multiply-adds in one arithmetic type, and roofline, the
 * same chain on every element of a buffer (see
 * kernels/src/catalog/ceilings.rs for the chain and its closed form).
 *
 * Work-item i runs 8 independent chains starting at x = (i mod 8) + j; each of `pairs` pairs is
 * x = a·x + b; x = a·x + c with a, b, c read from k[0..3] (-1, 1, 2), so it adds 1 exactly. The
 * work-item writes the sum of its chains as a float. The pair loop is written out 8 times so
 * the loop's own instructions take few issue slots beside the multiply-adds (8 pairs a trip).
 *
 * Kernels (arguments k, out, items, pairs):
 *   compute_peak_fp32    float chains, fma()
 *   compute_peak_fp16    4 half2 chains, fma() on half2 (needs cl_khr_fp16: -DGPUFLEET_HAS_FP16)
 *   compute_peak_fp64    double chains, fma() (needs cl_khr_fp64: -DGPUFLEET_HAS_FP64)
 *   compute_peak_int32   int chains, x * a + b (mad)
 *   compute_peak_int8    int chains, dot of four packed bytes + b (needs cl_khr_integer_dot_product
 *                        with the packed input: -DGPUFLEET_HAS_INT8_DOT); a = k[0] & 0xFF packs the
 *                        bytes (-1, 0, 0, 0), and the work-item sums its chains' low bytes
 *   roofline             (x, k, y, n, pairs): y = x after `pairs` pairs on each element
 *
 * -D parameters: GPUFLEET_WG (the local size).
 */

#ifdef GPUFLEET_HAS_FP16
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#endif
#ifdef GPUFLEET_HAS_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#ifdef GPUFLEET_HAS_INT8_DOT
#pragma OPENCL EXTENSION cl_khr_integer_dot_product : enable
#endif

/* One pair on chains x0..x7 (or the four packed ones) with op(x, m, add). */
#define PEAK_PAIR8(OP, x, a, b, c)                                                            \
    x##0 = OP(x##0, a, b); x##1 = OP(x##1, a, b); x##2 = OP(x##2, a, b); x##3 = OP(x##3, a, b); \
    x##4 = OP(x##4, a, b); x##5 = OP(x##5, a, b); x##6 = OP(x##6, a, b); x##7 = OP(x##7, a, b); \
    x##0 = OP(x##0, a, c); x##1 = OP(x##1, a, c); x##2 = OP(x##2, a, c); x##3 = OP(x##3, a, c); \
    x##4 = OP(x##4, a, c); x##5 = OP(x##5, a, c); x##6 = OP(x##6, a, c); x##7 = OP(x##7, a, c)

#define PEAK_PAIR4(OP, x, a, b, c)                                                            \
    x##0 = OP(x##0, a, b); x##1 = OP(x##1, a, b); x##2 = OP(x##2, a, b); x##3 = OP(x##3, a, b); \
    x##0 = OP(x##0, a, c); x##1 = OP(x##1, a, c); x##2 = OP(x##2, a, c); x##3 = OP(x##3, a, c)

/* The pair loop: 8 pairs per trip (written out, so no compiler's unrolling is relied on), then
 * the rest one by one. */
#define PEAK_LOOP(PAIR)                                                                       \
    int p = 0;                                                                                \
    for (; p + 8 <= pairs; p += 8) {                                                          \
        PAIR; PAIR; PAIR; PAIR; PAIR; PAIR; PAIR; PAIR;                                       \
    }                                                                                         \
    for (; p < pairs; ++p) { PAIR; }

#define PEAK_FMA(x, m, add) fma(x, m, add)
#define PEAK_MAD(x, m, add) ((x) * (m) + (add))

/* The chains of one scalar type T with op OP, converted to float and summed into out[i]. */
#define PEAK_SCALAR(T, OP)                                                                    \
    const int i = get_global_id(0);                                                           \
    if (i >= items)                                                                           \
        return;                                                                               \
    const T a = (T)k[0], b = (T)k[1], c = (T)k[2];                                            \
    const T base = (T)(i & 7);                                                                \
    T x0 = base, x1 = base + (T)1, x2 = base + (T)2, x3 = base + (T)3;                        \
    T x4 = base + (T)4, x5 = base + (T)5, x6 = base + (T)6, x7 = base + (T)7;                 \
    PEAK_LOOP(PEAK_PAIR8(OP, x, a, b, c))                                                     \
    out[i] = (((float)x0 + (float)x1) + ((float)x2 + (float)x3)) +                            \
             (((float)x4 + (float)x5) + ((float)x6 + (float)x7));

__kernel __attribute__((reqd_work_group_size(GPUFLEET_WG, 1, 1))) void
compute_peak_fp32(__global const float *k, __global float *out, int items, int pairs)
{
    PEAK_SCALAR(float, PEAK_FMA)
}

__kernel __attribute__((reqd_work_group_size(GPUFLEET_WG, 1, 1))) void
compute_peak_int32(__global const float *k, __global float *out, int items, int pairs)
{
    PEAK_SCALAR(int, PEAK_MAD)
}

#ifdef GPUFLEET_HAS_FP64
__kernel __attribute__((reqd_work_group_size(GPUFLEET_WG, 1, 1))) void
compute_peak_fp64(__global const float *k, __global float *out, int items, int pairs)
{
    PEAK_SCALAR(double, PEAK_FMA)
}
#endif

#ifdef GPUFLEET_HAS_INT8_DOT
#define PEAK_DOT(x, m, add) (dot_4x8packed_ss_int(as_uint(x), m) + (add))

__kernel __attribute__((reqd_work_group_size(GPUFLEET_WG, 1, 1))) void
compute_peak_int8(__global const float *k, __global float *out, int items, int pairs)
{
    const int i = get_global_id(0);
    if (i >= items)
        return;
    const uint a = (uint)((int)k[0]) & 0xFFu;
    const int b = (int)k[1], c = (int)k[2];
    const int base = i & 7;
    int x0 = base, x1 = base + 1, x2 = base + 2, x3 = base + 3;
    int x4 = base + 4, x5 = base + 5, x6 = base + 6, x7 = base + 7;
    PEAK_LOOP(PEAK_PAIR8(PEAK_DOT, x, a, b, c))
    out[i] = (float)(((x0 & 255) + (x1 & 255)) + ((x2 & 255) + (x3 & 255)) +
                     ((x4 & 255) + (x5 & 255)) + ((x6 & 255) + (x7 & 255)));
}
#endif

#ifdef GPUFLEET_HAS_FP16
/* Chains j and j + 4 share the half2 x(j): lane 0 holds chain j, lane 1 chain j + 4. */
__kernel __attribute__((reqd_work_group_size(GPUFLEET_WG, 1, 1))) void
compute_peak_fp16(__global const float *k, __global float *out, int items, int pairs)
{
    const int i = get_global_id(0);
    if (i >= items)
        return;
    const half2 a = (half2)((half)k[0]), b = (half2)((half)k[1]), c = (half2)((half)k[2]);
    const half base = (half)(i & 7);
    half2 x0 = (half2)(base, base + (half)4), x1 = (half2)(base + (half)1, base + (half)5);
    half2 x2 = (half2)(base + (half)2, base + (half)6), x3 = (half2)(base + (half)3, base + (half)7);
    PEAK_LOOP(PEAK_PAIR4(PEAK_FMA, x, a, b, c))
    const float lo = ((float)x0.s0 + (float)x1.s0) + ((float)x2.s0 + (float)x3.s0);
    const float hi = ((float)x0.s1 + (float)x1.s1) + ((float)x2.s1 + (float)x3.s1);
    out[i] = lo + hi;
}
#endif

/* roofline: y = x after `pairs` pairs of the chain on each element (y = x + pairs exactly), one
 * float4 per work-item over n / 4 work-items (the last one finishes a ragged tail element by
 * element); 4 pairs per loop trip. Arguments x, k, y, n, pairs. */
#define ROOF_PAIR(v, a, b, c) v = fma(v, a, b); v = fma(v, a, c)

__kernel __attribute__((reqd_work_group_size(GPUFLEET_WG, 1, 1))) void
roofline(__global const float *x, __global const float *k, __global float *y, int n, int pairs)
{
    const long i = get_global_id(0);
    const long e = i * 4;
    const float a = k[0], b = k[1], c = k[2];
    if (e + 4 <= n) {
        float4 v = vload4(i, x);
        const float4 a4 = (float4)(a), b4 = (float4)(b), c4 = (float4)(c);
        int p = 0;
        for (; p + 4 <= pairs; p += 4) {
            ROOF_PAIR(v, a4, b4, c4); ROOF_PAIR(v, a4, b4, c4);
            ROOF_PAIR(v, a4, b4, c4); ROOF_PAIR(v, a4, b4, c4);
        }
        for (; p < pairs; ++p) {
            ROOF_PAIR(v, a4, b4, c4);
        }
        vstore4(v, i, y);
    } else {
        for (long j = e; j < n; ++j) {
            float v = x[j];
            for (int p = 0; p < pairs; ++p) {
                ROOF_PAIR(v, a, b, c);
            }
            y[j] = v;
        }
    }
}
