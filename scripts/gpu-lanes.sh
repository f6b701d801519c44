#!/usr/bin/env bash
# On the GPU machine: tf serve --device cuda (default model, no drafts), xtask bench openai at several concurrencies; lanes share decode steps.
# Build here with `TF_CARRY=serve TF_CARRY_XZ=1 bash scripts/gpu-build.sh`; TF_LANES_CONCURRENCY (1 4 8 16), TF_LANES_TOKENS (64), TF_LANES_ARGS (more serve flags) set the run.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$PWD/gpu-lanes-out}"
mkdir -p "$out"
source scripts/gpu-env.sh
need_carry gpu-lanes "$out/lanes.log" tf xtask
port=8000
url="http://127.0.0.1:$port"
gpu-carry/tf serve --device cuda --port "$port" --no-draft --max-lanes 16 ${TF_LANES_ARGS:-} >"$out/serve.log" 2>&1 &
pid=$!
for _ in $(seq 600); do curl -sf "$url/health" >/dev/null && break; sleep 0.2; done
rc=0
for c in ${TF_LANES_CONCURRENCY:-1 4 8 16}; do
  before="$(curl -s "$url/metrics" | grep -E '^tf:decode_step(s|_lanes)_total' | tr '\n' ' ')"
  gpu-carry/xtask bench openai --url "$url" --prompt-tokens 256 --concurrency "$c" --kinds code \
    --max-tokens "${TF_LANES_TOKENS:-64}" --requests-per-stream 2 --ignore-eos \
    --out "$out/bench-c$c.json" >"$out/bench-c$c.log" 2>&1 || rc=1
  {
    echo "== concurrency $c (decode counters before: $before)"
    grep -E '^\|' "$out/bench-c$c.log"
    curl -s "$url/metrics" | grep -E '^tf:decode_step(s|_lanes)_total'
  } | tee -a "$out/lanes.log"
done
kill "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
exit "$rc"
