// Dense x·Wᵀ of the dsv41 forward in the CPU's exact summation orders, so GPU and CPU agree bit for bit.

// Threads per block; a thread owns one accumulator lane of one output for up to DENSE_ROWS rows.
#define DENSE_THREADS 256
#define DENSE_ROWS 8
// Steps of a lane's sum whose weights are in flight at once.
#define DENSE_AHEAD 8

__device__ __forceinline__ float widen(float v) { return v; }

__device__ __forceinline__ void store(float* y, float v) { *y = v; }
__device__ __forceinline__ void store(bf16_bits* y, float v) { *y = bf16_rne(v); }

// lanes = 8 is tf_core's matmul_nt (element p < k − k%8 to lane p%8 in order, the tail to lanes 0.., then ((v0+v4)+(v2+v6))+((v1+v5)+(v3+v7))); lanes = 1 is a plain sequential sum (grouped wo_a); every product and sum rounds alone (--fmad=false).
template <typename X, typename W, typename Y>
__device__ __forceinline__ void dense_body(const X* __restrict__ x, const W* __restrict__ w, Y* __restrict__ y, int rows,
                                           int n, int k, int groups, int lanes) {
    const int per_group = n / groups;
    const int lane = threadIdx.x % lanes;
    const long long o = ((long long)blockIdx.x * DENSE_THREADS + threadIdx.x) / lanes;
    const int r0 = blockIdx.y * DENSE_ROWS;
    const int nr = min(DENSE_ROWS, rows - r0);
    const bool live = o < n;
    const int g = live ? (int)(o / per_group) : 0;
    const long long ldx = (long long)groups * k;
    const W* wr = w + (live ? o : 0) * (long long)k;
    const X* xt = x + (long long)r0 * ldx + (long long)g * k;
    float acc[DENSE_ROWS];
#pragma unroll
    for (int r = 0; r < DENSE_ROWS; ++r) acc[r] = 0.0f;
    const int full = k - k % lanes;
    if (live) {
        int p = lane;
        // DENSE_AHEAD steps' weights are loaded before their adds, so memory latency overlaps; the adds keep their order.
        for (; p + (DENSE_AHEAD - 1) * lanes < full; p += DENSE_AHEAD * lanes) {
            float wv[DENSE_AHEAD];
#pragma unroll
            for (int u = 0; u < DENSE_AHEAD; ++u) wv[u] = widen(__ldg(wr + p + u * lanes));
#pragma unroll
            for (int u = 0; u < DENSE_AHEAD; ++u) {
#pragma unroll
                for (int r = 0; r < DENSE_ROWS; ++r)
                    if (r < nr) acc[r] = __fadd_rn(acc[r], __fmul_rn(widen(__ldg(xt + r * ldx + p + u * lanes)), wv[u]));
            }
        }
        for (; p < full; p += lanes) {
            const float wv = widen(__ldg(wr + p));
#pragma unroll
            for (int r = 0; r < DENSE_ROWS; ++r)
                if (r < nr) acc[r] = __fadd_rn(acc[r], __fmul_rn(widen(__ldg(xt + r * ldx + p)), wv));
        }
        if (lane < k - full) {
            const int p = full + lane;
            const float wv = widen(__ldg(wr + p));
#pragma unroll
            for (int r = 0; r < DENSE_ROWS; ++r)
                if (r < nr) acc[r] = __fadd_rn(acc[r], __fmul_rn(widen(__ldg(xt + r * ldx + p)), wv));
        }
    }
    if (lanes == 8) {
        // xor 4, 2, 1 builds exactly the CPU's pairing in lane 0 (IEEE addition commutes bit for bit).
#pragma unroll
        for (int r = 0; r < DENSE_ROWS; ++r)
            for (int m = 4; m > 0; m >>= 1) acc[r] = __fadd_rn(acc[r], __shfl_xor_sync(0xffffffffu, acc[r], m));
    }
    if (live && lane == 0)
        for (int r = 0; r < nr; ++r) store(y + (long long)(r0 + r) * n + o, acc[r]);
}

extern "C" __global__ void __launch_bounds__(DENSE_THREADS)
dense_xb_wb_yb(const bf16_bits* x, const bf16_bits* w, bf16_bits* y, int rows, int n, int k, int groups, int lanes) {
    dense_body(x, w, y, rows, n, k, groups, lanes);
}
extern "C" __global__ void __launch_bounds__(DENSE_THREADS)
dense_xb_wb_yf(const bf16_bits* x, const bf16_bits* w, float* y, int rows, int n, int k, int groups, int lanes) {
    dense_body(x, w, y, rows, n, k, groups, lanes);
}
extern "C" __global__ void __launch_bounds__(DENSE_THREADS)
dense_xb_wf_yb(const bf16_bits* x, const float* w, bf16_bits* y, int rows, int n, int k, int groups, int lanes) {
    dense_body(x, w, y, rows, n, k, groups, lanes);
}
extern "C" __global__ void __launch_bounds__(DENSE_THREADS)
dense_xb_wf_yf(const bf16_bits* x, const float* w, float* y, int rows, int n, int k, int groups, int lanes) {
    dense_body(x, w, y, rows, n, k, groups, lanes);
}
extern "C" __global__ void __launch_bounds__(DENSE_THREADS)
dense_xf_wb_yb(const float* x, const bf16_bits* w, bf16_bits* y, int rows, int n, int k, int groups, int lanes) {
    dense_body(x, w, y, rows, n, k, groups, lanes);
}
extern "C" __global__ void __launch_bounds__(DENSE_THREADS)
dense_xf_wb_yf(const float* x, const bf16_bits* w, float* y, int rows, int n, int k, int groups, int lanes) {
    dense_body(x, w, y, rows, n, k, groups, lanes);
}
extern "C" __global__ void __launch_bounds__(DENSE_THREADS)
dense_xf_wf_yb(const float* x, const float* w, bf16_bits* y, int rows, int n, int k, int groups, int lanes) {
    dense_body(x, w, y, rows, n, k, groups, lanes);
}
extern "C" __global__ void __launch_bounds__(DENSE_THREADS)
dense_xf_wf_yf(const float* x, const float* w, float* y, int rows, int n, int k, int groups, int lanes) {
    dense_body(x, w, y, rows, n, k, groups, lanes);
}
