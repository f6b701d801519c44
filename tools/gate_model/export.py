"""Writes a trained .pt as an official-format checkpoint directory the Rust engine loads (inventory.rs names and dtypes)."""

import argparse
import json
import shutil
import struct
from pathlib import Path

import torch

from ckpt import load_model
from config import ASSETS
from quant import fp4_weight_codes, fp8_row_codes, fp8_tile_codes

FP8_TILES = ("attn.wq_a", "attn.wq_b", "attn.wkv", "attn.wo_b", "attn.indexer.wq_b", "ffn.shared_experts.w1",
             "ffn.shared_experts.w2", "ffn.shared_experts.w3", "engram.wkv", "main_proj")
F32 = ("attn.attn_sink", "ffn.gate.bias", "ffn.gate.bias_vl", "hc_attn_fn", "hc_ffn_fn", "hc_attn_base",
       "hc_ffn_base", "hc_attn_scale", "hc_ffn_scale")
SKIP = ("head_rest", "used")


def strip_prefix(name: str) -> str:
    """`layers.3.attn.wq_a.weight` → `attn.wq_a.weight` (the module path inside a block)."""
    parts = name.split(".")
    return ".".join(parts[2:]) if parts[0] in ("layers", "mtp") else name


def bf16_bytes(t: torch.Tensor) -> bytes:
    return t.detach().float().to(torch.bfloat16).contiguous().view(torch.int16).numpy().tobytes()


def stored(name: str, t: torch.Tensor) -> list[tuple[str, str, list[int], bytes]]:
    """(name, safetensors dtype, shape, bytes) of one parameter: the weight, then its scale when quantized."""
    inner = strip_prefix(name)
    base = name.removesuffix(".weight")
    if any(inner == f"{m}.weight" for m in FP8_TILES):
        c, s = fp8_tile_codes(t)
        return [(name, "F8_E4M3", list(c.shape), c.numpy().tobytes()),
                (f"{base}.scale", "F8_E8M0", list(s.shape), s.numpy().tobytes())]
    if inner.startswith("ffn.experts."):
        c, s = fp4_weight_codes(t)
        return [(name, "I8", list(c.shape), c.numpy().tobytes()),
                (f"{base}.scale", "F8_E8M0", list(s.shape), s.numpy().tobytes())]
    if inner == "engram.embed.weight":
        c, s = fp8_row_codes(t)
        return [(name, "F8_E4M3", list(c.shape), c.numpy().tobytes()),
                (f"{base}.scale", "F8_E8M0", list(s.shape), s.numpy().tobytes())]
    if inner in F32:
        return [(name, "F32", list(t.shape), t.detach().float().contiguous().numpy().tobytes())]
    return [(name, "BF16", list(t.shape), bf16_bytes(t))]


def write_safetensors(path: Path, tensors: list[tuple[str, str, list[int], bytes]], meta: dict | None = None):
    """The safetensors layout: u64 header length, JSON header with byte offsets, then the data in order."""
    header, off = {"__metadata__": meta or {"format": "pt"}}, 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for *_, data in tensors:
            f.write(data)


def export(pt: Path, out: Path) -> dict:
    cfg, model, ck = load_model(pt)
    used = model.used
    params = dict(model.named_parameters())
    params["embed.weight"] = model.embed_weight()
    params["head.weight"] = model.head_weight()
    for k in [n for n in params if n.endswith(("markov_head.embed.weight", "markov_head.head.weight"))]:
        params[k] = torch.where(used[:, None], params[k], 0.0)
    tensors = [t for n, p in params.items() if n not in SKIP for t in stored(n, p)]
    out.mkdir(parents=True, exist_ok=True)
    shard = "model-00001-of-00001.safetensors"
    write_safetensors(out / shard, tensors)
    total = sum(len(t[3]) for t in tensors)
    index = {"metadata": {"total_size": total}, "weight_map": {t[0]: shard for t in tensors}}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    (out / "config.json").write_text(cfg.to_json())
    shutil.copyfile(ASSETS / "tokenizer.json", out / "tokenizer.json")
    shutil.copyfile(ASSETS / "token_map.u32", out / "engram_token_map.u32")
    (out / "training_log.json").write_text(json.dumps(ck["log"]) + "\n")
    return {"tensors": len(tensors), "tensor_bytes": total, "used_vocab": int(used.sum())}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pt", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    print(export(a.pt, a.out))


if __name__ == "__main__":
    main()
