// RMSNorm of bf16 rows as tf_core::ops::rms_norm_bf16 computes it: a sequential f32 sum of squares, then w·(x·r).

// One block per row. The CPU sums the squares in index order, so one thread does (a few µs at dim 5120).
extern "C" __global__ void rms_norm_seq(const bf16_bits* __restrict__ x, const bf16_bits* __restrict__ w,
                                        bf16_bits* __restrict__ y, int dim, float eps) {
    __shared__ float r_s;
    const bf16_bits* xr = x + (size_t)blockIdx.x * dim;
    if (threadIdx.x == 0) {
        float ss = -0.0f;
        for (int c = 0; c < dim; ++c) ss += widen(xr[c]) * widen(xr[c]);
        r_s = 1.0f / sqrtf(ss / (float)dim + eps);
    }
    __syncthreads();
    const float r = r_s;
    for (int c = threadIdx.x; c < dim; c += blockDim.x) y[(size_t)blockIdx.x * dim + c] = bf16_rne(widen(w[c]) * (widen(xr[c]) * r));
}
