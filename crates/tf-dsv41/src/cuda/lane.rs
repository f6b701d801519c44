//! A sequence's state on the GPU: window rings, compressed caches, and the host-side counters that index them.

use super::weights::Buf;
use tf_cuda::error::DriverResultExt;
use tf_cuda::{Error, Gpu};

/// A KV source's compressed cache: latents and index keys of completed groups, and the open group's f32 rows.
pub struct GCache {
    pub ratio: usize,
    /// kv and gate rows (f32 `[ratio, d]` each) of the open group (ratio > 1).
    pub open_kv: Buf,
    pub open_gate: Buf,
    pub open_n: usize,
    /// bf16 `[cap, d]`, post-RoPE, FP4 fake-quantized.
    pub latents: Buf,
    /// bf16 `[cap, index_head_dim]` for index-key owners.
    pub index_k: Option<Buf>,
    pub groups: usize,
    pub cap: usize,
    /// Open rows then the window's kv and gate rows (f32), kept while a verify window is armed.
    pub recent: Option<Option<(Buf, Buf)>>,
}

/// Rows waiting for the decoder under bounded replay (the newest `window` rows entering layer n/2).
pub struct GReplay {
    pub pos0: usize,
    pub rows: usize,
    pub x: Buf,
    pub mix: Buf,
    pub engram_ids: Vec<Vec<Vec<u64>>>,
}

/// Everything one sequence carries between forward calls on the GPU.
pub struct GpuLane {
    pub pos: usize,
    /// bf16 `[window, head_dim]` per layer; slot `pos % window`.
    pub windows: Vec<Buf>,
    pub window_floor: Vec<usize>,
    pub compressed: Vec<Option<GCache>>,
    pub last_key_publisher: Option<usize>,
    pub engram: Option<tf_engram::NgramHistory>,
    pub replay: Option<GReplay>,
    /// What the last verify window overwrote, until it is rewound or another call starts.
    pub undo: Option<super::rewind::GUndo>,
}

/// A device copy of `src`.
pub fn dup(gpu: &'static Gpu, src: &Buf) -> Result<Buf, Error> {
    let mut out = gpu.pool().take(src.len())?;
    copy(gpu, src, 0, &mut out, 0, src.len())?;
    Ok(out)
}

/// Copies `bytes` from `src[from..]` to `dst[to..]` on the stream.
pub fn copy(gpu: &'static Gpu, src: &Buf, from: usize, dst: &mut Buf, to: usize, bytes: usize) -> Result<(), Error> {
    if bytes == 0 {
        return Ok(());
    }
    let s = src.dev().slice(from..from + bytes);
    let mut d = dst.dev_mut().slice_mut(to..to + bytes);
    gpu.stream().memcpy_dtod(&s, &mut d).doing(|| format!("copying {bytes} bytes on the GPU"))
}

/// Makes room for `need` rows of `row_bytes` in `buf` (holding `used` rows), doubling and copying when it grows.
pub fn reserve(
    gpu: &'static Gpu,
    buf: &mut Buf,
    cap: usize,
    used: usize,
    need: usize,
    row_bytes: usize,
) -> Result<usize, Error> {
    if need <= cap {
        return Ok(cap);
    }
    let new_cap = need.max(cap * 2).max(64);
    let mut grown = gpu.pool().take(new_cap * row_bytes)?;
    copy(gpu, buf, 0, &mut grown, 0, used * row_bytes)?;
    *buf = grown;
    Ok(new_cap)
}

impl GCache {
    pub fn new(gpu: &'static Gpu, ratio: usize, d: usize, index_dim: Option<usize>) -> Result<GCache, Error> {
        let cap = 64;
        Ok(GCache {
            ratio,
            open_kv: gpu.pool().take(ratio * d * 4)?,
            open_gate: gpu.pool().take(ratio * d * 4)?,
            open_n: 0,
            latents: gpu.pool().take(cap * d * 2)?,
            index_k: index_dim.map(|id| gpu.pool().take(cap * id * 2)).transpose()?,
            groups: 0,
            cap,
            recent: None,
        })
    }

    fn fork(&self, gpu: &'static Gpu) -> Result<GCache, Error> {
        Ok(GCache {
            ratio: self.ratio,
            open_kv: dup(gpu, &self.open_kv)?,
            open_gate: dup(gpu, &self.open_gate)?,
            open_n: self.open_n,
            latents: dup(gpu, &self.latents)?,
            index_k: self.index_k.as_ref().map(|k| dup(gpu, k)).transpose()?,
            groups: self.groups,
            cap: self.cap,
            recent: None,
        })
    }
}

impl GpuLane {
    /// A copy that continues exactly as this lane would (device copies of every buffer).
    pub fn fork(&self, gpu: &'static Gpu) -> Result<GpuLane, Error> {
        let replay = match &self.replay {
            Some(r) => Some(GReplay {
                pos0: r.pos0,
                rows: r.rows,
                x: dup(gpu, &r.x)?,
                mix: dup(gpu, &r.mix)?,
                engram_ids: r.engram_ids.clone(),
            }),
            None => None,
        };
        Ok(GpuLane {
            pos: self.pos,
            windows: self.windows.iter().map(|w| dup(gpu, w)).collect::<Result<_, _>>()?,
            window_floor: self.window_floor.clone(),
            compressed: self
                .compressed
                .iter()
                .map(|c| c.as_ref().map(|c| c.fork(gpu)).transpose())
                .collect::<Result<_, _>>()?,
            last_key_publisher: self.last_key_publisher,
            engram: self.engram.clone(),
            replay,
            undo: None,
        })
    }
}
