// The Engram gate (dsv41 §10.2) as EngramGate::forward computes it after wkv: per-stream signed-sqrt gate on a value.
#include <cuda_bf16.h>

#define ENGRAM_THREADS 256

__device__ __forceinline__ float bf16_in(unsigned short b) { return __uint_as_float((unsigned)b << 16); }
__device__ __forceinline__ unsigned short bf16_out(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }
// wkv's f32 GEMV output as the CPU's wkv.forward returns it: rounded to bf16.
__device__ __forceinline__ float via_bf16(float v) { return bf16_in(bf16_out(v)); }

// exp rounded once from double: the host's correctly rounded expf in all but astronomically rare cases.
__device__ __forceinline__ float exp_rn(float x) { return (float)exp((double)x); }

// Grid (rows, hc): block (r, i) gates stream i of row r in place with key i and the row's value (the last dim of kv).
extern "C" __global__ void __launch_bounds__(ENGRAM_THREADS)
engram_gate(unsigned short* __restrict__ x, const float* __restrict__ kv, const float* __restrict__ weight, int hc,
            int dim, float eps, float inv_sqrt_dim) {
    __shared__ float gate_s;
    const int r = blockIdx.x, i = blockIdx.y;
    unsigned short* xs = x + ((size_t)r * hc + i) * dim;
    const float* key = kv + (size_t)r * (hc + 1) * dim + (size_t)i * dim;
    const float* value = kv + (size_t)r * (hc + 1) * dim + (size_t)hc * dim;
    const float* w = weight + (size_t)i * dim;
    // The CPU's three sums run in index order, so one thread does them (dim is a few thousand at most).
    if (threadIdx.x == 0) {
        float ss_h = -0.0f, ss_k = -0.0f, dot = -0.0f;
        for (int c = 0; c < dim; ++c) ss_h += bf16_in(xs[c]) * bf16_in(xs[c]);
        for (int c = 0; c < dim; ++c) ss_k += via_bf16(key[c]) * via_bf16(key[c]);
        for (int c = 0; c < dim; ++c) dot += bf16_in(xs[c]) * w[c] * via_bf16(key[c]);
        const float rstd = (1.0f / sqrtf(ss_h / (float)dim + eps)) * (1.0f / sqrtf(ss_k / (float)dim + eps));
        const float d = dot * rstd * inv_sqrt_dim;
        gate_s = 1.0f / (1.0f + exp_rn(-copysignf(sqrtf(fmaxf(fabsf(d), 1e-6f)), d)));
    }
    __syncthreads();
    const float gate = gate_s;
    // In place is safe: each thread rewrites only the elements it read itself.
    for (int c = threadIdx.x; c < dim; c += ENGRAM_THREADS) xs[c] = bf16_out(bf16_in(xs[c]) + gate * via_bf16(value[c]));
}
