// Interleaved RoPE of bf16 heads in place, as attn::rope_bf16 with Rope::apply: f32 math in the CPU's op order, bf16 out.

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
