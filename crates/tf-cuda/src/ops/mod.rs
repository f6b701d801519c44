//! Launchers of our kernels: each checks its shapes and buffer sizes, then queues one launch on the GPU's stream.

mod fp8;
mod rmsnorm;

pub use fp8::{
    FP8_MAX_ROWS, Fp8Decode, Fp8Kernel, WeightScale, act_quant_fp8, fp8_gemv, fp8_gemv_smem_bytes, fp8_gemv_with,
};
pub use rmsnorm::{RMSNORM_THREADS, rmsnorm_bf16};

use crate::Error;
use crate::pool::PoolBuf;

/// Fails naming `op` and the buffer unless `buf` holds at least `need` bytes.
pub(crate) fn check_len(op: &'static str, name: &str, buf: &PoolBuf<'_>, need: usize) -> Result<(), Error> {
    if buf.len() >= need {
        return Ok(());
    }
    Err(Error::Launch { op, what: format!("buffer `{name}` holds {} bytes, needs {need}", buf.len()) })
}

/// `v` as a kernel's `int` argument, or an error naming it.
pub(crate) fn as_i32(op: &'static str, name: &str, v: usize) -> Result<i32, Error> {
    i32::try_from(v).map_err(|_| Error::Launch { op, what: format!("{name} = {v} does not fit a 32-bit int") })
}
