//! cuBLASLt on the GPU's stream: the benches' FP8 and bf16 matrix-rate ceilings, and the tensor-core GEMMs prompt paths use.

use crate::error::{DriverResultExt, Error};
use crate::gpu::Gpu;
use cudarc::cublaslt::result::{self as lt, CublasError};
use cudarc::cublaslt::sys::{
    self, cublasComputeType_t, cublasLtMatmulDescAttributes_t as Desc, cublasLtMatmulPreferenceAttributes_t as Pref,
    cudaDataType,
};
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::ffi::c_void;

/// Workspace cuBLASLt may use per call (its Hopper recommendation).
const WORKSPACE: usize = 32 << 20;

fn blas_err(what: &str, e: CublasError) -> Error {
    Error::Launch { op: "cublasLt", what: format!("{what}: {e}") }
}

/// A cuBLASLt handle and its workspace, for work on one [`Gpu`]'s stream; a shape's plan is built once.
pub struct Blas<'g> {
    gpu: &'g Gpu,
    handle: sys::cublasLtHandle_t,
    workspace: CudaSlice<u8>,
    plans: HashMap<(Gemm, usize, usize, usize), Plan>,
}

/// Operand and output types of a TN matmul (f32 accumulation on tensor cores in every case).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Gemm {
    /// E4M3 codes in, bf16 out.
    Fp8Bf16,
    /// fp16 in, f32 out, with b stored `[k, n]` (not transposed): d = a · b.
    F16F32,
    /// bf16 in, bf16 out (the bf16 matrix rate).
    Bf16,
}

impl Gemm {
    /// (operand type, bytes per operand element, output type, bytes per output element).
    fn types(self) -> (cudaDataType, usize, cudaDataType, usize) {
        match self {
            Gemm::Fp8Bf16 => (cudaDataType::CUDA_R_8F_E4M3, 1, cudaDataType::CUDA_R_16BF, 2),
            Gemm::F16F32 => (cudaDataType::CUDA_R_16F, 2, cudaDataType::CUDA_R_32F, 4),
            Gemm::Bf16 => (cudaDataType::CUDA_R_16BF, 2, cudaDataType::CUDA_R_16BF, 2),
        }
    }

    /// Whether b is stored `[n, k]` (the TN form: d = a · bᵀ) rather than `[k, n]`.
    fn b_transposed(self) -> bool {
        self != Gemm::F16F32
    }
}

impl Drop for Blas<'_> {
    fn drop(&mut self) {
        // The plans' descriptors go before the handle they were planned on.
        self.plans.clear();
        // SAFETY: the handle came from cublasLtCreate and is destroyed once; a failure only leaks it.
        let _ = unsafe { lt::destroy_handle(self.handle) };
    }
}

/// Descriptors of one matmul shape and the algorithm cuBLASLt picked for it, destroyed together.
struct Plan {
    desc: sys::cublasLtMatmulDesc_t,
    layouts: Vec<sys::cublasLtMatrixLayout_t>,
    pref: sys::cublasLtMatmulPreference_t,
    algo: Option<sys::cublasLtMatmulAlgo_t>,
}

impl Drop for Plan {
    fn drop(&mut self) {
        // SAFETY: each handle was created once below and is destroyed once; failures only leak.
        unsafe {
            let _ = lt::destroy_matmul_desc(self.desc);
            for l in &self.layouts {
                let _ = lt::destroy_matrix_layout(*l);
            }
            let _ = lt::destroy_matmul_pref(self.pref);
        }
    }
}

impl<'g> Blas<'g> {
    /// Loads cuBLASLt (failing with a clear error where the library is missing) and makes a handle for `gpu`.
    pub fn new(gpu: &'g Gpu) -> Result<Blas<'g>, Error> {
        // SAFETY: only dlopens candidate names; calling into a missing library would panic instead.
        if !unsafe { sys::is_culib_present() } {
            let what = "libcublasLt was not found on the library path".into();
            return Err(Error::Launch { op: "cublasLt", what });
        }
        gpu.context().bind_to_thread().doing(|| "binding the context for cuBLASLt".into())?;
        let handle = lt::create_handle().map_err(|e| blas_err("creating a handle", e))?;
        // SAFETY: scratch bytes cuBLASLt writes before it reads.
        let workspace = match unsafe { gpu.stream().alloc::<u8>(WORKSPACE) } {
            Ok(w) => w,
            Err(e) => {
                // SAFETY: the handle was just created and is not used again.
                let _ = unsafe { lt::destroy_handle(handle) };
                return Err(Error::Cuda { what: "allocating the cuBLASLt workspace".into(), source: e });
            }
        };
        Ok(Blas { gpu, handle, workspace, plans: HashMap::new() })
    }

    /// d bf16 `[m, n]` = a `[m, k]` · bᵀ (b `[n, k]`), E4M3 codes row-major, unit scales, f32 accumulation on tensor cores.
    pub fn fp8_gemm_bf16(
        &mut self,
        a: &CudaSlice<u8>,
        b: &CudaSlice<u8>,
        d: &mut CudaSlice<u8>,
        dims: (usize, usize, usize),
    ) -> Result<(), Error> {
        self.gemm(Gemm::Fp8Bf16, a, b, d, dims)
    }

    /// d `[m, n]` = a `[m, k]` · bᵀ (b `[n, k]`; `[k, n]` and no transpose for F16F32), row-major in `kind`'s types, f32 sums.
    pub fn gemm(
        &mut self,
        kind: Gemm,
        a: &CudaSlice<u8>,
        b: &CudaSlice<u8>,
        d: &mut CudaSlice<u8>,
        (m, n, k): (usize, usize, usize),
    ) -> Result<(), Error> {
        if m == 0 || n == 0 || k == 0 || !k.is_multiple_of(16) {
            let what = format!("{kind:?} gemm {m}×{n}×{k}: every size positive and k a multiple of 16");
            return Err(Error::Launch { op: "cublasLt", what });
        }
        let (_, ab, _, db) = kind.types();
        let short = |what: &str, len: usize, need: usize| {
            (len < need)
                .then(|| Error::Launch { op: "cublasLt", what: format!("{what} holds {len} bytes, needs {need}") })
        };
        let errs = [short("a", a.len(), m * k * ab), short("b", b.len(), n * k * ab), short("d", d.len(), m * n * db)];
        if let Some(e) = errs.into_iter().flatten().next() {
            return Err(e);
        }
        // Row-major D = A·Bᵀ is column-major Dᵀ = (B as k×n)ᵀ · (A as k×m): cuBLASLt's "TN" form (the one FP8 requires).
        let plan = match self.plans.entry((kind, m, n, k)) {
            Entry::Occupied(p) => p.into_mut(),
            Entry::Vacant(v) => v.insert(plan(self.handle, kind, (m, n, k))?),
        };
        let (alpha, beta) = (1.0f32, 0.0f32);
        let stream = self.gpu.stream();
        let (ap, _ga) = a.device_ptr(stream);
        let (bp, _gb) = b.device_ptr(stream);
        let (dp, _gd) = d.device_ptr_mut(stream);
        let (wp, _gw) = self.workspace.device_ptr_mut(stream);
        let l = &plan.layouts;
        // SAFETY: sizes checked above; the pointers live for the call, which is ordered on the GPU's stream.
        unsafe {
            lt::matmul(
                self.handle,
                plan.desc,
                (&alpha as *const f32).cast(),
                (&beta as *const f32).cast(),
                bp as *const c_void,
                l[0],
                ap as *const c_void,
                l[1],
                dp as *const c_void,
                l[2],
                dp as *mut c_void,
                l[2],
                plan.algo.as_ref().expect("a plan holds its algorithm"),
                wp as *mut c_void,
                WORKSPACE,
                stream.cu_stream() as sys::cudaStream_t,
            )
        }
        .map_err(|e| blas_err(&format!("{kind:?} gemm {m}×{n}×{k}"), e))
    }
}

/// The descriptors of a TN matmul of this kind and shape and cuBLASLt's first algorithm for it.
fn plan(handle: sys::cublasLtHandle_t, kind: Gemm, (m, n, k): (usize, usize, usize)) -> Result<Plan, Error> {
    let e = |what: &'static str| move |err| blas_err(what, err);
    let desc = lt::create_matmul_desc(cublasComputeType_t::CUBLAS_COMPUTE_32F, cudaDataType::CUDA_R_32F)
        .map_err(e("creating a matmul descriptor"))?;
    let pref = match lt::create_matmul_pref() {
        Ok(p) => p,
        Err(err) => {
            // SAFETY: created just above, not used again.
            let _ = unsafe { lt::destroy_matmul_desc(desc) };
            return Err(blas_err("creating a preference", err));
        }
    };
    let mut plan = Plan { desc, layouts: Vec::new(), pref, algo: None };
    let (t, ws) = (i32::from(kind.b_transposed()), WORKSPACE as u64);
    // SAFETY: attribute values are read during the calls from live locals of the sizes given.
    unsafe {
        lt::set_matmul_desc_attribute(desc, Desc::CUBLASLT_MATMUL_DESC_TRANSA, (&t as *const i32).cast(), 4)
            .map_err(e("transposing A"))?;
        lt::set_matmul_pref_attribute(
            pref,
            Pref::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
            (&ws as *const u64).cast(),
            8,
        )
        .map_err(e("sizing the workspace"))?;
    }
    let (op, _, out, _) = kind.types();
    let b = if kind.b_transposed() { (op, k, n, k) } else { (op, n, k, n) };
    for (ty, rows, cols, ld) in [b, (op, k, m, k), (out, n, m, n)] {
        let layout =
            lt::create_matrix_layout(ty, rows as u64, cols as u64, ld as i64).map_err(e("creating a layout"))?;
        plan.layouts.push(layout);
    }
    let l = &plan.layouts;
    // SAFETY: every descriptor is live for the call.
    let heuristic = unsafe { lt::get_matmul_algo_heuristic(handle, desc, l[0], l[1], l[2], l[2], pref) }
        .map_err(|err| blas_err(&format!("no {kind:?} algorithm for {m}×{n}×{k}"), err))?;
    plan.algo = Some(heuristic.algo);
    Ok(plan)
}

/// TFLOP/s of FP8 GEMMs on this GPU (the best of `shapes`, `reps` timed calls each after warm ones): the prompt path's ceiling.
pub fn fp8_rate(gpu: &Gpu, shapes: &[(usize, usize, usize)], reps: usize) -> Result<f64, Error> {
    rate(gpu, Gemm::Fp8Bf16, shapes, reps)
}

/// TFLOP/s of `kind` GEMMs on this GPU: the best of `shapes`, `reps` timed calls each after three warm ones.
pub fn rate(gpu: &Gpu, kind: Gemm, shapes: &[(usize, usize, usize)], reps: usize) -> Result<f64, Error> {
    let mut blas = Blas::new(gpu)?;
    let (_, ab, _, db) = kind.types();
    let mut best = 0.0f64;
    for &(m, n, k) in shapes {
        // Random bytes, not zeros: tensor-core power (and so clocks) depends on the data; 0xBF keeps FP8 codes and 16-bit halves finite.
        let mut rng = tf_core::rng::SplitMix64::new(0xF8);
        let mut bytes = |len: usize| {
            (0..len)
                .map(|i| (rng.next_u64() as u8) & if ab == 1 || i % 2 == 1 { 0xBF } else { 0xFF })
                .collect::<Vec<u8>>()
        };
        let (a, b) = (gpu.upload(&bytes(m * k * ab))?, gpu.upload(&bytes(n * k * ab))?);
        let mut d = gpu.pool().take(m * n * db)?;
        let (a, b, d) = (a.dev(), b.dev(), d.dev_mut());
        for _ in 0..3 {
            blas.gemm(kind, a, b, d, (m, n, k))?;
        }
        let ms = gpu.time_ms(|_| (0..reps).try_for_each(|_| blas.gemm(kind, a, b, d, (m, n, k))))?;
        best = best.max(2.0 * (m * n * k) as f64 * reps as f64 / (f64::from(ms) * 1e-3) / 1e12);
    }
    Ok(best)
}
