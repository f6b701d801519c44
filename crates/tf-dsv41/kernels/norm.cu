// RMSNorm of bf16 rows as tf_core::ops::rms_norm_bf16 computes it: a sequential f32 sum of squares, then w·(x·r).

// Floats of a row staged in shared memory at a time.
#define NORM_CHUNK 4096

// One block per row. The CPU sums the squares in index order, so one thread does, from a chunk the block staged in coalesced loads.
extern "C" __global__ void rms_norm_seq(const bf16_bits* __restrict__ x, const bf16_bits* __restrict__ w,
                                        bf16_bits* __restrict__ y, int dim, float eps) {
    __shared__ float chunk[NORM_CHUNK];
    __shared__ float r_s;
    const bf16_bits* xr = x + (size_t)blockIdx.x * dim;
    float ss = -0.0f;
    for (int c0 = 0; c0 < dim; c0 += NORM_CHUNK) {
        const int len = min(NORM_CHUNK, dim - c0);
        for (int c = threadIdx.x; c < len; c += blockDim.x) chunk[c] = widen(__ldg(xr + c0 + c));
        __syncthreads();
        // Unrolled so the shared loads run ahead of the dependent adds.
        if (threadIdx.x == 0)
#pragma unroll 16
            for (int c = 0; c < len; ++c) ss = __fadd_rn(ss, __fmul_rn(chunk[c], chunk[c]));
        __syncthreads();
    }
    if (threadIdx.x == 0) r_s = 1.0f / sqrtf(ss / (float)dim + eps);
    __syncthreads();
    const float r = r_s;
    for (int c = threadIdx.x; c < dim; c += blockDim.x) y[(size_t)blockIdx.x * dim + c] = bf16_rne(widen(w[c]) * (widen(xr[c]) * r));
}
