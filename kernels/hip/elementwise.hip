/*
 * elementwise.hip: the bandwidth kernels (vec_add, copy, triad), the activations (relu, sigmoid,
 * tanh, gelu), noop and debug_wrong. Same semantics and arguments as kernels/opencl/elementwise.cl.
 *
 * Launched with blocks of 256 work-items over ceil(n / 4) work-items: each moves one float4
 * (hipMalloc returns buffers aligned far beyond 16 bytes, so the float4 accesses are aligned) and
 * the last one finishes a length that is not a multiple of 4 element by element. `n` is an `int`
 * (the catalog caps it at 2^30); element indices are `long`.
 *
 * Kernels (arguments):
 *   vec_add_f32(a, b, c, n)          c = a + b
 *   vec_add_wrong_f32(a, b, c, n)    c = a + b, plus 1 at element min(n, 8) - 1 (debug_wrong: a
 *                                    deliberate error the validation must catch)
 *   copy_f32(a, b, n)                b = a
 *   triad_f32(b, c, a, scalar, n)    a = b + scalar·c
 *   relu_f32(x, y, n)                y = max(x, 0)
 *   sigmoid_f32(x, y, n)             y = 1 / (1 + e^-x)
 *   tanh_f32(x, y, n)                y = sign(x)·(1 - e^-2|x|) / (1 + e^-2|x|)
 *   gelu_f32(x, y, n)                y = 0.5·x·(1 + tanh(u)), u = √(2/π)·(x + 0.044715·x³)
 *                                    (PyTorch's approximate="tanh"), as x / (1 + e^-2u)
 *   noop_f32(in, out)                out[0] = in[0], one work-item: launch latency
 */

#include "common.h"

#define FLAT 256

/* Applies f to each element of this work-item's float4 of x, or of the tail. */
#define UNARY_BODY(f)                                                                          \
    const long i = gf_global_x();                                                              \
    const long e = i * 4;                                                                      \
    if (e + 4 <= n) {                                                                          \
        const gf_float4 v = ((const gf_float4 *)x)[i];                                         \
        gf_float4 r;                                                                           \
        r.x = f(v.x);                                                                          \
        r.y = f(v.y);                                                                          \
        r.z = f(v.z);                                                                          \
        r.w = f(v.w);                                                                          \
        ((gf_float4 *)y)[i] = r;                                                               \
    } else {                                                                                   \
        for (long j = e; j < n; ++j)                                                           \
            y[j] = f(x[j]);                                                                    \
    }

GF_DEVICE float relu1(float v) { return gf_fmax(v, 0.0f); }
GF_DEVICE float sigmoid1(float v) { return 1.0f / (1.0f + gf_expf(-v)); }
GF_DEVICE float tanh1(float v)
{
    const float t = gf_expf(-2.0f * gf_fabs(v));
    const float m = (1.0f - t) / (1.0f + t);
    return v < 0.0f ? -m : (v > 0.0f ? m : v);
}
/* 0.5·(1 + tanh(u)) = 1 / (1 + e^-2u): no cancellation for negative x; e^-2u overflows to +inf
 * for very negative x, giving -0. The constants are 2·√(2/π) and 2·√(2/π)·0.044715. */
GF_DEVICE float gelu1(float v)
{
    return v / (1.0f + gf_expf(-v * (1.5957691216057308f + 0.0713548162726003f * v * v)));
}

template <bool WRONG>
GF_DEVICE void vec_add(const float *GF_RESTRICT a, const float *GF_RESTRICT b,
                       float *GF_RESTRICT c, int n)
{
    const long i = gf_global_x();
    const long e = i * 4;
    const long w = (n < 8 ? n : 8) - 1;
    if (e + 4 <= n) {
        gf_float4 v = ((const gf_float4 *)a)[i] + ((const gf_float4 *)b)[i];
        if (WRONG && w >= e && w < e + 4)
            v[w - e] += 1.0f;
        ((gf_float4 *)c)[i] = v;
    } else {
        for (long j = e; j < n; ++j) {
            float v = a[j] + b[j];
            if (WRONG && j == w)
                v += 1.0f;
            c[j] = v;
        }
    }
}

GF_KERNEL(FLAT) void vec_add_f32(const float *GF_RESTRICT a, const float *GF_RESTRICT b,
                                 float *GF_RESTRICT c, int n)
{
    vec_add<false>(a, b, c, n);
}

GF_KERNEL(FLAT) void vec_add_wrong_f32(const float *GF_RESTRICT a, const float *GF_RESTRICT b,
                                       float *GF_RESTRICT c, int n)
{
    vec_add<true>(a, b, c, n);
}

GF_KERNEL(FLAT) void copy_f32(const float *GF_RESTRICT a, float *GF_RESTRICT b, int n)
{
    const long i = gf_global_x();
    const long e = i * 4;
    if (e + 4 <= n) {
        ((gf_float4 *)b)[i] = ((const gf_float4 *)a)[i];
    } else {
        for (long j = e; j < n; ++j)
            b[j] = a[j];
    }
}

GF_KERNEL(FLAT) void triad_f32(const float *GF_RESTRICT b, const float *GF_RESTRICT c,
                               float *GF_RESTRICT a, float scalar, int n)
{
    const long i = gf_global_x();
    const long e = i * 4;
    if (e + 4 <= n) {
        ((gf_float4 *)a)[i] = ((const gf_float4 *)b)[i] + scalar * ((const gf_float4 *)c)[i];
    } else {
        for (long j = e; j < n; ++j)
            a[j] = b[j] + scalar * c[j];
    }
}

GF_KERNEL(FLAT) void relu_f32(const float *GF_RESTRICT x, float *GF_RESTRICT y, int n)
{
    UNARY_BODY(relu1)
}

GF_KERNEL(FLAT) void sigmoid_f32(const float *GF_RESTRICT x, float *GF_RESTRICT y, int n)
{
    UNARY_BODY(sigmoid1)
}

GF_KERNEL(FLAT) void tanh_f32(const float *GF_RESTRICT x, float *GF_RESTRICT y, int n)
{
    UNARY_BODY(tanh1)
}

GF_KERNEL(FLAT) void gelu_f32(const float *GF_RESTRICT x, float *GF_RESTRICT y, int n)
{
    UNARY_BODY(gelu1)
}

GF_KERNEL(1) void noop_f32(const float *GF_RESTRICT in, float *GF_RESTRICT out)
{
    if (gf_global_x() == 0)
        out[0] = in[0];
}
