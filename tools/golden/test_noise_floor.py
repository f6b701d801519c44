#!/usr/bin/env python3
"""noise_floor.py's statistics on the cases xtask/src/gate_stats.rs tests, so both score alike; needs numpy only."""

import math
import sys
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The statistics need no torch or reference; stubs keep this test runnable without them.
for name in ("torch", "run_reference", "ref_import"):
    sys.modules.setdefault(name, types.SimpleNamespace(REF_FILES=(), import_reference=None))
import noise_floor as nf  # noqa: E402


def equal_rows_score_zero_and_agree():
    row = np.array([1.0, 3.0, -2.0, 3.0], dtype=np.float32)
    r = nf.score_row(row, row, 1)
    assert (r["kl"], r["agree"], r["hit_exact"], r["hit_cand"], r["identical"]) == (0.0, True, True, True, True)
    assert abs(r["nll_exact"] - math.log(1 + math.exp(-2) + 1 + math.exp(-5))) < 1e-12


def kl_matches_its_closed_form():
    p, q = np.array([0.0, 0.0], dtype=np.float32), np.array([0.0, math.log(2)], dtype=np.float32)
    kl = 0.5 * math.log(0.5 / (1 / 3)) + 0.5 * math.log(0.5 / (2 / 3))
    r = nf.score_row(p, q, 0)
    assert abs(r["kl"] - kl) < 1e-7, (r["kl"], kl)
    assert not r["agree"] and r["hit_exact"] and not r["hit_cand"]


def a_summary_reports_means_and_quantiles():
    rows = [{"kl": float(i), "agree": i % 2 == 0, "hit_exact": True, "hit_cand": i < 90, "nll_exact": 1.0,
             "nll_cand": 1.5, "identical": False, "max_abs_dlogit": 0.0} for i in range(100)]
    s = nf.summary(rows)
    assert (s["positions"], s["kl_mean"], s["kl_p99"], s["kl_max"]) == (100, 49.5, 98.0, 99.0)
    assert (s["greedy_agreement"], s["top1_exact"], s["top1_candidate"]) == (0.5, 1.0, 0.9)


def merged_shards_equal_one_run():
    import json
    import tempfile

    rows = [{"kl": float(i) / 7, "agree": i % 3 != 0, "hit_exact": i % 2 == 0, "hit_cand": i % 5 != 0,
             "nll_exact": 1.0 + i / 10, "nll_cand": 1.1 + i / 10, "identical": i == 4, "max_abs_dlogit": float(i)}
            for i in range(50)]
    whole = {"all": rows, "code": rows[:30], "prose": rows[30:]}
    shards = [{"all": rows[:30], "code": rows[:30]}, {"all": rows[30:], "prose": rows[30:]}]
    with tempfile.TemporaryDirectory() as d:
        stems = []
        for k, sh in enumerate(shards):
            stem = Path(d) / f"s{k}"
            doc = {"model_sha256": "abc", "seconds": {"exact": 1.0 + k, "candidate": 2.0}, "by_kind": {}}
            Path(f"{stem}.order.json").write_text(json.dumps(doc))
            Path(f"{stem}.order.rows.json").write_text(json.dumps(sh))
            stems.append(stem)
        a = types.SimpleNamespace(compare=["order"], merge=stems, out=Path(d) / "m")
        nf.merge(a)
        got = json.loads(Path(d, "m.order.json").read_text())
    assert got["by_kind"] == {k: nf.summary(v) for k, v in whole.items()}, got["by_kind"]
    assert got["seconds"] == {"exact": 3.0, "candidate": 4.0} and len(got["merged_from"]) == 2


def cut_heads_are_the_gates():
    # The cases of xtask/src/gate.rs's cut_heads test, so greedy rows start where the gate's do.
    assert nf.cut_heads(74, [0.125, 0.25, 0.375, 0.5]) == [9, 18, 27, 37]
    assert nf.cut_heads(6659, [0.125, 0.25, 0.375, 0.5]) == [832, 1664, 2497, 3329]
    assert nf.cut_heads(3, [0.0, 0.1, 0.9]) == [1, 2]
    assert nf.cut_heads(1, [0.5]) == [1]


if __name__ == "__main__":
    for test in (equal_rows_score_zero_and_agree, kl_matches_its_closed_form, a_summary_reports_means_and_quantiles,
                 merged_shards_equal_one_run, cut_heads_are_the_gates):
        test()
        print(f"ok {test.__name__}")
