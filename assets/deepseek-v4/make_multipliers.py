"""Prints Engram hash multipliers (spec/dsv41.md §10.1 step 2) as rows for tf-engram's table. Usage: python make_multipliers.py COMPRESSED_VOCAB LAYER..."""

import sys

import numpy as np

vocab, layers = int(sys.argv[1]), [int(a) for a in sys.argv[2:]]
bound = max(1, (np.iinfo(np.int64).max // vocab) // 2)
for layer in layers:
    # size 4 = max n-gram 4; numpy draws in sequence, so a smaller max n-gram uses a prefix of these
    m = np.random.default_rng(10007 * layer).integers(0, bound, size=4, dtype=np.int64) * 2 + 1
    print(f"({vocab:_}, {layer}, [{', '.join(f'{int(x):_}' for x in m)}]),")
