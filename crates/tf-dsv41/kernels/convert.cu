// Format conversions of activations, bit-exact to tf_core::formats.
#include <cuda_bf16.h>

// Grid-stride over elements: y = to_bf16(x), round to nearest even; a NaN keeps sign and payload and is made quiet. Integer ops rather than __float2bfloat16_rn, whose NaN result is canonical and would lose the payload the CPU keeps.
extern "C" __global__ void f32_to_bf16(const unsigned* __restrict__ x, unsigned short* __restrict__ y,
                                       unsigned long long n) {
    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        const unsigned b = x[i];
        y[i] = (b & 0x7FFFFFFFu) > 0x7F800000u ? (unsigned short)((b >> 16) | 0x40u)
                                               : (unsigned short)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
    }
}
