// Shared by every dsv41 kernel (prepended to each source by src/cuda/kernels.rs): bf16 and exp exactly as the CPU rounds them.
#include <cuda_bf16.h>

// NVRTC has no <math.h> INFINITY.
#define F32_INF __int_as_float(0x7f800000)

typedef unsigned short bf16_bits;

__device__ __forceinline__ float widen(bf16_bits v) { return __uint_as_float((unsigned)v << 16); }

// f32 → bf16 as tf_core::formats::to_bf16: round to nearest even, a NaN keeps its sign and payload and turns quiet.
__device__ __forceinline__ bf16_bits bf16_rne(float x) {
    const unsigned b = __float_as_uint(x);
    if ((b & 0x7FFFFFFFu) > 0x7F800000u) return (bf16_bits)((b >> 16) | 0x40u);
    return (bf16_bits)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

// An f32 result as the CPU's bf16 tensors hold it: rounded to bf16, then widened back.
__device__ __forceinline__ float round_bf16(float x) { return widen(bf16_rne(x)); }

// exp and log1p rounded once from double: the host libm's correctly rounded results in all but vanishingly rare cases.
__device__ __forceinline__ float exp_rn(float x) { return (float)exp((double)x); }
__device__ __forceinline__ float log1p_rn(float x) { return (float)log1p((double)x); }
