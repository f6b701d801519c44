// Synthetic weights generated on the GPU (the flash-shaped bench model): a counter hash per element, so any seed is reproducible.

__device__ __forceinline__ unsigned long long synth_hash(unsigned long long seed, unsigned long long i) {
    unsigned long long z = seed ^ (i * 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Grid-stride: kind 0 = E4M3 codes with a random sign and mantissa and exponent field 5..8 (|v| in [0.25, 3.75], never NaN); 1 = any byte (packed FP4 pairs); 2 = the byte `value` (E8M0 scales).
extern "C" __global__ void synth_bytes(unsigned char* __restrict__ out, unsigned long long n, unsigned long long seed,
                                       int kind, int value) {
    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        const unsigned long long h = synth_hash(seed, i);
        unsigned char b;
        if (kind == 0) {
            b = (unsigned char)((h & 0x80u) | ((5u + ((h >> 8) & 3u)) << 3) | ((h >> 16) & 7u));
        } else if (kind == 1) {
            b = (unsigned char)h;
        } else {
            b = (unsigned char)value;
        }
        out[i] = b;
    }
}

// Grid-stride: f32 (as_bf16 = 0) or bf16 values uniform in [lo, hi).
extern "C" __global__ void synth_uniform(void* __restrict__ out, unsigned long long n, unsigned long long seed,
                                         float lo, float hi, int as_bf16) {
    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        const float u = (float)(synth_hash(seed, i) >> 40) * (1.0f / 16777216.0f);
        const float v = lo + (hi - lo) * u;
        if (as_bf16) {
            ((unsigned short*)out)[i] = bf16_rne(v);
        } else {
            ((float*)out)[i] = v;
        }
    }
}
