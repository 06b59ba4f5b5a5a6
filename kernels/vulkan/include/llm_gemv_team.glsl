// llm_gemv_team.glsl: one-row projections (decode) by teams, with what the planner folds in
// (agent/src/backend/planning/llm.rs, `folded`; the OpenCL twin is llm_gemv_team in
// kernels/opencl/llm.cl):
//   out[r][j] = Σ_i x[r][i] · W[j][i], W `[n][k]`, for each of `rows` rows one after the other, and
//   NORM  x[r] is first RMS-normalised with the gains at g_off (eps): a team sums x[r][i]² as it
//         goes and scales its dot products by 1/rms at the end;
//   GLU   out[r][j] = silu(dot_j) · dot_{n+j}: the SwiGLU of a gate/up projection 2n features wide
//         (rows j and n + j of W);
//   ADD   out[r][j] += res[res_off + r·n + j]: the residual add;
//   ROPE  the Q/K/V projection followed by llm_rope: feature j of the n = (heads + 2·kv_heads)·hd/2
//         is the pair of rows c and c + hd/2 of one head (c = (j / (hd/2))·hd + j % (hd/2)), both
//         dot products taken (as GLU takes its two rows), rotated by the table's cos/sin at the
//         row's position (pos0 + the pass shift + r % per_seq) for q and k heads and written where
//         llm_rope writes them: q at out_off, k and v into the cache (the arena).
// A team takes FT consecutive output features (teams grid-stride over them; a team past n reads the
// last feature's row again and writes nothing), its lanes reading the weight rows eight weights a
// load where ALIGNED (one 16-byte load of halves, or two vec4 of floats) and element by element
// otherwise. With SUBGROUP a team is a subgroup and reduces with subgroupAdd, no shared memory and
// no barrier; otherwise teams of TEAM invocations meet in shared memory. With SPLIT > 1, SPLIT
// neighbouring teams take the same features, each every SPLIT-th stretch of k, and add their sums
// in shared memory (the first of them writes): more teams in flight where n is narrow (a 2,048-wide
// projection is 512 teams of 4 features, a few a compute unit, too few to keep the memory busy).
//
// With Q8 or Q4 (QUANT) the weights are packed in llama.cpp's blocks as llm_quant.glsl reads them
// (bound as uint words): a row's element e lies in the matrix's values at byte q_values and its
// block's f16 scale at byte q_scales (w_off is 0: elements count from the matrix's start). Where
// ALIGNED (and q_values a multiple of 16) a lane takes a quarter of QB blocks a trip and sums a
// quarter before scaling it (quarter_dot); otherwise weight by weight; the gains (NORM) are f32 words
// at word g_off.
//
// Bindings: 0 x, 1 the weights (f32, or half with HALF, or words with QUANT), 2 the arena (written), 3 the arena (the
// residual read), 4 the pass shift, which one invocation adds 1 to with ADVANCE (the LM head of a
// replayed decode pass: the next replay's positions; ROPE reads it), 5 the RoPE table (ROPE), 6 with
// CHAIN the counters (include/chain.glsl, which also adds three push constants at bytes 116..127). Push
// constants (uint but eps): rows, k, n, x_off, x_stride, w_off, g_off, out_off, res_off, eps, then
// for ROPE t_off, k_off, v_off, per_seq, pos0, heads, kv_heads, positions, batch, hd; with QUANT
// then q_values, q_scales.
// Specialization: 0 local size x = WG; 6 TEAM (shared-memory teams only); 7 SPLIT (teams a feature
// block, dividing the group's teams); 2 ALIGNED: k, x_off, x_stride, w_off and (with NORM) g_off are
// multiples of 8 (with QUANT also q_values of 16); 3 NORM; 4 GLU; 5 ADD; 8 ADVANCE; 9 ROPE; 10 QB
// (QUANT: the blocks a lane takes a quarter of a trip). The flags are specialization constants, so
// each combination is its own pipeline with no test in its loop.

#if defined(Q8) || defined(Q4)
#define QUANT 1
#else
#define WEIGHTS_BINDING 1
#define WEIGHTS_VEC4 1
#endif
#define SPEC_WG 1
#include "llm.glsl"

#define FT 4u

#ifndef SUBGROUP
layout(constant_id = 6) const uint TEAM = 32u;
#endif
layout(constant_id = 2) const bool ALIGNED = false;
layout(constant_id = 3) const bool NORM = false;
layout(constant_id = 4) const bool GLU = false;
layout(constant_id = 5) const bool ADD = false;
layout(constant_id = 7) const uint SPLIT = 1u;
layout(constant_id = 8) const bool ADVANCE = false;
layout(constant_id = 9) const bool ROPE = false;
#ifdef QUANT
// With QUANT and ALIGNED: the blocks a lane takes a quarter of each trip (QB; the planner's 2),
// so a trip is lanes / 4 · QB blocks.
layout(constant_id = 10) const uint QB = 2u;
#endif

#define CHAIN_BINDING 6
#include "chain.glsl"

layout(set = 0, binding = 0, std430) CHAIN_COHERENT readonly buffer X { float x[]; };
layout(set = 0, binding = 0, std430) CHAIN_COHERENT readonly buffer X4 { vec4 x4[]; };
#ifdef HALF
// Eight halves a 16-byte load, beside llm.glsl's views of the weights.
layout(set = 0, binding = WEIGHTS_BINDING, std430) readonly buffer W8 { uvec4 wt8[]; };
#endif
layout(set = 0, binding = 2, std430) CHAIN_COHERENT writeonly buffer Out { float dst[]; };
layout(set = 0, binding = 3, std430) CHAIN_COHERENT readonly buffer Res { float res[]; };
layout(set = 0, binding = 4, std430) CHAIN_COHERENT buffer Shift { uint pass_shift; };
layout(set = 0, binding = 5, std430) readonly buffer Table { float table[]; };

layout(push_constant) uniform Push {
    uint rows;
    uint k;
    uint n;
    uint x_off;
    uint x_stride;
    uint w_off;
    uint g_off;
    uint out_off;
    uint res_off;
    float eps;
    uint t_off;
    uint k_off;
    uint v_off;
    uint per_seq;
    uint pos0;
    uint heads;
    uint kv_heads;
    uint positions;
    uint batch;
    uint hd;
#ifdef QUANT
    uint q_values;
    uint q_scales;
#endif
    CHAIN_PUSH
} pc;

#ifdef QUANT
layout(set = 0, binding = 1, std430) readonly buffer WQ { uint wq[]; };

#include "quant_blocks.glsl"

// Quarter blocks (the ALIGNED path): a lane's quarter of a block is eight weights, one word of
// Q4_0's values or two of Q8_0's.
#define QK 32u
// The gains (NORM), four words a load.
layout(set = 0, binding = 1, std430) readonly buffer WQ4 { uvec4 wq4[]; };
#ifdef Q8
layout(set = 0, binding = 1, std430) readonly buffer WQ2 { uvec2 wq2[]; };
#define QWORD uvec2
#define LOAD_QUARTER(b, q) wq2[pc.q_values / 8u + (b) * 4u + (q)]
#else
#define QWORD uint
#define LOAD_QUARTER(b, q) wq[pc.q_values / 4u + (b) * 4u + (q)]
#endif

// x·v over four values, one product and three multiply-adds in a chain from s.
float q_dot4(vec4 v, vec4 x, float s)
{
    return fma(v.w, x.w, fma(v.z, x.z, fma(v.y, x.y, fma(v.x, x.x, s))));
}

// Quarter q's dot product, a weight a mask-and-or, a subtraction and a multiply-add (q8_word,
// q4_low, q4_high in quant_blocks.glsl; el and eh their exponents, from q_magic).
// Q8_0's quarter q is weights 8q..8q+7 (its two words), inputs xa and xb; Q4_0's is its word q:
// weights 4q..4q+3 in the low nibbles (inputs xa), 16+4q.. in the high ones (xb).
#ifdef Q8
float quarter_dot(uvec2 w, vec4 xa, vec4 xb, uvec4 el, uvec4 eh)
{
    return q_dot4(q8_word(w.y, el), xb, q_dot4(q8_word(w.x, el), xa, 0.0));
}
// The input offsets (in 4-vectors from the block's first) of quarter q.
#define QUARTER_XA(q) (2u * (q))
#define QUARTER_XB(q) (2u * (q) + 1u)
#else
float quarter_dot(uint w, vec4 xa, vec4 xb, uvec4 el, uvec4 eh)
{
    return q_dot4(q4_high(w, eh), xb, q_dot4(q4_low(w, el), xa, 0.0));
}
#define QUARTER_XA(q) (q)
#define QUARTER_XB(q) (4u + (q))
#endif

#ifdef QDOT
// QDOT: a quarter's dot product in integers (include/int_dot.glsl; the device must enable
// shaderIntegerDotProduct). A lane writes its quarter's eight inputs once a trip as integers of
// |v| ≤ 2^DIGIT_BITS, v = round(x / unit) with unit the power of two that puts the quarter's
// largest |x| under 2^DIGIT_BITS and at or above half of it: fma(x, 1/unit, 1.5·2^23) is the float
// whose bits are 0x4B400000 + v (its mantissa holds v + 2^22), so no conversion is spent. Each v
// is three bytes, v = s2·2^16 + u1·2^8 + u0 (u0, u1 unsigned, s2 signed); a word holds one
// level's bytes of four inputs. The digits are made once and reused by the lane's FT (or 2·FT) rows, each quarter-row
// then six packed dot products (two words of weights × three levels), two shifts and a conversion.
// The integer sum is exact; what it misses of the f32 sum is v's rounding, at most 2^-DIGIT_BITS of
// the quarter's largest |x| an input (2^-21 and 2^-20: inside the tolerance of f32 accumulation over
// the row, as the CPU's digit copies are). A non-finite input makes the quarter's unit NaN.
#include "int_dot.glsl"
// Q8_0's sums are up to 8·128·2^DIGIT_BITS, Q4_0's 8·15·2^DIGIT_BITS: both under 2^31.
#ifdef Q8
#define DIGIT_BITS 20
#else
#define DIGIT_BITS 21
#endif
// A quarter's inputs as digits: level l's bytes of the inputs of its first word (a) and second (b),
// what subtracting the format's offset takes off (Q4_0: 8·Σv), and the unit.
struct Digits {
    uint a0, a1, a2, b0, b1, b2;
    int off;
    float unit;
};
// Byte `at` of each of four words, packed into one word.
uint q_bytes(uvec4 w, uint at)
{
    const uvec4 b = (w >> (8u * at)) & 0xFFu;
    return b.x | (b.y << 8) | (b.z << 16) | (b.w << 24);
}
Digits q_digits(vec4 xa, vec4 xb)
{
    const vec4 m4 = max(abs(xa), abs(xb));
    const float m = max(max(m4.x, m4.y), max(m4.z, m4.w));
    // m < 2^(E - 126) for its biased exponent E; 1/unit = 2^(DIGIT_BITS + 126 - E), kept normal.
    const int e = int(floatBitsToUint(m) >> 23);
    const int inv_e = clamp(DIGIT_BITS + 126 - e + 127, 1, 254);
    const float inv = uintBitsToFloat(uint(inv_e) << 23);
    Digits g;
    g.unit = e == 255 ? m + m : 1.0 / inv;
    const float magic = 12582912.0;
    const uvec4 ua = floatBitsToUint(fma(xa, vec4(inv), vec4(magic)));
    const uvec4 ub = floatBitsToUint(fma(xb, vec4(inv), vec4(magic)));
    g.a0 = q_bytes(ua, 0u);
    g.a1 = q_bytes(ua, 1u);
    g.b0 = q_bytes(ub, 0u);
    g.b1 = q_bytes(ub, 1u);
    // The top bytes hold s2 + 64 (from 0x4B40....): 64 off each, with no borrow between them.
    g.a2 = ((q_bytes(ua, 2u) | 0x80808080u) - 0x40404040u) ^ 0x80808080u;
    g.b2 = ((q_bytes(ub, 2u) | 0x80808080u) - 0x40404040u) ^ 0x80808080u;
#ifdef Q8
    g.off = 0;
#else
    // Σv (mod 2^32, exact where it matters: |Σv| < 2^24) times Q4_0's offset 8.
    const uvec4 s = ua + ub;
    g.off = 8 * int(s.x + s.y + s.z + s.w - 8u * 0x4B400000u);
#endif
    return g;
}
// The quarter's dot product with its weights in units of g.unit: two words of signed bytes, meeting
// the digits of a and of b (Q8_0's two words; Q4_0's low and high nibbles, 0..15, which read the
// same signed, then 8·Σv off). Q4_0's first form (OpUDot for the lower levels, nibbles as its
// unsigned operand) validated on lavapipe but not on NVIDIA's driver (580.159); Q8_0's form did on both.
float quarter_idot(uint wa, uint wb, Digits g)
{
    const int t2 = sdot4(wa, g.a2, 0) + sdot4(wb, g.b2, 0);
    const int t1 = sudot4(wa, g.a1, 0) + sudot4(wb, g.b1, 0);
    const int t0 = sudot4(wa, g.a0, 0) + sudot4(wb, g.b0, 0);
    return float((t2 << 16) + (t1 << 8) + t0 - g.off);
}
#ifdef Q8
#define QUARTER_IDOT(w, g) quarter_idot((w).x, (w).y, g)
#else
#define QUARTER_IDOT(w, g) quarter_idot((w) & 0x0F0F0F0Fu, ((w) >> 4) & 0x0F0F0F0Fu, g)
#endif
#endif

// Weight e alone.
#define load_w1(e) q_weight(pc.q_values, pc.q_scales, e)

#define LOAD_G(i) uintBitsToFloat(wq[i])
#else
// Eight weights from element e (a multiple of 8), as two 4-vectors.
void load_w8(uint e, out vec4 lo, out vec4 hi)
{
#ifdef HALF
    const uvec4 u = wt8[e / 8u];
    lo = vec4(unpackHalf2x16(u.x), unpackHalf2x16(u.y));
    hi = vec4(unpackHalf2x16(u.z), unpackHalf2x16(u.w));
#else
    lo = LOAD_W4(e / 4u);
    hi = LOAD_W4(e / 4u + 1u);
#endif
}
#define load_w1(e) LOAD_W(e)
#define load_g8 load_w8
#define LOAD_G LOAD_W
#endif

#ifdef SUBGROUP
// A team's sums (FT dot products, FT up-projections, the squares) for its split partners.
shared float red[WG / FT][2u * FT + 1u];
#else
shared float part[WG][2u * FT + 1u];
#endif

void main()
{
    CHAIN_WAIT();
    if (ADVANCE && gl_WorkGroupID.x == 0u && gl_LocalInvocationIndex == 0u)
        pass_shift += 1u;
#ifdef SUBGROUP
    const uint team = gl_SubgroupID;
    const uint lane = gl_SubgroupInvocationID;
    const uint lanes = gl_SubgroupSize;
    const uint teams = gl_NumSubgroups;
#else
    const uint lid = gl_LocalInvocationID.x;
    const uint team = lid / TEAM;
    const uint lane = lid % TEAM;
    const uint lanes = TEAM;
    const uint teams = WG / TEAM;
#endif
    // The feature block of this team and its stretch of k (`slice` of `split`): SPLIT, or fewer
    // where the device made fewer, wider subgroups than the planner was told (both powers of two).
    const uint split = min(SPLIT, teams);
    const uint block = team / split;
    const uint slice = team % split;
    const uint stride = lanes * split;
    const uint per_group = teams / split * FT;
    // Every team makes the same trips (with shared memory the barriers are the group's).
    for (uint jg = gl_WorkGroupID.x * per_group; jg < pc.n; jg += gl_NumWorkGroups.x * per_group) {
        const uint j = jg + block * FT;
        for (uint r = 0u; r < pc.rows; ++r) {
            float acc[FT];
            float up[FT];
            float ss = 0.0;
            uint wr[FT];
            const uint half_d = pc.hd / 2u;
            for (uint f = 0u; f < FT; ++f) {
                acc[f] = 0.0;
                up[f] = 0.0;
                const uint jf = min(j + f, pc.n - 1u);
                const uint row = ROPE ? jf / half_d * pc.hd + jf % half_d : jf;
                wr[f] = pc.w_off + row * pc.k;
            }
            const uint xr = pc.x_off + r * pc.x_stride;
            // The second row of each feature: n rows on (GLU), half a head on (ROPE).
            const bool TWO = GLU || ROPE;
            const uint up_rows = ROPE ? half_d * pc.k : pc.n * pc.k;
            uint i0 = 0u;
#ifdef QUANT
            if (ALIGNED) {
                // A trip takes lanes / 4 · QB blocks, lane l quarter l % 4 of blocks l / 4 +
                // u·lanes/4 (u < QB): the team's input loads are consecutive 16-byte pieces (whole blocks'
                // inputs were 128 bytes a lane, 32 cache lines a load), its weight loads
                // consecutive words. Every feature's quarters and scales load before the sums;
                // a block past k reads the last one again with inputs of zero.
                const uint kb = pc.k / QK;
                const uint q = lane % 4u;
                const uvec4 el = q_magic(Q_MAGIC_BYTES);
#ifdef Q8
                const uvec4 eh = el;
#else
                const uvec4 eh = q_magic(Q_MAGIC_HIGH);
#endif
                const uint trip = lanes / 4u * QB;
                for (uint c0 = slice * trip; c0 < kb; c0 += trip * split) {
                    vec4 xs[2u * QB];
                    uint cb[QB];
                    for (uint u = 0u; u < QB; ++u) {
                        cb[u] = min(c0 + lane / 4u + lanes / 4u * u, kb - 1u);
                        const uint xb = xr / 4u + 8u * cb[u];
                        xs[2u * u] = x4[xb + QUARTER_XA(q)];
                        xs[2u * u + 1u] = x4[xb + QUARTER_XB(q)];
                    }
                    // The last trip of a row whose blocks are not a multiple of the team's: the
                    // blocks past it reread the last one, with inputs of zero (a branch the whole
                    // subgroup takes or skips).
                    if (c0 + trip > kb) {
                        for (uint u = 0u; u < QB; ++u) {
                            if (c0 + lane / 4u + lanes / 4u * u >= kb) {
                                xs[2u * u] = vec4(0.0);
                                xs[2u * u + 1u] = vec4(0.0);
                            }
                        }
                    }
                    if (NORM) {
                        for (uint u = 0u; u < QB; ++u) {
                            ss += dot(xs[2u * u], xs[2u * u]) + dot(xs[2u * u + 1u], xs[2u * u + 1u]);
                            const uint gb = (pc.g_off + QK * cb[u]) / 4u;
                            xs[2u * u] *= uintBitsToFloat(wq4[gb + QUARTER_XA(q)]);
                            xs[2u * u + 1u] *= uintBitsToFloat(wq4[gb + QUARTER_XB(q)]);
                        }
                    }
#ifdef QDOT
                    Digits dg[QB];
                    for (uint u = 0u; u < QB; ++u)
                        dg[u] = q_digits(xs[2u * u], xs[2u * u + 1u]);
#endif
                    QWORD wv[2u * FT * QB];
                    float d[2u * FT * QB];
                    for (uint f = 0u; f < FT; ++f) {
                        for (uint h = 0u; h < (TWO ? 2u : 1u); ++h) {
                            const uint rb = (wr[f] + h * up_rows) / QK;
                            for (uint u = 0u; u < QB; ++u) {
                                wv[(2u * f + h) * QB + u] = LOAD_QUARTER(rb + cb[u], q);
                                d[(2u * f + h) * QB + u] = q_scale(pc.q_scales, rb + cb[u]);
                            }
                        }
                    }
                    for (uint f = 0u; f < FT; ++f) {
                        for (uint u = 0u; u < QB; ++u) {
                            const uint at = 2u * f * QB + u;
#ifdef QDOT
                            acc[f] = fma(QUARTER_IDOT(wv[at], dg[u]), d[at] * dg[u].unit, acc[f]);
                            if (TWO)
                                up[f] = fma(QUARTER_IDOT(wv[at + QB], dg[u]), d[at + QB] * dg[u].unit,
                                            up[f]);
#else
                            acc[f] = fma(quarter_dot(wv[at], xs[2u * u], xs[2u * u + 1u], el, eh), d[at],
                                         acc[f]);
                            if (TWO)
                                up[f] = fma(quarter_dot(wv[at + QB], xs[2u * u], xs[2u * u + 1u], el, eh),
                                            d[at + QB], up[f]);
#endif
                        }
                    }
                }
                i0 = QK * kb;
            }
#else
            if (ALIGNED) {
                const uint k8 = pc.k / 8u;
                for (uint c = slice * lanes + lane; c < k8; c += stride) {
                    vec4 xl = x4[xr / 4u + 2u * c];
                    vec4 xh = x4[xr / 4u + 2u * c + 1u];
                    if (NORM) {
                        ss += dot(xl, xl) + dot(xh, xh);
                        vec4 gl, gh;
                        load_g8(pc.g_off + 8u * c, gl, gh);
                        xl *= gl;
                        xh *= gh;
                    }
                    for (uint f = 0u; f < FT; ++f) {
                        vec4 wl, wh;
                        load_w8(wr[f] + 8u * c, wl, wh);
                        acc[f] += dot(wl, xl) + dot(wh, xh);
                        if (TWO) {
                            load_w8(wr[f] + up_rows + 8u * c, wl, wh);
                            up[f] += dot(wl, xl) + dot(wh, xh);
                        }
                    }
                }
                i0 = 8u * k8;
            }
#endif
            for (uint i = i0 + slice * lanes + lane; i < pc.k; i += stride) {
                float xv = x[xr + i];
                if (NORM) {
                    ss += xv * xv;
                    xv *= LOAD_G(pc.g_off + i);
                }
                for (uint f = 0u; f < FT; ++f) {
                    acc[f] += load_w1(wr[f] + i) * xv;
                    if (TWO)
                        up[f] += load_w1(wr[f] + up_rows + i) * xv;
                }
            }
            // The team's sums: every lane gets them (subgroup) or lane f gathers feature f's.
            float d = 0.0, e = 0.0, q = 0.0;
#ifdef SUBGROUP
            for (uint f = 0u; f < FT; ++f) {
                const float a = subgroupAdd(acc[f]);
                const float b = TWO ? subgroupAdd(up[f]) : 0.0;
                if (lane == f) {
                    d = a;
                    e = b;
                }
            }
            if (NORM)
                q = subgroupAdd(ss);
            if (SPLIT > 1u) {
                if (lane < FT) {
                    red[team][lane] = d;
                    red[team][FT + lane] = e;
                }
                if (lane == 0u)
                    red[team][2u * FT] = q;
                barrier();
                if (slice == 0u && lane < FT) {
                    for (uint t = 1u; t < split; ++t) {
                        d += red[team + t][lane];
                        e += red[team + t][FT + lane];
                        q += red[team + t][2u * FT];
                    }
                }
            }
#else
            for (uint f = 0u; f < FT; ++f) {
                part[lid][f] = acc[f];
                part[lid][FT + f] = up[f];
            }
            part[lid][2u * FT] = ss;
            barrier();
            if (slice == 0u && lane < FT) {
                // The partials of this team's lanes and its split partners', which follow it.
                for (uint t = 0u; t < TEAM * split; ++t) {
                    d += part[team * TEAM + t][lane];
                    e += part[team * TEAM + t][FT + lane];
                    q += part[team * TEAM + t][2u * FT];
                }
            }
#endif
            if (slice == 0u && lane < FT && j + lane < pc.n) {
                const uint jf = j + lane;
                if (NORM) {
                    const float rstd = 1.0 / sqrt(q / float(pc.k) + pc.eps);
                    d *= rstd;
                    e *= rstd;
                }
                if (ROPE) {
                    const uint qd = pc.heads * pc.hd, kvd = pc.kv_heads * pc.hd;
                    const uint c = jf / half_d * pc.hd + jf % half_d, p = jf % half_d;
                    const uint seq = r / pc.per_seq;
                    const uint pos = pc.pos0 + pass_shift + (r - seq * pc.per_seq);
                    float ya = d, yb = e;
                    if (c < qd + kvd) {
                        const float cs = table[pc.t_off + pos * half_d + p];
                        const float sn = table[pc.t_off + (pc.positions + pos) * half_d + p];
                        ya = d * cs - e * sn;
                        yb = e * cs + d * sn;
                    }
                    const uint cache = (pos * pc.batch + seq) * kvd;
                    const uint at = c < qd ? pc.out_off + r * qd + c
                                           : (c < qd + kvd ? pc.k_off + cache + c - qd
                                                           : pc.v_off + cache + c - qd - kvd);
                    dst[at] = ya;
                    dst[at + half_d] = yb;
                } else {
                    float y = GLU ? d / (1.0 + exp(-d)) * e : d;
                    if (ADD)
                        y += res[pc.res_off + r * pc.n + jf];
                    dst[pc.out_off + r * pc.n + jf] = y;
                }
            }
            // The partials are overwritten by the next row or block.
#ifdef SUBGROUP
            if (SPLIT > 1u)
                barrier();
#else
            barrier();
#endif
        }
    }
    CHAIN_DONE();
}
