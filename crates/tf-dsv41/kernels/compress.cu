// The ratio-2 compressor's pooling (attn/compress.rs `pool`): gate softmax within a group, then the weighted kv sum.

// Grid (groups, ceil(d / blockDim)). Per channel: softmax of the gate over the group's rows, then the weighted kv sum.
extern "C" __global__ void compress_pool(const float* __restrict__ kv, const float* __restrict__ gate,
                                         unsigned short* __restrict__ out, int ratio, int d) {
    const int g = blockIdx.x;
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= d) return;
    const size_t base = (size_t)g * ratio * d + c;
    float mx = -F32_INF;
    for (int i = 0; i < ratio; ++i) mx = fmaxf(mx, gate[base + (size_t)i * d]);
    float s = -0.0f;
    for (int i = 0; i < ratio; ++i) s += exp_rn(gate[base + (size_t)i * d] - mx);
    float acc = -0.0f;
    for (int i = 0; i < ratio; ++i) {
        const float e = exp_rn(gate[base + (size_t)i * d] - mx);
        acc += kv[base + (size_t)i * d] * (e / s);
    }
    out[(size_t)g * d + c] = bf16_rne(acc);
}
