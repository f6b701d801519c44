"""Writes numpy's Engram hash multipliers (spec/dsv41.md §10.1 step 2) and the raw SeedSequence / PCG64 / integers
streams behind them as JSON, the fixture tf-engram's numpy port is checked against.

Usage: python make_multipliers.py > crates/tf-engram/tests/fixtures/numpy_multipliers.json
"""

import json

import numpy as np

I64_MAX = np.iinfo(np.int64).max
# 1 and 2 give near-2^62 spans, 1 << 30 and above take numpy's 32-bit draw, (1 << 30) - 1 the smallest 64-bit span
VOCABS = [1, 2, 7, 256, 1000, 65_536, 99_092, 129_280, 1 << 24, (1 << 30) - 1, 1 << 30, 3_000_000_000, 2**32 - 1]
LAYERS = list(range(64)) + [100, 1000, 429_300, 10**6]
SEEDS = [0, 1, 10007, 140_098, 2**32 - 1, 2**32, 2**64 + 5, 2**128 - 1, 2**130 + 7]


def bound(vocab):
    return max(1, (I64_MAX // vocab) // 2)


def multipliers(vocab, layer, size=4):
    m = np.random.default_rng(10007 * layer).integers(0, bound(vocab), size=size, dtype=np.int64) * 2 + 1
    return [int(x) for x in m]


def seed_sequence(seed):
    ss = np.random.SeedSequence(seed)
    return {
        "seed": hex(seed),
        "pool": [int(x) for x in ss.pool],
        "state_u32": [int(x) for x in ss.generate_state(9, np.uint32)],
        "state_u64": [int(x) for x in ss.generate_state(4, np.uint64)],
    }


def pcg64(seed):
    bits = np.random.PCG64(seed)
    st = bits.state["state"]
    return {
        "seed": hex(seed),
        "state": hex(st["state"]),
        "inc": hex(st["inc"]),
        "raw": [int(x) for x in bits.random_raw(24)],
    }


def integers(seed, low, high, endpoint, size=40):
    rng = np.random.default_rng(seed)
    out = rng.integers(low, high, size=size, dtype=np.int64, endpoint=endpoint)
    # what the draw consumed, so the port's bit generator position is checked too
    after = int(rng.bit_generator.random_raw())
    return {"seed": seed, "low": low, "high": high, "endpoint": endpoint, "out": [int(x) for x in out], "next_raw": after}


INTEGER_CASES = [
    (0, 4, False),
    (0, 2**32, False),
    (-(2**30), 2**30 + 1, False),
    (7, 7, True),
    (0, bound(99_092), False),
    (-(2**62), 2**62 + 1, False),
    (-(2**63), 2**63 - 1, False),
    (-(2**63), 2**63 - 1, True),
    (-5, 3, True),
]

fixture = {
    "numpy_version": np.__version__,
    "seed_sequence": [seed_sequence(s) for s in SEEDS],
    "pcg64": [pcg64(s) for s in SEEDS],
    "integers": [integers(s, lo, hi, e) for s in (3, 10007) for lo, hi, e in INTEGER_CASES],
    "multipliers": [{"vocab": v, "layer": layer, "m": multipliers(v, layer)} for v in VOCABS for layer in LAYERS],
    "multipliers_6": [{"vocab": v, "layer": layer, "m": multipliers(v, layer, 6)} for v in (99_092, 1 << 30) for layer in (1, 2, 14)],
}
lines = ",\n".join(f"  {json.dumps(k)}: " + (
    json.dumps(v) if not isinstance(v, list) else "[\n" + ",\n".join("    " + json.dumps(x) for x in v) + "\n  ]"
) for k, v in fixture.items())
print("{\n" + lines + "\n}")
