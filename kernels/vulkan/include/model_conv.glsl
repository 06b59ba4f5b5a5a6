// model_conv.glsl: a dense convolution or a linear layer of a CNN as an implicit GEMM; the same
// computation as model_conv in kernels/opencl/model.cl (which documents it) with the same arguments
// (agent/src/backend/planning/model.rs). Group (n, m, s) owns the 64×64 tile (m, n) of
// C[co][col] = Σ_kk W[co][kk]·X[kk][col] over the s-th chunk of kk; 256 invocations keep 4×4 outputs
// each. With one chunk it writes act(C + bias) in NCHW at out_off; with several, raw partial sums
// part[s][co][col] that a model_layer op 4 dispatch adds up.
//
// Bindings: 0 x (the layer's input: the images or the arena), 1 the weights (filters then biases),
// 2 the arena, 3 the partial sums (scratch; the arena when unsplit, and then unused).
// Push constants (uint): x_off, w_off, b_off, out_off, cin, h, w, cout, oh, ow, k, stride, pad, act,
// ncols, kdim, k_chunk, splits. Specialization: 0 local size x, always 256 (the planner's CONV_GROUP).
//
// x, the weights and the arena are f32, or with HALF IEEE half (GL_EXT_shader_16bit_storage only:
// loads widen exactly into the f32 tiles in shared memory and the arithmetic is the f32 shader's, so
// no shaderFloat16 is needed; an output is rounded to half once, when stored). The partial sums are
// f32 in both: model_layer's op 4 reads them as f32 and rounds once.

#ifdef HALF
#define ELEM float16_t
#define WIDEN(v) float(v)
#define NARROW(v) float16_t(v)
#else
#define ELEM float
#define WIDEN(v) (v)
#define NARROW(v) (v)
#endif

#define TM 64
#define TN 64
#define TK 16

layout(local_size_x_id = 0) in; // always 256: the tile math below assumes it

layout(set = 0, binding = 0, std430) readonly buffer X { ELEM x[]; };
layout(set = 0, binding = 1, std430) readonly buffer W { ELEM w[]; };
layout(set = 0, binding = 2, std430) buffer Out { ELEM dst[]; };
layout(set = 0, binding = 3, std430) buffer Part { float part[]; };

layout(push_constant) uniform Push {
    uint x_off;
    uint w_off;
    uint b_off;
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
    uint act;
    uint ncols;
    uint kdim;
    uint k_chunk;
    uint splits;
} pc;

shared float as_[TK][TM];
shared float bs[TK][TN];

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
    const uint t = gl_LocalInvocationID.x;
    const uint n0 = gl_WorkGroupID.x * TN;
    const uint m0 = gl_WorkGroupID.y * TM;
    const uint split = gl_WorkGroupID.z;
    const uint kbeg = split * pc.k_chunk;
    const uint kend = min(pc.kdim, kbeg + pc.k_chunk);
    const uint plane = pc.oh * pc.ow;
    const uint taps = pc.k * pc.k;
    // This invocation's outputs: rows tm + 16·i, columns tn + 16·j of the tile.
    const uint tm = t / 16u;
    const uint tn = t % 16u;
    // Its share of the loads: W row am, columns ak..ak+3; X column nn, rows t/64 + 4·j.
    const uint am = t / 4u;
    const uint ak = (t % 4u) * 4u;
    const uint nn = t % TN;
    const uint col = n0 + nn;
    const bool colok = col < pc.ncols;
    uint img = 0u;
    int iy0 = 0, ix0 = 0;
    if (colok) {
        img = col / plane;
        const uint p = col - img * plane;
        iy0 = int((p / pc.ow) * pc.stride) - int(pc.pad);
        ix0 = int((p % pc.ow) * pc.stride) - int(pc.pad);
    }
    const uint xi = pc.x_off + img * pc.cin * pc.h * pc.wd;
    const uint wr = pc.w_off + (m0 + am) * pc.kdim;
    const bool rowok = m0 + am < pc.cout;
    const int h = int(pc.h);
    const int wd = int(pc.wd);
    float acc[4][4];
    for (uint i = 0u; i < 4u; ++i)
        for (uint j = 0u; j < 4u; ++j)
            acc[i][j] = 0.0;
    for (uint k0 = kbeg; k0 < kend; k0 += TK) {
        for (uint j = 0u; j < 4u; ++j) {
            const uint kidx = k0 + ak + j;
            as_[ak + j][am] = (rowok && kidx < kend) ? WIDEN(w[wr + kidx]) : 0.0;
        }
        for (uint j = 0u; j < 4u; ++j) {
            const uint kk = t / TN + 4u * j;
            const uint kidx = k0 + kk;
            float v = 0.0;
            if (colok && kidx < kend) {
                const uint ci = kidx / taps;
                const uint r = kidx - ci * taps;
                const uint ky = r / pc.k;
                const int iy = iy0 + int(ky);
                const int ix = ix0 + int(r - ky * pc.k);
                if (iy >= 0 && iy < h && ix >= 0 && ix < wd)
                    v = WIDEN(x[xi + (ci * pc.h + uint(iy)) * pc.wd + uint(ix)]);
            }
            bs[kk][nn] = v;
        }
        barrier();
        for (uint kk = 0u; kk < TK; ++kk) {
            float a[4], b[4];
            for (uint i = 0u; i < 4u; ++i)
                a[i] = as_[kk][tm + 16u * i];
            for (uint j = 0u; j < 4u; ++j)
                b[j] = bs[kk][tn + 16u * j];
            for (uint i = 0u; i < 4u; ++i)
                for (uint j = 0u; j < 4u; ++j)
                    acc[i][j] = fma(a[i], b[j], acc[i][j]);
        }
        barrier();
    }
    for (uint i = 0u; i < 4u; ++i) {
        const uint co = m0 + tm + 16u * i;
        if (co >= pc.cout)
            continue;
        for (uint j = 0u; j < 4u; ++j) {
            const uint c = n0 + tn + 16u * j;
            if (c >= pc.ncols)
                continue;
            if (pc.splits == 1u) {
                const uint n = c / plane;
                dst[pc.out_off + (n * pc.cout + co) * plane + (c - n * plane)] =
                    NARROW(act(acc[i][j] + WIDEN(w[pc.b_off + co])));
            } else {
                part[(split * pc.cout + co) * pc.ncols + c] = acc[i][j];
            }
        }
    }
}
