// Row moves of the dsv41 forward: the embedding gather into hc equal streams, row scatters into ring slots, and the argmax pick of a row.

// Grid: one block per row. Each of the hc streams gets the token's bf16 embedding row unchanged.
extern "C" __global__ void embed_rows(const int* __restrict__ ids, const unsigned short* __restrict__ table,
                                      unsigned short* __restrict__ x, int dim, int hc) {
    const unsigned short* src = table + (size_t)ids[blockIdx.x] * dim;
    unsigned short* dst = x + (size_t)blockIdx.x * hc * dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        const unsigned short v = src[i];
        for (int s = 0; s < hc; ++s) dst[(size_t)s * dim + i] = v;
    }
}

// Grid: one block per source row; row r goes to slot slots[r] of dst, or nowhere when the slot is negative.
extern "C" __global__ void scatter_rows(const unsigned int* __restrict__ src, unsigned int* __restrict__ dst,
                                        const int* __restrict__ slots, int row_words) {
    const int slot = slots[blockIdx.x];
    if (slot < 0) return;
    const unsigned int* s = src + (size_t)blockIdx.x * row_words;
    unsigned int* d = dst + (size_t)slot * row_words;
    for (int i = threadIdx.x; i < row_words; i += blockDim.x) d[i] = s[i];
}

// Grid: one block per source row; row r goes to the address dst[r], or nowhere when it is 0 (several rings at once).
extern "C" __global__ void scatter_rows_to(const unsigned int* __restrict__ src,
                                           const unsigned long long* __restrict__ dst, int row_words) {
    unsigned int* d = reinterpret_cast<unsigned int*>(dst[blockIdx.x]);
    if (d == nullptr) return;
    const unsigned int* s = src + (size_t)blockIdx.x * row_words;
    for (int i = threadIdx.x; i < row_words; i += blockDim.x) d[i] = s[i];
}

// Threads of the one argmax_sum block.
#define PICK_THREADS 1024

// (v, i) beats (bv, bi) when larger, or equal at a lower index: merging first-maximum picks keeps the first maximum.
__device__ __forceinline__ void pick_merge(float& bv, int& bi, float v, int i) {
    if (v > bv || (v == bv && i < bi)) {
        bv = v;
        bi = i;
    }
}

// One block: out[0] = tf_core::ops::argmax of a[i] + b[i] over i < n (f32 adds): the first maximum; NaN never wins; a row without a value above -inf gives 0.
extern "C" __global__ void __launch_bounds__(PICK_THREADS) argmax_sum(const float* __restrict__ a, const float* __restrict__ b,
                                                                   int* __restrict__ out, int n) {
    __shared__ float wv[PICK_THREADS / 32];
    __shared__ int wi[PICK_THREADS / 32];
    const int t = threadIdx.x;
    float bv = -F32_INF;
    int bi = 0;
    for (int i = t; i < n; i += PICK_THREADS) {
        const float v = __fadd_rn(__ldg(a + i), __ldg(b + i));
        if (v > bv) {
            bv = v;
            bi = i;
        }
    }
    for (int m = 16; m > 0; m >>= 1) pick_merge(bv, bi, __shfl_xor_sync(0xffffffffu, bv, m), __shfl_xor_sync(0xffffffffu, bi, m));
    if (t % 32 == 0) {
        wv[t / 32] = bv;
        wi[t / 32] = bi;
    }
    __syncthreads();
    if (t >= 32) return;
    bv = wv[t];
    bi = wi[t];
    for (int m = 16; m > 0; m >>= 1) pick_merge(bv, bi, __shfl_xor_sync(0xffffffffu, bv, m), __shfl_xor_sync(0xffffffffu, bi, m));
    if (t == 0) out[0] = bi;
}
