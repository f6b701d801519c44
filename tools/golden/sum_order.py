#!/usr/bin/env python3
"""How often torch's CPU sum of squares (DeepSeek's RMSNorm: x.square().mean(-1)) equals our SumOrder folds bit for bit."""

import numpy as np
import torch


def sequential(v: np.ndarray) -> np.float32:
    """tf_core SumOrder::Sequential: one running f32 sum in index order."""
    s = np.float32(0.0)
    for x in v:
        s = np.float32(s + np.float32(x * x))
    return s


def lanes32(v: np.ndarray) -> np.float32:
    """tf_core SumOrder::Lanes32: element i to lane i % 32 from -0.0, then lane l += lane l ^ m for m = 16 .. 1."""
    lanes = np.full(32, -0.0, dtype=np.float32)
    for i, x in enumerate(v):
        lanes[i % 32] = np.float32(lanes[i % 32] + np.float32(x * x))
    m = 16
    while m >= 1:
        prev = lanes.copy()
        for lane in range(32):
            lanes[lane] = np.float32(prev[lane] + prev[lane ^ m])
        m //= 2
    return lanes[0]


def main():
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}")
    for n in (256, 1024, 4096):
        rows = [torch.randn(n).bfloat16().float() for _ in range(200)]
        ref = [np.float32(r.square().sum(-1).item()) for r in rows]
        seq = sum(a == sequential(r.numpy()) for a, r in zip(ref, rows)) / len(rows)
        wide = sum(a == lanes32(r.numpy()) for a, r in zip(ref, rows)) / len(rows)
        print(f"{n:>5} wide: equal to Sequential on {seq:.1%} of rows, to Lanes32 on {wide:.1%}")


if __name__ == "__main__":
    main()
