#!/usr/bin/env bash
# On the GPU machine: one phase of gate-model training (tools/gate_model/README.md, "Training on the GPU machine").
# TF_PHASE=train1: fresh backbone, stops after TF_STOP seconds, full state kept in /tmp/gm for a warm second call.
# TF_PHASE=train2: resumes /tmp/gm (same warm machine) to the schedule's end, then trains the DSpark drafters.
# Both end by exporting, writing the compact form, and returning it in ≤ 15 MiB parts with the logs.
set -euo pipefail
cd "$(dirname "$0")/../.gate-carry"
out="${OUT:-/tmp/gm-out}"
mkdir -p "$out" /tmp/gm
export PYTHONUNBUFFERED=1
phase="${TF_PHASE:?TF_PHASE=train1|train2}"
# The gate config (README "Size"): the small structure at dim 256 with 8 experts of 256, tied embeddings, 28,672 used ids.
set_cfg=(max_position_embeddings=8192 hidden_size=256 moe_intermediate_size=256 n_routed_experts=8 tie_word_embeddings=true)
common=(--data data --out /tmp/gm/gate.pt --set "${set_cfg[@]}" --steps 1000000 --time-limit "${TF_TOTAL:-960}"
  --batch "${TF_BATCH:-64}" --seq 512 --lr "${TF_LR:-1.5e-3}" --warmup 100 --eval-every 200 --eval-windows "${TF_EVAL_WINDOWS:-64}"
  --eval-batch 16 --threads 8 --compile --compile-after 30 --max-used 28672 --state /tmp/gm/state.pt --stop-after "${TF_STOP:-470}")
if [[ $phase == train1 ]]; then
  python3 train.py "${common[@]}" 2>&1 | tee "$out/train1.log"
else
  [[ -f /tmp/gm/state.pt ]] || { echo "no /tmp/gm/state.pt: the machine went cold; run train1 again"; exit 3; }
  python3 train.py "${common[@]}" --resume 2>&1 | tee "$out/train2.log"
  if [[ ${TF_DSPARK:-90} != 0 ]]; then
    python3 train_dspark.py --pt /tmp/gm/gate.pt --data data --out /tmp/gm/gate_ds.pt --time-limit "${TF_DSPARK:-90}" --steps 100000 \
      --batch "${TF_DS_BATCH:-8}" --seq 512 --anchors 64 --threads 8 2>&1 | tee "$out/dspark.log"
    mv /tmp/gm/gate_ds.pt /tmp/gm/gate.pt
  fi
fi
python3 eval_nll.py --pt /tmp/gm/gate.pt --data data --windows "${TF_EVAL_WINDOWS:-64}" --seq 512 2>&1 | tee "$out/eval.json"
python3 export.py --pt /tmp/gm/gate.pt --out /tmp/gm/export
python3 compact.py --export /tmp/gm/export --out /tmp/gm/compact | tee "$out/compact.json"
cp /tmp/gm/compact/config.json "$out/config.json"
split -b 15M -d -a 1 /tmp/gm/compact/model.safetensors "$out/model.safetensors.part"
cp /tmp/gm/gate.json "$out/log.json" 2>/dev/null || true
ls -la "$out"
