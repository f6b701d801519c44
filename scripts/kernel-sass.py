#!/usr/bin/env python3
"""A kernel compiled as tf-cuda does (pinned NVRTC, --fmad=false): NVRTC time, ptxas registers and spills, optionally SASS."""
import argparse
import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nvrtc_lib  # noqa: E402

EXAMPLE = """example:
  scripts/kernel-sass.py crates/tf-exl3/kernels/exl3.cu --prefix crates/tf-exl3/kernels/exl3_common.cuh \\
    -DEXL3_K=3 -DEXL3_CB=2 --entry exl3_gemv_exact --sass /tmp/exl3.sass
--sass needs cuobjdump and nvdisasm on PATH (not a project dependency), e.g. from
  pip install --target DIR nvidia-cuda-cuobjdump==13.2.51 nvidia-cuda-nvdisasm==13.2.51"""
ap = argparse.ArgumentParser(description=__doc__, epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("source")
ap.add_argument("--prefix", action="append", default=[], help="files put before the source, as tf_exl3::cuda does")
ap.add_argument("--entry", help="report only this entry's ptxas lines (and SASS)")
ap.add_argument("--arch", default="sm_90a")
ap.add_argument("--sass", help="write the SASS here, addresses stripped, so two builds can be diffed")
args, defines = ap.parse_known_args()
if any(not d.startswith("-D") for d in defines):
    sys.exit(f"kernel-sass: unknown arguments {defines}")

lib = nvrtc_lib.load("kernel-sass")
src = "".join(open(p).read() + "\n" for p in args.prefix + [args.source])
t = time.perf_counter()
prog, rc, log = nvrtc_lib.compile_program(lib, src, args.arch, ["-Xptxas", "-v"] + defines)
took = time.perf_counter() - t
if rc != 0:
    sys.exit(log)
n = ctypes.c_size_t()
print(f"nvrtc: {took:.2f} s")
# ptxas prints an entry's name, then its properties; keep the lines of the asked entry.
keep = args.entry is None
for line in log.splitlines():
    m = re.search(r"function '([^']+)'", line)
    if m and "Compiling entry" in line:
        keep = args.entry is None or m.group(1) == args.entry
    if keep and ("Used" in line or "spill" in line or "Compiling entry" in line):
        print(line.strip())
if args.sass:
    if not (shutil.which("cuobjdump") and shutil.which("nvdisasm")):
        sys.exit("kernel-sass: --sass needs cuobjdump and nvdisasm on PATH")
    lib.nvrtcGetCUBINSize(prog, ctypes.byref(n))
    cubin = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetCUBIN(prog, cubin)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin.raw)
        f.flush()
        cmd = ["cuobjdump", "-sass"] + (["-fun", args.entry] if args.entry else []) + [f.name]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    ins = re.findall(r"/\*[0-9a-f]{4,}\*/\s*([^;]*;)", out)
    with open(args.sass, "w") as f:
        f.write("\n".join(i.strip() for i in ins) + "\n")
    print(f"sass: {len(ins)} instructions in {args.sass}")
