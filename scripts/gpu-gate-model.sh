#!/usr/bin/env bash
# On the GPU machine: the shipped gate model's gate receipts on CUDA, and its quality measured by our CPU forward on the spare cores.
# Carry gpu-carry (xtask, for the gate) and .gate-quality (gate_nll, gate_accept, heldout*.npy; tools/gate_model/README.md).
# TF_GATE_CANDIDATES="" skips the gate; TF_QUALITY_TIMEOUT bounds the CPU jobs (default 300 s).
# TF_GATE_EXL3=K also gates TF_GATE_EXL3_CANDIDATES on the model's EXL3 copy at K bits, quantized here (xtask gate-model exl3).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$PWD/gpu-gate-out}"
mkdir -p "$out"
q=.gate-quality
if [[ -d $q ]]; then
  # Three threads a job, so the CPU jobs leave cores to the GPU work beside them.
  export RAYON_NUM_THREADS=3 TF_CACHE_DIR="${TF_CACHE_DIR:-/tmp/tf-cache}"
  # One short run expands the model once, before four jobs would each write the same 165 MB.
  $q/gate_accept assets/gate-model "$q/heldout.npy" 1 16 >/dev/null || exit 3
  t="${TF_QUALITY_TIMEOUT:-300}"
  for s in heldout heldout_python heldout_prose; do
    (r=$(timeout "$t" $q/gate_nll assets/gate-model "$q/$s.npy" 64 512 2>"/tmp/nll-$s.log") &&
      echo "{\"stream\": \"$s\", \"result\": $r}" >>"$out/quality.jsonl") &
  done
  (r=$(timeout "$t" $q/gate_accept assets/gate-model "$q/heldout.npy" 64 256) &&
    echo "{\"stream\": \"accept\", \"result\": $r}" >>"$out/quality.jsonl") &
fi
rc=0
if [[ -n ${TF_GATE_CANDIDATES-x} && -x gpu-carry/xtask ]]; then
  model=/tmp/gate-model
  gpu-carry/xtask gate-model expand --out "$model" || exit 3
  TF_GATE_MODEL="$model" bash scripts/gpu-gate.sh
  rc=$?
fi
if [[ -n ${TF_GATE_EXL3:-} && -x gpu-carry/xtask ]]; then
  exl3=/tmp/gate-exl3-k$TF_GATE_EXL3
  [[ -f $exl3/model.safetensors ]] || gpu-carry/xtask gate-model exl3 --out "$exl3" --bits "$TF_GATE_EXL3" || exit 3
  TF_GATE_MODEL="$exl3" TF_GATE_CANDIDATES="${TF_GATE_EXL3_CANDIDATES:-exact exl3-fast exl3-prompt-gemm prefill-mxfp4}" \
    OUT="$out/exl3-k$TF_GATE_EXL3" bash scripts/gpu-gate.sh
  r=$?
  ((rc != 0)) || rc=$r
fi
wait
cat "$out/quality.jsonl" 2>/dev/null
exit "$rc"
