# Random tiles decoded by the spec's exl3_ref.py, for tests: python make_vectors.py .../spec/exl3_ref.py crates/tf-exl3/tests/fixtures/exl3_ref_tiles.json (numpy; offline)
import contextlib, io, json, random, sys

src = open(sys.argv[1]).read()
ns = {}
with contextlib.redirect_stdout(io.StringIO()):
    exec(compile(src, sys.argv[1], "exec"), ns)
decode, state_at, perm = ns["decode"], ns["state_at"], ns["perm"]
h = ns["np"].float16

rng = random.Random(20261203)
tiles = []
for cb in range(3):
    for K in range(1, 9):
        packed = [rng.getrandbits(16) for _ in range(16 * K)]
        q = [0] * 256
        for t in range(256):
            q[perm[t]] = int(h(decode(state_at(packed, K, t), cb)).view("uint16"))
        tiles.append({"codebook": cb, "k": K, "record": packed, "q_fp16_bits": q})
json.dump({"source": "exl3_ref.py (quant.md appendix), seed 20261203", "tiles": tiles}, open(sys.argv[2], "w"))
print(len(tiles), "tiles")
