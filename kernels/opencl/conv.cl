/*
 * conv.cl: 2-D convolution, NCHW input (batch × channels × height × width), KCRS weights
 * (filters × channels × KS × KS), zero padding, the same stride in both directions; the output is
 * batch × filters × out_h × out_w.
 *
 * Written for `-cl-std=CL1.1`. Two ways:
 *   conv2d_direct  one work-item per output element, looping over channels and the filter window.
 *   im2col         unfolds images into column matrices col[img][(c·KS + ky)·KS + kx][oy·out_w + ox]
 *                  (zeros where the window hangs over the padding); the planner appends gemm.cl to
 *                  this file and multiplies weights (filters × channels·KS²) by each image's column
 *                  matrix with gemm_blocked, whose batch arguments place image i's product at
 *                  output image i.
 * Shapes are `int` arguments; flat indices that can pass 2^31 are computed in `long`.
 *
 * Build parameters (-D):
 *   GPUFLEET_KSIZE   the filter size KS (3 or 5), so the window loops unroll
 */

#ifndef GPUFLEET_KSIZE
#define GPUFLEET_KSIZE 3
#endif
#define KS GPUFLEET_KSIZE

__kernel void conv2d_direct(__global const float *restrict in, __global const float *restrict w,
                            __global float *restrict out, int batch, int channels, int height,
                            int width, int filters, int stride, int pad, int out_h, int out_w)
{
    const long idx = (long)get_global_id(0);
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
    __global const float *img = in + (long)b * channels * in_plane;
    __global const float *wf = w + (long)f * channels * (KS * KS);
    float acc = 0.0f;
    for (int c = 0; c < channels; ++c) {
        __global const float *ip = img + (long)c * in_plane;
        __global const float *wc = wf + c * (KS * KS);
#pragma unroll
        for (int ky = 0; ky < KS; ++ky) {
            const int iy = iy0 + ky;
            if (iy < 0 || iy >= height)
                continue;
            __global const float *irow = ip + (long)iy * width;
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

/* Column matrices of images first .. first + count - 1, one element per work-item. */
__kernel void im2col(__global const float *restrict in, __global float *restrict col, int first,
                     int count, int channels, int height, int width, int stride, int pad,
                     int out_h, int out_w)
{
    const long idx = (long)get_global_id(0);
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
