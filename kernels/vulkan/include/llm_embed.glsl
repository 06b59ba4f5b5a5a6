// llm_embed.glsl: the Embed step, out[r] = table[token r] (`dim` wide), token r at
// x[x_off + r·tok_stride] (f32, exact), clamped to [0, vocab - 1]. Grid-stride over rows × dim.
//
// Bindings: 0 x (the token ids), 1 the weights (f32, or half with HALF), 2 the arena, 3 the pass
// shift (added to x_off: a decode's pass p reads its tokens from x_off + p).
// Push constants (uint): total (rows·dim), dim, vocab, table, tok_stride, x_off, out_off.
// Specialization: 0 local size x.

#include "grid.glsl"
#define WEIGHTS_BINDING 1
#include "llm.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0, std430) readonly buffer X { float x[]; };
layout(set = 0, binding = 2, std430) writeonly buffer Out { float dst[]; };
// The pass shift (binding 3), added to the positions mod 2^32: 0, or where a decode's last pass is
// replayed for an earlier one, that pass's number minus the last's (agent kernel/record.rs).
layout(set = 0, binding = 3, std430) readonly buffer Shift { uint pass_shift; };

layout(push_constant) uniform Push {
    uint total;
    uint dim;
    uint vocab;
    uint table;
    uint tok_stride;
    uint x_off;
    uint out_off;
} pc;

void main()
{
    GRID_LOOP(i, pc.total) {
        const uint r = i / pc.dim;
        const uint c = i - r * pc.dim;
        const float t = x[pc.x_off + pass_shift + r * pc.tok_stride];
        const uint tok = uint(min(max(t, 0.0), float(pc.vocab - 1u)));
        dst[pc.out_off + i] = LOAD_W(pc.table + tok * pc.dim + c);
    }
}
