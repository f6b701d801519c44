"""Trains the gate model teacher-forced on token windows (fixed seeds), fake-quantized as stored; saves a .pt for export.py."""

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

import model as M
from ckpt import load_ckpt, load_train, write
from config import SMALL_HF, Cfg, EngramHasher, load_token_map
from model import Dsv41

HOT = ("fp8_linear", "bf16_linear", "rms_norm", "rope", "attend", "hc_mixes", "hc_pre", "hc_post", "routed_experts")
EAGER = {n: getattr(M, n) for n in HOT}
COMPILED = {}


def use_compiled(on: bool):
    """Swaps model.py's hot elementwise-heavy functions for torch.compile'd ones (GPU training only; evals stay eager)."""
    if on and not COMPILED:
        import torch._dynamo
        torch._dynamo.config.cache_size_limit = 64
        COMPILED.update({n: torch.compile(f, dynamic=False) for n, f in EAGER.items()})
    for n in HOT:
        setattr(M, n, (COMPILED if on else EAGER)[n])


def parse_overrides(items: list[str]) -> dict:
    """`key=JSON` pairs for text_config, e.g. `sliding_window=64`."""
    return {k: json.loads(v) for k, v in (i.split("=", 1) for i in items)}


def windows(stream: np.ndarray, starts: np.ndarray, seq: int) -> torch.Tensor:
    return torch.from_numpy(np.stack([stream[s:s + seq + 1] for s in starts]).astype(np.int64))


@torch.no_grad()
def evaluate(model, hasher, stream, seq, n, batch, device) -> float:
    """Mean NLL (nats/token) over `n` fixed, evenly spaced held-out windows."""
    model.eval()
    starts = np.linspace(0, len(stream) - seq - 2, n).astype(np.int64)
    tot, cnt = 0.0, 0
    for i in range(0, n, batch):
        w = windows(stream, starts[i:i + batch], seq).to(device)
        x, y = w[:, :-1], w[:, 1:]
        logits = model(x, hasher.ids(x))
        tot += F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item()
        cnt += y.numel()
    model.train()
    return tot / cnt


def update_router_bias(model, speed: float):
    """Aux-loss-free balancing (noaux_tc): raise the selection bias of under-loaded experts, lower over-loaded ones."""
    for moe, load in model.moe_loads():
        moe.gate.bias.data += speed * torch.sign(load.mean() - load)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", type=Path, required=True, help="directory from data.py")
    ap.add_argument("--out", type=Path, required=True, help="output .pt")
    ap.add_argument("--set", nargs="*", default=[], help="text_config overrides key=JSON")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--wd", type=float, default=0.01)
    ap.add_argument("--indexer-loss", type=float, default=1.0, help="weight of the indexer's KL to the attention")
    ap.add_argument("--train-tokens", type=int, default=0, help="use only the first N train tokens (0 = all)")
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--eval-windows", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--compact", action="store_true", help="save as ckpt.save_compact parts (GPU calls return ≤ 16 MiB files)")
    ap.add_argument("--init", type=Path, help="start from this checkpoint's weights (.pt or compact parts)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the hot functions (falls back to eager on error)")
    ap.add_argument("--compile-after", type=int, default=0, help="eager for this many steps first, to time both")
    ap.add_argument("--eval-batch", type=int, default=16)
    ap.add_argument("--save-every-eval", action="store_true", help="rewrite the checkpoint at every eval")
    ap.add_argument("--time-limit", type=float, default=0, help="stop after so many seconds (0 = none)")
    ap.add_argument("--max-used", type=int, default=0, help="keep only the N most frequent ids as used rows (0 = all)")
    ap.add_argument("--state", type=Path, help="full state (weights, AdamW, step, clock) saved here at each eval and at the end")
    ap.add_argument("--resume", action="store_true", help="continue from --state (a second call on the warm machine)")
    ap.add_argument("--stop-after", type=float, default=0, help="this call's seconds of training; --time-limit stays the schedule's total")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    hf = json.loads(json.dumps(SMALL_HF))
    hf["text_config"].update(parse_overrides(a.set))
    cfg = Cfg(hf)
    train = load_train(a.data)
    if a.train_tokens:
        train = train[:a.train_tokens]
    train = np.ascontiguousarray(train)
    held = np.ascontiguousarray(np.load(a.data / "heldout.npy"))
    used = torch.zeros(cfg.vocab, dtype=torch.bool)
    ids, counts = np.unique(train, return_counts=True)
    # The shipped model stores used rows only: --max-used keeps the most frequent ids (README, "Size").
    keep = ids[np.argsort(-counts, kind="stable")[:a.max_used]] if a.max_used else ids
    used[torch.from_numpy(keep.astype(np.int64))] = True
    used[[0, 1, 2]] = True
    model = Dsv41(cfg, used)
    if a.init:
        missing, unexpected = model.load_state_dict(load_ckpt(a.init)["state"], strict=False)
        assert not unexpected and all(k.startswith("mtp.") for k in missing), (missing, unexpected)
        print(f"init from {a.init}" + (f"; DSpark stages fresh ({len(missing)} tensors)" if missing else ""))
        assert torch.equal(model.used, used), "--init was trained on another used-id set"
    model = model.to(device)
    if device == "cuda":
        # fp8, fp4 and bf16 operands are exact in TF32, so the quantized forward products do not change
        torch.backends.cuda.matmul.allow_tf32 = True
    want_compile, a.compile = a.compile, False
    ticks = {}
    hasher = EngramHasher(cfg, load_token_map().to(device))
    decay = [p for n, p in model.named_parameters() if p.requires_grad and p.dim() >= 2 and "hc_" not in n]
    rest = [p for n, p in model.named_parameters() if p.requires_grad and not (p.dim() >= 2 and "hc_" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd}, {"params": rest, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95))
    def sched(s: int) -> float:
        """Warmup, then cosine to 10 %; progress is steps or wall time, whichever is further along."""
        frac = max(s / a.steps, (time.time() - t0) / a.time_limit if a.time_limit else 0.0)
        return min(1.0, (s + 1) / a.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))
    log = {"config": hf, "args": {k: str(v) for k, v in vars(a).items()}, "device": device,
           "gpu": torch.cuda.get_device_name() if device == "cuda" else None,
           "train_tokens": int(train.size), "heldout_tokens": int(held.size), "used_vocab": int(used.sum()),
           "params": sum(p.numel() for p in model.parameters()), "steps": [], "evals": []}
    print(f"{log['params']} params, {log['used_vocab']} used ids, train {train.size} tokens, device {device}")
    t0 = start_t = time.time()
    start = 0
    if a.resume:
        st = torch.load(a.state, map_location=device, weights_only=False)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        rng.bit_generator.state, torch_rng, log = st["rng"], st["torch_rng"], st["log"]
        torch.set_rng_state(torch_rng.cpu())
        start, t0 = st["step"], time.time() - st["elapsed"]
        print(f"resumed at step {start}, {st['elapsed']:.0f}s of the schedule done", flush=True)
    step, mark = start, (start, time.time())
    for step in range(start, a.steps):
        for g in opt.param_groups:
            g["lr"] = a.lr * sched(step)
        w = windows(train, rng.integers(0, len(train) - a.seq - 2, a.batch), a.seq).to(device)
        x, y = w[:, :-1], w[:, 1:]
        ticks[step] = time.time()
        if want_compile and step == start + a.compile_after:
            a.compile = True
            use_compiled(True)
        if want_compile and step == start + a.compile_after + 25 and a.compile:
            keep_faster(a, ticks, step, start)
        careful = step == start or (want_compile and step == start + a.compile_after)
        loss, aux = first_step(model, hasher, x, y, opt, a) if careful else step_loss(model, hasher, x, y, opt, a.indexer_loss)
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        update_router_bias(model, 1e-3)
        log["steps"].append([step, round(loss.item(), 4), round(gn.item(), 3), round(time.time() - t0, 1),
                             round(aux.item(), 4)])
        if step % 10 == 0:
            now = time.time()
            rate = (step - mark[0]) * a.batch * a.seq / max(now - mark[1], 1e-9)
            mark = (step, now)
            print(f"step {step} loss {loss.item():.4f} indexer-kl {aux.item():.4f} gnorm {gn.item():.2f} "
                  f"{now - t0:.0f}s {rate:.0f} tok/s", flush=True)
        last = step + 1 == a.steps or (a.time_limit and time.time() - t0 > a.time_limit) or \
            (a.stop_after and time.time() - start_t > a.stop_after)
        if (step + 1) % a.eval_every == 0 or last:
            use_compiled(False)
            nll = evaluate(model, hasher, held, a.seq, a.eval_windows, a.eval_batch, device)
            use_compiled(a.compile)
            log["evals"].append([step + 1, round(nll, 4)])
            print(f"eval step {step + 1} held-out nll {nll:.4f} ppl {math.exp(nll):.1f}", flush=True)
            if a.save_every_eval and not last:
                save(model, hf, log, a, step + 1, t0)
            if a.state:
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step + 1,
                            "elapsed": time.time() - t0, "rng": rng.bit_generator.state,
                            "torch_rng": torch.get_rng_state(), "log": log}, a.state)
        if last:
            break
    save(model, hf, log, a, step + 1, t0)


def keep_faster(a, ticks, step, start):
    """Compiled steps 5..25 against the eager steps before them; back to eager if compiling did not pay."""
    n = start + a.compile_after
    eager = (n - start - 10) / (ticks[n] - ticks[start + 10]) if n > start + 10 else 0.0
    comp = 20 / (ticks[step] - ticks[step - 20])
    print(f"steps/s eager {eager:.3f} compiled {comp:.3f} (batch {a.batch})", flush=True)
    if comp < eager:
        a.compile = False
        use_compiled(False)


def first_step(model, hasher, x, y, opt, a):
    """Step 0 with fallbacks: out of memory halves the batch, any other error under compile turns compile off."""
    while True:
        try:
            out = step_loss(model, hasher, x[:a.batch], y[:a.batch], opt, a.indexer_loss)
            if x.is_cuda:
                print(f"peak memory so far {torch.cuda.max_memory_allocated() / 2 ** 30:.1f} GiB", flush=True)
            return out
        except torch.OutOfMemoryError:
            opt.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            a.batch //= 2
            print(f"out of memory; batch {a.batch} from here", flush=True)
        except Exception as e:
            if not a.compile:
                raise
            print(f"compile failed ({type(e).__name__}: {str(e)[:300]}); eager from here", flush=True)
            a.compile = False
            use_compiled(False)


def step_loss(model, hasher, x, y, opt, indexer_weight):
    """Forward with the used-row loss (exact full-vocabulary NLL, train targets are all used ids) and backward."""
    loss = model.used_nll(x, hasher.ids(x), y)
    aux = model.aux if model.aux is not None else torch.zeros((), device=x.device)
    opt.zero_grad(set_to_none=True)
    (loss + indexer_weight * aux).backward()
    return loss, aux


def save(model, hf, log, a, steps, t0):
    log["steps_done"], log["compiled"] = steps, a.compile
    log["seconds"] = round(time.time() - t0, 1)
    write({"hf": hf, "state": {k: v.cpu() for k, v in model.state_dict().items()}, "log": log}, a.out, a.compact)


if __name__ == "__main__":
    main()
