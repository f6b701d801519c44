// Fake quantization of bf16 activations in place (quantize, dequantize, round to bf16): bit-exact to tf_core's qdq_fp8_pow2 and qdq_fp4, by the same integer and IEEE steps as crates/tf-core/src/formats (quant, e8m0, minifloat).

#define QDQ_WARPS 8
#define E4M3_MAX 448.0f
#define E2M1_MAX 6.0f

__device__ __forceinline__ float pow2(int e) { return __uint_as_float((unsigned)(127 + e) << 23); }

// MiniFloat::encode_magnitude: a ≥ 0 to the nearest code (ties to even), saturating at max_code; f32 subnormals give 0.
__device__ __forceinline__ unsigned encode_magnitude(float a, int man_bits, int bias, unsigned max_code) {
    const int f32_exp = (int)((__float_as_uint(a) >> 23) & 0xFF);
    if (f32_exp == 0) return 0;
    const int emin = 1 - bias, emax = (int)(max_code >> man_bits) - bias;
    const int e = max(f32_exp - 127, emin);
    if (e > emax + 1) return max_code;
    // Dividing by a power of two is exact here, so only rintf (ties to even, as round_ties_even) rounds.
    const unsigned n = (unsigned)rintf(__fdiv_rn(a, pow2(e - man_bits)));
    return min(((unsigned)(e - emin) << man_bits) + n, max_code);
}

// MiniFloat::decode_magnitude: exact, subnormals at exponent field zero.
__device__ __forceinline__ float decode_magnitude(unsigned code, int man_bits, int bias) {
    const unsigned field = code >> man_bits, man = code & ((1u << man_bits) - 1u);
    if (field == 0) return __fmul_rn((float)man, pow2(1 - bias - man_bits));
    return __fmul_rn((float)((1u << man_bits) + man), pow2((int)field - bias - man_bits));
}

// f32_to_e4m3: NaN → 0x7F, else sign | magnitude saturating at 448 (code 0x7E).
__device__ __forceinline__ unsigned f32_to_e4m3(float x) {
    if (x != x) return 0x7Fu;
    return ((__float_as_uint(x) >> 31) << 7) | encode_magnitude(fabsf(x), 3, 7, 0x7Eu);
}

// e4m3_to_f32; the NaN codes give the CPU table's f32::NAN (0x7FC00000), negated for 0xFF.
__device__ __forceinline__ float e4m3_to_f32(unsigned b) {
    const unsigned mag = b & 0x7Fu;
    const float v = mag == 0x7Fu ? __uint_as_float(0x7FC00000u) : decode_magnitude(mag, 3, 7);
    return (b & 0x80u) ? -v : v;
}

// f32_to_e2m1: the sign bit always, a NaN magnitude as 0, else the nearest of {0, .5, 1, 1.5, 2, 3, 4, 6}.
__device__ __forceinline__ unsigned f32_to_e2m1(float x) {
    const unsigned sign = (__float_as_uint(x) >> 31) << 3;
    const float a = fabsf(x);
    return sign | (a != a ? 0u : encode_magnitude(a, 1, 1, 7u));
}

__device__ __forceinline__ float e2m1_to_f32(unsigned code) {
    const float v = decode_magnitude(code & 7u, 1, 1);
    return (code & 8u) ? -v : v;
}

// e8m0::fast_round_scale: 2^ceil(log2(amax · max_inv)) read off the product's exponent and mantissa bits.
__device__ __forceinline__ float fast_round_scale(float amax, float max_inv) {
    const unsigned bits = __float_as_uint(__fmul_rn(amax, max_inv));
    const int log2_ceil = (int)((bits >> 23) & 0xFFu) - 127 + ((bits & 0x7FFFFFu) != 0);
    return __uint_as_float((unsigned)(log2_ceil + 127) << 23);
}

// v / s as the host computes it: a NaN v comes through with its sign (CUDA would give a positive canonical NaN).
__device__ __forceinline__ float quotient(float v, float s) { return v != v ? v : __fdiv_rn(v, s); }

// Rust's clamp: a NaN stays NaN.
__device__ __forceinline__ float clamp(float v, float lo, float hi) {
    if (v < lo) v = lo;
    if (v > hi) v = hi;
    return v;
}

// q · s as the host computes it: a NaN q propagates; 0 · ∞ (an infinite group) gives x86's default NaN 0xFFC00000.
__device__ __forceinline__ float product(float q, float s) {
    if (q != q) return q;
    const float r = __fmul_rn(q, s);
    return r != r ? __uint_as_float(0xFFC00000u) : r;
}

// Max |v| over the group (NaN ignored, as f32::max), the same in every lane: max is exact in any order.
__device__ __forceinline__ float group_amax(const bf16_bits* g, int group, int lane) {
    float m = 0.0f;
    for (int i = lane; i < group; i += 32) m = fmaxf(m, fabsf(widen(g[i])));
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    return m;
}

// One warp per group of `group` bf16 (grid-stride over groups): qdq_fp8_pow2 with the host's 1/448 and amax floor.
extern "C" __global__ void __launch_bounds__(QDQ_WARPS * 32)
qdq_fp8_pow2(bf16_bits* __restrict__ x, long long groups, int group, float max_inv, float amax_floor) {
    const int lane = threadIdx.x % 32;
    for (long long gi = (long long)blockIdx.x * QDQ_WARPS + threadIdx.x / 32; gi < groups;
         gi += (long long)gridDim.x * QDQ_WARPS) {
        bf16_bits* g = x + gi * group;
        const float s = fast_round_scale(fmaxf(group_amax(g, group, lane), amax_floor), max_inv);
        for (int i = lane; i < group; i += 32) {
            const unsigned code = f32_to_e4m3(clamp(quotient(widen(g[i]), s), -E4M3_MAX, E4M3_MAX));
            g[i] = bf16_rne(product(e4m3_to_f32(code), s));
        }
    }
}

// One warp per group (grid-stride): qdq_fp4 with an E8M0 scale (e8m0 = 1: fast_round_scale of amax·max_inv) or an E4M3 one (e8m0 = 0: e4m3(max(amax, floor) / 6)).
extern "C" __global__ void __launch_bounds__(QDQ_WARPS * 32)
qdq_fp4(bf16_bits* __restrict__ x, long long groups, int group, int e8m0, float max_inv, float amax_floor) {
    const int lane = threadIdx.x % 32;
    for (long long gi = (long long)blockIdx.x * QDQ_WARPS + threadIdx.x / 32; gi < groups;
         gi += (long long)gridDim.x * QDQ_WARPS) {
        bf16_bits* g = x + gi * group;
        const float amax = fmaxf(group_amax(g, group, lane), amax_floor);
        const float s = e8m0 ? fast_round_scale(amax, max_inv) : e4m3_to_f32(f32_to_e4m3(__fdiv_rn(amax, E2M1_MAX)));
        for (int i = lane; i < group; i += 32) {
            const unsigned code = f32_to_e2m1(clamp(quotient(widen(g[i]), s), -E2M1_MAX, E2M1_MAX));
            g[i] = bf16_rne(product(e2m1_to_f32(code), s));
        }
    }
}
