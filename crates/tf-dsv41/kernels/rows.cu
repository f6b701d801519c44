// Row moves of the dsv41 forward: the embedding gather into hc equal streams, and row scatters into ring slots.

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
