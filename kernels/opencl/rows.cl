/*
 * rows.cl: row-wise softmax, layernorm, rmsnorm and layernorm followed by rmsnorm.
 *
 * Written for `-cl-std=CL1.1`: no work_group_reduce, no `inline`/`static`. One work-group of WG
 * work-items handles one row at a time (groups stride over the rows, so the number of groups
 * stays bounded whatever `rows` is); reductions are tree reductions in local memory, all in float.
 * Work-item l handles columns l, l + WG, l + 2·WG, ..., so a warp's loads are contiguous and any
 * `cols`, 1 included, works. Row offsets are computed in `long`.
 *
 * Accuracy follows the catalog's f64 reference: softmax subtracts the row maximum before exp;
 * layernorm's variance is the biased one, computed in a second pass over x - mean (no
 * E[x²] - E[x]² cancellation); full-precision exp and rsqrt, never native_*.
 *
 * Build parameters (-D):
 *   GPUFLEET_WG      work-group size, a power of two (the launch's local size)
 *   GPUFLEET_CHUNKS  when > 0, cols ≤ WG·CHUNKS and each work-item keeps its CHUNKS elements of
 *                    the row in registers, so x is read from memory once; 0 re-reads the row
 *                    (from cache) in every pass
 */

#ifndef GPUFLEET_WG
#define GPUFLEET_WG 256
#endif
#ifndef GPUFLEET_CHUNKS
#define GPUFLEET_CHUNKS 0
#endif
#define WG GPUFLEET_WG
#define CHUNKS GPUFLEET_CHUNKS

#if (WG & (WG - 1)) != 0
#error "rows.cl: GPUFLEET_WG must be a power of two"
#endif

/* Sum of v over the work-group; every work-item gets the result. red holds WG floats. */
float gpufleet_group_sum(__local float *red, float v)
{
    const int lid = (int)get_local_id(0);
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (lid < s)
            red[lid] += red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float r = red[0];
    /* Nobody may overwrite red[0] before everyone has read it. */
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

/* Maximum of v over the work-group; every work-item gets the result. */
float gpufleet_group_max(__local float *red, float v)
{
    const int lid = (int)get_local_id(0);
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (lid < s)
            red[lid] = fmax(red[lid], red[lid + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float r = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

/*
 * The loops below visit this work-item's columns: `for (j = 0; j < NCH; ++j)` with column
 * c = lid + j·WG when c < cols. XV(j, c) is the element: from registers when the row is cached,
 * else from memory.
 */
#if CHUNKS > 0
#define ROW_SETUP(xr)                                                                          \
    float xv[CHUNKS];                                                                          \
    for (int j = 0; j < CHUNKS; ++j) {                                                         \
        const int c_ = lid + j * WG;                                                           \
        xv[j] = c_ < cols ? (xr)[c_] : 0.0f;                                                   \
    }
#define NCH CHUNKS
#define XV(j, c) xv[j]
#else
#define ROW_SETUP(xr)
#define NCH nch
#define XV(j, c) xr[c]
#endif

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
softmax_rows(__global const float *restrict x, __global float *restrict y, int rows, int cols)
{
    __local float red[WG];
    const int lid = (int)get_local_id(0);
    const int nch = (cols + WG - 1) / WG;
    for (int row = (int)get_group_id(0); row < rows; row += (int)get_num_groups(0)) {
        __global const float *xr = x + (long)row * cols;
        __global float *yr = y + (long)row * cols;
        ROW_SETUP(xr)
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < NCH; ++j) {
            const int c = lid + j * WG;
            if (c < cols)
                mx = fmax(mx, XV(j, c));
        }
        mx = gpufleet_group_max(red, mx);
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < NCH; ++j) {
            const int c = lid + j * WG;
            if (c < cols) {
                const float e = exp(XV(j, c) - mx);
#if CHUNKS > 0
                xv[j] = e;
#endif
                sum += e;
            }
        }
        sum = gpufleet_group_sum(red, sum);
#pragma unroll
        for (int j = 0; j < NCH; ++j) {
            const int c = lid + j * WG;
            if (c < cols) {
#if CHUNKS > 0
                yr[c] = xv[j] / sum;
#else
                yr[c] = exp(xr[c] - mx) / sum;
#endif
            }
        }
    }
}

/* Mean and 1/sqrt(biased variance + eps) of the row, two passes. Expects lid, nch, cols, red,
 * xr (and xv when cached) in scope; defines mean and rstd. */
#define ROW_MEAN_RSTD(eps)                                                                     \
    float mean = 0.0f;                                                                         \
    for (int j = 0; j < NCH; ++j) {                                                            \
        const int c = lid + j * WG;                                                            \
        if (c < cols)                                                                          \
            mean += XV(j, c);                                                                  \
    }                                                                                          \
    mean = gpufleet_group_sum(red, mean) / (float)cols;                                        \
    float var = 0.0f;                                                                          \
    for (int j = 0; j < NCH; ++j) {                                                            \
        const int c = lid + j * WG;                                                            \
        if (c < cols) {                                                                        \
            const float d = XV(j, c) - mean;                                                   \
            var += d * d;                                                                      \
        }                                                                                      \
    }                                                                                          \
    var = gpufleet_group_sum(red, var) / (float)cols;                                          \
    const float rstd = rsqrt(var + (eps));

/* y = (x - mean) / sqrt(var + eps) · gamma + beta */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
layernorm_rows(__global const float *restrict x, __global const float *restrict gamma,
               __global const float *restrict beta, __global float *restrict y, int rows,
               int cols, float eps)
{
    __local float red[WG];
    const int lid = (int)get_local_id(0);
    const int nch = (cols + WG - 1) / WG;
    for (int row = (int)get_group_id(0); row < rows; row += (int)get_num_groups(0)) {
        __global const float *xr = x + (long)row * cols;
        __global float *yr = y + (long)row * cols;
        ROW_SETUP(xr)
        ROW_MEAN_RSTD(eps)
#pragma unroll
        for (int j = 0; j < NCH; ++j) {
            const int c = lid + j * WG;
            if (c < cols)
                yr[c] = (XV(j, c) - mean) * rstd * gamma[c] + beta[c];
        }
    }
}

/* y = x / sqrt(mean(x²) + eps) · gamma */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
rmsnorm_rows(__global const float *restrict x, __global const float *restrict gamma,
             __global float *restrict y, int rows, int cols, float eps)
{
    __local float red[WG];
    const int lid = (int)get_local_id(0);
    const int nch = (cols + WG - 1) / WG;
    for (int row = (int)get_group_id(0); row < rows; row += (int)get_num_groups(0)) {
        __global const float *xr = x + (long)row * cols;
        __global float *yr = y + (long)row * cols;
        ROW_SETUP(xr)
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < NCH; ++j) {
            const int c = lid + j * WG;
            if (c < cols) {
                const float v = XV(j, c);
                ss += v * v;
            }
        }
        const float rstd = rsqrt(gpufleet_group_sum(red, ss) / (float)cols + eps);
#pragma unroll
        for (int j = 0; j < NCH; ++j) {
            const int c = lid + j * WG;
            if (c < cols)
                yr[c] = XV(j, c) * rstd * gamma[c];
        }
    }
}

/* z = layernorm(x)·gamma1 + beta1; y = z / sqrt(mean(z²) + eps) · gamma2 */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
layernorm_rmsnorm_rows(__global const float *restrict x, __global const float *restrict gamma1,
                       __global const float *restrict beta1,
                       __global const float *restrict gamma2, __global float *restrict y,
                       int rows, int cols, float eps)
{
    __local float red[WG];
    const int lid = (int)get_local_id(0);
    const int nch = (cols + WG - 1) / WG;
    for (int row = (int)get_group_id(0); row < rows; row += (int)get_num_groups(0)) {
        __global const float *xr = x + (long)row * cols;
        __global float *yr = y + (long)row * cols;
        ROW_SETUP(xr)
        ROW_MEAN_RSTD(eps)
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < NCH; ++j) {
            const int c = lid + j * WG;
            if (c < cols) {
                const float zv = (XV(j, c) - mean) * rstd * gamma1[c] + beta1[c];
#if CHUNKS > 0
                xv[j] = zv;
#endif
                ss += zv * zv;
            }
        }
        const float rstd2 = rsqrt(gpufleet_group_sum(red, ss) / (float)cols + eps);
#pragma unroll
        for (int j = 0; j < NCH; ++j) {
            const int c = lid + j * WG;
            if (c < cols) {
#if CHUNKS > 0
                const float zv = xv[j];
#else
                const float zv = (xr[c] - mean) * rstd * gamma1[c] + beta1[c];
#endif
                yr[c] = zv * rstd2 * gamma2[c];
            }
        }
    }
}
