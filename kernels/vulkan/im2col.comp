#version 450
// im2col: unfolds images first .. first + count - 1 of an NCHW batch into column matrices
// col[i][(c·KS + ky)·KS + kx][oy·out_w + ox] (zeros where the window hangs over the padding), one
// element per iteration of the grid-stride loop. The planner then multiplies the weights
// (filters × channels·KS²) by each column matrix with gemm_blocked, batched over the images, which
// writes image i's output at its place in the NCHW output.
//
// Bindings: 0 input, 1 col (scratch). Push constants (uint): first, count, channels, height, width,
// stride, pad, out_h, out_w. Specialization: 0 local size x; 2 KS (3 or 5).
#extension GL_GOOGLE_include_directive : require
#include "include/grid.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 2) const uint KS = 3;

layout(set = 0, binding = 0, std430) readonly buffer In { float src[]; };
layout(set = 0, binding = 1, std430) writeonly buffer Col { float col[]; };

layout(push_constant) uniform Push {
    uint first;
    uint count;
    uint channels;
    uint height;
    uint width;
    uint stride;
    uint pad;
    uint out_h;
    uint out_w;
} pc;

void main()
{
    const uint plane = pc.out_h * pc.out_w;
    const uint ckk = pc.channels * (KS * KS);
    GRID_LOOP(idx, pc.count * ckk * plane) {
        const uint q = idx / plane;
        const uint p = idx - q * plane;
        const uint r = q % ckk;
        const uint img = pc.first + q / ckk;
        const uint c = r / (KS * KS);
        const uint ky = (r / KS) % KS;
        const uint kx = r % KS;
        const uint oy = p / pc.out_w;
        const uint ox = p - oy * pc.out_w;
        const int iy = int(oy * pc.stride + ky) - int(pc.pad);
        const int ix = int(ox * pc.stride + kx) - int(pc.pad);
        float v = 0.0;
        if (iy >= 0 && iy < int(pc.height) && ix >= 0 && ix < int(pc.width))
            v = src[((img * pc.channels + c) * pc.height + uint(iy)) * pc.width + uint(ix)];
        col[idx] = v;
    }
}
