// The ratio-2 compressor's pooling (attn/compress.rs `pool`): gate softmax within a group, then the weighted kv sum.
#include <cuda_bf16.h>

// NVRTC has no <math.h> INFINITY.
#define F32_INF __int_as_float(0x7f800000)

// Round to nearest even, NaN kept quiet with its sign, exactly as tf_core's f32_to_bf16_bits.
__device__ __forceinline__ unsigned short f32_to_bf16(float x) {
    const unsigned int bits = __float_as_uint(x);
    if (x != x) return (unsigned short)((bits >> 16) | 0x0040);
    return (unsigned short)((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
}

// exp through double so the f32 result is (nearly always) the correctly rounded one the host libm returns.
__device__ __forceinline__ float exp_rn(float x) { return (float)exp((double)x); }

// Grid (groups, ceil(d / blockDim)). Per channel: softmax of the gate over the group's rows, then the weighted kv sum.
extern "C" __global__ void compress_pool(const float* __restrict__ kv, const float* __restrict__ gate,
                                         unsigned short* __restrict__ out, int ratio, int d) {
    const int g = blockIdx.x;
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= d) return;
    const size_t base = (size_t)g * ratio * d + c;
    float mx = -F32_INF;
    for (int i = 0; i < ratio; ++i) mx = fmaxf(mx, gate[base + (size_t)i * d]);
    float s = -0.0f;
    for (int i = 0; i < ratio; ++i) s += exp_rn(gate[base + (size_t)i * d] - mx);
    float acc = -0.0f;
    for (int i = 0; i < ratio; ++i) {
        const float e = exp_rn(gate[base + (size_t)i * d] - mx);
        acc += kv[base + (size_t)i * d] * (e / s);
    }
    out[(size_t)g * d + c] = f32_to_bf16(acc);
}
