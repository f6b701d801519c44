// The EXL3 prompt path (docs/exl3.md § prompt GEMM): W = diag(suh)·H·Q·H·diag(svh) rebuilt in fp16, then one dense GEMM on the rows as they are.

// Shared memory of exl3_recon: one 128×128 block of f32, rows padded to 129 so a warp's column reads hit 32 banks.
#define RECON_LD (HAD + 1)

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
    // H on the input side: a warp per column.
    for (int c = wp; c < HAD; c += 8) {
        float r[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) r[q] = blk[(lane + 32 * q) * RECON_LD + c];
        fwht128_warp(r, lane);
#pragma unroll
        for (int q = 0; q < 4; ++q) blk[(lane + 32 * q) * RECON_LD + c] = r[q];
    }
    __syncthreads();
    // H on the output side, × suh·svh as Exl3Weight::weight orders it, rounded once to fp16: a warp per row.
    for (int i = wp; i < HAD; i += 8) {
        float r[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) r[q] = blk[i * RECON_LD + lane + 32 * q];
        fwht128_warp(r, lane);
        const float su = f16(wt->suh[bi * HAD + i]);
        u16* row = wz + (size_t)(bi * HAD + i) * out_p + bj * HAD;
#pragma unroll
        for (int q = 0; q < 4; ++q) row[lane + 32 * q] = to_f16(__fmul_rn(r[q], __fmul_rn(su, f16(wt->svh[bj * HAD + lane + 32 * q]))));
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
