// split.glsl: what the split-row shaders share (few wide rows of softmax, log_softmax or layernorm,
// several workgroups per row; the OpenCL twins are the split kernels in kernels/opencl/rows.cl).
//
// Group g works on row g / SPLIT and on its chunk [s·len, min((s+1)·len, cols)), s = g % SPLIT.
// `split_stats` writes the chunk's two partials to `part` (softmax and log_softmax: max and
// Σ exp(x - max); layernorm: mean and Σ squared deviations from it); `softmax_split_apply`,
// `log_softmax_split_apply` / `layernorm_split_apply` merge the row's SPLIT partials (every
// invocation does, they are few) and write the chunk, reading x again.
//
// Specialization: 0 local size x = WG; 3 SPLIT, the groups per row. Push constants: rows, cols,
// len, then eps for layernorm.

layout(constant_id = 3) const uint SPLIT = 1;

#define SPLIT_CHUNK()                                                                          \
    const uint lid = gl_LocalInvocationID.x;                                                   \
    const uint g_ = gl_WorkGroupID.x;                                                          \
    const uint row = g_ / SPLIT;                                                               \
    const uint c0 = (g_ % SPLIT) * pc.len;                                                     \
    const uint c1 = min(c0 + pc.len, pc.cols);                                                 \
    const uint base = row * pc.cols;

// The loop over this invocation's columns of the chunk.
#define CHUNK_LOOP(c) for (uint c = c0 + lid; c < c1; c += gl_WorkGroupSize.x)
