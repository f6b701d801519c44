#!/usr/bin/env python3
"""A kernel's PTX at a git revision against the working tree (pinned NVRTC, --fmad=false): whether a refactor kept its floating-point ops."""
import argparse
import collections
import ctypes
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nvrtc_lib  # noqa: E402

root = nvrtc_lib.root

EXAMPLE = """example:
  scripts/ptx-diff.py e0487f2 crates/tf-dsv41/kernels/attn.cu --prefix crates/tf-dsv41/kernels/common.cuh \\
    --entry sparse_attn --entry sparse_attn_rows
  scripts/ptx-diff.py e0487f2 crates/tf-cuda/kernels/fp8_gemv.cu --entry fp8_gemv_wide -DFP8_ROWS=2 --old-define=-DFP8W_BF16=1 --new-define=-DFP8_BF16=1
Per entry: `identical` (after renaming registers and labels), else whether the floating-point ops are the same
sequence or only the same multiset (independent ops reordered); a changed multiset lists the opcodes whose counts moved."""
ap = argparse.ArgumentParser(description=__doc__, epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("rev", help="the git revision to compare against")
ap.add_argument("source")
ap.add_argument("--prefix", action="append", default=[], help="files put before the source, as the crate's KernelSource does")
ap.add_argument("--new-prefix", action="append", default=[], help="files put before the source in the working tree's build only (a header new since the revision)")
ap.add_argument("--entry", action="append", required=True)
ap.add_argument("--arch", default="compute_90")
ap.add_argument("--old-define", action="append", default=[], help="a define for the revision's build only")
ap.add_argument("--new-define", action="append", default=[], help="a define for the working tree's build only")
args, defines = ap.parse_known_args()
if any(not d.startswith("-D") for d in defines):
    sys.exit(f"ptx-diff: unknown arguments {defines}")

lib = nvrtc_lib.load("ptx-diff")


def read(path, rev):
    if rev is None:
        return open(os.path.join(root, path)).read()
    cmd = ["git", "-C", root, "show", f"{rev}:{path}"]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def ptx(src, extra):
    prog, rc, log = nvrtc_lib.compile_program(lib, src, args.arch, defines + extra)
    if rc != 0:
        sys.exit(log)
    n = ctypes.c_size_t()
    lib.nvrtcGetPTXSize(prog, ctypes.byref(n))
    out = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetPTX(prog, out)
    return out.value.decode()


def body(text, name):
    m = re.search(r"\.entry " + re.escape(name) + r"\(.*?\n\}\n", text, re.S)
    if m is None:
        sys.exit(f"ptx-diff: no entry {name}")
    # Register numbers, labels and declarations differ between builds of the same code.
    b = re.sub(r"%(r|rd|f|fd|p|rs|h|hh)\d+", r"%\1", m.group(0))
    b = re.sub(r"\$L__BB\d+_\d+", "L", b)
    b = re.sub(r"\.reg \.[a-z0-9]+ \s*%[a-z]+<\d+>;", "", b)
    return [line.strip() for line in b.splitlines() if line.strip() and not line.strip().startswith("//")]


def float_ops(lines):
    ops = [line.split()[0] for line in lines]
    return [o for o in ops if re.match(r"(fma|add|sub|mul|div|max|min|neg|abs|sqrt|rcp|ex2|lg2|cvt)\.", o) and re.search(r"\.f(16|32|64)", o)]


old = ptx("".join(read(p, args.rev) + "\n" for p in args.prefix + [args.source]), args.old_define)
new = ptx("".join(read(p, None) + "\n" for p in args.prefix + args.new_prefix + [args.source]), args.new_define)
for name in args.entry:
    a, b = body(old, name), body(new, name)
    if a == b:
        print(f"{name}: identical ({len(a)} lines)")
        continue
    fa, fb = float_ops(a), float_ops(b)
    ca, cb = collections.Counter(fa), collections.Counter(fb)
    verdict = "same float-op sequence" if fa == fb else "same float-op multiset, reordered" if ca == cb else "float ops differ"
    moved = {k: (ca[k], cb[k]) for k in sorted(set(ca) | set(cb)) if ca[k] != cb[k]}
    print(f"{name}: {verdict} ({len(fa)} vs {len(fb)} float ops, {len(a)} vs {len(b)} lines){' ' + str(moved) if moved else ''}")
