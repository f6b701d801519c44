//! One GPU: its context, the one stream all work goes on, kernels loaded from our cached cubins, a memory pool, timing and graphs.

use crate::error::{DriverResultExt, Error};
use crate::graph::{GraphCache, GraphStats, STEP_CAPTURE, Staging, end_capture};
use crate::pool::{DevicePool, PoolBuf};
use crate::{Arch, KernelSpec, Nvrtc, cache_key, default_cache_dir};
use cudarc::driver::sys::{self, CUdevice_attribute, CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaContext, CudaFunction, CudaGraph, CudaModule, CudaStream};
use cudarc::nvrtc::Ptx;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Where NVRTC is looked for after `TF_NVRTC_LIB`: the pinned copy, then the CUDA 13.0 toolkit.
pub fn default_nvrtc_dirs() -> Vec<PathBuf> {
    let pinned = "target/nvrtc/nvidia/cu13/lib";
    vec![
        PathBuf::from(pinned),
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(pinned),
        PathBuf::from("/usr/local/cuda-13.0/targets/x86_64-linux/lib"),
        PathBuf::from("/usr/local/cuda/targets/x86_64-linux/lib"),
    ]
}

/// Loaded functions by a hash of (source hash, entry, defines); a bucket holds each full key beside its function.
type FastFunctions = HashMap<u64, Vec<(FastKey, CudaFunction)>>;

/// What a launch asks for: the source by its compile-time hash, the entry and the defines.
#[derive(Debug, PartialEq)]
struct FastKey {
    source_hash: u64,
    entry: String,
    defines: Vec<(String, String)>,
}

impl FastKey {
    fn matches(&self, spec: &KernelSpec<'_>, entry: &str) -> bool {
        self.source_hash == spec.source_hash() && self.entry == entry && self.defines == spec.defines
    }
}

/// The bucket of (spec, entry), computed without allocating.
fn fast_hash(spec: &KernelSpec<'_>, entry: &str) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    (spec.source_hash(), entry, &spec.defines).hash(&mut h);
    h.finish()
}

/// What the self-check prints about a device.
#[derive(Clone, Debug)]
pub struct GpuInfo {
    pub ordinal: usize,
    pub name: String,
    pub capability: (i32, i32),
    pub arch: Arch,
    pub driver_version: (i32, i32),
    pub total_mem: usize,
    pub sm_count: i32,
    pub nvrtc_version: (i32, i32),
    pub nvrtc_library: PathBuf,
}

/// A device with one non-blocking stream; all work and all pooled memory is ordered on that stream.
#[derive(Debug)]
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    arch: Arch,
    ordinal: usize,
    sm_count: usize,
    nvrtc: &'static Nvrtc,
    cache_dir: PathBuf,
    modules: Mutex<HashMap<String, Arc<CudaModule>>>,
    functions: Mutex<HashMap<(String, String), CudaFunction>>,
    /// Loaded functions found by (source hash, entry, defines), so a launch neither hashes nor compares a source.
    by_name: Mutex<FastFunctions>,
    pool: DevicePool,
    /// Pinned copies of what a step being captured uploads, and the step executables.
    staging: Mutex<Staging>,
    graphs: Mutex<GraphCache>,
}

impl Gpu {
    /// GPU `ordinal` with NVRTC from [`default_nvrtc_dirs`] and the kernel cache at [`default_cache_dir`].
    pub fn open(ordinal: usize) -> Result<Gpu, Error> {
        Gpu::open_with(ordinal, &default_nvrtc_dirs(), default_cache_dir())
    }

    /// GPU `ordinal`; fails naming the device and its capability when we build no kernels for it.
    pub fn open_with(ordinal: usize, nvrtc_dirs: &[PathBuf], cache_dir: PathBuf) -> Result<Gpu, Error> {
        // SAFETY: only dlopens candidate names of libcuda; calling any driver function without it would panic.
        if !unsafe { sys::is_culib_present() } {
            return Err(Error::NoDriver);
        }
        let ctx = CudaContext::new(ordinal).doing(|| format!("creating a context on GPU {ordinal}"))?;
        let name = ctx.name().doing(|| format!("reading GPU {ordinal}'s name"))?;
        let (major, minor) = ctx.compute_capability().doing(|| format!("reading GPU {ordinal}'s capability"))?;
        let arch = Arch::for_capability(major as u32, minor as u32).ok_or_else(|| {
            let known: Vec<String> =
                Arch::ALL.iter().map(|a| format!("{a} ({}.{})", a.capability().0, a.capability().1)).collect();
            Error::UnsupportedGpu { ordinal, name, major, minor, known: known.join(", ") }
        })?;
        let nvrtc = Nvrtc::load(nvrtc_dirs)?;
        let sms = CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT;
        let sm_count = ctx.attribute(sms).doing(|| format!("reading GPU {ordinal}'s SM count"))?.max(1) as usize;
        // SAFETY: every buffer is allocated, used and freed on the one stream below, so stream order is the only order needed.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().doing(|| format!("creating a stream on GPU {ordinal}"))?;
        let pool = DevicePool::new(stream.clone());
        Ok(Gpu {
            ctx,
            stream,
            arch,
            ordinal,
            sm_count,
            nvrtc,
            cache_dir,
            modules: Mutex::default(),
            functions: Mutex::default(),
            by_name: Mutex::default(),
            pool,
            staging: Mutex::default(),
            graphs: Mutex::default(),
        })
    }

    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// Streaming multiprocessors, read once at open: launchers size grids by it.
    pub fn sm_count(&self) -> usize {
        self.sm_count
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    pub fn pool(&self) -> &DevicePool {
        &self.pool
    }

    pub fn nvrtc(&self) -> &'static Nvrtc {
        self.nvrtc
    }

    /// Name, capability, driver, memory and SM count of the device.
    pub fn info(&self) -> Result<GpuInfo, Error> {
        let ord = self.ordinal;
        let mut driver = 0;
        // SAFETY: a plain out-parameter; the driver library is loaded (checked in `open_with`).
        unsafe { sys::cuDriverGetVersion(&mut driver) }.result().doing(|| "cuDriverGetVersion".into())?;
        let sms = CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT;
        Ok(GpuInfo {
            ordinal: ord,
            name: self.ctx.name().doing(|| format!("reading GPU {ord}'s name"))?,
            capability: self.ctx.compute_capability().doing(|| format!("reading GPU {ord}'s capability"))?,
            arch: self.arch,
            driver_version: (driver / 1000, (driver % 1000) / 10),
            total_mem: self.ctx.total_mem().doing(|| format!("reading GPU {ord}'s memory size"))?,
            sm_count: self.ctx.attribute(sms).doing(|| format!("reading GPU {ord}'s SM count"))?,
            nvrtc_version: self.nvrtc.version,
            nvrtc_library: self.nvrtc.library.clone(),
        })
    }

    /// Kernel `entry` of `spec`, compiled through the disk cache once per (spec, arch) and loaded once per process.
    pub fn function(&self, spec: &KernelSpec<'_>, entry: &str) -> Result<CudaFunction, Error> {
        let bucket = fast_hash(spec, entry);
        if let Some(list) = lock(&self.by_name).get(&bucket)
            && let Some((_, f)) = list.iter().find(|(key, _)| key.matches(spec, entry))
        {
            return Ok(f.clone());
        }
        let f = self.function_by_key(spec, entry)?;
        let key = FastKey { source_hash: spec.source_hash(), entry: entry.to_string(), defines: spec.defines.clone() };
        lock(&self.by_name).entry(bucket).or_default().push((key, f.clone()));
        Ok(f)
    }

    fn function_by_key(&self, spec: &KernelSpec<'_>, entry: &str) -> Result<CudaFunction, Error> {
        let key = cache_key(spec, self.arch, &self.nvrtc.compiler_id());
        let fkey = (key, entry.to_string());
        if let Some(f) = lock(&self.functions).get(&fkey) {
            return Ok(f.clone());
        }
        let module = self.module(spec, &fkey.0)?;
        let f = module
            .load_function(entry)
            .doing(|| format!("loading entry `{entry}` of kernel `{}` for {}", spec.name, self.arch))?;
        lock(&self.functions).insert(fkey, f.clone());
        Ok(f)
    }

    fn module(&self, spec: &KernelSpec<'_>, key: &str) -> Result<Arc<CudaModule>, Error> {
        let mut modules = lock(&self.modules);
        if let Some(m) = modules.get(key) {
            return Ok(m.clone());
        }
        let cached = self.nvrtc.cubin_cached(&self.cache_dir, spec, self.arch)?;
        let module = self.ctx.load_module(Ptx::from_binary(cached.cubin)).doing(|| {
            format!("loading the cubin of kernel `{}` for {} ({})", spec.name, self.arch, cached.path.display())
        })?;
        modules.insert(key.to_string(), module.clone());
        Ok(module)
    }

    /// Waits for all work on the stream; `what` names the work in the error, where a kernel fault surfaces.
    pub fn sync(&self, what: &str) -> Result<(), Error> {
        self.not_capturing(what)?;
        self.stream.synchronize().doing(|| format!("waiting for {what} on GPU {}", self.ordinal))
    }

    /// Copies `bytes` into `buf` on the stream; inside a step capture, from a pinned copy the graph can read later.
    fn htod(&self, bytes: &[u8], buf: &mut PoolBuf<'_>) -> Result<(), Error> {
        let what = || format!("copying {} bytes to GPU", bytes.len());
        if !self.pool.capturing() {
            return self.stream.memcpy_htod(bytes, &mut buf.view_mut()).doing(what);
        }
        let mut staging = lock(&self.staging);
        let pinned = staging.stage(&self.ctx, bytes)?;
        self.stream.memcpy_htod(pinned, &mut buf.dev_mut().slice_mut(..bytes.len())).doing(what)
    }

    /// Fails when a step is being captured: `what` would need the GPU's results now.
    fn not_capturing(&self, what: &str) -> Result<(), Error> {
        if self.pool.capturing() {
            return Err(Error::Launch { op: "graph capture", what: format!("{what} inside a captured step") });
        }
        Ok(())
    }

    /// A pooled buffer holding `host`'s bytes.
    pub fn upload<T: bytemuck::Pod>(&self, host: &[T]) -> Result<PoolBuf<'_>, Error> {
        let bytes: &[u8] = bytemuck::cast_slice(host);
        let mut buf = self.pool.take(bytes.len())?;
        self.htod(bytes, &mut buf)?;
        Ok(buf)
    }

    /// An exactly sized buffer holding `host`'s bytes (for weights, which live as long as their model).
    pub fn upload_exact<T: bytemuck::Pod>(&self, host: &[T]) -> Result<PoolBuf<'_>, Error> {
        let bytes: &[u8] = bytemuck::cast_slice(host);
        let mut buf = self.pool.take_exact(bytes.len())?;
        self.htod(bytes, &mut buf)?;
        Ok(buf)
    }

    /// Overwrites `buf` with `host`'s bytes (at most its length).
    pub fn write<T: bytemuck::Pod>(&self, host: &[T], buf: &mut PoolBuf<'_>) -> Result<(), Error> {
        let bytes: &[u8] = bytemuck::cast_slice(host);
        if bytes.len() > buf.len() {
            let what = format!("{} bytes into a {}-byte buffer", bytes.len(), buf.len());
            return Err(Error::Launch { op: "upload", what });
        }
        self.htod(bytes, buf)
    }

    /// The buffer's bytes as `T`s (waits for the stream).
    pub fn download<T: bytemuck::Pod>(&self, buf: &PoolBuf<'_>) -> Result<Vec<T>, Error> {
        self.not_capturing("a download")?;
        let bytes = self.stream.clone_dtoh(&buf.view()).doing(|| format!("copying {} bytes from GPU", buf.len()))?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    /// Milliseconds the work queued by `f` took on the GPU, between two events on the stream.
    pub fn time_ms(&self, f: impl FnOnce(&Gpu) -> Result<(), Error>) -> Result<f32, Error> {
        let timing = Some(CUevent_flags::CU_EVENT_DEFAULT);
        let start = self.ctx.new_event(timing).doing(|| "creating a timing event".into())?;
        let end = self.ctx.new_event(timing).doing(|| "creating a timing event".into())?;
        start.record(&self.stream).doing(|| "recording a start event".into())?;
        f(self)?;
        end.record(&self.stream).doing(|| "recording an end event".into())?;
        start.elapsed_ms(&end).doing(|| "waiting for the timed work".into())
    }

    /// Captures the work `f` queues into a graph instead of running it; replay with `CudaGraph::launch`.
    pub fn capture(&self, f: impl FnOnce(&Gpu) -> Result<(), Error>) -> Result<CudaGraph, Error> {
        // Thread-local mode makes a cudaMalloc (or other unsafe call) inside the capture an error, not a silent sync.
        let mode = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
        self.stream.begin_capture(mode).doing(|| "beginning a graph capture".into())?;
        let queued = f(self);
        let graph = self.stream.end_capture(CUgraphInstantiate_flags(0)).doing(|| "ending a graph capture".into());
        queued?;
        graph?.ok_or_else(|| Error::Launch { op: "graph capture", what: "the capture recorded no graph".into() })
    }
}

impl Gpu {
    /// Runs `f`'s work as one graph through a kept executable of `key` (same stream order, same bits); outer error: the capture's, inner: `f`'s.
    pub fn replay<T, E>(&self, key: u64, f: impl FnOnce() -> Result<T, E>) -> Result<Result<T, E>, Error> {
        // The staging of the last step is reused: its graph must have finished reading it.
        self.sync("the previous step")?;
        lock(&self.staging).reset();
        self.stream.begin_capture(STEP_CAPTURE).doing(|| "beginning a step capture".into())?;
        self.pool.set_capturing(true);
        let out = f();
        self.pool.set_capturing(false);
        let graph = end_capture(&self.stream)?;
        if let (Ok(_), Some(graph)) = (&out, graph) {
            lock(&self.graphs).launch(key, &graph, &self.stream)?;
        }
        Ok(out)
    }

    /// Launches the last step recorded under `key` again, unchanged: it rewrites the same state, so only a bench may use it.
    pub fn relaunch(&self, key: u64) -> Result<bool, Error> {
        lock(&self.graphs).relaunch(key, &self.stream)
    }

    /// How many steps were captured, and how many of them updated a kept executable rather than instantiating one.
    pub fn graph_stats(&self) -> GraphStats {
        lock(&self.graphs).stats
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The maps only ever gain complete entries, so a poisoned lock still guards consistent data.
    m.lock().unwrap_or_else(|p| p.into_inner())
}
