"""Held-out NLL of a checkpoint on every held-out stream of a data directory (heldout*.npy), as train.py evaluates."""

import argparse
import json
import math
from pathlib import Path

import numpy as np
import torch

from ckpt import load_model
from config import EngramHasher, load_token_map
from train import evaluate


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pt", type=Path, required=True)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--windows", type=int, default=64)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    cfg, model, _ = load_model(a.pt)
    model = model.to(device)
    hasher = EngramHasher(cfg, load_token_map().to(device))
    out = {"pt": str(a.pt), "windows": a.windows, "seq": a.seq}
    done = {}
    for f in sorted(a.data.glob("heldout*.npy")):
        held = np.ascontiguousarray(np.load(f))
        # data_mix.py's heldout.npy is a copy of heldout_rust.npy (train.py's stream): score it once.
        key = hash(held.tobytes())
        if key in done:
            out[f.stem] = {"same_as": done[key]}
            continue
        done[key] = f.stem
        n = min(a.windows, max(1, (len(held) - 2) // a.seq))
        nll = evaluate(model, hasher, held, a.seq, n, a.batch, device)
        out[f.stem] = {"tokens": int(held.size), "windows": n, "nll": round(nll, 4), "ppl": round(math.exp(nll), 2)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
