"""Compact forms that fit a GPU call's carry and return limits: u16 token streams, and checkpoints split into ≤ 15 MiB parts."""

import io
import json
import lzma
from pathlib import Path

import numpy as np
import torch

PART = 15 << 20
VOCAB_TENSORS = ("markov_head.embed.weight", "markov_head.head.weight")


def pack_tokens(data: Path):
    """train.npy (uint32 ids) → train_u16.npz: indices into the used-id list (most frequent first), plus that list."""
    train = np.load(data / "train.npy")
    vocab, inv, count = np.unique(train, return_inverse=True, return_counts=True)
    assert vocab.size < 65536, f"{vocab.size} distinct ids do not fit u16"
    # Frequency order puts most tokens' high byte at 0: the npz is ~4 % smaller than with sorted ids, and load_train is unchanged.
    order = np.argsort(-count, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    np.savez_compressed(data / "train_u16.npz", ids=rank[inv].astype(np.uint16), vocab=vocab[order])
    # xz packs the same u16 stream 30 % smaller than the npz's zlib (0.51 vs 0.72 bytes a token): more data per GPU call.
    (data / "train_u16.xz").write_bytes(lzma.compress(rank[inv].astype("<u2").tobytes(), preset=9 | lzma.PRESET_EXTREME))
    np.save(data / "train_vocab.npy", vocab[order])


def load_train(data: Path) -> np.ndarray:
    """The uint32 train stream from train.npy, or rebuilt from train_u16.xz (+ train_vocab.npy) or train_u16.npz."""
    if (data / "train.npy").is_file():
        return np.load(data / "train.npy", mmap_mode="r")
    if (data / "train_u16.xz").is_file():
        ids = np.frombuffer(lzma.decompress((data / "train_u16.xz").read_bytes()), dtype="<u2")
        return np.load(data / "train_vocab.npy")[ids]
    z = np.load(data / "train_u16.npz")
    return z["vocab"][z["ids"]]


def is_vocab(name: str) -> bool:
    return name in ("embed.weight", "head.weight") or name.endswith(VOCAB_TENSORS)


def save_compact(ck: dict, out: Path) -> list[Path]:
    """Vocab tensors keep only used rows (bf16), the rest stay f32; the bytes are split into `out.partN` files."""
    used = ck["state"]["used"]
    state = {k: (v[used].to(torch.bfloat16) if is_vocab(k) else v) for k, v in ck["state"].items()}
    buf = io.BytesIO()
    torch.save({**ck, "state": state, "compact": True}, buf)
    raw = buf.getvalue()
    paths = []
    for i in range(0, len(raw), PART):
        p = out.with_name(f"{out.name}.part{i // PART}")
        p.write_bytes(raw[i:i + PART])
        paths.append(p)
    return paths


def load_ckpt(path: Path) -> dict:
    """A .pt from train.py, or the `.partN` files of save_compact (expanded: unused rows zero)."""
    parts = sorted(path.parent.glob(path.name + ".part*"), key=lambda p: int(p.suffix[5:]))
    if path.is_file():
        return torch.load(path, map_location="cpu", weights_only=False)
    ck = torch.load(io.BytesIO(b"".join(p.read_bytes() for p in parts)), map_location="cpu", weights_only=False)
    used = ck["state"]["used"]
    for k, v in list(ck["state"].items()):
        if is_vocab(k):
            full = torch.zeros(used.numel(), v.shape[1])
            full[used] = v.float()
            ck["state"][k] = full
    return ck


def load_model(path: Path):
    """A checkpoint's config and its Dsv41 with the weights loaded, in eval mode, plus the checkpoint dict."""
    from config import Cfg
    from model import Dsv41

    ck = load_ckpt(path)
    cfg = Cfg(ck["hf"])
    model = Dsv41(cfg, ck["state"]["used"])
    model.load_state_dict(ck["state"])
    return cfg, model.eval(), ck


def write(ck: dict, out: Path, compact: bool):
    """`ck` as a .pt (or compact parts for GPU calls), with its training log beside it as JSON."""
    out.parent.mkdir(parents=True, exist_ok=True)
    if compact:
        save_compact(ck, out)
    else:
        torch.save(ck, out)
    out.with_suffix(".json").write_text(json.dumps(ck["log"]) + "\n")


def backbone_init(pt: Path, out: Path) -> list[Path]:
    """Compact parts of a checkpoint's backbone alone (no DSpark stages, no log): a `train.py --init` that fits a call's carry."""
    ck = load_ckpt(pt)
    state = {k: v for k, v in ck["state"].items() if not k.startswith("mtp.")}
    return save_compact({"hf": ck["hf"], "state": state}, out)


if __name__ == "__main__":
    import sys
    if sys.argv[1] == "--backbone":
        print(backbone_init(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        pack_tokens(Path(sys.argv[1]))
