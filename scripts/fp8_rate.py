# The GPU's FP8 matrix rate as cuBLASLt reaches it through torch._scaled_mm (E4M3 × E4M3 → bf16, per-tensor scales); prints TFLOP/s.
import sys

import torch


def rate(m: int, n: int, k: int, reps: int = 30) -> float:
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
    one = torch.tensor(1.0, device="cuda")
    for _ in range(5):
        torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    end.record()
    torch.cuda.synchronize()
    return 2.0 * m * n * k * reps / (start.elapsed_time(end) * 1e-3) / 1e12


if __name__ == "__main__":
    shapes = [(8192, 8192, 8192), (8192, 5120, 5120), (8192, 2304, 5120)]
    best = 0.0
    for m, n, k in shapes:
        t = rate(m, n, k)
        best = max(best, t)
        print(f"fp8_rate: {m}x{n}x{k} {t:.0f} TFLOP/s", file=sys.stderr)
    print(f"{best:.1f}")
