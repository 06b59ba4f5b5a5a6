// gemm_tiled.glsl: TS×TS tiles of A and B in shared memory, one element of C per invocation;
// included by gemm_tiled.comp (f32) and gemm_tiled_f16.comp. Specialization: 0, 1 local size x, y
// (both TS); 2 TS (16, or less on small devices). Groups: ceil(n/TS) × ceil(m/TS) × batch.
// Interface in gemm_io.glsl.
layout(local_size_x_id = 0, local_size_y_id = 1) in;
layout(constant_id = 2) const uint TS = 16;

#include "gemm_io.glsl"

// Rows padded by one so the column reads of bs spread over the banks.
shared float as_[TS * (TS + 1u)];
shared float bs_[TS * (TS + 1u)];

void main()
{
    const uint lx = gl_LocalInvocationID.x;
    const uint ly = gl_LocalInvocationID.y;
    const uint col = gl_WorkGroupID.x * TS + lx;
    const uint row = gl_WorkGroupID.y * TS + ly;
    const uint z = gl_WorkGroupID.z;
    const uint m = pc.m, n = pc.n, k = pc.k;
    const uint ar = z * pc.a_batch + row * k;
    const uint b0 = z * pc.b_batch;
    float acc = 0.0;
    for (uint t = 0u; t < k; t += TS) {
        const uint ka = t + lx;
        const uint kb = t + ly;
        // Out-of-range elements are zeros (if/else, not ?:, so no load is ever speculated).
        float va = 0.0, vb = 0.0;
        if (row < m && ka < k)
            va = LOAD_A(ar + ka);
        if (kb < k && col < n)
            vb = LOAD_B(b0 + kb * n + col);
        as_[ly * (TS + 1u) + lx] = va;
        bs_[ly * (TS + 1u) + lx] = vb;
        barrier();
        for (uint p = 0u; p < TS; ++p)
            acc += as_[ly * (TS + 1u) + p] * bs_[p * (TS + 1u) + lx];
        barrier();
    }
    if (row < m && col < n)
        STORE_C((z + pc.c_first) * pc.c_batch + row * n + col, acc);
}
