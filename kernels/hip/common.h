/*
 * common.h: what every file under kernels/hip needs, from compiler builtins only.
 *
 * The files are compiled with `clang -x hip --cuda-device-only -nogpulib -nogpuinc` (see
 * agent/build.rs): no HIP headers and no ROCm device libraries, so one clang builds code objects
 * for every target, gfx803 included, on a host without ROCm's bitcode. What the headers would give
 * is spelled out here:
 *   - work-item and work-group ids: __builtin_amdgcn_workitem_id_* / __builtin_amdgcn_workgroup_id_*
 *   - work-group size and grid size: read from the HSA kernel dispatch packet (offsets 4..8 hold
 *     the u16 workgroup_size_x/y/z, offsets 12..20 the u32 grid_size_x/y/z in work-items), which
 *     exists under every code object version;
 *   - __syncthreads(): a workgroup-scope release fence, s_barrier, an acquire fence;
 *   - expf: Cody-Waite range reduction and a degree-7 polynomial (about 1 ulp on the range that
 *     does not overflow), so the result does not depend on how a clang version lowers llvm.exp;
 *     logf likewise (Cephes' polynomial);
 *   - sqrt and division: the IEEE-accurate llvm.sqrt / fdiv lowering (no fast-math flags).
 *
 * Kernels are `extern "C"` so their symbol names are the names the agent looks up with
 * hipModuleGetFunction, and each carries amdgpu_flat_work_group_size with the exact block size
 * the planner launches it with, so the register allocator can use the whole budget.
 * Sizes are `int` arguments as in the OpenCL kernels; element offsets that can pass 2^31 are
 * computed in `long` (64-bit on amdgcn).
 */

#ifndef GPUFLEET_HIP_COMMON_H
#define GPUFLEET_HIP_COMMON_H

/* A host-side emulation (one thread per work-item, used to check the kernels' indexing without a
 * GPU) predefines GF_KERNEL without the device-only attribute and GF_SHARED as `static`. */
#ifndef GF_KERNEL
#define GF_KERNEL(block) extern "C" __attribute__((global)) __attribute__((amdgpu_flat_work_group_size(block, block)))
#endif
#define GF_DEVICE static __attribute__((device)) inline __attribute__((always_inline))
#define GF_DEVICE_MEMBER __attribute__((device)) inline __attribute__((always_inline))
#ifndef GF_SHARED
#define GF_SHARED __attribute__((shared))
#endif
#define GF_RESTRICT __restrict__

typedef float gf_float4 __attribute__((ext_vector_type(4)));
typedef _Float16 gf_half;

GF_DEVICE int gf_lid_x() { return (int)__builtin_amdgcn_workitem_id_x(); }
GF_DEVICE int gf_lid_y() { return (int)__builtin_amdgcn_workitem_id_y(); }
GF_DEVICE int gf_group_x() { return (int)__builtin_amdgcn_workgroup_id_x(); }
GF_DEVICE int gf_group_y() { return (int)__builtin_amdgcn_workgroup_id_y(); }
GF_DEVICE int gf_group_z() { return (int)__builtin_amdgcn_workgroup_id_z(); }

/* The dispatch packet (hsa_kernel_dispatch_packet_t) as 16-bit and 32-bit words. */
GF_DEVICE const unsigned short *gf_packet16()
{
    return (const unsigned short *)__builtin_amdgcn_dispatch_ptr();
}
GF_DEVICE const unsigned int *gf_packet32()
{
    return (const unsigned int *)__builtin_amdgcn_dispatch_ptr();
}
/* Work-items per group in x (workgroup_size_x at byte offset 4). */
GF_DEVICE int gf_group_size_x() { return (int)gf_packet16()[2]; }
/* Work-groups in x: grid_size_x (byte offset 12, in work-items) over the group size. */
GF_DEVICE int gf_num_groups_x()
{
    const unsigned int grid = gf_packet32()[3];
    const unsigned int size = gf_packet16()[2];
    return (int)((grid + size - 1) / size);
}
/* Global work-item index in x. */
GF_DEVICE long gf_global_x() { return (long)gf_group_x() * gf_group_size_x() + gf_lid_x(); }

GF_DEVICE void gf_barrier()
{
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}

GF_DEVICE float gf_fmax(float a, float b) { return __builtin_fmaxf(a, b); }
GF_DEVICE float gf_fabs(float a) { return __builtin_fabsf(a); }

/* e^x: x = k·ln2 + r with |r| ≤ ln2/2 (ln2 split in two so k·ln2 is exact), e^r by its Taylor
 * polynomial to degree 7 (truncation below 1e-8 relative on that range), then 2^k by building the
 * exponent bits in two steps so k down to -252 and up to 254 stays representable. */
GF_DEVICE float gf_expf(float x)
{
    if (x > 88.72283935546875f)
        return __builtin_inff();
    if (x < -103.972084045410f)
        return 0.0f;
    const float k = __builtin_rintf(x * 1.44269504088896341f);
    float r = __builtin_fmaf(k, -0.693359375f, x);
    r = __builtin_fmaf(k, 2.12194440e-4f, r);
    float p = 1.98412698e-4f;
    p = __builtin_fmaf(p, r, 1.38888889e-3f);
    p = __builtin_fmaf(p, r, 8.33333333e-3f);
    p = __builtin_fmaf(p, r, 4.16666667e-2f);
    p = __builtin_fmaf(p, r, 1.66666667e-1f);
    p = __builtin_fmaf(p, r, 0.5f);
    p = __builtin_fmaf(p, r, 1.0f);
    p = __builtin_fmaf(p, r, 1.0f);
    const int ki = (int)k;
    const int k1 = ki / 2;
    const int k2 = ki - k1;
    const float s1 = __builtin_bit_cast(float, (k1 + 127) << 23);
    const float s2 = __builtin_bit_cast(float, (k2 + 127) << 23);
    return p * s1 * s2;
}

/* ln x: x = 2^e·m with m in [√½, √2), ln(1 + f) for f = m - 1 by Cephes' logf polynomial (about
 * 1 ulp), e·ln2 added in two parts as in gf_expf. Subnormals are scaled up first; 0 gives -inf,
 * a negative x NaN, +inf and NaN themselves. */
GF_DEVICE float gf_logf(float x)
{
    if (x != x || x == __builtin_inff())
        return x;
    if (x <= 0.0f)
        return x == 0.0f ? -__builtin_inff() : __builtin_nanf("");
    int e = 0;
    if (x < 1.17549435e-38f) {
        x *= 8388608.0f; /* 2^23 */
        e = -23;
    }
    const int bits = __builtin_bit_cast(int, x);
    e += ((bits >> 23) & 0xff) - 126;
    /* m in [0.5, 1), then into [√½, √2) as f = m - 1 */
    float f = __builtin_bit_cast(float, (bits & 0x007fffff) | 0x3f000000);
    if (f < 0.70710678f) {
        e -= 1;
        f = f + f - 1.0f;
    } else {
        f = f - 1.0f;
    }
    const float z = f * f;
    float p = 7.0376836292e-2f;
    p = __builtin_fmaf(p, f, -1.1514610310e-1f);
    p = __builtin_fmaf(p, f, 1.1676998740e-1f);
    p = __builtin_fmaf(p, f, -1.2420140846e-1f);
    p = __builtin_fmaf(p, f, 1.4249322787e-1f);
    p = __builtin_fmaf(p, f, -1.6668057665e-1f);
    p = __builtin_fmaf(p, f, 2.0000714765e-1f);
    p = __builtin_fmaf(p, f, -2.4999993993e-1f);
    p = __builtin_fmaf(p, f, 3.3333331174e-1f);
    const float k = (float)e;
    float r = p * f * z;
    r = __builtin_fmaf(k, -2.12194440e-4f, r);
    r = __builtin_fmaf(z, -0.5f, r);
    return __builtin_fmaf(k, 0.693359375f, f + r);
}

GF_DEVICE float gf_rsqrt(float x) { return 1.0f / __builtin_sqrtf(x); }

#endif
