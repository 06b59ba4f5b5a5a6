/* The transformer's steps (kernels/src/llm): one kernel per step kind (and llm_gemv_team, which
 * also does the norm before a one-row projection and the SwiGLU or residual add after it), every
 * tensor a buffer and an element offset (int arguments; the weights' offsets are long, past 2^31
 * for the 8b shape), in the order agent/src/backend/planning/llm.rs passes them.
 * OpenCL C 1.1: fp16 weights (-D W_HALF) are read with vload_half or converted from their bits,
 * which needs no cl_khr_fp16; all arithmetic is f32.
 *
 * Build-time parameters:
 *   WG         work-items of an rmsnorm group, a power of two
 *   GEMV_WG    work-items of a gemv group, a power of two
 *   ROWS       rows a gemv group accumulates at once (its private accumulators)
 *   TEAM       work-items a llm_gemv_team team has (a power of two, at most TEAM_WG)
 *   TEAM_WG    work-items of a llm_gemv_team group (llm_gemv_team is built only with it)
 *   FT         output features a llm_gemv_team team takes at once
 *   ROWS_ONLY  a CPU device: leaves out llm_gemv, llm_gemv_team and llm_matmul*
 *   HEAD_DIM   the attention's head width (its private accumulator), even
 *   ATT_WG     work-items of an attention group (one row and head each)
 *   ATT_TILED  build llm_attention_tiled (HEAD_DIM a multiple of 4), with
 *   BQ, BK     its rows a group (work-items) and keys a tile
 *   W_HALF     weights stored as IEEE half
 *   W_Q8, W_Q4 the matrices in Q8_0 / Q4_0 blocks (kernels/src/quant.rs), read by llm_qembed,
 *              llm_qgemv, llm_qmatmul[_64] (llm_matmul's tiles; not with ROWS_ONLY) and (with
 *              TEAM_WG) llm_qgemv_team_<lanes> (with llm_gemv_team's folds) from the packed weights (a
 *              matrix's blocks' values at byte v_off, then their f16 scales at byte s_off); the norms'
 *              gains stay f32 there (WTYPE float)
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

/* The GPU kernels are left out of a CPU device's build (ROWS_ONLY), which runs none of them:
 * PoCL compiles every kernel of a program, slowly. */
#ifndef ROWS_ONLY
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

#endif

#ifdef TEAM_WG
/* One-row projections on a GPU, by teams (llm_gemv_team). Eight weights are read at once: where
 * the launch is aligned (every row a multiple of 8 elements from a 16-byte aligned buffer), as one
 * 16-byte load of halves converted by bit arithmetic (on an H200 1.2-1.5x faster than
 * vloada_half8, whose conversions the driver does one by one), or two float4 loads of floats;
 * element by element otherwise. */
#ifdef W_HALF
#define WRAW uint4
#define W_RAW(p, i8) (((__global const uint4 *)(p))[i8])
/* IEEE half bits to float: normals and subnormals exact (the weights have no inf or NaN). */
float h2f(uint h)
{
    return as_float(((h & 0x8000u) << 16) | as_uint(as_float((h & 0x7fffu) << 13) * 0x1p112f));
}
float8 w_conv(uint4 u)
{
    return (float8)(h2f(u.x & 0xffffu), h2f(u.x >> 16), h2f(u.y & 0xffffu), h2f(u.y >> 16),
                    h2f(u.z & 0xffffu), h2f(u.z >> 16), h2f(u.w & 0xffffu), h2f(u.w >> 16));
}
#else
#define WRAW float8
#define W_RAW(p, i8) x8_aligned((p), (i8))
#define w_conv(v) (v)
#endif
float8 x8_aligned(__global const float *p, int i8)
{
    __global const float4 *q = (__global const float4 *)p;
    return (float8)(q[2 * i8], q[2 * i8 + 1]);
}
#define W_ELEM_RAW(p, i8) LOADW8(p, i8)
#define X_ELEM(p, i8) vload8((i8), (p))
#define DOT8(a, b) (dot((a).lo, (b).lo) + dot((a).hi, (b).hi))

/* Features a team takes at once (each x load serves all of them), and eight-weight steps a
 * work-item keeps in flight for each. */
#ifndef FT
#define FT 1
#endif
#ifndef UNROLL
#define UNROLL (FT >= 4 ? 1 : 4 / FT)
#endif

/* One step of UNROLL eight-element chunks from chunk i8 on (TEAM apart) of a team's FT weight rows
 * (from wr, k apart; their up rows from ur with glu) against x row xr, scaled by the gains from gr
 * with norm (whose squares go to ss). WL loads eight weights raw, WC converts them, XL loads
 * eight activations. */
#define TEAM_STEP(WT, WL, WC, XL, U, NORM, GLU)                                                   \
    do {                                                                                         \
        WT wv[U][FT], uv[U][FT];                                                                 \
        for (int u = 0; u < (U); u++)                                                            \
            for (int f = 0; f < FT; f++) {                                                       \
                wv[u][f] = WL(wr[f], i8 + u * TEAM);                                             \
                if (GLU)                                                                         \
                    uv[u][f] = WL(ur[f], i8 + u * TEAM);                                         \
            }                                                                                    \
        for (int u = 0; u < (U); u++) {                                                          \
            float8 xv = XL(xr, i8 + u * TEAM);                                                   \
            if (NORM) {                                                                          \
                ss += DOT8(xv, xv);                                                              \
                xv *= WC(WL(gr, i8 + u * TEAM));                                                 \
            }                                                                                    \
            for (int f = 0; f < FT; f++) {                                                       \
                acc[f] += DOT8(WC(wv[u][f]), xv);                                                \
                if (GLU)                                                                         \
                    up[f] += DOT8(WC(uv[u][f]), xv);                                             \
            }                                                                                    \
        }                                                                                        \
    } while (0)
#define TEAM_LOOP(WT, WL, WC, XL, NORM, GLU)                                                     \
    do {                                                                                         \
        int i8 = lane;                                                                           \
        for (; i8 + (UNROLL - 1) * TEAM < k8; i8 += UNROLL * TEAM)                               \
            TEAM_STEP(WT, WL, WC, XL, UNROLL, NORM, GLU);                                        \
        for (; i8 < k8; i8 += TEAM)                                                              \
            TEAM_STEP(WT, WL, WC, XL, 1, NORM, GLU);                                             \
    } while (0)
/* The loop specialised for the four combinations of norm and glu (uniform over the launch): a
 * flag tested inside it cost the widest projections a third of their speed on an H200. */
#define TEAM_DOTS(WT, WL, WC, XL)                                                                \
    do {                                                                                         \
        if (norm && two)                                                                         \
            TEAM_LOOP(WT, WL, WC, XL, 1, 1);                                                     \
        else if (norm)                                                                           \
            TEAM_LOOP(WT, WL, WC, XL, 1, 0);                                                     \
        else if (two)                                                                            \
            TEAM_LOOP(WT, WL, WC, XL, 0, 1);                                                     \
        else                                                                                     \
            TEAM_LOOP(WT, WL, WC, XL, 0, 0);                                                     \
    } while (0)
#define NP (2 * FT + 1)

/* What a team launch folds in (llm_gemv_team's comment below), its arguments after `x_stride`. */
#define FOLD_PARAMS                                                                              \
    int norm, long g_off, __global const float *res, int add, int res_off, int glu, float eps,  \
        int rope, __global const float *table, int t_off, int kc_off, int vc_off, int per_seq,     \
        int pos0, int heads, int kv_heads, int positions, int batch
#define FOLD_ARGS                                                                                \
    norm, g_off, res, add, res_off, glu, eps, rope, table, t_off, kc_off, vc_off, per_seq, pos0,  \
        heads, kv_heads, positions, batch

/* A team gemv's feature jf: its first row, jf itself, or with rope the first of its head's pair of
 * rows c and c + HEAD_DIM/2 (c = (jf / half)·HEAD_DIM + jf % half); its second row is n rows on
 * (glu) or half a head on (rope). */
int feature_row(int jf, int rope)
{
    return rope ? jf / (HEAD_DIM / 2) * HEAD_DIM + jf % (HEAD_DIM / 2) : jf;
}

/* Feature jf of row r from its team's sums: d its (first) row's dot product, e its second row's
 * (glu, rope), q the input's squares (norm); written as the folds say. */
void team_out(__global float *out, int out_off, int r, int jf, int k, int n, float d, float e, float q,
              FOLD_PARAMS)
{
    const int half_d = HEAD_DIM / 2;
    if (norm) {
        float rstd = 1.0f / sqrt(q / (float)k + eps);
        d *= rstd;
        e *= rstd;
    }
    if (rope) {
        int qd = heads * HEAD_DIM, kvd = kv_heads * HEAD_DIM;
        int c = feature_row(jf, 1), p = jf % half_d;
        int seq = r / per_seq, pos = pos0 + r % per_seq;
        float ya = d, yb = e;
        if (c < qd + kvd) {
            float cs = table[t_off + pos * half_d + p];
            float sn = table[t_off + (positions + pos) * half_d + p];
            ya = d * cs - e * sn;
            yb = e * cs + d * sn;
        }
        int cache = (pos * batch + seq) * kvd;
        int at = c < qd ? out_off + r * qd + c
                        : (c < qd + kvd ? kc_off + cache + c - qd : vc_off + cache + c - qd - kvd);
        out[at] = ya;
        out[at + half_d] = yb;
    } else {
        float y = glu ? d / (1.0f + exp(-d)) * e : d;
        if (add)
            y += res[res_off + r * n + jf];
        out[out_off + r * n + jf] = y;
    }
}

/* out[r][j] = Σ_i x[r][i] w[j][i] for one row at a time (decode), with what the planner folds in:
 *   norm   x[r] is first RMS-normalised with gains w[g_off..] (eps): the team sums x[r][i]² as
 *          it goes and scales its dot products by 1/rms at the end;
 *   glu    out[r][j] = silu(dot_j) · dot_{n+j}: the SwiGLU of a gate/up projection 2n features
 *          wide (rows j and n + j of w);
 *   add    out[r][j] += res[res_off + r·n + j]: the residual add;
 *   rope   the Q/K/V projection followed by llm_rope (same arguments after `rope`): feature j of
 *          the n = (heads + 2·kv_heads)·HEAD_DIM / 2 is the pair of rows c and c + HEAD_DIM/2 of
 *          one head (c = (j / half)·HEAD_DIM + j % half), both dot products taken by the team (as
 *          glu takes its two rows), rotated by the table's cos/sin at the row's position for q
 *          and k heads and written where llm_rope writes them: q to out, k and v into the cache.
 * x row r starts at x_off + r·x_stride. A group's GEMV_WG work-items are GEMV_WG/TEAM teams of
 * TEAM, a team per FT consecutive output features (grid-strided; a team past n repeats the last
 * feature's loads and writes nothing), its work-items reading the rows eight weights a load,
 * UNROLL loads in flight each. A team's partial sums meet in local memory and one work-item a
 * feature adds its TEAM of them. */
#define TEAMS (TEAM_WG / TEAM)
__kernel __attribute__((reqd_work_group_size(TEAM_WG, 1, 1))) void
llm_gemv_team(__global const float *x, __global const WTYPE *w, __global float *out, int x_off,
              long w_off, int out_off, int rows, int k, int n, int x_stride, FOLD_PARAMS)
{
    __local float part[TEAM_WG][NP + 1];
    int lid = get_local_id(0);
    int team = lid / TEAM, lane = lid % TEAM;
    int k8 = k / 8;
    int two = glu || rope;
    const int half_d = HEAD_DIM / 2;
    /* The second row of each feature: n rows on (glu), half a head on (rope). */
    long second = rope ? (long)half_d * k : (long)n * k;
    int aligned = ((w_off | (long)k | (long)x_off | (long)x_stride | (norm ? g_off : 0)) & 7) == 0;
    /* Every team makes the same trips (the barriers are the group's). */
    for (int jg = get_group_id(0) * TEAMS * FT; jg < n; jg += get_num_groups(0) * TEAMS * FT) {
        int j = jg + team * FT;
        for (int r = 0; r < rows; r++) {
            float acc[FT], up[FT], ss = 0.0f;
            for (int f = 0; f < FT; f++)
                acc[f] = up[f] = 0.0f;
            __global const float *xr = x + x_off + r * x_stride;
            __global const WTYPE *gr = w + (norm ? g_off : 0);
            /* Features past n read the last row again (in bounds) and are written nowhere. */
            __global const WTYPE *wr[FT], *ur[FT];
            for (int f = 0; f < FT; f++) {
                int jf = min(j + f, n - 1);
                wr[f] = w + w_off + (long)feature_row(jf, rope) * k;
                ur[f] = wr[f] + second;
            }
            if (aligned)
                TEAM_DOTS(WRAW, W_RAW, w_conv, x8_aligned);
            else
                TEAM_DOTS(float8, W_ELEM_RAW, , X_ELEM);
            for (int i = 8 * k8 + lane; i < k; i += TEAM) {
                float xv = xr[i];
                if (norm) {
                    ss += xv * xv;
                    xv *= LOADW(gr, i);
                }
                for (int f = 0; f < FT; f++) {
                    acc[f] += LOADW(wr[f], i) * xv;
                    if (two)
                        up[f] += LOADW(ur[f], i) * xv;
                }
            }
            for (int f = 0; f < FT; f++) {
                part[lid][f] = acc[f];
                part[lid][FT + f] = up[f];
            }
            part[lid][2 * FT] = ss;
            barrier(CLK_LOCAL_MEM_FENCE);
            if (lane < FT && j + lane < n) {
                int jf = j + lane;
                float d = 0.0f, e = 0.0f, q = 0.0f;
                for (int t = 0; t < TEAM; t++) {
                    d += part[team * TEAM + t][lane];
                    e += part[team * TEAM + t][FT + lane];
                    q += part[team * TEAM + t][2 * FT];
                }
                team_out(out, out_off, r, jf, k, n, d, e, q, FOLD_ARGS);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
}

#endif

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

#if defined(W_Q8) || defined(W_Q4)
/* Block `b`'s scale of the matrix whose scales start at byte s_off. */
float q_scale(__global const uchar *w, long s_off, long b)
{
    return vload_half(b, (__global const half *)(w + s_off));
}

/* sum_i x[i] w[i] over block `b` of a matrix (its 32 weights' values), unscaled. */
float q_block_dot(__global const uchar *w, long v_off, long b, __global const float *x)
{
#ifdef W_Q8
    float16 lo = convert_float16(vload16(0, (__global const char *)(w + v_off + b * 32)));
    float16 hi = convert_float16(vload16(1, (__global const char *)(w + v_off + b * 32)));
    float16 s = lo * vload16(0, x) + hi * vload16(1, x);
#else
    /* Byte i: weight i in its low nibble, weight i + 16 in its high one, offset by 8. */
    uchar16 v = vload16(0, w + v_off + b * 16);
    float16 lo = convert_float16(v & (uchar)15) - 8.0f;
    float16 hi = convert_float16(v >> (uchar)4) - 8.0f;
    float16 s = lo * vload16(0, x) + hi * vload16(1, x);
#endif
    float8 h = s.lo + s.hi;
    float4 q = h.lo + h.hi;
    return (q.x + q.y) + (q.z + q.w);
}

/* out[r][d] = the dequantized row tok(r) of the table (as llm_embed). */
__kernel void llm_qembed(__global const float *tokens, __global const uchar *w, __global float *out,
                         int tok_off, int tok_stride, long v_off, long s_off, int out_off, int rows,
                         int dim, int vocab)
{
    int total = rows * dim;
    for (int i = get_global_id(0); i < total; i += get_global_size(0)) {
        int r = i / dim, d = i % dim;
        float t = tokens[tok_off + r * tok_stride];
        int tok = (int)clamp(t, 0.0f, (float)(vocab - 1));
        long e = (long)tok * dim + d;
        long b = e / 32;
        int at = (int)(e % 32);
#ifdef W_Q8
        float q = (float)((__global const char *)(w + v_off))[e];
#else
        uchar v = w[v_off + b * 16 + (at & 15)];
        float q = (float)((int)(at < 16 ? v & 15 : v >> 4) - 8);
#endif
        out[out_off + i] = q * q_scale(w, s_off, b);
    }
}

#ifdef TEAM_WG
#ifdef W_Q8
/* Q8_0: a work-item takes whole blocks, two 16-byte loads of values and 32 inputs (on an H100 a
 * lane's quarter of a block, eight-byte loads, was 12% slower). Q4_0: a quarter of a block is its
 * word q (weights 4q..4q+3 in the low nibbles, 16+4q.. in the high ones), and QX_A and QX_B are
 * the offsets, in float4 from the block's first input, of the inputs of those two halves. The
 * inputs are scaled for the dot products by 2^-p for the weights found at bit p of their word
 * (exact: powers of two). */
void q_scale_inputs(float4 *xv)
{
    for (int i = 0; i < 8; i++)
        xv[i] *= (float4)(1.0f, 1.0f / 256.0f, 1.0f, 1.0f / 256.0f);
}
#else
#ifndef QB
#define QB 4
#endif
#define QX_A(q) (q)
#define QX_B(q) (4 + (q))
#define QX_SCALE_A (float4)(1.0f, 1.0f / 256.0f, 1.0f, 1.0f / 256.0f)
#define QX_SCALE_B (float4)(1.0f / 16.0f, 1.0f / 4096.0f, 1.0f / 16.0f, 1.0f / 4096.0f)
#endif

/* The dot products of the values with their (scaled) inputs, unscaled. No shift or conversion per
 * weight: a value masked in place at bit p (0 or 8 of a word or of its upper half; Q4_0 also 4
 * and 12) and ORed into the mantissa of 2^23 is the float 2^23 + v 2^p exactly, and subtracting
 * 2^23 + o 2^p (o the offset: 128 for Q8_0's bytes with their sign bit flipped, 8 for Q4_0's
 * nibbles) leaves (v - o) 2^p exactly; with the inputs scaled by 2^-p a weight costs a
 * mask-and-or, a subtraction and a multiply-add. (Integer to float conversions run at a quarter
 * of the FMA rate on NVIDIA GPUs.) */
#ifdef W_Q8
/* A whole block: its values `u` (two 16-byte words), its 32 inputs `xv`. */
float q_block_dot_words(const uint4 *u, const float4 *xv)
{
    const uint4 e = (uint4)0x4B000000u;
    const float p0 = 8388608.0f;
    float4 s = (float4)(0.0f), t = (float4)(0.0f);
    const uint4 m = (uint4)(0xFFu, 0xFF00u, 0xFFu, 0xFF00u);
    const float4 o = (float4)(p0 + 128.0f, p0 + 32768.0f, p0 + 128.0f, p0 + 32768.0f);
    for (int h = 0; h < 2; h++) {
        uint4 v4 = u[h] ^ (uint4)0x80808080u;
        uint wd[4] = {v4.x, v4.y, v4.z, v4.w};
        for (int i = 0; i < 4; i += 2) {
            uint a = wd[i], b = wd[i + 1];
            s = fma(as_float4(((uint4)(a, a, a >> 16, a >> 16) & m) | e) - o, xv[4 * h + i], s);
            t = fma(as_float4(((uint4)(b, b, b >> 16, b >> 16) & m) | e) - o, xv[4 * h + i + 1], t);
        }
    }
    s += t;
    return (s.x + s.y) + (s.z + s.w);
}
#else
/* A quarter: its value word `u`, the inputs of its low nibbles xa and of its high ones xb. */
float q_quarter_dot(uint u, float4 xa, float4 xb)
{
    const uint4 e = (uint4)0x4B000000u;
    const float p0 = 8388608.0f;
    const uint4 ml = (uint4)(0xFu, 0xF00u, 0xFu, 0xF00u), mh = ml << 4;
    const float4 ol = (float4)(p0 + 8.0f, p0 + 2048.0f, p0 + 8.0f, p0 + 2048.0f);
    const float4 oh = (float4)(p0 + 128.0f, p0 + 32768.0f, p0 + 128.0f, p0 + 32768.0f);
    const uint4 vv = (uint4)(u, u, u >> 16, u >> 16);
    const float4 a = as_float4((vv & ml) | e) - ol;
    const float4 b = as_float4((vv & mh) | e) - oh;
    return dot(a, xa) + dot(b, xb);
}
#endif

/* As llm_qgemv on a GPU, with llm_gemv_team's folds (norm before; glu, add or rope after; the
 * gains f32 words of the same buffer at word g_off): a team of `lanes` work-items takes FT output
 * features at once (teams stride over them) and `lanes` blocks of the row a trip (Q4_0: lanes/4
 * QB): with Q8_0 work-item l block l; with Q4_0 quarter l % 4 of blocks l / 4 + u lanes/4 (u < QB,
 * default 4), so that the team's input loads are consecutive 16-byte pieces (a whole block's
 * inputs a work-item are 128 bytes apart, a cache line each: on an H100 the quarters read q4_0 at
 * 1.27x) and its value loads consecutive words. A trip's inputs (normalised by the gains with
 * norm, their squares summed) serve the FT features (and their second rows with glu or rope), every
 * row's values and scales loaded before the sums (a Q4_0 block past k reads the last one again
 * with inputs of zero); the team's sums added in local memory. The inputs (and gains) are read as
 * float4 where they start 16-byte aligned, else element by element. The trips come specialised
 * for norm and a second row (a flag tested inside them cost llm_gemv_team a third on an H200). */
/* One row's trips for the team's FT features (rows at blocks row[f], second rows at row2[f]). */
#define Q_ROW_ARGS                                                                               \
    __global const float *xr, __global const float *gr, bool aligned, __global const uchar *w,  \
        long v_off, long s_off, const long *row, const long *row2, int nb, int lane,             \
        const int lanes, float *acc, float *up, float *ss
#ifdef W_Q8
void q_row(Q_ROW_ARGS, const int norm_on, const int two_on)
{
    for (int b = lane; b < nb; b += lanes) {
        float4 xv[8];
        for (int i = 0; i < 8; i++)
            xv[i] = aligned ? ((__global const float4 *)(xr + b * 32))[i] : vload4(i, xr + b * 32);
        if (norm_on)
            for (int i = 0; i < 8; i++) {
                *ss += dot(xv[i], xv[i]);
                xv[i] *= aligned ? ((__global const float4 *)(gr + b * 32))[i] : vload4(i, gr + b * 32);
            }
        q_scale_inputs(xv);
        /* Every row's block and scale loaded before any sum. */
        uint4 u[FT * 2], v[FT * 2];
        float d[FT], e[FT];
        for (int f = 0; f < FT; f++) {
            long blk = row[f] + b;
            __global const uint4 *p = (__global const uint4 *)(w + v_off + blk * 32);
            u[f * 2] = p[0];
            u[f * 2 + 1] = p[1];
            d[f] = q_scale(w, s_off, blk);
            if (two_on) {
                blk = row2[f] + b;
                p = (__global const uint4 *)(w + v_off + blk * 32);
                v[f * 2] = p[0];
                v[f * 2 + 1] = p[1];
                e[f] = q_scale(w, s_off, blk);
            }
        }
        for (int f = 0; f < FT; f++) {
            acc[f] += q_block_dot_words(u + f * 2, xv) * d[f];
            if (two_on)
                up[f] += q_block_dot_words(v + f * 2, xv) * e[f];
        }
    }
}
#else
void q_row(Q_ROW_ARGS, const int norm_on, const int two_on)
{
    const int q = lane % 4;
    __global const uint *wv = (__global const uint *)(w + v_off);
    for (int b0 = 0; b0 < nb; b0 += lanes / 4 * QB) {
        float4 xv[2 * QB];
        int cb[QB];
        for (int u = 0; u < QB; u++) {
            const int c = b0 + lane / 4 + lanes / 4 * u;
            cb[u] = min(c, nb - 1);
            __global const float *xb = xr + cb[u] * 32;
            xv[2 * u] = aligned ? ((__global const float4 *)xb)[QX_A(q)] : vload4(QX_A(q), xb);
            xv[2 * u + 1] = aligned ? ((__global const float4 *)xb)[QX_B(q)] : vload4(QX_B(q), xb);
            const float live = c < nb ? 1.0f : 0.0f;
            if (norm_on) {
                __global const float *gb = gr + cb[u] * 32;
                xv[2 * u] *= live;
                xv[2 * u + 1] *= live;
                *ss += dot(xv[2 * u], xv[2 * u]) + dot(xv[2 * u + 1], xv[2 * u + 1]);
                xv[2 * u] *= aligned ? ((__global const float4 *)gb)[QX_A(q)] : vload4(QX_A(q), gb);
                xv[2 * u + 1] *= aligned ? ((__global const float4 *)gb)[QX_B(q)] : vload4(QX_B(q), gb);
            }
            xv[2 * u] *= QX_SCALE_A * live;
            xv[2 * u + 1] *= QX_SCALE_B * live;
        }
        /* Every row's quarters and scales loaded before any sum. */
        uint u4[FT * QB], v4[FT * QB];
        float d[FT * QB], e[FT * QB];
        for (int f = 0; f < FT; f++)
            for (int u = 0; u < QB; u++) {
                u4[f * QB + u] = wv[(row[f] + cb[u]) * 4 + q];
                d[f * QB + u] = q_scale(w, s_off, row[f] + cb[u]);
                if (two_on) {
                    v4[f * QB + u] = wv[(row2[f] + cb[u]) * 4 + q];
                    e[f * QB + u] = q_scale(w, s_off, row2[f] + cb[u]);
                }
            }
        for (int f = 0; f < FT; f++)
            for (int u = 0; u < QB; u++) {
                acc[f] += q_quarter_dot(u4[f * QB + u], xv[2 * u], xv[2 * u + 1]) * d[f * QB + u];
                if (two_on)
                    up[f] += q_quarter_dot(v4[f * QB + u], xv[2 * u], xv[2 * u + 1]) * e[f * QB + u];
            }
    }
}
#endif

void qgemv_team(__global const float *x, __global const uchar *w, __global float *out, int x_off,
                long v_off, long s_off, int out_off, int rows, int k, int n, int x_stride,
                FOLD_PARAMS, const int lanes, __local float *part)
{
    const int lid = get_local_id(0);
    const int lane = lid % lanes, team = lid / lanes;
    const int teams = get_num_groups(0) * (TEAM_WG / lanes);
    const int nb = k / 32;
    const int half_d = HEAD_DIM / 2;
    const int two = glu || rope;
    const bool aligned = ((x_off | x_stride | (norm ? (int)(g_off & 3) : 0)) & 3) == 0;
    /* The values a team sums: its FT dot products, with a second row FT more and the squares. */
    const int sums = two || norm ? NP : FT;
    __global const float *gr = (__global const float *)w + (norm ? g_off : 0);
    /* Every team runs the same number of rounds (the barriers are group-wide). */
    const int rounds = (n + teams * FT - 1) / (teams * FT);
    for (int it = 0; it < rounds; it++) {
        const int j0 = (it * teams + get_group_id(0) * (TEAM_WG / lanes) + team) * FT;
        /* Each feature's rows' first blocks (a team past n rereads the last feature, written by
         * no one): its row, and its second one (n rows on with glu, half a head with rope). */
        long row[FT], row2[FT];
        for (int f = 0; f < FT; f++) {
            const int jf = min(j0 + f, n - 1);
            const int r1 = feature_row(jf, rope);
            row[f] = (long)r1 * nb;
            row2[f] = (long)(r1 + (rope ? half_d : n)) * nb;
        }
        for (int r = 0; r < rows; r++) {
            float acc[FT], up[FT], ss = 0.0f;
            for (int f = 0; f < FT; f++)
                acc[f] = up[f] = 0.0f;
            __global const float *xr = x + x_off + r * x_stride;
            if (j0 < n) {
                if (norm && two)
                    q_row(xr, gr, aligned, w, v_off, s_off, row, row2, nb, lane, lanes, acc, up, &ss, 1, 1);
                else if (norm)
                    q_row(xr, gr, aligned, w, v_off, s_off, row, row2, nb, lane, lanes, acc, up, &ss, 1, 0);
                else if (two)
                    q_row(xr, gr, aligned, w, v_off, s_off, row, row2, nb, lane, lanes, acc, up, &ss, 0, 1);
                else
                    q_row(xr, gr, aligned, w, v_off, s_off, row, row2, nb, lane, lanes, acc, up, &ss, 0, 0);
            }
            for (int f = 0; f < FT; f++) {
                part[f * TEAM_WG + lid] = acc[f];
                part[(FT + f) * TEAM_WG + lid] = up[f];
            }
            part[2 * FT * TEAM_WG + lid] = ss;
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int s = lanes / 2; s > 0; s >>= 1) {
                if (lane < s)
                    for (int v = 0; v < sums; v++)
                        part[v * TEAM_WG + lid] += part[v * TEAM_WG + lid + s];
                barrier(CLK_LOCAL_MEM_FENCE);
            }
            if (lane < FT && j0 + lane < n) {
                const int at = lid - lane;
                team_out(out, out_off, r, j0 + lane, k, n, part[lane * TEAM_WG + at],
                         part[(FT + lane) * TEAM_WG + at], part[2 * FT * TEAM_WG + at], FOLD_ARGS);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
}

/* The team widths the planner picks (planning::llm::quant_lanes), each its own kernel so that the
 * width is a constant where the body is compiled (with the width an argument NVIDIA's compiler made
 * the q4_0 team gemv about a third slower on an H100). Arguments: llm_gemv_team's, with the
 * matrix's values and scales at bytes v_off and s_off for its w_off. */
#define QGEMV_TEAM_ARGS                                                                          \
    __global const float *x, __global const uchar *w, __global float *out, int x_off, long v_off,    \
        long s_off, int out_off, int rows, int k, int n, int x_stride, FOLD_PARAMS
#define QGEMV_TEAM_CALL(LANES)                                                                   \
    __local float part[NP * TEAM_WG];                                                            \
    qgemv_team(x, w, out, x_off, v_off, s_off, out_off, rows, k, n, x_stride, FOLD_ARGS, LANES, part)
__kernel __attribute__((reqd_work_group_size(TEAM_WG, 1, 1))) void llm_qgemv_team_32(QGEMV_TEAM_ARGS)
{
    QGEMV_TEAM_CALL(32);
}
#if TEAM_WG >= 64
__kernel __attribute__((reqd_work_group_size(TEAM_WG, 1, 1))) void llm_qgemv_team_64(QGEMV_TEAM_ARGS)
{
    QGEMV_TEAM_CALL(64);
}
#endif
#if TEAM_WG >= 128
__kernel __attribute__((reqd_work_group_size(TEAM_WG, 1, 1))) void llm_qgemv_team_128(QGEMV_TEAM_ARGS)
{
    QGEMV_TEAM_CALL(128);
}
#endif
#if TEAM_WG >= 256
__kernel __attribute__((reqd_work_group_size(TEAM_WG, 1, 1))) void llm_qgemv_team_256(QGEMV_TEAM_ARGS)
{
    QGEMV_TEAM_CALL(256);
}
#endif
#endif

/* out[r][j] = sum_i x[r][i] w[j][i] for the [n][k] matrix in blocks (k a multiple of 32): a
 * work-item per output feature, its rows one after another, a block's dot product scaled once. */
__kernel void llm_qgemv(__global const float *x, __global const uchar *w, __global float *out,
                        int x_off, long v_off, long s_off, int out_off, int rows, int k, int n)
{
    int nb = k / 32;
    for (int j = get_global_id(0); j < n; j += get_global_size(0)) {
        for (int r = 0; r < rows; r++) {
            __global const float *xr = x + x_off + r * k;
            float acc = 0.0f;
            for (int b = 0; b < nb; b++) {
                long blk = (long)j * nb + b;
                acc += q_block_dot(w, v_off, blk, xr + b * 32) * q_scale(w, s_off, blk);
            }
            out[out_off + r * n + j] = acc;
        }
    }
}
#endif

#ifndef ROWS_ONLY
/* Many rows (prefill): out[r][j] = sum_i x[r][i] w[j][i] over MM×MM tiles of (rows × features),
 * 16×16 work-items of 8×8 outputs each (rows 4·ty.. and 64 + 4·ty.., features likewise by tx),
 * k in steps of MK through two local buffers: step t stores the slice fetched during step t-1,
 * waits once, fetches slice t+1 into registers and multiplies slice t while it travels (buffer
 * t&1 was last read in step t-2, which every work-item finished before the barrier of step t-1).
 * Each work-item fetches four consecutive k of one row of each operand a step: one 16-byte load
 * (8 bytes of half weights) where the launch is aligned (offsets and k multiples of 4, uniform),
 * element loads otherwise; out-of-range elements are zeros. */
#define MM 128
#define MK 8
#define MLD (MM + 4)
float4 mm_load_x(__global const float *x, int x_off, int r, int kc, int rows, int k, int vec)
{
    __global const float *p = x + x_off + (long)r * k + kc;
    if (r >= rows)
        return (float4)(0.0f);
    if (vec && kc + 3 < k)
        return *(__global const float4 *)p;
    return (float4)(kc < k ? p[0] : 0.0f, kc + 1 < k ? p[1] : 0.0f, kc + 2 < k ? p[2] : 0.0f,
                    kc + 3 < k ? p[3] : 0.0f);
}
float4 mm_load_w(__global const WTYPE *w, long w_off, int j, int kc, int n, int k, int vec)
{
    __global const WTYPE *p = w + w_off + (long)j * k + kc;
    if (j >= n)
        return (float4)(0.0f);
#ifdef W_HALF
    if (vec && kc + 3 < k)
        return vloada_half4(0, p);
#else
    if (vec && kc + 3 < k)
        return *(__global const float4 *)p;
#endif
    return (float4)(kc < k ? LOADW(p, 0) : 0.0f, kc + 1 < k ? LOADW(p, 1) : 0.0f,
                    kc + 2 < k ? LOADW(p, 2) : 0.0f, kc + 3 < k ? LOADW(p, 3) : 0.0f);
}
#if defined(W_Q8) || defined(W_Q4)
/* Weights kc..kc+3 (kc a multiple of 4, so one block's) of feature j of a matrix in blocks,
 * scaled; zeros past n and past k. */
float4 mm_load_wq(__global const uchar *w, long v_off, long s_off, int j, int kc, int n, int k)
{
    if (j >= n || kc >= k)
        return (float4)(0.0f);
    long b = (long)j * (k / 32) + kc / 32;
    int p = kc % 32;
#ifdef W_Q8
    float4 v = convert_float4(vload4(0, (__global const char *)(w + v_off + b * 32 + p)));
#else
    /* Byte i: weight i in its low nibble, weight i + 16 in its high one, offset by 8. */
    uchar4 u = vload4(0, w + v_off + b * 16 + (p & 15));
    float4 v = convert_float4((u >> (uchar)(p < 16 ? 0 : 4)) & (uchar)15) - 8.0f;
#endif
    return v * q_scale(w, s_off, b);
}
/* The matrix a tile reads: Q8_0 / Q4_0 blocks (llm_qmatmul*: values at byte w_off, scales at
 * s_off), or WTYPE elements (llm_matmul*). */
#define MM_WPTR __global const uchar *w
#define MM_WOFF long w_off, long s_off
#define MM_WOFF_ARGS w_off, s_off
#define MM_LOAD_W(j, kc) mm_load_wq(w, w_off, s_off, (j), (kc), n, k)
#define MM_QUANT 1
#else
#define MM_WPTR __global const WTYPE *w
#define MM_WOFF long w_off
#define MM_WOFF_ARGS w_off
#define MM_LOAD_W(j, kc) mm_load_w(w, w_off, (j), (kc), n, k, vw)
#endif
#define MM_STORE(buf, kc, r, v)                                                                  \
    do {                                                                                         \
        (buf)[(kc)][(r)] = (v).x;                                                                \
        (buf)[(kc) + 1][(r)] = (v).y;                                                            \
        (buf)[(kc) + 2][(r)] = (v).z;                                                            \
        (buf)[(kc) + 3][(r)] = (v).w;                                                            \
    } while (0)
/* A tile of RA·16 rows × MM features (RA 8 or 4; the kernels below fix it, so it folds away):
 * work-item (tx, ty) computes rows 4·ty + a and 64 + 4·ty + a (a < 4, the second set with RA 8)
 * and features 4·tx + b and 64 + 4·tx + b. */
void matmul_tile(__global const float *x, MM_WPTR, __global float *out, int x_off, MM_WOFF,
                 int out_off, int rows, int k, int n, const int RA,
                 __local float (*xs)[MK][MLD], __local float (*ws)[MK][MLD])
{
    int tx = get_local_id(0), ty = get_local_id(1);
    int tid = ty * 16 + tx;
    int mr = 16 * RA;
    int j0 = get_group_id(0) * MM, r0 = get_group_id(1) * mr;
    int vx = ((x_off | k) & 3) == 0, vw = ((w_off | (long)k) & 3) == 0;
    /* This work-item's fetch: row (and feature) lr of the tile, k from lk to lk + 3; only the
     * first 2·mr work-items fetch rows. */
    int lr = tid >> 1, lk = (tid & 1) * 4;
    int fetch_x = lr < mr;
    float acc[8][8];
    for (int a = 0; a < 8; a++)
        for (int b = 0; b < 8; b++)
            acc[a][b] = 0.0f;
    int tiles = (k + MK - 1) / MK;
    float4 px = fetch_x ? mm_load_x(x, x_off, r0 + lr, lk, rows, k, vx) : (float4)(0.0f);
    float4 pw = MM_LOAD_W(j0 + lr, lk);
    for (int t = 0; t < tiles; t++) {
        int cur = t & 1;
        if (fetch_x)
            MM_STORE(xs[cur], lk, lr, px);
        MM_STORE(ws[cur], lk, lr, pw);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (t + 1 < tiles) {
            int kc = (t + 1) * MK + lk;
            if (fetch_x)
                px = mm_load_x(x, x_off, r0 + lr, kc, rows, k, vx);
            pw = MM_LOAD_W(j0 + lr, kc);
        }
        for (int kk = 0; kk < MK; kk++) {
            float4 a0 = *(__local const float4 *)&xs[cur][kk][4 * ty];
            float4 a1 = RA == 8 ? *(__local const float4 *)&xs[cur][kk][64 + 4 * ty] : a0;
            float4 b0 = *(__local const float4 *)&ws[cur][kk][4 * tx];
            float4 b1 = *(__local const float4 *)&ws[cur][kk][64 + 4 * tx];
            float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
            for (int a = 0; a < RA; a++)
                for (int b = 0; b < 8; b++)
                    acc[a][b] += av[a] * bv[b];
        }
    }
    for (int a = 0; a < RA; a++) {
        int r = r0 + (a < 4 ? 4 * ty + a : 64 + 4 * ty + a - 4);
        if (r >= rows)
            continue;
        for (int b = 0; b < 8; b++) {
            int j = j0 + (b < 4 ? 4 * tx + b : 64 + 4 * tx + b - 4);
            if (j < n)
                out[out_off + (long)r * n + j] = acc[a][b];
        }
    }
}
/* Tiles of 128 rows (llm_matmul, or llm_qmatmul with the matrices in blocks). */
__kernel __attribute__((reqd_work_group_size(16, 16, 1))) void
#ifdef MM_QUANT
llm_qmatmul(
#else
llm_matmul(
#endif
    __global const float *x, MM_WPTR, __global float *out, int x_off, MM_WOFF, int out_off, int rows,
    int k, int n)
{
    __local float xs[2][MK][MLD] __attribute__((aligned(16)));
    __local float ws[2][MK][MLD] __attribute__((aligned(16)));
    matmul_tile(x, w, out, x_off, MM_WOFF_ARGS, out_off, rows, k, n, 8, xs, ws);
}
/* Tiles of 64 rows: twice the groups, for projections too narrow to give every compute unit a
 * 128-row tile (the entry points differ only in the tile, so the duplicate is the kernel ABI). */
__kernel __attribute__((reqd_work_group_size(16, 16, 1))) void
#ifdef MM_QUANT
llm_qmatmul_64(
#else
llm_matmul_64(
#endif
    __global const float *x, MM_WPTR, __global float *out, int x_off, MM_WOFF, int out_off, int rows,
    int k, int n)
{
    __local float xs[2][MK][MLD] __attribute__((aligned(16)));
    __local float ws[2][MK][MLD] __attribute__((aligned(16)));
    matmul_tile(x, w, out, x_off, MM_WOFF_ARGS, out_off, rows, k, n, 4, xs, ws);
}

#endif

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
 * in turn with an online softmax each (running max, sum and weighted values), merged at the end.
 * Split along the sequence (flash-decoding; chunks > 1, decode over a long cache where rows x
 * heads are too few groups for the device): a group per (row, head, chunk) takes the chunk's
 * positions c*chunk .. (c+1)*chunk - 1 (those up to pos) and writes to `part` its unnormalised
 * weighted sum of the values, its maximum score and its sum of p (HEAD_DIM + 2 floats at
 * ((r*heads + h)*chunks + c)*(HEAD_DIM + 2); an empty chunk: 0, -inf, 0), which
 * llm_attention_merge adds up by log-sum-exp. */
__kernel __attribute__((reqd_work_group_size(ATT_WG, 1, 1))) void
llm_attention(__global const float *q, __global const float *kc, __global const float *vc,
              __global float *out, __global float *part, int q_off, int k_off, int v_off,
              int out_off, int rows, int per_seq, int pos0, int heads, int kv_heads, int batch,
              float scale, int chunk, int chunks)
{
    __local float qs[HEAD_DIM];
    __local float ms[ATT_WG], ls[ATT_WG];
    __local float accs[ATT_WG][HEAD_DIM];
    int lid = get_local_id(0);
    int kvd = kv_heads * HEAD_DIM, qd = heads * HEAD_DIM;
    for (int task = get_group_id(0); task < rows * heads * chunks; task += get_num_groups(0)) {
        int rh = task / chunks, c = task % chunks;
        int r = rh / heads, h = rh % heads;
        int seq = r / per_seq, pos = pos0 + r % per_seq;
        int g = h / (heads / kv_heads);
        /* This task's positions t0 .. end - 1 (0 .. pos unsplit). */
        int t0 = chunks > 1 ? min(c * chunk, pos + 1) : 0;
        int end = chunks > 1 ? min(t0 + chunk, pos + 1) : pos + 1;
        for (int d = lid; d < HEAD_DIM; d += ATT_WG)
            qs[d] = q[q_off + r * qd + h * HEAD_DIM + d];
        barrier(CLK_LOCAL_MEM_FENCE);
        float m = -INFINITY, l = 0.0f;
        float acc[HEAD_DIM];
        for (int d = 0; d < HEAD_DIM; d++)
            acc[d] = 0.0f;
        for (int t = t0 + lid; t < end; t += ATT_WG) {
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
        __global float *pt = part + (long)task * (HEAD_DIM + 2);
        if (chunks > 1 && lid == 0) {
            pt[HEAD_DIM] = mx;
            pt[HEAD_DIM + 1] = denom;
        }
        for (int d = lid; d < HEAD_DIM; d += ATT_WG) {
            float y = 0.0f;
            for (int i = 0; i < ATT_WG; i++)
                y += ls[i] > 0.0f ? accs[i][d] * exp(ms[i] - mx) : 0.0f;
            if (chunks > 1)
                pt[d] = y;
            else
                out[out_off + r * qd + h * HEAD_DIM + d] = y / denom;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* The second half of a split llm_attention: for each (row, head) task and dimension d, its
 * chunks' partials merged by log-sum-exp, M = max_c m_c,
 *   out[d] = sum_c acc_c[d] exp(m_c - M) / sum_c l_c exp(m_c - M),
 * an empty chunk (l = 0) weighing 0. Grid-stride over the n = rows*heads*head_dim outputs,
 * written at out_off + task*head_dim + d. */
__kernel void llm_attention_merge(__global const float *part, __global float *out, int out_off,
                                  int n, int head_dim, int chunks)
{
    int w = head_dim + 2;
    for (int i = get_global_id(0); i < n; i += get_global_size(0)) {
        int task = i / head_dim, d = i % head_dim;
        __global const float *p = part + (long)task * chunks * w;
        float mx = -INFINITY;
        for (int c = 0; c < chunks; c++)
            mx = fmax(mx, p[c * w + head_dim]);
        float num = 0.0f, den = 0.0f;
        for (int c = 0; c < chunks; c++) {
            float l = p[c * w + head_dim + 1];
            if (l > 0.0f) {
                float e = exp(p[c * w + head_dim] - mx);
                num += p[c * w + d] * e;
                den += l * e;
            }
        }
        out[out_off + i] = num / den;
    }
}

/* Causal attention of many rows a sequence (prefill), tiled over keys: a group per (sequence,
 * block of BQ consecutive rows, head), a work-item per row holding its query and accumulator in
 * registers; the group steps through the sequence's keys and values BK positions at a time in
 * local memory (read as float4 by every work-item at once), each work-item scoring the tile,
 * rescaling its running sum and accumulator once a tile (online softmax) and adding the tile's
 * weighted values. Built only where HEAD_DIM is a multiple of 4 (ATT_TILED). */
#ifdef ATT_TILED
#define HD4 (HEAD_DIM / 4)
__kernel __attribute__((reqd_work_group_size(BQ, 1, 1))) void
llm_attention_tiled(__global const float *q, __global const float *kc, __global const float *vc,
                    __global float *out, int q_off, int k_off, int v_off, int out_off, int rows,
                    int per_seq, int pos0, int heads, int kv_heads, int batch, float scale)
{
    __local float4 ks[BK][HD4], vs[BK][HD4];
    int lid = get_local_id(0);
    int kvd = kv_heads * HEAD_DIM, qd = heads * HEAD_DIM;
    int blocks = (per_seq + BQ - 1) / BQ;
    int seqs = rows / per_seq;
    for (int task = get_group_id(0); task < seqs * blocks * heads; task += get_num_groups(0)) {
        int h = task % heads, qb = task / heads % blocks, seq = task / heads / blocks;
        int g = h / (heads / kv_heads);
        int i = qb * BQ + lid; /* this work-item's row within its sequence */
        int live = i < per_seq;
        int r = seq * per_seq + (live ? i : per_seq - 1);
        int pos = pos0 + (live ? i : per_seq - 1);
        int last = pos0 + min(per_seq, qb * BQ + BQ) - 1; /* the block's last position */
        float4 qv[HD4], acc[HD4];
        for (int d = 0; d < HD4; d++) {
            qv[d] = vload4(d, q + q_off + r * qd + h * HEAD_DIM) * scale;
            acc[d] = (float4)(0.0f);
        }
        float m = -INFINITY, l = 0.0f;
        for (int t0 = 0; t0 <= last; t0 += BK) {
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int e = lid; e < BK * HD4; e += BQ) {
                int j = e / HD4, d = e % HD4, t = t0 + j;
                int at = (t * batch + seq) * kvd + g * HEAD_DIM;
                ks[j][d] = t <= last ? vload4(d, kc + k_off + at) : (float4)(0.0f);
                vs[j][d] = t <= last ? vload4(d, vc + v_off + at) : (float4)(0.0f);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            float sc[BK];
            float mt = m;
            for (int j = 0; j < BK; j++) {
                float4 a = (float4)(0.0f);
                for (int d = 0; d < HD4; d++)
                    a += qv[d] * ks[j][d];
                sc[j] = t0 + j <= pos ? a.x + a.y + a.z + a.w : -INFINITY;
                mt = fmax(mt, sc[j]);
            }
            /* t0 <= pos on the first tile, so mt is finite from then on. */
            float keep = exp(m - mt);
            l *= keep;
            for (int d = 0; d < HD4; d++)
                acc[d] *= keep;
            for (int j = 0; j < BK; j++) {
                float p = exp(sc[j] - mt);
                l += p;
                for (int d = 0; d < HD4; d++)
                    acc[d] += p * vs[j][d];
            }
            m = mt;
        }
        if (live)
            for (int d = 0; d < HD4; d++)
                vstore4(acc[d] / l, d, out + out_off + r * qd + h * HEAD_DIM);
    }
}
#endif

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
