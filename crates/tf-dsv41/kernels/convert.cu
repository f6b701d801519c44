// Format conversions of activations, bit-exact to tf_core::formats.

// Grid-stride over elements: y = to_bf16(x) (NaN payloads kept, which __float2bfloat16_rn would make canonical).
extern "C" __global__ void f32_to_bf16(const unsigned* __restrict__ x, unsigned short* __restrict__ y,
                                       unsigned long long n) {
    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        y[i] = bf16_rne(__uint_as_float(x[i]));
    }
}

// Grid-stride: e = exp_rn(x), l = log1p_rn(x), so a check can pin them to tf_core::ops::math bit for bit.
extern "C" __global__ void exp_log1p(const float* __restrict__ x, float* __restrict__ e, float* __restrict__ l,
                                     unsigned long long n) {
    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        e[i] = exp_rn(x[i]);
        l[i] = log1p_rn(x[i]);
    }
}
