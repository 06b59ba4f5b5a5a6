// row_stats.glsl: ROW_MEAN_RSTD(src, base, eps) defines `mean` and `rstd` = 1/sqrt(biased variance
// + eps) of the row, in two passes (the second over x - mean). Expects rows.glsl's ROW_BEGIN scope.
#define ROW_MEAN_RSTD(src, base, eps)                                                          \
    float mean = 0.0;                                                                          \
    for (uint j = 0u; j < nch; ++j) {                                                          \
        const uint c = lid + j * WG;                                                           \
        if (c < cols)                                                                          \
            mean += ROW_X(src, base, j, c);                                                    \
    }                                                                                          \
    mean = group_sum(mean) / float(cols);                                                      \
    float var = 0.0;                                                                           \
    for (uint j = 0u; j < nch; ++j) {                                                          \
        const uint c = lid + j * WG;                                                           \
        if (c < cols) {                                                                        \
            const float d = ROW_X(src, base, j, c) - mean;                                     \
            var += d * d;                                                                      \
        }                                                                                      \
    }                                                                                          \
    var = group_sum(var) / float(cols);                                                        \
    const float rstd = inversesqrt(var + (eps));
