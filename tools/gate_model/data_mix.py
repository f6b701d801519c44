"""Rust + Python + English prose → DeepSeek-V4 token streams (train.npy, heldout_{rust,python,prose}.npy, split by package) and per-domain licence manifests."""

import argparse
import hashlib
import json
import re
import sys
import sysconfig
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from config import ASSETS
from data import BOS, EOS, GENERATED, crate_licence, rs_files

# Every word of a PyPI licence must be one of these (numpy's "BSD-3-Clause AND 0BSD AND MIT AND Zlib AND CC0-1.0" is not).
PYPI_OK = re.compile(r"^(MIT|BSD|BSD-[23]-Clause|Apache|Apache-2\.0|2\.0|License|Software|AND|OR|/)$", re.I)
# Not prose, or not ours to judge as prose: release logs, licences, boilerplate community files.
NOT_PROSE = re.compile(r"(?i)change|release|history|news|whatsnew|licen[cs]e|copying|notice|authors|contributors|"
                       r"code_of_conduct|security|funding|maintainers|thanks|credits|requirements|cmakelists|/tests?/|/testdata/|/fixtures?/")
PY_SKIP = re.compile(r"(?i)(^|/)(tests?|testing|test_data|testdata|idle_test|site-packages|__pycache__|conftest\.py|test_[^/]*\.py|[^/]*_test\.py)(/|$)")


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def prose_like(text: str) -> bool:
    """Reads like prose: outside code blocks at least 30 % of the bytes, and 70 % letters and spaces there (docs with examples count)."""
    bare = re.sub(r"```.*?(```|$)", "", text, flags=re.S)
    bare = re.sub(r"(?m)^(    |\t|\.\. |>>> ).*$", "", bare)
    if len(text) < 300 or len(bare) < 0.3 * len(text):
        return False
    return sum(ch.isalpha() or ch.isspace() for ch in bare) >= 0.7 * len(bare)


def doc_files(root: Path, max_bytes: int, python_pkg: bool) -> list[str]:
    """Prose files of a package: READMEs and .md/.rst (and .txt under docs/), no changelogs or fixtures, prose-like text only."""
    out = []
    for f in sorted(root.rglob("*")):
        rel = "/" + f.relative_to(root).as_posix()
        name = f.name.lower()
        doc = name.endswith((".md", ".markdown", ".rst")) or name.startswith("readme") or (name.endswith(".txt") and "/doc" in rel)
        if not doc or not f.is_file() or NOT_PROSE.search(rel) or f.stat().st_size > max_bytes:
            continue
        if python_pkg and name.endswith(".txt") and "/_sources/" in rel:
            continue
        text = f.read_text(errors="replace")
        if prose_like(text):
            out.append(text)
    return out


def py_files(root: Path, max_bytes: int) -> list[str]:
    """A package's .py sources, without tests, generated files or giants."""
    out = []
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root).as_posix()
        if PY_SKIP.search(rel) or rel.startswith(("doc/", "docs/")) or not f.is_file() or f.stat().st_size > max_bytes:
            continue
        text = f.read_text(errors="replace")
        if not GENERATED.search(text[:1024]):
            out.append(text)
    return out


def pypi_lock(lock: Path) -> list[dict]:
    cols = ["name", "version", "file", "sha256", "licence", "url"]
    return [dict(zip(cols, ln.split("\t"))) for ln in lock.read_text().splitlines() if ln and not ln.startswith("#")]


def rank_key(name: str) -> int:
    return int(sha(name), 16)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = Path(__file__).parent
    ap.add_argument("--rust-manifest", type=Path, default=here / "data_manifest.json", help="data.py's manifest: Rust crates in its order and splits")
    ap.add_argument("--src", type=Path, nargs="+", default=sorted(Path.home().glob(".cargo/registry/src/*")))
    ap.add_argument("--fetched", type=Path, default=Path("/tmp/crates-src"))
    ap.add_argument("--stdlib", type=Path, default=Path(sysconfig.get_paths()["stdlib"]), help="CPython's Lib (PSF-2.0)")
    ap.add_argument("--pypi", type=Path, default=Path("/tmp/pypi-src"))
    ap.add_argument("--pypi-lock", type=Path, default=here / "pypi.lock.tsv")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rust-tokens", type=int, default=37_500_000)
    ap.add_argument("--python-tokens", type=int, default=15_000_000)
    ap.add_argument("--prose-tokens", type=int, default=9_000_000)
    ap.add_argument("--heldout-min", type=int, default=100_000)
    ap.add_argument("--heldout-max", type=int, default=200_000)
    ap.add_argument("--max-file-bytes", type=int, default=200_000)
    ap.add_argument("--rust-v1-sha256", default="", help="assert heldout_rust.npy's bytes have this sha256 (today's heldout_v1.npy)")
    a = ap.parse_args()
    tok = Tokenizer.from_file(str(ASSETS / "tokenizer.json"))

    def encode(texts: list[str]) -> list[np.ndarray]:
        return [np.array([BOS] + e.ids + [EOS], np.uint32) for e in tok.encode_batch(texts, add_special_tokens=False)] if texts else []

    # Packages: (domain, name, licence, source, texts, held_out); a held-out package is held out in every domain.
    rm = json.loads(a.rust_manifest.read_text())
    v1 = set(rm["heldout_v1_crates"])
    roots = {c.name: c for r in a.src for c in r.iterdir() if c.is_dir()} | {c.name: c for c in a.fetched.iterdir() if c.is_dir()}
    crates = [c for c in rm["crates"] if c["split"] in ("train", "heldout")]
    rust, prose, python = [], [], []
    for c in crates:
        d = roots[c["crate"]]
        assert crate_licence(d) == c["license"], c
        src = "crates.io (crates.lock.tsv)" if d.parent == a.fetched else "crates.io (~/.cargo/registry)"
        rust.append(dict(name=c["crate"], licence=c["license"], source=src, texts=[t for _, t in rs_files(d, a.max_file_bytes)],
                         held=c["split"] == "heldout", v1=c["crate"] in v1))
        prose.append(dict(name=c["crate"], licence=c["license"], source=src, texts=doc_files(d, a.max_file_bytes, False), held=c["split"] == "heldout"))
    ver = ".".join(map(str, sys.version_info[:3]))
    python.append(dict(name=f"cpython-stdlib-{ver}", licence="PSF-2.0", source=str(a.stdlib), texts=py_files(a.stdlib, a.max_file_bytes), held=False))
    pypi = pypi_lock(a.pypi_lock)
    skipped = []
    for r in pypi:
        d = a.pypi / f"{r['name'].lower()}-{r['version']}"
        assert (d / ".sha256").read_text() == r["sha256"], f"{d}: not fetched (run fetch_pypi.py --lock)"
        if not all(PYPI_OK.match(w) for w in r["licence"].replace("(", " ").replace(")", " ").split()):
            skipped.append(dict(name=d.name, licence=r["licence"], source="PyPI sdist " + r["file"], split="skipped (licence not only MIT/BSD/Apache)"))
            continue
        src = f"PyPI sdist {r['file']} sha256 {r['sha256']}"
        python.append(dict(name=d.name, licence=r["licence"], source=src, texts=py_files(d, a.max_file_bytes), held=False))
        prose.append(dict(name=d.name, licence=r["licence"], source=src, texts=doc_files(d, a.max_file_bytes, True), held=False))

    # Python held-out: whole PyPI packages in sha256-of-name order, each at most a third of max (several packages), summed within [min, max].
    n_held = 0
    for p in sorted(python[1:], key=lambda p: rank_key(p["name"])):
        if n_held >= a.heldout_min:
            break
        n = sum(x.size for x in encode(p["texts"]))
        if 0 < n <= a.heldout_max // 3 and n_held + n <= a.heldout_max:
            n_held += n
            p["held"] = True
    held_names = {p["name"] for p in python if p["held"]}
    for p in prose:
        p["held"] = p["held"] or p["name"] in held_names
    # Prose held-out short of min (Rust's held-out crates have short READMEs): hold out more PyPI packages whole, in every domain.
    n_prose = sum(x.size for p in prose if p["held"] for x in encode(p["texts"]))
    for p in sorted((p for p in prose if not p["held"] and p["source"].startswith("PyPI")), key=lambda p: rank_key(p["name"])):
        if n_prose >= a.heldout_min:
            break
        n = sum(x.size for x in encode(p["texts"]))
        if 0 < n <= a.heldout_max // 3 and n_prose + n <= a.heldout_max:
            n_prose += n
            p["held"] = True
            held_names.add(p["name"])
    for p in python:
        p["held"] = p["held"] or p["name"] in held_names

    # Dedup: a held-out document that equals any train candidate is dropped; train documents keep their first copy.
    train_hashes = {sha(t) for dom in (rust, python, prose) for p in dom if not p["held"] for t in p["texts"]}
    streams = {k: [] for k in ("train_rust", "train_python", "train_prose", "heldout_rust", "heldout_python", "heldout_prose")}
    manifests = {}
    caps = {"rust": a.rust_tokens, "python": a.python_tokens, "prose": a.prose_tokens}
    for dom, pkgs in (("rust", rust), ("python", python), ("prose", prose)):
        seen: set[str] = set()
        entries, n_train, n_heldout, full = [], 0, 0, False
        # Rust keeps data.py's order (so heldout_rust is heldout_v1 byte for byte); other held-out packages go in sha256-of-name order.
        held = [p for p in pkgs if p["held"]]
        order = [p for p in pkgs if not p["held"]] + (held if dom == "rust" else sorted(held, key=lambda p: rank_key(p["name"])))
        for p in order:
            e = {"package": p["name"], "licence": p["licence"], "source": p["source"]}
            entries.append(e)
            texts = []
            for t in p["texts"]:
                h = sha(t)
                if h in seen or (p["held"] and h in train_hashes):
                    continue
                seen.add(h)
                texts.append(t)
            if p["held"] and dom == "rust" and not p["v1"]:
                e["split"] = "held out (data.py's held-out crate; not in heldout_rust, which is v1)"
                continue
            if not p["held"] and full:
                e["split"] = "skipped (token cap)"
                continue
            ids = encode(texts)
            n = sum(x.size for x in ids)
            if not texts:
                e["split"] = "empty (no kept files)"
                continue
            if p["held"]:
                if dom != "rust" and n_heldout + n > a.heldout_max:
                    e["split"] = "held out (unused: past the held-out cap)"
                    continue
                n_heldout += n
                streams[f"heldout_{dom}"] += ids
                e.update(split="heldout", files=len(texts), tokens=n)
                continue
            if n_train + n > caps[dom]:
                # Whole packages only: this one and every later train package of the domain are dropped.
                full = True
                e["split"] = "skipped (token cap)"
                continue
            n_train += n
            streams[f"train_{dom}"] += ids
            e.update(split="train", files=len(texts), tokens=n)
            print(f"{dom:6s} {e['split']:8s} {p['name']:40s} {len(texts):5d} files {n:9d} tokens", flush=True)
        manifests[dom] = entries + (skipped if dom == "python" else [])
        print(f"{dom}: train {n_train} tokens, held-out {n_heldout}", flush=True)

    a.out.mkdir(parents=True, exist_ok=True)
    summary = {"tokenizer": "assets/deepseek-v4/tokenizer.json", "bos": BOS, "eos": EOS, "heldout_v1_crates": sorted(v1),
               "pypi_lock": "tools/gate_model/pypi.lock.tsv", "crates_lock": "tools/gate_model/crates.lock.tsv",
               "rust_manifest": str(a.rust_manifest.name), "stdlib": f"CPython {ver} Lib/ (PSF-2.0), no test/ or site-packages"}
    train = np.concatenate(streams["train_rust"] + streams["train_python"] + streams["train_prose"])
    np.save(a.out / "train.npy", train)
    summary["train_tokens"] = int(train.size)
    for k, docs in streams.items():
        summary[f"{k}_tokens"] = int(sum(x.size for x in docs))
        summary[f"{k}_files"] = len(docs)
        if k.startswith("heldout"):
            arr = np.concatenate(docs)
            np.save(a.out / f"{k}.npy", arr)
            summary[f"{k}_sha256"] = hashlib.sha256(arr.tobytes()).hexdigest()
    if a.rust_v1_sha256:
        assert summary["heldout_rust_sha256"] == a.rust_v1_sha256, "heldout_rust differs from today's heldout_v1"
    # train.py scores heldout.npy: keep it the Rust v1 stream, so numbers compare with earlier runs.
    np.save(a.out / "heldout.npy", np.load(a.out / "heldout_rust.npy"))
    summary["distinct_train_ids"] = int(np.unique(train).size)
    held_all = np.concatenate([np.load(a.out / f"heldout_{d}.npy") for d in ("rust", "python", "prose")])
    summary["heldout_ids_seen_in_train"] = round(float(np.isin(held_all, np.unique(train)).mean()), 6)
    (a.out / "manifest.json").write_text(json.dumps(summary, indent=1) + "\n")
    for dom, entries in manifests.items():
        body = ",\n  ".join(json.dumps(e) for e in entries)
        (a.out / f"manifest_{dom}.json").write_text(f'{{"domain": "{dom}", "packages": [\n  {body}\n]}}\n')
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
