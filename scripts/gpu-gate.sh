#!/usr/bin/env bash
# On the GPU machine: cargo xtask gate with --device cuda for each candidate in TF_GATE_CANDIDATES; receipts go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$PWD/gpu-gate-out}"
mkdir -p "$out"
source scripts/gpu-env.sh
if [[ ! -x gpu-carry/xtask ]]; then
  echo "gpu-gate: no gpu-carry/xtask; run scripts/gpu-build.sh here first and carry gpu-carry"
  exit 2
fi
# TF_GATE_MODEL: a carried checkpoint; without one the small synthetic model is written here (mechanics only: no verdict).
model="${TF_GATE_MODEL:-$TF_CACHE_DIR/gate-model}"
if [[ ! -f "$model/model.safetensors.index.json" && ! -f "$model/model.safetensors" ]]; then
  gpu-carry/xtask make-tiny --out "$model" --config small --seed 0 2>&1 | tail -1
fi
rc=0
for cand in ${TF_GATE_CANDIDATES:-exact sequential-sums cuda-graphs}; do
  name="${cand//,/+}"
  timeout --signal=KILL "${TF_GATE_TIMEOUT:-500}" gpu-carry/xtask gate --device cuda --model "$model" --candidate "$cand" \
    --prompts assets/gate/prompts.json --thresholds assets/gate/thresholds.json \
    ${TF_GATE_MAX_POSITIONS:+--max-positions $TF_GATE_MAX_POSITIONS} --out "$out/gate-$name.json" 2>&1
  r=$?
  echo "gpu-gate: $cand exited $r (receipt $out/gate-$name.json)"
  ((rc != 0)) || rc=$r
done
exit "$rc"
