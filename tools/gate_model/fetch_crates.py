"""Fetch MIT/Apache Rust crates from crates.io (seed list + BFS over normal deps) into a source cache, with a lock list that re-fetches the same set."""

import argparse
import hashlib
import io
import json
import re
import sys
import tarfile
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from data import COPYLEFT, PERMISSIVE, SKIP, crate_licence

INDEX = "https://index.crates.io"
STATIC = "https://static.crates.io/crates"
VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")
DOCS = re.compile(r"(?i)(\.(md|markdown|rst|txt)|^readme[^/]*)$")
UA = {"User-Agent": "TensorFold-rs gate-model data fetch (tools/gate_model/fetch_crates.py)"}


def get(url: str) -> bytes:
    with urllib.request.urlopen(urllib.request.Request(url, headers=UA), timeout=60) as r:
        return r.read()


def index_path(name: str) -> str:
    n = name.lower()
    return {1: f"1/{n}", 2: f"2/{n}", 3: f"3/{n[0]}/{n}"}.get(len(n), f"{n[:2]}/{n[2:4]}/{n}")


def newest(name: str, version: str | None = None) -> dict | None:
    """The index record of the newest non-yanked release (no pre-release), or of `version` when given."""
    try:
        lines = [json.loads(x) for x in get(f"{INDEX}/{index_path(name)}").splitlines() if x.strip()]
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise
    if version:
        return next((r for r in lines if r["vers"] == version), None)
    rel = [r for r in lines if not r["yanked"] and VERSION.match(r["vers"].split("+")[0])]
    return max(rel, key=lambda r: tuple(map(int, VERSION.match(r["vers"].split("+")[0]).groups())), default=None)


def fetch(rec: dict, cache: Path) -> Path:
    """Download the .crate, check the index sha256, extract Cargo.toml, licences, .rs files and docs (README, .md/.rst/.txt: data_mix.py's prose)."""
    name, vers = rec["name"], rec["vers"]
    dest = cache / f"{name}-{vers}"
    if (dest / ".cksum").is_file() and (dest / ".cksum").read_text() == rec["cksum"] and (dest / ".docs").is_file():
        return dest
    blob = get(f"{STATIC}/{name}/{name}-{vers}.crate")
    got = hashlib.sha256(blob).hexdigest()
    assert got == rec["cksum"], f"{name}-{vers}: sha256 {got} != index {rec['cksum']}"
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tf:
        for m in tf.getmembers():
            rel = Path(m.name)
            if not m.isfile() or ".." in rel.parts or rel.is_absolute() or len(rel.parts) < 2:
                continue
            keep = rel.suffix == ".rs" or DOCS.search(rel.name) or (len(rel.parts) == 2 and (rel.name == "Cargo.toml" or rel.name.upper().startswith(("LICENSE", "COPYING"))))
            if keep:
                out = dest / Path(*rel.parts[1:])
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(tf.extractfile(m).read())
    (dest / ".cksum").write_text(rec["cksum"])
    (dest / ".docs").write_text("")
    return dest


def rs_bytes(d: Path, max_file: int) -> int:
    return sum(s for f in d.rglob("*.rs") if f.is_file() and (s := f.stat().st_size) <= max_file)


def permissive(lic: str | None) -> bool:
    """data.py's licence rule, so the volume target counts only what data.py will keep."""
    return lic is not None and bool(PERMISSIVE.search(lic)) and not (COPYLEFT.search(lic) and " OR " not in lic)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=Path, default=Path(__file__).with_name("crate_seeds.txt"))
    ap.add_argument("--lock", type=Path, help="fetch exactly the name/version/cksum rows of this lock list")
    ap.add_argument("--lock-out", type=Path, default=Path(__file__).with_name("crates.lock.tsv"))
    ap.add_argument("--cache", type=Path, default=Path("/tmp/crates-src"))
    ap.add_argument("--have", type=Path, nargs="*", default=sorted(Path.home().glob(".cargo/registry/src/*")),
                    help="roots already used; their crate names still expand the BFS but do not count toward the target")
    ap.add_argument("--target-mb", type=float, default=250, help="stop when new permissive .rs bytes (files <= max) reach this")
    ap.add_argument("--max-file-bytes", type=int, default=200_000)
    ap.add_argument("--jobs", type=int, default=4)
    a = ap.parse_args()
    a.cache.mkdir(parents=True, exist_ok=True)
    pool = ThreadPoolExecutor(a.jobs)
    if a.lock:
        rows = [ln.split("\t") for ln in a.lock.read_text().splitlines() if ln and not ln.startswith("#")]
        recs = list(pool.map(lambda r: newest(r[0], r[1]), rows))
        for row, rec in zip(rows, recs):
            assert rec and rec["cksum"] == row[2], f"{row[0]}-{row[1]}: index cksum differs from the lock"
        dirs = list(pool.map(lambda r: fetch(r, a.cache), recs))
        print(f"fetched {len(dirs)} crates from {a.lock} into {a.cache}")
        return
    have = {re.sub(r"-\d+\.\d+\.\d+.*$", "", c.name) for root in a.have for c in root.iterdir() if c.is_dir()}
    seeds = [s.strip() for s in a.seeds.read_text().splitlines() if s.strip() and not s.startswith("#")]
    queue, seen, lock, total, missing = list(seeds), set(seeds), [], 0, []
    while queue and total < a.target_mb * 1e6:
        batch, queue = queue[:a.jobs * 4], queue[a.jobs * 4:]
        recs = list(pool.map(newest, batch))
        todo = [r for n, r in zip(batch, recs) if r is not None and not SKIP.search(n)]
        missing += [n for n, r in zip(batch, recs) if r is None]
        for rec, d in zip(todo, pool.map(lambda r: fetch(r, a.cache), todo)):
            lic = crate_licence(d)
            n = rs_bytes(d, a.max_file_bytes) if permissive(lic) and rec["name"] not in have else 0
            total += n
            lock.append((rec["name"], rec["vers"], rec["cksum"], lic or "-", str(n)))
            for dep in rec["deps"]:
                dn = dep.get("package") or dep["name"]
                if dep.get("kind") in (None, "normal") and dn not in seen:
                    seen.add(dn)
                    queue.append(dn)
            if total >= a.target_mb * 1e6:
                break
        print(f"{len(lock):5d} crates, {total / 1e6:7.1f} MB new permissive .rs, queue {len(queue)}", flush=True)
    hdr = "# name\tversion\tsha256 (index cksum)\tlicence\tnew permissive .rs bytes; BFS order: data.py cuts from the end\n"
    a.lock_out.write_text(hdr + "".join("\t".join(r) + "\n" for r in lock))
    print(f"wrote {a.lock_out}: {len(lock)} crates, {total / 1e6:.1f} MB; seeds not in the index: {missing}", file=sys.stderr)


if __name__ == "__main__":
    main()
