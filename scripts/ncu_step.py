#!/usr/bin/env python3
"""Per-kernel GPU time of a decode step from an `ncu --csv --metrics gpu__time_duration.sum` log (scripts/gpu-kernel-times.sh)."""
import collections
import csv
import lzma
import statistics
import sys

UNITS = {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9}


def kernels(path):
    """(name, grid, block, ns) of every profiled launch, in launch order."""
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as f:
        lines = [line for line in f if line.startswith('"')]
    out = []
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        ns = float(row["Metric Value"].replace(",", "")) * UNITS.get(row["Metric Unit"], 1.0)
        out.append((row["Kernel Name"].split("(")[0], row["Grid Size"], row["Block Size"], ns))
    return out


def main():
    ks = kernels(sys.argv[1])
    # A decode step starts with its embedding gather; only whole steps count, and the first whole one is skipped (warm-up).
    starts = [i for i, k in enumerate(ks) if k[0] == "embed_rows"]
    if len(starts) < 3:
        sys.exit(f"ncu_step: {len(ks)} launches and {len(starts)} embed_rows: fewer than two whole steps to read")
    steps = [ks[a:b] for a, b in zip(starts[1:], starts[2:])]
    totals = [sum(k[3] for k in s) for s in steps]
    per = collections.defaultdict(float)
    calls = collections.Counter()
    for s in steps:
        for name, _, _, ns in s:
            per[name] += ns
            calls[name] += 1
    n = len(steps)
    print(f"ncu_step: {n} whole steps, {statistics.median(totals) / 1e3:.1f} us of kernel time a step (median), "
          f"{sum(calls.values()) / n:.0f} launches a step")
    print(f"{'us/step':>9} {'calls':>6} {'us/call':>8}  kernel")
    for name, ns in sorted(per.items(), key=lambda kv: -kv[1]):
        print(f"{ns / n / 1e3:9.1f} {calls[name] / n:6.1f} {ns / calls[name] / 1e3:8.2f}  {name}")
    # The same launches by (kernel, grid, block): one weight shape or one op size a row, e.g. each FP8 linear apart.
    shaped = collections.defaultdict(list)
    for s in steps:
        for name, grid, block, ns in s:
            shaped[(name, grid, block)].append(ns)
    print(f"\n{'us/step':>9} {'calls':>6} {'median':>8}  kernel grid block")
    for (name, grid, block), v in sorted(shaped.items(), key=lambda kv: -sum(kv[1])):
        print(f"{sum(v) / n / 1e3:9.1f} {len(v) / n:6.1f} {statistics.median(v) / 1e3:8.2f}  {name} {grid} {block}")


if __name__ == "__main__":
    main()
