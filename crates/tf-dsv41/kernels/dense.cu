// Dense x·Wᵀ of the dsv41 forward in the CPU's exact summation orders, so GPU and CPU agree bit for bit.

// Threads per block; a thread owns one accumulator lane of one output for up to DENSE_ROWS rows.
#define DENSE_THREADS 256
// Rows per block and the path (0: dense_body, 1 or 8: tiled_body with that many lanes) come as defines from the launcher.
#ifndef DENSE_ROWS
#define DENSE_ROWS 8
#endif
#ifndef TILE_LANES
#define TILE_LANES 0
#endif
// Steps of a lane's sum whose weights are in flight at once.
#define DENSE_AHEAD 8

__device__ __forceinline__ float widen(float v) { return v; }

__device__ __forceinline__ void store(float* y, float v) { *y = v; }
__device__ __forceinline__ void store(bf16_bits* y, float v) { *y = bf16_rne(v); }

// lanes = 8 is tf_core's matmul_nt (element p < k − k%8 to lane p%8 in order, the tail to lanes 0.., then ((v0+v4)+(v2+v6))+((v1+v5)+(v3+v7))); lanes = 1 is a plain sequential sum (grouped wo_a); every product and sum rounds alone (--fmad=false).
template <typename X, typename W, typename Y>
__device__ __forceinline__ void dense_body(const X* __restrict__ x, const W* __restrict__ w, Y* __restrict__ y, int rows,
                                           int n, int k, int groups, int lanes) {
    const int per_group = n / groups;
    const int lane = threadIdx.x % lanes;
    const long long o = ((long long)blockIdx.x * DENSE_THREADS + threadIdx.x) / lanes;
    const int r0 = blockIdx.y * DENSE_ROWS;
    const int nr = min(DENSE_ROWS, rows - r0);
    const bool live = o < n;
    const int g = live ? (int)(o / per_group) : 0;
    const long long ldx = (long long)groups * k;
    const W* wr = w + (live ? o : 0) * (long long)k;
    const X* xt = x + (long long)r0 * ldx + (long long)g * k;
    float acc[DENSE_ROWS];
#pragma unroll
    for (int r = 0; r < DENSE_ROWS; ++r) acc[r] = 0.0f;
    const int full = k - k % lanes;
    if (live) {
        int p = lane;
        // DENSE_AHEAD steps' weights are loaded before their adds, so memory latency overlaps; the adds keep their order.
        for (; p + (DENSE_AHEAD - 1) * lanes < full; p += DENSE_AHEAD * lanes) {
            float wv[DENSE_AHEAD];
#pragma unroll
            for (int u = 0; u < DENSE_AHEAD; ++u) wv[u] = widen(__ldg(wr + p + u * lanes));
#pragma unroll
            for (int u = 0; u < DENSE_AHEAD; ++u) {
#pragma unroll
                for (int r = 0; r < DENSE_ROWS; ++r)
                    if (r < nr) acc[r] = __fadd_rn(acc[r], __fmul_rn(widen(__ldg(xt + r * ldx + p + u * lanes)), wv[u]));
            }
        }
        for (; p < full; p += lanes) {
            const float wv = widen(__ldg(wr + p));
#pragma unroll
            for (int r = 0; r < DENSE_ROWS; ++r)
                if (r < nr) acc[r] = __fadd_rn(acc[r], __fmul_rn(widen(__ldg(xt + r * ldx + p)), wv));
        }
        if (lane < k - full) {
            const int p = full + lane;
            const float wv = widen(__ldg(wr + p));
#pragma unroll
            for (int r = 0; r < DENSE_ROWS; ++r)
                if (r < nr) acc[r] = __fadd_rn(acc[r], __fmul_rn(widen(__ldg(xt + r * ldx + p)), wv));
        }
    }
    if (lanes == 8) {
        // xor 4, 2, 1 builds exactly the CPU's pairing in lane 0 (IEEE addition commutes bit for bit).
#pragma unroll
        for (int r = 0; r < DENSE_ROWS; ++r)
            for (int m = 4; m > 0; m >>= 1) acc[r] = __fadd_rn(acc[r], __shfl_xor_sync(0xffffffffu, acc[r], m));
    }
    if (live && lane == 0)
        for (int r = 0; r < nr; ++r) store(y + (long long)(r0 + r) * n + o, acc[r]);
}

// How the squares block sums x²: in index order on one thread per row, or in SumOrder::Lanes32 on a warp per row (4 warps, so up to SQUARE_SLOTS rows each).
#define SQUARES_SEQ 1
#define SQUARES_WIDE 2
#define SQUARE_SLOTS ((DENSE_ROWS + 3) / 4)

// The tiled path (k % 8 == 0, x and w 16-byte aligned): a block of TILE_THREADS stages rows of W and x through shared memory in 16-byte loads; each thread keeps its lane's order.
#define TILE_THREADS 128

// Columns per tile; the row stride keeps a warp's shared reads on distinct banks (odd for one lane, 8 mod 32 words for eight).
template <int LANES, typename X, typename W> struct TileShape {
    static constexpr int OUTS = TILE_THREADS / LANES;
    static constexpr int KT = LANES == 1 ? 64 : 384;
    static constexpr int STRIDE = LANES == 1 ? KT + 1 : KT + 8;
    static constexpr int WV = 16 / sizeof(W), WROW = KT / WV, WLOADS = OUTS * WROW / TILE_THREADS;
    static constexpr int XV = 16 / sizeof(X), XROW = KT / XV;
    static constexpr int XLOADS = (DENSE_ROWS * XROW + TILE_THREADS - 1) / TILE_THREADS;
    static_assert(OUTS * WROW % TILE_THREADS == 0, "weight vectors split evenly over the block");
};

// Loads tile `kt0` (len columns) of the block's W rows and x rows into registers; out-of-range vectors are zero.
template <int LANES, typename X, typename W>
__device__ __forceinline__ void tile_fetch(const X* __restrict__ xt, const W* __restrict__ w, long long o0, int n, int k,
                                           long long ldx, int nr, int kt0, int len, uint4* wv, uint4* xv) {
    using S = TileShape<LANES, X, W>;
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
    for (int i = 0; i < S::WLOADS; ++i) {
        const int v = i * TILE_THREADS + threadIdx.x, col = (v % S::WROW) * S::WV;
        const long long oo = o0 + v / S::WROW;
        wv[i] = (oo < n && col < len) ? __ldg(reinterpret_cast<const uint4*>(w + oo * k + kt0 + col)) : zero;
    }
#pragma unroll
    for (int i = 0; i < S::XLOADS; ++i) {
        const int v = i * TILE_THREADS + threadIdx.x, r = v / S::XROW, col = (v % S::XROW) * S::XV;
        xv[i] = (r < nr && col < len) ? __ldg(reinterpret_cast<const uint4*>(xt + r * ldx + kt0 + col)) : zero;
    }
}

// Widens the fetched vectors into the shared tiles.
template <int LANES, typename X, typename W>
__device__ __forceinline__ void tile_stage(const uint4* wv, const uint4* xv, float* w_s, float* x_s) {
    using S = TileShape<LANES, X, W>;
#pragma unroll
    for (int i = 0; i < S::WLOADS; ++i) {
        const int v = i * TILE_THREADS + threadIdx.x;
        float f[8];
        unpack(wv[i], (const W*)nullptr, f);
        float* dst = w_s + (v / S::WROW) * S::STRIDE + (v % S::WROW) * S::WV;
#pragma unroll
        for (int u = 0; u < S::WV; ++u) dst[u] = f[u];
    }
#pragma unroll
    for (int i = 0; i < S::XLOADS; ++i) {
        const int v = i * TILE_THREADS + threadIdx.x;
        if (S::XLOADS * TILE_THREADS == DENSE_ROWS * S::XROW || v < DENSE_ROWS * S::XROW) {
            float f[8];
            unpack(xv[i], (const X*)nullptr, f);
#pragma unroll
            for (int u = 0; u < S::XV; ++u) x_s[v * S::XV + u] = f[u];
        }
    }
}

// One staged tile's adds in each lane's order; FULL tiles have a constant trip count so shared loads run ahead of the adds.
template <int LANES, int KT, int STRIDE, bool FULL>
__device__ __forceinline__ void tile_sum(const float* w_s, const float* x_s, float* acc, int squares, bool live, int t,
                                         int to, int lane, int nr, int len) {
    const int steps = FULL ? KT : len;
    if (squares == SQUARES_WIDE) {
        // Warp v sums rows v, v+4, …: row v+4q in acc[q], its lanes in the CPU's Lanes32 order (KT is a multiple of 32).
#pragma unroll
        for (int q = 0; q < SQUARE_SLOTS; ++q)
            if (q * 4 + t / 32 < nr) acc[q] = lane_sum_squares(x_s + (q * 4 + t / 32) * KT, steps, t % 32, acc[q]);
    } else if (live) {
        const float* wr = w_s + to * STRIDE;
#pragma unroll 8
        for (int j = lane; j < steps; j += LANES) {
            const float wj = wr[j];
#pragma unroll
            for (int r = 0; r < DENSE_ROWS; ++r)
                if (r < nr) acc[r] = __fadd_rn(acc[r], __fmul_rn(x_s[r * KT + j], wj));
        }
    }
}

// Stages tile `tile` from (wv, xv), refills them with tile + 2, and sums the staged tile.
template <int LANES, typename X, typename W>
__device__ __forceinline__ void tile_step(const X* __restrict__ xt, const W* __restrict__ w, float* w_s, float* x_s,
                                          float* acc, uint4* wv, uint4* xv, int tile, int tiles, long long o0, int n, int k,
                                          long long ldx, int nr, int squares) {
    using S = TileShape<LANES, X, W>;
    const int t = threadIdx.x, kt0 = tile * S::KT, len = min(S::KT, k - kt0);
    const long long o = o0 + t / LANES;
    tile_stage<LANES, X, W>(wv, xv, w_s, x_s);
    __syncthreads();
    if (tile + 2 < tiles)
        tile_fetch<LANES>(xt, w, o0, n, k, ldx, nr, kt0 + 2 * S::KT, min(S::KT, k - kt0 - 2 * S::KT), wv, xv);
    if (len == S::KT) tile_sum<LANES, S::KT, S::STRIDE, true>(w_s, x_s, acc, squares, o < n, t, t / LANES, t % LANES, nr, len);
    else tile_sum<LANES, S::KT, S::STRIDE, false>(w_s, x_s, acc, squares, o < n, t, t / LANES, t % LANES, nr, len);
    __syncthreads();
}

// The squares block in index order: warp 0's thread r sums row r from one half of `buf` while warps 1.. stage the next chunk into the other.
template <typename X>
__device__ __forceinline__ void squares_seq(const X* __restrict__ xt, long long ldx, int nr, int k, float* buf, int buf_floats,
                                            float* __restrict__ out) {
    const int t = threadIdx.x, half = buf_floats / 2, chunk = (half / nr) & ~7;
    const int chunks = (k + chunk - 1) / chunk;
    auto stage = [&](int c) {
        float* dst = buf + (c & 1) * half;
        const int k0 = c * chunk, len = min(chunk, k - k0);
#pragma unroll 8
        for (int i = t - 32; i < nr * len; i += blockDim.x - 32) dst[(i / len) * chunk + i % len] = widen(__ldg(xt + (i / len) * ldx + k0 + i % len));
    };
    float acc = -0.0f;
    if (t >= 32) stage(0);
    __syncthreads();
    for (int c = 0; c < chunks; ++c) {
        if (t >= 32 && c + 1 < chunks) stage(c + 1);
        if (t < nr) acc = seq_sum_squares(buf + (c & 1) * half + t * chunk, min(chunk, k - c * chunk), acc);
        __syncthreads();
    }
    if (t < nr) out[t] = acc;
}

// Same sums as dense_body; with ss, the grid's last block instead sums each row's x² in index order into ss (mHC's scale).
template <int LANES, typename X, typename W, typename Y>
__device__ __forceinline__ void tiled_body(const X* __restrict__ x, const W* __restrict__ w, Y* __restrict__ y,
                                           float* __restrict__ ss, int rows, int n, int k, int groups, int wide) {
    using S = TileShape<LANES, X, W>;
    __shared__ __align__(16) float w_s[S::OUTS * S::STRIDE];
    __shared__ __align__(16) float x_s[DENSE_ROWS * S::KT];
    const int t = threadIdx.x, lane = t % LANES, to = t / LANES;
    const long long o0 = (long long)blockIdx.x * S::OUTS, o = o0 + to;
    const int r0 = blockIdx.y * DENSE_ROWS;
    const int nr = min(DENSE_ROWS, rows - r0);
    const int squares = ss != nullptr && blockIdx.x == gridDim.x - 1 ? (wide ? SQUARES_WIDE : SQUARES_SEQ) : 0;
    const int g = squares ? 0 : (int)(o0 / (n / groups));
    const long long ldx = (long long)groups * k;
    const X* xt = x + (long long)r0 * ldx + (long long)g * k;
    if (squares == SQUARES_SEQ) {
        squares_seq(xt, ldx, nr, k, w_s, S::OUTS * S::STRIDE, ss + r0);
        return;
    }
    float acc[DENSE_ROWS];
#pragma unroll
    for (int r = 0; r < DENSE_ROWS; ++r) acc[r] = squares ? -0.0f : 0.0f;
    // Two register sets alternate, so the loads of tile i+2 are in flight while tile i is summed.
    uint4 wv0[S::WLOADS], xv0[S::XLOADS], wv1[S::WLOADS], xv1[S::XLOADS];
    const int tiles = (k + S::KT - 1) / S::KT;
    if (tiles > 0) tile_fetch<LANES>(xt, w, o0, n, k, ldx, nr, 0, min(S::KT, k), wv0, xv0);
    if (tiles > 1) tile_fetch<LANES>(xt, w, o0, n, k, ldx, nr, S::KT, min(S::KT, k - S::KT), wv1, xv1);
    for (int tile = 0; tile < tiles; tile += 2) {
        tile_step<LANES, X, W>(xt, w, w_s, x_s, acc, wv0, xv0, tile, tiles, o0, n, k, ldx, nr, squares);
        if (tile + 1 < tiles) tile_step<LANES, X, W>(xt, w, w_s, x_s, acc, wv1, xv1, tile + 1, tiles, o0, n, k, ldx, nr, squares);
    }
    if (squares == SQUARES_WIDE) {
#pragma unroll
        for (int q = 0; q < SQUARE_SLOTS; ++q) {
            if (q * 4 + t / 32 >= nr) continue;
            const float v = lanes32_fold(acc[q]);
            if (t % 32 == 0) ss[r0 + q * 4 + t / 32] = v;
        }
        return;
    }
    if (LANES == 8) {
#pragma unroll
        for (int r = 0; r < DENSE_ROWS; ++r)
            for (int m = 4; m > 0; m >>= 1) acc[r] = __fadd_rn(acc[r], __shfl_xor_sync(0xffffffffu, acc[r], m));
    }
    if (o < n && lane == 0)
        for (int r = 0; r < nr; ++r) store(y + (long long)(r0 + r) * n + o, acc[r]);
}

// One module per define set: TILE_LANES picks the body, so each compiles with only its own registers.
#if TILE_LANES == 0
#define BOUND_THREADS DENSE_THREADS
#define BOUND_BLOCKS 1
#define DENSE_ENTRY dense_body(x, w, y, rows, n, k, groups, lanes)
#else
#define BOUND_THREADS TILE_THREADS
#define BOUND_BLOCKS (DENSE_ROWS == 1 ? 3 : 2)
#define DENSE_ENTRY tiled_body<TILE_LANES>(x, w, y, ss, rows, n, k, groups, wide)
#endif

extern "C" __global__ void __launch_bounds__(BOUND_THREADS, BOUND_BLOCKS)
dense_xb_wb_yb(const bf16_bits* x, const bf16_bits* w, bf16_bits* y, float* ss, int rows, int n, int k, int groups, int lanes, int wide) {
    DENSE_ENTRY;
}
extern "C" __global__ void __launch_bounds__(BOUND_THREADS, BOUND_BLOCKS)
dense_xb_wb_yf(const bf16_bits* x, const bf16_bits* w, float* y, float* ss, int rows, int n, int k, int groups, int lanes, int wide) {
    DENSE_ENTRY;
}
extern "C" __global__ void __launch_bounds__(BOUND_THREADS, BOUND_BLOCKS)
dense_xb_wf_yb(const bf16_bits* x, const float* w, bf16_bits* y, float* ss, int rows, int n, int k, int groups, int lanes, int wide) {
    DENSE_ENTRY;
}
extern "C" __global__ void __launch_bounds__(BOUND_THREADS, BOUND_BLOCKS)
dense_xb_wf_yf(const bf16_bits* x, const float* w, float* y, float* ss, int rows, int n, int k, int groups, int lanes, int wide) {
    DENSE_ENTRY;
}
extern "C" __global__ void __launch_bounds__(BOUND_THREADS, BOUND_BLOCKS)
dense_xf_wb_yb(const float* x, const bf16_bits* w, bf16_bits* y, float* ss, int rows, int n, int k, int groups, int lanes, int wide) {
    DENSE_ENTRY;
}
extern "C" __global__ void __launch_bounds__(BOUND_THREADS, BOUND_BLOCKS)
dense_xf_wb_yf(const float* x, const bf16_bits* w, float* y, float* ss, int rows, int n, int k, int groups, int lanes, int wide) {
    DENSE_ENTRY;
}
extern "C" __global__ void __launch_bounds__(BOUND_THREADS, BOUND_BLOCKS)
dense_xf_wf_yb(const float* x, const float* w, bf16_bits* y, float* ss, int rows, int n, int k, int groups, int lanes, int wide) {
    DENSE_ENTRY;
}
extern "C" __global__ void __launch_bounds__(BOUND_THREADS, BOUND_BLOCKS)
dense_xf_wf_yf(const float* x, const float* w, float* y, float* ss, int rows, int n, int k, int groups, int lanes, int wide) {
    DENSE_ENTRY;
}
