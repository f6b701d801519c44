#!/usr/bin/env bash
# Builds the GPU self-check into gpu-carry/ (git-ignored) for the GPU machine: run here, installs nothing; see scripts/gpu-check.sh.
# TF_CARRY: checks (default), gate, bench, serve (tf, xtask; with TF_CARRY_XZ=1) or a list; tree + carry stay under 64 MiB.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
carry="$root/gpu-carry"
bins=()
for part in ${TF_CARRY:-checks}; do
  case "$part" in
    checks)
      cargo build --release --locked -p tf-cuda --bin tf-gpu-check
      cargo build --release --locked -p tf-exl3 --bin tf-exl3-gpu-check
      cargo build --release --locked -p tf-dsv41 --features testkit --bin tf-dsv41-gpu-check
      bins+=(tf-gpu-check tf-exl3-gpu-check tf-dsv41-gpu-check) ;;
    gate) cargo build --release --locked -p xtask; bins+=(xtask) ;;
    bench) cargo build --release --locked -p tf-dsv41 --features testkit --bin tf-dsv41-gpu-bench; bins+=(tf-dsv41-gpu-bench) ;;
    serve)
      cargo build --release --locked -p tf-server --bin tf
      cargo build --release --locked -p xtask
      bins+=(tf xtask) ;;
    *) echo "gpu-build: TF_CARRY: \`$part\` is not checks, gate, bench or serve" >&2; exit 2 ;;
  esac
done
rm -rf "$carry"
mkdir -p "$carry"
for b in "${bins[@]}"; do
  # Debug info stays here (for backtraces, symbolize with these builds); the carry has a 64 MiB limit.
  objcopy --strip-debug "target/release/$b" "$carry/$b"
  # Only the C runtime may be linked: libcuda and libnvrtc are dlopened at run time, Rust crates are static.
  extra="$(ldd "$carry/$b" | grep -Ev 'linux-vdso|/ld-linux-x86-64|lib(c|m|gcc_s|pthread|dl|rt)\.so' || true)"
  if [[ -n "$extra" ]]; then
    echo "gpu-build: $b links more than glibc basics:" >&2
    echo "$extra" >&2
    exit 1
  fi
  glibc="$(objdump -T "$carry/$b" | grep -o 'GLIBC_[0-9.]*' | sort -Vu | tail -1)"
  echo "gpu-build: $b needs at most $glibc; ldd:"
  ldd "$carry/$b" | sed 's/^/  /'
done
# CUDA headers for NVRTC, only with TF_CARRY_HEADERS=1: the GPU machine's CUDA 13.0 toolkit has them (gpu-env.sh decides).
headers="$root/target/nvrtc/nvidia/cu13/include"
if [[ ${TF_CARRY_HEADERS:-0} != 1 ]]; then
  :
elif [[ -f "$headers/cuda_bf16.h" ]]; then
  cp -r "$headers" "$carry/include"
else
  echo "gpu-build: no pinned headers in $headers (scripts/install-nvrtc.sh puts them there); carrying none" >&2
fi
{
  echo "commit $(git rev-parse HEAD)$([[ -z "$(git status --porcelain -- crates scripts Cargo.toml Cargo.lock)" ]] || echo ' +uncommitted changes')"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -srm), $(rustc --version)"
  (cd "$carry" && sha256sum "${bins[@]}")
} >"$carry/MANIFEST"
# TF_CARRY_XZ=1 carries the binaries xz-compressed (a third of their size); gpu-env.sh unpacks them there.
if [[ ${TF_CARRY_XZ:-0} == 1 ]]; then
  for b in "${bins[@]}"; do xz -T2 -6 -f "$carry/$b"; done
fi
size_kib="$(du -sk "$carry" | cut -f1)"
tree_kib="$( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 du -ck 2>/dev/null | tail -1 | cut -f1)"
if ((size_kib + tree_kib > 62 * 1024)); then
  echo "gpu-build: tree ${tree_kib} KiB + gpu-carry ${size_kib} KiB is too near the 64 MiB a device call carries; carry less (TF_CARRY)" >&2
  exit 1
fi
cat "$carry/MANIFEST"
echo "gpu-build: gpu-carry ready (${size_kib} KiB); on the GPU machine: bash scripts/gpu-check.sh"
