#!/usr/bin/env bash
# Installs NVRTC 13.0 and the CUDA headers our kernels include (pinned PyPI wheels) into target/nvrtc; prints the lib dir.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
prefix="$root/target/nvrtc"
lib="$prefix/nvidia/cu13/lib"
# Wheel hashes from https://pypi.org/simple/<package>/ (linux x86_64 and aarch64); bump both packages together.
pins='nvidia-cuda-nvrtc==13.0.88 --hash=sha256:ad9b6d2ead2435f11cbb6868809d2adeeee302e9bb94bcf0539c7a40d80e8575 --hash=sha256:d27f20a0ca67a4bb34268a5e951033496c5b74870b868bacd046b1b8e0c3267b
nvidia-cuda-runtime==13.0.88 --hash=sha256:422a38f7c739ecbdd3a4b6ec7ed0a1d74db43d8e9bc26685f3d845638922b178 --hash=sha256:8ba16a33998ee3ee2bf11c8f13e36e3ff86a1d6ad165ffeee863d6eabd0b5f67'
if [[ -f "$prefix/.pins" && "$(cat "$prefix/.pins")" == "$pins" && -f "$lib/libnvrtc.so.13" ]]; then
  echo "$lib"
  exit 0
fi
python="${PYTHON:-python3}"
"$python" -m pip --version >/dev/null 2>&1 || { echo "install-nvrtc: needs $python with pip" >&2; exit 1; }
tmp="$prefix.partial.$$"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"
printf '%s\n' "$pins" >"$tmp/requirements.txt"
PIP_ROOT_USER_ACTION=ignore "$python" -m pip install --quiet --disable-pip-version-check --no-deps --only-binary=:all: --no-compile \
  --require-hashes --target "$tmp" -r "$tmp/requirements.txt" >&2
# The .alt builds of NVRTC (about 110 MB) are never loaded by tf-cuda.
rm -f "$tmp"/nvidia/cu13/lib/*.alt.so*
printf '%s' "$pins" >"$tmp/.pins"
rm -rf "$prefix"
mv "$tmp" "$prefix"
echo "$lib"
