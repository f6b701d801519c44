"""The pinned NVRTC of scripts/install-nvrtc.sh, compiling a source as tf-cuda does (--std=c++17, --fmad=false)."""
import ctypes
import os
import sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
nvrtc_dir = os.path.join(root, "target", "nvrtc", "nvidia", "cu13")


def load(tool):
    """The NVRTC library, or an exit naming `tool` and the install script."""
    try:
        # NVRTC dlopens its builtins by name: load them first, globally, so that finds them without LD_LIBRARY_PATH.
        ctypes.CDLL(os.path.join(nvrtc_dir, "lib", "libnvrtc-builtins.so.13.0"), mode=ctypes.RTLD_GLOBAL)
        return ctypes.CDLL(os.path.join(nvrtc_dir, "lib", "libnvrtc.so.13"))
    except OSError as e:
        sys.exit(f"{tool}: {e}; run scripts/install-nvrtc.sh first")


def compile_program(lib, src, arch, extra):
    """(program, return code, log) of `src` for `arch` with tf-cuda's options plus `extra`."""
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"kernel.cu", 0, None, None) == 0
    opts = [f"--gpu-architecture={arch}", "--std=c++17", "--fmad=false", f"-I{nvrtc_dir}/include"] + extra
    opts = [o.encode() for o in opts]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    n = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetProgramLog(prog, log)
    return prog, rc, log.value.decode()
