// Dense x·Wᵀ of the dsv41 forward (linear.rs Dense, attn grouped_out): f32 sums in a fixed order that never depends on the batch.
#include <cuda_bf16.h>

// A block is DENSE_WARPS warps; a team of `slices` warps owns DENSE_OUTS outputs of one group for DENSE_ROWS rows.
#define DENSE_WARPS 8
#define DENSE_OUTS 4
#define DENSE_ROWS 8
// Elements per chunk: one 16-byte load of bf16; chunk c of a row belongs to team thread c mod (32·slices).
#define DENSE_CHUNK 8

typedef unsigned short bf16_bits;

__device__ __forceinline__ float widen(bf16_bits v) { return __uint_as_float((unsigned)v << 16); }
__device__ __forceinline__ float widen(float v) { return v; }

// f32 → bf16 as tf_core::formats::to_bf16: round to nearest even, a NaN keeps its sign and payload and turns quiet.
__device__ __forceinline__ bf16_bits bf16_rne(float x) {
    const unsigned b = __float_as_uint(x);
    if ((b & 0x7FFFFFFFu) > 0x7F800000u) return (bf16_bits)((b >> 16) | 0x40u);
    return (bf16_bits)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ void store(float* y, float v) { *y = v; }
__device__ __forceinline__ void store(bf16_bits* y, float v) { *y = bf16_rne(v); }

// Eight elements from p widened to f32: one or two 16-byte loads when aligned, else element by element (same values).
__device__ __forceinline__ void load_chunk(const bf16_bits* p, bool vec, float out[DENSE_CHUNK]) {
    if (vec) {
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
        const unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            out[2 * i] = __uint_as_float(words[i] << 16);
            out[2 * i + 1] = __uint_as_float(words[i] & 0xFFFF0000u);
        }
    } else {
#pragma unroll
        for (int i = 0; i < DENSE_CHUNK; ++i) out[i] = widen(__ldg(p + i));
    }
}

__device__ __forceinline__ void load_chunk(const float* p, bool vec, float out[DENSE_CHUNK]) {
    if (vec) {
        const float4 a = __ldg(reinterpret_cast<const float4*>(p));
        const float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
        out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
        out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
    } else {
#pragma unroll
        for (int i = 0; i < DENSE_CHUNK; ++i) out[i] = __ldg(p + i);
    }
}

// True when every row of `ld` elements starting at p is 16-byte aligned, so chunk loads can be vectors.
template <typename T>
__device__ __forceinline__ bool rows_aligned(const T* p, long long ld) {
    return ((unsigned long long)p % 16 == 0) && ((unsigned long long)ld * sizeof(T) % 16 == 0);
}

// Grid: x = output tiles (DENSE_WARPS / slices teams per block), y = tiles of DENSE_ROWS rows. Tiles never straddle groups. Each thread sums its chunks in increasing order with fma; a fixed xor tree joins a warp, then the slices add in order.
template <typename X, typename W, typename Y>
__device__ __forceinline__ void dense_body(const X* __restrict__ x, const W* __restrict__ w, Y* __restrict__ y, int rows,
                                           int n, int k, int groups, int slices) {
    __shared__ float partial[DENSE_WARPS][DENSE_ROWS * DENSE_OUTS];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int slice = warp % slices, teams = DENSE_WARPS / slices;
    const int per_group = n / groups;
    const int tiles_per_group = (per_group + DENSE_OUTS - 1) / DENSE_OUTS;
    const long long tile = (long long)blockIdx.x * teams + warp / slices;
    const int g = (int)(tile / tiles_per_group);
    const int first = (int)(tile % tiles_per_group) * DENSE_OUTS;
    const int outs = g < groups ? min(DENSE_OUTS, per_group - first) : 0;
    const int o0 = g * per_group + first;
    const int r0 = blockIdx.y * DENSE_ROWS;
    const int nr = min(DENSE_ROWS, rows - r0);
    const long long ldx = (long long)groups * k;
    const bool vec_w = rows_aligned(w, k), vec_x = rows_aligned(x, k) && rows_aligned(x, ldx);
    const int full = k / DENSE_CHUNK, tail = k % DENSE_CHUNK, chunks = full + (tail != 0);
    float acc[DENSE_ROWS][DENSE_OUTS];
#pragma unroll
    for (int r = 0; r < DENSE_ROWS; ++r)
#pragma unroll
        for (int o = 0; o < DENSE_OUTS; ++o) acc[r][o] = 0.0f;
    const W* wt = w + (long long)o0 * k;
    const X* xt = x + (long long)r0 * ldx + (long long)g * k;
    for (int c = slice * 32 + lane; outs > 0 && c < chunks; c += 32 * slices) {
        const long long at = (long long)c * DENSE_CHUNK;
        if (c < full) {
            float wv[DENSE_OUTS][DENSE_CHUNK];
#pragma unroll
            for (int o = 0; o < DENSE_OUTS; ++o)
                if (o < outs) load_chunk(wt + o * (long long)k + at, vec_w, wv[o]);
#pragma unroll
            for (int r = 0; r < DENSE_ROWS; ++r) {
                if (r >= nr) break;
                float xv[DENSE_CHUNK];
                load_chunk(xt + r * ldx + at, vec_x, xv);
#pragma unroll
                for (int o = 0; o < DENSE_OUTS; ++o) {
                    if (o >= outs) break;
#pragma unroll
                    for (int e = 0; e < DENSE_CHUNK; ++e) acc[r][o] = __fmaf_rn(xv[e], wv[o][e], acc[r][o]);
                }
            }
        } else {
            // The ragged last chunk: only its `tail` elements, in the same order, so no padded term touches a sum.
            for (int e = 0; e < tail; ++e) {
#pragma unroll
                for (int r = 0; r < DENSE_ROWS; ++r) {
                    if (r >= nr) break;
                    const float xe = widen(__ldg(xt + r * ldx + at + e));
#pragma unroll
                    for (int o = 0; o < DENSE_OUTS; ++o)
                        if (o < outs) acc[r][o] = __fmaf_rn(xe, widen(__ldg(wt + o * (long long)k + at + e)), acc[r][o]);
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < DENSE_ROWS; ++r)
#pragma unroll
        for (int o = 0; o < DENSE_OUTS; ++o) {
            float v = acc[r][o];
            // xor partners add the same two values, so every lane ends with the same bits.
            for (int m = 16; m > 0; m >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, m));
            acc[r][o] = v;
        }
    if (slices == 1) {
        if (lane == 0)
            for (int r = 0; r < nr; ++r)
                for (int o = 0; o < outs; ++o) store(y + (long long)(r0 + r) * n + o0 + o, acc[r][o]);
        return;
    }
    if (lane == 0)
#pragma unroll
        for (int r = 0; r < DENSE_ROWS; ++r)
#pragma unroll
            for (int o = 0; o < DENSE_OUTS; ++o) partial[warp][r * DENSE_OUTS + o] = acc[r][o];
    __syncthreads();
    if (slice == 0) {
        const int r = lane / DENSE_OUTS, o = lane % DENSE_OUTS;
        if (r < nr && o < outs) {
            float v = partial[warp][lane];
            for (int s = 1; s < slices; ++s) v = __fadd_rn(v, partial[warp + s][lane]);
            store(y + (long long)(r0 + r) * n + o0 + o, v);
        }
    }
}

extern "C" __global__ void __launch_bounds__(DENSE_WARPS * 32)
dense_xb_wb_yb(const bf16_bits* x, const bf16_bits* w, bf16_bits* y, int rows, int n, int k, int groups, int slices) {
    dense_body(x, w, y, rows, n, k, groups, slices);
}
extern "C" __global__ void __launch_bounds__(DENSE_WARPS * 32)
dense_xb_wb_yf(const bf16_bits* x, const bf16_bits* w, float* y, int rows, int n, int k, int groups, int slices) {
    dense_body(x, w, y, rows, n, k, groups, slices);
}
extern "C" __global__ void __launch_bounds__(DENSE_WARPS * 32)
dense_xb_wf_yb(const bf16_bits* x, const float* w, bf16_bits* y, int rows, int n, int k, int groups, int slices) {
    dense_body(x, w, y, rows, n, k, groups, slices);
}
extern "C" __global__ void __launch_bounds__(DENSE_WARPS * 32)
dense_xb_wf_yf(const bf16_bits* x, const float* w, float* y, int rows, int n, int k, int groups, int slices) {
    dense_body(x, w, y, rows, n, k, groups, slices);
}
extern "C" __global__ void __launch_bounds__(DENSE_WARPS * 32)
dense_xf_wb_yb(const float* x, const bf16_bits* w, bf16_bits* y, int rows, int n, int k, int groups, int slices) {
    dense_body(x, w, y, rows, n, k, groups, slices);
}
extern "C" __global__ void __launch_bounds__(DENSE_WARPS * 32)
dense_xf_wb_yf(const float* x, const bf16_bits* w, float* y, int rows, int n, int k, int groups, int slices) {
    dense_body(x, w, y, rows, n, k, groups, slices);
}
extern "C" __global__ void __launch_bounds__(DENSE_WARPS * 32)
dense_xf_wf_yb(const float* x, const float* w, bf16_bits* y, int rows, int n, int k, int groups, int slices) {
    dense_body(x, w, y, rows, n, k, groups, slices);
}
extern "C" __global__ void __launch_bounds__(DENSE_WARPS * 32)
dense_xf_wf_yf(const float* x, const float* w, float* y, int rows, int n, int k, int groups, int slices) {
    dense_body(x, w, y, rows, n, k, groups, slices);
}
