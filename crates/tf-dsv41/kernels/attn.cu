// Sparse single-KV-head attention with a sink, in the CPU reference's order of operations (attn/sparse.rs `attend`).

// Keys per online-softmax block; the partition fixes where probabilities are rounded to bf16.
#define BLOCK 64
#define ROW_MASK 0x0FFFFFFF

// A key id's row, or null when the id is empty, names an unknown source, or a row past that source's end.
__device__ __forceinline__ const unsigned short* resolve(int id, const unsigned short* chunk, int chunk_rows,
                                                         const unsigned short* ring, int ring_rows,
                                                         const unsigned short* latents, int latent_rows, int d) {
    if (id < 0) return nullptr;
    const int source = id >> 28;
    const int row = id & ROW_MASK;
    if (source == 0 && row < chunk_rows) return chunk + (size_t)row * d;
    if (source == 1 && row < ring_rows) return ring + (size_t)row * d;
    if (source == 2 && row < latent_rows) return latents + (size_t)row * d;
    return nullptr;
}

// The CPU's `q·k` as one sequential f32 sum from -0.0 (Rust's float `sum`), product and add rounded apart.
__device__ float dot_seq(const float* __restrict__ q, const unsigned short* __restrict__ k, int d) {
    float acc = -0.0f;
    if ((((size_t)k) & 15) == 0 && (d & 7) == 0) {
        const uint4* k4 = reinterpret_cast<const uint4*>(k);
        const int n = d / 8;
        uint4 v = k4[0];
        // The next 16 bytes load while these eight are added, so the chain does not wait on memory.
#pragma unroll 4
        for (int c = 0; c < n; ++c) {
            const uint4 next = c + 1 < n ? k4[c + 1] : v;
            const unsigned int w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                acc += q[8 * c + 2 * i] * widen((unsigned short)(w[i] & 0xFFFF));
                acc += q[8 * c + 2 * i + 1] * widen((unsigned short)(w[i] >> 16));
            }
            v = next;
        }
    } else {
        for (int c = 0; c < d; ++c) acc += q[c] * widen(k[c]);
    }
    return acc;
}

// Grid (rows, heads); a row's key list is window[r, :] then sel[r, :], as the CPU forward builds it. Dynamic shared: q f32 [d], per key its row pointer and score (later probability), per block its max and rescale.
extern "C" __global__ void sparse_attn(const unsigned short* __restrict__ q, const unsigned short* __restrict__ chunk,
                                       const unsigned short* __restrict__ ring,
                                       const unsigned short* __restrict__ latents, const int* __restrict__ window,
                                       const int* __restrict__ sel, const float* __restrict__ sink,
                                       unsigned short* __restrict__ out, int rows, int heads, int d, int w, int s,
                                       int latent_rows, float scale) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int r = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, nt = blockDim.x;
    const int L = w + s;
    const int nblk = (L + BLOCK - 1) / BLOCK;
    const unsigned short** keys = reinterpret_cast<const unsigned short**>(smem);
    float* qf = reinterpret_cast<float*>(smem + sizeof(void*) * (size_t)L);
    float* p = qf + d;
    float* run_max = p + L;
    float* rescale = run_max + nblk;
    __shared__ float sum_exp;

    const unsigned short* qrow = q + ((size_t)r * heads + h) * d;
    for (int c = tid; c < d; c += nt) qf[c] = widen(qrow[c]);
    for (int j = tid; j < L; j += nt) {
        const int id = j < w ? window[(size_t)r * w + j] : sel[(size_t)r * s + (j - w)];
        keys[j] = resolve(id, chunk, rows, ring, w, latents, latent_rows, d);
    }
    __syncthreads();

    // Scores of every listed key; an empty slot scores -inf as the CPU's None does.
    for (int j = tid; j < L; j += nt) p[j] = keys[j] ? dot_seq(qf, keys[j], d) * scale : -F32_INF;
    __syncthreads();

    // Block maxima in parallel; max is exact, so folding them after equals the CPU's fold from the previous max.
    for (int b = tid; b < nblk; b += nt) {
        float m = -F32_INF;
        for (int j = b * BLOCK; j < min(L, (b + 1) * BLOCK); ++j) m = fmaxf(m, p[j]);
        run_max[b] = m;
    }
    __syncthreads();
    if (tid == 0) {
        float prev = -1e30f;
        for (int b = 0; b < nblk; ++b) {
            const float m = fmaxf(prev, run_max[b]);
            rescale[b] = prev - m;
            run_max[b] = m;
            prev = m;
        }
    }
    __syncthreads();
    for (int b = tid; b < nblk; b += nt) rescale[b] = exp_rn(rescale[b]);
    for (int j = tid; j < L; j += nt) p[j] = exp_rn(p[j] - run_max[j / BLOCK]);
    __syncthreads();

    // The normalizer in the CPU's order: psum per block sequentially, then the rescaled chain, then the sink.
    if (tid == 0) {
        float total = 0.0f;
        for (int b = 0; b < nblk; ++b) {
            float psum = 0.0f;
            for (int j = b * BLOCK; j < min(L, (b + 1) * BLOCK); ++j) psum += p[j];
            total = total * rescale[b] + psum;
        }
        const float m = nblk > 0 ? run_max[nblk - 1] : -1e30f;
        sum_exp = total + exp_rn(sink[h] - m);
    }
    __syncthreads();
    // Probabilities enter p·v rounded to bf16; this pass runs after the psum above has read them unrounded.
    for (int j = tid; j < L; j += nt) p[j] = widen(bf16_rne(p[j]));
    __syncthreads();

    unsigned short* orow = out + ((size_t)r * heads + h) * d;
    for (int c = tid; c < d; c += nt) {
        float acc = 0.0f;
        for (int b = 0; b < nblk; ++b) {
            float pv = 0.0f;
            const int j1 = min(L, (b + 1) * BLOCK);
            int j = b * BLOCK;
            // Eight keys' values load before their adds (in key order), so the chain waits on memory once per eight.
            for (; j + 8 <= j1; j += 8) {
                float kv[8];
#pragma unroll
                for (int u = 0; u < 8; ++u) kv[u] = keys[j + u] ? widen(keys[j + u][c]) : 0.0f;
#pragma unroll
                for (int u = 0; u < 8; ++u)
                    if (keys[j + u]) pv += p[j + u] * kv[u];
            }
            for (; j < j1; ++j)
                if (keys[j]) pv += p[j] * widen(keys[j][c]);
            acc = acc * rescale[b] + pv;
        }
        orow[c] = bf16_rne(acc / sum_exp);
    }
}
