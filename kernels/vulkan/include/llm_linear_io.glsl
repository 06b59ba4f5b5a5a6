// llm_linear_io.glsl: the Linear step's input and output bindings and push constants, shared by
// llm_linear.glsl and llm_linear_coopmat.glsl (QUANT defined for packed weights): bindings 0 x (f32)
// and 2 the arena; push constants (uint) rows, k, n, x_off, w_off, out_off, with QUANT then
// q_values, q_scales (bytes); specialization 2 VEC4 (k and x_off, and w_off, multiples of 4).

layout(constant_id = 2) const bool VEC4 = false;

layout(set = 0, binding = 0, std430) readonly buffer X { float x[]; };
layout(set = 0, binding = 0, std430) readonly buffer X4 { vec4 x4[]; };
layout(set = 0, binding = 2, std430) writeonly buffer Out { float dst[]; };

layout(push_constant) uniform Push {
    uint rows;
    uint k;
    uint n;
    uint x_off;
    uint w_off;
    uint out_off;
#ifdef QUANT
    uint q_values;
    uint q_scales;
#endif
} pc;
