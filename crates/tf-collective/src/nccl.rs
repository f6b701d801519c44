//! NCCL as a communicator: each collective gathers every rank's encoded contribution over NCCL, then combines on the host by the in-process rules (same bits, same errors).

use crate::op::{self, Contribution, Loopback, Op, Payload, Rounds};
use crate::tcp::{decode, encode};
use crate::{Comm, CommError, TcpComm};
use cudarc::driver::{CudaContext, CudaStream, DevicePtr, DevicePtrMut};
use parking_lot::Mutex;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// NCCL's 128-byte group id, made by one rank and handed to the others.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    internal: [c_char; 128],
}

impl Default for UniqueId {
    fn default() -> UniqueId {
        UniqueId { internal: [0; 128] }
    }
}

type RawComm = *mut c_void;
const NCCL_UINT8: c_int = 1;

/// The NCCL entry points we call, loaded at run time so a build needs no NCCL (cudarc looks only for `libnccl.so`, not `.so.2`).
struct Lib {
    _lib: libloading::Library,
    get_unique_id: unsafe extern "C" fn(*mut UniqueId) -> c_int,
    init_rank: unsafe extern "C" fn(*mut RawComm, c_int, UniqueId, c_int) -> c_int,
    all_gather: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, RawComm, *mut c_void) -> c_int,
    send: unsafe extern "C" fn(*const c_void, usize, c_int, c_int, RawComm, *mut c_void) -> c_int,
    recv: unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, RawComm, *mut c_void) -> c_int,
    group_start: unsafe extern "C" fn() -> c_int,
    group_end: unsafe extern "C" fn() -> c_int,
    abort: unsafe extern "C" fn(RawComm) -> c_int,
    async_error: unsafe extern "C" fn(RawComm, *mut c_int) -> c_int,
    error_string: unsafe extern "C" fn(c_int) -> *const c_char,
    version: unsafe extern "C" fn(*mut c_int) -> c_int,
}

/// One entry point, typed as NCCL's C header declares it.
fn sym<T: Copy>(lib: &libloading::Library, name: &[u8]) -> Result<T, String> {
    // SAFETY: every `T` asked for is the C signature of the NCCL function `name` (nccl.h).
    unsafe { lib.get::<T>(name) }.map(|s| *s).map_err(|e| format!("NCCL: {e}"))
}

/// `TF_NCCL_LIB` (a path) if set, else `libnccl.so.2` and `libnccl.so` from the loader's search path.
fn lib() -> Result<&'static Lib, String> {
    static LIB: OnceLock<Result<Lib, String>> = OnceLock::new();
    LIB.get_or_init(|| {
        let names: Vec<String> = match std::env::var("TF_NCCL_LIB") {
            Ok(p) => vec![p],
            Err(_) => vec!["libnccl.so.2".into(), "libnccl.so".into()],
        };
        // SAFETY: loading NCCL runs only its initialisers.
        let lib = names.iter().find_map(|n| unsafe { libloading::Library::new(n) }.ok());
        let lib =
            lib.ok_or_else(|| format!("NCCL not found (tried {names:?}; set TF_NCCL_LIB to libnccl.so.2's path)"))?;
        Ok(Lib {
            get_unique_id: sym(&lib, b"ncclGetUniqueId\0")?,
            init_rank: sym(&lib, b"ncclCommInitRank\0")?,
            all_gather: sym(&lib, b"ncclAllGather\0")?,
            send: sym(&lib, b"ncclSend\0")?,
            recv: sym(&lib, b"ncclRecv\0")?,
            group_start: sym(&lib, b"ncclGroupStart\0")?,
            group_end: sym(&lib, b"ncclGroupEnd\0")?,
            abort: sym(&lib, b"ncclCommAbort\0")?,
            async_error: sym(&lib, b"ncclCommGetAsyncError\0")?,
            error_string: sym(&lib, b"ncclGetErrorString\0")?,
            version: sym(&lib, b"ncclGetVersion\0")?,
            _lib: lib,
        })
    })
    .as_ref()
    .map_err(Clone::clone)
}

fn check(lib: &Lib, what: &str, code: c_int) -> Result<(), String> {
    if code == 0 {
        return Ok(());
    }
    // SAFETY: ncclGetErrorString returns a static C string for any code.
    let msg = unsafe { CStr::from_ptr((lib.error_string)(code)) }.to_string_lossy();
    Err(format!("{what}: NCCL error {code} ({msg})"))
}

/// The loaded NCCL's version, as NCCL encodes it (e.g. 22703 for 2.27.3).
pub fn version() -> Result<i32, String> {
    let lib = lib()?;
    let mut v = 0;
    // SAFETY: writes one int.
    check(lib, "ncclGetVersion", unsafe { (lib.version)(&mut v) })?;
    Ok(v)
}

/// A fresh group id, made on one rank and given to every rank's [`NcclComm::new`].
pub fn unique_id() -> Result<UniqueId, String> {
    let lib = lib()?;
    let mut id = UniqueId::default();
    // SAFETY: writes the 128-byte id.
    check(lib, "ncclGetUniqueId", unsafe { (lib.get_unique_id)(&mut id) })?;
    Ok(id)
}

/// One rank of an NCCL group on one GPU; host buffers pass through device memory.
pub struct NcclComm {
    lib: &'static Lib,
    comm: RawComm,
    stream: Arc<CudaStream>,
    rank: usize,
    world: usize,
    timeout: Option<Duration>,
    broken: Mutex<Option<CommError>>,
    own: Loopback,
}

// SAFETY: the NCCL handle is used by one thread at a time (`Comm` is not `Sync`), and NCCL allows that thread to change.
unsafe impl Send for NcclComm {}

impl NcclComm {
    /// Rank `rank` of `world` on GPU `ordinal`, in the group of `id`; every wait gives up after `timeout` (the group then breaks).
    pub fn new(
        ordinal: usize,
        rank: usize,
        world: usize,
        id: UniqueId,
        timeout: Option<Duration>,
    ) -> Result<NcclComm, String> {
        let lib = lib()?;
        let ctx = CudaContext::new(ordinal).map_err(|e| format!("GPU {ordinal}: {e}"))?;
        let stream = ctx.new_stream().map_err(|e| format!("GPU {ordinal}: {e}"))?;
        ctx.bind_to_thread().map_err(|e| format!("GPU {ordinal}: {e}"))?;
        let mut comm: RawComm = std::ptr::null_mut();
        // SAFETY: every rank of the group calls this with the same id and world; it blocks until all have joined.
        check(lib, "ncclCommInitRank", unsafe { (lib.init_rank)(&mut comm, world as c_int, id, rank as c_int) })?;
        Ok(NcclComm { lib, comm, stream, rank, world, timeout, broken: Mutex::new(None), own: Loopback::default() })
    }

    /// Joins a group across processes: rank 0 makes the id and hands it out over a TCP ring that meets at `addr`.
    pub fn join(
        ordinal: usize,
        rank: usize,
        world: usize,
        addr: &str,
        timeout: Option<Duration>,
    ) -> Result<NcclComm, String> {
        let tcp = TcpComm::join(rank, world, addr, timeout).map_err(|e| format!("NCCL bootstrap at {addr}: {e}"))?;
        let mut bytes = if rank == 0 { unique_id()?.internal.iter().map(|&c| c as u8).collect() } else { Vec::new() };
        tcp.broadcast_bytes(&mut bytes, 0).map_err(|e| format!("NCCL bootstrap: {e}"))?;
        let mut id = UniqueId::default();
        id.internal.iter_mut().zip(&bytes).for_each(|(d, &b)| *d = b as c_char);
        NcclComm::new(ordinal, rank, world, id, timeout)
    }

    /// Every rank's `send` (same length on all), in rank order; waits at most `timeout`.
    fn gather(&self, send: &[u8], timeout: Option<Duration>) -> Result<Vec<u8>, CommError> {
        let lost = |detail: String| CommError::Transport { detail };
        let s = &self.stream;
        s.context().bind_to_thread().map_err(|e| lost(e.to_string()))?;
        let src = s.clone_htod(send).map_err(|e| lost(e.to_string()))?;
        let mut dst = s.alloc_zeros::<u8>(send.len() * self.world).map_err(|e| lost(e.to_string()))?;
        {
            let (sp, _s) = src.device_ptr(s);
            let (dp, _d) = dst.device_ptr_mut(s);
            let cu = s.cu_stream() as *mut c_void;
            // SAFETY: both buffers live on this stream's device and hold send.len() and world × send.len() bytes.
            let code = unsafe {
                (self.lib.all_gather)(sp as *const c_void, dp as *mut c_void, send.len(), NCCL_UINT8, self.comm, cu)
            };
            check(self.lib, "ncclAllGather", code).map_err(lost)?;
        }
        self.wait(timeout)?;
        s.clone_dtoh(&dst).map_err(|e| lost(e.to_string()))
    }

    /// One grouped NCCL send of `send` and receive of `recv.1` bytes from rank `recv.0`; waits at most `timeout`.
    fn p2p_bytes(
        &self,
        send: Option<(&[u8], usize)>,
        recv: Option<(usize, usize)>,
        timeout: Option<Duration>,
    ) -> Result<Option<Vec<u8>>, CommError> {
        let lost = |detail: String| CommError::Transport { detail };
        let s = &self.stream;
        s.context().bind_to_thread().map_err(|e| lost(e.to_string()))?;
        // One byte at least: a zero-length device buffer cannot be allocated, and NCCL reads only `count` bytes.
        let mut src = s.alloc_zeros::<u8>(send.map_or(1, |(b, _)| b.len().max(1))).map_err(|e| lost(e.to_string()))?;
        if let Some((b, _)) = send.filter(|(b, _)| !b.is_empty()) {
            s.memcpy_htod(b, &mut src).map_err(|e| lost(e.to_string()))?;
        }
        let mut dst = s.alloc_zeros::<u8>(recv.map_or(1, |(_, n)| n.max(1))).map_err(|e| lost(e.to_string()))?;
        {
            let (sp, _s) = src.device_ptr(s);
            let (dp, _d) = dst.device_ptr_mut(s);
            let cu = s.cu_stream() as *mut c_void;
            let lib = self.lib;
            // SAFETY: a group of at most one send and one receive on buffers of this stream's device, each at least `count` bytes.
            unsafe {
                check(lib, "ncclGroupStart", (lib.group_start)()).map_err(lost)?;
                let sent = send.map_or(0, |(b, to)| {
                    (lib.send)(sp as *const c_void, b.len(), NCCL_UINT8, to as c_int, self.comm, cu)
                });
                let got = recv
                    .map_or(0, |(from, n)| (lib.recv)(dp as *mut c_void, n, NCCL_UINT8, from as c_int, self.comm, cu));
                let end = (lib.group_end)();
                check(lib, "ncclSend", sent)
                    .and(check(lib, "ncclRecv", got))
                    .and(check(lib, "ncclGroupEnd", end))
                    .map_err(lost)?;
            }
        }
        self.wait(timeout)?;
        let Some((_, n)) = recv else { return Ok(None) };
        let mut out = s.clone_dtoh(&dst).map_err(|e| lost(e.to_string()))?;
        out.truncate(n);
        Ok(Some(out))
    }

    /// Point to point: lengths first, so a receiver takes exactly what was sent and a mismatch is an error, not a hang.
    fn exchange(&self, send: Option<(&[f32], usize)>, from: Option<usize>) -> Result<Option<Vec<f32>>, CommError> {
        if let Some(e) = self.broken.lock().clone() {
            return Err(e);
        }
        if send.is_none() && from.is_none() {
            return Ok(None);
        }
        let run = || -> Result<Option<Vec<f32>>, CommError> {
            let len = send.map(|(b, _)| (b.len() as u64).to_le_bytes());
            let n = self.p2p_bytes(
                send.zip(len.as_ref()).map(|((_, to), l)| (&l[..], to)),
                from.map(|f| (f, 8)),
                self.timeout,
            )?;
            let n = n.map(|b| u64::from_le_bytes(b[..8].try_into().expect("8 bytes")) as usize);
            let bytes: Option<Vec<u8>> = send.map(|(b, _)| b.iter().flat_map(|f| f.to_le_bytes()).collect());
            let payload = send.zip(bytes.as_deref()).map(|((_, to), b)| (b, to));
            let got = self.p2p_bytes(payload, from.zip(n).map(|(f, n)| (f, n * 4)), self.timeout)?;
            Ok(got.map(|b| b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect()))
        };
        run().inspect_err(|e| {
            *self.broken.lock() = Some(e.clone());
            // SAFETY: aborting ends this rank's pending NCCL work; the handle is not used again.
            let _ = unsafe { (self.lib.abort)(self.comm) };
        })
    }

    /// Polls the stream until the collective ends, NCCL reports a failure, or `timeout` passes (then the group is aborted).
    fn wait(&self, timeout: Option<Duration>) -> Result<(), CommError> {
        let start = Instant::now();
        loop {
            // SAFETY: the stream is alive; querying it has no side effect.
            let q = unsafe { cudarc::driver::sys::cuStreamQuery(self.stream.cu_stream()) };
            if q == cudarc::driver::sys::cudaError_enum::CUDA_SUCCESS {
                return Ok(());
            }
            if q != cudarc::driver::sys::cudaError_enum::CUDA_ERROR_NOT_READY {
                return Err(CommError::Transport { detail: format!("waiting for NCCL: {q:?}") });
            }
            let mut async_err = 0;
            // SAFETY: writes one int; the handle is alive.
            let _ = unsafe { (self.lib.async_error)(self.comm, &mut async_err) };
            if async_err != 0 {
                let detail = check(self.lib, "NCCL", async_err).err().unwrap_or_default();
                return Err(CommError::Transport { detail });
            }
            if let Some(after) = timeout.filter(|&t| start.elapsed() > t) {
                return Err(CommError::Timeout { after });
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }
}

impl Rounds for NcclComm {
    fn group(&self) -> (usize, usize, Option<Duration>) {
        (self.rank, self.world, self.timeout)
    }

    fn p2p(&self, send: Option<(&[f32], usize)>, from: Option<usize>) -> Result<Option<Vec<f32>>, CommError> {
        self.exchange(send, from)
    }

    fn loopback(&self) -> &Loopback {
        &self.own
    }

    fn round(&self, op: Op, data: Payload, timeout: Option<Duration>) -> Result<Payload, CommError> {
        if let Some(e) = self.broken.lock().clone() {
            return Err(e);
        }
        let mine = encode(&Contribution { op, data });
        let run = || -> Result<Vec<Contribution>, CommError> {
            // Lengths first, so every rank pads its contribution to the longest.
            let lens = self.gather(&(mine.len() as u64).to_le_bytes(), timeout)?;
            let lens: Vec<usize> =
                lens.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")) as usize).collect();
            let max = lens.iter().copied().max().unwrap_or(0);
            let mut padded = mine.clone();
            padded.resize(max, 0);
            let all = self.gather(&padded, timeout)?;
            all.chunks_exact(max).zip(&lens).map(|(c, &n)| decode(&c[..n])).collect()
        };
        match run() {
            Ok(parts) => op::combine(parts, self.world),
            Err(e) => {
                // A transport failure or a timeout leaves NCCL in an unknown state: the group is broken from here on.
                *self.broken.lock() = Some(e.clone());
                // SAFETY: aborting ends this rank's pending NCCL work; the handle is not used again.
                let _ = unsafe { (self.lib.abort)(self.comm) };
                Err(e)
            }
        }
    }
}

impl Drop for NcclComm {
    fn drop(&mut self) {
        if self.broken.lock().is_none() {
            // SAFETY: no collective is in flight (calls wait for theirs); the handle is not used again.
            let _ = unsafe { (self.lib.abort)(self.comm) };
        }
    }
}
