// RMSNorm of bf16 rows as tf_core::ops::rms_norm_bf16 computes it: a sequential f32 sum of squares, then w·(x·r).
#include <cuda_bf16.h>

typedef unsigned short bf16_bits;

__device__ __forceinline__ float widen(bf16_bits v) { return __uint_as_float((unsigned)v << 16); }

// f32 → bf16 as tf_core::formats::to_bf16: round to nearest even, a NaN keeps its sign and payload and turns quiet.
__device__ __forceinline__ bf16_bits bf16_rne(float x) {
    const unsigned b = __float_as_uint(x);
    if ((b & 0x7FFFFFFFu) > 0x7F800000u) return (bf16_bits)((b >> 16) | 0x40u);
    return (bf16_bits)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

// One block per row. The CPU sums the squares in index order, so one thread does (a few µs at dim 5120).
extern "C" __global__ void rms_norm_seq(const bf16_bits* __restrict__ x, const bf16_bits* __restrict__ w,
                                        bf16_bits* __restrict__ y, int dim, float eps) {
    __shared__ float r_s;
    const bf16_bits* xr = x + (size_t)blockIdx.x * dim;
    if (threadIdx.x == 0) {
        float ss = -0.0f;
        for (int c = 0; c < dim; ++c) ss += widen(xr[c]) * widen(xr[c]);
        r_s = 1.0f / sqrtf(ss / (float)dim + eps);
    }
    __syncthreads();
    const float r = r_s;
    for (int c = threadIdx.x; c < dim; c += blockDim.x) y[(size_t)blockIdx.x * dim + c] = bf16_rne(widen(w[c]) * (widen(xr[c]) * r));
}
