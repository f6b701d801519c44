// Shared by every dsv41 kernel (prepended to each source by src/cuda/kernels.rs): bf16 and exp exactly as the CPU rounds them.
#include <cuda_bf16.h>

// NVRTC has no <math.h> INFINITY.
#define F32_INF __int_as_float(0x7f800000)

typedef unsigned short bf16_bits;

__device__ __forceinline__ float widen(bf16_bits v) { return __uint_as_float((unsigned)v << 16); }

// f32 → bf16 as tf_core::formats::to_bf16: round to nearest even, a NaN keeps its sign and payload and turns quiet.
__device__ __forceinline__ bf16_bits bf16_rne(float x) {
    const unsigned b = __float_as_uint(x);
    if ((b & 0x7FFFFFFFu) > 0x7F800000u) return (bf16_bits)((b >> 16) | 0x40u);
    return (bf16_bits)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

// A 16-byte vector of bf16 or f32 as floats (bf16 element 0 in the low half of each word).
__device__ __forceinline__ void unpack(const uint4& v, const bf16_bits*, float* f) {
    const unsigned u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        f[2 * i] = __uint_as_float(u[i] << 16);
        f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
}
__device__ __forceinline__ void unpack(const uint4& v, const float*, float* f) {
    f[0] = __uint_as_float(v.x);
    f[1] = __uint_as_float(v.y);
    f[2] = __uint_as_float(v.z);
    f[3] = __uint_as_float(v.w);
}

// An f32 result as the CPU's bf16 tensors hold it: rounded to bf16, then widened back.
__device__ __forceinline__ float round_bf16(float x) { return widen(bf16_rne(x)); }

// tf_core::ops::math::exp step for step (f64 Taylor of degree 11 after k = round(x·log2 e)); libm's expf differs. FMA_QUOTIENTS: each r / n as r·RN(1/n) with Markstein's correction (tf_core's quotient_by_reciprocal), the same bits for every f32 input (tf-core's examples/exp_quotients.rs) without f64 divisions.
template <bool FMA_QUOTIENTS>
__device__ __forceinline__ float exp_taylor(float x) {
    if (x != x) return x;
    if (x > 89.0f) return F32_INF;
    if (x < -110.0f) return 0.0f;
    const double xd = (double)x;
    const double k = round(xd * 1.4426950408889634);
    const double r = xd - k * 0.6931471805599453;
    const double inv[11] = {0x1p+0, 0x1p-1, 0x1.5555555555555p-2, 0x1p-2, 0x1.999999999999ap-3, 0x1.5555555555555p-3,
                            0x1.2492492492492p-3, 0x1p-3, 0x1.c71c71c71c71cp-4, 0x1.999999999999ap-4, 0x1.745d1745d1746p-4};
    double p = 1.0;
    for (int n = 11; n >= 1; --n) {
        if (FMA_QUOTIENTS) {
            const double q = __dmul_rn(r, inv[n - 1]);
            p = __dadd_rn(1.0, __dmul_rn(__fma_rn(__fma_rn(-q, (double)n, r), inv[n - 1], q), p));
        } else {
            p = 1.0 + r / (double)n * p;
        }
    }
    return (float)(p * __longlong_as_double((long long)(k + 1023.0) << 52));
}

__device__ float exp_rn(float x) { return exp_taylor<false>(x); }

__device__ float exp_fma_rn(float x) { return exp_taylor<true>(x); }

// tf_core::ops::math's ln of a normal positive double: 2^e·m, m in [√½, √2), 2·atanh((m−1)/(m+1)) by 8 odd terms.
__device__ double ln_f64(double u) {
    const unsigned long long bits = (unsigned long long)__double_as_longlong(u);
    long long e = (long long)((bits >> 52) & 0x7ffull) - 1023;
    double m = __longlong_as_double((long long)((bits & 0x000fffffffffffffull) | (1023ull << 52)));
    if (m > 1.4142135623730951) {
        m /= 2.0;
        e += 1;
    }
    const double s = (m - 1.0) / (m + 1.0);
    const double s2 = s * s;
    double p = 0.0;
    for (int n = 7; n >= 0; --n) p = p * s2 + 1.0 / (double)(2 * n + 1);
    return (double)e * 0.6931471805599453 + 2.0 * s * p;
}

// tf_core::ops::math::ln_1p step for step.
__device__ float log1p_rn(float x) {
    if (x != x || x == F32_INF) return x;
    if (x < -1.0f) return __int_as_float(0x7fc00000);
    if (x == -1.0f) return -F32_INF;
    const double xd = (double)x;
    if (fabs(xd) < 1.0 / 536870912.0) return (float)(xd - xd * xd / 2.0);
    return (float)ln_f64(1.0 + xd);
}

// Float4 loads a one-thread sum of squares keeps in flight: shared-memory latency (~30 cycles) is hidden behind 8 × 4 dependent adds.
#define SEQ_AHEAD 8

// acc + a.x² + a.y² + a.z² + a.w², each product and sum rounded alone, in that order.
__device__ __forceinline__ float add_squares4(float acc, float4 a) {
    const float p0 = __fmul_rn(a.x, a.x), p1 = __fmul_rn(a.y, a.y), p2 = __fmul_rn(a.z, a.z), p3 = __fmul_rn(a.w, a.w);
    return __fadd_rn(__fadd_rn(__fadd_rn(__fadd_rn(acc, p0), p1), p2), p3);
}

// acc + Σ s[i]² for i < n in index order; s 16-byte aligned. Loads run SEQ_AHEAD float4s ahead of the adds.
__device__ __forceinline__ float seq_sum_squares(const float* s, int n, float acc) {
    const float4* s4 = reinterpret_cast<const float4*>(s);
    const int n4 = n / 4;
    float4 buf[SEQ_AHEAD];
#pragma unroll
    for (int j = 0; j < SEQ_AHEAD; ++j) buf[j] = j < n4 ? s4[j] : make_float4(0.f, 0.f, 0.f, 0.f);
    int q = 0;
    for (; q + SEQ_AHEAD <= n4; q += SEQ_AHEAD) {
#pragma unroll
        for (int j = 0; j < SEQ_AHEAD; ++j) {
            const float4 a = buf[j];
            if (q + SEQ_AHEAD + j < n4) buf[j] = s4[q + SEQ_AHEAD + j];
            acc = add_squares4(acc, a);
        }
    }
#pragma unroll
    for (int j = 0; j < SEQ_AHEAD; ++j)
        if (q + j < n4) acc = add_squares4(acc, buf[j]);
    for (int i = n4 * 4; i < n; ++i) acc = __fadd_rn(acc, __fmul_rn(s[i], s[i]));
    return acc;
}

// SumOrder::Lanes32's fold: lane l += lane l ^ m for m = 16, 8, 4, 2, 1; every lane of the warp must call it.
__device__ __forceinline__ float lanes32_fold(float v) {
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, m));
    return v;
}

// One lane's share of SumOrder::Lanes32 over s[0..n): elements lane, lane+32, … in order (s starts at a multiple of 32).
__device__ __forceinline__ float lane_sum_squares(const float* s, int n, int lane, float acc) {
#pragma unroll 8
    for (int i = lane; i < n; i += 32) acc = __fadd_rn(acc, __fmul_rn(s[i], s[i]));
    return acc;
}
