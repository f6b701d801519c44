// RMSNorm of bf16 rows as the CPU reference computes it (tf_core::ops::rms_norm_bf16): f32 inside, bf16 out.
#include <cuda_bf16.h>

#ifndef RMSNORM_THREADS
#define RMSNORM_THREADS 256
#endif

static_assert(RMSNORM_THREADS % 32 == 0 && RMSNORM_THREADS <= 1024, "RMSNORM_THREADS: a multiple of 32, at most 1024");

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// One block per row, a fixed thread count and a fixed reduction tree: a row's bits never depend on the batch.
extern "C" __global__ void __launch_bounds__(RMSNORM_THREADS)
rmsnorm_bf16(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w, __nv_bfloat16* __restrict__ y,
             int dim, float eps) {
    __shared__ float warp_sums[RMSNORM_THREADS / 32];
    __shared__ float inv_rms;
    const __nv_bfloat16* xr = x + (size_t)blockIdx.x * dim;
    __nv_bfloat16* yr = y + (size_t)blockIdx.x * dim;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < dim; i += RMSNORM_THREADS) {
        const float v = __bfloat162float(xr[i]);
        sum = __fmaf_rn(v, v, sum);
    }
    sum = warp_sum(sum);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) warp_sums[warp] = sum;
    __syncthreads();
    if (warp == 0) {
        const float total = warp_sum(lane < RMSNORM_THREADS / 32 ? warp_sums[lane] : 0.0f);
        // IEEE division and sqrt (not rsqrtf), as the reference's 1 / sqrt(mean + eps).
        if (lane == 0) inv_rms = 1.0f / sqrtf(total / (float)dim + eps);
    }
    __syncthreads();
    const float r = inv_rms;
    for (int i = threadIdx.x; i < dim; i += RMSNORM_THREADS) {
        yr[i] = __float2bfloat16_rn(__bfloat162float(w[i]) * (__bfloat162float(xr[i]) * r));
    }
}
