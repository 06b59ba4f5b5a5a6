// grid.glsl: the grid-stride loop of the one-dimensional shaders.
//
// A dispatch may have at most maxComputeWorkGroupCount[0] groups in x (65535 on many devices), which
// 2^26 elements at 256 invocations per group would exceed. So the planner launches at most that many
// groups and every invocation walks the index space with the grid's stride: index, index + stride,
// ... Indices are `uint`: the planner refuses buffers above 2^32 - 1 bytes (the most a storage-buffer
// binding can address, maxStorageBufferRange being a 32-bit limit), so no index wraps.

#define GRID_FIRST() (gl_GlobalInvocationID.x)
#define GRID_STRIDE() (gl_NumWorkGroups.x * gl_WorkGroupSize.x)
#define GRID_LOOP(i, count) for (uint i = GRID_FIRST(); i < (count); i += GRID_STRIDE())
