//! Compiling our `.cu` source with NVRTC into cubins, and the on-disk cache of them.

use crate::cache::{cache_path, write_atomic};
use crate::{Arch, Error, KernelSpec, Nvrtc};
use cudarc::nvrtc::{result, sys};
use std::ffi::{CStr, CString, c_char};
use std::path::{Path, PathBuf};

/// Options every kernel is compiled with, besides the target, defines and include dir.
const BASE_OPTIONS: [&str; 2] = ["--std=c++17", "--fmad=false"];

/// One compiled module: the cubin the driver loads as is (no JIT), and the PTX it came from.
#[derive(Debug, Clone)]
pub struct Compiled {
    pub cubin: Vec<u8>,
    pub ptx: String,
    pub log: String,
}

/// A cubin from the disk cache or freshly compiled into it.
#[derive(Debug, Clone)]
pub struct Cached {
    pub cubin: Vec<u8>,
    pub path: PathBuf,
    pub hit: bool,
}

/// Frees an NVRTC program on every path out of `compile`.
struct Program(sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by `create_program` and destroyed only here.
        let _ = unsafe { result::destroy_program(self.0) };
    }
}

impl Nvrtc {
    /// Names the compiler and its fixed options in cache keys; the include dir's path is left out.
    pub fn compiler_id(&self) -> String {
        format!("nvrtc-{}.{} {}", self.version.0, self.version.1, BASE_OPTIONS.join(" "))
    }

    /// The NVRTC options for `spec` on `arch`: `--gpu-architecture=sm_90a` makes NVRTC emit SASS.
    pub fn options(&self, spec: &KernelSpec<'_>, arch: Arch) -> Result<Vec<String>, Error> {
        let mut opts = vec![arch.nvrtc_flag()];
        opts.extend(BASE_OPTIONS.map(String::from));
        if let Some(dir) = &self.include_dir {
            opts.push(format!("--include-path={}", dir.display()));
        }
        let mut defines = spec.defines.clone();
        defines.sort();
        for (k, v) in defines {
            if k.is_empty() || !k.chars().all(|c| c == '_' || c.is_ascii_alphanumeric()) {
                return Err(Error::BadSpec { kernel: spec.name.into(), what: format!("bad define name `{k}`") });
            }
            opts.push(format!("--define-macro={k}={v}"));
        }
        Ok(opts)
    }

    /// Compiles `spec` for `arch`; a failure carries NVRTC's log, the options and the kernel's name.
    pub fn compile(&self, spec: &KernelSpec<'_>, arch: Arch) -> Result<Compiled, Error> {
        let bad = |what: &str| Error::BadSpec { kernel: spec.name.into(), what: what.into() };
        let source = CString::new(spec.source).map_err(|_| bad("source holds a NUL byte"))?;
        let name = CString::new(format!("{}.cu", spec.name)).map_err(|_| bad("name holds a NUL byte"))?;
        let options = self.options(spec, arch)?;
        let call = |call: &'static str| {
            move |e: result::NvrtcError| Error::Nvrtc { kernel: spec.name.into(), arch, call, code: format!("{e}") }
        };
        let program = Program(result::create_program(&source, Some(&name)).map_err(call("nvrtcCreateProgram"))?);
        // SAFETY: `program` is live until dropped at the end of this function.
        let compiled = unsafe { result::compile_program(program.0, &options) };
        // SAFETY: as above; the log exists whether or not compilation succeeded.
        let log = text(&unsafe { result::get_program_log(program.0) }.map_err(call("nvrtcGetProgramLog"))?);
        if let Err(e) = compiled {
            return Err(Error::Compile { kernel: spec.name.into(), arch, code: format!("{e}"), options, log });
        }
        // SAFETY: as above, after a successful compile.
        let ptx = text(&unsafe { result::get_ptx(program.0) }.map_err(call("nvrtcGetPTX"))?);
        let mut size = 0usize;
        // SAFETY: as above; `size` is a valid out-parameter.
        unsafe { sys::nvrtcGetCUBINSize(program.0, &mut size) }.result().map_err(call("nvrtcGetCUBINSize"))?;
        let mut cubin = vec![0u8; size];
        // SAFETY: `cubin` has the `size` bytes NVRTC asked for.
        unsafe { sys::nvrtcGetCUBIN(program.0, cubin.as_mut_ptr().cast()) }.result().map_err(call("nvrtcGetCUBIN"))?;
        Ok(Compiled { cubin, ptx, log })
    }

    /// The cubin for `spec` on `arch` from `dir`, compiling and storing it (atomically) on a miss.
    pub fn cubin_cached(&self, dir: &Path, spec: &KernelSpec<'_>, arch: Arch) -> Result<Cached, Error> {
        let path = cache_path(dir, spec, arch, &self.compiler_id());
        if let Ok(cubin) = std::fs::read(&path)
            && cubin.starts_with(b"\x7fELF")
        {
            return Ok(Cached { cubin, path, hit: true });
        }
        let cubin = self.compile(spec, arch)?.cubin;
        write_atomic(&path, &cubin).map_err(|source| Error::Cache { path: path.clone(), source })?;
        Ok(Cached { cubin, path, hit: false })
    }
}

/// NVRTC's NUL-terminated text as a `String`.
fn text(bytes: &[c_char]) -> String {
    let bytes: Vec<u8> = bytes.iter().map(|&c| c as u8).collect();
    CStr::from_bytes_until_nul(&bytes)
        .map_or_else(|_| String::from_utf8_lossy(&bytes).into_owned(), |s| s.to_string_lossy().into_owned())
}
