// gemm_naive.glsl: one invocation per element of C, no shared memory; included by gemm_naive.comp
// (f32) and gemm_naive_f16.comp. Specialization: 0, 1 local size x, y (16×16 or less). Groups:
// ceil(n/x) × ceil(m/y) × batch. Interface in gemm_io.glsl.
layout(local_size_x_id = 0, local_size_y_id = 1) in;

#include "gemm_io.glsl"

void main()
{
    const uint col = gl_GlobalInvocationID.x;
    const uint row = gl_GlobalInvocationID.y;
    const uint z = gl_WorkGroupID.z;
    if (row >= pc.m || col >= pc.n)
        return;
    const uint ar = z * pc.a_batch + row * pc.k;
    const uint bc = z * pc.b_batch + col;
    // Four products per iteration: llvmpipe (lavapipe) ends any loop after 65535 iterations, and
    // k may be 65536. The sum is still accumulated in order.
    const uint k4 = pc.k & ~3u;
    float acc = 0.0;
    for (uint p = 0u; p < k4; p += 4u) {
        acc += LOAD_A(ar + p) * LOAD_B(bc + p * pc.n);
        acc += LOAD_A(ar + p + 1u) * LOAD_B(bc + (p + 1u) * pc.n);
        acc += LOAD_A(ar + p + 2u) * LOAD_B(bc + (p + 2u) * pc.n);
        acc += LOAD_A(ar + p + 3u) * LOAD_B(bc + (p + 3u) * pc.n);
    }
    for (uint p = k4; p < pc.k; ++p)
        acc += LOAD_A(ar + p) * LOAD_B(bc + p * pc.n);
    STORE_C((z + pc.c_first) * pc.c_batch + row * pc.n + col, acc);
}
