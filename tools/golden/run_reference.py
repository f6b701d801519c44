#!/usr/bin/env python3
"""Golden logits for TensorFold-rs from DeepSeek's own V4.1 reference code; see tools/golden/README.md."""

import argparse
import contextlib
import dataclasses
import hashlib
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open

from ref_import import REF_FILES, import_reference

HERE = Path(__file__).resolve().parent
INDEX_FILE = "model.safetensors.index.json"
# Keys our inference/config.json may carry that ModelArgs does not (tokenizer facts, unused by the forward).
CONFIG_EXTRAS = ("bos_token_id", "eos_token_id")
FORMAT_VERSION = 1


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------------------- runner rules (monkeypatches)

class TieStats:
    """Counts indexer top-k calls where the k-th and (k+1)-th finite scores tie (where the tie rule decides)."""

    def __init__(self):
        self.calls = 0
        self.rows_with_tie = 0

    def reset(self):
        self.calls = self.rows_with_tie = 0


TIES = TieStats()


def stable_topk(t: torch.Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
    """Tensor.topk replacement: stable descending sort, first k; among equal scores the lower position wins."""
    assert largest, "only largest=True occurs in the reference"
    values, indices = t.sort(dim=dim, descending=True, stable=True)
    n = t.size(dim)
    TIES.calls += 1
    if 0 < k < n:
        kth, nxt = values.narrow(dim, k - 1, 1), values.narrow(dim, k, 1)
        TIES.rows_with_tie += int(((kth == nxt) & torch.isfinite(kth)).sum())
    return torch.return_types.topk((values.narrow(dim, 0, k), indices.narrow(dim, 0, k)))


@contextlib.contextmanager
def patched_topk():
    """Routes every Tensor.topk to stable_topk for the duration (only used around Indexer.forward)."""
    original = torch.Tensor.topk
    torch.Tensor.topk = stable_topk
    try:
        yield
    finally:
        torch.Tensor.topk = original


def patch_indexer(v41, index_keys: str):
    """Stable top-k inside Indexer.forward (and select_candidate_blocks); "owner" also scores against own keys."""
    original = v41.Indexer.forward

    def forward(self, x, qr, latent, start_pos, offset):
        if index_keys == "owner" and self.owns_k:
            v41.shared_attn.index_k = self.k_cache
        with patched_topk():
            return original(self, x, qr, latent, start_pos, offset)

    v41.Indexer.forward = forward


def patch_token_map(engram, token_map: list[int]):
    """Engram's compressed token map comes from the checkpoint's engram_token_map.u32, not a tokenizer."""
    n_classes = max(token_map) + 1
    first_seen, order_ok = set(), True
    for c in token_map:
        if c not in first_seen:
            order_ok &= c == len(first_seen)
            first_seen.add(c)
    if len(first_seen) != n_classes:
        sys.exit(f"engram_token_map.u32: {len(first_seen)} distinct classes but max id {n_classes - 1}")
    if not order_ok:
        print("warning: token map classes are not numbered in order of first appearance", file=sys.stderr)
    engram.build_compressed_token_map = lambda tokenizer: (list(token_map), n_classes)
    return n_classes


def patch_exact_sums(v41, kernel_cpu):
    """Diagnostic only: GEMM block partials and fp32 F.linear summed in float64, rounded once (not upstream)."""
    def block_scaled_gemm(a, a_s, b, b_s, block_k):
        acc = torch.zeros(a.size(0), b.size(0), dtype=torch.float32)
        for k in range(a.size(1) // block_k):
            sl = slice(k * block_k, (k + 1) * block_k)
            partial = (a[:, sl].double() @ b[:, sl].double().T).float()
            acc += partial * a_s[:, k : k + 1] * b_s[:, k].unsqueeze(0)
        return acc

    linear = torch.nn.functional.linear

    def f64_linear(x, w, bias=None):
        if x.dtype == torch.float32 and w.dtype == torch.float32 and bias is None:
            return linear(x.double(), w.double()).float()
        return linear(x, w, bias)

    kernel_cpu._block_scaled_gemm = block_scaled_gemm
    v41.F.linear = f64_linear


# ---------------------------------------------------------------------------- model construction and loading

def model_args(v41, ckpt: Path, max_seq_len: int):
    """ModelArgs from <ckpt>/inference/config.json, with batch 1, greedy and our max_seq_len."""
    cfg = json.loads((ckpt / "inference" / "config.json").read_text())
    fields = {f.name for f in dataclasses.fields(v41.ModelArgs)}
    unknown = sorted(k for k in cfg if k not in fields and k not in CONFIG_EXTRAS)
    if unknown:
        sys.exit(f"inference/config.json has keys ModelArgs does not know: {unknown}")
    kw = {k: tuple(v) if isinstance(v, list) else v for k, v in cfg.items() if k in fields}
    kw.update(max_batch_size=1, max_seq_len=max_seq_len, temperature=0.0)
    return v41.ModelArgs(**kw)


def read_checkpoint(ckpt: Path) -> dict[str, torch.Tensor]:
    """Every tensor of every shard named by the index (or of the lone model.safetensors)."""
    index = ckpt / INDEX_FILE
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        shards = sorted(set(weight_map.values()))
    else:
        weight_map, shards = None, ["model.safetensors"]
    out = {}
    for shard in shards:
        with safe_open(ckpt / shard, framework="pt") as f:
            for name in f.keys():
                if name in out:
                    sys.exit(f"tensor {name} stored twice")
                if weight_map is not None and weight_map.get(name) != shard:
                    sys.exit(f"tensor {name} is in {shard} but the index says {weight_map.get(name)}")
                out[name] = f.get_tensor(name)
    if weight_map is not None and set(weight_map) != set(out):
        sys.exit(f"index names tensors the shards lack: {sorted(set(weight_map) - set(out))[:10]}")
    return out


def convert(v41, model, raw: dict[str, torch.Tensor]):
    """Checkpoint tensors -> the reference's state_dict in each parameter's declared dtype; notes list conversions."""
    raw = dict(raw)
    expected = model.state_dict()
    notes = []
    for key in [k for k in raw if k.endswith("attn.wo_a.weight") and k.replace(".weight", ".scale") in raw]:
        w, s = raw[key], raw.pop(key.replace(".weight", ".scale"))
        bo, bi = w.size(0) // s.size(0), w.size(1) // s.size(1)
        w = w.unflatten(0, (-1, bo)).unflatten(-1, (-1, bi)).float() * s[:, None, :, None].float()
        raw[key] = w.flatten(2, 3).flatten(0, 1).bfloat16()
        notes.append(f"{key}: FP8 dequantized to bf16")
    dropped = sorted(k for k in raw if k.endswith("ffn.gate.bias_vl") and k not in expected)
    for k in dropped:
        del raw[k]
    if dropped:
        notes.append(f"dropped {len(dropped)} ffn.gate.bias_vl (text-only model: no Gate.bias_vl)")
    tied = []
    for k in expected:
        trunk = k.split(".", 2)[-1]
        if k.startswith("mtp.") and trunk in ("embed.weight", "head.weight") and k not in raw and trunk in raw:
            raw[k] = raw[trunk]
            tied.append(k)
    if tied:
        notes.append(f"tied to the trunk (absent in checkpoint, shared modules): {tied}")
    missing = sorted(set(expected) - set(raw))
    unexpected = sorted(set(raw) - set(expected))
    if missing or unexpected:
        sys.exit(f"checkpoint/model mismatch: missing {missing[:20]} unexpected {unexpected[:20]}")
    sd, promoted = {}, 0
    for k, want in expected.items():
        t = raw[k]
        if want.dtype == torch.float4_e2m1fn_x2 and t.dtype == torch.int8:
            t = t.view(torch.float4_e2m1fn_x2)
        elif want.dtype == torch.float32 and t.dtype == torch.bfloat16:
            t = t.float()
            promoted += 1
        if t.dtype != want.dtype or tuple(t.shape) != tuple(want.shape):
            sys.exit(f"{k}: checkpoint {t.dtype} {tuple(t.shape)}, model wants {want.dtype} {tuple(want.shape)}")
        sd[k] = t
    notes.append(f"{promoted} bf16 tensors promoted to fp32 where the module declares fp32")
    return sd, notes


def build(v41, ckpt: Path, max_seq_len: int):
    args = model_args(v41, ckpt, max_seq_len)
    with v41.set_dtype(torch.bfloat16):
        model = v41.Transformer(args, tokenizer=None)
    sd, notes = convert(v41, model, read_checkpoint(ckpt))
    model.load_state_dict(sd, strict=True)
    return model.eval(), args, notes


# ---------------------------------------------------------------------------- running

def lcg_prompt(length: int, seed: int, lo: int, hi: int) -> list[int]:
    """BOS then ids in [lo, hi) from a 64-bit LCG (Knuth MMIX constants), high bits used."""
    state, ids = seed, [0]
    while len(ids) < length:
        state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        ids.append(lo + (state >> 33) % (hi - lo))
    return ids


TOP_K = None  # --top K: each step also keeps its top-K logits and f64 log-sum-exp (JSON-only fixtures)


def summarize(logits: torch.Tensor) -> dict:
    """Argmax (lowest id on ties), its margin over the runner-up, top-8 and the vector's L2 norm."""
    top = torch.sort(logits, descending=True, stable=True)
    ids, vals = top.indices[:8].tolist(), top.values[:8].tolist()
    out = {
        "argmax": ids[0],
        "margin": vals[0] - vals[1],
        "top8": [[i, v] for i, v in zip(ids, vals)],
        "l2": float(logits.double().norm()),
    }
    if TOP_K:
        out["topk"] = [[i, v] for i, v in zip(top.indices[:TOP_K].tolist(), top.values[:TOP_K].tolist())]
        out["lse"] = float(torch.logsumexp(logits.double(), 0))
    return out


def run_prompt(v41, ckpt: Path, prompt: list[int], steps: int, max_seq_len: int):
    """Fresh model; prefill at start_pos 0, then `steps` greedy decode steps; returns tokens, logits, stats."""
    model, args, notes = build(v41, ckpt, max_seq_len)
    TIES.reset()
    rows, tokens, step_meta = [], [], []
    with v41.set_dtype(torch.bfloat16), torch.inference_mode():
        _, logits, _ = model(torch.tensor([prompt]), 0)
        for i in range(steps + 1):
            row = logits[0].float()
            if not torch.isfinite(row).all():
                sys.exit(f"non-finite logits at step {i}")
            rows.append(row.clone())
            meta = summarize(row)
            step_meta.append(meta)
            tokens.append(meta["argmax"])
            if i < steps:
                _, logits, _ = model(torch.tensor([[meta["argmax"]]]), len(prompt) + i)
    return torch.stack(rows), tokens, step_meta, notes, args


def run_prompt_dspark(v41, ckpt: Path, prompt: list[int], steps: int, max_seq_len: int, forced: list[int] | None):
    """Fresh model; prefill (seeds the DSpark rings), then `steps` decodes (greedy or `forced`), each + forward_spec."""
    model, args, notes = build(v41, ckpt, max_seq_len)
    TIES.reset()
    main_rows, tokens, records, draft_rows = [], [], [], []
    with v41.set_dtype(torch.bfloat16), torch.inference_mode():
        _, logits, main_hidden = model(torch.tensor([prompt]), 0)
        for i in range(steps + 1):
            row = logits[0].float()
            main_rows.append(row.clone())
            tokens.append(forced[i] if forced else summarize(row)["argmax"])
            start_pos = 0 if i == 0 else len(prompt) + i - 1
            result = model.forward_spec(torch.tensor([tokens[i]]), main_hidden, start_pos)
            if i > 0:
                if result is None:
                    sys.exit(f"forward_spec returned nothing at start_pos {start_pos}")
                out_ids, d_logits, conf = result
                d_logits = d_logits[0].float()
                if not torch.isfinite(d_logits).all() or not torch.isfinite(conf).all():
                    sys.exit(f"non-finite draft logits or confidence at step {i}")
                if int(out_ids[0, 0]) != tokens[i]:
                    sys.exit(f"forward_spec output_ids[0] {int(out_ids[0, 0])} is not the fed token {tokens[i]}")
                rows = [summarize(r) for r in d_logits]
                drafts = out_ids[0, 1:].tolist()
                if drafts != [r["argmax"] for r in rows]:
                    print(f"note: step {i}: torch argmax {drafts} differs from the stable argmax", file=sys.stderr)
                draft_rows.extend(r.clone() for r in d_logits)
                records.append({
                    "step": i,
                    "start_pos": start_pos,
                    "next": tokens[i],
                    "drafts": drafts,
                    "confidence": conf[0].float().tolist(),
                    "rows": [{k: r[k] for k in ("argmax", "margin", "top8")} for r in rows],
                })
            if i < steps:
                _, logits, main_hidden = model(torch.tensor([[tokens[i]]]), len(prompt) + i)
    return torch.stack(main_rows), tokens, records, torch.stack(draft_rows), notes, args


def main_fixture_record(stem: Path, prompt: list[int], steps: int) -> dict:
    """The main fixture's record of `prompt`, which must have at least steps + 1 greedy tokens."""
    rec = next((r for r in json.loads(Path(f"{stem}.json").read_text())["prompts"] if r["prompt"] == prompt), None)
    if rec is None or len(rec["greedy_tokens"]) < steps + 1:
        sys.exit(f"{stem}.json has no prompt of length {len(prompt)} equal to ours with {steps} steps")
    return rec


def check_main_fixture(stem: Path, prompt: list[int], tokens: list[int], main_rows: torch.Tensor):
    """Asserts the main rows equal the committed fixture's rows for the same prompt bit for bit."""
    doc = json.loads(Path(f"{stem}.json").read_text())
    vocab = doc["logits"]["shape"][1]
    rec = main_fixture_record(stem, prompt, len(tokens) - 1)
    n = len(tokens)
    if rec["greedy_tokens"][:n] != tokens:
        sys.exit(f"greedy tokens differ from {stem}.json for prompt length {len(prompt)}")
    ref = np.fromfile(f"{stem}.f32", dtype="<f4").reshape(-1, vocab)[rec["logits_row_offset"]:][:n]
    if not np.array_equal(ref, main_rows.numpy().astype("<f4")):
        sys.exit(f"main logits differ from {stem}.f32 for prompt length {len(prompt)}")


def header(a, ckpt: Path, n_classes: int, notes: list) -> dict:
    """The keys every fixture starts with: format, reference files and patches, environment, checkpoint."""
    files = sorted(p for p in ckpt.rglob("*") if p.is_file())
    return {
        "format_version": FORMAT_VERSION,
        "generator": "tools/golden/run_reference.py",
        "reference": {
            "source": "tenstorrent/tt-metal models/demos/deepseek_v3_d_p/reference/deepseek_v41 (DeepSeek "
                      "V4.1-Flash inference/ @ dba1be0a40aa45a94ad051997016db3960a90277 + kernel_cpu.py)",
            "sha256": {f: sha256(a.ref / f) for f in REF_FILES},
            "patches": [
                "Tensor.topk inside Indexer.forward (incl. select_candidate_blocks) -> stable descending "
                "sort, first k: among equal scores the lower position wins",
                "engram.build_compressed_token_map -> the checkpoint's engram_token_map.u32",
            ] + (["Indexer.forward: key owners set shared_attn.index_k = own k_cache before scoring"]
                 if a.index_keys == "owner" else [])
            + (["diagnostic: GEMM block partials and fp32 F.linear accumulated in float64"] if a.exact_sums else []),
            "index_keys": a.index_keys,
            "exact_sums": a.exact_sums,
        },
        "environment": {
            "torch": torch.__version__, "numpy": np.__version__, "python": platform.python_version(),
            "threads": a.threads, "device": "cpu", "default_dtype": "bfloat16",
        },
        "checkpoint": {
            "make_tiny_cmd": a.make_tiny_cmd,
            "seed": a.seed,
            "sha256": {str(p.relative_to(ckpt)): sha256(p) for p in files},
            "load_notes": notes,
            "engram_compressed_classes": n_classes,
        },
    }


def main_dspark(a, v41, ckpt: Path, prompts: list[list[int]], prompt_src: str, vocab: int, max_seq_len: int,
                n_classes: int):
    """--dspark: per prompt and decode step, the drafter's input token, drafts, confidences and draft logits."""
    t0 = time.time()
    records, blocks, offset, notes, args = [], [], 0, [], None
    for p in prompts:
        t1 = time.time()
        forced = main_fixture_record(a.main_fixture, p, a.steps)["greedy_tokens"] if a.main_fixture else None
        main_rows, tokens, steps, d_rows, notes, args = run_prompt_dspark(v41, ckpt, p, a.steps, max_seq_len, forced)
        if a.main_fixture and not a.exact_sums:
            check_main_fixture(a.main_fixture, p, tokens, main_rows)
        blocks.append(d_rows.numpy().astype("<f4"))
        records.append({
            "prompt": p,
            "prompt_len": len(p),
            "greedy_tokens": tokens,
            "draft_logits_row_offset": offset,
            "n_draft_rows": d_rows.size(0),
            "steps": steps,
            "seconds": round(time.time() - t1, 2),
        })
        offset += d_rows.size(0)
        print(f"prompt len {len(p):4d}: {time.time() - t1:6.1f}s drafts {[s['drafts'] for s in steps[:3]]}...",
              file=sys.stderr)
    json_path, bin_path = Path(f"{a.out}.json"), Path(f"{a.out}.f32")
    bin_path.parent.mkdir(parents=True, exist_ok=True)
    if not a.top:
        np.concatenate(blocks).tofile(bin_path)
    doc = header(a, ckpt, n_classes, notes)
    doc.update({
        "kind": "dspark",
        "model_args": dataclasses.asdict(args),
        "prompts_source": prompt_src,
        "decode_steps": a.steps,
        "main_fixture_checked": str(a.main_fixture) if a.main_fixture else None,
        "draft_logits": {
            "file": bin_path.name,
            "dtype": "f32-le",
            "shape": [offset, vocab],
            "sha256": sha256(bin_path),
        },
        "draft_rule": "step i >= 1: decode of greedy_tokens[i-1] at start_pos = prompt_len+i-1, then "
                      "forward_spec([greedy_tokens[i]], main_hidden, start_pos); the prefill's forward_spec at "
                      "start_pos 0 only seeds the rings; temperature 0: drafts are torch argmax of each row",
        "prompts": records,
        "seconds": round(time.time() - t0, 2),
    })
    json_path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {json_path} and {bin_path} ({offset} rows x {vocab}) in {doc['seconds']}s", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ckpt", type=Path, required=True, help="official-format checkpoint directory")
    ap.add_argument("--out", type=Path, required=True, help="output stem: writes STEM.json and STEM.f32")
    ap.add_argument("--prompts", type=Path, help="JSON list of token-id lists (default: the standard set)")
    ap.add_argument("--lengths", help="standard prompt lengths (default 5,17,40,77,120; with --dspark 40,77)")
    ap.add_argument("--steps", type=int, help="greedy decode steps after the prefill (default 40; with --dspark 16)")
    ap.add_argument("--top", type=int, help="keep each step's top-K logits and log-sum-exp in the JSON, no .f32 "
                    "(a full-vocab model's rows are too big to commit)")
    ap.add_argument("--dspark", action="store_true",
                    help="also run forward_spec after every step and write the drafts instead of main logits")
    ap.add_argument("--main-fixture", type=Path,
                    help="with --dspark: teacher-force this main fixture's greedy tokens (and, without "
                         "--exact-sums, require its main rows bit for bit)")
    ap.add_argument("--index-keys", choices=("reference", "owner"), default="reference",
                    help="reference: upstream index-key quirk; owner: owner's keys on incomplete groups")
    ap.add_argument("--exact-sums", action="store_true",
                    help="diagnostic: float64-accumulated fp32 sums (not upstream numerics; see README)")
    ap.add_argument("--ref", type=Path, default=HERE / "ref" / "deepseek_v41", help="vendored reference package")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 = reproducible sums)")
    ap.add_argument("--make-tiny-cmd", default="", help="command that regenerated --ckpt (recorded)")
    ap.add_argument("--seed", type=int, help="make-tiny seed of --ckpt (recorded)")
    a = ap.parse_args()
    global TOP_K
    TOP_K = a.top
    if a.top and a.dspark:
        sys.exit("--top: main-logit fixtures only, not with --dspark")

    if a.lengths is None:
        a.lengths = "40,77" if a.dspark else "5,17,40,77,120"
    if a.steps is None:
        a.steps = 16 if a.dspark else 40
    torch.set_num_threads(a.threads)
    v41, engram, kernel_cpu = import_reference(a.ref, "model", "engram", "kernel_cpu")
    ckpt = a.ckpt.resolve()
    token_map = np.fromfile(ckpt / "engram_token_map.u32", dtype="<u4").tolist()
    n_classes = patch_token_map(engram, token_map)
    patch_indexer(v41, a.index_keys)
    if a.exact_sums:
        patch_exact_sums(v41, kernel_cpu)

    cfg = json.loads((ckpt / "inference" / "config.json").read_text())
    vocab = cfg["vocab_size"]
    if len(token_map) != vocab:
        sys.exit(f"engram_token_map.u32 has {len(token_map)} ids, vocab is {vocab}")
    if a.prompts:
        prompts = json.loads(a.prompts.read_text())
        prompt_src = str(a.prompts)
    else:
        lengths = [int(x) for x in a.lengths.split(",")]
        prompts = [lcg_prompt(n, seed=1000 + n, lo=4, hi=min(480, vocab)) for n in lengths]
        prompt_src = "lcg_prompt(n, seed=1000+n, lo=4, hi=480): BOS (0) then 64-bit LCG ids"
    if any(not 0 <= t < vocab for p in prompts for t in p):
        sys.exit("a prompt id is outside the vocab")
    need = max(len(p) for p in prompts) + a.steps + 1 + (cfg.get("dspark_block_size", 0) if a.dspark else 0)
    max_seq_len = max(64, math.ceil(need / 32) * 32)

    if a.dspark:
        return main_dspark(a, v41, ckpt, prompts, prompt_src, vocab, max_seq_len, n_classes)
    t0 = time.time()
    records, blocks = [], []
    offset, notes, args = 0, [], None
    for p in prompts:
        t1 = time.time()
        logits, tokens, steps, notes, args = run_prompt(v41, ckpt, p, a.steps, max_seq_len)
        blocks.append(logits.numpy().astype("<f4"))
        records.append({
            "prompt": p,
            "prompt_len": len(p),
            "greedy_tokens": tokens,
            "logits_row_offset": offset,
            "n_rows": len(tokens),
            "steps": steps,
            "indexer_topk_calls": TIES.calls,
            "indexer_rows_with_kth_tie": TIES.rows_with_tie,
            "seconds": round(time.time() - t1, 2),
        })
        offset += len(tokens)
        print(f"prompt len {len(p):4d}: {time.time() - t1:6.1f}s ties {TIES.rows_with_tie} tokens {tokens[:12]}...",
              file=sys.stderr)

    json_path, bin_path = Path(f"{a.out}.json"), Path(f"{a.out}.f32")
    bin_path.parent.mkdir(parents=True, exist_ok=True)
    if not a.top:
        np.concatenate(blocks).tofile(bin_path)
    doc = header(a, ckpt, n_classes, notes)
    doc.update({
        "model_args": {k: v for k, v in dataclasses.asdict(args).items()},
        "prompts_source": prompt_src,
        "decode_steps": a.steps,
        "logits": None if a.top else {
            "file": bin_path.name,
            "dtype": "f32-le",
            "shape": [offset, vocab],
            "sha256": sha256(bin_path),
        },
        "top_k": a.top,
        "greedy_rule": "argmax of fp32 logits, lowest id on ties; step 0 = prefill's last position, step i = "
                       "decode of greedy_tokens[i-1] at start_pos prompt_len+i-1",
        "prompts": records,
        "seconds": round(time.time() - t0, 2),
    })
    json_path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {json_path}{'' if a.top else f' and {bin_path}'} ({offset} rows x {vocab}) in {doc['seconds']}s",
          file=sys.stderr)


if __name__ == "__main__":
    main()
