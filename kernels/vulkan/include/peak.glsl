// peak.glsl: compute_peak's chains of multiply-adds (kernels/src/catalog/ceilings.rs has the chain
// and its closed form), shared by the compute_peak_<type> shaders.
//
// The including shader defines T (the chain type: float, double, int) and MAD(x, m, add) (fma, or
// x * m + add for int), and may define PEAK_A(v) (the multiplier from k[0], default T(v)) and
// PEAK_END(x) (what of a chain's end is summed, default float(x)). Invocation i runs 8 chains from (i mod 8) + j; each of `pairs` pairs is
// x = a·x + b; x = a·x + c with a, b, c = k[0..2] (-1, 1, 2), adding 1 exactly; it writes the sum
// of its chains as a float. The pair loop is written out 8 times per trip, and nested so no loop
// runs more than 65535 trips (llvmpipe ends a loop there).
//
// Bindings: 0 k (the constants), 1 out. Push constants: items, pairs. Specialization: 0 local
// size x (256). Grid-stride over the items.
#extension GL_GOOGLE_include_directive : require
#include "grid.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0, std430) readonly buffer K { float k[]; };
layout(set = 0, binding = 1, std430) writeonly buffer Out { float out_[]; };

layout(push_constant) uniform Push { uint items; uint pairs; } pc;

#ifndef PEAK_A
#define PEAK_A(v) T(v)
#endif
#ifndef PEAK_END
#define PEAK_END(x) float(x)
#endif

#define HALF_PAIR(m, add)                                                                      \
    x0 = MAD(x0, m, add); x1 = MAD(x1, m, add); x2 = MAD(x2, m, add); x3 = MAD(x3, m, add);   \
    x4 = MAD(x4, m, add); x5 = MAD(x5, m, add); x6 = MAD(x6, m, add); x7 = MAD(x7, m, add)
#define PAIR() HALF_PAIR(a, b); HALF_PAIR(a, c)
#define PAIR8() PAIR(); PAIR(); PAIR(); PAIR(); PAIR(); PAIR(); PAIR(); PAIR()

void main()
{
    const T a = PEAK_A(k[0]), b = T(k[1]), c = T(k[2]);
    const uint pairs = pc.pairs;
    GRID_LOOP(i, pc.items) {
        const T base = T(i & 7u);
        T x0 = base, x1 = base + T(1), x2 = base + T(2), x3 = base + T(3);
        T x4 = base + T(4), x5 = base + T(5), x6 = base + T(6), x7 = base + T(7);
        // 512 pairs per outer trip, then 8 per trip, then one by one.
        for (uint o = 0u; o < pairs / 512u; ++o) {
            for (uint t = 0u; t < 64u; ++t) {
                PAIR8();
            }
        }
        const uint rest = pairs % 512u;
        for (uint t = 0u; t < rest / 8u; ++t) {
            PAIR8();
        }
        for (uint r = 0u; r < rest % 8u; ++r) {
            PAIR();
        }
        out_[i] = ((PEAK_END(x0) + PEAK_END(x1)) + (PEAK_END(x2) + PEAK_END(x3))) +
                  ((PEAK_END(x4) + PEAK_END(x5)) + (PEAK_END(x6) + PEAK_END(x7)));
    }
}
