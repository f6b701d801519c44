// MoE pieces (dsv41 §9) as crates/tf-dsv41/src/moe.rs computes them: routing, the SwiGLU between the GEMVs, the sum.

#define ROUTE_THREADS 256

// f32::total_cmp's key: comparing these as signed ints orders floats as Rust's total order does (−0 below +0).
__device__ __forceinline__ int total_key(float v) {
    const int b = __float_as_int(v);
    return b ^ (int)(((unsigned)(b >> 31)) >> 1);
}

// (key desc, id asc) as one u64 whose larger value ranks first: the biased score's total-order key, then the id inverted.
__device__ __forceinline__ unsigned long long route_rank(int key, int e) {
    return ((unsigned long long)((unsigned)key ^ 0x80000000u) << 32) | (unsigned)~e;
}

// Grid: one block per row; dynamic shared memory of 2·experts + topk words. The expert ranked k by (biased score desc, id asc) is ids[k]; weights come from the unbiased sqrt-softplus scores, normalized in rank order.
extern "C" __global__ void __launch_bounds__(ROUTE_THREADS)
moe_route(const float* __restrict__ logits, const float* __restrict__ bias, int* __restrict__ ids,
          float* __restrict__ weights, int experts, int topk, int norm_topk, float route_scale) {
    extern __shared__ float smem[];
    __shared__ unsigned long long warp_best[ROUTE_THREADS / 32];
    __shared__ unsigned long long last;
    float* score = smem;
    int* key = (int*)(smem + experts);
    int* pick = key + experts;
    const float* lr = logits + (size_t)blockIdx.x * experts;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int e = threadIdx.x; e < experts; e += ROUTE_THREADS) {
        const float l = lr[e];
        const float s = sqrtf(l > 20.0f ? l : log1p_rn(exp_rn(l)));
        score[e] = s;
        key[e] = total_key(s + bias[e]);
    }
    __syncthreads();
    // Round k picks the best expert ranked below round k-1's pick: the order is total, so this is the k-th of a full sort.
    for (int k = 0; k < topk && k < experts; ++k) {
        const unsigned long long below = k == 0 ? 0ull : last;
        unsigned long long best = 0ull;
        for (int e = threadIdx.x; e < experts; e += ROUTE_THREADS) {
            const unsigned long long r = route_rank(key[e], e);
            if ((k == 0 || r < below) && r > best) best = r;
        }
#pragma unroll
        for (int m = 16; m > 0; m >>= 1) {
            const unsigned long long o = __shfl_xor_sync(0xffffffffu, best, m);
            best = o > best ? o : best;
        }
        if (lane == 0) warp_best[warp] = best;
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int w = 1; w < ROUTE_THREADS / 32; ++w) best = warp_best[w] > best ? warp_best[w] : best;
            last = best;
            pick[k] = (int)~(unsigned)(best & 0xffffffffull);
        }
        __syncthreads();
    }
    for (int k = threadIdx.x; k < topk; k += ROUTE_THREADS) {
        float w = score[pick[k]];
        if (norm_topk && topk > 1) {
            float s = -0.0f;
            for (int q = 0; q < topk; ++q) s += score[pick[q]];
            w /= s + 1e-20f;
        }
        ids[(size_t)blockIdx.x * topk + k] = pick[k];
        weights[(size_t)blockIdx.x * topk + k] = w * route_scale;
    }
}

// Grid (pairs, ⌈inter/threads⌉): out = bf16(silu(min(g, L)) · clamp(u, ±L) · w[p]) on bf16-rounded g and u; the clamp only when limit > 0 and the weight only when has_weights, as the CPU's swiglu.
extern "C" __global__ void moe_swiglu(const float* __restrict__ g, const float* __restrict__ u,
                                      const float* __restrict__ weights, unsigned short* __restrict__ out, int inter,
                                      int has_weights, float limit) {
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= inter) return;
    const size_t at = (size_t)blockIdx.x * inter + c;
    float gv = round_bf16(g[at]), uv = round_bf16(u[at]);
    if (limit > 0.0f) {
        uv = uv < -limit ? -limit : uv;
        uv = uv > limit ? limit : uv;
        gv = fminf(gv, limit);
    }
    float h = gv / (1.0f + exp_rn(-gv)) * uv;
    if (has_weights) h *= weights[blockIdx.x];
    out[at] = bf16_rne(h);
}

// Grid (rows, ⌈dim/threads⌉); dynamic shared memory of topk words. y = bf16(Σ bf16(down) over the row's picks in ascending expert id, from +0.0, + bf16(shared)): Moe::forward walks experts in index order; down holds `stride` pairs a row (topk + 1 when the shared expert rode along), shared rows are shared_stride apart.
extern "C" __global__ void moe_combine(const float* __restrict__ down, const int* __restrict__ ids,
                                       const float* __restrict__ shared, unsigned short* __restrict__ y, int topk,
                                       int dim, int stride, int shared_stride) {
    extern __shared__ int order[];
    const int* ir = ids + (size_t)blockIdx.x * topk;
    for (int t = threadIdx.x; t < topk; t += blockDim.x) {
        const int id = ir[t];
        int rank = 0;
        for (int j = 0; j < topk; ++j) rank += ir[j] < id || (ir[j] == id && j < t);
        order[rank] = t;
    }
    __syncthreads();
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= dim) return;
    float a = 0.0f;
    for (int k = 0; k < topk; ++k) a += round_bf16(down[((size_t)blockIdx.x * stride + order[k]) * dim + c]);
    y[(size_t)blockIdx.x * dim + c] = bf16_rne(a + round_bf16(shared[(size_t)blockIdx.x * shared_stride + c]));
}

// Grid (rows), 32 threads: each row's topk picks, then the shared expert's table row with weight 1 (×1 is exact), so it rides in the routed launches.
extern "C" __global__ void moe_with_shared(const int* __restrict__ ids, const float* __restrict__ weights, int* __restrict__ ids2,
                                           float* __restrict__ weights2, int topk, int shared) {
    const size_t r = blockIdx.x;
    for (int j = threadIdx.x; j <= topk; j += blockDim.x) {
        ids2[r * (topk + 1) + j] = j < topk ? ids[r * topk + j] : shared;
        weights2[r * (topk + 1) + j] = j < topk ? weights[r * topk + j] : 1.0f;
    }
}
