/*
 * conv.hip: 2-D convolution, NCHW input (batch × channels × height × width), KCRS weights
 * (filters × channels × KS × KS), zero padding, the same stride in both directions; the output is
 * batch × filters × out_h × out_w. Same semantics and arguments as kernels/opencl/conv.cl:
 *   conv2d_direct_k{3,5}(in, w, out, batch, channels, height, width, filters, stride, pad,
 *                        out_h, out_w)
 *       one work-item per output element, looping over channels and the filter window
 *   im2col_k{3,5}(in, col, first, count, channels, height, width, stride, pad, out_h, out_w)
 *       unfolds images first .. first + count - 1 into column matrices
 *       col[img][(c·KS + ky)·KS + kx][oy·out_w + ox] (zeros where the window hangs over the
 *       padding); the planner then multiplies the weights (filters × channels·KS²) by each
 *       image's column matrix with gemm.hip's blocked kernel, batched over the chunk's images.
 * The filter size KS (3 or 5, the catalog's only ones) is a template argument so the window loops
 * unroll. Launched in blocks of 256 work-items; flat indices that can pass 2^31 are `long`.
 */

#include "common.h"

template <int KS>
GF_DEVICE void conv2d_direct(const float *GF_RESTRICT in, const float *GF_RESTRICT w,
                             float *GF_RESTRICT out, int batch, int channels, int height,
                             int width, int filters, int stride, int pad, int out_h, int out_w)
{
    const long idx = gf_global_x();
    const long plane = (long)out_h * out_w;
    if (idx >= (long)batch * filters * plane)
        return;
    const long q = idx / plane;
    const int p = (int)(idx - q * plane);
    const int f = (int)(q % filters);
    const int b = (int)(q / filters);
    const int oy = p / out_w;
    const int ox = p - oy * out_w;
    const int iy0 = oy * stride - pad;
    const int ix0 = ox * stride - pad;
    const long in_plane = (long)height * width;
    const float *img = in + (long)b * channels * in_plane;
    const float *wf = w + (long)f * channels * (KS * KS);
    float acc = 0.0f;
    for (int c = 0; c < channels; ++c) {
        const float *ip = img + (long)c * in_plane;
        const float *wc = wf + c * (KS * KS);
#pragma unroll
        for (int ky = 0; ky < KS; ++ky) {
            const int iy = iy0 + ky;
            if (iy < 0 || iy >= height)
                continue;
            const float *irow = ip + (long)iy * width;
#pragma unroll
            for (int kx = 0; kx < KS; ++kx) {
                const int ix = ix0 + kx;
                if (ix >= 0 && ix < width)
                    acc += wc[ky * KS + kx] * irow[ix];
            }
        }
    }
    out[idx] = acc;
}

template <int KS>
GF_DEVICE void im2col(const float *GF_RESTRICT in, float *GF_RESTRICT col, int first, int count,
                      int channels, int height, int width, int stride, int pad, int out_h,
                      int out_w)
{
    const long idx = gf_global_x();
    const long plane = (long)out_h * out_w;
    const int ckk = channels * (KS * KS);
    if (idx >= (long)count * ckk * plane)
        return;
    const long q = idx / plane;
    const int p = (int)(idx - q * plane);
    const int r = (int)(q % ckk);
    const int img = first + (int)(q / ckk);
    const int c = r / (KS * KS);
    const int ky = (r / KS) % KS;
    const int kx = r % KS;
    const int oy = p / out_w;
    const int ox = p - oy * out_w;
    const int iy = oy * stride + ky - pad;
    const int ix = ox * stride + kx - pad;
    float v = 0.0f;
    if (iy >= 0 && iy < height && ix >= 0 && ix < width)
        v = in[(((long)img * channels + c) * height + iy) * width + ix];
    col[idx] = v;
}

#define CONV_KERNELS(KS)                                                                       \
    GF_KERNEL(256)                                                                             \
    void conv2d_direct_k##KS(const float *GF_RESTRICT in, const float *GF_RESTRICT w,          \
                             float *GF_RESTRICT out, int batch, int channels, int height,      \
                             int width, int filters, int stride, int pad, int out_h,           \
                             int out_w)                                                        \
    {                                                                                          \
        conv2d_direct<KS>(in, w, out, batch, channels, height, width, filters, stride, pad,    \
                          out_h, out_w);                                                       \
    }                                                                                          \
    GF_KERNEL(256)                                                                             \
    void im2col_k##KS(const float *GF_RESTRICT in, float *GF_RESTRICT col, int first,          \
                      int count, int channels, int height, int width, int stride, int pad,     \
                      int out_h, int out_w)                                                    \
    {                                                                                          \
        im2col<KS>(in, col, first, count, channels, height, width, stride, pad, out_h, out_w); \
    }

CONV_KERNELS(3)
CONV_KERNELS(5)
