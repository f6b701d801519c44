// FP8 activation quantization bit-exact to tf_core::formats::quant_fp8_pow2, after fp8_quant.cuh (its group helpers).
#include <cuda_bf16.h>

// One warp per 32-group: codes[i] = e4m3(clamp(x[i] / s, ±448)), scales[g] = s; groups are contiguous along rows.
extern "C" __global__ void __launch_bounds__(256)
act_quant_fp8(const __nv_bfloat16* __restrict__ x, u8* __restrict__ codes, float* __restrict__ scales, int groups) {
    const int g = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (g >= groups) return;
    const float v = __bfloat162float(x[(size_t)g * 32 + lane]);
    quant_group32(v, lane, codes + (size_t)g * 32 + lane, scales + g);
}
