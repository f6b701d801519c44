# Sourced by gpu-check.sh and gpu-bench.sh on the GPU machine: the CUDA libraries, a fresh kernel cache, NVRTC headers.
cuda_lib=/usr/local/cuda-13.0/targets/x86_64-linux/lib
export LD_LIBRARY_PATH="$cuda_lib:/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export RUST_BACKTRACE=1
# A fresh kernel cache, so this machine's NVRTC compiles every kernel the run uses.
TF_CACHE_DIR="$(mktemp -d)"
export TF_CACHE_DIR
if [[ ! -f "$cuda_lib/../include/cuda_bf16.h" && -f gpu-carry/include/cuda_bf16.h ]]; then
  export TF_CUDA_INCLUDE="$PWD/gpu-carry/include"
fi
# Binaries that gpu-build.sh carried xz-compressed (TF_CARRY_XZ=1), unpacked once beside their archives.
for z in gpu-carry/*.xz; do
  if [[ -f $z && ! -x ${z%.xz} ]]; then xz -dkf "$z" && chmod +x "${z%.xz}"; fi
done
# NCCL for the `nccl` check section: the loader's libnccl.so.2, else the one pip's nvidia-nccl or torch brought.
if [[ -z ${TF_NCCL_LIB:-} ]] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2 '; then
  nccl="$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null || true)"
  [[ -f $nccl ]] || nccl="$(find / -xdev -name 'libnccl.so.2' 2>/dev/null | head -1)"
  if [[ -f $nccl ]]; then export TF_NCCL_LIB="$nccl"; fi
fi
# need_carry NAME LOG BIN...: stop with 2 (said in LOG too) unless gpu-carry holds every BIN of TF_CARRY=serve.
need_carry() {
  local name="$1" log="$2" b
  shift 2
  for b in "$@"; do
    [[ -x gpu-carry/$b ]] || { echo "$name: no gpu-carry/$b; build with TF_CARRY=serve" | tee "$log"; exit 2; }
  done
}
# need_ncu NAME: ncu's path in $ncu, or stop with 2 naming NAME.
need_ncu() {
  ncu="$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)"
  [[ -x $ncu ]] || { echo "$1: no ncu on this machine"; exit 2; }
}
