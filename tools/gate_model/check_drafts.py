"""DSpark draft rows of the PyTorch model against the Rust CPU forward (examples/gate_drafts.rs), Markov inputs from Rust's drafts."""

import argparse
import json
import subprocess
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from check_rust import prompts_from
from ckpt import load_model
from config import EngramHasher, load_token_map
from dspark import draft_rows


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pt", type=Path, required=True)
    ap.add_argument("--ckpt", type=Path, required=True)
    ap.add_argument("--heldout", type=Path, required=True)
    ap.add_argument("--bin", type=Path, required=True, help="target/release/examples/gate_drafts")
    ap.add_argument("--lengths", default="64,128")
    ap.add_argument("--every", type=int, default=8)
    ap.add_argument("--out", type=Path, default=Path("/tmp/gate-check-drafts"))
    a = ap.parse_args()
    torch.set_num_threads(2)
    cfg, model, _ = load_model(a.pt)
    hasher = EngramHasher(cfg, load_token_map())
    prompts = prompts_from(np.load(a.heldout), [int(x) for x in a.lengths.split(",")])
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "prompts.json").write_text(json.dumps(prompts))
    stem = a.out / "rust"
    subprocess.run([str(a.bin), str(a.ckpt), str(a.out / "prompts.json"), str(a.every), str(stem)], check=True)
    recs = json.loads(stem.with_suffix(".json").read_text())
    rust = torch.from_numpy(np.fromfile(stem.with_suffix(".f32"), dtype="<f4")).view(len(recs), -1, cfg.vocab)
    top1, kl, maxd, same_drafts, conf_d, hits = [], [], 0.0, 0, 0.0, []
    for i, r in enumerate(recs):
        ids = torch.tensor([prompts[r["prompt"]]])
        p = r["anchor"]
        markov = torch.tensor([[[ids[0, p + 1].item()] + r["drafts"][:-1]]])
        with torch.no_grad():
            logits, conf = draft_rows(model, ids, hasher.ids(ids), torch.tensor([p]), markov)
        ours, theirs = logits[0, 0], rust[i]
        lp, lq = F.log_softmax(ours, -1), F.log_softmax(theirs, -1)
        kl.append((lq.exp() * (lq - lp)).sum(-1))
        top1.append((ours.argmax(-1) == theirs.argmax(-1)).float())
        maxd = max(maxd, (ours - theirs).abs().max().item())
        same_drafts += ours.argmax(-1).tolist() == r["drafts"]
        conf_d = max(conf_d, (conf[0, 0] - torch.tensor(r["confidence"])).abs().max().item())
        truth = ids[0, p + 2:p + 2 + cfg.dspark_block_size].tolist()
        n = 0
        while n < len(truth) and r["drafts"][n] == truth[n]:
            n += 1
        hits.append(n)
    out = {"anchors": len(recs), "row_top1_agree": torch.cat(top1).mean().item(),
           "kl_mean": torch.cat(kl).mean().item(),
           "max_abs_logit": maxd, "identical_draft_blocks": same_drafts, "max_abs_confidence": conf_d,
           "rust_drafts_accepted_vs_text": float(np.mean(hits))}
    print(json.dumps(out, indent=1))
    (a.out / "agreement.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
