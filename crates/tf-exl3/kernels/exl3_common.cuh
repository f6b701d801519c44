// EXL3 helpers every kernels/exl3*.cu file shares (quant.md §1); tf_exl3::cuda puts this file before each of them.
#include <cuda_fp16.h>

using u16 = unsigned short;
using u32 = unsigned int;
using u64 = unsigned long long;

// Positions of a 16×16 tile, and the Hadamard block EXL3 transforms in.
#define TILE 256
#define HAD 128

namespace {
constexpr u32 INST3_MUL = 89226354u, INST3_ADD = 64248484u, MCG_MULT = 0xCBAC1FEDu, MUL1_MULT = 0x83DCD12Du;
constexpr u16 MUL1_K_INV = 0x1EEE, MUL1_K_BIAS = 0xC931;

__device__ __forceinline__ float f16(u16 b) { return __half2float(__ushort_as_half(b)); }
__device__ __forceinline__ u16 to_f16(float v) { return __half_as_ushort(__float2half_rn(v)); }

// 3INST/MCG: sign and low 12 bits of each half with the exponent forced, the two fp16 halves added (exact in f32), rounded once.
__device__ __forceinline__ u16 two_halves(u32 x) {
    x = (x & 0x8FFF8FFFu) ^ 0x3B603B60u;
    return to_f16(__fadd_rn(f16((u16)x), f16((u16)(x >> 16))));
}

// A 16-bit state's fp16 weight in codebook cb (0 3INST, 1 MCG, 2 MUL1), as Codebook::decode.
__device__ __forceinline__ u16 decode_state(u32 st, int cb) {
    if (cb == 0) return two_halves(st * INST3_MUL + INST3_ADD);
    if (cb == 1) return two_halves(st * MCG_MULT);
    const u32 y = st * MUL1_MULT;
    const u32 sum = __dp4a(y, 0x01010101u, 0u);
    return to_f16(__fadd_rn(__fmul_rn((float)(1024u + sum), f16(MUL1_K_INV)), f16(MUL1_K_BIAS)));
}

// Where position p's 16-bit window lies in a record (8K u32 words, MSB first): its two words and the window's first bit.
struct Window {
    int w0, w1, shift;
};

__device__ __forceinline__ Window window_at(int k, int p) {
    const int len = TILE * k, nw = 8 * k;
    const int start = ((p + 1) * k - 16 + len) % len;
    return Window{start / 32, (start / 32 + 1) % nw, start % 32};
}

// The two words holding a window, as one u64 (the first in the high half).
__device__ __forceinline__ u64 window_words(const u32* __restrict__ words, const Window& w) {
    return ((u64)__ldg(words + w.w0) << 32) | (u64)__ldg(words + w.w1);
}

// The state in a window from window_words: the 16 bits ending at (p+1)·K, wrapping.
__device__ __forceinline__ u32 window_state(u64 v, int shift) { return (u32)(v >> (48 - shift)) & 0xFFFFu; }

// Position p's cell r·16 + c in the tile: the mma B-fragment order of trellis::tile_perm.
__device__ __forceinline__ int tile_cell(int p) {
    const int t = p / 8, j = p % 8;
    const int r = 2 * (t % 4) + ((j & 1) ? 1 : 0) + ((j & 2) ? 8 : 0);
    const int c = t / 4 + ((j & 4) ? 8 : 0);
    return r * 16 + c;
}

// Tile (tr, tc)'s record as u32 words: the u16 pairs (2m, 2m+1) read little-endian.
__device__ __forceinline__ const u32* record(const u16* __restrict__ trellis, int tr, int tc, int tn, int k) {
    return reinterpret_cast<const u32*>(trellis + ((size_t)tr * tn + tc) * 16 * k);
}

// fwht_blocks over `rows` rows of n values in shared memory, by the whole block (pairs round as the CPU's do).
__device__ __forceinline__ void fwht_rows(float* v, int rows, int n) {
    const int pairs = rows * n / 2;
    for (int h = 1; h < HAD; h *= 2) {
        for (int i = threadIdx.x; i < pairs; i += blockDim.x) {
            const int r = i / (n / 2), p = i % (n / 2);
            float* row = v + r * n;
            const int j = (p / h) * 2 * h + p % h;
            const float a = row[j], b = row[j + h];
            row[j] = __fadd_rn(a, b);
            row[j + h] = __fsub_rn(a, b);
        }
        __syncthreads();
    }
    const float norm = 1.0f / sqrtf((float)HAD);
    for (int i = threadIdx.x; i < rows * n; i += blockDim.x) v[i] = __fmul_rn(v[i], norm);
    __syncthreads();
}

// fwht_blocks on one 128-block held by a warp (lane l: elements l, l+32, l+64, l+96): the same pairs and roundings, no barriers.
__device__ __forceinline__ void fwht128_warp(float (&r)[4], int lane) {
    for (int h = 1; h < 32; h *= 2) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const float o = __shfl_xor_sync(0xffffffffu, r[q], h);
            r[q] = (lane & h) ? __fsub_rn(o, r[q]) : __fadd_rn(r[q], o);
        }
    }
    float a = r[0], b = r[1];
    r[0] = __fadd_rn(a, b), r[1] = __fsub_rn(a, b);
    a = r[2], b = r[3];
    r[2] = __fadd_rn(a, b), r[3] = __fsub_rn(a, b);
    a = r[0], b = r[2];
    r[0] = __fadd_rn(a, b), r[2] = __fsub_rn(a, b);
    a = r[1], b = r[3];
    r[1] = __fadd_rn(a, b), r[3] = __fsub_rn(a, b);
    const float norm = 1.0f / sqrtf((float)HAD);
#pragma unroll
    for (int q = 0; q < 4; ++q) r[q] = __fmul_rn(r[q], norm);
}
}  // namespace

// One EXL3 linear as the job kernels read it (exl3_mma::dev_row): bias may be null; cb 0 3INST, 1 MCG, 2 MUL1.
struct Exl3Dev {
    const u16* trellis;
    const u16* suh;
    const u16* svh;
    const float* bias;
    int k;
    int cb;
};

// Job z's table row, or null when its id is outside [0, experts).
__device__ __forceinline__ const Exl3Dev* job_row(const Exl3Dev* table, const int* ids, int experts, int z) {
    const int e = ids ? ids[z] : 0;
    return e >= 0 && e < experts ? table + e : nullptr;
}

// ---- Fast path (tolerance, not bits): states decoded straight into mma B fragments, x as fp16 hi + lo·2^11 rows, f32 accumulation.
#ifndef EXL3_K
#define EXL3_K 3
#endif
#ifndef EXL3_CB
#define EXL3_CB 2
#endif
// Warps per block, one 16-column tile each: a block owns 128 outputs, one Hadamard block, so it can finish them itself.
#define MMA_WARPS 8
#define MMA_MAX_RG 2

namespace {
// Two states' fp16 weights as one half2 (low half = a): the same values as decode_state, hfma2/hadd2 rounding once.
__device__ __forceinline__ u32 decode_pair(u32 a, u32 b) {
#if EXL3_CB == 2
    // fp16 bits of 1024 + bytesum: 0x6400 plus a sum of at most 1020 fills only the mantissa.
    const u32 sa = __dp4a(a * MUL1_MULT, 0x01010101u, 0x6400u), sb = __dp4a(b * MUL1_MULT, 0x01010101u, 0x6400u);
    const u32 ints = __byte_perm(sa, sb, 0x5410);
    const __half2 kinv = __halves2half2(__ushort_as_half(MUL1_K_INV), __ushort_as_half(MUL1_K_INV));
    const __half2 kbias = __halves2half2(__ushort_as_half(MUL1_K_BIAS), __ushort_as_half(MUL1_K_BIAS));
    const __half2 h = __hfma2(*reinterpret_cast<const __half2*>(&ints), kinv, kbias);
    return *reinterpret_cast<const u32*>(&h);
#else
    u32 xa = EXL3_CB == 0 ? a * INST3_MUL + INST3_ADD : a * MCG_MULT;
    u32 xb = EXL3_CB == 0 ? b * INST3_MUL + INST3_ADD : b * MCG_MULT;
    xa = (xa & 0x8FFF8FFFu) ^ 0x3B603B60u;
    xb = (xb & 0x8FFF8FFFu) ^ 0x3B603B60u;
    const u32 lo = __byte_perm(xa, xb, 0x5410), hi = __byte_perm(xa, xb, 0x7632);
    const __half2 h = __hadd2(*reinterpret_cast<const __half2*>(&lo), *reinterpret_cast<const __half2*>(&hi));
    return *reinterpret_cast<const u32*>(&h);
#endif
}

// The 16 bits at compile-time offset O of the 96-bit window h:m:l (MSB first).
template <int O>
__device__ __forceinline__ u32 bits16(u32 h, u32 m, u32 l) {
    static_assert(O + 16 <= 96, "window");
    if constexpr (O >= 64) return (l >> (80 - O)) & 0xFFFFu;
    else if constexpr (O >= 32) return __funnelshift_l(l, m, O - 32) >> 16;
    else return __funnelshift_l(m, h, O) >> 16;
}

// Lane l decodes positions 8l..8l+7 of a tile: their windows are 7K+16 contiguous bits from (8lK + K - 16) mod 256K.
struct Lane {
    int i0, i1, i2, sh;
};

template <int K = EXL3_K>
__device__ __forceinline__ Lane lane_window(int lane) {
    constexpr int WORDS = 8 * K;
    const int start = (8 * lane * K + K - 16 + TILE * K) % (TILE * K), i0 = start / 32;
    return Lane{i0, (i0 + 1) % WORDS, (i0 + 2) % WORDS, start % 32};
}

// The lane's four B-fragment registers of one tile record: positions (8l, 8l+1), (+2, +3), (+4, +5), (+6, +7).
template <int K = EXL3_K>
__device__ __forceinline__ void lane_frag(const u32* rec, const Lane& ln, u32* b) {
    const u32 a0 = rec[ln.i0], a1 = rec[ln.i1], a2 = rec[ln.i2], sh = ln.sh;
    const u32 h = sh ? __funnelshift_l(a1, a0, sh) : a0, m = sh ? __funnelshift_l(a2, a1, sh) : a1, l = a2 << sh;
    b[0] = decode_pair(bits16<0>(h, m, l), bits16<K>(h, m, l));
    b[1] = decode_pair(bits16<2 * K>(h, m, l), bits16<3 * K>(h, m, l));
    b[2] = decode_pair(bits16<4 * K>(h, m, l), bits16<5 * K>(h, m, l));
    b[3] = decode_pair(bits16<6 * K>(h, m, l), bits16<7 * K>(h, m, l));
}

// mma.m16n8k16 f16×f16 → f32: d += a·b.
__device__ __forceinline__ void mma16816(float* d, const uint4& a, u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void cp16(void* smem, const void* gmem) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((u32)__cvta_generic_to_shared(smem)), "l"(gmem));
}

}  // namespace
