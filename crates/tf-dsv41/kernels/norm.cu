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

// Row sources of norm_row: a bf16 row, or hc_pre's output of a row of streams (rounded to bf16 as hc_pre stores it).
struct RowSrc {
    const bf16_bits* xr;
    bool vec;
    __device__ void stage(int c0, int len, float* s) const { norm_stage(xr, c0, len, vec, s); }
    __device__ float at(int c) const { return widen(__ldg(xr + c)); }
};

struct PreSrc {
    const bf16_bits* xr;
    const float* pre;
    int hc, dim;
    // hc_pre's sum for column c: from -0.0, in stream order.
    __device__ float at(int c) const {
        float s = -0.0f;
        for (int i = 0; i < hc; ++i) s += pre[i] * widen(xr[(size_t)i * dim + c]);
        return widen(bf16_rne(s));
    }
    __device__ void stage(int c0, int len, float* s) const {
        for (int c = threadIdx.x; c < len; c += blockDim.x) s[c] = at(c0 + c);
    }
};

// Output policies of norm_row: the bf16 row alone, or also each 32-group's FP8 codes and scale (act_quant_fp8's bits of the stored row).
struct Bf16Only {
    __device__ __forceinline__ void put(int, float) const {}
};

struct WithCodes {
    u8* codes;
    float* scales;
    // Needs the whole warp at one 32-group: dim % 32 == 0 and blockDim.x % 32 == 0 (the launcher checks).
    __device__ __forceinline__ void put(int c, float v) const { quant_group32(v, threadIdx.x % 32, codes + c, scales + c / 32); }
};

// One block per row. The sum of squares runs in the CPU's SumOrder: index order on one thread, or (wide) warp 0's 32 lanes then their fold; from chunks the block staged; a row that fits stays staged for the output pass.
template <class Src, class Out>
__device__ __forceinline__ void norm_row(const Src src, const bf16_bits* __restrict__ w, bf16_bits* __restrict__ yr, int dim,
                                         float eps, int wide, const Out out) {
    __shared__ __align__(16) float chunk[NORM_CHUNK];
    __shared__ float r_s;
    float ss = -0.0f;
    for (int c0 = 0; c0 < dim; c0 += NORM_CHUNK) {
        const int len = min(NORM_CHUNK, dim - c0);
        src.stage(c0, len, chunk);
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
        const float xv = staged ? chunk[c] : src.at(c);
        const bf16_bits b = bf16_rne(widen(__ldg(w + c)) * (xv * r));
        yr[c] = b;
        out.put(c, widen(b));
    }
}

extern "C" __global__ void rms_norm_seq(const bf16_bits* __restrict__ x, const bf16_bits* __restrict__ w,
                                        bf16_bits* __restrict__ y, int dim, float eps, int wide) {
    const bool vec = dim % 8 == 0 && ((reinterpret_cast<size_t>(x) | reinterpret_cast<size_t>(w)) & 15) == 0;
    norm_row(RowSrc{x + (size_t)blockIdx.x * dim, vec}, w, y + (size_t)blockIdx.x * dim, dim, eps, wide, Bf16Only{});
}

// rms_norm_seq that also writes act_quant_fp8's codes [rows, dim] and scales [rows, dim / 32] of its output, for the FP8 linears it feeds.
extern "C" __global__ void rms_norm_quant(const bf16_bits* __restrict__ x, const bf16_bits* __restrict__ w,
                                          bf16_bits* __restrict__ y, u8* __restrict__ codes, float* __restrict__ scales,
                                          int dim, float eps, int wide) {
    const bool vec = dim % 8 == 0 && ((reinterpret_cast<size_t>(x) | reinterpret_cast<size_t>(w)) & 15) == 0;
    const size_t r = blockIdx.x;
    const WithCodes out{codes + r * dim, scales + r * (dim / 32)};
    norm_row(RowSrc{x + r * dim, vec}, w, y + r * dim, dim, eps, wide, out);
}

// rms_norm_seq of hc_pre's rows in one launch (the attention and FFN inputs): x [rows, hc, dim] bf16, mix [rows, (2+hc)·hc] f32 (pre first).
extern "C" __global__ void hc_pre_norm(const bf16_bits* __restrict__ x, const float* __restrict__ mix,
                                       const bf16_bits* __restrict__ w, bf16_bits* __restrict__ y, int hc, int dim,
                                       float eps, int wide) {
    const PreSrc src{x + (size_t)blockIdx.x * hc * dim, mix + (size_t)blockIdx.x * (2 + hc) * hc, hc, dim};
    norm_row(src, w, y + (size_t)blockIdx.x * dim, dim, eps, wide, Bf16Only{});
}

// hc_pre_norm that also writes its output's codes and scales, as rms_norm_quant.
extern "C" __global__ void hc_pre_norm_quant(const bf16_bits* __restrict__ x, const float* __restrict__ mix,
                                             const bf16_bits* __restrict__ w, bf16_bits* __restrict__ y,
                                             u8* __restrict__ codes, float* __restrict__ scales, int hc, int dim,
                                             float eps, int wide) {
    const size_t r = blockIdx.x;
    const PreSrc src{x + r * hc * dim, mix + r * (2 + hc) * hc, hc, dim};
    norm_row(src, w, y + r * dim, dim, eps, wide, WithCodes{codes + r * dim, scales + r * (dim / 32)});
}
