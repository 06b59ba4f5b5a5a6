#version 450
// conv2d_direct: 2-D convolution, NCHW input (batch × channels × height × width), KCRS weights
// (filters × channels × KS × KS), zero padding, the same stride in both directions; output
// batch × filters × out_h × out_w. One output element per iteration of the grid-stride loop, looping
// over the channels and the filter window.
//
// Bindings: 0 input, 1 weights (inputs), 2 output. Push constants (uint): batch, channels, height,
// width, filters, stride, pad, out_h, out_w. Specialization: 0 local size x; 2 KS (3 or 5), so the
// window loops unroll.
#extension GL_GOOGLE_include_directive : require
#include "include/grid.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 2) const uint KS = 3;

layout(set = 0, binding = 0, std430) readonly buffer In { float src[]; };
layout(set = 0, binding = 1, std430) readonly buffer W { float w[]; };
layout(set = 0, binding = 2, std430) writeonly buffer Out { float dst[]; };

layout(push_constant) uniform Push {
    uint batch;
    uint channels;
    uint height;
    uint width;
    uint filters;
    uint stride;
    uint pad;
    uint out_h;
    uint out_w;
} pc;

void main()
{
    const uint plane = pc.out_h * pc.out_w;
    const uint in_plane = pc.height * pc.width;
    GRID_LOOP(idx, pc.batch * pc.filters * plane) {
        const uint q = idx / plane;
        const uint p = idx - q * plane;
        const uint f = q % pc.filters;
        const uint b = q / pc.filters;
        const uint oy = p / pc.out_w;
        const uint ox = p - oy * pc.out_w;
        // Signed: the window starts above or left of the image when it hangs over the padding.
        const int iy0 = int(oy * pc.stride) - int(pc.pad);
        const int ix0 = int(ox * pc.stride) - int(pc.pad);
        const uint img = b * pc.channels * in_plane;
        const uint wf = f * pc.channels * (KS * KS);
        float acc = 0.0;
        for (uint c = 0u; c < pc.channels; ++c) {
            const uint ip = img + c * in_plane;
            const uint wc = wf + c * (KS * KS);
            for (uint ky = 0u; ky < KS; ++ky) {
                const int iy = iy0 + int(ky);
                if (iy < 0 || iy >= int(pc.height))
                    continue;
                const uint irow = ip + uint(iy) * pc.width;
                for (uint kx = 0u; kx < KS; ++kx) {
                    const int ix = ix0 + int(kx);
                    if (ix >= 0 && ix < int(pc.width))
                        acc += w[wc + ky * KS + kx] * src[irow + uint(ix)];
                }
            }
        }
        dst[idx] = acc;
    }
}
