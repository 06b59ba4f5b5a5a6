/*
 * model.hip: the layers of a CNN (simple_cnn, resnet18, mobilenet_v2 and the cnn_* layer kernels).
 * Same semantics and arguments as kernels/opencl/model.cl, which documents both kernels and the op
 * codes; agent/src/backend/planning/model.rs plans the launches for all three GPU backends.
 *
 *   model_layer(x, w, out, s, op, total, x_off, w_off, b_off, s_off, out_off, cin, h, wd, cout,
 *               oh, ow, k, stride, pad, groups, act)
 *       grid-strides over `total` outputs: op 0 grouped/depthwise (or, on a device without
 *       model_conv, dense) convolution, 1 max-pool, 2 global average pool, 3 residual add,
 *       4 the sum of `groups` partial sums of a split model_conv; then bias and act
 *   model_conv(x, w, out, part, x_off, w_off, b_off, out_off, cin, h, wd, cout, oh, ow, k, stride,
 *              pad, act, ncols, kdim, k_chunk, splits)
 *       a dense convolution or linear layer as an implicit GEMM: block (n, m, s) owns the 64×64
 *       tile (m, n) of C[co][col] over the s-th chunk of the dot products, 4×4 outputs per
 *       work-item; NCHW with bias and act when unsplit, raw partial sums part[s][co][col] when
 *       split.
 * Both run in blocks of 256 work-items; offsets are elements, `long` where they can pass 2^31.
 *
 * The f16 dtype runs model_layer_f16 and model_conv_f16 (same arguments): the images, the weights
 * and the arena (out, and s, the residual operand in it) are IEEE half (gf_half), while
 * model_conv's partial sums `part` stay float, and so does model_layer's x for op 4, which the
 * planner binds to them. The arithmetic is float in both dtypes: loads widen to float (model_conv's
 * LDS tiles are float), and a result is rounded to half once, when stored. Each kernel is one
 * template on the storage type T with an extern "C" instantiation per dtype.
 */

#include "common.h"

GF_DEVICE float model_act(float v, int act)
{
    if (act == 1)
        return gf_fmax(v, 0.0f);
    if (act == 2)
        return __builtin_fminf(gf_fmax(v, 0.0f), 6.0f);
    return v;
}

template <typename T>
GF_DEVICE void model_layer_body(const T *x, const T *w, T *out, const T *s, int op, int total,
                                int x_off, int w_off, int b_off, int s_off, int out_off, int cin,
                                int h, int wd, int cout, int oh, int ow, int k, int stride,
                                int pad, int groups, int act)
{
    const int step = gf_num_groups_x() * gf_group_size_x();
    for (int i = (int)gf_global_x(); i < total; i += step) {
        float r;
        if (op == 3) {
            r = model_act((float)x[x_off + i] + (float)s[s_off + i], act);
        } else if (op == 4) {
            const int plane = oh * ow;
            const int co = (i / plane) % cout;
            const int col = (i / (plane * cout)) * plane + i % plane;
            const int ncols = total / cout;
            /* x is the split model_conv's partial sums, float whatever T is. */
            const float *part = (const float *)x;
            float acc = (float)w[b_off + co];
            for (int sp = 0; sp < groups; ++sp)
                acc += part[x_off + ((long)sp * cout + co) * ncols + col];
            r = model_act(acc, act);
        } else if (op == 2) {
            const int plane = h * wd;
            const T *p = x + x_off + (long)i * plane;
            float acc = 0.0f;
            for (int j = 0; j < plane; ++j)
                acc += (float)p[j];
            r = acc / (float)plane;
        } else {
            const int ox = i % ow;
            const int oy = (i / ow) % oh;
            const int co = (i / (ow * oh)) % cout;
            const int n = i / (ow * oh * cout);
            const int iy0 = oy * stride - pad;
            const int ix0 = ox * stride - pad;
            if (op == 1) {
                const T *p = x + x_off + ((long)n * cin + co) * h * wd;
                float m = -__builtin_inff();
                for (int ky = 0; ky < k; ++ky) {
                    const int iy = iy0 + ky;
                    if (iy < 0 || iy >= h)
                        continue;
                    for (int kx = 0; kx < k; ++kx) {
                        const int ix = ix0 + kx;
                        if (ix >= 0 && ix < wd)
                            m = gf_fmax(m, (float)p[iy * wd + ix]);
                    }
                }
                r = m;
            } else {
                const int cin_g = cin / groups;
                const int g = co / (cout / groups);
                const T *f = w + w_off + (long)co * cin_g * k * k;
                const T *p = x + x_off + ((long)n * cin + g * cin_g) * h * wd;
                float acc = 0.0f;
                for (int ci = 0; ci < cin_g; ++ci) {
                    for (int ky = 0; ky < k; ++ky) {
                        const int iy = iy0 + ky;
                        if (iy < 0 || iy >= h)
                            continue;
                        for (int kx = 0; kx < k; ++kx) {
                            const int ix = ix0 + kx;
                            if (ix >= 0 && ix < wd)
                                acc += (float)f[(ci * k + ky) * k + kx] *
                                       (float)p[(long)ci * h * wd + iy * wd + ix];
                        }
                    }
                }
                r = model_act(acc + (float)w[b_off + co], act);
            }
        }
        out[out_off + i] = (T)r;
    }
}

#define MC_TM 64
#define MC_TN 64
#define MC_TK 16

template <typename T>
GF_DEVICE void model_conv_body(const T *x, const T *w, T *out, float *part, int x_off, int w_off,
                               int b_off, int out_off, int cin, int h, int wd, int cout, int oh,
                               int ow, int k, int stride, int pad, int act, int ncols, int kdim,
                               int k_chunk, int splits)
{
    GF_SHARED float as[MC_TK][MC_TM];
    GF_SHARED float bs[MC_TK][MC_TN];
    const int t = gf_lid_x();
    const int n0 = gf_group_x() * MC_TN;
    const int m0 = gf_group_y() * MC_TM;
    const int split = gf_group_z();
    const int kbeg = split * k_chunk;
    const int kend = kdim < kbeg + k_chunk ? kdim : kbeg + k_chunk;
    const int plane = oh * ow;
    const int taps = k * k;
    const int tm = t / 16;
    const int tn = t % 16;
    const int am = t / 4;
    const int ak = (t % 4) * 4;
    const int nn = t % MC_TN;
    const int col = n0 + nn;
    const bool colok = col < ncols;
    int img = 0, iy0 = 0, ix0 = 0;
    if (colok) {
        img = col / plane;
        const int p = col - img * plane;
        iy0 = (p / ow) * stride - pad;
        ix0 = (p % ow) * stride - pad;
    }
    const T *xi = x + x_off + (long)img * cin * h * wd;
    const T *wr = w + w_off + (long)(m0 + am) * kdim;
    const bool rowok = m0 + am < cout;
    float acc[4][4];
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j)
            acc[i][j] = 0.0f;
    for (int k0 = kbeg; k0 < kend; k0 += MC_TK) {
        for (int j = 0; j < 4; ++j) {
            const int kidx = k0 + ak + j;
            as[ak + j][am] = (rowok && kidx < kend) ? (float)wr[kidx] : 0.0f;
        }
        for (int j = 0; j < 4; ++j) {
            const int kk = t / MC_TN + 4 * j;
            const int kidx = k0 + kk;
            float v = 0.0f;
            if (colok && kidx < kend) {
                const int ci = kidx / taps;
                const int r = kidx - ci * taps;
                const int ky = r / k;
                const int iy = iy0 + ky;
                const int ix = ix0 + r - ky * k;
                if (iy >= 0 && iy < h && ix >= 0 && ix < wd)
                    v = (float)xi[(ci * h + iy) * wd + ix];
            }
            bs[kk][nn] = v;
        }
        gf_barrier();
        for (int kk = 0; kk < MC_TK; ++kk) {
            float a[4], b[4];
            for (int i = 0; i < 4; ++i)
                a[i] = as[kk][tm + 16 * i];
            for (int j = 0; j < 4; ++j)
                b[j] = bs[kk][tn + 16 * j];
            for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 4; ++j)
                    acc[i][j] = __builtin_fmaf(a[i], b[j], acc[i][j]);
        }
        gf_barrier();
    }
    for (int i = 0; i < 4; ++i) {
        const int co = m0 + tm + 16 * i;
        if (co >= cout)
            continue;
        for (int j = 0; j < 4; ++j) {
            const int c = n0 + tn + 16 * j;
            if (c >= ncols)
                continue;
            if (splits == 1) {
                const int n = c / plane;
                out[out_off + ((long)n * cout + co) * plane + (c - n * plane)] =
                    (T)model_act(acc[i][j] + (float)w[b_off + co], act);
            } else {
                part[((long)split * cout + co) * ncols + c] = acc[i][j];
            }
        }
    }
}

/* The kernels of one storage type T, their names ending in SUF: float keeps the bare names. */
#define MODEL_KERNELS(T, SUF)                                                                  \
    GF_KERNEL(256)                                                                             \
    void model_layer##SUF(const T *x, const T *w, T *out, const T *s, int op, int total,       \
                          int x_off, int w_off, int b_off, int s_off, int out_off, int cin,    \
                          int h, int wd, int cout, int oh, int ow, int k, int stride, int pad, \
                          int groups, int act)                                                 \
    {                                                                                          \
        model_layer_body<T>(x, w, out, s, op, total, x_off, w_off, b_off, s_off, out_off, cin, \
                            h, wd, cout, oh, ow, k, stride, pad, groups, act);                 \
    }                                                                                          \
    GF_KERNEL(256)                                                                             \
    void model_conv##SUF(const T *x, const T *w, T *out, float *part, int x_off, int w_off,    \
                         int b_off, int out_off, int cin, int h, int wd, int cout, int oh,     \
                         int ow, int k, int stride, int pad, int act, int ncols, int kdim,     \
                         int k_chunk, int splits)                                              \
    {                                                                                          \
        model_conv_body<T>(x, w, out, part, x_off, w_off, b_off, out_off, cin, h, wd, cout,    \
                           oh, ow, k, stride, pad, act, ncols, kdim, k_chunk, splits);         \
    }

MODEL_KERNELS(float, )
MODEL_KERNELS(gf_half, _f16)
