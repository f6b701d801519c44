#!/usr/bin/env python3
"""Decode speed of DeepSeek's V4.1 reference (kernel_cpu.py torch kernels) on flash-shaped random layers; see tools/golden/README.md section 7."""

import argparse
import functools
import importlib.util
import json
import math
import platform
import statistics
import sys
import time
import types
from pathlib import Path

import torch

from ref_import import import_reference

HERE = Path(__file__).resolve().parent
# Imported at the top of engram.py / image_processor.py but never called here (no Engram, no vision).
OPTIONAL_DEPS = ("numpy", "sympy", "PIL")
# Factory functions that model.py and kernel_cpu.py call without a device.
FACTORIES = ("empty", "zeros", "ones", "full", "arange", "tensor", "rand", "randn", "randint", "linspace")
# RMS of a uniformly random E2M1 code: sqrt(mean of the 8 magnitudes squared).
FP4_RMS = math.sqrt(sum(v * v for v in (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)) / 8)


def _unavailable(module: str, attr: str):
    """Module __getattr__ of a stubbed dependency: dunders are absent, anything else fails when called."""
    if attr.startswith("__"):
        raise AttributeError(attr)

    def fail(*_args, **_kwargs):
        raise RuntimeError(f"{module}.{attr} is not installed (stubbed by ref_speed.py)")

    return fail


def stub_missing_deps() -> list[str]:
    """Registers placeholder modules for absent OPTIONAL_DEPS so that the reference package imports."""
    stubbed = []
    for name in OPTIONAL_DEPS:
        if importlib.util.find_spec(name) is None:
            stub = types.ModuleType(name)
            stub.__getattr__ = functools.partial(_unavailable, name)
            sys.modules[name] = stub
            stubbed.append(name)
    return stubbed


def bind_device(module, device: torch.device):
    """Gives `module` a torch namespace whose factories default to `device`, and moves its tensor constants there."""
    # A copy of torch's namespace rather than torch.set_default_device, whose global mode taxes every torch call.
    ns = types.ModuleType("torch")
    ns.__dict__.update(vars(torch))
    ns.__getattr__ = lambda name: getattr(torch, name)
    for name in FACTORIES:
        setattr(ns, name, functools.partial(getattr(torch, name), device=device))
    module.torch = ns
    for name, value in list(vars(module).items()):
        if isinstance(value, torch.Tensor):
            setattr(module, name, value.to(device))


def flash_args(v41, layers: int, max_seq_len: int, tiny: bool):
    """ModelArgs of V4.1-Flash cut to `layers` layers like flash_config in synth.rs; --tiny shrinks the widths."""
    if layers < 6:
        sys.exit("the flash shape needs at least 6 layers (as flash_config in crates/tf-dsv41/src/cuda/synth.rs)")
    enc = (layers - 2) // 2
    dec_src = 2 + enc
    kw = dict(
        max_batch_size=1, max_seq_len=max_seq_len, temperature=0.0, dtype="fp8", expert_dtype="fp4",
        vocab_size=129280, dim=5120, moe_inter_dim=2304, n_layers=layers, n_mtp_layers=0, n_heads=64,
        n_routed_experts=384, n_shared_experts=1, n_activated_experts=6, score_func="sqrtsoftplus",
        route_scale=1.5, swiglu_limit=10.0, q_lora_rank=1280, head_dim=512, rope_head_dim=64,
        o_groups=8, o_lora_rank=1024, window_size=128,
        compress_ratios=tuple([0, 0] + [2] * enc + [1] * (layers - dec_src)),
        kv_source_layers=(2, dec_src), index_source_layers=(2, dec_src, layers - 1),
        compress_rope_theta=160000.0, original_seq_len=65536, rope_factor=16.0,
        index_n_heads=32, index_head_dim=128, index_topk=512,
        candidate_source_layer=dec_src, candidate_topk_blocks=2048, candidate_block_size=8,
        hc_mult=4, hc_sinkhorn_iters=20, engram_layer_ids=(), engram_num_embeddings=(),
        vision_n_layers=0, dspark_block_size=0, dspark_target_layer_ids=(),
    )
    if tiny:
        kw.update(
            vocab_size=512, dim=128, moe_inter_dim=64, n_heads=4, n_routed_experts=8, n_activated_experts=2,
            q_lora_rank=64, head_dim=64, rope_head_dim=16, o_groups=2, o_lora_rank=32, window_size=8,
            index_n_heads=2, index_head_dim=32, index_topk=8, candidate_topk_blocks=4, candidate_block_size=2,
        )
    return v41.ModelArgs(**kw)


def float_range(name: str, p: torch.Tensor) -> tuple[float, float]:
    """Uniform range of a bf16/fp32 parameter, after synth.rs: norms ~1, fan-in scaled matrices."""
    if name.endswith("norm.weight"):
        return 0.9, 1.1
    if name.endswith("attn_sink") or name == "embed.weight":
        return -1.0, 1.0
    if name.endswith(("hc_attn_scale", "hc_ffn_scale")):
        return 0.5, 1.0
    if name.endswith(("hc_attn_base", "hc_ffn_base")):
        return -0.5, 0.5
    if name.endswith("gate.bias"):
        return -0.01, 0.01
    if p.dim() == 2:
        a = math.sqrt(3.0 / p.size(1))
        return -a, a
    sys.exit(f"no fill rule for parameter {name} {tuple(p.shape)} {p.dtype}")


@torch.no_grad()
def fill_random(model, gen: torch.Generator):
    """Random weights in place, in the official formats: FP8 codes ~N(0,1), random FP4 bytes, E8M0 scales ~1/sqrt(fan_in)."""
    params = dict(model.named_parameters())
    for name, p in params.items():
        if p.dtype == torch.float8_e4m3fn:
            p.copy_(torch.randn(p.shape, generator=gen, device=p.device).to(torch.float8_e4m3fn))
        elif p.dtype == torch.float4_e2m1fn_x2:
            p.view(torch.uint8).random_(0, 256, generator=gen)
        elif p.dtype == torch.float8_e8m0fnu:
            w = params[name[: -len("scale")] + "weight"]
            fan_in, rms = (w.size(1), 1.0) if w.dtype == torch.float8_e4m3fn else (2 * w.size(1), FP4_RMS)
            p.view(torch.uint8).fill_(127 - round(math.log2(math.sqrt(fan_in) * rms)))
        else:
            p.uniform_(*float_range(name, p), generator=gen)


def sync(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, fn, *args):
    """fn(*args) between two device synchronizations; returns (result, milliseconds)."""
    sync(device)
    t = time.perf_counter()
    out = fn(*args)
    sync(device)
    return out, (time.perf_counter() - t) * 1e3


def check_finite(logits: torch.Tensor, what: str):
    if not torch.isfinite(logits).all():
        sys.exit(f"non-finite logits after {what}: the random weights blew up")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--layers", type=int, default=8, help="flash-shaped layers (>= 6), as flash_config(layers)")
    ap.add_argument("--context", type=int, default=1024, help="random prompt length prefilled before decoding")
    ap.add_argument("--steps", type=int, default=10, help="timed single-token decode steps")
    ap.add_argument("--warmup", type=int, default=2, help="untimed decode steps before the timed ones")
    ap.add_argument("--device", default="cuda", help="torch device (cuda, cuda:1, cpu)")
    ap.add_argument("--tiny", action="store_true", help="smoke test: shrunk widths (dim 128, 8 experts, vocab 512)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random weights and prompt")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch default)")
    ap.add_argument("--ref", type=Path, default=HERE / "ref" / "deepseek_v41", help="vendored reference package")
    a = ap.parse_args()
    if a.context < 1 or a.steps < 1 or a.warmup < 0:
        sys.exit("--context and --steps must be >= 1, --warmup >= 0")

    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("CUDA is not available here; try --device cpu --tiny for a smoke test")
    if a.threads:
        torch.set_num_threads(a.threads)
    stubbed = stub_missing_deps()
    v41, kernel_cpu = import_reference(a.ref, "model", "kernel_cpu")
    bind_device(v41, device)
    bind_device(kernel_cpu, device)

    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    tilelang = importlib.util.find_spec("tilelang") is not None
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, python {platform.python_version()}, device {gpu}")
    print(f"kernels: kernel_cpu.py (Tenstorrent's torch port of the tilelang kernels), eager, no CUDA graphs; "
          f"tilelang importable: {'yes' if tilelang else 'no'} (not used)")
    if stubbed:
        print(f"stubbed absent modules (imported by engram.py/image_processor.py, unused here): {stubbed}")

    max_seq_len = math.ceil((a.context + a.warmup + a.steps + 1) / 64) * 64
    args = flash_args(v41, a.layers, max_seq_len, a.tiny)
    gen = torch.Generator(device=device).manual_seed(a.seed)
    t0 = time.perf_counter()
    with v41.set_dtype(torch.bfloat16):
        model = v41.Transformer(args).eval()
    fill_random(model, gen)
    sync(device)
    n_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    print(f"model: {a.layers} layers, compress_ratios {list(args.compress_ratios)}, kv sources "
          f"{list(args.kv_source_layers)}, index sources {list(args.index_source_layers)}, candidate source "
          f"{args.candidate_source_layer}; {n_bytes / 2**30:.1f} GiB of weights on {device}, built and filled in "
          f"{time.perf_counter() - t0:.1f} s")

    prompt = torch.randint(0, args.vocab_size, (1, a.context), generator=gen, device=device)
    with v41.set_dtype(torch.bfloat16):
        (tok, logits, _), prefill_ms = timed(device, model, prompt, 0)
        check_finite(logits, "the prefill")
        print(f"prefill of {a.context} tokens: {prefill_ms / 1e3:.2f} s (logits std {logits.float().std():.3f})")
        samples = []
        for i in range(a.warmup + a.steps):
            (tok, logits, _), ms = timed(device, model, tok.view(1, 1), a.context + i)
            check_finite(logits, f"decode step {i}")
            if i >= a.warmup:
                samples.append(ms)
        with torch.inference_mode():
            x = torch.randn(1, 1, args.dim, generator=gen, device=device).bfloat16()
            head_ms = statistics.median(timed(device, lambda: model.head(model.norm(x)))[1] for _ in range(10))

    med = statistics.median(samples)
    print(f"decode at batch 1, positions {a.context + a.warmup}..{a.context + a.warmup + a.steps - 1}: "
          f"median {med:.2f} ms/step (min {min(samples):.2f}, max {max(samples):.2f}, {a.steps} steps after "
          f"{a.warmup} warm-up; last logits std {logits.float().std():.3f})")
    print(f"per layer: {med / a.layers:.2f} ms (whole step / {a.layers}); final norm + head alone {head_ms:.2f} ms, "
          f"so {(med - head_ms) / a.layers:.2f} ms per layer without it")
    if device.type == "cuda":
        print(f"peak device memory {torch.cuda.max_memory_allocated(device) / 2**30:.1f} GiB")
    print(json.dumps({
        "layers": a.layers, "context": a.context, "step_ms_median": round(med, 3),
        "samples_ms": [round(s, 3) for s in samples], "kernels": "kernel_cpu.py",
        "head_ms": round(head_ms, 3), "prefill_ms": round(prefill_ms, 1), "tiny": a.tiny,
        "device": gpu, "torch": torch.__version__, "cuda": torch.version.cuda,
    }))


if __name__ == "__main__":
    main()
