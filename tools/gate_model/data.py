"""MIT/Apache-2.0 Rust sources → DeepSeek-V4 token streams (train.npy, heldout.npy, split by crate) and a licence manifest."""

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


def is_heldout(name: str, percent: int) -> bool:
    return int(hashlib.sha256(name.encode()).hexdigest(), 16) % 100 < percent


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, nargs="+", default=sorted(Path.home().glob(".cargo/registry/src/*")))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--heldout-percent", type=int, default=8)
    ap.add_argument("--max-file-bytes", type=int, default=200_000, help="skip generated giants (tables, bindings)")
    ap.add_argument("--manifest", type=Path, help="use exactly the crates and splits of this manifest (reproduces a data set)")
    a = ap.parse_args()
    tok = Tokenizer.from_file(str(ASSETS / "tokenizer.json"))
    crates = sorted({c for root in a.src for c in root.iterdir() if c.is_dir()})
    if a.manifest:
        keep = {c["crate"] for c in json.loads(a.manifest.read_text())["crates"] if c["split"] in ("train", "heldout")}
        missing = keep - {c.name for c in crates}
        assert not missing, f"crates of the manifest not in the registry: {sorted(missing)}"
        crates = [c for c in crates if c.name in keep]
    seen: set[str] = set()
    streams = {"train": [], "heldout": []}
    manifest = {"tokenizer": "assets/deepseek-v4/tokenizer.json", "bos": BOS, "eos": EOS, "crates": []}
    # Train crates first, so held-out files whose text also appears in a train crate are dropped, not the reverse.
    order = sorted(crates, key=lambda c: (is_heldout(crate_name(c), a.heldout_percent), c.name))
    for c in order:
        lic = crate_licence(c)
        entry = {"crate": c.name, "license": lic}
        if lic is None or not PERMISSIVE.search(lic) or (COPYLEFT.search(lic) and " OR " not in lic):
            entry["split"] = "skipped (licence)"
            manifest["crates"].append(entry)
            continue
        split = "heldout" if is_heldout(crate_name(c), a.heldout_percent) else "train"
        texts = []
        for f in sorted(c.rglob("*.rs")):
            if not f.is_file() or f.stat().st_size > a.max_file_bytes:
                continue
            text = f.read_text(errors="replace")
            h = hashlib.sha256(text.encode()).hexdigest()
            if h in seen:
                continue
            seen.add(h)
            texts.append(text)
        ids = [[BOS] + e.ids + [EOS] for e in tok.encode_batch(texts, add_special_tokens=False)] if texts else []
        n = sum(len(x) for x in ids)
        streams[split].extend(ids)
        entry.update(split=split, files=len(texts), tokens=n)
        manifest["crates"].append(entry)
        print(f"{split:8s} {c.name:40s} {lic:40s} {len(texts):5d} files {n:9d} tokens", flush=True)
    a.out.mkdir(parents=True, exist_ok=True)
    for split, docs in streams.items():
        arr = np.fromiter((t for d in docs for t in d), dtype=np.uint32)
        np.save(a.out / f"{split}.npy", arr)
        manifest[f"{split}_tokens"] = int(arr.size)
        manifest[f"{split}_files"] = len(docs)
    (a.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print({k: v for k, v in manifest.items() if k.endswith(("_tokens", "_files"))})


if __name__ == "__main__":
    main()
