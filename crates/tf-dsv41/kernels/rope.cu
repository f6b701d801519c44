// Interleaved RoPE of bf16 heads in place, as attn::rope_bf16 with Rope::apply: f32 math in the CPU's op order, bf16 out.
#include <cuda_bf16.h>

typedef unsigned short bf16_bits;

__device__ __forceinline__ float widen(bf16_bits v) { return __uint_as_float((unsigned)v << 16); }

// f32 → bf16 as tf_core::formats::to_bf16: round to nearest even, a NaN keeps its sign and payload and turns quiet.
__device__ __forceinline__ bf16_bits bf16_rne(float x) {
    const unsigned b = __float_as_uint(x);
    if ((b & 0x7FFFFFFFu) > 0x7F800000u) return (bf16_bits)((b >> 16) | 0x40u);
    return (bf16_bits)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

// Grid-stride over pairs (row, head, i): channels d−rd+2i and d−rd+2i+1 of the head turn by row's (cos, sin) cs[row][i]. Each product and sum is its own IEEE op (a·c − b·s, a·s + b·c), as Rust evaluates them; inverse negates s first.
extern "C" __global__ void rope(bf16_bits* __restrict__ x, const float* __restrict__ cs, int rows, int heads, int d,
                                     int rd, int inverse) {
    const unsigned long long half = rd / 2;
    const unsigned long long total = (unsigned long long)rows * heads * half;
    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long p = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; p < total; p += step) {
        const unsigned long long i = p % half, head = p / half, row = head / heads;
        const float c = cs[(row * half + i) * 2];
        const float s0 = cs[(row * half + i) * 2 + 1];
        const float s = inverse ? -s0 : s0;
        bf16_bits* pair = x + head * d + (d - rd) + 2 * i;
        const float a = widen(pair[0]), b = widen(pair[1]);
        pair[0] = bf16_rne(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
        pair[1] = bf16_rne(__fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c)));
    }
}
