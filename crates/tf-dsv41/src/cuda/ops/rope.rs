//! `rope`: interleaved RoPE of bf16 heads in place, bit-exact to `attn::rope_bf16` (f32 math, bf16 out).

use super::{In, Out, bytes, int, need, strided};
use crate::cuda::kernels::ROPE;
use crate::rope::Rope;
use cudarc::driver::PushKernelArg;
use tf_cuda::error::DriverResultExt;
use tf_cuda::{Error, Gpu};

/// Threads per block of the grid-stride rotation.
const THREADS: usize = 256;

/// The (cos, sin) table `[positions, rd/2, 2]` of `rope` at each position, from the CPU's own f32 `cos`/`sin`.
pub fn rope_table(rope: &Rope, positions: &[usize]) -> Vec<f32> {
    positions.iter().flat_map(|&p| rope.angles(p).flat_map(|(c, s)| [c, s])).collect()
}

/// Rotates the last `rd` channels of each `d`-channel head of bf16 x [rows, heads, d] in place by row r's (cos, sin) table cs f32 [rows, rd/2, 2]; inverse conjugates. f32 math, bf16 out.
pub fn rope(
    gpu: &Gpu,
    x: &mut Out<'_>,
    cs: &In<'_>,
    (rows, heads, d, rd): (usize, usize, usize, usize),
    inverse: bool,
) -> Result<(), Error> {
    const OP: &str = "rope";
    if rd % 2 != 0 || rd > d {
        return Err(Error::Launch { op: OP, what: format!("rope width {rd} must be even and at most the head's {d}") });
    }
    need(OP, "x", x.len(), bytes(OP, &[rows, heads, d, 2])?)?;
    need(OP, "cs", cs.len(), bytes(OP, &[rows, rd / 2, 2, 4])?)?;
    let pairs = bytes(OP, &[rows, heads, rd / 2])?;
    if pairs == 0 {
        return Ok(());
    }
    let f = gpu.function(&ROPE.spec(&[]), OP)?;
    let (rows_i, heads_i, d_i, rd_i) =
        (int(OP, "rows", rows)?, int(OP, "heads", heads)?, int(OP, "d", d)?, int(OP, "rd", rd)?);
    let inverse_i = i32::from(inverse);
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(x).arg(cs).arg(&rows_i).arg(&heads_i).arg(&d_i).arg(&rd_i).arg(&inverse_i);
    // SAFETY: arguments match `rope(u16*, const float*, int, int, int, int, int)`; sizes checked above.
    unsafe { launch.launch(strided(pairs, THREADS, THREADS as u32)) }
        .doing(|| format!("launching {OP} on {rows} rows × {heads} heads"))?;
    Ok(())
}
