// EXL3 trellis linears (quant.md §1): tiles decoded exactly as tf_exl3::exl3 does, and y = x·W in Exl3Weight::forward's order.
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
    const u32 sum = (y & 0xFF) + ((y >> 8) & 0xFF) + ((y >> 16) & 0xFF) + (y >> 24);
    return to_f16(__fadd_rn(__fmul_rn((float)(1024u + sum), f16(MUL1_K_INV)), f16(MUL1_K_BIAS)));
}

// The two words holding position p's 16-bit window (8K u32 words per record, MSB first), and the window's first bit.
__device__ __forceinline__ u64 window_words(const u32* __restrict__ words, int k, int p, int& shift) {
    const int len = TILE * k, nw = 8 * k;
    const int start = ((p + 1) * k - 16 + len) % len;
    const int w0 = start / 32;
    shift = start % 32;
    return ((u64)__ldg(words + w0) << 32) | (u64)__ldg(words + (w0 + 1) % nw);
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

// fwht_blocks on one 128-block in shared memory: butterflies level by level (each pair rounds alone), then × 1/√128.
__device__ __forceinline__ void fwht128(float* v) {
    const int t = threadIdx.x;
    for (int h = 1; h < HAD; h *= 2) {
        if (t < HAD / 2) {
            const int j = (t / h) * 2 * h + t % h;
            const float a = v[j], b = v[j + h];
            v[j] = __fadd_rn(a, b);
            v[j + h] = __fsub_rn(a, b);
        }
        __syncthreads();
    }
    const float norm = 1.0f / sqrtf((float)HAD);
    if (t < HAD) v[t] = __fmul_rn(v[t], norm);
    __syncthreads();
}
}  // namespace

// Grid (in_p/16, out_p/16), 256 threads: q fp16 bits [in_p][out_p] = each tile's states through codebook cb.
extern "C" __global__ void exl3_decode_q(const u16* __restrict__ trellis, u16* __restrict__ q, int out_p, int k, int cb) {
    const int tr = blockIdx.x, tc = blockIdx.y, tn = gridDim.y, p = threadIdx.x;
    const int cell = tile_cell(p);
    int shift;
    const u32 st = window_state(window_words(record(trellis, tr, tc, tn, k), k, p, shift), shift);
    q[(size_t)(tr * 16 + cell / 16) * out_p + tc * 16 + cell % 16] = decode_state(st, cb);
}

// Grid (rows, n/128), 128 threads: y = fwht_blocks(x ⊙ s) per 128-block (s fp16, one per column; the input side).
extern "C" __global__ void exl3_had_in(const float* __restrict__ x, const u16* __restrict__ s, float* __restrict__ y, int n) {
    __shared__ float v[HAD];
    const size_t at = (size_t)blockIdx.x * n + blockIdx.y * HAD + threadIdx.x;
    v[threadIdx.x] = __fmul_rn(x[at], f16(s[blockIdx.y * HAD + threadIdx.x]));
    __syncthreads();
    fwht128(v);
    y[at] = v[threadIdx.x];
}

// Grid (rows, n/128), 128 threads: y = fwht_blocks(x) ⊙ s (+ bias) per 128-block (the output side).
extern "C" __global__ void exl3_had_out(const float* __restrict__ x, const u16* __restrict__ s, const float* __restrict__ bias,
                                        float* __restrict__ y, int n, int has_bias) {
    __shared__ float v[HAD];
    const int col = blockIdx.y * HAD + threadIdx.x;
    const size_t at = (size_t)blockIdx.x * n + col;
    v[threadIdx.x] = x[at];
    __syncthreads();
    fwht128(v);
    float o = __fmul_rn(v[threadIdx.x], f16(s[col]));
    if (has_bias) o = __fadd_rn(o, bias[col]);
    y[at] = o;
}

// Grid (out_p/16), 256 threads: y[r, c] = Σ_i x[r, i]·Q[i, c] in i order from +0 (forward_q's sum), rows ≤ 8; thread (r, c) adds one tile while the next is decoded.
extern "C" __global__ void exl3_gemv_seq(const float* __restrict__ x, const u16* __restrict__ trellis, float* __restrict__ y,
                                         int rows, int in_p, int out_p, int k, int cb) {
    __shared__ float q_s[2][TILE];
    __shared__ float x_s[2][8 * 16];
    const int tc = blockIdx.x, tn = gridDim.x, t = threadIdx.x, tiles = in_p / 16;
    const int cell = tile_cell(t);
    const bool adder = t < 16 * rows;
    const int r = t / 16, c = t % 16;
    // Tile tr's stream words and x values load one tile before they are decoded, so memory latency hides behind the adds.
    u64 v = 0;
    float xv = 0.0f;
    int shift = 0;
    auto fetch = [&](int tr) {
        v = window_words(record(trellis, tr, tc, tn, k), k, t, shift);
        if (adder) xv = __ldg(x + (size_t)r * in_p + tr * 16 + c);
    };
    auto stage = [&](int buf) {
        q_s[buf][cell] = f16(decode_state(window_state(v, shift), cb));
        if (adder) x_s[buf][t] = xv;
    };
    float acc = 0.0f;
    fetch(0);
    stage(0);
    if (tiles > 1) fetch(1);
    __syncthreads();
    for (int tr = 0; tr < tiles; ++tr) {
        if (tr + 1 < tiles) stage((tr + 1) & 1);
        if (tr + 2 < tiles) fetch(tr + 2);
        if (adder) {
            const float* qb = q_s[tr & 1];
            const float* xb = x_s[tr & 1] + r * 16;
#pragma unroll
            for (int i = 0; i < 16; ++i) acc = __fadd_rn(acc, __fmul_rn(xb[i], qb[i * 16 + c]));
        }
        __syncthreads();
    }
    if (adder) y[(size_t)r * out_p + tc * 16 + c] = acc;
}
