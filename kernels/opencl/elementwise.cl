/*
 * elementwise.cl: the bandwidth kernels (vec_add, copy, triad), the activations (relu, sigmoid,
 * tanh, gelu), noop and debug_wrong.
 *
 * Written for `-cl-std=CL1.1` (no `inline`/`static`, nothing from OpenCL 2.0). Each work-item
 * handles one float4: whole buffers from clCreateBuffer are aligned far beyond 16 bytes, so the
 * float4 accesses are aligned, and the last work-item finishes a length that is not a multiple of
 * 4 element by element. One vector per work-item keeps every load in flight at once, which is what
 * reaches full memory bandwidth; `n` is an `int` (the catalog caps it at 2^30) and element indices
 * are computed in `long`.
 *
 * The transcendental functions use the full-precision exp and tanh (never native_*), which the
 * validation's 1e-5 tolerance needs.
 *
 * Build parameters (-D):
 *   GPUFLEET_WRONG   vec_add_f32 adds 1 to element min(n, 8) - 1, for debug_wrong: a deliberate
 *                    error the validation must catch
 *   GPUFLEET_HAS_FP16 the device has cl_khr_fp16 (unused here; accepted for uniform options)
 */

#define VEC_INDEX() ((long)get_global_id(0))

/* c = a + b */
__kernel void vec_add_f32(__global const float *restrict a, __global const float *restrict b,
                          __global float *restrict c, int n)
{
    const long i = VEC_INDEX();
    const long e = i * 4;
    if (e + 4 <= n) {
        float4 v = ((__global const float4 *)a)[i] + ((__global const float4 *)b)[i];
#ifdef GPUFLEET_WRONG
        /* Element min(n, 8) - 1 lies in one of the first two vectors. */
        const long w = (n < 8 ? n : 8) - 1;
        if (w >= e && w < e + 4) {
            float t[4];
            vstore4(v, 0, t);
            t[w - e] += 1.0f;
            v = vload4(0, t);
        }
#endif
        ((__global float4 *)c)[i] = v;
    } else {
        for (long j = e; j < n; ++j) {
            float v = a[j] + b[j];
#ifdef GPUFLEET_WRONG
            if (j == (n < 8 ? n : 8) - 1)
                v += 1.0f;
#endif
            c[j] = v;
        }
    }
}

/* b = a */
__kernel void copy_f32(__global const float *restrict a, __global float *restrict b, int n)
{
    const long i = VEC_INDEX();
    const long e = i * 4;
    if (e + 4 <= n) {
        ((__global float4 *)b)[i] = ((__global const float4 *)a)[i];
    } else {
        for (long j = e; j < n; ++j)
            b[j] = a[j];
    }
}

/* a = b + scalar·c (STREAM triad; the catalog's scalar is 3) */
__kernel void triad_f32(__global const float *restrict b, __global const float *restrict c,
                        __global float *restrict a, float scalar, int n)
{
    const long i = VEC_INDEX();
    const long e = i * 4;
    if (e + 4 <= n) {
        ((__global float4 *)a)[i] =
            ((__global const float4 *)b)[i] + scalar * ((__global const float4 *)c)[i];
    } else {
        for (long j = e; j < n; ++j)
            a[j] = b[j] + scalar * c[j];
    }
}

/* y = max(x, 0) */
__kernel void relu_f32(__global const float *restrict x, __global float *restrict y, int n)
{
    const long i = VEC_INDEX();
    const long e = i * 4;
    if (e + 4 <= n) {
        ((__global float4 *)y)[i] = fmax(((__global const float4 *)x)[i], (float4)(0.0f));
    } else {
        for (long j = e; j < n; ++j)
            y[j] = fmax(x[j], 0.0f);
    }
}

/* y = 1 / (1 + e^-x) */
__kernel void sigmoid_f32(__global const float *restrict x, __global float *restrict y, int n)
{
    const long i = VEC_INDEX();
    const long e = i * 4;
    if (e + 4 <= n) {
        const float4 v = ((__global const float4 *)x)[i];
        ((__global float4 *)y)[i] = (float4)(1.0f) / ((float4)(1.0f) + exp(-v));
    } else {
        for (long j = e; j < n; ++j)
            y[j] = 1.0f / (1.0f + exp(-x[j]));
    }
}

/* y = tanh(x) */
__kernel void tanh_f32(__global const float *restrict x, __global float *restrict y, int n)
{
    const long i = VEC_INDEX();
    const long e = i * 4;
    if (e + 4 <= n) {
        ((__global float4 *)y)[i] = tanh(((__global const float4 *)x)[i]);
    } else {
        for (long j = e; j < n; ++j)
            y[j] = tanh(x[j]);
    }
}

/*
 * y = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), PyTorch's approximate="tanh", written as
 * x / (1 + e^-2u) with u the tanh's argument: the same value, without the cancellation of
 * 1 + tanh(u) for negative x. e^-2u overflows to +inf for very negative x, giving -0.
 */
__kernel void gelu_f32(__global const float *restrict x, __global float *restrict y, int n)
{
    const long i = VEC_INDEX();
    const long e = i * 4;
    /* 2·√(2/π) and 2·√(2/π)·0.044715 */
    const float k = 1.5957691216057308f, c = 0.0713548162726003f;
    if (e + 4 <= n) {
        const float4 v = ((__global const float4 *)x)[i];
        ((__global float4 *)y)[i] = v / ((float4)(1.0f) + exp(-v * (k + c * v * v)));
    } else {
        for (long j = e; j < n; ++j) {
            const float v = x[j];
            y[j] = v / (1.0f + exp(-v * (k + c * v * v)));
        }
    }
}

/* out[0] = in[0]: one work-item, measures launch latency. */
__kernel void noop_f32(__global const float *restrict in, __global float *restrict out)
{
    if (get_global_id(0) == 0)
        out[0] = in[0];
}
