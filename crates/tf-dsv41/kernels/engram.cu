// The Engram gate (dsv41 §10.2) as EngramGate::forward computes it after wkv: per-stream signed-sqrt gate on a value.

#define ENGRAM_THREADS 256

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
        for (int c = 0; c < dim; ++c) ss_h += widen(xs[c]) * widen(xs[c]);
        for (int c = 0; c < dim; ++c) ss_k += round_bf16(key[c]) * round_bf16(key[c]);
        for (int c = 0; c < dim; ++c) dot += widen(xs[c]) * w[c] * round_bf16(key[c]);
        const float rstd = (1.0f / sqrtf(ss_h / (float)dim + eps)) * (1.0f / sqrtf(ss_k / (float)dim + eps));
        const float d = dot * rstd * inv_sqrt_dim;
        gate_s = 1.0f / (1.0f + exp_rn(-copysignf(sqrtf(fmaxf(fabsf(d), 1e-6f)), d)));
    }
    __syncthreads();
    const float gate = gate_s;
    // In place is safe: each thread rewrites only the elements it read itself.
    for (int c = threadIdx.x; c < dim; c += ENGRAM_THREADS) xs[c] = bf16_rne(widen(xs[c]) + gate * round_bf16(value[c]));
}
