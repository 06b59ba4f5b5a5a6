/*
 * gpufleet.hip: the one translation unit agent/build.rs compiles into a code object per target.
 * Each included file documents its kernels; common.h says how they build without HIP headers or
 * device libraries.
 */

#include "elementwise.hip"
#include "gemm.hip"
#include "rows.hip"
#include "conv.hip"
#include "model.hip"
#include "llm.hip"
#include "peak.hip"
