#!/usr/bin/env python3
"""The gate's noise floor: DeepSeek's V4.1 reference against itself under a change of order (README §8)."""

import argparse
import copy
import hashlib
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

import run_reference as rr
from ref_import import REF_FILES, import_reference

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
COMPARISONS = {
    "order": "head prefilled whole (one start_pos-0 call) vs fed token by token from position 0",
    "threads": "the same schedule (head prefilled whole) with torch threads {a} vs {b}",
    "prefill": "every scored row from a decode step (head prefilled whole) vs from one prefill of the whole prompt",
    "device": "the same schedule (head prefilled whole, decode steps after) on {d} vs on the CPU",
    "ours-exact": "the reference (head whole, decode steps) vs our CPU forward's default path (head prefilled, windows of 16)",
    "ours-sequential-sums": "the reference (head whole, decode steps) vs our CPU forward with sequential sums (head prefilled, windows of 16)",
}


def ours_rows(a, switch: str, ids: list, head: int) -> np.ndarray:
    """Our CPU forward (crates/tf-dsv41/examples/gate_rows.rs) on ids: the rows from ids[:head]'s last on, as f32."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        seqs, out = Path(d) / "seqs.json", Path(d) / "rows.f32"
        seqs.write_text(json.dumps([{"ids": ids, "head": head}]))
        subprocess.run([str(a.ours), str(a.ckpt), str(seqs), str(out), switch], check=True)
        return np.fromfile(out, dtype="<f4").reshape(len(ids) - head + 1, -1)


class Ours:
    """Our CPU forward as a compared side: every scored row of a prompt from one run of gate_rows."""

    def __init__(self, a, switch: str):
        self.a, self.switch, self.seconds = a, switch, 0.0

    def head(self, ids: list[int], head: int, upto: int) -> np.ndarray:
        t = time.time()
        self.rows, self.first = ours_rows(self.a, self.switch, ids[:upto], head), head - 1
        self.seconds += time.time() - t
        return self.rows[0]

    def step(self, tok: int, pos: int) -> np.ndarray:
        return self.rows[pos - self.first]


# ---------------------------------------------------------------------------- statistics (as xtask/src/gate_stats.rs)

def tally(rows: dict, kind: str, r: dict):
    """Counts one scored row under its prompt's kind and under `all`."""
    rows.setdefault(kind, []).append(r)
    rows.setdefault("all", []).append(r)


def log_softmax64(x: np.ndarray) -> np.ndarray:
    """f64 log-softmax of an f32 row: one max (taken in f32, as the gate does), one sum."""
    m = float(x.max())
    x64 = x.astype(np.float64)
    return x64 - (math.log(np.exp(x64 - m).sum()) + m)


def score_row(exact: np.ndarray, cand: np.ndarray, nxt: int) -> dict:
    """KL(exact ‖ cand), greedy agreement (np.argmax takes the lowest id on ties), top-1 and NLL for `nxt`."""
    lp, lq = log_softmax64(exact), log_softmax64(cand)
    finite = lp != -np.inf
    kl = float((np.exp(lp[finite]) * (lp[finite] - lq[finite])).sum())
    ge, gc = int(np.argmax(exact)), int(np.argmax(cand))
    return {
        "kl": max(kl, 0.0), "agree": ge == gc, "hit_exact": ge == nxt, "hit_cand": gc == nxt,
        "nll_exact": -float(lp[nxt]), "nll_cand": -float(lq[nxt]),
        "identical": bool(np.array_equal(exact.view(np.uint32), cand.view(np.uint32))),
        "max_abs_dlogit": float(np.abs(exact.astype(np.float64) - cand.astype(np.float64)).max()),
    }


def quantile(sorted_vals: list, q: float) -> float:
    """Nearest-rank quantile of sorted values (0 for none), as the gate's."""
    if not sorted_vals:
        return 0.0
    rank = min(max(math.ceil(q * len(sorted_vals)), 1), len(sorted_vals))
    return sorted_vals[rank - 1]


def summary(rows: list) -> dict:
    """The gate's Summary::to_json keys, plus bit-identical rows and the largest |Δlogit| (extras)."""
    n = len(rows)
    per = (lambda x: x / n) if n else (lambda x: 0.0)
    kl = sorted(r["kl"] for r in rows)
    return {
        "positions": n,
        "kl_mean": per(sum(r["kl"] for r in rows)),
        "kl_p99": quantile(kl, 0.99),
        "kl_max": kl[-1] if kl else 0.0,
        "greedy_agreement": per(sum(r["agree"] for r in rows)),
        "top1_exact": per(sum(r["hit_exact"] for r in rows)),
        "top1_candidate": per(sum(r["hit_cand"] for r in rows)),
        "nll_exact": per(sum(r["nll_exact"] for r in rows)),
        "nll_candidate": per(sum(r["nll_cand"] for r in rows)),
        "identical_rows": sum(r["identical"] for r in rows),
        "max_abs_dlogit": max((r["max_abs_dlogit"] for r in rows), default=0.0),
    }


# ---------------------------------------------------------------------------- prompts

def load_prompts(path: Path, ids_file: Path | None, ckpt: Path, bos: int, max_len: int):
    """The gate's prompt set as ids: texts via the checkpoint's tokenizer plus BOS; chats only from --ids."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(ckpt / "tokenizer.json"))
    given = {}
    if ids_file:
        doc = json.loads(ids_file.read_text())
        given = {p["name"]: p for p in (doc["prompts"] if isinstance(doc, dict) else doc)}
    out, skipped = [], []
    for p in json.loads(path.read_text())["prompts"]:
        name, kind = p.get("name", "?"), p.get("kind", "text")
        if name in given:
            ids = [int(t) for t in given[name]["ids"]]
        elif isinstance(p.get("text"), str):
            ids = tok.encode(p["text"], add_special_tokens=False).ids
        else:
            skipped.append(f"{name} ({kind}): a chat, and --ids gives no ids for it")
            continue
        if not ids or ids[0] != bos:
            ids.insert(0, bos)
        if len(ids) > max_len:
            print(f"noise_floor: prompt {name}: {len(ids)} tokens cut to {max_len}", file=sys.stderr)
            ids = ids[:max_len]
        out.append({"name": name, "kind": kind, "ids": ids})
    return out, skipped


# ---------------------------------------------------------------------------- the reference, run two ways

class Reference:
    """The patched reference package and the converted checkpoint, from which fresh models are built per run."""

    def __init__(self, ref: Path, ckpt: Path, index_keys: str, max_seq_len: int):
        self.v41, engram = import_reference(ref, "model", "engram")
        token_map = np.fromfile(ckpt / "engram_token_map.u32", dtype="<u4").tolist()
        self.n_classes = rr.patch_token_map(engram, token_map)
        rr.patch_indexer(self.v41, index_keys)
        model, self.args, self.notes = rr.build(self.v41, ckpt, max_seq_len)
        self.state = model.state_dict()

    def fresh(self, device: str = "cpu"):
        """A new Transformer (empty caches) holding the same weights on `device`: nothing carries over between runs."""
        with self.v41.set_dtype(torch.bfloat16):
            model = self.v41.Transformer(self.args, tokenizer=None)
        model.load_state_dict(self.state, strict=True)
        if device != "cpu":
            # FP4 and E8M0 tensors travel as bytes: a plain .to() of those dtypes is not supported everywhere.
            model._apply(lambda t: t.to(device) if t.element_size() > 1 else t.view(torch.uint8).to(device).view(t.dtype))
        return model.eval()


# The device the reference last ran on, and kernel_cpu's module-level tables (FP4 values, E2M1 midpoints) on each.
DEVICE = {"last": None, "tables": {}}


def use_device(v41, dev):
    """Points the reference at `dev` when it changes: its per-shape index caches cleared, kernel_cpu's tables moved there."""
    if dev == DEVICE["last"]:
        return
    for f in vars(v41).values():
        getattr(f, "cache_clear", lambda: None)()
    kern = sys.modules[v41.__name__.rsplit(".", 1)[0] + ".kernel_cpu"]
    tables = DEVICE["tables"]
    if not tables:
        tables[torch.device("cpu")] = {k: t for k, t in vars(kern).items() if isinstance(t, torch.Tensor)}
    if dev not in tables:
        tables[dev] = {k: t.to(dev) for k, t in tables[torch.device("cpu")].items()}
    for k, t in tables[dev].items():
        setattr(kern, k, t)
    DEVICE["last"] = dev


def call(model, v41, ids: list[int], start_pos: int, threads: int) -> np.ndarray:
    """One reference forward at `threads` torch threads; its logits row (the last position's) as f32."""
    torch.set_num_threads(threads)
    dev = next(model.parameters()).device
    use_device(v41, dev)
    # Upstream runs with CUDA as the default device; tensors the forward makes land beside the weights.
    with v41.set_dtype(torch.bfloat16), torch.inference_mode(), torch.device(dev):
        _, logits, _ = model(torch.tensor([ids]), start_pos)
    row = logits[0].float().cpu().numpy().copy()
    if not np.isfinite(row).all():
        sys.exit(f"non-finite logits at start_pos {start_pos}")
    return row


class Schedule:
    """One way of feeding a prompt: its head whole or token by token, then one decode step per scored position."""

    def __init__(self, ref: Reference, whole: bool, threads: int, device: str = "cpu"):
        self.ref, self.whole, self.threads, self.device = ref, whole, threads, device
        self.seconds = 0.0

    def head(self, ids: list[int], head: int, upto: int) -> np.ndarray:
        """A fresh model fed ids[:head]; the logits for the position after it."""
        t = time.time()
        self.model = self.ref.fresh(self.device)
        ids = ids[:head]
        if self.whole:
            row = call(self.model, self.ref.v41, ids, 0, self.threads)
        else:
            for pos, tok in enumerate(ids):
                row = call(self.model, self.ref.v41, [tok], pos, self.threads)
        self.seconds += time.time() - t
        return row

    def step(self, tok: int, pos: int) -> np.ndarray:
        t = time.time()
        row = call(self.model, self.ref.v41, [tok], pos, self.threads)
        self.seconds += time.time() - t
        return row


def prefill_rows(ref: Reference, ids: list, head: int, threads: int) -> np.ndarray:
    """One start_pos-0 prefill of ids on a fresh model: the logits of every row from ids[head - 1] on."""
    model = ref.fresh()
    full = type(model.head).forward
    # The reference's head returns only the last row; keep rows from the head's last position on (the scored ones).
    model.head.forward = lambda x: full(model.head, x[:, head - 1:], full_logits=True)
    return call(model, ref.v41, ids, 0, threads)


class WholePrompt:
    """The prompt through its last scored position in one start_pos-0 prefill; every scored row from its logits."""

    def __init__(self, ref: Reference, threads: int):
        self.ref, self.threads = ref, threads
        self.seconds = 0.0

    def head(self, ids: list[int], head: int, upto: int) -> np.ndarray:
        t = time.time()
        self.rows, self.first = prefill_rows(self.ref, ids[:upto], head, self.threads), head - 1
        self.seconds += time.time() - t
        return self.rows[0]

    def step(self, tok: int, pos: int) -> np.ndarray:
        return self.rows[pos - self.first]


def run(prompts: list, ref: Reference, a) -> tuple[dict, dict]:
    """Teacher-forces every prompt through the base schedule and each compared one in lockstep; rows per comparison."""
    base = Schedule(ref, whole=True, threads=a.threads)
    others = {}
    if "order" in a.compare:
        others["order"] = Schedule(ref, whole=False, threads=a.threads)
    if "threads" in a.compare:
        others["threads"] = Schedule(ref, whole=True, threads=a.threads_b)
    if "device" in a.compare:
        others["device"] = Schedule(ref, whole=True, threads=a.threads, device=a.device_b)
    for c in (c for c in a.compare if c.startswith("ours-")):
        others[c] = Ours(a, c.removeprefix("ours-"))
    if "prefill" in a.compare:
        others["prefill"] = WholePrompt(ref, threads=a.threads)
    rows = {c: {} for c in others}
    left = a.max_positions if a.max_positions is not None else sys.maxsize
    for p in prompts:
        ids, n = p["ids"], len(p["ids"])
        head = min(max(int(n * a.prefill_frac), 1), max(n - 1, 1))
        if head >= n or left == 0:
            continue
        want = min(n - head, left, a.prompt_positions or sys.maxsize)
        # --only keeps the whole set's schedule (what --max-positions leaves each prompt) and runs just these prompts.
        if a.only and p["name"] not in a.only:
            left -= want
            continue
        t0 = time.time()
        e = base.head(ids, head, head + want - 1)
        got = {c: s.head(ids, head, head + want - 1) for c, s in others.items()}
        for i in range(want):
            if i:
                pos = head + i - 1
                e = base.step(ids[pos], pos)
                got = {c: s.step(ids[pos], pos) for c, s in others.items()}
            for c, row in got.items():
                tally(rows[c], p["kind"], score_row(e, row, ids[head + i]))
        left -= want
        print(f"noise_floor: {p['name']} ({p['kind']}): {want} positions after a {head}-token head, "
              f"{time.time() - t0:.1f}s", file=sys.stderr)
    seconds = {"base": base.seconds} | {c: s.seconds for c, s in others.items()}
    return rows, seconds


def cut_heads(n: int, fracs: list) -> list:
    """The distinct head lengths of a prompt of n tokens at each cut, as the gate's `--cuts` (int(n * f) in [1, n-1])."""
    return sorted({min(max(int(n * f), 1), max(n - 1, 1)) for f in fracs})


class Fed:
    """The order side of greedy rows: one model fed the prompt token by token once, copied at each cut."""

    def __init__(self, ref: Reference, ids: list, threads: int):
        self.ref, self.ids, self.threads = ref, ids, threads
        self.model, self.fed, self.row = ref.fresh(), 0, None

    def upto(self, head: int):
        """A copy of the model fed ids[:head] and the logits for the position after it."""
        for pos in range(self.fed, head):
            self.row = call(self.model, self.ref.v41, [self.ids[pos]], pos, self.threads)
        self.fed = head
        # Parameters are shared (they carry their scales as attributes, which deepcopy drops); caches are copied.
        return copy.deepcopy(self.model, {id(w): w for w in self.model.parameters()}), self.row


def greedy_side(comp: str, ref: Reference, fed: Fed, ids: list, head: int, toks: list, a) -> list:
    """One comparison's rows teacher-forced on the base's greedy tokens after ids[:head]."""
    v41, threads = ref.v41, (a.threads_b if comp == "threads" else a.threads)
    if comp.startswith("ours-"):
        return list(ours_rows(a, comp.removeprefix("ours-"), ids[:head] + toks[:-1], head))
    if comp == "prefill":
        return list(prefill_rows(ref, ids[:head] + toks[:-1], head, threads))
    if comp == "order":
        model, row = fed.upto(head)
    else:
        model = ref.fresh(a.device_b if comp == "device" else "cpu")
        row = call(model, v41, ids[:head], 0, threads)
    out = [row]
    for i, tok in enumerate(toks[:-1]):
        out.append(call(model, v41, [tok], head + i, threads))
    return out


def run_greedy(prompts: list, ref: Reference, a) -> tuple[dict, dict]:
    """Greedy rows: at each cut the base (head whole, decode steps) generates --greedy tokens; the others follow them."""
    rows = {c: {} for c in a.compare}
    seconds = {"base": 0.0} | {c: 0.0 for c in a.compare}
    for p in prompts:
        if a.only and p["name"] not in a.only:
            continue
        ids, t0 = p["ids"], time.time()
        fed = Fed(ref, ids, a.threads) if "order" in a.compare else None
        for head in cut_heads(len(ids), a.cuts):
            t = time.time()
            model = ref.fresh()
            e = call(model, ref.v41, ids[:head], 0, a.threads)
            base, toks = [], []
            # The base stops after scoring an end of text, as a reply would.
            while len(toks) < min(a.greedy, a.max_seq - head) and (not toks or toks[-1] != a.eos):
                if toks:
                    e = call(model, ref.v41, [toks[-1]], head + len(toks) - 1, a.threads)
                base.append(e)
                toks.append(int(np.argmax(e)))
            seconds["base"] += time.time() - t
            for comp in a.compare:
                t = time.time()
                got = greedy_side(comp, ref, fed, ids, head, toks, a)
                seconds[comp] += time.time() - t
                for ex, row, tok in zip(base, got, toks):
                    tally(rows[comp], p["kind"], score_row(ex, row, tok))
        print(f"noise_floor: {p['name']} ({p['kind']}): greedy rows at heads {cut_heads(len(ids), a.cuts)}, "
              f"{time.time() - t0:.1f}s", file=sys.stderr)
    return rows, seconds


# ---------------------------------------------------------------------------- receipts

def shards_sha256(ckpt: Path) -> str:
    """sha256 over the .safetensors shards in name order: the gate's model_sha256 (checkpoint_sha256)."""
    h = hashlib.sha256()
    for shard in sorted(p for p in ckpt.iterdir() if p.suffix == ".safetensors"):
        with open(shard, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def receipt(comparison: str, rows: dict, a, ref: Reference, ckpt: Path, sha: str, skipped: list, seconds: dict) -> dict:
    """One comparison in the shape of `cargo xtask gate --out`, plus what produced it."""
    threads_b = a.threads_b if comparison == "threads" else a.threads
    on_gpu = comparison == "device" and a.device_b.startswith("cuda")
    return {
        "model": str(ckpt), "model_sha256": sha, "device": "cpu",
        "comparison": comparison,
        "exact": f"reference, head prefilled whole, decode steps after, {a.threads} torch thread(s)",
        "candidate": {"order": f"reference, head fed token by token from position 0, {a.threads} torch thread(s)",
                      "threads": f"reference, head prefilled whole, decode steps after, {threads_b} torch thread(s)",
                      "prefill": f"reference, the prompt through its last scored position prefilled whole in one call, "
                                 f"every row's logits, {a.threads} torch thread(s)",
                      "device": f"reference, head prefilled whole, decode steps after, on {a.device_b}"}.get(
            comparison, f"our CPU forward ({comparison.removeprefix('ours-')}): head prefilled, decode windows of 16"),
        "description": COMPARISONS[comparison].format(a=a.threads, b=a.threads_b, d=a.device_b),
        "rows": f"greedy: {a.greedy} tokens the exact side generates at heads {a.cuts} of each prompt" if a.greedy
        else "text: the prompt's own next tokens", "greedy": a.greedy, "cuts": a.cuts if a.greedy else None,
        "prefill_frac": a.prefill_frac, "window": 1, "max_positions": a.max_positions, "max_len": a.max_len,
        "prompt_positions": a.prompt_positions,
        "prompts": str(a.prompts), "ids": str(a.ids) if a.ids else None, "skipped_prompts": skipped,
        "by_kind": {k: summary(v) for k, v in sorted(rows.items())},
        "reference": {
            "sha256": {f: rr.sha256(a.ref / f) for f in REF_FILES},
            "index_keys": a.index_keys,
            "patches": ["Tensor.topk inside Indexer.forward -> stable descending sort, first k (lower position wins)",
                        "engram.build_compressed_token_map -> the checkpoint's engram_token_map.u32"]
            + (["Indexer.forward: key owners score against their own k_cache"] if a.index_keys == "owner" else []),
            "load_notes": ref.notes,
        },
        "environment": {
            "torch": torch.__version__, "numpy": np.__version__, "python": platform.python_version(),
            "threads": {"exact": a.threads, "candidate": threads_b},
            "torch_parallel": [l.strip() for l in torch.__config__.parallel_info().splitlines() if "MP " in l][:1],
            "gpu": torch.cuda.get_device_name(torch.device(a.device_b)) if on_gpu else None,
            "cuda_bf16_reduced_precision_reduction":
                torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction if on_gpu else None,
        },
        "model_args": {"max_seq_len": ref.args.max_seq_len, "max_batch_size": 1, "temperature": 0.0},
        "seconds": {"exact": round(seconds["base"], 2), "candidate": round(seconds[comparison], 2)},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ckpt", type=Path, help="official-format checkpoint directory (the gate model); not with --merge")
    ap.add_argument("--out", type=Path, required=True, help="output stem: writes STEM.COMPARISON.json")
    ap.add_argument("--compare", default="order,threads", help="comma list of: order, threads, prefill")
    ap.add_argument("--prompts", type=Path, default=ROOT / "assets/gate/prompts.json", help="the gate's prompt set")
    ap.add_argument("--ids", type=Path,
                    help="JSON {prompts: [{name, ids}]}: token ids by prompt name (chats need it; wins over text)")
    ap.add_argument("--prefill-frac", type=float, default=0.5, help="share of each prompt in the head (gate: 0.5)")
    ap.add_argument("--max-positions", type=int, help="stop after this many scored positions (gate's flag)")
    ap.add_argument("--prompt-positions", type=int, help="text rows: score at most this many positions of each prompt")
    ap.add_argument("--greedy", type=int, default=0,
                    help="score greedy rows instead: this many tokens the base generates at each cut (gate's --greedy)")
    ap.add_argument("--cuts", default="0.125,0.25,0.375,0.5", help="greedy rows: the heads, as shares of each prompt")
    ap.add_argument("--max-len", type=int, help="cut every prompt to this many tokens first (mechanics runs only)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the exact side and of order")
    ap.add_argument("--threads-b", type=int, default=2, help="torch threads of the threads comparison's candidate")
    ap.add_argument("--device-b", default="cuda", help="torch device of the device comparison's candidate")
    ap.add_argument("--ours", type=Path, help="the gate_rows example binary, for the ours-exact and ours-sequential-sums comparisons")
    ap.add_argument("--index-keys", choices=("owner", "reference"), default="owner",
                    help="owner: our exact path's rule (spec §6.5); reference: upstream's stale keys")
    ap.add_argument("--ref", type=Path, default=HERE / "ref" / "deepseek_v41", help="vendored reference package")
    ap.add_argument("--only", help="comma list of prompt names to run (one shard of a parallel run; see --merge)")
    ap.add_argument("--merge", type=Path, nargs="+", help="output stems of shards: write --out's receipts from their rows")
    a = ap.parse_args()
    a.only = {n.strip() for n in a.only.split(",")} if a.only else None
    a.compare = [c.strip() for c in a.compare.split(",") if c.strip()]
    a.cuts = [float(f) for f in a.cuts.split(",") if f.strip()]
    if a.greedy < 0 or any(not 0.0 <= f < 1.0 for f in a.cuts):
        sys.exit("--greedy: tokens at each cut (0: text rows); --cuts: shares in [0, 1)")
    if not a.compare or any(c not in COMPARISONS for c in a.compare):
        sys.exit(f"--compare: a comma list of {sorted(COMPARISONS)}")
    if a.merge:
        return merge(a)
    if any(c.startswith("ours-") for c in a.compare) and not (a.ours and a.ours.is_file()):
        sys.exit("--ours: the gate_rows binary (cargo build --release -p tf-dsv41 --example gate_rows)")
    if not 0.0 <= a.prefill_frac < 1.0:
        sys.exit("--prefill-frac: in [0, 1)")

    if a.ckpt is None:
        sys.exit("--ckpt: the checkpoint to run (only --merge goes without)")
    ckpt = a.ckpt.resolve()
    cfg = json.loads((ckpt / "inference" / "config.json").read_text())
    hf = json.loads((ckpt / "config.json").read_text())
    bos = hf.get("bos_token_id", cfg.get("bos_token_id", 0))
    a.eos = hf.get("eos_token_id", cfg.get("eos_token_id", 1))
    cap, a.max_seq = cfg["max_seq_len"] - 1, cfg["max_seq_len"]
    if a.max_len:
        cap = min(cap, a.max_len)
    prompts, skipped = load_prompts(a.prompts, a.ids, ckpt, bos, cap)
    for s in skipped:
        print(f"noise_floor: skipped {s}", file=sys.stderr)
    longest = max(len(p["ids"]) for p in prompts)
    ref = Reference(a.ref, ckpt, a.index_keys, max(64, math.ceil((longest + a.greedy + 1) / 32) * 32))
    sha = shards_sha256(ckpt)
    t0 = time.time()
    rows, seconds = (run_greedy if a.greedy else run)(prompts, ref, a)
    for c in a.compare:
        doc = receipt(c, rows[c], a, ref, ckpt, sha, skipped, seconds)
        doc["seconds"]["total"] = round(time.time() - t0, 2)
        doc["only"] = sorted(a.only) if a.only else None
        path = Path(f"{a.out}.{c}.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=1) + "\n")
        Path(f"{a.out}.{c}.rows.json").write_text(json.dumps(rows[c]) + "\n")
        print_summary(c, doc)
        print(f"wrote {path}", file=sys.stderr)


def print_summary(c: str, doc: dict):
    for kind, s in doc["by_kind"].items():
            print(f"{c:<8} {kind:<6} {s['positions']:>6} pos  KL mean {s['kl_mean']:.3e} p99 {s['kl_p99']:.3e} "
                  f"max {s['kl_max']:.3e}  agree {s['greedy_agreement']:.4f}  top-1 {s['top1_exact']:.4f} -> "
                  f"{s['top1_candidate']:.4f}  NLL {s['nll_exact']:.4f} -> {s['nll_candidate']:.4f}  "
                  f"identical {s['identical_rows']}")


def merge(a):
    """One receipt per comparison from shards run with --only: their rows pooled, statistics recomputed, seconds added."""
    for c in a.compare:
        docs = [json.loads(Path(f"{m}.{c}.json").read_text()) for m in a.merge]
        pooled: dict = {}
        for m in a.merge:
            for kind, rs in json.loads(Path(f"{m}.{c}.rows.json").read_text()).items():
                pooled.setdefault(kind, []).extend(rs)
        shas = {d["model_sha256"] for d in docs}
        if len(shas) != 1:
            sys.exit(f"--merge: shards of different models {sorted(shas)}")
        doc = dict(docs[0])
        doc["by_kind"] = {k: summary(v) for k, v in sorted(pooled.items())}
        doc["only"] = None
        doc["merged_from"] = [str(m) for m in a.merge]
        doc["seconds"] = {k: round(sum(d["seconds"].get(k, 0.0) for d in docs), 2) for k in docs[0]["seconds"]}
        path = Path(f"{a.out}.{c}.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=1) + "\n")
        print_summary(c, doc)
        print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
