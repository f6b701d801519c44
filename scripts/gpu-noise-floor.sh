#!/usr/bin/env bash
# On the GPU machine: DeepSeek's reference on the GPU against itself on the CPU (noise_floor.py --compare device), a process per prompt.
# Carry gpu-carry (xtask: expands the gate model, writes the prompt ids) and tools/golden/ref (the reference, git-ignored).
# TF_NF_GREEDY greedy tokens a cut (0: none), TF_NF_TEXT text positions a prompt (0: none), TF_NF_TIMEOUT seconds a process.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$PWD/gpu-nf-out}"
mkdir -p "$out"
source scripts/gpu-env.sh
model=/tmp/gate-model
[[ -f $model/model.safetensors.index.json ]] || gpu-carry/xtask gate-model expand --out "$model" >/dev/null || exit 3
gpu-carry/xtask gate --model "$model" --dump-ids /tmp/gate-ids.json >/dev/null || exit 3
names=$(python3 -c "import json; print(' '.join(p['name'] for p in json.load(open('/tmp/gate-ids.json'))['prompts']))")
greedy="${TF_NF_GREEDY:-64}" text="${TF_NF_TEXT:-600}" t="${TF_NF_TIMEOUT:-400}"
nf() { timeout --signal=KILL "$t" python3 tools/golden/noise_floor.py --ckpt "$model" --ids /tmp/gate-ids.json --compare device "$@"; }
for n in $names; do
  (
    ((greedy == 0)) || nf --greedy "$greedy" --only "$n" --out "$out/greedy-$n" >"$out/greedy-$n.log" 2>&1
    ((text == 0)) || nf --prompt-positions "$text" --only "$n" --out "$out/text-$n" >"$out/text-$n.log" 2>&1
  ) &
done
wait
for rows in greedy text; do
  stems=$(for n in $names; do [[ -f $out/$rows-$n.device.rows.json ]] && echo "$out/$rows-$n"; done)
  [[ -n $stems ]] || continue
  # shellcheck disable=SC2086
  python3 tools/golden/noise_floor.py --compare device --out "$out/gate-model-$rows" --merge $stems
done
python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name(0))"
