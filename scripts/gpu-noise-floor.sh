#!/usr/bin/env bash
# On the GPU machine: DeepSeek's reference on the GPU against itself on the CPU (noise_floor.py --compare device), a process per prompt.
# Carry gpu-carry (xtask: expands the gate model, writes the prompt ids) and tools/golden/ref (the reference, git-ignored).
# TF_NF_COMPARE (default device,threads), TF_NF_GREEDY tokens a cut and TF_NF_TEXT positions a prompt (0: none), TF_NF_TIMEOUT a run.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$PWD/gpu-nf-out}"
mkdir -p "$out"
source scripts/gpu-env.sh
model=/tmp/gate-model
[[ -f $model/model.safetensors.index.json ]] || gpu-carry/xtask gate-model expand --out "$model" >/dev/null || exit 3
gpu-carry/xtask gate --model "$model" --dump-ids /tmp/gate-ids.json >/dev/null || exit 3
names=$(python3 -c "import json; print(' '.join(p['name'] for p in json.load(open('/tmp/gate-ids.json'))['prompts']))")
greedy="${TF_NF_GREEDY:-64}" text="${TF_NF_TEXT:-600}" compare="${TF_NF_COMPARE:-device,threads}"
export model out compare greedy text T="${TF_NF_TIMEOUT:-400}"
# One prompt's rows: each comparison side uses at most 2 cores (threads), so 8 prompts at once fill 16.
one() {
  nf() { timeout --signal=KILL "$T" python3 tools/golden/noise_floor.py --ckpt "$model" --ids /tmp/gate-ids.json --compare "$compare" "$@"; }
  ((greedy == 0)) || nf --greedy "$greedy" --only "$1" --out "$out/greedy-$1" >"$out/greedy-$1.log" 2>&1
  ((text == 0)) || nf --prompt-positions "$text" --only "$1" --out "$out/text-$1" >"$out/text-$1.log" 2>&1
}
export -f one
# shellcheck disable=SC2086
printf '%s\n' $names | xargs -P "${TF_NF_JOBS:-8}" -I{} bash -c 'one "$1"' _ {}
for rows in greedy text; do
  first="${compare%%,*}"
  stems=$(for n in $names; do [[ -f $out/$rows-$n.$first.rows.json ]] && echo "$out/$rows-$n"; done)
  [[ -n $stems ]] || continue
  # shellcheck disable=SC2086
  python3 tools/golden/noise_floor.py --compare "$compare" --out "$out/gate-model-$rows" --merge $stems
done
python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name(0))"
