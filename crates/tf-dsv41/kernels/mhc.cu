// Manifold-constrained hyper-connections (dsv41 §8) as crates/tf-dsv41/src/mhc.rs computes them: mixes, collapse, expand.

// hc is 4 in every dsv41 model; local arrays need a bound, the launcher checks it.
#define MHC_MAX_HC 8

// The CPU's sigmoid: 1 / (1 + exp(-x)).
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + exp_rn(-x)); }

// The CPU's column normalization: each column over its sum (in row order) plus eps.
__device__ void normalize_cols(float* c, int hc, float eps) {
    for (int j = 0; j < hc; ++j) {
        float s = -0.0f;
        for (int i = 0; i < hc; ++i) s += c[i * hc + j];
        s = s + eps;
        for (int i = 0; i < hc; ++i) c[i * hc + j] /= s;
    }
}

// One thread per row: ss[r] = Σ x² in index order, where dense could not sum it alongside the dots.
extern "C" __global__ void hc_squares(float* __restrict__ ss, const unsigned short* __restrict__ x, int rows, int width) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const unsigned short* xr = x + (size_t)r * width;
    float s = -0.0f;
    for (int i = 0; i < width; ++i) s += widen(xr[i]) * widen(xr[i]);
    ss[r] = s;
}

// One thread per row, in place over that row's raw dots: HcSite::mixes' scaling by 1/sqrt(mean(x²)+norm_eps) (ss: the sequential sum of squares dense wrote), then split_sinkhorn's f32 operations in its order (f32 sums start at -0.0 like Rust's Sum).
extern "C" __global__ void hc_sinkhorn(float* __restrict__ mix, const float* __restrict__ ss,
                                       const float* __restrict__ scale, const float* __restrict__ base, int rows, int hc,
                                       int width, int iters, float norm_eps, float eps) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float* m = mix + (size_t)r * (2 + hc) * hc;
    const float rsqrt = 1.0f / sqrtf(ss[r] / (float)width + norm_eps);
    for (int k = 0; k < (2 + hc) * hc; ++k) m[k] = m[k] * rsqrt;
    float pre[MHC_MAX_HC], post[MHC_MAX_HC], c[MHC_MAX_HC * MHC_MAX_HC];
    for (int i = 0; i < hc; ++i) pre[i] = sigmoid(m[i] * scale[0] + base[i]) + eps;
    for (int i = 0; i < hc; ++i) post[i] = 2.0f * sigmoid(m[hc + i] * scale[1] + base[hc + i]);
    for (int k = 0; k < hc * hc; ++k) c[k] = m[2 * hc + k] * scale[2] + base[2 * hc + k];
    for (int i = 0; i < hc; ++i) {
        float* row = c + i * hc;
        float mx = __uint_as_float(0xff800000u);
        for (int j = 0; j < hc; ++j) mx = fmaxf(mx, row[j]);
        for (int j = 0; j < hc; ++j) row[j] = exp_rn(row[j] - mx);
        float s = -0.0f;
        for (int j = 0; j < hc; ++j) s += row[j];
        for (int j = 0; j < hc; ++j) row[j] = row[j] / s + eps;
    }
    normalize_cols(c, hc, eps);
    for (int it = 1; it < iters; ++it) {
        for (int i = 0; i < hc; ++i) {
            float* row = c + i * hc;
            float s = -0.0f;
            for (int j = 0; j < hc; ++j) s += row[j];
            s = s + eps;
            for (int j = 0; j < hc; ++j) row[j] /= s;
        }
        normalize_cols(c, hc, eps);
    }
    for (int i = 0; i < hc; ++i) m[i] = pre[i];
    for (int i = 0; i < hc; ++i) m[hc + i] = post[i];
    for (int k = 0; k < hc * hc; ++k) m[2 * hc + k] = c[k];
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
