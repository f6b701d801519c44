#!/usr/bin/env bash
# On the GPU machine: tf serve --device cuda with the default model, then the length sweep, the invariances and a soak at c4.
# Build here with `TF_CARRY=serve TF_CARRY_XZ=1 bash scripts/gpu-build.sh` and carry gpu-carry; receipts and logs go to $OUT.
# TF_SWEEP_LENGTHS (2124), TF_SWEEP_MAX_S (300), TF_SOAK_S (300) and TF_SERVE_ARGS set the sizes; a device call allows 600 s.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$PWD/gpu-reliability-out}"
mkdir -p "$out"
source scripts/gpu-env.sh
need_carry gpu-reliability "$out/reliability.log" tf xtask
port=8000
url="http://127.0.0.1:$port"
# shellcheck disable=SC2086
gpu-carry/tf serve --device cuda --port "$port" ${TF_SERVE_ARGS:-} >"$out/serve.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
for _ in $(seq 600); do curl -sf "$url/health" >/dev/null && break; sleep 0.2; done
if ! curl -sf "$url/health" >/dev/null; then
  echo "gpu-reliability: the server never became healthy" | tee -a "$out/reliability.log"
  tail -20 "$out/serve.log"
  exit 1
fi
rc=0
step() {
  local name=$1
  shift
  echo "== $name: $*" | tee -a "$out/reliability.log"
  local t=$SECONDS
  "$@" >>"$out/reliability.log" 2>&1
  local r=$?
  echo "== $name exited $r after $((SECONDS - t)) s" | tee -a "$out/reliability.log"
  ((rc != 0)) || rc=$r
}
step invariance gpu-carry/xtask check invariance --url "$url" --out "$out/invariance.json"
# The sweep bounded by TF_SWEEP_MAX_S, then the soak in what is left of a 600 s call (TF_CALL_S), at most TF_SOAK_S.
step sweep timeout "${TF_SWEEP_MAX_S:-300}" gpu-carry/xtask check sweep --url "$url" --lengths "${TF_SWEEP_LENGTHS:-2124}" \
  --concurrency 8 --out "$out/sweep.json"
soak_s=$(( ${TF_CALL_S:-580} - SECONDS - 15 ))
soak_s=$(( soak_s < ${TF_SOAK_S:-300} ? soak_s : ${TF_SOAK_S:-300} ))
if ((soak_s >= 30)); then
  step soak gpu-carry/xtask soak --url "$url" --duration-s "$soak_s" --concurrency 4 --sample-s 5 --out "$out/soak.json"
else
  echo "== soak skipped: ${soak_s} s left of the call" | tee -a "$out/reliability.log"
fi
grep -E "^(sweep|invariance):|^\| |^memory|failed|FAIL" "$out/reliability.log" | grep -v "^sweep: [0-9]*/" | tail -30
exit "$rc"
