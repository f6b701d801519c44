#!/usr/bin/env bash
# Pinned openai client vs `tf serve` on the small synthetic model; args go to openai_client.py, TF_BIN skips the build.
set -euo pipefail
cd "$(dirname "$0")/.."

req=scripts/requirements-openai.txt
venv=target/openai-venv
model=target/openai-tiny
key="tf-openai-check-$$"
pin=$(sed -n 's/^openai==//p' "$req")
[ -n "$pin" ] || { echo "no openai==VERSION line in $req"; exit 1; }

py="$venv/bin/python"
if ! "$py" -c "import importlib.metadata as m, sys; sys.exit(m.version('openai') != '$pin')" 2>/dev/null; then
  echo "openai-client: installing openai==$pin into $venv"
  python3 -m venv "$venv"
  "$py" -m pip install --quiet --disable-pip-version-check -r "$req"
fi

# Reuses the tf that CI's `cargo test` just built (opt-level 2); a dev-profile build decodes about 20x slower.
if [ -z "${TF_BIN:-}" ]; then
  cargo test --workspace --locked --no-run --quiet
  TF_BIN="${CARGO_TARGET_DIR:-target}/debug/tf"
fi

# Deterministic and about a second, so always rewritten rather than trusted from an older format.
cargo xtask make-tiny --out "$model" --config small --seed 0

port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log=$(mktemp "${TMPDIR:-/tmp}/tf-openai-serve.XXXXXX")
"$TF_BIN" serve --model "$model" --host 127.0.0.1 --port "$port" --api-key "$key" >"$log" 2>&1 &
server=$!

cleanup() {
  local rc=$?
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  if [ "$rc" -ne 0 ]; then
    echo "--- tf serve log ($log) ---"
    cat "$log"
  else
    rm -f "$log"
  fi
  exit "$rc"
}
trap cleanup EXIT

"$py" - "http://127.0.0.1:$port/health" "$server" <<'EOF'
import os, sys, time, urllib.request
url, pid = sys.argv[1], int(sys.argv[2])
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    try:
        if urllib.request.urlopen(url, timeout=5).status == 200:
            sys.exit(0)
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit(f"openai-client: tf serve (pid {pid}) exited before {url} answered 200")
    time.sleep(0.2)
sys.exit(f"openai-client: {url} did not answer 200 within 120 s")
EOF

"$py" scripts/openai_client.py --base-url "http://127.0.0.1:$port/v1" --api-key "$key" \
  --model-id "$(basename "$model")" "$@"
