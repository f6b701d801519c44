// Manifold-constrained hyper-connections (dsv41 §8) as crates/tf-dsv41/src/mhc.rs computes them: mixes, collapse, expand.

// hc is 4 in every dsv41 model; local arrays need a bound, the launcher checks it.
#define MHC_MAX_HC 8

// The CPU's sigmoid: 1 / (1 + exp(-x)).
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + exp_rn(-x)); }

// A warp per row: ss[r] = Σ x² in the CPU's SumOrder (index order on lane 0, or wide: 32 lanes and their fold), where dense could not sum it.
extern "C" __global__ void hc_squares(float* __restrict__ ss, const unsigned short* __restrict__ x, int rows, int width,
                                      int wide) {
    const int r = blockIdx.x, lane = threadIdx.x;
    if (r >= rows) return;
    const unsigned short* xr = x + (size_t)r * width;
    float s = -0.0f;
    if (wide) {
        for (int i = lane; i < width; i += 32) s = __fadd_rn(s, __fmul_rn(widen(xr[i]), widen(xr[i])));
        s = lanes32_fold(s);
    } else if (lane == 0) {
        for (int i = 0; i < width; ++i) s += widen(xr[i]) * widen(xr[i]);
    }
    if (lane == 0) ss[r] = s;
}

// Threads of a hc_dots block, and the columns it stages per pass (16 a thread).
#define HC_DOT_THREADS 256
#define HC_DOT_COLS (HC_DOT_THREADS * 16)

// LANES lanes of warp 0 add a staged pass in their order: lane t takes elements t, t + LANES, … of this pass.
template <int LANES>
__device__ __forceinline__ float hc_chain(const float* __restrict__ p, int len, float acc) {
    const int t = threadIdx.x;
    if (len == HC_DOT_COLS) {
        // A full pass: each load is issued 16 adds before its value is needed, so the adds run back to back.
        constexpr int N = HC_DOT_COLS / LANES, A = 16;
        static_assert(N % A == 0, "a full pass is whole groups of 16 loads");
        float buf[A];
#pragma unroll
        for (int j = 0; j < A; ++j) buf[j] = p[t + j * LANES];
        for (int q = 0; q < N - A; q += A) {
#pragma unroll
            for (int j = 0; j < A; ++j) {
                const float a = buf[j];
                buf[j] = p[t + (q + A + j) * LANES];
                acc = __fadd_rn(acc, a);
            }
        }
#pragma unroll
        for (int j = 0; j < A; ++j) acc = __fadd_rn(acc, buf[j]);
    } else {
        for (int j = t; j < len; j += LANES) acc = __fadd_rn(acc, p[j]);
    }
    return acc;
}

// Four weights as f32: one 16-byte load of f32, or one 8-byte load of bf16 widened.
__device__ __forceinline__ float4 load_w4(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }
__device__ __forceinline__ float4 load_w4(const bf16_bits* p) {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
    return make_float4(widen((bf16_bits)(v.x & 0xffffu)), widen((bf16_bits)(v.x >> 16)), widen((bf16_bits)(v.y & 0xffffu)),
                       widen((bf16_bits)(v.y >> 16)));
}

// Block (o < n, r) writes out[r, o] = Σ x[r, i]·w[o, i] in matmul_nt's 8-lane order (element i to lane i % 8, then xor 4, 2, 1); block (n, r) ss[r] = Σ x[r, i]² in SumOrder::Lanes32. Every thread forms a pass's products into shared memory; warp 0 adds them while the next pass loads, so each output's dependent adds run on their own SM.
template <class W>
__device__ __forceinline__ void row_dots(const unsigned short* __restrict__ x, const W* __restrict__ func,
                                         float* __restrict__ mix, float* __restrict__ ss, int n, int width) {
    __shared__ __align__(16) float prod[2][HC_DOT_COLS];
    const int o = blockIdx.x, r = blockIdx.y, t = threadIdx.x;
    const bool squares = o == n;
    const unsigned short* xr = x + (size_t)r * width;
    const W* wr = func + (size_t)(squares ? 0 : o) * width;
    const int passes = (width + HC_DOT_COLS - 1) / HC_DOT_COLS;
    float4 wv[4];
    uint2 xv[4];
    // Thread t owns columns 4·(t + HC_DOT_THREADS·g) .. +4 of a pass, g < 4: coalesced 16- and 8-byte loads.
    auto fetch = [&](int pass) {
#pragma unroll
        for (int g = 0; g < 4; ++g) {
            const int c = pass * HC_DOT_COLS + 4 * (t + HC_DOT_THREADS * g);
            const bool in = c < width;
            xv[g] = in ? __ldg(reinterpret_cast<const uint2*>(xr + c)) : make_uint2(0u, 0u);
            wv[g] = in && !squares ? load_w4(wr + c) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    };
    auto stage = [&](float* dst) {
#pragma unroll
        for (int g = 0; g < 4; ++g) {
            const float a[4] = {widen((bf16_bits)(xv[g].x & 0xffffu)), widen((bf16_bits)(xv[g].x >> 16)),
                                widen((bf16_bits)(xv[g].y & 0xffffu)), widen((bf16_bits)(xv[g].y >> 16))};
            const float b[4] = {wv[g].x, wv[g].y, wv[g].z, wv[g].w};
            float4 q;
            q.x = __fmul_rn(a[0], squares ? a[0] : b[0]);
            q.y = __fmul_rn(a[1], squares ? a[1] : b[1]);
            q.z = __fmul_rn(a[2], squares ? a[2] : b[2]);
            q.w = __fmul_rn(a[3], squares ? a[3] : b[3]);
            reinterpret_cast<float4*>(dst)[t + HC_DOT_THREADS * g] = q;
        }
    };
    float acc = squares ? -0.0f : 0.0f;
    fetch(0);
    stage(prod[0]);
    __syncthreads();
    for (int p = 0; p < passes; ++p) {
        if (p + 1 < passes) fetch(p + 1);
        const int len = min(HC_DOT_COLS, width - p * HC_DOT_COLS);
        if (squares && t < 32) acc = hc_chain<32>(prod[p & 1], len, acc);
        else if (!squares && t < 8) acc = hc_chain<8>(prod[p & 1], len, acc);
        if (p + 1 < passes) stage(prod[(p + 1) & 1]);
        __syncthreads();
    }
    if (t >= 32) return;
    if (squares) {
        acc = lanes32_fold(acc);
        if (t == 0) ss[r] = acc;
    } else {
        for (int m = 4; m > 0; m >>= 1) acc = __fadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, m));
        if (t == 0) mix[(size_t)r * n + o] = acc;
    }
}

// Grid (n + 1, rows), width % 4 == 0, x 8- and func 16-byte aligned: row_dots of the mHC mixes (f32 func) and each row's x².
extern "C" __global__ void __launch_bounds__(HC_DOT_THREADS)
hc_dots(const unsigned short* __restrict__ x, const float* __restrict__ func, float* __restrict__ mix,
        float* __restrict__ ss, int n, int width) {
    row_dots(x, func, mix, ss, n, width);
}

// Grid (n, rows), width % 4 == 0, x and w 8-byte aligned: y[r, o] = Σ x[r, i]·w[o, i] for bf16 w, dense's Lanes8 sums (the router).
extern "C" __global__ void __launch_bounds__(HC_DOT_THREADS)
dots_bf16(const unsigned short* __restrict__ x, const bf16_bits* __restrict__ w, float* __restrict__ y, int n, int width) {
    row_dots(x, w, y, nullptr, n, width);
}

// Threads of a hc_sinkhorn block: one per comb element (hc ≤ MHC_MAX_HC).
#define SINKHORN_THREADS (MHC_MAX_HC * MHC_MAX_HC)

// Replaces c[t] by v once every thread has read c (the CPU updates a row or column only after summing it).
__device__ __forceinline__ void publish(float* c, int t, int n, float v) {
    __syncthreads();
    if (t < n) c[t] = v;
    __syncthreads();
}

// Σ of hc entries of c from `at`, `step` apart, in order from -0.0 (a comb row: step 1; a column: step hc).
__device__ __forceinline__ float line_sum(const float* c, int at, int step, int hc) {
    float s = -0.0f;
    for (int q = 0; q < hc; ++q) s += c[at + q * step];
    return s;
}

// Comb lines of a block, one thread per element: put publishes v once every thread has read the last values (the CPU updates a row or column only after summing it).
struct BlockLines {
    float* c;
    int t, n;
    __device__ void put(float v) { publish(c, t, n, v); }
    // Threads past the comb read nothing (their line could pass c's end); their results are never used.
    __device__ float max(float, int at, int hc) const {
        float mx = __uint_as_float(0xff800000u);
        for (int q = 0; t < n && q < hc; ++q) mx = fmaxf(mx, c[at + q]);
        return mx;
    }
    __device__ float sum(float, int at, int step, int hc) const { return t < n ? line_sum(c, at, step, hc) : 1.0f; }
};

// Comb lines of a warp, lane per element: shuffles read the others' registers, so nothing to publish.
struct WarpLines {
    __device__ void put(float) {}
    __device__ float max(float v, int at, int hc) const {
        float mx = __uint_as_float(0xff800000u);
        for (int q = 0; q < hc; ++q) mx = fmaxf(mx, __shfl_sync(0xffffffffu, v, at + q));
        return mx;
    }
    // Σ of the hc entries lane `at`, `at + step`, … hold, in order from -0.0: line_sum over the warp's registers.
    __device__ float sum(float v, int at, int step, int hc) const {
        float s = -0.0f;
        for (int q = 0; q < hc; ++q) s += __shfl_sync(0xffffffffu, v, at + q * step);
        return s;
    }
};

// Row r in place over its raw dots: HcSite::mixes' scaling by 1/sqrt(mean(x²)+norm_eps) (ss: the sequential sum of squares), then split_sinkhorn with thread t = i·hc+j owning comb[i][j]; each sum in the CPU's order (from -0.0, like Rust's Sum), so every element is bit-identical.
template <class Lines>
__device__ __forceinline__ void sinkhorn_row(Lines lines, float* __restrict__ mix, const float* __restrict__ ss,
                                             const float* __restrict__ scale, const float* __restrict__ base, int r, int t,
                                             int hc, int width, int iters, float norm_eps, float eps) {
    const int n = hc * hc, i = t / hc, j = t % hc;
    float* m = mix + (size_t)r * (2 + hc) * hc;
    const float rsqrt = 1.0f / sqrtf(ss[r] / (float)width + norm_eps);
    float pre = 0.0f, post = 0.0f;
    if (t < hc) {
        pre = sigmoid(m[t] * rsqrt * scale[0] + base[t]) + eps;
        post = 2.0f * sigmoid(m[hc + t] * rsqrt * scale[1] + base[hc + t]);
    }
    float v = t < n ? m[2 * hc + t] * rsqrt * scale[2] + base[2 * hc + t] : 0.0f;
    lines.put(v);
    const float mx = lines.max(v, i * hc, hc);
    if (t < n) v = exp_rn(v - mx);
    lines.put(v);
    const float first = lines.sum(v, i * hc, 1, hc);
    if (t < n) v = v / first + eps;
    for (int it = 0; it < max(iters, 1); ++it) {
        // Columns after every row pass; from the second pass on, rows first (split_sinkhorn's loop).
        if (it > 0) {
            lines.put(v);
            const float row = lines.sum(v, i * hc, 1, hc);
            if (t < n) v = v / (row + eps);
        }
        lines.put(v);
        const float col = lines.sum(v, j, hc, hc);
        if (t < n) v = v / (col + eps);
    }
    if (t < hc) {
        m[t] = pre;
        m[hc + t] = post;
    }
    if (t < n) m[2 * hc + t] = v;
}

// One block per row, a thread per comb element (sinkhorn_row).
extern "C" __global__ void __launch_bounds__(SINKHORN_THREADS)
hc_sinkhorn(float* __restrict__ mix, const float* __restrict__ ss, const float* __restrict__ scale,
            const float* __restrict__ base, int rows, int hc, int width, int iters, float norm_eps, float eps) {
    __shared__ float c[MHC_MAX_HC * MHC_MAX_HC];
    if ((int)blockIdx.x >= rows) return;
    sinkhorn_row(BlockLines{c, (int)threadIdx.x, hc * hc}, mix, ss, scale, base, blockIdx.x, threadIdx.x, hc, width, iters,
                 norm_eps, eps);
}

// hc_sinkhorn for hc² ≤ 32: a warp per row, lane i·hc+j owns comb[i][j] and reads its row and column by shuffles, no block barriers.
extern "C" __global__ void __launch_bounds__(32)
hc_sinkhorn_warp(float* __restrict__ mix, const float* __restrict__ ss, const float* __restrict__ scale,
                 const float* __restrict__ base, int rows, int hc, int width, int iters, float norm_eps, float eps) {
    if ((int)blockIdx.x >= rows) return;
    sinkhorn_row(WarpLines{}, mix, ss, scale, base, blockIdx.x, threadIdx.x, hc, width, iters, norm_eps, eps);
}

// hc_sinkhorn_warp at hc 4 (every dsv41 config), hc fixed at compile time: each line's four shuffles unroll and issue together.
extern "C" __global__ void __launch_bounds__(32)
hc_sinkhorn_warp4(float* __restrict__ mix, const float* __restrict__ ss, const float* __restrict__ scale,
                  const float* __restrict__ base, int rows, int hc, int width, int iters, float norm_eps, float eps) {
    if ((int)blockIdx.x >= rows || hc != 4) return;
    sinkhorn_row(WarpLines{}, mix, ss, scale, base, blockIdx.x, threadIdx.x, 4, width, iters, norm_eps, eps);
}

// Grid (rows, ⌈dim/threads⌉): y[r, c] = bf16(Σ_i pre_i · x[r, i, c]), summed in stream order as the CPU does.
extern "C" __global__ void hc_pre(const unsigned short* __restrict__ x, const float* __restrict__ mix,
                                  unsigned short* __restrict__ y, int hc, int dim) {
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= dim) return;
    const float* pre = mix + (size_t)blockIdx.x * (2 + hc) * hc;
    const unsigned short* xr = x + (size_t)blockIdx.x * hc * dim + c;
    float s = -0.0f;
    for (int i = 0; i < hc; ++i) s += pre[i] * widen(xr[(size_t)i * dim]);
    y[(size_t)blockIdx.x * dim + c] = bf16_rne(s);
}

// Grid (rows, ⌈dim/threads⌉): out[r · stride + c] = bf16(Σ_i x[r, i, c] / hc), summed in stream order from -0.0 (Block::mean_of_streams).
extern "C" __global__ void hc_mean(const unsigned short* __restrict__ x, unsigned short* __restrict__ out, int hc, int dim,
                                   int stride) {
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= dim) return;
    const unsigned short* xr = x + (size_t)blockIdx.x * hc * dim + c;
    float s = -0.0f;
    for (int i = 0; i < hc; ++i) s = __fadd_rn(s, widen(xr[(size_t)i * dim]));
    out[(size_t)blockIdx.x * stride + c] = bf16_rne(__fdiv_rn(s, (float)hc));
}

// Grid (rows, ⌈dim/threads⌉): out[r, j, c] = bf16(post_j · f[r, c] + Σ_i comb[i][j] · x[r, i, c]), sums in stream order.
extern "C" __global__ void hc_post(const unsigned short* __restrict__ f, const unsigned short* __restrict__ x,
                                   const float* __restrict__ mix, unsigned short* __restrict__ out, int hc, int dim) {
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= dim) return;
    const float* post = mix + (size_t)blockIdx.x * (2 + hc) * hc + hc;
    const float* comb = post + hc;
    const size_t at = (size_t)blockIdx.x * hc * dim + c;
    float xv[MHC_MAX_HC];
    for (int i = 0; i < hc; ++i) xv[i] = widen(x[at + (size_t)i * dim]);
    const float y = widen(f[(size_t)blockIdx.x * dim + c]);
    for (int j = 0; j < hc; ++j) {
        float mixed = -0.0f;
        for (int i = 0; i < hc; ++i) mixed += comb[i * hc + j] * xv[i];
        out[at + (size_t)j * dim] = bf16_rne(post[j] * y + mixed);
    }
}
