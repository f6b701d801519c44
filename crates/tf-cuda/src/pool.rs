//! A device memory pool: buffers are rounded to size classes and kept on free lists, so a warm step never calls cudaMalloc.

use crate::error::{DriverResultExt, Error};
use cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// The smallest class: cudaMalloc rounds every allocation up to 256 bytes anyway.
pub const MIN_CLASS: usize = 256;

/// Four classes per power of two (x, 1.25x, 1.5x, 1.75x): a buffer holds at most 25% more than asked for.
pub fn size_class(bytes: usize) -> Option<usize> {
    if bytes <= MIN_CLASS {
        return Some(MIN_CLASS);
    }
    let top = bytes.checked_next_power_of_two()?;
    let step = top / 8;
    bytes.div_ceil(step).checked_mul(step)
}

/// Counters of a pool; `allocations` rising after warm-up means the hot path reached the driver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    pub allocations: u64,
    pub reuses: u64,
    pub bytes_allocated: usize,
    pub bytes_free: usize,
}

/// Free lists by size class, generic over the buffer so the bookkeeping is tested without a GPU.
#[derive(Debug)]
pub struct FreeLists<B> {
    lists: BTreeMap<usize, Vec<B>>,
    stats: PoolStats,
}

impl<B> Default for FreeLists<B> {
    fn default() -> Self {
        FreeLists { lists: BTreeMap::new(), stats: PoolStats::default() }
    }
}

impl<B> FreeLists<B> {
    /// A free buffer of `class` (from [`size_class`]), else a new one from `alloc()`.
    pub fn take<E>(&mut self, class: usize, alloc: impl FnOnce() -> Result<B, E>) -> Result<B, E> {
        if let Some(buf) = self.lists.get_mut(&class).and_then(Vec::pop) {
            self.stats.reuses += 1;
            self.stats.bytes_free -= class;
            return Ok(buf);
        }
        let buf = alloc()?;
        self.stats.allocations += 1;
        self.stats.bytes_allocated += class;
        Ok(buf)
    }

    /// Puts a buffer of `class` back on its list for the next `take` of that class.
    pub fn give(&mut self, class: usize, buf: B) {
        self.stats.bytes_free += class;
        self.lists.entry(class).or_default().push(buf);
    }

    /// Removes every free buffer (to hand memory back to the driver); buffers in use are untouched.
    pub fn drain(&mut self) -> Vec<B> {
        let drained: Vec<B> = std::mem::take(&mut self.lists).into_values().flatten().collect();
        self.stats.bytes_allocated -= self.stats.bytes_free;
        self.stats.bytes_free = 0;
        drained
    }

    pub fn stats(&self) -> PoolStats {
        self.stats
    }
}

/// Device buffers of one stream, reused across steps; every buffer is allocated and freed on that stream.
#[derive(Debug)]
pub struct DevicePool {
    stream: Arc<CudaStream>,
    lists: Mutex<FreeLists<CudaSlice<u8>>>,
    /// Set while the stream records a graph: a cold allocation then comes from `side`, outside the capture.
    capturing: AtomicBool,
    side: OnceLock<Arc<CudaStream>>,
}

impl DevicePool {
    pub fn new(stream: Arc<CudaStream>) -> DevicePool {
        DevicePool {
            stream,
            lists: Mutex::new(FreeLists::default()),
            capturing: AtomicBool::new(false),
            side: OnceLock::new(),
        }
    }

    pub(crate) fn set_capturing(&self, on: bool) {
        self.capturing.store(on, Ordering::SeqCst);
    }

    pub fn capturing(&self) -> bool {
        self.capturing.load(Ordering::SeqCst)
    }

    /// `bytes` of fresh device memory, ready on the pool's stream; during a capture, allocated and waited for on a side stream.
    fn alloc(&self, bytes: usize, what: impl Fn() -> String) -> Result<CudaSlice<u8>, Error> {
        if !self.capturing() {
            // SAFETY: u8 has no invalid bit patterns; callers write before they read, or read poison on purpose.
            return unsafe { self.stream.alloc::<u8>(bytes) }.doing(what);
        }
        let side = match self.side.get() {
            Some(s) => s,
            None => {
                let s = self.stream.context().new_stream().doing(|| "creating the pool's side stream".into())?;
                self.side.get_or_init(|| s)
            }
        };
        // SAFETY: as above; the side stream's sync makes the memory usable on the capturing stream at once.
        let slice = unsafe { side.alloc::<u8>(bytes) }.doing(&what)?;
        side.synchronize().doing(what)?;
        Ok(slice)
    }

    fn lists(&self) -> MutexGuard<'_, FreeLists<CudaSlice<u8>>> {
        // A panic while holding the lock leaves the lists consistent: every update is a single push or pop.
        self.lists.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A buffer of at least `bytes` (contents undefined), returned to the pool when dropped.
    pub fn take(&self, bytes: usize) -> Result<PoolBuf<'_>, Error> {
        let class = size_class(bytes)
            .ok_or_else(|| Error::Launch { op: "device pool", what: format!("no size class holds {bytes} bytes") })?;
        let slice =
            self.lists().take(class, || self.alloc(class, || format!("cudaMalloc of {class} bytes (for {bytes})")))?;
        Ok(PoolBuf { slice: Some(slice), len: bytes, class, pool: self })
    }

    /// A buffer of exactly `bytes` (weights: no size-class slack); on drop it waits on its own list for a take of that size.
    pub fn take_exact(&self, bytes: usize) -> Result<PoolBuf<'_>, Error> {
        let class = bytes.max(1);
        let slice = self.lists().take(class, || self.alloc(class, || format!("cudaMalloc of {class} bytes")))?;
        Ok(PoolBuf { slice: Some(slice), len: bytes, class, pool: self })
    }

    /// Frees every buffer not in use, once the stream's queued work (which may still read them) is done.
    pub fn release_free(&self) -> Result<(), Error> {
        self.stream.synchronize().doing(|| "waiting for the stream before freeing pooled memory".into())?;
        drop(self.lists().drain());
        Ok(())
    }

    pub fn stats(&self) -> PoolStats {
        self.lists().stats()
    }
}

/// A pooled device buffer of `len` bytes (its allocation may be larger); goes back to its pool on drop.
#[derive(Debug)]
pub struct PoolBuf<'p> {
    slice: Option<CudaSlice<u8>>,
    len: usize,
    class: usize,
    pool: &'p DevicePool,
}

impl PoolBuf<'_> {
    /// Bytes asked for.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The whole allocation, for kernel arguments (a device pointer to its first byte).
    pub fn dev(&self) -> &CudaSlice<u8> {
        self.slice.as_ref().expect("a PoolBuf holds its slice until dropped")
    }

    pub fn dev_mut(&mut self) -> &mut CudaSlice<u8> {
        self.slice.as_mut().expect("a PoolBuf holds its slice until dropped")
    }

    /// The `len` bytes asked for, for copies.
    pub fn view(&self) -> CudaView<'_, u8> {
        self.dev().slice(..self.len)
    }

    pub fn view_mut(&mut self) -> CudaViewMut<'_, u8> {
        let len = self.len;
        self.dev_mut().slice_mut(..len)
    }
}

impl Drop for PoolBuf<'_> {
    fn drop(&mut self) {
        if let Some(slice) = self.slice.take() {
            self.pool.lists().give(self.class, slice);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_cover_requests_with_bounded_waste() {
        let mut last = 0;
        for bytes in (0..70_000).chain([1 << 20, (1 << 30) + 1, 3 << 40]) {
            let class = size_class(bytes).unwrap();
            assert!(class >= bytes && class >= MIN_CLASS, "{bytes} -> {class}");
            assert!(bytes <= MIN_CLASS || (class - bytes) * 4 < bytes, "{bytes} -> {class}: too much waste");
            assert!(class >= last, "classes grow with the request");
            assert_eq!(size_class(class), Some(class), "a class is its own class");
            assert_eq!(class % 64, 0, "{class}: whole 64-byte steps");
            last = class;
        }
        assert_eq!([300, 320, 321, 512, 513].map(|b| size_class(b).unwrap()), [320, 320, 384, 512, 640]);
        assert_eq!(size_class(usize::MAX), None);
    }

    #[test]
    fn four_classes_per_octave() {
        let classes: std::collections::BTreeSet<usize> = (4097..=8192).map(|b| size_class(b).unwrap()).collect();
        assert_eq!(classes.into_iter().collect::<Vec<_>>(), [5120, 6144, 7168, 8192]);
    }

    #[test]
    fn free_lists_reuse_by_class() {
        let mut lists = FreeLists::<Vec<u8>>::default();
        let class = size_class(1000).unwrap();
        let alloc = || Ok::<_, ()>(vec![0u8; class]);
        let (a, b) = (lists.take(class, alloc).unwrap(), lists.take(class, alloc).unwrap());
        assert_eq!((class, a.len()), (1024, 1024));
        lists.give(class, a);
        lists.give(class, b);
        assert_eq!(lists.stats(), PoolStats { allocations: 2, reuses: 0, bytes_allocated: 2048, bytes_free: 2048 });
        let c = lists.take(size_class(900).unwrap(), || Err("must reuse")).unwrap();
        assert_eq!(c.len(), 1024, "900 bytes share the 1024 class");
        let big = size_class(2000).unwrap();
        let d = lists.take(big, || Ok::<_, ()>(vec![0u8; big])).unwrap();
        assert_eq!(lists.stats().allocations, 3, "a new class allocates");
        lists.give(big, d);
        assert_eq!(lists.stats().bytes_free, 1024 + 2048);
        assert_eq!(lists.drain().len(), 2);
        assert_eq!(lists.stats(), PoolStats { allocations: 3, reuses: 1, bytes_allocated: 1024, bytes_free: 0 });
        assert_eq!(lists.take(big, || Err("empty after drain")), Err("empty after drain"));
    }
}
