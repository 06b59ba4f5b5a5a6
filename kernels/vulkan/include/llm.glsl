// llm.glsl: what the transformer shaders (llm_*.comp) share: the weights binding and the
// workgroup size and reductions of the shaders that reduce (rmsnorm, linear, attention).
//
// The steps are those of an LlmGraph (kernels/src/llm/mod.rs; the CPU implementation in
// agent/src/backend/cpu/ops/llm.rs is the executable specification): every tensor is a buffer and
// an offset in elements, passed as uint push constants. The arena (the output buffer) is often
// bound twice, once to read a step's input and once to write its output: the two regions never
// overlap within a step, so the bindings are not `restrict`.
//
// With HALF defined the weights are IEEE half (GL_EXT_shader_16bit_storage only: loads convert
// exactly and the arithmetic is f32, so no shaderFloat16 is needed). With WEIGHTS_VEC4 the weights
// are also viewed as 4-vectors (LOAD_W4), for offsets the planner knows to be multiples of 4.

#ifdef WEIGHTS_BINDING
#ifdef HALF
layout(set = 0, binding = WEIGHTS_BINDING, std430) readonly buffer W { float16_t wt[]; };
#define LOAD_W(i) float(wt[i])
#ifdef WEIGHTS_VEC4
layout(set = 0, binding = WEIGHTS_BINDING, std430) readonly buffer W4 { f16vec4 wt4[]; };
#define LOAD_W4(i) vec4(wt4[i])
#endif
#else
layout(set = 0, binding = WEIGHTS_BINDING, std430) readonly buffer W { float wt[]; };
#define LOAD_W(i) wt[i]
#ifdef WEIGHTS_VEC4
layout(set = 0, binding = WEIGHTS_BINDING, std430) readonly buffer W4 { vec4 wt4[]; };
#define LOAD_W4(i) wt4[i]
#endif
#endif
#endif

#ifdef SPEC_WG
// The shaders that reduce take their local size x as specialization constant 0: a power of two,
// 128 where the device allows (the planner picks it, agent/src/backend/vulkan/plan/llm.rs).
layout(local_size_x_id = 0) in;
const uint WG = gl_WorkGroupSize.x;
#endif

#ifdef REDUCE

// Tree reductions over the workgroup in shared memory; every invocation gets the same result.
// Call in uniform control flow.
shared float red_s[WG];

float group_sum(float v)
{
    const uint lid = gl_LocalInvocationID.x;
    red_s[lid] = v;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s)
            red_s[lid] += red_s[lid + s];
        barrier();
    }
    const float r = red_s[0];
    // Nobody may overwrite the result before everyone has read it.
    barrier();
    return r;
}

float group_max(float v)
{
    const uint lid = gl_LocalInvocationID.x;
    red_s[lid] = v;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s)
            red_s[lid] = max(red_s[lid], red_s[lid + s]);
        barrier();
    }
    const float r = red_s[0];
    barrier();
    return r;
}
#endif
