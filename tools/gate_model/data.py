"""MIT/Apache-2.0 Rust sources → DeepSeek-V4 token streams (train.npy, heldout.npy, heldout_v1.npy, split by crate) and a licence manifest."""

import argparse
import hashlib
import json
import re
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from config import ASSETS

BOS, EOS = 0, 1
PERMISSIVE = re.compile(r"\b(MIT|Apache-2\.0)\b")
COPYLEFT = re.compile(r"GPL|MPL|EPL|CDDL|SSPL", re.I)
# Generated bindings and data tables: bytes of code nobody wrote, which would swamp hand-written Rust (first data set: linux-raw-sys and libc were 29 % of train tokens).
SKIP = re.compile(r"^(windows|winapi|web-sys$|js-sys$|aws-sdk-|aws-smithy-|google-.*\d|azure_mgmt|libc$|tzdata|chrono-tz)"
                  r"|[-_]sys$|icu_.*data|^unicode-.*(data|tables?)$|^stdweb|^x11|^wayland-protocols|^objc2-|^gtk|^ash$|^metal$")
# A generator's header in a file's first KiB (tracing's 10 MB of macro tests, syn's gen/ files): generated text, not written code.
GENERATED = re.compile(r"@generated|DO NOT EDIT|(automatically|auto-?)\s?generated|(file|code) (is|was) (auto)?generated", re.I)


def crate_licence(crate_dir: Path) -> str | None:
    """The `license` expression of a crate's Cargo.toml, or None when it has none."""
    toml = crate_dir / "Cargo.toml"
    if not toml.is_file():
        return None
    m = re.search(r'^license\s*=\s*"([^"]+)"', toml.read_text(errors="replace"), re.M)
    return m.group(1) if m else None


def crate_name(crate_dir: Path) -> str:
    """`syn-2.0.1` → `syn`: every version of a crate lands in the same split."""
    return re.sub(r"-\d+\.\d+\.\d+.*$", "", crate_dir.name)


def version_key(crate_dir: Path) -> tuple[tuple, tuple]:
    """(semver-compatible series, version) of `name-1.2.3`: one crate keeps one version per series, the newest."""
    m = re.search(r"-(\d+)\.(\d+)\.(\d+)([^/]*)$", crate_dir.name)
    v = tuple(map(int, m.groups()[:3])) + ((not m.group(4).startswith("-")),) if m else (0, 0, 0, False)
    return (v[0],) if v[0] else (0, v[1]) if v[1] else v[:3], v


def newest_per_series(crates: list[Path]) -> tuple[list[Path], list[Path]]:
    """Drop older versions within a semver series (e.g. the registry's syn-2.0.100 when the fetch brought syn-2.0.119): near-duplicate text."""
    best: dict[tuple, Path] = {}
    for c in crates:
        k = (crate_name(c), version_key(c)[0])
        if k not in best or version_key(c)[1] > version_key(best[k])[1]:
            best[k] = c
    kept = set(best.values())
    return [c for c in crates if c in kept], [c for c in crates if c not in kept]


def lock_order(lock: Path) -> list[str]:
    """Crate dir names (`name-version`) of fetch_crates.py's lock list, in BFS order."""
    rows = [ln.split("\t") for ln in lock.read_text().splitlines() if ln and not ln.startswith("#")]
    return [f"{r[0]}-{r[1]}" for r in rows]


def rs_files(c: Path, max_bytes: int) -> list[tuple[str, str]]:
    """(sha256, text) of a crate's .rs files up to max_bytes, in path order."""
    out = []
    for f in sorted(c.rglob("*.rs")):
        if f.is_file() and f.stat().st_size <= max_bytes:
            text = f.read_text(errors="replace")
            if GENERATED.search(text[:1024]):
                continue
            out.append((hashlib.sha256(text.encode()).hexdigest(), text))
    return out


def is_heldout(name: str, percent: int) -> bool:
    return int(hashlib.sha256(name.encode()).hexdigest(), 16) % 100 < percent


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, nargs="+", default=sorted(Path.home().glob(".cargo/registry/src/*")))
    ap.add_argument("--fetched", type=Path, help="fetch_crates.py's cache; only crates of --lock are used, in lock order, after --src")
    ap.add_argument("--lock", type=Path, default=Path(__file__).with_name("crates.lock.tsv"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--heldout-percent", type=int, default=8)
    ap.add_argument("--max-file-bytes", type=int, default=200_000, help="skip generated giants (tables, bindings)")
    ap.add_argument("--max-train-tokens", type=int, default=0, help="cap (0: none): train crates past it, in order, are dropped whole")
    ap.add_argument("--v1", type=Path, default=Path(__file__).with_name("data_manifest.json"),
                    help="a manifest: heldout_v1.npy holds the files of its heldout_v1_crates (else its held-out crates), so NLLs stay comparable")
    ap.add_argument("--manifest", type=Path, help="use exactly the crates and splits of this manifest (reproduces a data set)")
    a = ap.parse_args()
    tok = Tokenizer.from_file(str(ASSETS / "tokenizer.json"))
    crates = sorted({c for root in a.src for c in root.iterdir() if c.is_dir()})
    rank = {c.name: -1 for c in crates}
    if a.fetched:
        order = lock_order(a.lock)
        rank.update({n: i for i, n in enumerate(order) if n not in rank})
        crates += [a.fetched / n for n in order if rank[n] >= 0]
        missing = [n for n in order if not (a.fetched / n).is_dir()]
        assert not missing, f"crates of the lock not fetched (run fetch_crates.py --lock): {missing[:5]}"
    if a.manifest:
        keep = {c["crate"] for c in json.loads(a.manifest.read_text())["crates"] if c["split"] in ("train", "heldout")}
        missing = keep - {c.name for c in crates}
        assert not missing, f"crates of the manifest not in the registry: {sorted(missing)}"
        crates = [c for c in crates if c.name in keep]
    crates, older = newest_per_series(crates)
    old = json.loads(a.v1.read_text()) if a.v1.is_file() else {"crates": []}
    v1 = set(old.get("heldout_v1_crates") or [c["crate"] for c in old["crates"] if c["split"] == "heldout"])
    seen: set[str] = set()
    streams = {"train": [], "heldout": [], "heldout_v1": []}
    manifest = {"tokenizer": "assets/deepseek-v4/tokenizer.json", "bos": BOS, "eos": EOS, "heldout_v1_crates": sorted(v1), "crates": []}
    manifest["crates"] += [{"crate": c.name, "license": crate_licence(c), "split": "skipped (older version in its series)"} for c in older]
    # Train crates first (registry, then the lock's BFS order, so a cap drops the last BFS ones), so held-out files whose text also appears in a train crate are dropped, not the reverse.
    order = sorted(crates, key=lambda c: (is_heldout(crate_name(c), a.heldout_percent), rank[c.name], c.name))
    n_train = 0
    for c in order:
        lic = crate_licence(c)
        entry = {"crate": c.name, "license": lic}
        split = "heldout" if is_heldout(crate_name(c), a.heldout_percent) else "train"
        if lic is None or not PERMISSIVE.search(lic) or (COPYLEFT.search(lic) and " OR " not in lic):
            entry["split"] = "skipped (licence)"
            manifest["crates"].append(entry)
            continue
        if SKIP.search(crate_name(c)):
            entry["split"] = "skipped (generated bindings or tables)"
            manifest["crates"].append(entry)
            continue
        if split == "train" and a.max_train_tokens and n_train >= a.max_train_tokens:
            entry["split"] = "skipped (token cap)"
            manifest["crates"].append(entry)
            continue
        texts = []
        for h, text in rs_files(c, a.max_file_bytes):
            if h not in seen:
                seen.add(h)
                texts.append(text)
        ids = [np.array([BOS] + e.ids + [EOS], np.uint32) for e in tok.encode_batch(texts, add_special_tokens=False)] if texts else []
        n = sum(x.size for x in ids)
        if split == "train" and a.max_train_tokens and n_train + n > a.max_train_tokens:
            # This crate would pass the cap: it and every later train crate are dropped whole (no truncated files).
            n_train = a.max_train_tokens
            entry["split"] = "skipped (token cap)"
            manifest["crates"].append(entry)
            continue
        n_train += n if split == "train" else 0
        streams[split].extend(ids)
        if c.name in v1:
            streams["heldout_v1"].extend(ids)
        entry.update(split=split, files=len(texts), tokens=n)
        manifest["crates"].append(entry)
        print(f"{split:8s} {c.name:40s} {lic:40s} {len(texts):5d} files {n:9d} tokens", flush=True)
    assert v1 <= {c.name for c in order}, f"v1 held-out crates missing: {sorted(v1 - {c.name for c in order})}"
    a.out.mkdir(parents=True, exist_ok=True)
    for split, docs in streams.items():
        if split == "heldout_v1" and not v1:
            continue
        arr = np.concatenate(docs) if docs else np.zeros(0, np.uint32)
        np.save(a.out / f"{split}.npy", arr)
        manifest[f"{split}_tokens"] = int(arr.size)
        manifest[f"{split}_files"] = len(docs)
    # One crate per line: the committed copy stays readable and diffs by crate.
    body = ",\n  ".join(json.dumps(c) for c in manifest.pop("crates"))
    head = json.dumps(manifest, indent=1)[:-2]
    (a.out / "manifest.json").write_text(f'{head},\n "crates": [\n  {body}\n ]\n}}\n')
    print({k: v for k, v in manifest.items() if k.endswith(("_tokens", "_files"))})


if __name__ == "__main__":
    main()
