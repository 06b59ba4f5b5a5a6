/* The transformer's steps (kernels/src/llm): one kernel per step kind, every tensor a buffer and
 * an element offset (int arguments; the weights' offsets are long, past 2^31 for the 8b shape), in the order agent/src/backend/opencl/plan/llm.rs passes them.
 * OpenCL C 1.1: fp16 weights (-D W_HALF) are read with vload_half, which needs no cl_khr_fp16;
 * all arithmetic is f32.
 *
 * Build-time parameters:
 *   WG         work-items of an rmsnorm group, a power of two
 *   GEMV_WG    work-items of a gemv group, a power of two
 *   ROWS       rows a gemv group accumulates at once (its private accumulators)
 *   TEAM       work-items a llm_gemv_team feature takes (a power of two, at most GEMV_WG)
 *   HEAD_DIM   the attention's head width (its private accumulator), even
 *   ATT_WG     work-items of an attention group (one row and head each)
 *   W_HALF     weights stored as IEEE half
 */

#ifdef W_HALF
#define WTYPE half
#define LOADW(p, i) vload_half((i), (p))
#define LOADW4(p, i) vload_half4((i), (p))
#define LOADW8(p, i) vload_half8((i), (p))
#else
#define WTYPE float
#define LOADW(p, i) ((p)[(i)])
#define LOADW4(p, i) vload4((i), (p))
#define LOADW8(p, i) vload8((i), (p))
#endif

/* out[r][d] = table[tok(r)][d], tok(r) = tokens[tok_off + r*tok_stride] clamped into the table. */
__kernel void llm_embed(__global const float *tokens, __global const WTYPE *w, __global float *out,
                        int tok_off, int tok_stride, long table_off, int out_off, int rows, int dim,
                        int vocab)
{
    int total = rows * dim;
    for (int i = get_global_id(0); i < total; i += get_global_size(0)) {
        int r = i / dim, d = i % dim;
        float t = tokens[tok_off + r * tok_stride];
        int tok = (int)clamp(t, 0.0f, (float)(vocab - 1));
        out[out_off + i] = LOADW(w, table_off + (long)tok * dim + d);
    }
}

/* Sums `v` over the group (`wg` work-items, a power of two) through `scratch`; every work-item
 * gets the sum. */
float group_sum(float v, __local float *scratch, int wg)
{
    int lid = get_local_id(0);
    scratch[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = wg / 2; s > 0; s >>= 1) {
        if (lid < s)
            scratch[lid] += scratch[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float sum = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return sum;
}

/* One group per row: out[r] = x[r] / rms(x[r]) * gamma, row r of x at x_off + r*in_stride. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
llm_rmsnorm(__global const float *x, __global const WTYPE *w, __global float *out, int x_off,
            int in_stride, long g_off, int out_off, int rows, int dim, float eps)
{
    __local float scratch[WG];
    int lid = get_local_id(0);
    for (int r = get_group_id(0); r < rows; r += get_num_groups(0)) {
        __global const float *row = x + x_off + r * in_stride;
        float ss = 0.0f;
        for (int d = lid; d < dim; d += WG)
            ss += row[d] * row[d];
        float ms = group_sum(ss, scratch, WG) / (float)dim;
        float rstd = 1.0f / sqrt(ms + eps);
        for (int d = lid; d < dim; d += WG)
            out[out_off + r * dim + d] = row[d] * rstd * LOADW(w, g_off + d);
    }
}

/* Few rows (decode) on a GPU: a group takes FEATS output features at once (grid-strided), its
 * GEMV_WG work-items splitting their k-long weight rows eight weights a load (16 bytes in f16),
 * each weight read once for ROWS input rows at a time. The FEATS x ROWS partial sums of every
 * work-item meet in local memory and are added up by one work-item each: two barriers a block. */
#define FEATS 4
__kernel __attribute__((reqd_work_group_size(GEMV_WG, 1, 1))) void
llm_gemv(__global const float *x, __global const WTYPE *w, __global float *out, int x_off,
         long w_off, int out_off, int rows, int k, int n)
{
    __local float part[FEATS * ROWS][GEMV_WG];
    int lid = get_local_id(0);
    int k8 = k / 8;
    for (int j0 = get_group_id(0) * FEATS; j0 < n; j0 += get_num_groups(0) * FEATS) {
        for (int r0 = 0; r0 < rows; r0 += ROWS) {
            float acc[FEATS][ROWS];
            for (int f = 0; f < FEATS; f++)
                for (int q = 0; q < ROWS; q++)
                    acc[f][q] = 0.0f;
            for (int i8 = lid; i8 < k8; i8 += GEMV_WG) {
                float8 wv[FEATS];
                for (int f = 0; f < FEATS; f++)
                    wv[f] = j0 + f < n ? LOADW8(w + w_off + (long)(j0 + f) * k, i8) : (float8)(0.0f);
                for (int q = 0; q < ROWS; q++) {
                    if (r0 + q < rows) {
                        float8 xv = vload8(i8, x + x_off + (r0 + q) * k);
                        for (int f = 0; f < FEATS; f++)
                            acc[f][q] += dot(wv[f].lo, xv.lo) + dot(wv[f].hi, xv.hi);
                    }
                }
            }
            for (int i = 8 * k8 + lid; i < k; i += GEMV_WG)
                for (int f = 0; f < FEATS && j0 + f < n; f++) {
                    float wv = LOADW(w, w_off + (long)(j0 + f) * k + i);
                    for (int q = 0; q < ROWS; q++)
                        if (r0 + q < rows)
                            acc[f][q] += wv * x[x_off + (r0 + q) * k + i];
                }
            for (int f = 0; f < FEATS; f++)
                for (int q = 0; q < ROWS; q++)
                    part[f * ROWS + q][lid] = acc[f][q];
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int a = lid; a < FEATS * ROWS; a += GEMV_WG) {
                int f = a / ROWS, q = a % ROWS;
                float sum = 0.0f;
                for (int t = 0; t < GEMV_WG; t++)
                    sum += part[a][t];
                if (j0 + f < n && r0 + q < rows)
                    out[out_off + (r0 + q) * n + j0 + f] = sum;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
}

/* Few rows (decode) on a GPU, by teams: a group's GEMV_WG work-items are GEMV_WG/TEAM teams of TEAM,
 * a team per output feature (grid-strided over n), its work-items reading the weight row eight
 * weights a load (TEAM·16 contiguous bytes a step in f16), each weight once for ROWS input rows at
 * a time. A team's partial sums meet in local memory and one work-item a row adds its TEAM of them:
 * a short sum, where one group of four features had one work-item add GEMV_WG partial sums. */
#define TEAMS (GEMV_WG / TEAM)
__kernel __attribute__((reqd_work_group_size(GEMV_WG, 1, 1))) void
llm_gemv_team(__global const float *x, __global const WTYPE *w, __global float *out, int x_off,
              long w_off, int out_off, int rows, int k, int n)
{
    __local float part[GEMV_WG][ROWS + 1];
    int lid = get_local_id(0);
    int team = lid / TEAM, lane = lid % TEAM;
    int k8 = k / 8;
    /* Every team makes the same trips (the barriers are the group's); a team past n idles. */
    for (int j0 = get_group_id(0) * TEAMS; j0 < n; j0 += get_num_groups(0) * TEAMS) {
        int j = j0 + team;
        for (int r0 = 0; r0 < rows; r0 += ROWS) {
            int nr = min(ROWS, rows - r0);
            float acc[ROWS];
            for (int q = 0; q < ROWS; q++)
                acc[q] = 0.0f;
            if (j < n) {
                __global const WTYPE *wr = w + w_off + (long)j * k;
                __global const float *xr = x + x_off + r0 * k;
                for (int i8 = lane; i8 < k8; i8 += TEAM) {
                    float8 wv = LOADW8(wr, i8);
                    for (int q = 0; q < ROWS; q++) {
                        if (q < nr) {
                            float8 xv = vload8(i8, xr + q * k);
                            acc[q] += dot(wv.lo, xv.lo) + dot(wv.hi, xv.hi);
                        }
                    }
                }
                for (int i = 8 * k8 + lane; i < k; i += TEAM) {
                    float wv = LOADW(wr, i);
                    for (int q = 0; q < ROWS; q++)
                        if (q < nr)
                            acc[q] += wv * xr[q * k + i];
                }
            }
            for (int q = 0; q < ROWS; q++)
                part[lid][q] = acc[q];
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int q = lane; q < nr && j < n; q += TEAM) {
                float sum = 0.0f;
                for (int t = 0; t < TEAM; t++)
                    sum += part[team * TEAM + t][q];
                out[out_off + (r0 + q) * n + j] = sum;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
}

/* Few rows on a CPU device: a work-item per output feature, its whole dot products, no barrier. */
__kernel void llm_gemv_rows(__global const float *x, __global const WTYPE *w, __global float *out,
                            int x_off, long w_off, int out_off, int rows, int k, int n)
{
    for (int j = get_global_id(0); j < n; j += get_global_size(0)) {
        __global const WTYPE *wr = w + w_off + (long)j * k;
        for (int r = 0; r < rows; r++) {
            __global const float *xr = x + x_off + r * k;
            float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
            int i = 0;
            for (; i + 3 < k; i += 4) {
                a0 += LOADW(wr, i) * xr[i];
                a1 += LOADW(wr, i + 1) * xr[i + 1];
                a2 += LOADW(wr, i + 2) * xr[i + 2];
                a3 += LOADW(wr, i + 3) * xr[i + 3];
            }
            for (; i < k; i++)
                a0 += LOADW(wr, i) * xr[i];
            out[out_off + r * n + j] = (a0 + a1) + (a2 + a3);
        }
    }
}

/* Many rows (prefill): out[r][j] = sum_i x[r][i] w[j][i] over 64x64 tiles of (rows x features),
 * 16x16 work-items of 4x4 outputs each, k in steps of 16 through local memory. */
#define MT 64
#define KT 16
__kernel __attribute__((reqd_work_group_size(16, 16, 1))) void
llm_matmul(__global const float *x, __global const WTYPE *w, __global float *out, int x_off,
           long w_off, int out_off, int rows, int k, int n)
{
    __local float xs[KT][MT + 1];
    __local float ws[KT][MT + 1];
    int tx = get_local_id(0), ty = get_local_id(1);
    int j0 = get_group_id(0) * MT, r0 = get_group_id(1) * MT;
    int tid = ty * 16 + tx;
    float acc[4][4];
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            acc[a][b] = 0.0f;
    for (int k0 = 0; k0 < k; k0 += KT) {
        /* 64x16 of each operand: 1024 elements, 4 per work-item, k fastest. */
        for (int e = tid; e < MT * KT; e += 256) {
            int row = e / KT, kk = e % KT;
            int gk = k0 + kk;
            int gr = r0 + row, gj = j0 + row;
            xs[kk][row] = (gr < rows && gk < k) ? x[x_off + (size_t)gr * k + gk] : 0.0f;
            ws[kk][row] = (gj < n && gk < k) ? LOADW(w, w_off + (long)gj * k + gk) : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int kk = 0; kk < KT; kk++) {
            float xv[4], wv[4];
            for (int a = 0; a < 4; a++)
                xv[a] = xs[kk][ty + 16 * a];
            for (int b = 0; b < 4; b++)
                wv[b] = ws[kk][tx + 16 * b];
            for (int a = 0; a < 4; a++)
                for (int b = 0; b < 4; b++)
                    acc[a][b] += xv[a] * wv[b];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int a = 0; a < 4; a++) {
        int r = r0 + ty + 16 * a;
        for (int b = 0; b < 4; b++) {
            int j = j0 + tx + 16 * b;
            if (r < rows && j < n)
                out[out_off + (size_t)r * n + j] = acc[a][b];
        }
    }
}

/* RoPE: for each row, the queries (rotate-half pairs) to q_off, the keys (rotated) and values to
 * the cache at the row's sequence and position ((pos*batch + seq)*kv_dim). */
__kernel void llm_rope(__global const float *x, __global const float *table, __global float *out,
                       int x_off, int t_off, int q_off, int k_off, int v_off, int rows, int per_seq,
                       int pos0, int heads, int kv_heads, int head_dim, int positions, int batch)
{
    int half_d = head_dim / 2;
    int qd = heads * head_dim, kvd = kv_heads * head_dim;
    int width = qd + 2 * kvd;
    int total = rows * width;
    for (int i = get_global_id(0); i < total; i += get_global_size(0)) {
        int r = i / width, c = i % width;
        int seq = r / per_seq, pos = pos0 + r % per_seq;
        __global const float *row = x + x_off + r * width;
        float y;
        if (c < qd + kvd) {
            int base = c / head_dim * head_dim, e = c % head_dim, p = e % half_d;
            float cs = table[t_off + pos * half_d + p];
            float sn = table[t_off + (positions + pos) * half_d + p];
            y = e < half_d ? row[c] * cs - row[base + e + half_d] * sn
                           : row[c] * cs + row[base + e - half_d] * sn;
        } else {
            y = row[c];
        }
        int cache = (pos * batch + seq) * kvd;
        if (c < qd)
            out[q_off + r * qd + c] = y;
        else if (c < qd + kvd)
            out[k_off + cache + c - qd] = y;
        else
            out[v_off + cache + c - qd - kvd] = y;
    }
}

/* Causal attention: one group per (row, head), its ATT_WG work-items taking the positions 0..pos
 * in turn with an online softmax each (running max, sum and weighted values), merged at the end. */
__kernel __attribute__((reqd_work_group_size(ATT_WG, 1, 1))) void
llm_attention(__global const float *q, __global const float *kc, __global const float *vc,
              __global float *out, int q_off, int k_off, int v_off, int out_off, int rows,
              int per_seq, int pos0, int heads, int kv_heads, int batch, float scale)
{
    __local float qs[HEAD_DIM];
    __local float ms[ATT_WG], ls[ATT_WG];
    __local float accs[ATT_WG][HEAD_DIM];
    int lid = get_local_id(0);
    int kvd = kv_heads * HEAD_DIM, qd = heads * HEAD_DIM;
    for (int task = get_group_id(0); task < rows * heads; task += get_num_groups(0)) {
        int r = task / heads, h = task % heads;
        int seq = r / per_seq, pos = pos0 + r % per_seq;
        int g = h / (heads / kv_heads);
        for (int d = lid; d < HEAD_DIM; d += ATT_WG)
            qs[d] = q[q_off + r * qd + h * HEAD_DIM + d];
        barrier(CLK_LOCAL_MEM_FENCE);
        float m = -INFINITY, l = 0.0f;
        float acc[HEAD_DIM];
        for (int d = 0; d < HEAD_DIM; d++)
            acc[d] = 0.0f;
        for (int t = lid; t <= pos; t += ATT_WG) {
            int at = (t * batch + seq) * kvd + g * HEAD_DIM;
            float s = 0.0f;
            for (int d = 0; d < HEAD_DIM; d++)
                s += qs[d] * kc[k_off + at + d];
            s *= scale;
            float m_new = fmax(m, s);
            float keep = exp(m - m_new), p = exp(s - m_new);
            l = l * keep + p;
            for (int d = 0; d < HEAD_DIM; d++)
                acc[d] = acc[d] * keep + p * vc[v_off + at + d];
            m = m_new;
        }
        ms[lid] = m;
        ls[lid] = l;
        for (int d = 0; d < HEAD_DIM; d++)
            accs[lid][d] = acc[d];
        barrier(CLK_LOCAL_MEM_FENCE);
        float mx = -INFINITY;
        for (int i = 0; i < ATT_WG; i++)
            mx = fmax(mx, ms[i]);
        float denom = 0.0f;
        for (int i = 0; i < ATT_WG; i++)
            denom += ls[i] > 0.0f ? ls[i] * exp(ms[i] - mx) : 0.0f;
        for (int d = lid; d < HEAD_DIM; d += ATT_WG) {
            float y = 0.0f;
            for (int i = 0; i < ATT_WG; i++)
                y += ls[i] > 0.0f ? accs[i][d] * exp(ms[i] - mx) : 0.0f;
            out[out_off + r * qd + h * HEAD_DIM + d] = y / denom;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* out[r][i] = silu(x[r][i]) * x[r][ffn + i]. */
__kernel void llm_swiglu(__global const float *x, __global float *out, int x_off, int out_off,
                         int rows, int ffn)
{
    int total = rows * ffn;
    for (int i = get_global_id(0); i < total; i += get_global_size(0)) {
        int r = i / ffn, c = i % ffn;
        float g = x[x_off + r * 2 * ffn + c], u = x[x_off + r * 2 * ffn + ffn + c];
        out[out_off + i] = g / (1.0f + exp(-g)) * u;
    }
}

/* out = a + b over n elements. */
__kernel void llm_add(__global const float *a, __global const float *b, __global float *out,
                      int a_off, int b_off, int out_off, int n)
{
    for (int i = get_global_id(0); i < n; i += get_global_size(0))
        out[out_off + i] = a[a_off + i] + b[b_off + i];
}

/* dst[dst_off + i] = src[src_off + i] over n elements. */
__kernel void llm_copy(__global const float *src, __global float *dst, int src_off, int dst_off,
                       int n)
{
    for (int i = get_global_id(0); i < n; i += get_global_size(0))
        dst[dst_off + i] = src[src_off + i];
}
