// model_layer.glsl: the layers of a CNN (simple_cnn, resnet18, mobilenet_v2) other than dense
// convolutions and linear layers (model_conv.glsl), dispatched in order; the same computation as
// model_layer in kernels/opencl/model.cl (which documents the ops) with the same arguments
// (agent/src/backend/planning/model.rs). Tensors are NCHW; offsets in elements.
//
// Bindings: 0 x (the layer's input: the images, the arena, or a split convolution's partial sums),
// 1 the weights (filters then biases), 2 the arena (written at out_off), 3 s (the residual addend
// of an add). Push constants (uint): op, total, x_off, w_off, b_off, s_off, out_off, cin, h, w,
// cout, oh, ow, k, stride, pad, groups, act. Specialization: 0 local size x.
//
// op 0 grouped/depthwise conv (zero padding) + bias + act, 1 maxpool (padding never wins),
// 2 global average pool, 3 residual add + act, 4 the sum of `groups` partial sums + bias + act;
// act 0 none, 1 relu, 2 relu6.
// x and s may be the same buffer as the arena: a layer reads only tensors written before its own.
//
// The images, the weights and the arena (s included) are f32, or with HALF IEEE half
// (GL_EXT_shader_16bit_storage only: loads widen exactly and the arithmetic is the f32 shader's, so
// no shaderFloat16 is needed; an output is rounded to half once, when stored). The partial sums op 4
// reads are f32 in both (model_conv.glsl writes them so): with HALF, binding 0 is also declared as
// f32 (XPart) and op 4 reads that view.

#include "grid.glsl"

#ifdef HALF
#define ELEM float16_t
#define WIDEN(v) float(v)
#define NARROW(v) float16_t(v)
#else
#define ELEM float
#define WIDEN(v) (v)
#define NARROW(v) (v)
#endif

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0, std430) readonly buffer X { ELEM x[]; };
#ifdef HALF
layout(set = 0, binding = 0, std430) readonly buffer XPart { float xpart[]; };
#define PARTIAL(i) xpart[i]
#else
#define PARTIAL(i) x[i]
#endif
layout(set = 0, binding = 1, std430) readonly buffer W { ELEM w[]; };
layout(set = 0, binding = 2, std430) buffer Out { ELEM dst[]; };
layout(set = 0, binding = 3, std430) readonly buffer S { ELEM s[]; };

layout(push_constant) uniform Push {
    uint op;
    uint total;
    uint x_off;
    uint w_off;
    uint b_off;
    uint s_off;
    uint out_off;
    uint cin;
    uint h;
    uint wd;
    uint cout;
    uint oh;
    uint ow;
    uint k;
    uint stride;
    uint pad;
    uint groups;
    uint act;
} pc;

float act(float v)
{
    if (pc.act == 1u)
        return max(v, 0.0);
    if (pc.act == 2u)
        return clamp(v, 0.0, 6.0);
    return v;
}

void main()
{
    GRID_LOOP(i, pc.total) {
        float r;
        if (pc.op == 3u) {
            r = act(WIDEN(x[pc.x_off + i]) + WIDEN(s[pc.s_off + i]));
        } else if (pc.op == 4u) {
            const uint plane = pc.oh * pc.ow;
            const uint co = (i / plane) % pc.cout;
            const uint col = (i / (plane * pc.cout)) * plane + i % plane;
            const uint ncols = pc.total / pc.cout;
            float acc = WIDEN(w[pc.b_off + co]);
            for (uint sp = 0u; sp < pc.groups; ++sp)
                acc += PARTIAL(pc.x_off + (sp * pc.cout + co) * ncols + col);
            r = act(acc);
        } else if (pc.op == 2u) {
            const uint plane = pc.h * pc.wd;
            const uint p = pc.x_off + i * plane;
            float acc = 0.0;
            for (uint j = 0u; j < plane; ++j)
                acc += WIDEN(x[p + j]);
            r = acc / float(plane);
        } else {
            const uint ox = i % pc.ow;
            const uint oy = (i / pc.ow) % pc.oh;
            const uint co = (i / (pc.ow * pc.oh)) % pc.cout;
            const uint n = i / (pc.ow * pc.oh * pc.cout);
            const int iy0 = int(oy * pc.stride) - int(pc.pad);
            const int ix0 = int(ox * pc.stride) - int(pc.pad);
            const int h = int(pc.h);
            const int wd = int(pc.wd);
            if (pc.op == 1u) {
                const uint p = pc.x_off + (n * pc.cin + co) * pc.h * pc.wd;
                float m = -1.0 / 0.0;
                for (int ky = 0; ky < int(pc.k); ++ky) {
                    const int iy = iy0 + ky;
                    if (iy < 0 || iy >= h)
                        continue;
                    for (int kx = 0; kx < int(pc.k); ++kx) {
                        const int ix = ix0 + kx;
                        if (ix >= 0 && ix < wd)
                            m = max(m, WIDEN(x[p + uint(iy * wd + ix)]));
                    }
                }
                r = m;
            } else {
                const uint cin_g = pc.cin / pc.groups;
                const uint g = co / (pc.cout / pc.groups);
                const uint kk = pc.k * pc.k;
                const uint f = pc.w_off + co * cin_g * kk;
                const uint p = pc.x_off + (n * pc.cin + g * cin_g) * pc.h * pc.wd;
                float acc = 0.0;
                for (uint ci = 0u; ci < cin_g; ++ci) {
                    const uint fc = f + ci * kk;
                    const uint pc_ = p + ci * pc.h * pc.wd;
                    for (int ky = 0; ky < int(pc.k); ++ky) {
                        const int iy = iy0 + ky;
                        if (iy < 0 || iy >= h)
                            continue;
                        for (int kx = 0; kx < int(pc.k); ++kx) {
                            const int ix = ix0 + kx;
                            if (ix >= 0 && ix < wd)
                                acc += WIDEN(w[fc + uint(ky) * pc.k + uint(kx)]) *
                                       WIDEN(x[pc_ + uint(iy * wd + ix)]);
                        }
                    }
                }
                r = act(acc + WIDEN(w[pc.b_off + co]));
            }
        }
        dst[pc.out_off + i] = NARROW(r);
    }
}
