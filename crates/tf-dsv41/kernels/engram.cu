// The Engram gate (dsv41 §10.2) as EngramGate::forward computes it after wkv: per-stream signed-sqrt gate on a value.
#include <cuda_bf16.h>

// Fixed so a row's reduction tree, hence its bits, never depends on the launch.
#define ENGRAM_THREADS 256

__device__ __forceinline__ float bf16_in(unsigned short b) { return __uint_as_float((unsigned)b << 16); }
__device__ __forceinline__ unsigned short bf16_out(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }
// wkv's f32 GEMV output as the CPU's wkv.forward returns it: rounded to bf16.
__device__ __forceinline__ float via_bf16(float v) { return bf16_in(bf16_out(v)); }

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// Every thread gets the block's total: strided sequential sums, an xor tree per warp, then the same over the warps.
__device__ float block_sum(float v, float* scratch) {
    v = warp_sum(v);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
    __syncthreads();
    return warp_sum((threadIdx.x & 31) < ENGRAM_THREADS / 32 ? scratch[threadIdx.x & 31] : 0.0f);
}

// Grid (rows, hc): block (r, i) gates stream i of row r in place with key i and the row's value (the last dim of kv).
extern "C" __global__ void __launch_bounds__(ENGRAM_THREADS)
engram_gate(unsigned short* __restrict__ x, const float* __restrict__ kv, const float* __restrict__ weight, int hc,
            int dim, float eps, float inv_sqrt_dim) {
    __shared__ float scratch[ENGRAM_THREADS / 32];
    const int r = blockIdx.x, i = blockIdx.y;
    unsigned short* xs = x + ((size_t)r * hc + i) * dim;
    const float* key = kv + (size_t)r * (hc + 1) * dim + (size_t)i * dim;
    const float* value = kv + (size_t)r * (hc + 1) * dim + (size_t)hc * dim;
    const float* w = weight + (size_t)i * dim;
    float ss_h = 0.0f, ss_k = 0.0f, dot = 0.0f;
    for (int c = threadIdx.x; c < dim; c += ENGRAM_THREADS) {
        const float h = bf16_in(xs[c]), k = via_bf16(key[c]);
        ss_h += h * h;
        ss_k += k * k;
        dot += h * w[c] * k;
    }
    ss_h = block_sum(ss_h, scratch);
    ss_k = block_sum(ss_k, scratch);
    dot = block_sum(dot, scratch);
    const float rstd = (1.0f / sqrtf(ss_h / (float)dim + eps)) * (1.0f / sqrtf(ss_k / (float)dim + eps));
    const float d = dot * rstd * inv_sqrt_dim;
    const float gate = 1.0f / (1.0f + expf(-copysignf(sqrtf(fmaxf(fabsf(d), 1e-6f)), d)));
    // In place is safe: each thread rewrites only the elements it read itself.
    for (int c = threadIdx.x; c < dim; c += ENGRAM_THREADS) xs[c] = bf16_out(bf16_in(xs[c]) + gate * via_bf16(value[c]));
}
