// The EXL3 prompt path (docs/exl3.md § prompt GEMM): W = diag(suh)·H·Q·H·diag(svh) rebuilt in fp16, then one dense GEMM on the rows as they are.

// Shared memory of exl3_recon: one 128×128 block of f32, rows padded to 129 so a warp's column reads hit 32 banks.
#define RECON_LD (HAD + 1)

namespace {
// The unnormalized Hadamard levels 1..N/2 on N values in registers: fwht_blocks' pairs, in its order.
template <int N>
__device__ __forceinline__ void butterflies(float (&v)[N]) {
#pragma unroll
    for (int h = 1; h < N; h *= 2)
#pragma unroll
        for (int e = 0; e < N; ++e)
            if (!(e & h)) {
                const float a = v[e], b = v[e + h];
                v[e] = __fadd_rn(a, b), v[e + h] = __fsub_rn(a, b);
            }
}

// fwht_blocks on blk's 128 lines (line l, element e at l·LINE + e·STEP): levels 1-4 on 8 adjacent, 8-64 on 16 strided, × 1/√128, the CPU's bits.
template <int STEP, int LINE>
__device__ __forceinline__ void recon_pass(float* blk) {
    for (int task = threadIdx.x; task < HAD * 16; task += blockDim.x) {
        float* v0 = blk + (task % HAD) * LINE + (task / HAD) * 8 * STEP;
        float v[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] = v0[e * STEP];
        butterflies(v);
#pragma unroll
        for (int e = 0; e < 8; ++e) v0[e * STEP] = v[e];
    }
    __syncthreads();
    const float norm = 1.0f / sqrtf((float)HAD);
    for (int task = threadIdx.x; task < HAD * 8; task += blockDim.x) {
        float* v0 = blk + (task % HAD) * LINE + (task / HAD) * STEP;
        float v[16];
#pragma unroll
        for (int e = 0; e < 16; ++e) v[e] = v0[e * 8 * STEP];
        butterflies(v);
#pragma unroll
        for (int e = 0; e < 16; ++e) v0[e * 8 * STEP] = __fmul_rn(v[e], norm);
    }
    __syncthreads();
}
}  // namespace

// Grid (in_p/128, out_p/128, weights), 256 threads, RECON_LD·128 f32 dynamic smem: w[z] fp16 [in_p][out_p] of table[ids[z]] (ids null: z).
extern "C" __global__ void __launch_bounds__(256) exl3_recon(const Exl3Dev* __restrict__ table, const int* __restrict__ ids, int experts,
                                                             u16* __restrict__ w, int in_p, int out_p) {
    extern __shared__ float blk[];
    const int bi = blockIdx.x, bj = blockIdx.y, lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
    const Exl3Dev* wt = job_row(table, ids, experts, blockIdx.z);
    if (!wt || wt->k != EXL3_K) return;
    u16* wz = w + (size_t)blockIdx.z * in_p * out_p;
    const Lane ln = lane_window(lane);
    // Each warp decodes one row of eight tiles into the block, lane l its positions 8l..8l+7.
    for (int tc = 0; tc < 8; ++tc) {
        u32 b[4];
        lane_frag(record(wt->trellis, bi * 8 + wp, bj * 8 + tc, out_p / 16, EXL3_K), ln, b);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int cell = tile_cell(8 * lane + j);
            blk[(wp * 16 + cell / 16) * RECON_LD + tc * 16 + cell % 16] = f16((u16)(b[j / 2] >> (16 * (j & 1))));
        }
    }
    __syncthreads();
    // H on the input side down each column, then on the output side along each row: fwht_blocks' levels in order.
    recon_pass<RECON_LD, 1>(blk);
    recon_pass<1, RECON_LD>(blk);
    // × suh·svh as Exl3Weight::weight orders it, rounded once to fp16; a warp writes 32 value pairs of a row.
    for (int idx = threadIdx.x; idx < HAD * HAD / 2; idx += blockDim.x) {
        const int i = idx / (HAD / 2), c = 2 * (idx % (HAD / 2));
        const float su = f16(wt->suh[bi * HAD + i]);
        const u32 lo = to_f16(__fmul_rn(blk[i * RECON_LD + c], __fmul_rn(su, f16(wt->svh[bj * HAD + c]))));
        const u32 hi = to_f16(__fmul_rn(blk[i * RECON_LD + c + 1], __fmul_rn(su, f16(wt->svh[bj * HAD + c + 1]))));
        *reinterpret_cast<u32*>(wz + (size_t)(bi * HAD + i) * out_p + bj * HAD + c) = lo | hi << 16;
    }
}

// Grid (rows), 256 threads: bf16 rows of k values to fp16 rows of k_p (zeros past k); exact while |x| < 65504.
extern "C" __global__ void exl3_rows_in_h(const u16* __restrict__ x, u16* __restrict__ xh, int k, int k_p) {
    const size_t r = blockIdx.x;
    for (int i = threadIdx.x; i < k_p; i += blockDim.x) xh[r * k_p + i] = i < k ? to_f16(__uint_as_float((u32)x[r * k + i] << 16)) : 0;
}

// Grid (rows), 256 threads: the first n of each f32 row of n_p, plus bias (may be null).
extern "C" __global__ void exl3_rows_out_bias(const float* __restrict__ y, const float* __restrict__ bias, float* __restrict__ out, int n,
                                              int n_p) {
    const size_t r = blockIdx.x;
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[r * n + i] = bias ? __fadd_rn(y[r * n_p + i], bias[i]) : y[r * n_p + i];
}

// Grid (cnt), 256 threads: row i of xh (fp16, k_p wide, zeros past k) = bf16 row src_row(pairs[i]) of x, where src_row(p) = topk ? p / topk : p.
extern "C" __global__ void exl3_gather_h(const u16* __restrict__ x, const int* __restrict__ pairs, int topk, u16* __restrict__ xh, int k,
                                         int k_p) {
    const int p = pairs[blockIdx.x];
    const size_t src = topk ? p / topk : p, i = blockIdx.x;
    for (int c = threadIdx.x; c < k_p; c += blockDim.x) xh[i * k_p + c] = c < k ? to_f16(__uint_as_float((u32)x[src * k + c] << 16)) : 0;
}

// Grid (cnt), 256 threads: y row pairs[i] (n wide) = the first n of f32 row i of src (n_p wide), plus table[*id]'s bias when it has one.
extern "C" __global__ void exl3_scatter_rows(const float* __restrict__ src, const int* __restrict__ pairs, const Exl3Dev* __restrict__ table,
                                             const int* __restrict__ id, float* __restrict__ y, int n, int n_p) {
    const float* bias = table[*id].bias;
    const size_t i = blockIdx.x, p = pairs[blockIdx.x];
    for (int c = threadIdx.x; c < n; c += blockDim.x) y[p * n + c] = bias ? __fadd_rn(src[i * n_p + c], bias[c]) : src[i * n_p + c];
}
