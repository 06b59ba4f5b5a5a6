/*
 * llm.hip: the transformer's steps (kernels/src/llm), one kernel per step kind. Same semantics,
 * arguments and indexing as kernels/opencl/llm.cl, which documents each step; the hip planner
 * (agent/src/backend/hip/plan/llm.rs) passes the argument lists the OpenCL planner does. Every
 * tensor is a buffer and an element offset (int; the weights' offsets are long, past 2^31 for the
 * 8b shape). Arithmetic is f32; the weights W are float (`_f32`) or IEEE half (`_f16`, gf_half),
 * every other buffer (tokens, activations, tables, caches, outputs) is float.
 *
 * llm.cl's build-time parameters are fixed here; each kernel carries the block size the planner
 * launches it with:
 *   llm_embed_{f32,f16}(tokens, w, out, tok_off, tok_stride, table_off, out_off, rows, dim, vocab)
 *       256, grid-strided over rows·dim
 *   llm_rmsnorm_{f32,f16}(x, w, out, x_off, in_stride, g_off, out_off, rows, dim, eps)
 *       256, a block per row (blocks stride over the rows), tree sum in LDS
 *   llm_gemv_{f32,f16}(x, w, out, x_off, w_off, out_off, rows, k, n)
 *       64 (GEMV_WG): a block takes FEATS = 4 output features at once (grid-strided over n),
 *       ROWS = 8 input rows at a time, eight weights a load; the partial sums meet in LDS
 *   llm_matmul_{f32,f16}(x, w, out, x_off, w_off, out_off, rows, k, n)
 *       16×16 (launched as block (16, 16, 1), grid (ceil(n/64), ceil(rows/64), 1)): 64×64 tiles
 *       of rows × features, 4×4 outputs a work-item, k in steps of 16 through LDS
 *   llm_rope(x, table, out, x_off, t_off, q_off, k_off, v_off, rows, per_seq, pos0, heads,
 *            kv_heads, head_dim, positions, batch)                           256, grid-strided
 *   llm_attention_hd{32,64,128}  32 and llm_attention_hd256  16 (HEAD_DIM, ATT_WG):
 *            (q, kc, vc, out, part, q_off, k_off, v_off, out_off, rows, per_seq, pos0, heads,
 *             kv_heads, batch, scale, chunk, chunks)
 *       a block per (row, head) or, split along the sequence, per (row, head, chunk),
 *       grid-strided; each work-item an online softmax over every ATT_WG-th position, merged in
 *       LDS; a split's partials go to `part`
 *   llm_attention_merge(part, out, out_off, n, head_dim, chunks)             256, grid-strided
 *   llm_swiglu(x, out, x_off, out_off, rows, ffn), llm_add(a, b, out, a_off, b_off, out_off, n),
 *   llm_copy(src, dst, src_off, dst_off, n)                                  256, grid-strided
 *   llm_qembed_{q8,q4}(tokens, w, out, tok_off, tok_stride, v_off, s_off, out_off, rows, dim,
 *                      vocab)                                                256, grid-strided
 *   llm_qgemv_{q8,q4}(x, w, out, x_off, v_off, s_off, out_off, rows, k, n)  256, grid-strided
 *       quantized weights (kernels/src/quant.rs): a matrix's blocks' values from byte v_off, their
 *       f16 scales from byte s_off; a work-item per output feature over all rows (as llm.cl)
 *   llm_qmatmul_{q8,q4}(x, w, out, x_off, v_off, s_off, out_off, rows, k, n)
 *       llm_matmul's tiles and launch, each weight read from its block and scaled
 *
 * Differences from llm.cl that do not change a result: the gemv's eight-weight loads are 16-byte
 * vector loads (two float4 for f32 weights) only when the whole launch is aligned for them
 * (offsets and k multiples of 8, buffers 16-byte aligned), element loads otherwise, the same sums
 * either way; the LDS arrays a work-item writes a row of (the gemv's partial sums, the attention's
 * accumulators) have one float of padding a row against bank conflicts; the attention rescales
 * and accumulates as fma(p, v, acc·keep), which keeps acc[] in place (no spill at HEAD_DIM 128;
 * HEAD_DIM 256 spills on targets without AGPRs: 256 accumulators fill the register file).
 * Buffers may alias (the planner's arena holds activations, caches and outputs), so no pointer is
 * __restrict__.
 */

#include "common.h"

#define LLM_FLAT 256
#define LLM_GEMV_WG 64
#define LLM_FEATS 4
#define LLM_ROWS 8
#define LLM_MT 64
#define LLM_KT 16

typedef _Float16 gf_half8 __attribute__((ext_vector_type(8)));

template <typename W>
GF_DEVICE void llm_embed(const float *tokens, const W *w, float *out, int tok_off, int tok_stride,
                         long table_off, int out_off, int rows, int dim, int vocab)
{
    const int total = rows * dim;
    const int step = gf_num_groups_x() * LLM_FLAT;
    for (int i = (int)gf_global_x(); i < total; i += step) {
        const int r = i / dim, d = i % dim;
        const float t = tokens[tok_off + r * tok_stride];
        /* OpenCL's clamp: fmin(fmax(t, 0), vocab - 1), so NaN reads row 0. */
        const int tok = (int)__builtin_fminf(gf_fmax(t, 0.0f), (float)(vocab - 1));
        out[out_off + i] = (float)w[table_off + (long)tok * dim + d];
    }
}

/* Sum of v over the block of WG work-items (a power of two); everyone gets it. */
template <int WG> GF_DEVICE float llm_group_sum(float v, float *scratch)
{
    const int lid = gf_lid_x();
    scratch[lid] = v;
    gf_barrier();
#pragma unroll
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (lid < s)
            scratch[lid] += scratch[lid + s];
        gf_barrier();
    }
    const float sum = scratch[0];
    /* Nobody may overwrite scratch[0] before everyone has read it. */
    gf_barrier();
    return sum;
}

template <typename W>
GF_DEVICE void llm_rmsnorm(const float *x, const W *w, float *out, int x_off, int in_stride,
                           long g_off, int out_off, int rows, int dim, float eps)
{
    GF_SHARED float scratch[LLM_FLAT];
    const int lid = gf_lid_x();
    for (int r = gf_group_x(); r < rows; r += gf_num_groups_x()) {
        const float *row = x + x_off + r * in_stride;
        float ss = 0.0f;
        for (int d = lid; d < dim; d += LLM_FLAT)
            ss += row[d] * row[d];
        const float ms = llm_group_sum<LLM_FLAT>(ss, scratch) / (float)dim;
        const float rstd = 1.0f / __builtin_sqrtf(ms + eps);
        for (int d = lid; d < dim; d += LLM_FLAT)
            out[out_off + r * dim + d] = row[d] * rstd * (float)w[g_off + d];
    }
}

/* p[0..8) into v: one 16-byte load of 8 halves, two float4 loads, or 8 element loads. */
template <bool VEC> GF_DEVICE void llm_load8(const float *p, float *v)
{
    if (VEC) {
        const gf_float4 a = ((const gf_float4 *)p)[0];
        const gf_float4 b = ((const gf_float4 *)p)[1];
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
        v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else {
#pragma unroll
        for (int e = 0; e < 8; ++e)
            v[e] = p[e];
    }
}
template <bool VEC> GF_DEVICE void llm_load8(const gf_half *p, float *v)
{
    if (VEC) {
        const gf_half8 h = *(const gf_half8 *)p;
#pragma unroll
        for (int e = 0; e < 8; ++e)
            v[e] = (float)h[e];
    } else {
#pragma unroll
        for (int e = 0; e < 8; ++e)
            v[e] = (float)p[e];
    }
}

/* dot(a.lo, b.lo) + dot(a.hi, b.hi) of llm.cl's float8s. */
GF_DEVICE float llm_dot8(const float *a, const float *b)
{
    const float lo = a[0] * b[0] + a[1] * b[1] + a[2] * b[2] + a[3] * b[3];
    const float hi = a[4] * b[4] + a[5] * b[5] + a[6] * b[6] + a[7] * b[7];
    return lo + hi;
}

/* The gemv with VEC (aligned vector) or element loads; `part` is the block's LDS. */
template <typename W, bool VEC>
GF_DEVICE void llm_gemv_body(const float *x, const W *w, float *out, int x_off, long w_off,
                             int out_off, int rows, int k, int n,
                             float (*part)[LLM_GEMV_WG + 1])
{
    const int lid = gf_lid_x();
    const int k8 = k / 8;
    for (int j0 = gf_group_x() * LLM_FEATS; j0 < n; j0 += gf_num_groups_x() * LLM_FEATS) {
        for (int r0 = 0; r0 < rows; r0 += LLM_ROWS) {
            float acc[LLM_FEATS][LLM_ROWS];
#pragma unroll
            for (int f = 0; f < LLM_FEATS; ++f)
#pragma unroll
                for (int q = 0; q < LLM_ROWS; ++q)
                    acc[f][q] = 0.0f;
            for (int i8 = lid; i8 < k8; i8 += LLM_GEMV_WG) {
                float wv[LLM_FEATS][8];
#pragma unroll
                for (int f = 0; f < LLM_FEATS; ++f) {
                    if (j0 + f < n) {
                        llm_load8<VEC>(w + w_off + (long)(j0 + f) * k + 8 * i8, wv[f]);
                    } else {
#pragma unroll
                        for (int e = 0; e < 8; ++e)
                            wv[f][e] = 0.0f;
                    }
                }
#pragma unroll
                for (int q = 0; q < LLM_ROWS; ++q) {
                    if (r0 + q < rows) {
                        float xv[8];
                        llm_load8<VEC>(x + x_off + (r0 + q) * k + 8 * i8, xv);
#pragma unroll
                        for (int f = 0; f < LLM_FEATS; ++f)
                            acc[f][q] += llm_dot8(wv[f], xv);
                    }
                }
            }
            for (int i = 8 * k8 + lid; i < k; i += LLM_GEMV_WG) {
#pragma unroll
                for (int f = 0; f < LLM_FEATS; ++f) {
                    if (j0 + f < n) {
                        const float wf = (float)w[w_off + (long)(j0 + f) * k + i];
#pragma unroll
                        for (int q = 0; q < LLM_ROWS; ++q)
                            if (r0 + q < rows)
                                acc[f][q] += wf * x[x_off + (r0 + q) * k + i];
                    }
                }
            }
#pragma unroll
            for (int f = 0; f < LLM_FEATS; ++f)
#pragma unroll
                for (int q = 0; q < LLM_ROWS; ++q)
                    part[f * LLM_ROWS + q][lid] = acc[f][q];
            gf_barrier();
            for (int a = lid; a < LLM_FEATS * LLM_ROWS; a += LLM_GEMV_WG) {
                const int f = a / LLM_ROWS, q = a % LLM_ROWS;
                float sum = 0.0f;
#pragma unroll 8
                for (int t = 0; t < LLM_GEMV_WG; ++t)
                    sum += part[a][t];
                if (j0 + f < n && r0 + q < rows)
                    out[out_off + (r0 + q) * n + j0 + f] = sum;
            }
            gf_barrier();
        }
    }
}

template <typename W>
GF_DEVICE void llm_gemv(const float *x, const W *w, float *out, int x_off, long w_off,
                        int out_off, int rows, int k, int n)
{
    /* One float of padding a row: the final sums (work-item a reads row a) hit 32 banks, and
     * the stores stay at immediate offsets (an XOR swizzle instead kept 32 more VGPRs). */
    GF_SHARED float part[LLM_FEATS * LLM_ROWS][LLM_GEMV_WG + 1];
    /* Every weight row and x row starts on a multiple of 8 elements of a 16-byte aligned buffer:
     * the same for the whole launch, so the branch is uniform. */
    const bool vec = ((w_off | k | x_off) & 7) == 0 &&
                     (((__UINTPTR_TYPE__)w | (__UINTPTR_TYPE__)x) & 15) == 0;
    if (vec)
        llm_gemv_body<W, true>(x, w, out, x_off, w_off, out_off, rows, k, n, part);
    else
        llm_gemv_body<W, false>(x, w, out, x_off, w_off, out_off, rows, k, n, part);
}

/* Element (j, i) of a [n][k] matrix of W elements from element `off`, as a float: what
 * llm_matmul's tiles read (llm_qmatmul's reader is LlmBlocks, below). */
template <typename W> struct LlmElements {
    const W *w;
    long off;
    int k;
    GF_DEVICE_MEMBER float operator()(long j, int i) const { return (float)w[off + j * k + i]; }
};

/* out[r][j] = sum_i x[r][i] w(j, i) over 64×64 tiles, 16×16 work-items of 4×4 outputs each, k in
 * steps of LLM_KT through shared memory; `w` reads the matrix (LlmElements, LlmBlocks). */
template <typename R>
GF_DEVICE void llm_matmul(const float *x, R w, float *out, int x_off, int out_off, int rows, int k,
                          int n)
{
    GF_SHARED float xs[LLM_KT][LLM_MT + 1];
    GF_SHARED float ws[LLM_KT][LLM_MT + 1];
    const int tx = gf_lid_x(), ty = gf_lid_y();
    const int j0 = gf_group_x() * LLM_MT, r0 = gf_group_y() * LLM_MT;
    const int tid = ty * 16 + tx;
    float acc[4][4];
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b)
            acc[a][b] = 0.0f;
    for (int k0 = 0; k0 < k; k0 += LLM_KT) {
        /* 64×16 of each operand: 1024 elements, 4 per work-item, k fastest. */
#pragma unroll
        for (int l = 0; l < LLM_MT * LLM_KT / 256; ++l) {
            const int e = tid + 256 * l;
            const int row = e / LLM_KT, kk = e % LLM_KT;
            const int gk = k0 + kk;
            const int gr = r0 + row, gj = j0 + row;
            xs[kk][row] = (gr < rows && gk < k) ? x[x_off + (long)gr * k + gk] : 0.0f;
            ws[kk][row] = (gj < n && gk < k) ? w(gj, gk) : 0.0f;
        }
        gf_barrier();
#pragma unroll
        for (int kk = 0; kk < LLM_KT; ++kk) {
            float xv[4], wv[4];
#pragma unroll
            for (int a = 0; a < 4; ++a)
                xv[a] = xs[kk][ty + 16 * a];
#pragma unroll
            for (int b = 0; b < 4; ++b)
                wv[b] = ws[kk][tx + 16 * b];
#pragma unroll
            for (int a = 0; a < 4; ++a)
#pragma unroll
                for (int b = 0; b < 4; ++b)
                    acc[a][b] += xv[a] * wv[b];
        }
        gf_barrier();
    }
#pragma unroll
    for (int a = 0; a < 4; ++a) {
        const int r = r0 + ty + 16 * a;
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            const int j = j0 + tx + 16 * b;
            if (r < rows && j < n)
                out[out_off + (long)r * n + j] = acc[a][b];
        }
    }
}

GF_KERNEL(LLM_FLAT)
void llm_rope(const float *x, const float *table, float *out, int x_off, int t_off, int q_off,
              int k_off, int v_off, int rows, int per_seq, int pos0, int heads, int kv_heads,
              int head_dim, int positions, int batch)
{
    const int half_d = head_dim / 2;
    const int qd = heads * head_dim, kvd = kv_heads * head_dim;
    const int width = qd + 2 * kvd;
    const int total = rows * width;
    const int step = gf_num_groups_x() * LLM_FLAT;
    for (int i = (int)gf_global_x(); i < total; i += step) {
        const int r = i / width, c = i % width;
        const int seq = r / per_seq, pos = pos0 + r % per_seq;
        const float *row = x + x_off + r * width;
        float y;
        if (c < qd + kvd) {
            const int base = c / head_dim * head_dim, e = c % head_dim, p = e % half_d;
            const float cs = table[t_off + pos * half_d + p];
            const float sn = table[t_off + (positions + pos) * half_d + p];
            y = e < half_d ? row[c] * cs - row[base + e + half_d] * sn
                           : row[c] * cs + row[base + e - half_d] * sn;
        } else {
            y = row[c];
        }
        const int cache = (pos * batch + seq) * kvd;
        if (c < qd)
            out[q_off + r * qd + c] = y;
        else if (c < qd + kvd)
            out[k_off + cache + c - qd] = y;
        else
            out[v_off + cache + c - qd - kvd] = y;
    }
}

/* Causal attention over the cache: a block per (row, head), its ATT_WG work-items each taking
 * positions lid, lid + ATT_WG, ... ≤ pos with an online softmax (running max m, sum l and
 * weighted values acc, HEAD_DIM registers), merged through LDS at the end. Split along the
 * sequence (chunks > 1, flash-decoding): a block per (row, head, chunk) over the chunk's
 * positions c·chunk .. (c+1)·chunk - 1 (those ≤ pos), writing to `part` its unnormalised
 * weighted values, maximum score and sum (HEAD_DIM + 2 floats at
 * ((r·heads + h)·chunks + c)·(HEAD_DIM + 2)) for llm_attention_merge (as in llm.cl). */
template <int HEAD_DIM, int ATT_WG>
GF_DEVICE void llm_attention(const float *q, const float *kc, const float *vc, float *out,
                             float *part, int q_off, int k_off, int v_off, int out_off, int rows,
                             int per_seq, int pos0, int heads, int kv_heads, int batch,
                             float scale, int chunk, int chunks)
{
    GF_SHARED float qs[HEAD_DIM];
    GF_SHARED float ms[ATT_WG];
    GF_SHARED float ls[ATT_WG];
    GF_SHARED float accs[ATT_WG][HEAD_DIM + 1];
    const int lid = gf_lid_x();
    const int kvd = kv_heads * HEAD_DIM, qd = heads * HEAD_DIM;
    for (int task = gf_group_x(); task < rows * heads * chunks; task += gf_num_groups_x()) {
        const int rh = task / chunks, c = task % chunks;
        const int r = rh / heads, h = rh % heads;
        const int seq = r / per_seq, pos = pos0 + r % per_seq;
        const int g = h / (heads / kv_heads);
        /* This task's positions t0 .. end - 1 (0 .. pos unsplit). */
        const int t0 = chunks > 1 && c * chunk < pos + 1 ? c * chunk : (chunks > 1 ? pos + 1 : 0);
        const int end = chunks > 1 && t0 + chunk < pos + 1 ? t0 + chunk : pos + 1;
        for (int d = lid; d < HEAD_DIM; d += ATT_WG)
            qs[d] = q[q_off + r * qd + h * HEAD_DIM + d];
        gf_barrier();
        float m = -__builtin_inff(), l = 0.0f;
        float acc[HEAD_DIM];
#pragma unroll
        for (int d = 0; d < HEAD_DIM; ++d)
            acc[d] = 0.0f;
        for (int t = t0 + lid; t < end; t += ATT_WG) {
            const int at = (t * batch + seq) * kvd + g * HEAD_DIM;
            const float *kr = kc + k_off + at;
            const float *vr = vc + v_off + at;
            float s = 0.0f;
#pragma unroll 16
            for (int d = 0; d < HEAD_DIM; ++d)
                s += qs[d] * kr[d];
            s *= scale;
            const float m_new = gf_fmax(m, s);
            const float keep = gf_expf(m - m_new), p = gf_expf(s - m_new);
            l = l * keep + p;
            /* acc·keep + p·v as fma(p, v, acc·keep): acc is rescaled and accumulated in its own
             * register (v_mul, v_fmac), where the contraction fma(acc, keep, p·v) lands in a new
             * one and the divergent loop keeps both, spilling at HEAD_DIM 128. */
#pragma unroll
            for (int d = 0; d < HEAD_DIM; ++d)
                acc[d] = __builtin_fmaf(p, vr[d], acc[d] * keep);
            m = m_new;
        }
        ms[lid] = m;
        ls[lid] = l;
#pragma unroll
        for (int d = 0; d < HEAD_DIM; ++d)
            accs[lid][d] = acc[d];
        gf_barrier();
        float mx = -__builtin_inff();
        for (int i = 0; i < ATT_WG; ++i)
            mx = gf_fmax(mx, ms[i]);
        float denom = 0.0f;
        for (int i = 0; i < ATT_WG; ++i)
            denom += ls[i] > 0.0f ? ls[i] * gf_expf(ms[i] - mx) : 0.0f;
        float *pt = part + (long)task * (HEAD_DIM + 2);
        if (chunks > 1 && lid == 0) {
            pt[HEAD_DIM] = mx;
            pt[HEAD_DIM + 1] = denom;
        }
        for (int d = lid; d < HEAD_DIM; d += ATT_WG) {
            float y = 0.0f;
            for (int i = 0; i < ATT_WG; ++i)
                y += ls[i] > 0.0f ? accs[i][d] * gf_expf(ms[i] - mx) : 0.0f;
            if (chunks > 1)
                pt[d] = y;
            else
                out[out_off + r * qd + h * HEAD_DIM + d] = y / denom;
        }
        gf_barrier();
    }
}

/* The second half of a split llm_attention: each (row, head) task's chunks merged by
 * log-sum-exp, out[d] = Σ_c acc_c[d]·exp(m_c - M) / Σ_c l_c·exp(m_c - M), M = max_c m_c, an empty
 * chunk (l = 0) weighing 0; grid-stride over the n = rows·heads·head_dim outputs. */
GF_KERNEL(LLM_FLAT)
void llm_attention_merge(const float *part, float *out, int out_off, int n, int head_dim,
                         int chunks)
{
    const int w = head_dim + 2;
    const int step = gf_num_groups_x() * LLM_FLAT;
    for (int i = (int)gf_global_x(); i < n; i += step) {
        const int task = i / head_dim, d = i % head_dim;
        const float *p = part + (long)task * chunks * w;
        float mx = -__builtin_inff();
        for (int c = 0; c < chunks; ++c)
            mx = gf_fmax(mx, p[c * w + head_dim]);
        float num = 0.0f, den = 0.0f;
        for (int c = 0; c < chunks; ++c) {
            const float l = p[c * w + head_dim + 1];
            if (l > 0.0f) {
                const float e = gf_expf(p[c * w + head_dim] - mx);
                num += p[c * w + d] * e;
                den += l * e;
            }
        }
        out[out_off + i] = num / den;
    }
}

GF_KERNEL(LLM_FLAT)
void llm_swiglu(const float *x, float *out, int x_off, int out_off, int rows, int ffn)
{
    const int total = rows * ffn;
    const int step = gf_num_groups_x() * LLM_FLAT;
    for (int i = (int)gf_global_x(); i < total; i += step) {
        const int r = i / ffn, c = i % ffn;
        const float g = x[x_off + r * 2 * ffn + c], u = x[x_off + r * 2 * ffn + ffn + c];
        out[out_off + i] = g / (1.0f + gf_expf(-g)) * u;
    }
}

GF_KERNEL(LLM_FLAT)
void llm_add(const float *a, const float *b, float *out, int a_off, int b_off, int out_off, int n)
{
    const int step = gf_num_groups_x() * LLM_FLAT;
    for (int i = (int)gf_global_x(); i < n; i += step)
        out[out_off + i] = a[a_off + i] + b[b_off + i];
}

GF_KERNEL(LLM_FLAT)
void llm_copy(const float *src, float *dst, int src_off, int dst_off, int n)
{
    const int step = gf_num_groups_x() * LLM_FLAT;
    for (int i = (int)gf_global_x(); i < n; i += step)
        dst[dst_off + i] = src[src_off + i];
}

/* The weight-reading kernels, one per weight type. */
#define LLM_WEIGHT_KERNELS(W, SUF)                                                             \
    GF_KERNEL(LLM_FLAT)                                                                        \
    void llm_embed_##SUF(const float *tokens, const W *w, float *out, int tok_off,             \
                         int tok_stride, long table_off, int out_off, int rows, int dim,       \
                         int vocab)                                                            \
    {                                                                                          \
        llm_embed<W>(tokens, w, out, tok_off, tok_stride, table_off, out_off, rows, dim,       \
                     vocab);                                                                   \
    }                                                                                          \
    GF_KERNEL(LLM_FLAT)                                                                        \
    void llm_rmsnorm_##SUF(const float *x, const W *w, float *out, int x_off, int in_stride,   \
                           long g_off, int out_off, int rows, int dim, float eps)              \
    {                                                                                          \
        llm_rmsnorm<W>(x, w, out, x_off, in_stride, g_off, out_off, rows, dim, eps);           \
    }                                                                                          \
    GF_KERNEL(LLM_GEMV_WG)                                                                     \
    void llm_gemv_##SUF(const float *x, const W *w, float *out, int x_off, long w_off,         \
                        int out_off, int rows, int k, int n)                                   \
    {                                                                                          \
        llm_gemv<W>(x, w, out, x_off, w_off, out_off, rows, k, n);                             \
    }                                                                                          \
    GF_KERNEL(256)                                                                             \
    void llm_matmul_##SUF(const float *x, const W *w, float *out, int x_off, long w_off,       \
                          int out_off, int rows, int k, int n)                                 \
    {                                                                                          \
        llm_matmul(x, LlmElements<W>{w, w_off, k}, out, x_off, out_off, rows, k, n);           \
    }

LLM_WEIGHT_KERNELS(float, f32)
LLM_WEIGHT_KERNELS(gf_half, f16)

/* Block b's scale of a quantized matrix whose scales start at byte s_off. */
GF_DEVICE float llm_qscale(const unsigned char *w, long s_off, long b)
{
    return (float)((const gf_half *)(w + s_off))[b];
}

/* Weight i (0..31) of block b: Q8_0 a signed byte, Q4_0 a nibble (byte i % 16, low for i < 16)
 * less 8. */
template <int BITS> GF_DEVICE float llm_qvalue(const unsigned char *w, long v_off, long b, int i)
{
    if (BITS == 8)
        return (float)((const signed char *)(w + v_off))[b * 32 + i];
    const unsigned char v = w[v_off + b * 16 + (i & 15)];
    return (float)((i < 16 ? v & 15 : v >> 4) - 8);
}

/* Element (j, i) of a [n][k] matrix in Q8_0 / Q4_0 blocks (values at byte v_off, scales at s_off),
 * scaled: llm_qmatmul's reader, and llm_qembed's table row. */
template <int BITS> struct LlmBlocks {
    const unsigned char *w;
    long v_off, s_off;
    int k;
    GF_DEVICE_MEMBER float operator()(long j, int i) const
    {
        const long e = j * k + i;
        return llm_qvalue<BITS>(w, v_off, e / 32, (int)(e % 32)) * llm_qscale(w, s_off, e / 32);
    }
};

template <int BITS>
GF_DEVICE void llm_qembed(const float *tokens, const unsigned char *w, float *out, int tok_off,
                          int tok_stride, long v_off, long s_off, int out_off, int rows, int dim,
                          int vocab)
{
    const int total = rows * dim;
    const int step = gf_num_groups_x() * LLM_FLAT;
    for (int i = (int)gf_global_x(); i < total; i += step) {
        const int r = i / dim, d = i % dim;
        const float t = tokens[tok_off + r * tok_stride];
        const int tok = (int)__builtin_fminf(gf_fmax(t, 0.0f), (float)(vocab - 1));
        out[out_off + i] = LlmBlocks<BITS>{w, v_off, s_off, dim}(tok, d);
    }
}

template <int BITS>
GF_DEVICE void llm_qgemv(const float *x, const unsigned char *w, float *out, int x_off, long v_off,
                         long s_off, int out_off, int rows, int k, int n)
{
    const int nb = k / 32;
    const int step = gf_num_groups_x() * LLM_FLAT;
    for (int j = (int)gf_global_x(); j < n; j += step) {
        for (int r = 0; r < rows; ++r) {
            const float *xr = x + x_off + r * k;
            float acc = 0.0f;
            for (int b = 0; b < nb; ++b) {
                const long blk = (long)j * nb + b;
                float s = 0.0f;
                for (int i = 0; i < 32; ++i)
                    s += llm_qvalue<BITS>(w, v_off, blk, i) * xr[b * 32 + i];
                acc += s * llm_qscale(w, s_off, blk);
            }
            out[out_off + r * n + j] = acc;
        }
    }
}

#define LLM_QUANT_KERNELS(BITS, SUF)                                                           \
    GF_KERNEL(LLM_FLAT)                                                                        \
    void llm_qembed_##SUF(const float *tokens, const unsigned char *w, float *out, int tok_off,\
                          int tok_stride, long v_off, long s_off, int out_off, int rows,       \
                          int dim, int vocab)                                                  \
    {                                                                                          \
        llm_qembed<BITS>(tokens, w, out, tok_off, tok_stride, v_off, s_off, out_off, rows,     \
                         dim, vocab);                                                          \
    }                                                                                          \
    GF_KERNEL(LLM_FLAT)                                                                        \
    void llm_qgemv_##SUF(const float *x, const unsigned char *w, float *out, int x_off,        \
                         long v_off, long s_off, int out_off, int rows, int k, int n)          \
    {                                                                                          \
        llm_qgemv<BITS>(x, w, out, x_off, v_off, s_off, out_off, rows, k, n);                  \
    }                                                                                          \
    GF_KERNEL(256)                                                                             \
    void llm_qmatmul_##SUF(const float *x, const unsigned char *w, float *out, int x_off,      \
                           long v_off, long s_off, int out_off, int rows, int k, int n)        \
    {                                                                                          \
        llm_matmul(x, LlmBlocks<BITS>{w, v_off, s_off, k}, out, x_off, out_off, rows, k, n);    \
    }

LLM_QUANT_KERNELS(8, q8)
LLM_QUANT_KERNELS(4, q4)

/* One attention kernel per head width: HEAD_DIM, ATT_WG. */
#define LLM_ATTENTION_KERNEL(HD, WG)                                                           \
    GF_KERNEL(WG)                                                                              \
    void llm_attention_hd##HD(const float *q, const float *kc, const float *vc, float *out,    \
                              float *part, int q_off, int k_off, int v_off, int out_off,       \
                              int rows, int per_seq, int pos0, int heads, int kv_heads,        \
                              int batch, float scale, int chunk, int chunks)                   \
    {                                                                                          \
        llm_attention<HD, WG>(q, kc, vc, out, part, q_off, k_off, v_off, out_off, rows,        \
                              per_seq, pos0, heads, kv_heads, batch, scale, chunk, chunks);    \
    }

LLM_ATTENTION_KERNEL(32, 32)
LLM_ATTENTION_KERNEL(64, 32)
LLM_ATTENTION_KERNEL(128, 32)
LLM_ATTENTION_KERNEL(256, 16)
