// EXL3 trellis linears (quant.md §1): tiles decoded exactly as tf_exl3::exl3 does, and y = x·W in Exl3Weight::forward's order.

// Grid (in_p/16, out_p/16), 256 threads: q fp16 bits [in_p][out_p] = each tile's states through codebook cb.
extern "C" __global__ void exl3_decode_q(const u16* __restrict__ trellis, u16* __restrict__ q, int out_p, int k, int cb) {
    const int tr = blockIdx.x, tc = blockIdx.y, tn = gridDim.y, p = threadIdx.x;
    const int cell = tile_cell(p);
    const Window win = window_at(k, p);
    const u32 st = window_state(window_words(record(trellis, tr, tc, tn, k), win), win.shift);
    q[(size_t)(tr * 16 + cell / 16) * out_p + tc * 16 + cell % 16] = decode_state(st, cb);
}


// Grid (in_p/16, out_p/16), 32 threads: q fp16 bits [in_p][out_p] through lane_frag, to check the fast path's decode bit for bit.
extern "C" __global__ void exl3_decode_frag(const u16* __restrict__ trellis, u16* __restrict__ q, int out_p) {
    const int tr = blockIdx.x, tc = blockIdx.y, lane = threadIdx.x;
    u32 b[4];
    lane_frag(record(trellis, tr, tc, gridDim.y, EXL3_K), lane_window(lane), b);
    for (int j = 0; j < 8; ++j) {
        const int cell = tile_cell(8 * lane + j);
        q[(size_t)(tr * 16 + cell / 16) * out_p + tc * 16 + cell % 16] = (u16)(b[j / 2] >> (16 * (j & 1)));
    }
}


// One work item of exl3_gemv_mma: job z's split s of column group cg, with its table row (run false: id invalid or another K).
struct Item {
    int cg, s, z;
    bool valid, run;
    Exl3Dev wt;
};

// Per-buffer shared memory layout (MmaPlan::smem_bytes): records (or finishing rows) | x rows | suh | svh | bias.
struct Buf {
    u32* tiles;
    float* xs;
    u16* suh;
    u16* svh;
    float* bias;
};

__device__ __forceinline__ Buf buf_at(unsigned char* base, int kr, int rows) {
    const int tile_bytes = max(kr * MMA_WARPS * 8 * EXL3_K * 4, rows * HAD * 4);
    Buf b;
    b.tiles = reinterpret_cast<u32*>(base);
    b.xs = reinterpret_cast<float*>(base + tile_bytes);
    b.suh = reinterpret_cast<u16*>(base + tile_bytes + rows * kr * 64);
    b.svh = b.suh + kr * 16;
    b.bias = reinterpret_cast<float*>(b.svh + HAD);
    return b;
}

__device__ __forceinline__ int buf_bytes(int kr, int rows) {
    return max(kr * MMA_WARPS * 8 * EXL3_K * 4, rows * HAD * 4) + rows * kr * 64 + kr * 32 + HAD * 2 + HAD * 4;
}

// Grid (any), 256 threads: persistent blocks walk the items, loading the next while computing this one; docs/exl3.md § fast path.
extern "C" __global__ void __launch_bounds__(256, 3) exl3_gemv_mma(
    const float* __restrict__ x, const Exl3Dev* __restrict__ table, const int* __restrict__ ids, int experts, int topk,
    float* __restrict__ y, float* __restrict__ part, u32* __restrict__ done, int rows, int in_p, int out_p, int kr, int splits,
    int jobs) {
    constexpr int K = EXL3_K, WORDS = 8 * K;
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ int last;
    const int t = threadIdx.x, lane = t & 31, w = t >> 5, groups = out_p / HAD, tn = out_p / 16, rg = (rows + 7) / 8;
    const int items = groups * splits * jobs, bb = buf_bytes(kr, rows);
    uint4* xf = reinterpret_cast<uint4*>(smem + 2 * bb);
    auto item_at = [&](int i) {
        Item it;
        it.cg = i % groups;
        it.s = (i / groups) % splits;
        it.z = i / (groups * splits);
        const int e = ids ? ids[it.z] : 0;
        it.valid = e >= 0 && e < experts;
        if (it.valid) it.wt = table[e];
        it.run = it.valid && it.wt.k == K;
        return it;
    };
    // Starts copying item `it`'s x rows, scales and records into `b` as one cp.async group (empty when it does not run).
    auto stage = [&](const Item& it, const Buf& b) {
        if (it.run) {
            const int k0 = it.s * kr, kn = min(kr, in_p / 16 - k0), n = kn * 16;
            const float* xz = x + (size_t)(ids && topk ? it.z / topk : it.z) * rows * in_p;
            for (int i = t; i < rows * n / 4; i += blockDim.x) {
                const int r = i / (n / 4), c = i % (n / 4);
                cp16(b.xs + r * n + c * 4, xz + (size_t)r * in_p + k0 * 16 + c * 4);
            }
            for (int i = t; i < n / 8; i += blockDim.x) cp16(b.suh + i * 8, it.wt.suh + k0 * 16 + i * 8);
            if (t < HAD / 8) cp16(b.svh + t * 8, it.wt.svh + it.cg * HAD + t * 8);
            if (it.wt.bias && t < HAD / 4) cp16(b.bias + t * 4, it.wt.bias + it.cg * HAD + t * 4);
            const int rec_chunks = MMA_WARPS * WORDS / 4;
            for (int i = t; i < kn * rec_chunks; i += blockDim.x) {
                const int kk = i / rec_chunks, c = i % rec_chunks;
                cp16(b.tiles + kk * MMA_WARPS * WORDS + c * 4,
                     it.wt.trellis + ((size_t)(k0 + kk) * tn + it.cg * MMA_WARPS) * 16 * K + c * 8);
            }
        }
        asm volatile("cp.async.commit_group;");
    };
    const Lane ln = lane_window(lane);
    Item cur = item_at(blockIdx.x);
    if (blockIdx.x < items) stage(cur, buf_at(smem, kr, rows));
    for (int i = blockIdx.x, parity = 0; i < items; i += gridDim.x, parity ^= 1) {
        const Buf b = buf_at(smem + parity * bb, kr, rows);
        const bool more = i + (int)gridDim.x < items;
        Item next;
        if (more) {
            next = item_at(i + gridDim.x);
            stage(next, buf_at(smem + (parity ^ 1) * bb, kr, rows));
            asm volatile("cp.async.wait_group 1;");
        } else {
            asm volatile("cp.async.wait_group 0;");
        }
        __syncthreads();
        const int k0 = cur.s * kr, kn = min(kr, in_p / 16 - k0), n = kn * 16;
        float* yz = y + (size_t)cur.z * rows * out_p;
        if (!cur.valid) {
            for (int j = t; cur.s == 0 && j < rows * HAD; j += blockDim.x)
                yz[(size_t)(j / HAD) * out_p + cur.cg * HAD + j % HAD] = __int_as_float(0x7fc00000);
        } else if (cur.run) {
            for (int j = t; j < rows * n; j += blockDim.x) b.xs[j] = __fmul_rn(b.xs[j], f16(b.suh[j % n]));
            __syncthreads();
            fwht_rows(b.xs, rows, n);
            // A fragments: rows g of group q as fp16 hi (mma rows 0..7) and the remainder × 2^11 (rows 8..15).
            for (int j = t; j < kn * rg * 32; j += blockDim.x) {
                const int kk = j / (rg * 32), q = (j / 32) % rg, l = j % 32, r = q * 8 + l / 4, c = kk * 16 + 2 * (l % 4);
                u32 v[4] = {0, 0, 0, 0};
                if (r < rows) {
                    for (int e2 = 0; e2 < 4; ++e2) {
                        const float a = b.xs[r * n + c + (e2 & 1) + (e2 & 2) * 4];
                        const __half hi = __float2half_rn(a);
                        const __half lo = __float2half_rn(__fmul_rn(__fsub_rn(a, __half2float(hi)), 2048.0f));
                        const int reg = (e2 & 2);
                        v[reg] |= (u32)__half_as_ushort(hi) << (16 * (e2 & 1));
                        v[reg + 1] |= (u32)__half_as_ushort(lo) << (16 * (e2 & 1));
                    }
                }
                xf[(kk * rg + q) * 32 + l] = make_uint4(v[0], v[1], v[2], v[3]);
            }
            __syncthreads();
            float acc[MMA_MAX_RG][2][4] = {};
#pragma unroll 2
            for (int kk = 0; kk < kn; ++kk) {
                u32 bf[4];
                lane_frag(b.tiles + (kk * MMA_WARPS + w) * WORDS, ln, bf);
#pragma unroll
                for (int q = 0; q < MMA_MAX_RG; ++q) {
                    if (q < rg) {
                        const uint4 a = xf[(kk * rg + q) * 32 + lane];
                        mma16816(acc[q][0], a, bf[0], bf[1]);
                        mma16816(acc[q][1], a, bf[2], bf[3]);
                    }
                }
            }
            // Lane (g, t) holds rows g (hi) and g + 8 (lo) of columns 2t, 2t+1 of each 8-column half.
            const int g = lane / 4, tq = lane % 4;
            float* pz = part + (size_t)cur.z * splits * rows * out_p;
#pragma unroll
            for (int q = 0; q < MMA_MAX_RG; ++q) {
                const int r = q * 8 + g;
                if (q < rg && r < rows) {
                    for (int half = 0; half < 2; ++half) {
                        for (int c = 0; c < 2; ++c) {
                            const int col = cur.cg * HAD + w * 16 + half * 8 + 2 * tq + c;
                            pz[((size_t)cur.s * rows + r) * out_p + col] = acc[q][half][c] + acc[q][half][2 + c] * (1.0f / 2048.0f);
                        }
                    }
                }
            }
            __threadfence();
            __syncthreads();
            u32* dz = done + (size_t)cur.z * groups + cur.cg;
            if (t == 0) last = atomicAdd(dz, 1u) == (u32)splits - 1;
            __syncthreads();
            if (last) {
                __threadfence();
                float* ys = reinterpret_cast<float*>(b.tiles);
                for (int j = t; j < rows * HAD; j += blockDim.x) {
                    const float* src = pz + (size_t)(j / HAD) * out_p + cur.cg * HAD + j % HAD;
                    const size_t stride = (size_t)rows * out_p;
                    float v = 0.0f;
                    // Eight loads in flight at a time; the adds stay in split order.
                    for (int p0 = 0; p0 < splits; p0 += 8) {
                        float u[8];
#pragma unroll
                        for (int q = 0; q < 8; ++q) u[q] = p0 + q < splits ? __ldcg(src + (p0 + q) * stride) : 0.0f;
#pragma unroll
                        for (int q = 0; q < 8; ++q) v = p0 + q < splits ? v + u[q] : v;
                    }
                    ys[j] = v;
                }
                __syncthreads();
                fwht_rows(ys, rows, HAD);
                for (int j = t; j < rows * HAD; j += blockDim.x) {
                    float o = __fmul_rn(ys[j], f16(b.svh[j % HAD]));
                    if (cur.wt.bias) o = __fadd_rn(o, b.bias[j % HAD]);
                    yz[(size_t)(j / HAD) * out_p + cur.cg * HAD + j % HAD] = o;
                }
                if (t == 0) *dz = 0;
            }
        }
        // Buffer b is refilled by the stage two items on; every thread must be done with it (and with xf) first.
        __syncthreads();
        cur = next;
    }
}

namespace {
// Waits until at most n of this thread's cp.async groups are pending (n clamped to 0..3).
__device__ __forceinline__ void wait_pending(int n) {
    if (n >= 3) asm volatile("cp.async.wait_group 3;");
    else if (n == 2) asm volatile("cp.async.wait_group 2;");
    else if (n == 1) asm volatile("cp.async.wait_group 1;");
    else asm volatile("cp.async.wait_group 0;");
}
}  // namespace

// Warps of exl3_gemv_exact: each owns two adjacent tile columns (32 outputs), a lane per output.
#define EXACT_WARPS 4

namespace {
// bits16 over any number of words (MSB first); lane_frag keeps bits16 until a GPU run can check its kernels on this one.
template <int O, int N>
__device__ __forceinline__ u32 state_at(const u32 (&v)[N]) {
    constexpr int a = O / 32, o = O % 32;
    static_assert(a + (o > 16 ? 1 : 0) < N, "window");
    if constexpr (o == 16) return v[a] & 0xFFFFu;
    else if constexpr (o < 16) return (v[a] >> (16 - o)) & 0xFFFFu;
    else return __funnelshift_l(v[a + 1], v[a], o) >> 16;
}

// Rows 2U, 2U+1, 2U+8, 2U+9 of a lane's column: its positions 8U..8U+3, whose windows start 16 + (q+1)K bits into v.
template <int K, int U>
__device__ __forceinline__ void column_rows(const u32 (&v)[K + 1], float (&qv)[16]) {
    constexpr int q = 8 * U;
    const u32 a = decode_pair(state_at<16 + (q + 1) * K>(v), state_at<16 + (q + 2) * K>(v));
    const u32 b = decode_pair(state_at<16 + (q + 3) * K>(v), state_at<16 + (q + 4) * K>(v));
    qv[2 * U] = f16((u16)a);
    qv[2 * U + 1] = f16((u16)(a >> 16));
    qv[2 * U + 8] = f16((u16)b);
    qv[2 * U + 9] = f16((u16)(b >> 16));
}
}  // namespace

// A warp's in-order sums over its split (records recs, rotated rows x_s of n) for R ≥ n_rows rows, UNROLL tiles per step.
template <int K, int R, int UNROLL>
__device__ __forceinline__ void exact_sums(const u32* recs, const float* x_s, int n, int n_rows, int tiles, int per, int stages,
                                           float (&acc)[8]) {
    constexpr int WORDS = 8 * K;
    const int lane = threadIdx.x & 31;
    // Lane l sums column c = l % 16 of tile column l / 16: positions 32(c%8) + 4(c/8) + {0..3, 8..11, 16..19, 24..27}, in words (c%8)K - 1.. shifted 4K(c/8).
    const int c = lane & 15, sh = 4 * K * (c >> 3), wa = (c & 7) * K, wm = (wa + WORDS - 1) % WORDS;
    const u32* lrec = recs + (lane >> 4) * WORDS;
    // Rows past n_rows repeat the last row (their sums are dropped), so the adds carry no branches.
    int xo[R];
#pragma unroll
    for (int r = 0; r < R; ++r) xo[r] = min(r, n_rows - 1) * n;
    for (int g = 0; g < stages; ++g) {
        wait_pending(stages - 1 - g);
        __syncwarp();
        const int k1 = min(tiles, (g + 1) * per);
#pragma unroll UNROLL
        for (int kk = g * per; kk < k1; ++kk) {
            const u32* rw = lrec + kk * 2 * WORDS;
            u32 wv[K + 1], v[K + 1];
            wv[0] = rw[wm];
#pragma unroll
            for (int i = 0; i < K; ++i) wv[i + 1] = rw[wa + i];
#pragma unroll
            for (int i = 0; i < K; ++i) v[i] = __funnelshift_lc(wv[i + 1], wv[i], sh);
            v[K] = __funnelshift_lc(0u, wv[K], sh);
            float qv[16];
            column_rows<K, 0>(v, qv);
            column_rows<K, 1>(v, qv);
            column_rows<K, 2>(v, qv);
            column_rows<K, 3>(v, qv);
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const float4* xr = reinterpret_cast<const float4*>(x_s + xo[r] + kk * 16);
#pragma unroll
                for (int i4 = 0; i4 < 4; ++i4) {
                    const float4 xv = xr[i4];
                    acc[r] = __fadd_rn(acc[r], __fmul_rn(xv.x, qv[4 * i4]));
                    acc[r] = __fadd_rn(acc[r], __fmul_rn(xv.y, qv[4 * i4 + 1]));
                    acc[r] = __fadd_rn(acc[r], __fmul_rn(xv.z, qv[4 * i4 + 2]));
                    acc[r] = __fadd_rn(acc[r], __fmul_rn(xv.w, qv[4 * i4 + 3]));
                }
            }
        }
    }
}

// One block of exl3_gemv_exact at the job's K (the wrapper below found its table row wt).
template <int K>
__device__ __forceinline__ void gemv_exact_k(const Exl3Dev* __restrict__ wt, const float* __restrict__ x, const int* __restrict__ ids, int topk,
                                             float* __restrict__ y, float* __restrict__ part, u32* __restrict__ done, int rows, int r0,
                                             int n_rows, int in_p, int out_p, int split_tiles) {
    constexpr int WORDS = 8 * K, CHUNKS = 2 * WORDS / 4;
    extern __shared__ __align__(16) unsigned char exact_smem[];
    __shared__ int last;
    const int cg = blockIdx.x, groups = gridDim.x, s = blockIdx.y, splits = gridDim.y, z = blockIdx.z;
    const int t = threadIdx.x, lane = t & 31, w = t >> 5, tn = out_p / 16;
    float* yz = y + ((size_t)z * rows + r0) * out_p + cg * HAD;
    const int t0 = s * split_tiles, tiles = min(split_tiles, in_p / 16 - t0), n = tiles * 16;
    const int per = (tiles + 3) / 4, stages = (tiles + per - 1) / per;
    u32* recs = reinterpret_cast<u32*>(exact_smem) + w * 2 * split_tiles * WORDS;
    float* x_s = reinterpret_cast<float*>(reinterpret_cast<u32*>(exact_smem) + EXACT_WARPS * 2 * split_tiles * WORDS);
    // Warp w streams its two tile columns' records (adjacent in memory) in up to four stages, so decoding starts after the first.
    const u16* col = wt->trellis + ((size_t)t0 * tn + cg * 8 + 2 * w) * 16 * K;
    for (int g = 0; g < stages; ++g) {
        const int k0 = g * per, kn = min(per, tiles - k0);
        for (int i = lane; i < kn * CHUNKS; i += 32) {
            const int kk = k0 + i / CHUNKS, c = i % CHUNKS;
            cp16(recs + kk * 2 * WORDS + c * 4, col + (size_t)kk * tn * 16 * K + c * 8);
        }
        asm volatile("cp.async.commit_group;");
    }
    // x ⊙ suh rotated per 128-block, a warp per (row, block): the pairs and roundings of exl3_had_in_h.
    const float* xz = x + ((size_t)(ids && topk ? z / topk : z) * rows + r0) * in_p + t0 * 16;
    const u16* suh = wt->suh + t0 * 16;
    for (int b = w; b < n_rows * (n / HAD); b += EXACT_WARPS) {
        const int r = b / (n / HAD), hb = b % (n / HAD);
        float v[4];
        for (int q = 0; q < 4; ++q) v[q] = __fmul_rn(xz[(size_t)r * in_p + hb * HAD + lane + 32 * q], f16(suh[hb * HAD + lane + 32 * q]));
        fwht128_warp(v, lane);
        for (int q = 0; q < 4; ++q) x_s[r * n + hb * HAD + lane + 32 * q] = v[q];
    }
    __syncthreads();
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    // Rows rounded up to 1, 2, 4 or 8 with no row branches, so a tile's decode overlaps the previous tile's adds.
    if (n_rows == 1) exact_sums<K, 1, 4>(recs, x_s, n, 1, tiles, per, stages, acc);
    else if (n_rows == 2) exact_sums<K, 2, 2>(recs, x_s, n, 2, tiles, per, stages, acc);
    else if (n_rows <= 4) exact_sums<K, 4, 2>(recs, x_s, n, n_rows, tiles, per, stages, acc);
    else exact_sums<K, 8, 2>(recs, x_s, n, n_rows, tiles, per, stages, acc);
    float* pz = part + ((size_t)z * splits * rows + r0) * out_p + cg * HAD + w * 32 + lane;
#pragma unroll
    for (int r = 0; r < 8; ++r)
        if (r < n_rows) pz[((size_t)s * rows + r) * out_p] = acc[r];
    // The barrier orders every thread's partial sums before thread 0's release; its acquire orders the finishing reads after all splits'.
    __syncthreads();
    u32* dz = done + (size_t)z * groups + cg;
    if (t == 0) {
        u32 old;
        asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(dz) : "memory");
        last = old == (u32)splits - 1;
    }
    __syncthreads();
    if (!last) return;
    // Warp w finishes rows w, w + 4 as exl3_had_out_j does: the splits added in order from +0 (eight in flight), rotated, scaled (+ bias).
    for (int r = w; r < n_rows; r += EXACT_WARPS) {
        const float* src = part + ((size_t)z * splits * rows + r0 + r) * out_p + cg * HAD + lane;
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int p0 = 0; p0 < splits; p0 += 8) {
            float u[8][4];
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
                for (int q = 0; q < 4; ++q) u[j][q] = p0 + j < splits ? __ldcg(src + (size_t)(p0 + j) * rows * out_p + 32 * q) : 0.0f;
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
                for (int q = 0; q < 4; ++q) v[q] = p0 + j < splits ? __fadd_rn(v[q], u[j][q]) : v[q];
        }
        fwht128_warp(v, lane);
        for (int q = 0; q < 4; ++q) {
            const int c = cg * HAD + lane + 32 * q;
            float o = __fmul_rn(v[q], f16(wt->svh[c]));
            if (wt->bias) o = __fadd_rn(o, wt->bias[c]);
            yz[(size_t)r * out_p + lane + 32 * q] = o;
        }
    }
    if (t == 0) *dz = 0;
}

// Grid (out_p/128, splits, jobs), 128 threads, every K ≤ EXL3_K in one launch (the host compiles for the largest present): x rotated in f32, each lane sums one output over its split in input order, the last split rotates out.
extern "C" __global__ void __launch_bounds__(128) exl3_gemv_exact(
    const float* __restrict__ x, const Exl3Dev* __restrict__ table, const int* __restrict__ ids, int experts, int topk,
    float* __restrict__ y, float* __restrict__ part, u32* __restrict__ done, int rows, int r0, int n_rows, int in_p, int out_p,
    int split_tiles) {
    const Exl3Dev* wt = job_row(table, ids, experts, blockIdx.z);
    // A bad id, or a K this build leaves out (only K ≤ EXL3_K are compiled, which keeps NVRTC's time down), gets a NaN row.
    if (!wt || wt->k < 1 || wt->k > EXL3_K) {
        float* yz = y + ((size_t)blockIdx.z * rows + r0) * out_p + blockIdx.x * HAD;
        for (int j = threadIdx.x; blockIdx.y == 0 && j < n_rows * HAD; j += blockDim.x)
            yz[(size_t)(j / HAD) * out_p + j % HAD] = __int_as_float(0x7fc00000);
        return;
    }
#define EXACT_K(KK)                                                                                                         \
    case KK:                                                                                                                \
        if constexpr (KK <= EXL3_K) gemv_exact_k<KK>(wt, x, ids, topk, y, part, done, rows, r0, n_rows, in_p, out_p, split_tiles); \
        break;
    switch (wt->k) { EXACT_K(1) EXACT_K(2) EXACT_K(3) EXACT_K(4) EXACT_K(5) EXACT_K(6) EXACT_K(7) EXACT_K(8) default: break; }
#undef EXACT_K
}

// Grid (rows), 256 threads: bf16 rows of k values to f32 rows of k_p (zeros past k), the padded input EXL3 linears take.
extern "C" __global__ void exl3_rows_in(const u16* __restrict__ x, float* __restrict__ xp, int k, int k_p) {
    const size_t r = blockIdx.x;
    for (int i = threadIdx.x; i < k_p; i += blockDim.x) xp[r * k_p + i] = i < k ? __uint_as_float((u32)x[r * k + i] << 16) : 0.0f;
}

// Grid (rows), 256 threads: the first n of each f32 row of n_p (padded outputs dropped).
extern "C" __global__ void exl3_rows_out(const float* __restrict__ y, float* __restrict__ out, int n, int n_p) {
    const size_t r = blockIdx.x;
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[r * n + i] = y[r * n_p + i];
}

// ---- MUL1's integer core (quant.md §1.6's int8 trick), y_c = Σ_i a_i·bytesum(state_ic·M) exact in i32: the least any MUL1 GEMV issues.
#define BYTEDOT_TC 4  // tile columns per warp of exl3_mul1_bytedot (4 warps a block, so a block owns 256 outputs)
namespace {
// Unsigned bytes of x times signed int8 bytes of a, summed into acc.
__device__ __forceinline__ int dp4a_us(u32 x, u32 a, int acc) {
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(x), "r"(a), "r"(acc));
    return d;
}

// Warp: BYTEDOT_TC adjacent tile columns from tc over tile rows [t0, t1); lane l holds rows 2(l%4)+{0,1,8,9} of columns l/4, l/4+8.
template <int K>
__device__ __forceinline__ void bytedot_k(const Exl3Dev* __restrict__ wt, const uint4* __restrict__ xs, int* __restrict__ yz, int tn,
                                          int tc, int t0, int t1) {
    constexpr int WORDS = 8 * K;
    const int lane = threadIdx.x & 31;
    const Lane ln = lane_window<K>(lane);
    const u32* rec = reinterpret_cast<const u32*>(wt->trellis) + ((size_t)t0 * tn + tc) * WORDS;
    // Adjacent records are WORDS apart, so a row of tiles needs three pointers and immediate offsets, no per-tile address math.
    const u32 *p0 = rec + ln.i0, *p1 = rec + ln.i1, *p2 = rec + ln.i2;
    const size_t step = (size_t)tn * WORDS;
    const uint4* xa = xs + t0 * 4 + (lane & 3);
    int acc[BYTEDOT_TC][2];
#pragma unroll
    for (int j = 0; j < BYTEDOT_TC; ++j) acc[j][0] = acc[j][1] = 0;
#pragma unroll 2
    for (int tr = t0; tr < t1; ++tr, p0 += step, p1 += step, p2 += step, xa += 4) {
        const uint4 a = __ldg(xa);
#pragma unroll
        for (int j = 0; j < BYTEDOT_TC; ++j) {
            const u32 a0 = __ldg(p0 + j * WORDS), a1 = __ldg(p1 + j * WORDS), a2 = __ldg(p2 + j * WORDS);
            const u32 h = __funnelshift_l(a1, a0, ln.sh), m = __funnelshift_l(a2, a1, ln.sh), l = a2 << ln.sh;
            int lo = acc[j][0], hi = acc[j][1];
            lo = dp4a_us(bits16<0>(h, m, l) * MUL1_MULT, a.x, lo);
            hi = dp4a_us(bits16<4 * K>(h, m, l) * MUL1_MULT, a.x, hi);
            lo = dp4a_us(bits16<K>(h, m, l) * MUL1_MULT, a.y, lo);
            hi = dp4a_us(bits16<5 * K>(h, m, l) * MUL1_MULT, a.y, hi);
            lo = dp4a_us(bits16<2 * K>(h, m, l) * MUL1_MULT, a.z, lo);
            hi = dp4a_us(bits16<6 * K>(h, m, l) * MUL1_MULT, a.z, hi);
            lo = dp4a_us(bits16<3 * K>(h, m, l) * MUL1_MULT, a.w, lo);
            hi = dp4a_us(bits16<7 * K>(h, m, l) * MUL1_MULT, a.w, hi);
            acc[j][0] = lo, acc[j][1] = hi;
        }
    }
    // Integer sums are exact in any order: the four row lanes of a column by shuffles, the splits by atomics.
#pragma unroll
    for (int j = 0; j < BYTEDOT_TC; ++j) {
        int lo = acc[j][0], hi = acc[j][1];
        lo += __shfl_xor_sync(0xffffffffu, lo, 1);
        hi += __shfl_xor_sync(0xffffffffu, hi, 1);
        lo += __shfl_xor_sync(0xffffffffu, lo, 2);
        hi += __shfl_xor_sync(0xffffffffu, hi, 2);
        if ((lane & 3) == 0) {
            atomicAdd(yz + (tc + j) * 16 + lane / 4, lo);
            atomicAdd(yz + (tc + j) * 16 + lane / 4 + 8, hi);
        }
    }
}
}  // namespace

// Grid (out_p / 256, splits, jobs), 128 threads, y zeroed by the host: a bad id, non-MUL1 codebook or K > EXL3_K gives an INT_MIN row.
extern "C" __global__ void __launch_bounds__(128) exl3_mul1_bytedot(const uint4* __restrict__ xs, const Exl3Dev* __restrict__ table,
                                                                    const int* __restrict__ ids, int experts, int topk, int* __restrict__ y,
                                                                    int in_p, int out_p, int split_tiles) {
    const int z = blockIdx.z, tn = out_p / 16, tc = (blockIdx.x * 4 + (threadIdx.x >> 5)) * BYTEDOT_TC;
    const Exl3Dev* wt = job_row(table, ids, experts, z);
    int* yz = y + (size_t)z * out_p;
    if (!wt || wt->cb != 2 || wt->k < 1 || wt->k > EXL3_K) {
        for (int c = threadIdx.x & 31; blockIdx.y == 0 && tc < tn && c < 16 * BYTEDOT_TC; c += 32) yz[tc * 16 + c] = (int)0x80000000u;
        return;
    }
    if (tc >= tn) return;
    const uint4* xz = xs + (size_t)(ids && topk ? z / topk : z) * (in_p / 4);
    const int t0 = blockIdx.y * split_tiles, t1 = min(in_p / 16, t0 + split_tiles);
#define BYTEDOT_K(KK)                                                                   \
    case KK:                                                                            \
        if constexpr (KK <= EXL3_K) bytedot_k<KK>(wt, xz, yz, tn, tc, t0, t1);         \
        break;
    switch (wt->k) { BYTEDOT_K(1) BYTEDOT_K(2) BYTEDOT_K(3) BYTEDOT_K(4) BYTEDOT_K(5) BYTEDOT_K(6) BYTEDOT_K(7) BYTEDOT_K(8) default: break; }
#undef BYTEDOT_K
}
