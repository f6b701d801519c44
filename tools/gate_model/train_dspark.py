"""Trains the DSpark stages as drafters on a frozen trained backbone (spec §11: backbone frozen, no gradient into it)."""

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from ckpt import load_ckpt, load_train, write
from config import Cfg, EngramHasher, load_token_map
from dspark import draft_loss
from model import Dsv41
from train import windows


@torch.no_grad()
def evaluate(model, hasher, held, seq, n, anchors, device) -> dict:
    """Per-row draft accuracy and mean accepted length on fixed held-out windows (teacher-forced Markov inputs)."""
    model.eval()
    gen = torch.Generator().manual_seed(1)
    rows, acc = [], []
    for s in np.linspace(0, len(held) - seq - 2, n).astype(np.int64):
        w = windows(held, [s], seq).to(device)
        _, _, row, a = draft_loss(model, w, hasher.ids(w), anchors, gen)
        rows.append(row.cpu())
        acc.append(a)
    model.train()
    return {"row_accuracy": [round(v, 4) for v in torch.stack(rows).mean(0).tolist()],
            "accepted": round(float(np.mean(acc)), 4)}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pt", type=Path, required=True, help="trained backbone (.pt or compact parts)")
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--anchors", type=int, default=32, help="draft blocks per sequence per step")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--eval-windows", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--time-limit", type=float, default=0)
    ap.add_argument("--compact", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng, gen = np.random.default_rng(a.seed), torch.Generator().manual_seed(a.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    ck = load_ckpt(a.pt)
    cfg = Cfg(ck["hf"])
    model = Dsv41(cfg, ck["state"]["used"])
    model.load_state_dict(ck["state"])
    model.to(device)
    for n, p in model.named_parameters():
        p.requires_grad_(n.startswith("mtp.") and not n.endswith(("gate.bias", "gate.bias_vl")))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.95), weight_decay=0.01)
    hasher = EngramHasher(cfg, load_token_map().to(device))
    train = np.ascontiguousarray(load_train(a.data))
    held = np.ascontiguousarray(np.load(a.data / "heldout.npy"))
    log = ck["log"]
    log["dspark"] = {"args": {k: str(v) for k, v in vars(a).items()}, "steps": [], "evals": []}
    log["dspark"]["evals"].append([0, evaluate(model, hasher, held, a.seq, a.eval_windows, a.anchors, device)])
    print("before", log["dspark"]["evals"][-1], flush=True)
    t0 = time.time()
    for step in range(a.steps):
        w = windows(train, rng.integers(0, len(train) - a.seq - 2, a.batch), a.seq).to(device)
        ce, bce, _, acc = draft_loss(model, w, hasher.ids(w), a.anchors, gen)
        opt.zero_grad(set_to_none=True)
        (ce + 0.1 * bce).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        log["dspark"]["steps"].append([step, round(ce.item(), 4), round(bce.item(), 4), round(acc, 3)])
        if step % 10 == 0:
            print(f"step {step} draft ce {ce.item():.3f} conf bce {bce.item():.3f} accepted {acc:.2f} "
                  f"{time.time() - t0:.0f}s", flush=True)
        if a.time_limit and time.time() - t0 > a.time_limit:
            break
    log["dspark"]["evals"].append([step + 1, evaluate(model, hasher, held, a.seq, a.eval_windows, a.anchors, device)])
    print("after", log["dspark"]["evals"][-1], flush=True)
    write({"hf": ck["hf"], "state": {k: v.cpu() for k, v in model.state_dict().items()}, "log": log}, a.out, a.compact)


if __name__ == "__main__":
    main()
