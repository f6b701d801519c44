// Sparse single-KV-head attention with a sink, in the CPU reference's order of operations (attn/sparse.rs `attend`).

// Keys per online-softmax block; the partition fixes where probabilities are rounded to bf16.
#define BLOCK 64
#define ROW_MASK 0x0FFFFFFF

// A key id's row, or null when the id is empty, names an unknown source, or a row past that source's end.
__device__ __forceinline__ const unsigned short* resolve(int id, const unsigned short* chunk, int chunk_rows,
                                                         const unsigned short* ring, int ring_rows,
                                                         const unsigned short* latents, int latent_rows, int d) {
    if (id < 0) return nullptr;
    const int source = id >> 28;
    const int row = id & ROW_MASK;
    if (source == 0 && row < chunk_rows) return chunk + (size_t)row * d;
    if (source == 1 && row < ring_rows) return ring + (size_t)row * d;
    if (source == 2 && row < latent_rows) return latents + (size_t)row * d;
    return nullptr;
}

// Key j of a row's list (its window ids, then sel's) as the key's row, null for an empty or bad id.
__device__ __forceinline__ const unsigned short* list_key(const int* window, const int* sel, int w, int j,
                                                          const unsigned short* chunk, int chunk_rows,
                                                          const unsigned short* ring, const unsigned short* latents,
                                                          int latent_rows, int d) {
    return resolve(j < w ? window[j] : sel[j - w], chunk, chunk_rows, ring, w, latents, latent_rows, d);
}

// Adds the eight bf16 of `v` times q[0..8) to acc in order, product and add rounded apart.
__device__ __forceinline__ float dot8(float acc, const float* __restrict__ q, uint4 v) {
    const unsigned int w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        acc += q[2 * i] * widen((unsigned short)(w[i] & 0xFFFF));
        acc += q[2 * i + 1] * widen((unsigned short)(w[i] >> 16));
    }
    return acc;
}

// 16-byte loads of a key row in flight while the previous ones are added: one memory latency per 128 bytes, not per 16.
#define DOT_AHEAD 8

// The CPU's `q·k` as one sequential f32 sum from -0.0 (Rust's float `sum`), product and add rounded apart.
__device__ float dot_seq(const float* __restrict__ q, const unsigned short* __restrict__ k, int d) {
    float acc = -0.0f;
    if ((((size_t)k) & 15) == 0 && (d % (8 * DOT_AHEAD)) == 0) {
        const uint4* k4 = reinterpret_cast<const uint4*>(k);
        const int groups = d / (8 * DOT_AHEAD);
        uint4 cur[DOT_AHEAD], nxt[DOT_AHEAD];
#pragma unroll
        for (int u = 0; u < DOT_AHEAD; ++u) cur[u] = k4[u];
        for (int g = 0; g < groups; ++g) {
            // The last group reloads itself, so no load leaves the row.
            const int ng = min(g + 1, groups - 1);
#pragma unroll
            for (int u = 0; u < DOT_AHEAD; ++u) nxt[u] = k4[ng * DOT_AHEAD + u];
#pragma unroll
            for (int u = 0; u < DOT_AHEAD; ++u) acc = dot8(acc, q + 8 * (g * DOT_AHEAD + u), cur[u]);
#pragma unroll
            for (int u = 0; u < DOT_AHEAD; ++u) cur[u] = nxt[u];
        }
    } else if ((((size_t)k) & 15) == 0 && (d & 7) == 0) {
        const uint4* k4 = reinterpret_cast<const uint4*>(k);
        for (int c = 0; c < d / 8; ++c) acc = dot8(acc, q + 8 * c, k4[c]);
    } else {
        for (int c = 0; c < d; ++c) acc += q[c] * widen(k[c]);
    }
    return acc;
}

// Keys whose value pairs load together in the p·v pass, ahead of the adds of the keys before them.
#define PV_AHEAD 16

// Column pair c2 (bf16 × 2) of keys j0 .. j0+PV_AHEAD; past the list or an empty slot gives 0 (never added).
__device__ __forceinline__ void load_pairs(const unsigned short* const* keys, int j0, int L, int c2,
                                           unsigned int (&out)[PV_AHEAD]) {
#pragma unroll
    for (int u = 0; u < PV_AHEAD; ++u) {
        const int j = j0 + u;
        const unsigned short* kr = j < L ? keys[j] : nullptr;
        out[u] = kr ? __ldg(reinterpret_cast<const unsigned int*>(kr) + c2) : 0u;
    }
}

// Floats of attend_row's static p·v scratch: a row group's block partials, 8 columns a thread of 256.
#define PV_SCRATCH 2048
// Keys a thread's 16-byte value loads run ahead of its adds in pv_wide.
#define PV_WIDE_AHEAD 16

// Columns c8..c8+8 of key j's value row (16 bytes), or zeros past the block's end j1 or for an empty slot (never added).
__device__ __forceinline__ uint4 value8(const unsigned short* const* keys, int j, int j1, int c8) {
    const unsigned short* kr = j < j1 ? keys[j] : nullptr;
    return kr ? __ldg(reinterpret_cast<const uint4*>(kr + c8)) : make_uint4(0u, 0u, 0u, 0u);
}

// Softmax block [j0, j1)'s p·v partial for columns c8..c8+8 of H heads (head h's probabilities at p + h·L), values loaded AHEAD keys ahead of their adds; each add the CPU's.
template <int H, int AHEAD>
__device__ __forceinline__ void block_pv(const unsigned short* const* keys, const float* p, int L, int j0, int j1, int c8,
                                         float (&pv)[H][8]) {
#pragma unroll
    for (int h = 0; h < H; ++h)
#pragma unroll
        for (int u = 0; u < 8; ++u) pv[h][u] = 0.0f;
    uint4 buf[AHEAD];
#pragma unroll
    for (int u = 0; u < AHEAD; ++u) buf[u] = value8(keys, j0 + u, j1, c8);
    for (int j = j0; j < j1; j += AHEAD) {
#pragma unroll
        for (int u = 0; u < AHEAD; ++u) {
            float v[8];
            unpack(buf[u], static_cast<const bf16_bits*>(nullptr), v);
            buf[u] = value8(keys, j + AHEAD + u, j1, c8);
            if (j + u < j1 && keys[j + u]) {
#pragma unroll
                for (int h = 0; h < H; ++h) {
                    const float pj = p[h * L + j + u];
#pragma unroll
                    for (int e = 0; e < 8; ++e) pv[h][e] = __fadd_rn(pv[h][e], __fmul_rn(pj, v[e]));
                }
            }
        }
    }
}

// p·v when d % 8 == 0, d / 8 divides the block and every key row is 16-byte aligned: a softmax block's sums are independent of the others', so row groups of d / 8 threads form several blocks' partials at once (8 columns a thread, 16-byte loads), and the first group folds them in block order; each column's adds are the CPU's.
__device__ void pv_wide(const unsigned short* const* keys, const float* p, const float* rescale, float* scratch, int L,
                        int nblk, int d, float sum_exp, unsigned short* __restrict__ orow) {
    const int tid = threadIdx.x, G = d / 8, NG = blockDim.x / G, g = tid / G, c8 = (tid % G) * 8;
    float acc[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) acc[u] = 0.0f;
    for (int b0 = 0; b0 < nblk; b0 += NG) {
        const int b = b0 + g;
        if (b < nblk) {
            float pv[1][8];
            block_pv<1, PV_WIDE_AHEAD>(keys, p, L, b * BLOCK, min(L, (b + 1) * BLOCK), c8, pv);
#pragma unroll
            for (int u = 0; u < 8; ++u) scratch[g * d + c8 + u] = pv[0][u];
        }
        __syncthreads();
        if (g == 0)
            for (int bb = b0; bb < min(nblk, b0 + NG); ++bb) {
                const float rs = rescale[bb];
#pragma unroll
                for (int u = 0; u < 8; ++u) acc[u] = __fadd_rn(__fmul_rn(acc[u], rs), scratch[(bb - b0) * d + c8 + u]);
            }
        __syncthreads();
    }
    if (g == 0)
#pragma unroll
        for (int u = 0; u < 8; ++u) orow[c8 + u] = bf16_rne(acc[u] / sum_exp);
}

// attend_row's softmax over p[0..L) in shared memory, by the whole block (FMA_QUOTIENTS: exp_fma_rn, the same bits): block maxima, the running max's rescales, each softmax block's psum from 0 in key order (independent of the others), the chain over blocks and the sink into *sum_exp; p keeps the unrounded exps.
template <bool FMA_QUOTIENTS>
__device__ void softmax_block(float* p, int L, int nblk, float* run_max, float* rescale, float* psums, float sink_h,
                              float* sum_exp) {
    auto ex = [](float v) { return FMA_QUOTIENTS ? exp_fma_rn(v) : exp_rn(v); };
    const int tid = threadIdx.x, nt = blockDim.x;
    // Block maxima in parallel; max is exact, so folding them after equals the CPU's fold from the previous max.
    for (int b = tid; b < nblk; b += nt) {
        float m = -F32_INF;
        for (int j = b * BLOCK; j < min(L, (b + 1) * BLOCK); ++j) m = fmaxf(m, p[j]);
        run_max[b] = m;
    }
    __syncthreads();
    if (tid == 0) {
        float prev = -1e30f;
        for (int b = 0; b < nblk; ++b) {
            const float m = fmaxf(prev, run_max[b]);
            rescale[b] = prev - m;
            run_max[b] = m;
            prev = m;
        }
    }
    __syncthreads();
    for (int b = tid; b < nblk; b += nt) rescale[b] = ex(rescale[b]);
    for (int j = tid; j < L; j += nt) p[j] = ex(p[j] - run_max[j / BLOCK]);
    __syncthreads();
    for (int b = tid; b < nblk; b += nt) {
        float psum = 0.0f;
        for (int j = b * BLOCK; j < min(L, (b + 1) * BLOCK); ++j) psum += p[j];
        psums[b] = psum;
    }
    __syncthreads();
    // The normalizer in the CPU's order: the rescaled chain of the block psums, then the sink.
    if (tid == 0) {
        float total = 0.0f;
        for (int b = 0; b < nblk; ++b) total = total * rescale[b] + psums[b];
        const float m = nblk > 0 ? run_max[nblk - 1] : -1e30f;
        *sum_exp = total + ex(sink_h - m);
    }
    __syncthreads();
}

// One (row, head): a key list of window[0..w) then sel[0..s), as the CPU forward builds it. Dynamic shared: q f32 [d], per key its row pointer and score (later probability), per block its max, rescale and psum.
__device__ void attend_row(const unsigned short* __restrict__ qrow, unsigned short* __restrict__ orow,
                           const unsigned short* __restrict__ chunk, int chunk_rows,
                           const unsigned short* __restrict__ ring, const unsigned short* __restrict__ latents,
                           int latent_rows, const int* __restrict__ window, const int* __restrict__ sel, int w, int s,
                           float sink_h, int d, float scale) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int tid = threadIdx.x, nt = blockDim.x;
    const int L = w + s;
    const int nblk = (L + BLOCK - 1) / BLOCK;
    const unsigned short** keys = reinterpret_cast<const unsigned short**>(smem);
    float* qf = reinterpret_cast<float*>(smem + sizeof(void*) * (size_t)L);
    float* p = qf + d;
    float* run_max = p + L;
    float* rescale = run_max + nblk;
    float* psums = rescale + nblk;
    __shared__ float sum_exp;

    for (int c = tid; c < d; c += nt) qf[c] = widen(qrow[c]);
    for (int j = tid; j < L; j += nt) {
        keys[j] = list_key(window, sel, w, j, chunk, chunk_rows, ring, latents, latent_rows, d);
    }
    __syncthreads();

    // Scores of every listed key; an empty slot scores -inf as the CPU's None does.
    for (int j = tid; j < L; j += nt) p[j] = keys[j] ? dot_seq(qf, keys[j], d) * scale : -F32_INF;
    __syncthreads();

    softmax_block<false>(p, L, nblk, run_max, rescale, psums, sink_h, &sum_exp);
    // Probabilities enter p·v rounded to bf16; this pass runs after the psum above has read them unrounded.
    for (int j = tid; j < L; j += nt) p[j] = widen(bf16_rne(p[j]));
    __syncthreads();

    __shared__ __align__(16) float scratch[PV_SCRATCH];
    const bool aligned = ((((size_t)chunk) | ((size_t)ring) | ((size_t)latents)) & 15) == 0;
    if (aligned && d >= 8 && d % 8 == 0 && nt % (d / 8) == 0 && nt * 8 <= PV_SCRATCH) {
        pv_wide(keys, p, rescale, scratch, L, nblk, d, sum_exp, orow);
        return;
    }
    // Even d: a thread owns column pairs and keeps PV_AHEAD keys' values in flight; each column's adds keep the CPU's order.
    const int pairs = (d % 2 == 0) ? d / 2 : 0;
    const int groups = (L + PV_AHEAD - 1) / PV_AHEAD;
    for (int c2 = tid; c2 < pairs; c2 += nt) {
        float acc0 = 0.0f, acc1 = 0.0f, pv0 = 0.0f, pv1 = 0.0f;
        unsigned int cur[PV_AHEAD], nxt[PV_AHEAD];
        load_pairs(keys, 0, L, c2, cur);
        for (int g = 0; g < groups; ++g) {
            load_pairs(keys, (g + 1) * PV_AHEAD, L, c2, nxt);
#pragma unroll
            for (int u = 0; u < PV_AHEAD; ++u) {
                const int j = g * PV_AHEAD + u;
                if (j < L && keys[j]) {
                    pv0 += p[j] * widen((unsigned short)(cur[u] & 0xFFFF));
                    pv1 += p[j] * widen((unsigned short)(cur[u] >> 16));
                }
                // A softmax block ends: fold its sum into the running one, as the CPU does per block.
                if (j < L && ((j + 1) % BLOCK == 0 || j + 1 == L)) {
                    const float rs = rescale[j / BLOCK];
                    acc0 = acc0 * rs + pv0;
                    acc1 = acc1 * rs + pv1;
                    pv0 = 0.0f;
                    pv1 = 0.0f;
                }
            }
#pragma unroll
            for (int u = 0; u < PV_AHEAD; ++u) cur[u] = nxt[u];
        }
        orow[2 * c2] = bf16_rne(acc0 / sum_exp);
        orow[2 * c2 + 1] = bf16_rne(acc1 / sum_exp);
    }
    for (int c = tid; pairs == 0 && c < d; c += nt) {
        float acc = 0.0f;
        for (int b = 0; b < nblk; ++b) {
            float pv = 0.0f;
            for (int j = b * BLOCK; j < min(L, (b + 1) * BLOCK); ++j)
                if (keys[j]) pv += p[j] * widen(keys[j][c]);
            acc = acc * rescale[b] + pv;
        }
        orow[c] = bf16_rne(acc / sum_exp);
    }
}

// Grid (rows, heads): one call's rows, their key ids window[r, :] and sel[r, :] into one set of chunk, ring and latents.
extern "C" __global__ void sparse_attn(const unsigned short* __restrict__ q, const unsigned short* __restrict__ chunk,
                                       const unsigned short* __restrict__ ring,
                                       const unsigned short* __restrict__ latents, const int* __restrict__ window,
                                       const int* __restrict__ sel, const float* __restrict__ sink,
                                       unsigned short* __restrict__ out, int rows, int heads, int d, int w, int s,
                                       int latent_rows, float scale) {
    const int r = blockIdx.x, h = blockIdx.y;
    const size_t at = ((size_t)r * heads + h) * d;
    attend_row(q + at, out + at, chunk, rows, ring, latents, latent_rows, window + (size_t)r * w,
               sel + (size_t)r * s, w, s, sink[h], d, scale);
}

// Words per row of `sparse_attn_rows`' table: chunk, ring, latents, window row, sel row, chunk rows | latent rows << 32.
#define ROW_WORDS 6

// Grid (rows, heads) over several lanes' rows: each row names its own lane's chunk, ring, latents and key lists.
extern "C" __global__ void sparse_attn_rows(const unsigned short* __restrict__ q,
                                            const unsigned long long* __restrict__ table,
                                            const float* __restrict__ sink, unsigned short* __restrict__ out,
                                            int heads, int d, int w, int s, float scale) {
    const int r = blockIdx.x, h = blockIdx.y;
    const unsigned long long* t = table + (size_t)r * ROW_WORDS;
    const size_t at = ((size_t)r * heads + h) * d;
    const unsigned long long n = t[5];
    attend_row(q + at, out + at, reinterpret_cast<const unsigned short*>(t[0]), (int)(n & 0xFFFFFFFFull),
               reinterpret_cast<const unsigned short*>(t[1]), reinterpret_cast<const unsigned short*>(t[2]),
               (int)(n >> 32), reinterpret_cast<const int*>(t[3]), reinterpret_cast<const int*>(t[4]), w, s, sink[h],
               d, scale);
}

// Split decode path (few (row, head) blocks idle most SMs): heads a thread scores its key row for, and keys (threads) a block.
#define SCORE_HEADS 4
#define SCORE_KEYS 32
// bf16 of padding after each staged key row: rows 16 bytes off the bank pattern, so 8 lanes' 16-byte reads hit distinct banks.
#define SCORE_PAD 8

// A 16-byte copy to shared memory that does not wait: a tile's whole key rows are in flight at once.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem));
}

// Grid (⌈L/SCORE_KEYS⌉, ⌈heads/SCORE_HEADS⌉, rows): the block stages its keys' rows in shared memory (one memory latency for the tile), then thread j scores key j for SCORE_HEADS heads, each dot_seq's sum from -0.0 in index order, into scores[r, h, j]; d % 8 == 0 and 16-byte aligned rows (the launcher checks).
extern "C" __global__ void __launch_bounds__(SCORE_KEYS)
attn_scores(const unsigned short* __restrict__ q, const unsigned short* __restrict__ chunk,
            const unsigned short* __restrict__ ring, const unsigned short* __restrict__ latents,
            const int* __restrict__ window, const int* __restrict__ sel, float* __restrict__ scores, int rows, int heads,
            int d, int w, int s, int latent_rows, float scale) {
    extern __shared__ __align__(16) float qs[];
    __shared__ const unsigned short* key_rows[SCORE_KEYS];
    const int r = blockIdx.z, h0 = blockIdx.y * SCORE_HEADS, L = w + s, nh = min(SCORE_HEADS, heads - h0);
    const int j0 = blockIdx.x * SCORE_KEYS, nk = min(SCORE_KEYS, L - j0), n8 = d / 8, ks = d + SCORE_PAD;
    unsigned short* kt = reinterpret_cast<unsigned short*>(qs + SCORE_HEADS * d);
    if ((int)threadIdx.x < nk)
        key_rows[threadIdx.x] = list_key(window + (size_t)r * w, sel + (size_t)r * s, w, j0 + threadIdx.x, chunk, rows,
                                         ring, latents, latent_rows, d);
    for (int i = threadIdx.x; i < SCORE_HEADS * d; i += blockDim.x)
        qs[i] = i / d < nh ? widen(q[((size_t)r * heads + h0) * d + i]) : 0.0f;
    __syncthreads();
    for (int i = threadIdx.x; i < nk * n8; i += blockDim.x) {
        const unsigned short* src = key_rows[i / n8];
        if (src) cp_async16(kt + (i / n8) * ks + 8 * (i % n8), src + 8 * (i % n8));
    }
    asm volatile("cp.async.wait_all;");
    __syncthreads();
    if ((int)threadIdx.x >= nk) return;
    const unsigned short* k = key_rows[threadIdx.x];
    float acc[SCORE_HEADS];
#pragma unroll
    for (int hh = 0; hh < SCORE_HEADS; ++hh) acc[hh] = -0.0f;
    if (k) {
        const uint4* k4 = reinterpret_cast<const uint4*>(kt + threadIdx.x * ks);
        for (int c = 0; c < n8; ++c) {
            float kf[8];
            unpack(k4[c], kt, kf);
#pragma unroll
            for (int hh = 0; hh < SCORE_HEADS; ++hh) {
                const float4 qa = *reinterpret_cast<const float4*>(qs + hh * d + 8 * c);
                const float4 qb = *reinterpret_cast<const float4*>(qs + hh * d + 8 * c + 4);
                const float qv[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
#pragma unroll
                for (int e = 0; e < 8; ++e) acc[hh] = __fadd_rn(acc[hh], __fmul_rn(qv[e], kf[e]));
            }
        }
    }
    const int j = j0 + threadIdx.x;
#pragma unroll
    for (int hh = 0; hh < SCORE_HEADS; ++hh)
        if (hh < nh) scores[((size_t)r * heads + h0 + hh) * L + j] = k ? __fmul_rn(acc[hh], scale) : -F32_INF;
}

// Threads of an attn_softmax block, one block per (row, head).
#define SOFTMAX_THREADS 256

// Grid (heads, rows): attend_row's softmax over scores[r, h, :] in place (block maxima, the running max's rescales, each block's psum from 0 in key order, the chain over blocks, the sink), probabilities rounded to bf16 after the psums; aux[r, h] gets the nblk rescales, then sum_exp.
extern "C" __global__ void __launch_bounds__(SOFTMAX_THREADS)
attn_softmax(float* __restrict__ scores, const float* __restrict__ sink, float* __restrict__ aux, int heads, int L) {
    extern __shared__ __align__(16) float sm[];
    const int tid = threadIdx.x, nt = blockDim.x, h = blockIdx.x, r = blockIdx.y, nblk = (L + BLOCK - 1) / BLOCK;
    float* g = scores + ((size_t)r * heads + h) * L;
    float* out = aux + ((size_t)r * heads + h) * (nblk + 1);
    float* p = sm;
    float* run_max = p + L;
    float* rescale = run_max + nblk;
    float* psums = rescale + nblk;
    for (int j = tid; j < L; j += nt) p[j] = g[j];
    __syncthreads();
    softmax_block<true>(p, L, nblk, run_max, rescale, psums, sink[h], out + nblk);
    for (int b = tid; b < nblk; b += nt) out[b] = rescale[b];
    for (int j = tid; j < L; j += nt) g[j] = widen(bf16_rne(p[j]));
}

// Heads and columns of an attn_pv block (8 columns a thread); its threads are (PV_COLS / 8) × one per softmax block.
#define PV_HEADS 4
#define PV_COLS 32
// bf16 between two softmax blocks' staged value tiles: the two thread groups of a quarter-warp then read disjoint banks.
#define PV_TILE_PAD 32

// block_pv over a softmax block's staged values (its rows PV_COLS wide from `tile`): the same adds in the same order.
template <int H>
__device__ __forceinline__ void block_pv_tile(const unsigned short* const* keys, const unsigned short* tile, const float* p,
                                              int L, int j0, int j1, int cl, float (&pv)[H][8]) {
#pragma unroll
    for (int h = 0; h < H; ++h)
#pragma unroll
        for (int u = 0; u < 8; ++u) pv[h][u] = 0.0f;
    for (int j = j0; j < j1; ++j) {
        if (!keys[j]) continue;
        float v[8];
        unpack(*reinterpret_cast<const uint4*>(tile + (j - j0) * PV_COLS + cl), tile, v);
#pragma unroll
        for (int h = 0; h < H; ++h) {
            const float pj = p[h * L + j];
#pragma unroll
            for (int e = 0; e < 8; ++e) pv[h][e] = __fadd_rn(pv[h][e], __fmul_rn(pj, v[e]));
        }
    }
}

// Grid (d / PV_COLS, ⌈heads/PV_HEADS⌉, rows), block (PV_COLS/8)·nblk, after attn_softmax (probs: its rounded probabilities, aux its rescales and sum_exp): the block stages its columns of every key's value row (async copies, one memory latency), then thread group b forms softmax block b's p·v partial for 8 columns and PV_HEADS heads, and group 0 folds them in block order; every add the CPU's.
extern "C" __global__ void attn_pv(const float* __restrict__ probs, const float* __restrict__ aux,
                                   const unsigned short* __restrict__ chunk, const unsigned short* __restrict__ ring,
                                   const unsigned short* __restrict__ latents, const int* __restrict__ window,
                                   const int* __restrict__ sel, unsigned short* __restrict__ out, int rows, int heads,
                                   int d, int w, int s, int latent_rows) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int tid = threadIdx.x, nt = blockDim.x;
    const int r = blockIdx.z, h0 = blockIdx.y * PV_HEADS, L = w + s, nblk = (L + BLOCK - 1) / BLOCK;
    const int nh = min(PV_HEADS, heads - h0), c0 = blockIdx.x * PV_COLS, tile_step = BLOCK * PV_COLS + PV_TILE_PAD;
    const unsigned short** keys = reinterpret_cast<const unsigned short**>(smem);
    float* p = reinterpret_cast<float*>(smem + sizeof(void*) * (size_t)L);  // [PV_HEADS][L]
    float* rs = p + PV_HEADS * L;                                            // [PV_HEADS][nblk + 1]: rescales, sum_exp
    float* part = rs + PV_HEADS * (nblk + 1);                                // [nblk][PV_HEADS][PV_COLS]
    // [nblk][tile_step] bf16 from the next 16-byte boundary (the pointers make the offset odd for odd L).
    const size_t tail = reinterpret_cast<unsigned char*>(part + nblk * PV_HEADS * PV_COLS) - smem;
    unsigned short* tiles = reinterpret_cast<unsigned short*>(smem + ((tail + 15) & ~(size_t)15));
    for (int j = tid; j < L; j += nt) {
        keys[j] =
            list_key(window + (size_t)r * w, sel + (size_t)r * s, w, j, chunk, rows, ring, latents, latent_rows, d);
    }
    // Heads past the last stand in with zero probabilities (never written).
    for (int i = tid; i < PV_HEADS * L; i += nt) p[i] = i / L < nh ? probs[((size_t)r * heads + h0) * L + i] : 0.0f;
    for (int i = tid; i < PV_HEADS * (nblk + 1); i += nt)
        rs[i] = i / (nblk + 1) < nh ? aux[((size_t)r * heads + h0) * (nblk + 1) + i] : 1.0f;
    __syncthreads();
    constexpr int P8 = PV_COLS / 8;
    for (int i = tid; i < L * P8; i += nt) {
        const int j = i / P8, piece = i % P8;
        if (keys[j]) cp_async16(tiles + (j / BLOCK) * tile_step + (j % BLOCK) * PV_COLS + 8 * piece, keys[j] + c0 + 8 * piece);
    }
    asm volatile("cp.async.wait_all;");
    __syncthreads();
    const int b = tid / P8, cl = (tid % P8) * 8, c8 = c0 + cl;
    if (b < nblk) {
        float pv[PV_HEADS][8];
        block_pv_tile<PV_HEADS>(keys, tiles + b * tile_step, p, L, b * BLOCK, min(L, (b + 1) * BLOCK), cl, pv);
#pragma unroll
        for (int hh = 0; hh < PV_HEADS; ++hh)
#pragma unroll
            for (int u = 0; u < 8; ++u) part[(b * PV_HEADS + hh) * PV_COLS + cl + u] = pv[hh][u];
    }
    __syncthreads();
    if (b == 0) {
        for (int hh = 0; hh < nh; ++hh) {
            float acc[8];
#pragma unroll
            for (int u = 0; u < 8; ++u) acc[u] = 0.0f;
            for (int bb = 0; bb < nblk; ++bb) {
                const float scale_b = rs[hh * (nblk + 1) + bb];
#pragma unroll
                for (int u = 0; u < 8; ++u)
                    acc[u] = __fadd_rn(__fmul_rn(acc[u], scale_b), part[(bb * PV_HEADS + hh) * PV_COLS + cl + u]);
            }
            const float sum_exp = rs[hh * (nblk + 1) + nblk];
            unsigned short* orow = out + ((size_t)r * heads + h0 + hh) * d + c8;
#pragma unroll
            for (int u = 0; u < 8; ++u) orow[u] = bf16_rne(acc[u] / sum_exp);
        }
    }
}
