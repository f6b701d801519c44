"""Teacher-forced agreement of the PyTorch eval forward and the Rust CPU forward on an exported checkpoint."""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ckpt import load_model
from config import EngramHasher, load_token_map


def prompts_from(stream: np.ndarray, lengths: list[int]) -> list[list[int]]:
    """Held-out windows starting right after an EOS, so each prompt opens a file."""
    eos = np.flatnonzero(stream == 1)
    out, k = [], 0
    for n in lengths:
        while eos[k] + 1 + n >= len(stream):
            k = 0
        s = int(eos[k]) + 1
        out.append([int(t) for t in stream[s:s + n]])
        k += max(1, len(eos) // (len(lengths) + 1))
    return out


def stats(ours: torch.Tensor, theirs: torch.Tensor, ids: list[int]) -> dict:
    """Row statistics of PyTorch (`ours`) against Rust (`theirs`), both `[rows, vocab]` f32."""
    lp, lq = F.log_softmax(ours, -1), F.log_softmax(theirs, -1)
    kl = (lq.exp() * (lq - lp)).sum(-1)
    tgt = torch.tensor(ids[1:])
    nll = lambda l: -l[:-1].gather(-1, tgt[:, None]).mean().item()
    top1 = (ours.argmax(-1) == theirs.argmax(-1)).float()
    return {"rows": len(ids), "top1_agree": top1.mean().item(), "kl_mean": kl.mean().item(),
            "kl_p99": torch.quantile(kl, 0.99).item(), "max_abs_logit": (ours - theirs).abs().max().item(),
            "nll_torch": nll(lp), "nll_rust": nll(lq), "p_top1_rust": lq.exp().max(-1).values.mean().item()}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pt", type=Path, required=True, help="the trained .pt the checkpoint was exported from")
    ap.add_argument("--ckpt", type=Path, required=True, help="the exported directory")
    ap.add_argument("--heldout", type=Path, required=True, help="heldout.npy from data.py")
    ap.add_argument("--bin", type=Path, required=True, help="target/release/examples/gate_logits")
    ap.add_argument("--lengths", default="40,100,200")
    ap.add_argument("--out", type=Path, default=Path("/tmp/gate-check"))
    a = ap.parse_args()
    torch.set_num_threads(2)
    cfg, model, _ = load_model(a.pt)
    hasher = EngramHasher(cfg, load_token_map())
    prompts = prompts_from(np.load(a.heldout), [int(x) for x in a.lengths.split(",")])
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "prompts.json").write_text(json.dumps(prompts))
    t = time.time()
    subprocess.run([str(a.bin), str(a.ckpt), str(a.out / "prompts.json"), str(a.out / "rust.f32")], check=True)
    print(f"rust: {time.time() - t:.1f}s", file=sys.stderr)
    rust = torch.from_numpy(np.fromfile(a.out / "rust.f32", dtype="<f4")).view(-1, cfg.vocab)
    rows, report = 0, []
    for ids in prompts:
        with torch.no_grad():
            x = torch.tensor([ids])
            ours = model(x, hasher.ids(x))[0]
        report.append(stats(ours, rust[rows:rows + len(ids)], ids))
        rows += len(ids)
    n = sum(r["rows"] for r in report)
    total = {k: sum(r[k] * r["rows"] for r in report) / n for k in ("top1_agree", "kl_mean", "nll_torch", "nll_rust")}
    total["max_abs_logit"] = max(r["max_abs_logit"] for r in report)
    out = {"prompts": report, "all": total}
    print(json.dumps(out, indent=1))
    (a.out / "agreement.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
