// The lightning indexer (attn/index.rs): bf16 ReLU scores over the visible groups, the candidate mask, top-k selection.

#define FULL_MASK 0xFFFFFFFFu
// `key_id(KeySource::Latent, 0)`: the selection's ids name rows of the compressed latents.
#define LATENT_ID (2 << 28)
#define KEY_NONE (-1)

// Groups row `r` sees: the CPU's `(pos + 1) / ratio` at position pos0 + r.
__device__ __forceinline__ int visible(int pos0, int r, int ratio) { return (pos0 + r + 1) / ratio; }

// Keys per block (a warp each) and heads per lane (heads ≤ 32·SCORE_MAX_HPL, the launcher checks).
#define SCORE_WARPS 4
#define SCORE_MAX_HPL 4

// One row's score of group t (a warp each; grid (rows, ceil((cap - group0) / SCORE_WARPS)), a launch per 65535·SCORE_WARPS groups from group0); dynamic shared: the row's q f32 [heads][hd+1] (padded: lanes read distinct banks), its head weights [heads], one key f32 [hd] per warp. Lane l computes heads l, l+32, … each in the CPU's sequential order; the heads' terms are then summed in head order. Invisible entries get -inf so every byte is defined; a visible group past the keys is the CPU's zero key.
__device__ void score_row(const unsigned short* __restrict__ qrow, const unsigned short* __restrict__ wrow,
                          const unsigned short* __restrict__ keys, float* __restrict__ srow, int heads, int hd,
                          int groups, int cap, int vis, float c, int t) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, qs = hd + 1;
    float* qf = reinterpret_cast<float*>(smem);
    float* wr = qf + (size_t)heads * qs;
    float* kf = wr + heads + (size_t)warp * hd;
    // Unrolled so a thread's loads of the row are in flight together.
#pragma unroll 8
    for (int i = tid; i < heads * hd; i += blockDim.x) qf[(i / hd) * qs + i % hd] = widen(qrow[i]);
    for (int h = tid; h < heads; h += blockDim.x) wr[h] = round_bf16(widen(wrow[h]) * c);
    __syncthreads();
    if (t >= cap) return;
    float v;
    if (t >= vis) {
        v = -F32_INF;
    } else if (t >= groups) {
        v = 0.0f;
    } else {
        const unsigned short* k = keys + (size_t)t * hd;
        for (int i = lane; i < hd; i += 32) kf[i] = widen(k[i]);
        __syncwarp();
        float term[SCORE_MAX_HPL];
#pragma unroll
        for (int u = 0; u < SCORE_MAX_HPL; ++u) {
            const int h = lane + 32 * u;
            term[u] = 0.0f;
            if (h < heads) {
                const float* qh = qf + (size_t)h * qs;
                // One sequential f32 sum from -0.0 per head, as Rust's `sum` over the zipped products.
                float dot = -0.0f;
#pragma unroll 8
                for (int i = 0; i < hd; ++i) dot += qh[i] * kf[i];
                term[u] = round_bf16(fmaxf(round_bf16(dot), 0.0f) * wr[h]);
            }
        }
        float total = 0.0f;
        for (int h = 0; h < heads; ++h) {
            float mine = term[0];
#pragma unroll
            for (int u = 1; u < SCORE_MAX_HPL; ++u)
                if (h / 32 == u) mine = term[u];
            total += __shfl_sync(FULL_MASK, mine, h & 31);
        }
        v = round_bf16(total);
    }
    if (lane == 0) srow[t] = v;
}


extern "C" __global__ void index_scores(const unsigned short* __restrict__ q, const unsigned short* __restrict__ w,
                                        const unsigned short* __restrict__ keys, float* __restrict__ scores,
                                        int heads, int hd, int groups, int cap, int pos0, int ratio, float c,
                                        int group0) {
    const int r = blockIdx.x;
    score_row(q + (size_t)r * heads * hd, w + (size_t)r * heads, keys, scores + (size_t)r * cap, heads, hd, groups,
              cap, visible(pos0, r, ratio), c, group0 + blockIdx.y * SCORE_WARPS + (threadIdx.x >> 5));
}

// Words per row of `index_scores_rows`' table: keys, the row's scores, groups | cap << 32, position | q row << 32.
#define SCORE_WORDS 4

// `index_scores` over several lanes' rows: each row's keys, scores row, groups, cap, position and row of q and w from the table.
extern "C" __global__ void index_scores_rows(const unsigned short* __restrict__ q, const unsigned short* __restrict__ w,
                                             const unsigned long long* __restrict__ table, int heads, int hd,
                                             int ratio, float c, int group0) {
    const unsigned long long* t = table + (size_t)blockIdx.x * SCORE_WORDS;
    const int groups = (int)(t[2] & 0xFFFFFFFFull), cap = (int)(t[2] >> 32);
    const int pos = (int)(t[3] & 0xFFFFFFFFull), row = (int)(t[3] >> 32);
    score_row(q + (size_t)row * heads * hd, w + (size_t)row * heads, reinterpret_cast<const unsigned short*>(t[0]),
              reinterpret_cast<float*>(t[1]), heads, hd, groups, cap, visible(pos, 0, ratio), c,
              group0 + blockIdx.y * SCORE_WARPS + (threadIdx.x >> 5));
}

// f32 bits mapped so unsigned order is Rust's `total_cmp` order (-NaN < -inf < … < -0 < +0 < … < +inf < +NaN).
__device__ __forceinline__ unsigned int ordered(float x) {
    const unsigned int b = __float_as_uint(x);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// Exclusive prefix sum of `v` over the block (blockDim a multiple of 32, at most 1024); `*total` gets the block's sum.
__device__ int block_scan(int v, int* total, int* warp_incl) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int x = v;
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(FULL_MASK, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) warp_incl[wid] = x;
    __syncthreads();
    if (wid == 0) {
        int s = lane < nw ? warp_incl[lane] : 0;
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(FULL_MASK, s, o);
            if (lane >= o) s += y;
        }
        __syncwarp();
        if (lane < nw) warp_incl[lane] = s;
    }
    __syncthreads();
    const int out = x - v + (wid > 0 ? warp_incl[wid - 1] : 0);
    *total = warp_incl[nw - 1];
    __syncthreads();
    return out;
}

// The CPU's `top_k` (key descending, then index ascending), emitted in index order: radix-select the k-th key T first.
template <class Key, class Emit>
__device__ void top_k_ascending(int n, int k, Key key, Emit emit) {
    __shared__ unsigned int hist[256];
    __shared__ unsigned int s_prefix;
    __shared__ int s_rem;
    __shared__ int warp_incl[32];
    const int tid = threadIdx.x, nt = blockDim.x;
    if (k <= 0 || n <= 0) return;
    unsigned int prefix = 0, mask = 0;
    int rem = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = tid; b < 256; b += nt) hist[b] = 0;
        __syncthreads();
        for (int i = tid; i < n; i += nt) {
            const unsigned int u = key(i);
            if ((u & mask) == prefix) atomicAdd(&hist[(u >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (tid == 0) {
            int b = 255;
            while (b > 0 && (int)hist[b] < rem) rem -= (int)hist[b--];
            s_prefix = prefix | ((unsigned int)b << shift);
            s_rem = rem;
        }
        __syncthreads();
        prefix = s_prefix;
        rem = s_rem;
        mask |= 0xFFu << shift;
    }
    // `rem` keys equal to T are still wanted; they go by ascending index, as the CPU's tie rule does.
    int eq_before = 0, taken = 0;
    for (int base = 0; base < n && taken < k; base += nt) {
        const int i = base + tid;
        const unsigned int u = i < n ? key(i) : 0u;
        const bool eq = i < n && u == prefix;
        const bool gt = i < n && u > prefix;
        int eq_total, take_total;
        const int eq_rank = eq_before + block_scan(eq ? 1 : 0, &eq_total, warp_incl);
        const bool take = gt || (eq && eq_rank < rem);
        const int slot = taken + block_scan(take ? 1 : 0, &take_total, warp_incl);
        if (take) emit(i, slot);
        eq_before += eq_total;
        taken += take_total;
    }
    __syncthreads();
}

// One row's selection (blockDim a multiple of 32): mode 0 plain, 1 candidate source (writes `mrow`, its mask row of cap), 2 restricted by `mrow`, the source's mask row of src_cap. Dynamic shared (mode 1 only): block maxima f32 [ceil(cap / block)] then chosen flags u8 [same].
__device__ void select_row(const float* __restrict__ srow, unsigned char* mrow, int* __restrict__ srow_out, int cap,
                           int topk, int pos, int ratio, int mode, int blocks, int block, int src_ratio, int src_cap) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int tid = threadIdx.x, nt = blockDim.x;
    const int cl = min(visible(pos, 0, ratio), cap);
    // The source's mask comes from its own unmasked scores, and its selection stays unrestricted, as the CPU's.
    if (mode == 1) {
        const int nb = (cl + block - 1) / block;
        const int nb_max = (cap + block - 1) / block;
        float* bs = reinterpret_cast<float*>(smem);
        unsigned char* chosen = smem + sizeof(float) * (size_t)nb_max;
        for (int b = tid; b < nb; b += nt) {
            float m = -F32_INF;
            for (int t = b * block; t < min(cl, (b + 1) * block); ++t) {
                // The CPU's block_max: NaN ignored, +0 over −0.
                const float v = srow[t];
                if (v > m || (v == m && !signbit(v))) m = v;
            }
            bs[b] = m;
            chosen[b] = 0;
        }
        __syncthreads();
        if (tid == 0 && cl > 0) bs[(cl - 1) / block] = F32_INF;
        __syncthreads();
        top_k_ascending(
            nb, min(blocks, nb), [&](int b) { return ordered(bs[b]); },
            [&](int b, int) {
                if (bs[b] > -F32_INF) chosen[b] = 1;
            });
        __syncthreads();
        for (int t = tid; t < cap; t += nt) mrow[t] = (t < cl && chosen[t / block]) ? 1 : 0;
    }
    // The CPU zips the mask with the scores by group number: groups past the source's visible count stay unmasked.
    const int src_cl = mode == 2 ? min(visible(pos, 0, src_ratio), src_cap) : 0;
    const unsigned char* keep = mode == 2 ? mrow : nullptr;
    const int k = min(topk, cl);
    top_k_ascending(
        cl, k,
        [&](int t) {
            const bool masked = t < src_cl && keep[t] == 0;
            return ordered(masked ? -F32_INF : srow[t]);
        },
        [&](int t, int slot) { srow_out[slot] = LATENT_ID | t; });
    for (int j = k + tid; j < topk; j += nt) srow_out[j] = KEY_NONE;
}

// Grid (rows); `select_row` of row r: the mask is [rows, cap] in mode 1, the source's [rows, src_cap] in mode 2.
extern "C" __global__ void index_select(const float* __restrict__ scores, unsigned char* mask, int* __restrict__ sel,
                                        int cap, int topk, int pos0, int ratio, int mode, int blocks, int block,
                                        int src_ratio, int src_cap) {
    const int r = blockIdx.x;
    unsigned char* mrow = mode == 1 ? mask + (size_t)r * cap : mode == 2 ? mask + (size_t)r * src_cap : nullptr;
    select_row(scores + (size_t)r * cap, mrow, sel + (size_t)r * topk, cap, topk, pos0 + r, ratio, mode, blocks, block,
               src_ratio, src_cap);
}

// Words per row of `index_select_rows`' table: scores row, mask row (or 0), sel row, cap | src_cap << 32, position.
#define SELECT_WORDS 5

// `index_select` over several lanes' rows, each with its own scores, mask and sel rows, caps and position from the table.
extern "C" __global__ void index_select_rows(const unsigned long long* __restrict__ table, int topk, int ratio,
                                             int mode, int blocks, int block, int src_ratio) {
    const unsigned long long* t = table + (size_t)blockIdx.x * SELECT_WORDS;
    select_row(reinterpret_cast<const float*>(t[0]), reinterpret_cast<unsigned char*>(t[1]),
               reinterpret_cast<int*>(t[2]), (int)(t[3] & 0xFFFFFFFFull), topk, (int)t[4], ratio, mode, blocks, block,
               src_ratio, (int)(t[3] >> 32));
}
