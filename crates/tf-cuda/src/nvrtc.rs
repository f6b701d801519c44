//! Finding and binding NVRTC: the pinned PyPI copy, a path from `TF_NVRTC_LIB`, or the system's.

use crate::Error;
use cudarc::nvrtc::sys;
use std::ffi::{CStr, c_void};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// The NVRTC major version cudarc's `cuda-13000` bindings are written against.
const MAJOR: i32 = 13;
const LIB_NAME: &str = "libnvrtc.so.13";

/// The NVRTC this process compiles with; cudarc binds one library per process, so it is loaded once.
#[derive(Debug)]
pub struct Nvrtc {
    pub version: (i32, i32),
    pub library: PathBuf,
    pub include_dir: Option<PathBuf>,
}

/// Why NVRTC could not be bound; kept for the life of the process (cudarc binds one library, once).
#[derive(Debug, thiserror::Error)]
pub enum NvrtcMissing {
    #[error("{origin}: {path} is not a file")]
    NotAFile { origin: &'static str, path: PathBuf },
    #[error("{origin}: {path}: {source}")]
    ReadDir { origin: &'static str, path: PathBuf, source: std::io::Error },
    #[error("{origin}: {path}: {source}")]
    Open { origin: &'static str, path: PathBuf, source: libloading::Error },
    #[error("no {} in [{searched}] or on the dynamic loader's path", LIB_NAME)]
    NotFound { searched: String },
    #[error("NVRTC has no nvrtcVersion: {0}")]
    NoVersionSymbol(libloading::Error),
    #[error("dladdr found no file for nvrtcVersion")]
    NoFile,
    #[error(
        "cudarc bound {bound} instead of {wanted}: a libnvrtc the dynamic loader finds first (LD_LIBRARY_PATH, ldconfig) shadows it"
    )]
    Shadowed { bound: PathBuf, wanted: PathBuf },
    #[error("nvrtcVersion: {0}")]
    Version(cudarc::nvrtc::result::NvrtcError),
    #[error("{library} is NVRTC {major}.{minor}; tf-cuda needs {}.x", MAJOR)]
    WrongMajor { library: PathBuf, major: i32, minor: i32 },
}

static LOADED: OnceLock<Result<Nvrtc, Arc<NvrtcMissing>>> = OnceLock::new();

impl Nvrtc {
    /// NVRTC from this workspace's pinned copy (`scripts/install-nvrtc.sh`), as the kernel compile tests need it.
    pub fn load_pinned() -> Result<&'static Nvrtc, Error> {
        let pinned = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/nvrtc/nvidia/cu13/lib");
        Nvrtc::load(&[pinned])
    }

    /// NVRTC from `TF_NVRTC_LIB` (file or dir), else the first of `dirs`, else the loader's path; first call wins.
    pub fn load(dirs: &[PathBuf]) -> Result<&'static Nvrtc, Error> {
        LOADED.get_or_init(|| bind(dirs).map_err(Arc::new)).as_ref().map_err(|e| Error::NvrtcNotFound(e.clone()))
    }
}

fn bind(dirs: &[PathBuf]) -> Result<Nvrtc, NvrtcMissing> {
    let from_env = std::env::var_os("TF_NVRTC_LIB").map(PathBuf::from);
    let explicit = match &from_env {
        Some(p) if p.is_dir() => Some(p.join(LIB_NAME)),
        Some(p) => Some(p.clone()),
        None => dirs.iter().map(|d| d.join(LIB_NAME)).find(|p| p.is_file()),
    };
    if let Some(lib) = &explicit {
        let origin = if from_env.is_some() { "TF_NVRTC_LIB" } else { "given dir" };
        preload(lib, origin)?;
    }
    // SAFETY: cudarc only dlopens candidate names here, which runs no foreign code beyond library initializers.
    if !unsafe { sys::is_culib_present() } {
        let searched: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        return Err(NvrtcMissing::NotFound { searched: searched.join(", ") });
    }
    let library = bound_path()?;
    if let Some(lib) = &explicit
        && std::fs::canonicalize(lib).ok() != std::fs::canonicalize(&library).ok()
    {
        return Err(NvrtcMissing::Shadowed { bound: library, wanted: lib.clone() });
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: plain out-parameters.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }.result().map_err(NvrtcMissing::Version)?;
    if major != MAJOR {
        return Err(NvrtcMissing::WrongMajor { library, major, minor });
    }
    Ok(Nvrtc { version: (major, minor), include_dir: include_dir(&library), library })
}

/// Opens NVRTC and its builtins by path for good, so later by-name dlopens (cudarc's, NVRTC's) match their sonames.
fn preload(lib: &Path, origin: &'static str) -> Result<(), NvrtcMissing> {
    if !lib.is_file() {
        return Err(NvrtcMissing::NotAFile { origin, path: lib.to_path_buf() });
    }
    let dir = lib.parent().unwrap_or(Path::new("."));
    let read = std::fs::read_dir(dir).map_err(|source| NvrtcMissing::ReadDir { origin, path: dir.into(), source })?;
    let builtins = read.filter_map(|e| {
        let name = e.ok()?.file_name().into_string().ok()?;
        (name.starts_with("libnvrtc-builtins.so.") && !name.contains(".alt.")).then(|| dir.join(name))
    });
    for path in builtins.chain([lib.to_path_buf()]) {
        // SAFETY: NVIDIA's libraries run no initializers that depend on our state.
        let handle = unsafe { libloading::Library::new(&path) }.map_err(|source| NvrtcMissing::Open {
            origin,
            path: path.clone(),
            source,
        })?;
        // Never unloaded: cudarc holds symbols from it for the life of the process.
        std::mem::forget(handle);
    }
    Ok(())
}

/// The file cudarc actually bound, from the address of one of its symbols.
fn bound_path() -> Result<PathBuf, NvrtcMissing> {
    // SAFETY: `is_culib_present` succeeded, so `culib` finds a library instead of panicking.
    let symbol = unsafe { sys::culib().get::<unsafe extern "C" fn()>(b"nvrtcVersion") }
        .map_err(NvrtcMissing::NoVersionSymbol)?;
    let address = *symbol as *const c_void;
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: `address` is a live symbol of a loaded library and `info` is a valid out-parameter.
    if unsafe { libc::dladdr(address, &mut info) } == 0 || info.dli_fname.is_null() {
        return Err(NvrtcMissing::NoFile);
    }
    // SAFETY: dladdr returned a NUL-terminated name owned by the loader.
    let name = unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned();
    Ok(PathBuf::from(name))
}

/// CUDA headers: `TF_CUDA_INCLUDE`, else `../include` from NVRTC's dir (PyPI wheels and toolkits both lay it so).
fn include_dir(library: &Path) -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("TF_CUDA_INCLUDE") {
        return Some(PathBuf::from(dir));
    }
    let dir = library.parent()?.parent()?.join("include");
    dir.join("cuda_bf16.h").is_file().then_some(dir)
}
