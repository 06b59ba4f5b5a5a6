/* model.cl: the layers of a CNN (simple_cnn, resnet18, mobilenet_v2), launched in order by the
 * planner (agent/src/backend/planning/model.rs documents the arguments). Tensors are NCHW f32;
 * `x` is the layer's input (the images, the arena, or the partial sums of a split convolution),
 * `w` the weights buffer (filters then biases), `out` the arena written at out_off. Offsets are in
 * elements.
 *
 * Tensors are f32, or IEEE half with -DHALF (below).
 *
 * model_conv: a dense convolution (groups = 1; a linear layer is the 1×1 convolution of a 1×1
 * image with cin = its input length) as an implicit GEMM, C[co][col] = Σ_kk W[co][kk]·X[kk][col]
 * with col = image·oh·ow + output pixel and kk = (ci, ky, kx): the im2col matrix X is never
 * stored, each 16×64 slice of it is gathered (zero padding) straight into local memory next to a
 * 64×16 slice of W, and 256 work-items keep 4×4 outputs each in registers. Group (n, m, s) owns
 * the 64×64 tile (m, n) of C over the s-th chunk of kk: with one chunk it adds the bias, applies
 * the activation and writes NCHW; with several (few tiles on a GPU of many compute units) it
 * writes raw partial sums part[s][co][col] and a model_layer op 4 launch reduces them.
 *
 * model_layer grid-strides over `total` outputs of the other layers:
 * op 0 conv:    grouped/depthwise, out[n][co][oy][ox] = act(b[co] + Σ w[co][ci][ky][kx]·x[..])
 * op 1 maxpool: max over the k×k window (padding never wins)
 * op 2 avgpool: mean of each h×w plane (out is cout×1×1)
 * op 3 add:     act(x[i] + s[i])
 * op 4 reduce:  act(b[co] + Σ_{s < groups} x[s][co][col]), the partial sums of a split model_conv
 * act: 0 none, 1 relu, 2 relu6.
 */

#ifndef GPUFLEET_WG
#define GPUFLEET_WG 256
#endif

/* HALF (the f16 dtype): the images, the weights and the arena (x, w, out, s) hold IEEE halves,
 * read with vload_half and written with vstore_half_rte (OpenCL C 1.1 core, no cl_khr_fp16
 * needed); the arithmetic and the partial sums of a split model_conv stay float, so op 4 reads
 * its x as floats. Each output is rounded once, when stored. */
#ifdef HALF
#define ELEM half
#define LOAD(p, i) vload_half((size_t)(i), (p))
#define STORE(p, i, v) vstore_half_rte((v), (size_t)(i), (p))
#else
#define ELEM float
#define LOAD(p, i) ((p)[i])
#define STORE(p, i, v) ((p)[i] = (v))
#endif

float model_act(float v, int act)
{
    if (act == 1)
        return fmax(v, 0.0f);
    if (act == 2)
        return fmin(fmax(v, 0.0f), 6.0f);
    return v;
}

/* Runs `tap` for each tap (ky, kx) of the k×k window at (iy0, ix0) that lies inside the h×wd
 * plane, with iy and ix its row and column: the loops max-pooling and the grouped convolution
 * share. */
#define WINDOW_TAPS(tap)                                                                       \
    for (int ky = 0; ky < k; ++ky) {                                                           \
        const int iy = iy0 + ky;                                                               \
        if (iy < 0 || iy >= h)                                                                 \
            continue;                                                                          \
        for (int kx = 0; kx < k; ++kx) {                                                       \
            const int ix = ix0 + kx;                                                           \
            if (ix >= 0 && ix < wd)                                                            \
                tap;                                                                           \
        }                                                                                      \
    }

__kernel __attribute__((reqd_work_group_size(GPUFLEET_WG, 1, 1)))
void model_layer(__global const ELEM *x, __global const ELEM *w, __global ELEM *out,
                 __global const ELEM *s, int op, int total, int x_off, int w_off, int b_off,
                 int s_off, int out_off, int cin, int h, int wd, int cout, int oh, int ow, int k,
                 int stride, int pad, int groups, int act)
{
    const int step = (int)get_global_size(0);
    for (int i = (int)get_global_id(0); i < total; i += step) {
        float r;
        if (op == 3) {
            r = model_act(LOAD(x, x_off + i) + LOAD(s, s_off + i), act);
        } else if (op == 4) {
            const int plane = oh * ow;
            const int co = (i / plane) % cout;
            const int col = (i / (plane * cout)) * plane + i % plane;
            const int ncols = total / cout;
            __global const float *part = (__global const float *)x;
            float acc = LOAD(w, b_off + co);
            for (int sp = 0; sp < groups; ++sp)
                acc += part[x_off + ((long)sp * cout + co) * ncols + col];
            r = model_act(acc, act);
        } else if (op == 2) {
            const int plane = h * wd;
            __global const ELEM *p = x + x_off + (long)i * plane;
            float acc = 0.0f;
            for (int j = 0; j < plane; ++j)
                acc += LOAD(p, j);
            r = acc / (float)plane;
        } else {
            const int ox = i % ow;
            const int oy = (i / ow) % oh;
            const int co = (i / (ow * oh)) % cout;
            const int n = i / (ow * oh * cout);
            const int iy0 = oy * stride - pad;
            const int ix0 = ox * stride - pad;
            if (op == 1) {
                __global const ELEM *p = x + x_off + ((long)n * cin + co) * h * wd;
                float m = -INFINITY;
                WINDOW_TAPS(m = fmax(m, LOAD(p, iy * wd + ix)))
                r = m;
            } else {
                const int cin_g = cin / groups;
                const int g = co / (cout / groups);
                __global const ELEM *f = w + w_off + (long)co * cin_g * k * k;
                __global const ELEM *p = x + x_off + ((long)n * cin + g * cin_g) * h * wd;
                float acc = 0.0f;
                for (int ci = 0; ci < cin_g; ++ci) {
                    WINDOW_TAPS(acc += LOAD(f, (ci * k + ky) * k + kx) *
                                       LOAD(p, (long)ci * h * wd + iy * wd + ix))
                }
                r = model_act(acc + LOAD(w, b_off + co), act);
            }
        }
        STORE(out, out_off + i, r);
    }
}

#define MC_TM 64
#define MC_TN 64
#define MC_TK 16

__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void model_conv(__global const ELEM *x, __global const ELEM *w, __global ELEM *out,
                __global float *part, int x_off, int w_off, int b_off, int out_off, int cin, int h,
                int wd, int cout, int oh, int ow, int k, int stride, int pad, int act, int ncols,
                int kdim, int k_chunk, int splits)
{
    __local float as[MC_TK][MC_TM];
    __local float bs[MC_TK][MC_TN];
    const int t = (int)get_local_id(0);
    const int n0 = (int)get_group_id(0) * MC_TN;
    const int m0 = (int)get_group_id(1) * MC_TM;
    const int split = (int)get_group_id(2);
    const int kbeg = split * k_chunk;
    const int kend = min(kdim, kbeg + k_chunk);
    const int plane = oh * ow;
    const int taps = k * k;
    /* This work-item's outputs: rows tm + 16·i, columns tn + 16·j of the tile. */
    const int tm = t / 16;
    const int tn = t % 16;
    /* Its share of the loads: W row am, columns ak..ak+3; X column nn, rows t/64 + 4·j. */
    const int am = t / 4;
    const int ak = (t % 4) * 4;
    const int nn = t % MC_TN;
    const int col = n0 + nn;
    const int colok = col < ncols;
    int img = 0, iy0 = 0, ix0 = 0;
    if (colok) {
        img = col / plane;
        const int p = col - img * plane;
        iy0 = (p / ow) * stride - pad;
        ix0 = (p % ow) * stride - pad;
    }
    __global const ELEM *xi = x + x_off + (long)img * cin * h * wd;
    __global const ELEM *wr = w + w_off + (long)(m0 + am) * kdim;
    const int rowok = m0 + am < cout;
    float acc[4][4];
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j)
            acc[i][j] = 0.0f;
    for (int k0 = kbeg; k0 < kend; k0 += MC_TK) {
        for (int j = 0; j < 4; ++j) {
            const int kidx = k0 + ak + j;
            as[ak + j][am] = (rowok && kidx < kend) ? LOAD(wr, kidx) : 0.0f;
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
                    v = LOAD(xi, (ci * h + iy) * wd + ix);
            }
            bs[kk][nn] = v;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int kk = 0; kk < MC_TK; ++kk) {
            float a[4], b[4];
            for (int i = 0; i < 4; ++i)
                a[i] = as[kk][tm + 16 * i];
            for (int j = 0; j < 4; ++j)
                b[j] = bs[kk][tn + 16 * j];
            for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 4; ++j)
                    acc[i][j] = fma(a[i], b[j], acc[i][j]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
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
                STORE(out, out_off + ((long)n * cout + co) * plane + (c - n * plane),
                      model_act(acc[i][j] + LOAD(w, b_off + co), act));
            } else {
                part[((long)split * cout + co) * ncols + c] = acc[i][j];
            }
        }
    }
}
