/*
 * rows.cl: row-wise softmax, log_softmax, layernorm, rmsnorm and layernorm followed by rmsnorm.
 *
 * Written for `-cl-std=CL1.1`: no work_group_reduce, no `inline`/`static`. One work-group of WG
 * work-items handles one row at a time (groups stride over the rows, so the number of groups
 * stays bounded whatever `rows` is); reductions are tree reductions in local memory, all in float.
 * Work-item l handles columns l, l + WG, l + 2·WG, ..., so a warp's loads are contiguous and any
 * `cols`, 1 included, works. Row offsets are computed in `long`.
 *
 * Accuracy follows the catalog's f64 reference: softmax and log_softmax subtract the row maximum
 * before exp; layernorm's variance is the biased one, computed in a second pass over x - mean (no
 * E[x²] - E[x]² cancellation); full-precision exp, log and rsqrt, never native_*.
 *
 * Build parameters (-D):
 *   GPUFLEET_WG      work-group size, a power of two (the launch's local size)
 *   GPUFLEET_SPLIT   groups per row of the split kernels (see "Split rows" below)
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

/*
 * ROW_LOOP: what every one-group row kernel declares (the reduction buffer, the work-item, the
 * chunks of a row), then its loop over this group's rows `row`, strided by the number of groups;
 * the body follows in braces and starts with ROW_START: the row's pointers xr and yr and its
 * cached elements.
 */
#define ROW_LOOP                                                                               \
    __local float red[WG];                                                                     \
    const int lid = (int)get_local_id(0);                                                      \
    const int nch = (cols + WG - 1) / WG;                                                      \
    for (int row = (int)get_group_id(0); row < rows; row += (int)get_num_groups(0))
#define ROW_START                                                                              \
    __global const float *xr = x + (long)row * cols;                                           \
    __global float *yr = y + (long)row * cols;                                                 \
    ROW_SETUP(xr)

/* Stores v as the cached element j, when the row is cached. */
#if CHUNKS > 0
#define XV_SET(j, v) (xv[j] = (v))
#else
#define XV_SET(j, v) ((void)0)
#endif

/*
 * The body of softmax_rows (LOG 0) and log_softmax_rows (LOG 1): the row's maximum, Σ exp(x - max),
 * then y = exp(x - max) / Σ (the cached elements hold exp(x - max) by then) or
 * y = (x - max) - log Σ (the cached elements keep x).
 */
#define SOFTMAX_ROWS(LOG)                                                                      \
    ROW_LOOP {                                                                                 \
        ROW_START                                                                              \
        float mx = -INFINITY;                                                                  \
        _Pragma("unroll") for (int j = 0; j < NCH; ++j) {                                      \
            const int c = lid + j * WG;                                                        \
            if (c < cols)                                                                      \
                mx = fmax(mx, XV(j, c));                                                       \
        }                                                                                      \
        mx = gpufleet_group_max(red, mx);                                                      \
        float sum = 0.0f;                                                                      \
        _Pragma("unroll") for (int j = 0; j < NCH; ++j) {                                      \
            const int c = lid + j * WG;                                                        \
            if (c < cols) {                                                                    \
                const float e = exp(XV(j, c) - mx);                                            \
                if (!(LOG))                                                                    \
                    XV_SET(j, e);                                                              \
                sum += e;                                                                      \
            }                                                                                  \
        }                                                                                      \
        sum = gpufleet_group_sum(red, sum);                                                    \
        const float log_sum = (LOG) ? log(sum) : 0.0f;                                         \
        _Pragma("unroll") for (int j = 0; j < NCH; ++j) {                                      \
            const int c = lid + j * WG;                                                        \
            if (c < cols)                                                                      \
                yr[c] = (LOG) ? (XV(j, c) - mx) - log_sum                                      \
                              : (CHUNKS > 0 ? XV(j, c) : exp(XV(j, c) - mx)) / sum;            \
        }                                                                                      \
    }

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
softmax_rows(__global const float *restrict x, __global float *restrict y, int rows, int cols)
{
    SOFTMAX_ROWS(0)
}

/* y = x - max - log Σ exp(x - max) */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
log_softmax_rows(__global const float *restrict x, __global float *restrict y, int rows, int cols)
{
    SOFTMAX_ROWS(1)
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
    ROW_LOOP {
        ROW_START
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
    ROW_LOOP {
        ROW_START
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
    ROW_LOOP {
        ROW_START
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

/*
 * Split rows: for rows too wide for one work-group to keep in registers and too few to fill the
 * device, SPLIT work-groups share a row. Group g works on row g / SPLIT and on its chunk
 * [s·len, min((s+1)·len, cols)) with s = g % SPLIT. `split_stats` writes the chunk's
 * partial statistics to `part` (2 floats per chunk); `<stem>_split_apply` combines the row's
 * SPLIT partials (every work-item does, they are few) and writes the chunk's outputs, reading x
 * again. Two launches, 2 reads and 1 write per element, but rows·SPLIT groups instead of rows.
 *
 * softmax and log_softmax: (chunk max, Σ exp(x - chunk max)); combined as M = max m_s,
 *            S = Σ s_s·exp(m_s - M).
 * layernorm: (chunk mean, Σ (x - chunk mean)²); combined with Chan's parallel variance formula,
 *            so there is no E[x²] - E[x]² cancellation.
 *
 * Only kernels whose plain version reads the row three times (softmax and log_softmax: max, sum,
 * write; layernorm: mean, variance, write) are split: rmsnorm reads it twice either way, and
 * measured no faster split (see docs/PERFORMANCE.md).
 */
#ifndef GPUFLEET_SPLIT
#define GPUFLEET_SPLIT 1
#endif
#define SPLIT GPUFLEET_SPLIT

/* Runs BODY for every column c of the chunk that this work-item owns, with xv = x[row][c]. */
#define CHUNK_FOR(BODY)                                                                        \
    for (int c = c0 + lid; c < c1; c += WG) {                                                  \
        const float xv = xr[c];                                                                \
        BODY                                                                                   \
    }

/* The chunk of this group: row, first column, end column; expects lid in scope. */
#define SPLIT_CHUNK(len)                                                                       \
    const int g_ = (int)get_group_id(0);                                                       \
    const int row = g_ / SPLIT;                                                                \
    const int s_ = g_ % SPLIT;                                                                 \
    const int c0 = s_ * (len);                                                                 \
    const int c1 = min(c0 + (len), cols);                                                      \
    __global const float *xr = x + (long)row * cols;

/* The chunk's two partials: softmax's (and log_softmax's) with GPUFLEET_SPLIT_SOFTMAX defined, else
 * layernorm's. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
split_stats(__global const float *restrict x, __global float *restrict part, int rows, int cols,
            int len)
{
    __local float red[WG];
    const int lid = (int)get_local_id(0);
    SPLIT_CHUNK(len)
#ifdef GPUFLEET_SPLIT_SOFTMAX
    float p0 = -INFINITY;
    CHUNK_FOR(p0 = fmax(p0, xv);)
    p0 = gpufleet_group_max(red, p0);
    float p1 = 0.0f;
    CHUNK_FOR(p1 += exp(xv - p0);)
#else
    float p0 = 0.0f;
    CHUNK_FOR(p0 += xv;)
    p0 = gpufleet_group_sum(red, p0) / (float)max(c1 - c0, 1);
    float p1 = 0.0f;
    CHUNK_FOR(const float d = xv - p0; p1 += d * d;)
#endif
    p1 = gpufleet_group_sum(red, p1);
    if (lid == 0 && row < rows) {
        part[2 * g_] = p0;
        part[2 * g_ + 1] = p1;
    }
}

/* The row's maximum mx and Σ exp(x - mx) from its SPLIT partials (softmax's and log_softmax's),
 * and yr, the row's output. */
#define SPLIT_MAX_SUM                                                                          \
    __global const float *pr = part + 2 * (long)row * SPLIT;                                   \
    float mx = -INFINITY;                                                                      \
    for (int t = 0; t < SPLIT; ++t)                                                            \
        mx = fmax(mx, pr[2 * t]);                                                              \
    float sum = 0.0f;                                                                          \
    for (int t = 0; t < SPLIT; ++t)                                                            \
        sum += pr[2 * t + 1] * exp(pr[2 * t] - mx);                                            \
    __global float *yr = y + (long)row * cols;

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
softmax_split_apply(__global const float *restrict x, __global const float *restrict part,
                    __global float *restrict y, int rows, int cols, int len)
{
    const int lid = (int)get_local_id(0);
    SPLIT_CHUNK(len)
    SPLIT_MAX_SUM
    CHUNK_FOR(yr[c] = exp(xv - mx) / sum;)
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
log_softmax_split_apply(__global const float *restrict x, __global const float *restrict part,
                        __global float *restrict y, int rows, int cols, int len)
{
    const int lid = (int)get_local_id(0);
    SPLIT_CHUNK(len)
    SPLIT_MAX_SUM
    const float log_sum = log(sum);
    CHUNK_FOR(yr[c] = (xv - mx) - log_sum;)
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
layernorm_split_apply(__global const float *restrict x, __global const float *restrict gamma,
                      __global const float *restrict beta, __global const float *restrict part,
                      __global float *restrict y, int rows, int cols, int len, float eps)
{
    const int lid = (int)get_local_id(0);
    SPLIT_CHUNK(len)
    __global const float *pr = part + 2 * (long)row * SPLIT;
    /* Chan et al.: merge (n_a, mean_a, M2_a) with (n_b, mean_b, M2_b), chunk by chunk. */
    float n = 0.0f, mean = 0.0f, m2 = 0.0f;
    for (int t = 0; t < SPLIT; ++t) {
        const float nb = (float)(min((t + 1) * len, cols) - min(t * len, cols));
        if (nb <= 0.0f)
            continue;
        const float d = pr[2 * t] - mean;
        const float nn = n + nb;
        mean += d * nb / nn;
        m2 += pr[2 * t + 1] + d * d * n * nb / nn;
        n = nn;
    }
    const float rstd = rsqrt(m2 / (float)cols + eps);
    __global float *yr = y + (long)row * cols;
    CHUNK_FOR(yr[c] = (xv - mean) * rstd * gamma[c] + beta[c];)
}
