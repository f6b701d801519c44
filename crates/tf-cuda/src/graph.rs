//! Steps recorded as CUDA graphs and replayed through an updated executable: one graph launch instead of hundreds.

use crate::error::{DriverResultExt, Error};
use cudarc::driver::sys::{self, CUgraphExecUpdateResultInfo, CUstreamCaptureMode};
use cudarc::driver::{CudaContext, CudaStream, PinnedHostSlice};
use std::collections::HashMap;
use std::sync::Arc;

/// Executables kept per key: a step's topology changes with its position (a compressor group closing, a cache growing).
pub const EXECS_PER_KEY: usize = 8;

/// An instantiated graph, destroyed on drop.
struct Exec(sys::CUgraphExec);

// SAFETY: an executable is only used under the Gpu's graph lock, one thread at a time.
unsafe impl Send for Exec {}

impl Drop for Exec {
    fn drop(&mut self) {
        // SAFETY: the handle came from cuGraphInstantiateWithFlags and is destroyed once; a failure leaks it.
        let _ = unsafe { sys::cuGraphExecDestroy(self.0) };
    }
}

/// A captured template graph, destroyed on drop.
pub(crate) struct Template(sys::CUgraph);

impl Drop for Template {
    fn drop(&mut self) {
        // SAFETY: the handle came from cuStreamEndCapture and is destroyed once.
        let _ = unsafe { sys::cuGraphDestroy(self.0) };
    }
}

/// Executables by step key, most recently used first, and how often each path was taken.
#[derive(Default)]
pub struct GraphCache {
    execs: HashMap<u64, Vec<Exec>>,
    pub stats: GraphStats,
}

/// Counters of [`crate::Gpu::replay`]: `instantiated` rising every step means the topology never repeats.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphStats {
    pub captured: u64,
    pub updated: u64,
    pub instantiated: u64,
}

impl GraphCache {
    /// Launches `graph` through an executable of `key` it updates, else a new one (the oldest of the key dropped).
    pub(crate) fn launch(&mut self, key: u64, graph: &Template, stream: &CudaStream) -> Result<(), Error> {
        self.stats.captured += 1;
        let list = self.execs.entry(key).or_default();
        let mut hit = None;
        for (i, exec) in list.iter().enumerate() {
            // SAFETY: all-zero is a valid out-parameter (result SUCCESS, null nodes); the driver overwrites it.
            let mut info: CUgraphExecUpdateResultInfo = unsafe { std::mem::zeroed() };
            // SAFETY: both handles are live; a failed update leaves the executable as it was, usable for another try.
            if unsafe { sys::cuGraphExecUpdate_v2(exec.0, graph.0, &mut info) } == sys::CUresult::CUDA_SUCCESS {
                hit = Some(i);
                break;
            }
        }
        let exec = match hit {
            Some(i) => {
                self.stats.updated += 1;
                list.remove(i)
            }
            None => {
                self.stats.instantiated += 1;
                let mut exec = std::ptr::null_mut();
                // SAFETY: the template is live; the out-parameter receives a new executable.
                unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph.0, 0) }
                    .result()
                    .doing(|| "instantiating a step graph".into())?;
                Exec(exec)
            }
        };
        // SAFETY: the executable and the stream are live; the launch is ordered on the stream like the work it replaces.
        let launched = unsafe { sys::cuGraphLaunch(exec.0, stream.cu_stream()) }.result();
        list.insert(0, exec);
        list.truncate(EXECS_PER_KEY);
        launched.doing(|| "launching a step graph".into())
    }
}

impl GraphCache {
    /// Launches `key`'s most recent executable again as it stands (a bench's GPU-only step time); false when there is none.
    pub(crate) fn relaunch(&self, key: u64, stream: &CudaStream) -> Result<bool, Error> {
        let Some(exec) = self.execs.get(&key).and_then(|l| l.first()) else { return Ok(false) };
        // SAFETY: the executable and the stream are live.
        unsafe { sys::cuGraphLaunch(exec.0, stream.cu_stream()) }
            .result()
            .doing(|| "relaunching a step graph".into())?;
        Ok(true)
    }
}

/// Pinned host chunks that uploads inside a capture copy from, so the graph's copy nodes read memory that outlives the call.
#[derive(Default)]
pub struct Staging {
    chunks: Vec<(PinnedHostSlice<u8>, *mut u8)>,
    /// Bytes used in the last chunk; earlier chunks are full.
    used: usize,
}

impl std::fmt::Debug for Staging {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Staging").field("chunks", &self.chunks.len()).field("used", &self.used).finish()
    }
}

impl std::fmt::Debug for GraphCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphCache").field("keys", &self.execs.len()).field("stats", &self.stats).finish()
    }
}

// SAFETY: the raw pointers point into the pinned chunks owned beside them; access is under the Gpu's staging lock.
unsafe impl Send for Staging {}

/// The first chunk; later ones double, so a step's uploads take few chunks.
const FIRST_CHUNK: usize = 1 << 20;

impl Staging {
    /// Forgets the last step's bytes: call only once the graph that read them has finished.
    pub(crate) fn reset(&mut self) {
        if self.chunks.len() > 1 {
            // Keep the largest chunk so a steady step fits in one.
            let last = self.chunks.pop().expect("more than one chunk");
            self.chunks = vec![last];
        }
        self.used = 0;
    }

    /// A copy of `bytes` in pinned memory, valid until the next [`Staging::reset`].
    pub(crate) fn stage(&mut self, ctx: &Arc<CudaContext>, bytes: &[u8]) -> Result<&[u8], Error> {
        let fits = |s: &Staging| s.chunks.last().is_some_and(|(c, _)| c.len() - s.used >= bytes.len());
        if !fits(self) {
            let size = self.chunks.last().map_or(FIRST_CHUNK, |(c, _)| c.len() * 2).max(bytes.len());
            // SAFETY: plain page-locked bytes; every byte handed out is written first, below.
            let mut chunk = unsafe { ctx.alloc_pinned_with_flags::<u8>(size, 0) }
                .doing(|| format!("allocating {size} bytes of pinned staging"))?;
            let ptr = chunk.as_mut_ptr().doing(|| "reading a pinned chunk's address".into())?;
            self.chunks.push((chunk, ptr));
            self.used = 0;
        }
        let (_, base) = self.chunks.last().expect("a chunk that fits");
        // SAFETY: `used + len` lies inside the last chunk (checked above), and nothing else writes that range until reset.
        let dst = unsafe { std::slice::from_raw_parts_mut(base.add(self.used), bytes.len()) };
        dst.copy_from_slice(bytes);
        self.used += bytes.len().next_multiple_of(16);
        Ok(dst)
    }
}

/// The capture mode of a step: relaxed, so a cold pool allocation (on its own stream) may happen inside it.
pub(crate) const STEP_CAPTURE: CUstreamCaptureMode = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;

/// Ends the capture on `stream`, returning its graph (none when nothing was recorded).
pub(crate) fn end_capture(stream: &CudaStream) -> Result<Option<Template>, Error> {
    let mut graph = std::ptr::null_mut();
    // SAFETY: the stream is capturing (begun by the caller); the out-parameter receives the graph.
    unsafe { sys::cuStreamEndCapture(stream.cu_stream(), &mut graph) }
        .result()
        .doing(|| "ending a step capture".into())?;
    Ok((!graph.is_null()).then_some(Template(graph)))
}
