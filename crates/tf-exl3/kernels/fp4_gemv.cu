// FP4 expert GEMV for decode (tf_exl3::Fp4Weight::forward_f32): the same exact products, adds and order, so the same bits.
#include <cuda_fp16.h>

// NVRTC has no <stdint.h>; these are the fixed widths on every CUDA target.
using u8 = unsigned char;
using u16 = unsigned short;
using u32 = unsigned int;

// Activation rows per launch (1..8); each count is its own specialization, and a row's ops never depend on it.
#ifndef FP4_ROWS
#define FP4_ROWS 1
#endif
// Weight rows a thread loads per segment: its 16-byte loads in flight, and how often one activation block is reused.
#ifndef FP4_RT
#define FP4_RT 8
#endif
// Most threads a launch may use (the host's plan picks 32..this); registers are budgeted for it.
#ifndef FP4_MAX_THREADS
#define FP4_MAX_THREADS 288
#endif

static_assert(FP4_ROWS >= 1 && FP4_ROWS <= 8, "FP4_ROWS: 1..8 activation rows per launch");
static_assert(FP4_RT >= 1 && FP4_RT * FP4_ROWS <= 32, "FP4_RT: 1..32/FP4_ROWS weight rows per thread");
static_assert(FP4_MAX_THREADS % 32 == 0 && FP4_MAX_THREADS <= 1024, "FP4_MAX_THREADS: a multiple of 32, at most 1024");

// Two blocks of the grid per SM for one or two rows (registers capped near 112); more rows are FMA-bound, so one.
#define FP4_MIN_BLOCKS (FP4_ROWS <= 2 ? 2 : 1)

namespace {
constexpr int R = FP4_ROWS;
constexpr int RT = FP4_RT;
// One or two rows of a thread's activation block (32 or 64 floats) stay in registers across its RT weight rows.
constexpr bool XREG = R <= 2;
// Floats per activation block in shared memory: 4 of padding put lanes 144 bytes apart, in distinct banks.
constexpr int XBLK = 36;

// E8M0 byte -> 2^(b-127); 0 is the f32 subnormal 2^-127 and 255 is NaN, as tf_core's e8m0_to_f32.
__device__ __forceinline__ float e8m0_to_f32(u32 b) {
    const float v = __uint_as_float(b == 0u ? 0x00400000u : b << 23);
    return b == 0xFFu ? __uint_as_float(0x7FC00000u) : v;
}

// Four E4M3 codes (byte i is element i) -> exact f32 by the hardware cvt; 0x7F/0xFF become NaN, as tf_core's table.
__device__ __forceinline__ float4 e4m3x4_to_f32(u32 q) {
    u32 lo, hi;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(lo) : "h"((u16)q));
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(hi) : "h"((u16)(q >> 16)));
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&lo));
    const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&hi));
    return make_float4(a.x, a.y, b.x, b.y);
}

// Eight E2M1 codes (nibble j = element j) -> value × 2^-14: magnitude bits become an f16's exponent foot and mantissa top.
__device__ __forceinline__ void e2m1x8_scaled(u32 q, float (&w)[8]) {
#pragma unroll
    for (int p = 0; p < 4; ++p) {
        // Each half's top nibble (elements 3-p, 7-p) becomes an f16 from one opaque shift, so both masks share it.
        u32 s = q;
        if (p > 0) asm("shl.b32 %0, %1, %2;" : "=r"(s) : "r"(q), "r"(4 * p));
        const u32 h = (s & 0x80008000u) + ((s & 0x70007000u) >> 3);
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
        w[3 - p] = f.x;
        w[7 - p] = f.y;
    }
}

// The reference's lane tree ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)).
__device__ __forceinline__ float tree8(const float (&a)[8]) {
    return __fadd_rn(__fadd_rn(__fadd_rn(a[0], a[4]), __fadd_rn(a[2], a[6])),
                     __fadd_rn(__fadd_rn(a[1], a[5]), __fadd_rn(a[3], a[7])));
}

// Weights are read once: skip L1 so they do not evict the activations.
__device__ __forceinline__ uint4 ld_stream(const u8* p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

// Shared memory of a launch: activations [R][seg][XBLK] then partials [G*R][PS]; the host computes the same.
__device__ __forceinline__ int part_stride(int seg) { return ((seg + 31) & ~31) + 4; }

__device__ __forceinline__ u32 smem_need(int seg, int m) {
    return 4u * (u32)(R * seg * XBLK + RT * m * R * part_stride(seg));
}

// Activation row r is row r of xq and writes row r of y.
struct Dense {
    __device__ __forceinline__ int x(int r) const { return r; }
    __device__ __forceinline__ int y(int r) const { return r; }
    __device__ __forceinline__ bool live(int) const { return true; }
};

// Row r of a grouped tile: activation row xr[r], output row yr[r]; rows past count repeat the last one and write nothing.
struct Gathered {
    const int* xr;
    const int* yr;
    int count;
    __device__ __forceinline__ int x(int r) const { return xr[r]; }
    __device__ __forceinline__ int y(int r) const { return yr[r]; }
    __device__ __forceinline__ bool live(int r) const { return r < count; }
};

// Rows n0..n0+G of one GEMV: thread t owns K block t % seg of each segment and rows t / seg + m*i, so a warp reads 512 contiguous bytes.
template <class Rows>
__device__ __forceinline__ void gemv_tile(const u8* __restrict__ w, const u8* __restrict__ ws,
                                          const u8* __restrict__ xq, const float* __restrict__ xs,
                                          float* __restrict__ y, int ystride, int n, int k, int seg, int n0,
                                          float* smem, const Rows rows) {
    const int t = threadIdx.x, m = blockDim.x / seg, kbl = t % seg, phase = t / seg;
    const int kbt = k / 32, ps = part_stride(seg), nout = RT * m * R;
    const size_t wrow = (size_t)k / 2;
    float* xf = smem;
    float* part = smem + R * seg * XBLK;
    float acc = 0.0f;
    for (int kb0 = 0; kb0 < kbt; kb0 += seg) {
        const int nb = min(seg, kbt - kb0), kb = kb0 + kbl;
        const bool kvalid = kbl < nb;
        // Weight loads first, so they are in flight while the activations are decoded.
        uint4 wv[RT];
        u32 sb[RT];
#pragma unroll
        for (int i = 0; i < RT; ++i) {
            const int row = n0 + phase + m * i;
            const bool ok = kvalid && row < n;
            // The address is clamped too: the compiler may run a non-volatile load before the test that guards it.
            const int rc = min(row, n - 1), kc = min(kb, kbt - 1);
            const uint4 v = ld_stream(w + rc * wrow + (size_t)kc * 16);
            wv[i] = ok ? v : make_uint4(0, 0, 0, 0);
            sb[i] = ok ? (u32)__ldg(ws + (size_t)rc * kbt + kc) : 127u;
        }
        // This segment's activation codes as f32, decoded once per block of the grid.
        for (int i = t; i < R * nb * 8; i += blockDim.x) {
            const int r = i / (nb * 8), j = i % (nb * 8);
            const u32 q = __ldg(reinterpret_cast<const u32*>(xq + (size_t)rows.x(r) * k + (size_t)kb0 * 32) + j);
            *reinterpret_cast<float4*>(xf + (r * seg + j / 8) * XBLK + (j % 8) * 4) = e4m3x4_to_f32(q);
        }
        __syncthreads();
        if (kvalid) {
            float sx[R];
#pragma unroll
            for (int r = 0; r < R; ++r) sx[r] = __ldg(xs + (size_t)rows.x(r) * kbt + kb);
            float xr[XREG ? R : 1][32];
            if (XREG) {
#pragma unroll
                for (int r = 0; r < (XREG ? R : 1); ++r)
#pragma unroll
                    for (int j = 0; j < 8; ++j) {
                        const float4 v = *reinterpret_cast<const float4*>(xf + (r * seg + kbl) * XBLK + 4 * j);
                        xr[r][4 * j] = v.x, xr[r][4 * j + 1] = v.y, xr[r][4 * j + 2] = v.z, xr[r][4 * j + 3] = v.w;
                    }
            }
#pragma unroll
            for (int i = 0; i < RT; ++i) {
                const int g = phase + m * i;
                if (n0 + g >= n) continue;
                const u32 words[4] = {wv[i].x, wv[i].y, wv[i].z, wv[i].w};
                float v[R][8];
#pragma unroll
                for (int r = 0; r < R; ++r)
#pragma unroll
                    for (int l = 0; l < 8; ++l) v[r][l] = 0.0f;
                // Element 8c+l adds into lane l; every product of an E4M3 and an E2M1 value is exact, so fma = add.
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    float wf[8];
                    e2m1x8_scaled(words[c], wf);
#pragma unroll
                    for (int r = 0; r < R; ++r) {
                        float xc[8];
                        if (XREG) {
#pragma unroll
                            for (int l = 0; l < 8; ++l) xc[l] = xr[XREG ? r : 0][8 * c + l];
                        } else {
                            const float* xp = xf + (r * seg + kbl) * XBLK + 8 * c;
                            const float4 a = *reinterpret_cast<const float4*>(xp);
                            const float4 b = *reinterpret_cast<const float4*>(xp + 4);
                            xc[0] = a.x, xc[1] = a.y, xc[2] = a.z, xc[3] = a.w;
                            xc[4] = b.x, xc[5] = b.y, xc[6] = b.z, xc[7] = b.w;
                        }
#pragma unroll
                        for (int l = 0; l < 8; ++l) v[r][l] = __fmaf_rn(xc[l], wf[l], v[r][l]);
                    }
                }
                const float sw = e8m0_to_f32(sb[i]);
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    // Lane sums (multiples of 2^-24) round in the tree as unscaled ones would, so × 2^14 is exact.
                    const float p = __fmul_rn(tree8(v[r]), 0x1p14f);
                    part[(g * R + r) * ps + kbl] = __fmul_rn(__fmul_rn(p, sx[r]), sw);
                }
            }
        }
        __syncthreads();
        // Thread (g, r) adds its output's block terms one by one, in K order, as the reference's `acc +=`.
        if (t < nout) {
            const float* pp = part + t * ps;
            int b = 0;
            for (; b + 4 <= nb; b += 4) {
                const float4 v = *reinterpret_cast<const float4*>(pp + b);
                acc = __fadd_rn(__fadd_rn(__fadd_rn(__fadd_rn(acc, v.x), v.y), v.z), v.w);
            }
            for (; b < nb; ++b) acc = __fadd_rn(acc, pp[b]);
        }
    }
    if (t < nout) {
        const int g = t / R, r = t % R;
        if (n0 + g < n && rows.live(r)) y[(size_t)rows.y(r) * ystride + n0 + g] = acc;
    }
}

// Traps on a launch whose shape or shared memory does not match the plan (a host bug, never data).
__device__ __forceinline__ void check_plan(int seg) {
    u32 dyn;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
    const int m = blockDim.x / seg;
    if (seg <= 0 || blockDim.x % seg != 0 || RT * R > seg || dyn < smem_need(seg, m)) __trap();
}
}  // namespace

// y[r, n] = Σ_kb ((Σ_32 xq·wq) · xs[r, kb]) · ws[n, kb] in K order: act_quant_fp8 rows against E2M1 w [n, k/2] and E8M0 ws [n, k/32].
extern "C" __global__ void __launch_bounds__(FP4_MAX_THREADS, FP4_MIN_BLOCKS)
fp4_gemv(const u8* __restrict__ w, const u8* __restrict__ ws, const u8* __restrict__ xq,
         const float* __restrict__ xs, float* __restrict__ y, int n, int k, int seg) {
    extern __shared__ __align__(16) float smem[];
    check_plan(seg);
    const int n0 = blockIdx.x * RT * (blockDim.x / seg);
    gemv_tile(w, ws, xq, xs, y, n, n, k, seg, n0, smem, Dense{});
}

#if FP4_ROWS == 1
// Routed experts: pair p (blockIdx.y) takes activation row p / x_div times expert ids[p] into y[p, :]; a bad id gives NaN, never a wild read.
extern "C" __global__ void __launch_bounds__(FP4_MAX_THREADS, FP4_MIN_BLOCKS)
fp4_gemv_routed(const u8* const* __restrict__ wptr, const u8* const* __restrict__ sptr, int experts,
                const int* __restrict__ ids, const u8* __restrict__ xq, const float* __restrict__ xs, int x_div,
                float* __restrict__ y, int n, int k, int seg) {
    extern __shared__ __align__(16) float smem[];
    check_plan(seg);
    const int p = blockIdx.y, e = __ldg(ids + p), a = p / x_div;
    const int n0 = blockIdx.x * RT * (blockDim.x / seg);
    float* yp = y + (size_t)p * n;
    if (e < 0 || e >= experts) {
        for (int g = threadIdx.x; g < RT * (blockDim.x / seg); g += blockDim.x)
            if (n0 + g < n) yp[n0 + g] = __uint_as_float(0x7FC00000u);
        return;
    }
    gemv_tile(wptr[e], sptr[e], xq + (size_t)a * k, xs + (size_t)a * (k / 32), yp, n, n, k, seg, n0, smem, Dense{});
}
#endif

// Grouped routed experts: tile blockIdx.y is (bucket, start, count) of fp4_group's tiles; its rows are pairs order[start..start+count].
extern "C" __global__ void __launch_bounds__(FP4_MAX_THREADS, FP4_MIN_BLOCKS)
fp4_gemv_grouped(const u8* const* __restrict__ wptr, const u8* const* __restrict__ sptr, int experts,
                 const int* __restrict__ tiles, const int* __restrict__ order, const u8* __restrict__ xq,
                 const float* __restrict__ xs, int x_div, float* __restrict__ y, int n, int k, int seg) {
    extern __shared__ __align__(16) float smem[];
    __shared__ int xr[R], yr[R];
    check_plan(seg);
    const int* tile = tiles + 3 * (size_t)blockIdx.y;
    const int e = __ldg(tile), start = __ldg(tile + 1), count = __ldg(tile + 2);
    // Tiles made for more rows than this build's R would drop pairs: a host bug, never data.
    if (count > R) __trap();
    // Tiles past the groups' own are empty (the host sizes the grid by a bound); the test is uniform over the block.
    if (count <= 0) return;
    if (threadIdx.x < R) {
        const int p = __ldg(order + start + min((int)threadIdx.x, count - 1));
        xr[threadIdx.x] = p / x_div;
        yr[threadIdx.x] = p;
    }
    __syncthreads();
    const int n0 = blockIdx.x * RT * (blockDim.x / seg);
    if (e < 0 || e >= experts) {
        for (int i = threadIdx.x; i < count * RT * (blockDim.x / seg); i += blockDim.x) {
            const int r = i % count, g = i / count;
            if (n0 + g < n) y[(size_t)yr[r] * n + n0 + g] = __uint_as_float(0x7FC00000u);
        }
        return;
    }
    gemv_tile(wptr[e], sptr[e], xq, xs, y, n, n, k, seg, n0, smem, Gathered{xr, yr, count});
}

// Pairs by expert for fp4_gemv_grouped, one warp so it is deterministic: order[] = each bucket's pairs in pair order, bad ids last.
extern "C" __global__ void fp4_group(const int* __restrict__ ids, int pairs, int experts, int per_tile,
                                     int* __restrict__ order, int* __restrict__ tiles, int cap) {
    // Buckets' counts, fill positions and first tiles; tiles[t] = (bucket, start in order, rows <= per_tile).
    extern __shared__ int sh[];
    __shared__ int used;
    const int buckets = experts + 1, lane = threadIdx.x;
    int* cnt = sh;
    int* fill = sh + buckets;
    int* first = sh + 2 * buckets;
    if (blockDim.x != 32 || per_tile <= 0) __trap();
    for (int b = lane; b < buckets; b += 32) cnt[b] = 0;
    __syncwarp();
    for (int p = lane; p < pairs; p += 32) {
        const int e = __ldg(ids + p);
        atomicAdd(&cnt[(e < 0 || e >= experts) ? experts : e], 1);
    }
    __syncwarp();
    if (lane == 0) {
        int pos = 0, t = 0;
        for (int b = 0; b < buckets; ++b) {
            fill[b] = pos;
            first[b] = t;
            pos += cnt[b];
            t += (cnt[b] + per_tile - 1) / per_tile;
        }
        used = t;
    }
    __syncwarp();
    // A bound the host computed wrongly would write past tiles: trap instead (a host bug, never data).
    if (used > cap) __trap();
    for (int b = lane; b < buckets; b += 32)
        for (int i = 0; i * per_tile < cnt[b]; ++i) {
            int* tl = tiles + 3 * (size_t)(first[b] + i);
            tl[0] = b, tl[1] = fill[b] + i * per_tile, tl[2] = min(per_tile, cnt[b] - i * per_tile);
        }
    for (int t = used + lane; t < cap; t += 32) {
        int* tl = tiles + 3 * (size_t)t;
        tl[0] = 0, tl[1] = 0, tl[2] = 0;
    }
    __syncwarp();
    // Stable placement, 32 pairs a round: lanes with the same bucket take consecutive slots in lane order.
    for (int base = 0; base < pairs; base += 32) {
        const int p = base + lane;
        int b = -1;
        if (p < pairs) {
            const int e = __ldg(ids + p);
            b = (e < 0 || e >= experts) ? experts : e;
        }
        const unsigned peers = __match_any_sync(0xFFFFFFFFu, b);
        const int rank = __popc(peers & ((1u << lane) - 1u));
        if (p < pairs) order[fill[b] + rank] = p;
        __syncwarp();
        if (p < pairs && rank == 0) fill[b] += __popc(peers);
        __syncwarp();
    }
}

#if FP4_ROWS == 1
namespace {
// The tiled kernel: a block computes 64 pair rows × 64 outputs of one expert; thread (ty, tx) of 16 × 16 owns rows 4ty.. and outputs 4tx..
constexpr int TBM = 64, TBN = 64, TTM = 4, TTN = 4, TTHREADS = 256;
// Shared planes [lane][c][64 + 8 padding]: a row's element 8c+lane at [lane][c][row]; the padding spreads banks.
constexpr int TPLANE = TBM + 8;
static_assert(TBM == TBN && TBM / TTM * (TBN / TTN) == TTHREADS, "one micro-tile per thread");

// Lane `lane`'s sums for the thread's 4 × 4 (row, output) pairs: fma onto +0.0 over c, as gemv_tile's v[r][l].
__device__ __forceinline__ void tile_lane(const float* xp, const float* wp, int lane, int ty, int tx, float (&v)[TTM][TTN]) {
#pragma unroll
    for (int i = 0; i < TTM; ++i)
#pragma unroll
        for (int j = 0; j < TTN; ++j) v[i][j] = 0.0f;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
        const float4 xs = *reinterpret_cast<const float4*>(xp + (lane * 4 + c) * TPLANE + TTM * ty);
        const float4 ws = *reinterpret_cast<const float4*>(wp + (lane * 4 + c) * TPLANE + TTN * tx);
        const float xv[TTM] = {xs.x, xs.y, xs.z, xs.w}, wv[TTN] = {ws.x, ws.y, ws.z, ws.w};
#pragma unroll
        for (int i = 0; i < TTM; ++i)
#pragma unroll
            for (int j = 0; j < TTN; ++j) v[i][j] = __fmaf_rn(xv[i], wv[j], v[i][j]);
    }
}

// Two lanes' sums added pairwise: dst = lane a + lane b, the tree's first level.
__device__ __forceinline__ void tile_pair(const float* xp, const float* wp, int a, int b, int ty, int tx, float (&dst)[TTM][TTN]) {
    float va[TTM][TTN], vb[TTM][TTN];
    tile_lane(xp, wp, a, ty, tx, va);
    tile_lane(xp, wp, b, ty, tx, vb);
#pragma unroll
    for (int i = 0; i < TTM; ++i)
#pragma unroll
        for (int j = 0; j < TTN; ++j) dst[i][j] = __fadd_rn(va[i][j], vb[i][j]);
}
}  // namespace

// fp4_gemv_grouped's result from tiles of up to 64 pairs: each 32-block of codes decoded once per tile into shared planes, the same ops per output.
extern "C" __global__ void __launch_bounds__(TTHREADS, 2)
fp4_gemm_grouped(const u8* const* __restrict__ wptr, const u8* const* __restrict__ sptr, int experts,
                 const int* __restrict__ tiles, const int* __restrict__ order, const u8* __restrict__ xq,
                 const float* __restrict__ xs, int x_div, float* __restrict__ y, int n, int k) {
    __shared__ __align__(16) float xp[32 * TPLANE];
    __shared__ __align__(16) float wp[32 * TPLANE];
    __shared__ float sx[TBM], sw[TBN];
    __shared__ int xr[TBM], yr[TBM];
    if (blockDim.x != TTHREADS) __trap();
    const int* tile = tiles + 3 * (size_t)blockIdx.y;
    const int e = __ldg(tile), start = __ldg(tile + 1), count = __ldg(tile + 2);
    // Tiles made for more rows than a block holds would drop pairs: a host bug, never data.
    if (count > TBM) __trap();
    // Tiles past the groups' own are empty (the host sizes the grid by a bound); the test is uniform over the block.
    if (count <= 0) return;
    const int t = threadIdx.x, tx = t % 16, ty = t / 16, n0 = blockIdx.x * TBN, kbt = k / 32;
    if (t < TBM) {
        const int p = __ldg(order + start + min(t, count - 1));
        xr[t] = p / x_div;
        yr[t] = p;
    }
    __syncthreads();
    if (e < 0 || e >= experts) {
        for (int i = t; i < count * TBN; i += TTHREADS) {
            const int c = n0 + i % TBN;
            if (c < n) y[(size_t)yr[i / TBN] * n + c] = __uint_as_float(0x7FC00000u);
        }
        return;
    }
    const u8* w = wptr[e];
    const u8* ws = sptr[e];
    // Loader: thread t moves elements 8·piece.. of a 32-block for tile row t / 4: 8 E4M3 activation codes, 8 E2M1 weight nibbles.
    const int lrow = t / 4, piece = t % 4;
    const bool wok = n0 + lrow < n;
    const u8* xsrc = xq + (size_t)xr[lrow] * k + piece * 8;
    const u8* wsrc = w + (size_t)min(n0 + lrow, n - 1) * (k / 2) + piece * 4;
    float acc[TTM][TTN];
#pragma unroll
    for (int i = 0; i < TTM; ++i)
#pragma unroll
        for (int j = 0; j < TTN; ++j) acc[i][j] = 0.0f;
    // Outputs past the edge load code 0 (+0.0) and are never written; rows past count repeat the last pair.
    unsigned long long xc = __ldg(reinterpret_cast<const unsigned long long*>(xsrc));
    u32 wc = wok ? __ldg(reinterpret_cast<const u32*>(wsrc)) : 0u;
    for (int kb = 0; kb < kbt; ++kb) {
        __syncthreads();
        const float4 a = e4m3x4_to_f32((u32)xc), b = e4m3x4_to_f32((u32)(xc >> 32));
        const float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        float wf[8];
        e2m1x8_scaled(wc, wf);
#pragma unroll
        for (int l = 0; l < 8; ++l) {
            xp[(l * 4 + piece) * TPLANE + lrow] = xv[l];
            wp[(l * 4 + piece) * TPLANE + lrow] = wf[l];
        }
        if (t < TBM) {
            sx[t] = __ldg(xs + (size_t)xr[t] * kbt + kb);
        } else if (t < TBM + TBN) {
            const int c = min(n0 + t - TBM, n - 1);
            sw[t - TBM] = e8m0_to_f32(__ldg(ws + (size_t)c * kbt + kb));
        }
        __syncthreads();
        // The next block's codes are in flight while this one is summed.
        if (kb + 1 < kbt) {
            xc = __ldg(reinterpret_cast<const unsigned long long*>(xsrc + (size_t)(kb + 1) * 32));
            wc = wok ? __ldg(reinterpret_cast<const u32*>(wsrc + (size_t)(kb + 1) * 16)) : 0u;
        }
        // tree8's order ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)), a pair of lanes at a time to bound live registers.
        float ab[TTM][TTN], cd[TTM][TTN], tmp[TTM][TTN];
        tile_pair(xp, wp, 0, 4, ty, tx, ab);
        tile_pair(xp, wp, 2, 6, ty, tx, tmp);
#pragma unroll
        for (int i = 0; i < TTM; ++i)
#pragma unroll
            for (int j = 0; j < TTN; ++j) ab[i][j] = __fadd_rn(ab[i][j], tmp[i][j]);
        tile_pair(xp, wp, 1, 5, ty, tx, cd);
        tile_pair(xp, wp, 3, 7, ty, tx, tmp);
#pragma unroll
        for (int i = 0; i < TTM; ++i) {
            const float sxi = sx[TTM * ty + i];
#pragma unroll
            for (int j = 0; j < TTN; ++j) {
                // As gemv_tile: the tree of 2^-14-scaled lanes, × 2^14 (exact), then · sx · sw, then the K-order add.
                const float p = __fmul_rn(__fadd_rn(ab[i][j], __fadd_rn(cd[i][j], tmp[i][j])), 0x1p14f);
                acc[i][j] = __fadd_rn(acc[i][j], __fmul_rn(__fmul_rn(p, sxi), sw[TTN * tx + j]));
            }
        }
    }
#pragma unroll
    for (int i = 0; i < TTM; ++i) {
        const int r = TTM * ty + i;
        if (r >= count) continue;
#pragma unroll
        for (int j = 0; j < TTN; ++j) {
            const int c = n0 + TTN * tx + j;
            if (c < n) y[(size_t)yr[r] * n + c] = acc[i][j];
        }
    }
}
#endif
