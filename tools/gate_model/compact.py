"""Exported checkpoint ⇄ the shipped compact form: vocab tensors keep only used rows (tf_dsv41::gate_model expands it)."""

import argparse
import hashlib
import json
import struct
from pathlib import Path

import numpy as np

from export import write_safetensors

FORMAT = "tf-gate-compact-1"
VOCAB = ("embed.weight", "head.weight", "markov_head.embed.weight", "markov_head.head.weight")
DTYPE = {"BF16": np.uint16, "F32": np.float32, "U32": np.uint32, "F8_E4M3": np.uint8, "F8_E8M0": np.uint8,
         "I8": np.int8}


def read_safetensors(path: Path) -> tuple[dict, dict[str, np.ndarray]]:
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, h in header.items():
        a, b = h["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=DTYPE[h["dtype"]]).reshape(h["shape"])
    return meta, {k: (header[k]["dtype"], v) for k, v in out.items()}


def is_vocab(name: str) -> bool:
    return name.endswith(VOCAB) and (name in VOCAB[:2] or ".markov_head." in name)


def compact(export_dir: Path, out: Path) -> dict:
    """Used rows of the vocab tensors, the head's shared row, one copy when embed and head rows are equal."""
    meta, t = read_safetensors(export_dir / "model-00001-of-00001.safetensors")
    embed, head = t["embed.weight"][1], t["head.weight"][1]
    used = np.flatnonzero(np.any(embed != 0, axis=1) | (np.arange(len(embed)) < 3)).astype(np.uint32)
    rest = np.setdiff1d(np.arange(len(head)), used)
    assert rest.size and (head[rest] == head[rest[0]]).all(), "unused head rows must share one row"
    tensors = [("used_ids", "U32", [used.size], used.tobytes()),
               ("head.weight.rest", "BF16", [1, head.shape[1]], head[rest[0]][None].tobytes())]
    tied = bool((embed[used] == head[used]).all())
    for name, (dtype, a) in sorted(t.items()):
        if is_vocab(name):
            unused = np.delete(a, used, axis=0)
            assert name == "head.weight" or not unused.any(), f"{name}: unused rows must be zero"
            if tied and name == "head.weight":
                continue
            a = a[used]
        tensors.append((name, dtype, list(a.shape), np.ascontiguousarray(a).tobytes()))
    out.mkdir(parents=True, exist_ok=True)
    write_safetensors(out / "model.safetensors", tensors, {"format": FORMAT, "vocab": str(len(embed)),
                                                           "tied_head": "embed.weight" if tied else ""})
    (out / "config.json").write_text((export_dir / "config.json").read_text())
    digest = hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()
    return {"used_ids": int(used.size), "tied": tied, "bytes": (out / "model.safetensors").stat().st_size,
            "sha256": digest}


def expand(compact_dir: Path) -> dict[str, np.ndarray]:
    """The full tensors back (for checks): unused rows zero, the head's from its shared row."""
    meta, t = read_safetensors(compact_dir / "model.safetensors")
    used, vocab = t.pop("used_ids")[1], int(meta["vocab"])
    rest = t.pop("head.weight.rest")[1]
    if meta.get("tied_head"):
        t["head.weight"] = t[meta["tied_head"]]
    full = {}
    for name, (dtype, a) in t.items():
        if is_vocab(name):
            b = np.repeat(rest, vocab, axis=0) if name == "head.weight" else np.zeros((vocab, a.shape[1]), a.dtype)
            b[used] = a
            a = b
        full[name] = a
    return full


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--export", type=Path, required=True, help="a directory from export.py")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    info = compact(a.export, a.out)
    _, orig = read_safetensors(a.export / "model-00001-of-00001.safetensors")
    back = expand(a.out)
    assert set(back) == set(orig) and all(np.array_equal(back[k], orig[k][1]) for k in orig), "round trip differs"
    print(json.dumps(info))


if __name__ == "__main__":
    main()
