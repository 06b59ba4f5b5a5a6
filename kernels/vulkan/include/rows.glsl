// rows.glsl: what the row kernels (softmax, log_softmax, layernorm, rmsnorm, layernorm_rmsnorm)
// share.
//
// One workgroup of WG invocations handles one row at a time; the groups stride over the rows, so the
// dispatch stays within maxComputeWorkGroupCount whatever `rows` is. Invocation l handles columns
// l, l + WG, l + 2·WG, ..., so a subgroup's loads are contiguous and any `cols`, 1 included, works.
// Reductions are in f32: with SUBGROUP defined (the *_subgroup shaders, for devices with subgroup
// arithmetic in compute) subgroupAdd/subgroupMax within each subgroup, then the per-subgroup partials
// through shared memory; otherwise a tree reduction in shared memory (WG a power of two).
//
// Accuracy follows the catalog's f64 reference: softmax and log_softmax subtract the row maximum
// before exp; layernorm's variance is the biased one, computed in a second pass over x - mean (no
// E[x²] - E[x]² cancellation).
//
// Specialization: 0 local size x = WG (a power of two); 2 CHUNKS: when > 0, cols ≤ WG·CHUNKS and
// each invocation keeps its CHUNKS elements of the row in registers, so x is read once; 0 re-reads
// the row (from cache) in every pass.

#include "grid.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 2) const uint CHUNKS = 0;

const uint WG = gl_WorkGroupSize.x;
// Registers per invocation for the cached row (an array needs at least one element).
const uint NREG = CHUNKS > 0u ? CHUNKS : 1u;
// -infinity (a literal: uintBitsToFloat is not a constant expression).
const float NEG_INF = -1.0 / 0.0;

shared float red[WG];

#ifdef SUBGROUP
// Sum of v over the workgroup; every invocation gets the same result.
float group_sum(float v)
{
    v = subgroupAdd(v);
    if (gl_SubgroupInvocationID == 0u)
        red[gl_SubgroupID] = v;
    barrier();
    // Every subgroup adds the partials in the same order, so all get the same sum.
    float r = 0.0;
    for (uint s = gl_SubgroupInvocationID; s < gl_NumSubgroups; s += gl_SubgroupSize)
        r += red[s];
    r = subgroupAdd(r);
    // Nobody may overwrite the partials before everyone has read them.
    barrier();
    return r;
}

float group_max(float v)
{
    v = subgroupMax(v);
    if (gl_SubgroupInvocationID == 0u)
        red[gl_SubgroupID] = v;
    barrier();
    float r = NEG_INF;
    for (uint s = gl_SubgroupInvocationID; s < gl_NumSubgroups; s += gl_SubgroupSize)
        r = max(r, red[s]);
    r = subgroupMax(r);
    barrier();
    return r;
}
#else
float group_sum(float v)
{
    const uint lid = gl_LocalInvocationID.x;
    red[lid] = v;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s)
            red[lid] += red[lid + s];
        barrier();
    }
    const float r = red[0];
    barrier();
    return r;
}

float group_max(float v)
{
    const uint lid = gl_LocalInvocationID.x;
    red[lid] = v;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s)
            red[lid] = max(red[lid], red[lid + s]);
        barrier();
    }
    const float r = red[0];
    barrier();
    return r;
}
#endif

// The loops visit this invocation's columns: `for (uint j = 0; j < nch; ++j)` with column
// c = lid + j·WG when c < cols; nch is CHUNKS when the row is cached (a constant after
// specialization, so the loops unroll and xv stays in registers). XV(j) is element j of the cache;
// the index is clamped so that no path reads outside xv even when CHUNKS = 0.
#define XV(j) xv[min((j), NREG - 1u)]
#define ROW_BEGIN()                                                                            \
    const uint lid = gl_LocalInvocationID.x;                                                   \
    const uint rows = pc.rows;                                                                 \
    const uint cols = pc.cols;                                                                 \
    const uint nch = CHUNKS > 0u ? CHUNKS : (cols + WG - 1u) / WG;                             \
    float xv[NREG];                                                                            \
    for (uint row = gl_WorkGroupID.x; row < rows; row += gl_NumWorkGroups.x)
#define ROW_CACHE(src, base)                                                                   \
    if (CHUNKS > 0u) {                                                                         \
        for (uint j = 0u; j < CHUNKS; ++j) {                                                   \
            const uint c = lid + j * WG;                                                       \
            xv[j] = 0.0;                                                                       \
            if (c < cols)                                                                      \
                xv[j] = src[(base) + c];                                                       \
        }                                                                                      \
    }
// The first thing in ROW_BEGIN's loop: `base`, the row's offset in src, and its cache.
#define ROW_START(src)                                                                         \
    const uint base = row * cols;                                                              \
    ROW_CACHE(src, base)
// Element c (chunk j) of the row: from registers when cached, else from memory.
#define ROW_X(src, base, j, c) (CHUNKS > 0u ? XV(j) : src[(base) + (c)])
