/*
 * rows.hip: row-wise softmax, log_softmax, layernorm, rmsnorm and layernorm followed by rmsnorm.
 * Same semantics and arguments as kernels/opencl/rows.cl:
 *   softmax_rows_*(x, y, rows, cols)
 *   log_softmax_rows_*(x, y, rows, cols)
 *   layernorm_rows_*(x, gamma, beta, y, rows, cols, eps)
 *   rmsnorm_rows_*(x, gamma, y, rows, cols, eps)
 *   layernorm_rmsnorm_rows_*(x, gamma1, beta1, gamma2, y, rows, cols, eps)
 *
 * One block of WG work-items handles one row at a time; blocks stride over the rows (their number
 * comes from the dispatch packet), so the grid stays bounded whatever `rows` is. Reductions are
 * tree reductions in LDS, all in float. Work-item l handles columns l, l + WG, l + 2·WG, ..., so
 * a wavefront's loads are contiguous and any `cols`, 1 included, works.
 *
 * Accuracy follows the catalog's f64 reference: softmax and log_softmax subtract the row maximum
 * before exp; layernorm's variance is the biased one, computed in a second pass over x - mean; exp,
 * log and 1/sqrt are the accurate ones of common.h.
 *
 * Instantiations, suffix `_<WG>` for WG ∈ {64, 256, 1024} and `_<WG>_cached` for WG ∈ {64, 256}.
 * `_cached` keeps the work-item's elements of the row in registers (CACHED_CHUNKS = 16 of them,
 * so cols ≤ 16·WG), so x is read from memory once; the plain ones re-read the row (from cache)
 * per pass. There is no 1024 `_cached`: a 1024-wide block leaves 64 VGPRs per work-item on a
 * wave64 GPU and 16 cached floats spill there (the planner takes 1024 only from 8192 columns on).
 */

#include "common.h"

/* The uncached loops have run-time trip counts, which `unroll` leaves rolled (as it should). */
#pragma clang diagnostic ignored "-Wpass-failed"

#define CACHED_CHUNKS 16

/* Sum (MAX = false) or maximum (MAX = true) of v over the block; everyone gets the result. */
template <int WG, bool MAX> GF_DEVICE float rows_reduce(float *red, float v)
{
    const int lid = gf_lid_x();
    red[lid] = v;
    gf_barrier();
#pragma unroll
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (lid < s)
            red[lid] = MAX ? gf_fmax(red[lid], red[lid + s]) : red[lid] + red[lid + s];
        gf_barrier();
    }
    const float r = red[0];
    /* Nobody may overwrite red[0] before everyone has read it. */
    gf_barrier();
    return r;
}

/*
 * The per-row state of one work-item: its columns c = lid + j·WG (j < nch), read from registers
 * when CACHED (loaded once by load()) else from memory.
 */
template <int WG, bool CACHED> struct RowView {
    const float *xr;
    int lid;
    int cols;
    int nch;
    float xv[CACHED ? CACHED_CHUNKS : 1];

    GF_DEVICE_MEMBER void load()
    {
        if (CACHED) {
#pragma unroll
            for (int j = 0; j < CACHED_CHUNKS; ++j) {
                const int c = lid + j * WG;
                xv[j] = c < cols ? xr[c] : 0.0f;
            }
        }
    }
    /* Element j of this work-item (column lid + j·WG, which the caller checked is < cols). */
    GF_DEVICE_MEMBER float at(int j) const { return CACHED ? xv[CACHED ? j : 0] : xr[lid + j * WG]; }
    GF_DEVICE_MEMBER void set(int j, float v)
    {
        if (CACHED)
            xv[CACHED ? j : 0] = v;
    }
    /* Chunks to visit: a compile-time count when cached (so xv stays in registers). */
    GF_DEVICE_MEMBER int chunks() const { return CACHED ? CACHED_CHUNKS : nch; }
};

/* Loops over this work-item's columns; `c` and `j` are in scope in the body. */
#define FOR_COLS(view)                                                                         \
    _Pragma("unroll") for (int j = 0; j < (view).chunks(); ++j)                                \
        if (const int c = lid + j * WG; c < cols)

/* softmax (LOG false): y = exp(x - max) / Σ exp(x - max), the cached elements holding
 * exp(x - max) for the last pass; log_softmax (LOG true): y = (x - max) - log Σ, the cached
 * elements keeping x. */
template <int WG, bool CACHED, bool LOG>
GF_DEVICE void softmax_rows(const float *GF_RESTRICT x, float *GF_RESTRICT y, int rows, int cols)
{
    GF_SHARED float red[WG];
    const int lid = gf_lid_x();
    const int nch = (cols + WG - 1) / WG;
    for (int row = gf_group_x(); row < rows; row += gf_num_groups_x()) {
        RowView<WG, CACHED> v{x + (long)row * cols, lid, cols, nch, {}};
        float *yr = y + (long)row * cols;
        v.load();
        float mx = -__builtin_inff();
        FOR_COLS(v) { mx = gf_fmax(mx, v.at(j)); }
        mx = rows_reduce<WG, true>(red, mx);
        float sum = 0.0f;
        FOR_COLS(v)
        {
            const float e = gf_expf(v.at(j) - mx);
            if (!LOG)
                v.set(j, e);
            sum += e;
        }
        sum = rows_reduce<WG, false>(red, sum);
        const float log_sum = LOG ? gf_logf(sum) : 0.0f;
        FOR_COLS(v)
        {
            yr[c] = LOG ? (v.at(j) - mx) - log_sum
                        : (CACHED ? v.at(j) : gf_expf(v.at(j) - mx)) / sum;
        }
    }
}

/* Mean and 1/sqrt(biased variance + eps) of the row, two passes. */
template <int WG, bool CACHED>
GF_DEVICE void mean_rstd(RowView<WG, CACHED> &v, float *red, int lid, int cols, float eps,
                         float *mean_out, float *rstd_out)
{
    float mean = 0.0f;
    FOR_COLS(v) { mean += v.at(j); }
    mean = rows_reduce<WG, false>(red, mean) / (float)cols;
    float var = 0.0f;
    FOR_COLS(v)
    {
        const float d = v.at(j) - mean;
        var += d * d;
    }
    var = rows_reduce<WG, false>(red, var) / (float)cols;
    *mean_out = mean;
    *rstd_out = gf_rsqrt(var + eps);
}

template <int WG, bool CACHED>
GF_DEVICE void layernorm_rows(const float *GF_RESTRICT x, const float *GF_RESTRICT gamma,
                              const float *GF_RESTRICT beta, float *GF_RESTRICT y, int rows,
                              int cols, float eps)
{
    GF_SHARED float red[WG];
    const int lid = gf_lid_x();
    const int nch = (cols + WG - 1) / WG;
    for (int row = gf_group_x(); row < rows; row += gf_num_groups_x()) {
        RowView<WG, CACHED> v{x + (long)row * cols, lid, cols, nch, {}};
        float *yr = y + (long)row * cols;
        v.load();
        float mean, rstd;
        mean_rstd<WG, CACHED>(v, red, lid, cols, eps, &mean, &rstd);
        FOR_COLS(v) { yr[c] = (v.at(j) - mean) * rstd * gamma[c] + beta[c]; }
    }
}

template <int WG, bool CACHED>
GF_DEVICE void rmsnorm_rows(const float *GF_RESTRICT x, const float *GF_RESTRICT gamma,
                            float *GF_RESTRICT y, int rows, int cols, float eps)
{
    GF_SHARED float red[WG];
    const int lid = gf_lid_x();
    const int nch = (cols + WG - 1) / WG;
    for (int row = gf_group_x(); row < rows; row += gf_num_groups_x()) {
        RowView<WG, CACHED> v{x + (long)row * cols, lid, cols, nch, {}};
        float *yr = y + (long)row * cols;
        v.load();
        float ss = 0.0f;
        FOR_COLS(v)
        {
            const float e = v.at(j);
            ss += e * e;
        }
        const float rstd = gf_rsqrt(rows_reduce<WG, false>(red, ss) / (float)cols + eps);
        FOR_COLS(v) { yr[c] = v.at(j) * rstd * gamma[c]; }
    }
}

template <int WG, bool CACHED>
GF_DEVICE void layernorm_rmsnorm_rows(const float *GF_RESTRICT x,
                                      const float *GF_RESTRICT gamma1,
                                      const float *GF_RESTRICT beta1,
                                      const float *GF_RESTRICT gamma2, float *GF_RESTRICT y,
                                      int rows, int cols, float eps)
{
    GF_SHARED float red[WG];
    const int lid = gf_lid_x();
    const int nch = (cols + WG - 1) / WG;
    for (int row = gf_group_x(); row < rows; row += gf_num_groups_x()) {
        RowView<WG, CACHED> v{x + (long)row * cols, lid, cols, nch, {}};
        float *yr = y + (long)row * cols;
        v.load();
        float mean, rstd;
        mean_rstd<WG, CACHED>(v, red, lid, cols, eps, &mean, &rstd);
        float ss = 0.0f;
        FOR_COLS(v)
        {
            const float z = (v.at(j) - mean) * rstd * gamma1[c] + beta1[c];
            v.set(j, z);
            ss += z * z;
        }
        const float rstd2 = gf_rsqrt(rows_reduce<WG, false>(red, ss) / (float)cols + eps);
        FOR_COLS(v)
        {
            const float z = CACHED ? v.at(j) : (v.at(j) - mean) * rstd * gamma1[c] + beta1[c];
            yr[c] = z * rstd2 * gamma2[c];
        }
    }
}

/* The five kernels of one work-group size. */
#define ROWS_KERNELS(WG, SUFFIX, CACHED)                                                       \
    GF_KERNEL(WG)                                                                              \
    void softmax_rows_##SUFFIX(const float *GF_RESTRICT x, float *GF_RESTRICT y, int rows,     \
                               int cols)                                                       \
    {                                                                                          \
        softmax_rows<WG, CACHED, false>(x, y, rows, cols);                                     \
    }                                                                                          \
    GF_KERNEL(WG)                                                                              \
    void log_softmax_rows_##SUFFIX(const float *GF_RESTRICT x, float *GF_RESTRICT y, int rows, \
                                   int cols)                                                   \
    {                                                                                          \
        softmax_rows<WG, CACHED, true>(x, y, rows, cols);                                      \
    }                                                                                          \
    GF_KERNEL(WG)                                                                              \
    void layernorm_rows_##SUFFIX(const float *GF_RESTRICT x, const float *GF_RESTRICT gamma,   \
                                 const float *GF_RESTRICT beta, float *GF_RESTRICT y,          \
                                 int rows, int cols, float eps)                                \
    {                                                                                          \
        layernorm_rows<WG, CACHED>(x, gamma, beta, y, rows, cols, eps);                        \
    }                                                                                          \
    GF_KERNEL(WG)                                                                              \
    void rmsnorm_rows_##SUFFIX(const float *GF_RESTRICT x, const float *GF_RESTRICT gamma,     \
                               float *GF_RESTRICT y, int rows, int cols, float eps)            \
    {                                                                                          \
        rmsnorm_rows<WG, CACHED>(x, gamma, y, rows, cols, eps);                                \
    }                                                                                          \
    GF_KERNEL(WG)                                                                              \
    void layernorm_rmsnorm_rows_##SUFFIX(                                                      \
        const float *GF_RESTRICT x, const float *GF_RESTRICT gamma1,                           \
        const float *GF_RESTRICT beta1, const float *GF_RESTRICT gamma2,                       \
        float *GF_RESTRICT y, int rows, int cols, float eps)                                   \
    {                                                                                          \
        layernorm_rmsnorm_rows<WG, CACHED>(x, gamma1, beta1, gamma2, y, rows, cols, eps);      \
    }

ROWS_KERNELS(64, 64, false)
ROWS_KERNELS(64, 64_cached, true)
ROWS_KERNELS(256, 256, false)
ROWS_KERNELS(256, 256_cached, true)
ROWS_KERNELS(1024, 1024, false)
