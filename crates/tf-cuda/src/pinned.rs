//! Pinned host buffers that data is written into in place and copied from asynchronously: one copy per upload, no pageable bounce.

use crate::error::{DriverResultExt, Error};
use crate::gpu::Gpu;
use crate::pool::PoolBuf;
use cudarc::driver::{CudaEvent, PinnedHostSlice};
use parking_lot::{Mutex, MutexGuard};

struct Slot {
    host: PinnedHostSlice<u8>,
    ptr: *mut u8,
    /// Recorded after the slot's last copy; the slot is written again only once it has passed.
    copied: CudaEvent,
}

// SAFETY: `ptr` points into the pinned allocation owned beside it; it is written only under the ring's lock.
unsafe impl Send for Slot {}

impl Drop for Slot {
    fn drop(&mut self) {
        // The copy may still read the pinned bytes that are freed after this.
        let _ = self.copied.synchronize();
    }
}

/// The two slots and which one is next.
type Slots = ([Option<Slot>; 2], usize);

/// Two pinned slots used in turn, so one fills while the other's copy may still run; each grows to the largest upload.
#[derive(Default)]
pub struct PinnedRing {
    state: Mutex<Slots>,
}

impl std::fmt::Debug for PinnedRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PinnedRing")
    }
}

/// Bytes being written before one copy to the GPU: a pinned slot, or (while a step is captured) a plain buffer the capture stages.
pub struct Staged<'a, 'g> {
    gpu: &'g Gpu,
    held: Option<(MutexGuard<'a, Slots>, usize)>,
    heap: Vec<u64>,
    len: usize,
}

impl PinnedRing {
    /// `len` writable bytes; waits only if the slot's previous copy is still running.
    pub fn stage<'a, 'g>(&'a self, gpu: &'g Gpu, len: usize) -> Result<Staged<'a, 'g>, Error> {
        if gpu.pool().capturing() {
            return Ok(Staged { gpu, held: None, heap: vec![0; len.div_ceil(8)], len });
        }
        let mut st = self.state.lock();
        let i = st.1;
        st.1 ^= 1;
        if let Some(s) = &st.0[i] {
            s.copied.synchronize().doing(|| "waiting for a pinned slot's last copy".into())?;
        }
        if st.0[i].as_ref().is_none_or(|s| s.host.len() < len) {
            let size = len.next_power_of_two().max(1 << 20);
            // SAFETY: plain page-locked bytes; the bytes handed out are written by the caller before the copy reads them.
            let mut host = unsafe { gpu.context().alloc_pinned_with_flags::<u8>(size, 0) }
                .doing(|| format!("allocating {size} bytes of pinned staging"))?;
            let ptr = host.as_mut_ptr().doing(|| "reading a pinned slot's address".into())?;
            let copied = gpu.context().new_event(None).doing(|| "creating a pinned slot's event".into())?;
            st.0[i] = Some(Slot { host, ptr, copied });
        }
        Ok(Staged { gpu, held: Some((st, i)), heap: Vec::new(), len })
    }
}

impl<'g> Staged<'_, 'g> {
    pub fn bytes(&mut self) -> &mut [u8] {
        match &self.held {
            Some((st, i)) => {
                let s = st.0[*i].as_ref().expect("a staged slot exists");
                // SAFETY: the slot holds at least `len` bytes (checked in stage) and its last copy has finished; the lock is held.
                unsafe { std::slice::from_raw_parts_mut(s.ptr, self.len) }
            }
            None => &mut bytemuck::cast_slice_mut(&mut self.heap)[..self.len],
        }
    }

    /// A pooled device buffer with the bytes, copied asynchronously on the stream (ordered before later kernels).
    pub fn upload(self) -> Result<PoolBuf<'g>, Error> {
        let Some((st, i)) = &self.held else {
            return self.gpu.upload(&bytemuck::cast_slice::<u64, u8>(&self.heap)[..self.len]);
        };
        let s = st.0[*i].as_ref().expect("a staged slot exists");
        let mut buf = self.gpu.pool().take(self.len.max(1))?;
        // SAFETY: as in `bytes`; the copy reads the slot until `copied` passes, and nothing writes it before that.
        let src = unsafe { std::slice::from_raw_parts(s.ptr, self.len) };
        let what = || format!("copying {} pinned bytes to the GPU", self.len);
        self.gpu.stream().memcpy_htod(src, &mut buf.dev_mut().slice_mut(..self.len)).doing(what)?;
        if let Err(e) = s.copied.record(self.gpu.stream()) {
            // Without the event the slot could be rewritten under this copy: wait for it here instead.
            let _ = self.gpu.stream().synchronize();
            return Err(e).doing(|| "recording a pinned slot's copy".into());
        }
        Ok(buf)
    }
}
