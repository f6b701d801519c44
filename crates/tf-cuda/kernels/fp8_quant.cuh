// FP8 activation quantization of one 32-group per warp, bit-exact to tf_core::formats::quant_fp8_pow2 (DeepSeek's act_quant, ue8m0 scales); act_quant.cu and fused producers (tf-dsv41's norms) share it.

// NVRTC has no <stdint.h>; these are the fixed widths on every CUDA target.
using u8 = unsigned char;
using u32 = unsigned int;

// 1/448 rounded to f32 (0x3B124925): the reference multiplies by this reciprocal rather than dividing by 448.
__device__ __forceinline__ float fp8_max_inv() { return __uint_as_float(0x3B124925u); }

// 2^ceil(log2(amax / 448)) from the exponent bits, as tf_core's fast_round_scale.
__device__ __forceinline__ float fast_round_scale(float amax) {
    const u32 bits = __float_as_uint(__fmul_rn(amax, fp8_max_inv()));
    const int exp = (int)((bits >> 23) & 0xFFu), log2_ceil = exp - 127 + ((bits & 0x7FFFFFu) != 0u);
    return __uint_as_float((u32)(log2_ceil + 127) << 23);
}

// f32 -> E4M3FN code, nearest-even, saturating at 448, NaN -> 0x7F: tf_core's f32_to_e4m3 step by step.
__device__ __forceinline__ u32 e4m3_encode(float x) {
    if (isnan(x)) return 0x7Fu;
    const u32 sign = (__float_as_uint(x) >> 31) << 7, bits = __float_as_uint(x) & 0x7FFFFFFFu;
    const int f32_exp = (int)(bits >> 23);
    if (f32_exp == 0) return sign;
    const int e = max(f32_exp - 127, -6);
    if (e > 9) return sign | 0x7Eu;
    const float quantum = __uint_as_float((u32)(127 + e - 3) << 23);
    const u32 n = (u32)rintf(__fdiv_rn(__uint_as_float(bits), quantum));
    return sign | min(((u32)(e + 6) << 3) + n, 0x7Eu);
}

// Lane `lane` of a full warp holds element `lane` of a 32-group: writes its code to *code and (lane 0) the group's scale to *scale.
__device__ __forceinline__ void quant_group32(float v, int lane, u8* code, float* scale) {
    // fmaxf skips NaN like f32::max, and max is exact, so the butterfly order cannot change the result.
    float amax = fabsf(v);
    for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, off));
    const float s = fast_round_scale(fmaxf(amax, 1e-4f));
    float q = __fdiv_rn(v, s);
    q = q < -448.0f ? -448.0f : (q > 448.0f ? 448.0f : q);
    *code = (u8)e4m3_encode(q);
    if (lane == 0) *scale = s;
}
