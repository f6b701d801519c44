// Block-scaled FP8 GEMM for prompt rows on CUDA cores (tf_core::ops::qgemm_f32): each output summed alone in the CPU's order.
#include <cuda_fp16.h>

// NVRTC has no <stdint.h>; these are the fixed widths on every CUDA target.
using u8 = unsigned char;
using u16 = unsigned short;
using u32 = unsigned int;
using u64 = unsigned long long;

// Weight scales: 0 = E8M0 bytes (V4 checkpoints), 1 = f32 values (V3-style scale_inv).
#ifndef FP8_WSCALE_F32
#define FP8_WSCALE_F32 0
#endif

namespace {
// A block computes 64 rows × 64 outputs; thread (ty, tx) of 16 × 16 owns rows 4ty.. and outputs 4tx..
constexpr int BM = 64, BN = 64, TM = 4, TN = 4, THREADS = 256;
// Shared planes [lane][c][64 + 8 padding]: a row's element 8c+lane at [lane][c][row]; the padding spreads banks.
constexpr int PLANE = BM + 8;
static_assert(BM == BN && BM / TM * (BN / TN) == THREADS, "one micro-tile per thread");

// E8M0 byte -> 2^(b-127); 0 is the f32 subnormal 2^-127 and 255 is NaN, as tf_core's e8m0_to_f32.
__device__ __forceinline__ float e8m0_to_f32(u32 b) {
    return b == 0xFFu ? __uint_as_float(0x7FC00000u) : b == 0u ? __uint_as_float(0x00400000u) : __uint_as_float(b << 23);
}

// Two E4M3 codes -> exact f32 by the hardware cvt; 0x7F/0xFF become NaN, as tf_core's table.
__device__ __forceinline__ float2 e4m3x2_to_f32(u32 pair) {
    u32 h2;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"((u16)pair));
    return __half22float2(*reinterpret_cast<const __half2*>(&h2));
}

// Eight codes (elements 8j..8j+7 of a 32-block, j = piece) of `row` into the planes: element 8j+l goes to [l][j][row].
__device__ __forceinline__ void store8(float* planes, u64 codes, int row, int piece) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        const float2 f = e4m3x2_to_f32((u32)(codes >> (16 * q)) & 0xFFFFu);
        planes[((2 * q) * 4 + piece) * PLANE + row] = f.x;
        planes[((2 * q + 1) * 4 + piece) * PLANE + row] = f.y;
    }
}

// One lane's 4-term sums for the thread's 4 × 4 (row, output) pairs: v = ((x0·w0 + x1·w1) + x2·w2) + x3·w3, exact products.
__device__ __forceinline__ void lane_sums(const float* xp, const float* wp, int lane, int ty, int tx, float (&v)[TM][TN]) {
    // The CPU starts each lane at +0.0 and adds products; fma onto +0.0 gives the same bits, -0.0 included.
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) v[i][j] = 0.0f;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
        const float4 xs = *reinterpret_cast<const float4*>(xp + (lane * 4 + c) * PLANE + TM * ty);
        const float4 ws = *reinterpret_cast<const float4*>(wp + (lane * 4 + c) * PLANE + TN * tx);
        const float xv[TM] = {xs.x, xs.y, xs.z, xs.w}, wv[TN] = {ws.x, ws.y, ws.z, ws.w};
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) v[i][j] = __fmaf_rn(xv[i], wv[j], v[i][j]);
    }
}

// Two lanes' sums added pairwise: dst = lane a + lane b, the tree's first level.
__device__ __forceinline__ void lane_pair(const float* xp, const float* wp, int a, int b, int ty, int tx, float (&dst)[TM][TN]) {
    float va[TM][TN], vb[TM][TN];
    lane_sums(xp, wp, a, ty, tx, va);
    lane_sums(xp, wp, b, ty, tx, vb);
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) dst[i][j] = __fadd_rn(va[i][j], vb[i][j]);
}
}  // namespace

// y[r, n] = Σ_kb ((tree of 8 lanes of Σ_c xq·wq) · xs[r, kb]) · ws[n/32, kb] in K order, as qgemm_f32; rows and n ragged.
extern "C" __global__ void __launch_bounds__(THREADS, 2)
fp8_gemm(const u8* __restrict__ w, const void* __restrict__ wscale, const u8* __restrict__ xq,
         const float* __restrict__ xscale, float* __restrict__ y, int rows, int n, int k) {
    __shared__ __align__(16) float xp[32 * PLANE];
    __shared__ __align__(16) float wp[32 * PLANE];
    __shared__ float sx[BM];
    __shared__ float sw[BN / 32];
    const int t = threadIdx.x, tx = t % 16, ty = t / 16;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN, kbt = k / 32;
    // Loader: thread t moves 8 codes (piece t % 4) of tile row t / 4, for the activations and the weights.
    const int lrow = t / 4, piece = t % 4;
    const bool xok = m0 + lrow < rows, wok = n0 + lrow < n;
    const u8* xsrc = xq + (size_t)min(m0 + lrow, rows - 1) * k + piece * 8;
    const u8* wsrc = w + (size_t)min(n0 + lrow, n - 1) * k + piece * 8;
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    // Rows and outputs past the edge load code 0 (+0.0) and are never written.
    u64 xc = xok ? __ldg(reinterpret_cast<const u64*>(xsrc)) : 0ull;
    u64 wc = wok ? __ldg(reinterpret_cast<const u64*>(wsrc)) : 0ull;
    for (int kb = 0; kb < kbt; ++kb) {
        __syncthreads();
        store8(xp, xc, lrow, piece);
        store8(wp, wc, lrow, piece);
        if (t < BM) sx[t] = m0 + t < rows ? __ldg(xscale + (size_t)(m0 + t) * kbt + kb) : 0.0f;
        if (t >= BM && t < BM + BN / 32) {
            const int g = min((n0 >> 5) + (t - BM), (n - 1) >> 5);
#if FP8_WSCALE_F32
            sw[t - BM] = __ldg(reinterpret_cast<const float*>(wscale) + (size_t)g * kbt + kb);
#else
            sw[t - BM] = e8m0_to_f32(__ldg(reinterpret_cast<const u8*>(wscale) + (size_t)g * kbt + kb));
#endif
        }
        __syncthreads();
        // The next block's codes are in flight while this one is summed.
        if (kb + 1 < kbt) {
            xc = xok ? __ldg(reinterpret_cast<const u64*>(xsrc + (size_t)(kb + 1) * 32)) : 0ull;
            wc = wok ? __ldg(reinterpret_cast<const u64*>(wsrc + (size_t)(kb + 1) * 32)) : 0ull;
        }
        // The tree ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)), built a pair of lanes at a time to bound live registers.
        float ab[TM][TN], cd[TM][TN], tmp[TM][TN];
        lane_pair(xp, wp, 0, 4, ty, tx, ab);
        lane_pair(xp, wp, 2, 6, ty, tx, tmp);
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) ab[i][j] = __fadd_rn(ab[i][j], tmp[i][j]);
        lane_pair(xp, wp, 1, 5, ty, tx, cd);
        lane_pair(xp, wp, 3, 7, ty, tx, tmp);
        const float swj = sw[(TN * tx) / 32];
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const float sxi = sx[TM * ty + i];
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                const float p = __fadd_rn(ab[i][j], __fadd_rn(cd[i][j], tmp[i][j]));
                acc[i][j] = __fadd_rn(acc[i][j], __fmul_rn(__fmul_rn(p, sxi), swj));
            }
        }
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int r = m0 + TM * ty + i;
        if (r >= rows) continue;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int c = n0 + TN * tx + j;
            if (c < n) y[(size_t)r * n + c] = acc[i][j];
        }
    }
}
