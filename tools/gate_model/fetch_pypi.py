"""Fetch MIT/BSD/Apache PyPI sdists (Python sources and their docs) into a source cache, with a lock list that re-fetches the same files."""

import argparse
import hashlib
import io
import json
import re
import sys
import tarfile
import urllib.parse
import urllib.request
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PYPI = "https://pypi.org/pypi"
UA = {"User-Agent": "TensorFold-rs gate-model data fetch (tools/gate_model/fetch_pypi.py)"}
PERMISSIVE = re.compile(r"\b(MIT|BSD|Apache)", re.I)
COPYLEFT = re.compile(r"GPL|MPL|Mozilla|EPL|CDDL|SSPL|Unlicense|Proprietary", re.I)
# Kept from an sdist: Python sources and prose docs; data_mix.py decides what is train text.
KEEP = re.compile(r"(?i)\.(py|md|markdown|rst|txt)$")


def get(url: str) -> bytes:
    with urllib.request.urlopen(urllib.request.Request(url, headers=UA), timeout=120) as r:
        return r.read()


def licence(info: dict) -> str:
    """The licence as PyPI states it: `license_expression`, else the `License ::` classifiers, else the `license` field."""
    if info.get("license_expression"):
        return info["license_expression"]
    cls = [c.split(" :: ")[-1] for c in info.get("classifiers") or [] if c.startswith("License ::")]
    return " / ".join(cls) or (info.get("license") or "").splitlines()[0][:80] if (cls or info.get("license")) else "-"


def permissive(lic: str) -> bool:
    return bool(PERMISSIVE.search(lic)) and not COPYLEFT.search(lic)


def record(name: str, version: str | None = None) -> dict:
    """(name, version, url, sha256, licence) of a release's sdist, the newest release when version is None."""
    url = f"{PYPI}/{name}/{version}/json" if version else f"{PYPI}/{name}/json"
    d = json.loads(get(url))
    sd = [u for u in d["urls"] if u["packagetype"] == "sdist"]
    assert sd, f"{name}: no sdist"
    return {"name": d["info"]["name"], "version": d["info"]["version"], "url": urllib.parse.urljoin(url, sd[0]["url"]),
            "file": sd[0]["filename"], "sha256": sd[0]["digests"]["sha256"], "licence": licence(d["info"])}


def fetch(rec: dict, cache: Path) -> Path:
    """Download the sdist, check PyPI's sha256, extract .py and doc files (no others) under cache/name-version."""
    dest = cache / f"{rec['name'].lower()}-{rec['version']}"
    if (dest / ".sha256").is_file() and (dest / ".sha256").read_text() == rec["sha256"]:
        return dest
    blob = get(rec["url"])
    got = hashlib.sha256(blob).hexdigest()
    assert got == rec["sha256"], f"{rec['file']}: sha256 {got} != PyPI {rec['sha256']}"
    if rec["file"].endswith(".zip"):
        zf = zipfile.ZipFile(io.BytesIO(blob))
        members = [(m.filename, lambda m=m: zf.read(m)) for m in zf.infolist() if not m.is_dir()]
    else:
        tf = tarfile.open(fileobj=io.BytesIO(blob), mode="r:*")
        members = [(m.name, lambda m=m: tf.extractfile(m).read()) for m in tf.getmembers() if m.isfile()]
    for name, read in members:
        rel = Path(name)
        if ".." in rel.parts or rel.is_absolute() or len(rel.parts) < 2:
            continue
        if KEEP.search(rel.name) or (len(rel.parts) == 2 and rel.name.upper().startswith(("LICENSE", "COPYING"))):
            out = dest / Path(*rel.parts[1:])
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(read())
    (dest / ".sha256").write_text(rec["sha256"])
    return dest


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packages", type=Path, default=Path(__file__).with_name("pypi_seeds.txt"), help="names, one a line, in priority order")
    ap.add_argument("--lock", type=Path, help="fetch exactly the rows of this lock list")
    ap.add_argument("--lock-out", type=Path, default=Path(__file__).with_name("pypi.lock.tsv"))
    ap.add_argument("--cache", type=Path, default=Path("/tmp/pypi-src"))
    ap.add_argument("--jobs", type=int, default=4)
    a = ap.parse_args()
    a.cache.mkdir(parents=True, exist_ok=True)
    pool = ThreadPoolExecutor(a.jobs)
    cols = ["name", "version", "file", "sha256", "licence", "url"]
    if a.lock:
        rows = [dict(zip(cols, ln.split("\t"))) for ln in a.lock.read_text().splitlines() if ln and not ln.startswith("#")]
        dirs = list(pool.map(lambda r: fetch(r, a.cache), rows))
        print(f"fetched {len(dirs)} sdists from {a.lock} into {a.cache}")
        return
    names = [s.split("#")[0].strip() for s in a.packages.read_text().splitlines() if s.split("#")[0].strip()]
    recs = list(pool.map(record, names))
    ok = [r for r in recs if permissive(r["licence"])]
    for r in recs:
        if not permissive(r["licence"]):
            print(f"skipped (licence): {r['name']} {r['licence']}", file=sys.stderr)
    list(pool.map(lambda r: fetch(r, a.cache), ok))
    hdr = "# " + "\t".join(cols) + "; priority order: data_mix.py cuts from the end\n"
    a.lock_out.write_text(hdr + "".join("\t".join(r[c] for c in cols) + "\n" for r in ok))
    print(f"wrote {a.lock_out}: {len(ok)} sdists")


if __name__ == "__main__":
    main()
