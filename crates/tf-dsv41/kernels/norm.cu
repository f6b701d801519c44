// RMSNorm of bf16 rows as tf_core::ops::rms_norm_bf16 computes it: a sequential f32 sum of squares, then w·(x·r).

// Floats of a row staged in shared memory at a time (a whole row up to this width).
#define NORM_CHUNK 8192

// x[c0 .. c0+len) widened into s: 8 values per 16-byte load where `vec`, else one at a time.
__device__ __forceinline__ void norm_stage(const bf16_bits* __restrict__ xr, int c0, int len, bool vec, float* s) {
    if (vec) {
        for (int v = threadIdx.x; v < len / 8; v += blockDim.x) {
            unpack(__ldg(reinterpret_cast<const uint4*>(xr + c0) + v), xr, s + 8 * v);
        }
    } else {
        for (int c = threadIdx.x; c < len; c += blockDim.x) s[c] = widen(__ldg(xr + c0 + c));
    }
}

// One block per row. The sum of squares runs in the CPU's SumOrder: index order on one thread, or (wide) warp 0's 32 lanes then their fold; from chunks the block staged; a row that fits stays staged for the output pass.
extern "C" __global__ void rms_norm_seq(const bf16_bits* __restrict__ x, const bf16_bits* __restrict__ w,
                                        bf16_bits* __restrict__ y, int dim, float eps, int wide) {
    __shared__ __align__(16) float chunk[NORM_CHUNK];
    __shared__ float r_s;
    const bf16_bits* xr = x + (size_t)blockIdx.x * dim;
    bf16_bits* yr = y + (size_t)blockIdx.x * dim;
    const bool vec = dim % 8 == 0 && ((reinterpret_cast<size_t>(x) | reinterpret_cast<size_t>(w)) & 15) == 0;
    float ss = -0.0f;
    for (int c0 = 0; c0 < dim; c0 += NORM_CHUNK) {
        const int len = min(NORM_CHUNK, dim - c0);
        norm_stage(xr, c0, len, vec, chunk);
        __syncthreads();
        if (wide && threadIdx.x < 32) ss = lane_sum_squares(chunk, len, threadIdx.x, ss);
        else if (!wide && threadIdx.x == 0) ss = seq_sum_squares(chunk, len, ss);
        __syncthreads();
    }
    if (wide && threadIdx.x < 32) ss = lanes32_fold(ss);
    if (threadIdx.x == 0) r_s = 1.0f / sqrtf(ss / (float)dim + eps);
    __syncthreads();
    const float r = r_s;
    const bool staged = dim <= NORM_CHUNK;
#pragma unroll 4
    for (int c = threadIdx.x; c < dim; c += blockDim.x) {
        const float xv = staged ? chunk[c] : widen(__ldg(xr + c));
        yr[c] = bf16_rne(widen(__ldg(w + c)) * (xv * r));
    }
}
