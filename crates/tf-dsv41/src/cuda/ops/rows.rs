//! `embed_rows`, `scatter_rows` and `argmax_sum`: moving whole rows, and the argmax pick of one.

use super::{In, Out, bytes, grid1, int, need};
use crate::cuda::kernels::ROWS;
use cudarc::driver::{DevicePtrMut, PushKernelArg};
use tf_cuda::error::DriverResultExt;
use tf_cuda::{Error, Gpu};

/// `x[r, s, :] = table[ids[r], :]` for every stream `s < hc`: bf16 rows, ids i32 (checked by the caller against the vocab).
pub fn embed_rows(
    gpu: &Gpu,
    ids: &In<'_>,
    table: &In<'_>,
    x: &mut Out<'_>,
    rows: usize,
    dim: usize,
    hc: usize,
) -> Result<(), Error> {
    const OP: &str = "embed_rows";
    need(OP, "ids", ids.len(), bytes(OP, &[rows, 4])?)?;
    need(OP, "table", table.len(), bytes(OP, &[dim, 2])?)?;
    need(OP, "x", x.len(), bytes(OP, &[rows, hc, dim, 2])?)?;
    if rows == 0 {
        return Ok(());
    }
    let f = gpu.function(&ROWS.spec(&[]), OP)?;
    let (dim_i, hc_i) = (int(OP, "dim", dim)?, int(OP, "hc", hc)?);
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(ids).arg(table).arg(x).arg(&dim_i).arg(&hc_i);
    // SAFETY: arguments match `embed_rows(const int*, const u16*, u16*, int, int)`; sizes checked above.
    unsafe { launch.launch(grid1(rows, 128)) }.doing(|| format!("launching {OP} on {rows} rows"))?;
    Ok(())
}

/// `dst[slots[r]] = src[r]` for `rows` rows of `row_bytes` (a multiple of 4); a negative slot skips its row.
pub fn scatter_rows(
    gpu: &Gpu,
    src: &In<'_>,
    dst: &mut Out<'_>,
    slots: &In<'_>,
    (rows, row_bytes, dst_rows): (usize, usize, usize),
) -> Result<(), Error> {
    const OP: &str = "scatter_rows";
    if !row_bytes.is_multiple_of(4) {
        return Err(Error::Launch { op: OP, what: format!("row of {row_bytes} bytes is not whole 4-byte words") });
    }
    need(OP, "src", src.len(), bytes(OP, &[rows, row_bytes])?)?;
    need(OP, "slots", slots.len(), bytes(OP, &[rows, 4])?)?;
    need(OP, "dst", dst.len(), bytes(OP, &[dst_rows, row_bytes])?)?;
    if rows == 0 {
        return Ok(());
    }
    let f = gpu.function(&ROWS.spec(&[]), OP)?;
    let words = int(OP, "row words", row_bytes / 4)?;
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(src).arg(dst).arg(slots).arg(&words);
    // SAFETY: arguments match `scatter_rows(const u32*, u32*, const int*, int)`; the caller's slots are below dst_rows.
    unsafe { launch.launch(grid1(rows, 128)) }.doing(|| format!("launching {OP} on {rows} rows"))?;
    Ok(())
}

/// `scatter_rows` of consecutive row groups of `src` in one launch: group i's rows go to `slots` of its own `dst` of `dst_rows` rows.
pub fn scatter_rows_into(
    gpu: &Gpu,
    src: &In<'_>,
    parts: &mut [(Out<'_>, &[i32], usize)],
    row_bytes: usize,
) -> Result<(), Error> {
    const OP: &str = "scatter_rows_into";
    if !row_bytes.is_multiple_of(4) {
        return Err(Error::Launch { op: OP, what: format!("row of {row_bytes} bytes is not whole 4-byte words") });
    }
    let rows: usize = parts.iter().map(|p| p.1.len()).sum();
    need(OP, "src", src.len(), bytes(OP, &[rows, row_bytes])?)?;
    let mut table: Vec<u64> = Vec::with_capacity(rows);
    for (dst, slots, dst_rows) in parts.iter_mut() {
        need(OP, "dst", dst.len(), bytes(OP, &[*dst_rows, row_bytes])?)?;
        let base = dst.device_ptr_mut(gpu.stream()).0;
        for &s in slots.iter() {
            // A slot is checked here, since the kernel writes where the table says.
            table.push(match usize::try_from(s) {
                Ok(s) if s < *dst_rows => base + (s * row_bytes) as u64,
                Ok(s) => {
                    return Err(Error::Launch { op: OP, what: format!("slot {s} of a {dst_rows}-row destination") });
                }
                Err(_) => 0,
            });
        }
    }
    if rows == 0 {
        return Ok(());
    }
    let table = gpu.upload(&table)?;
    let table = table.view();
    let f = gpu.function(&ROWS.spec(&[]), "scatter_rows_to")?;
    let words = int(OP, "row words", row_bytes / 4)?;
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(src).arg(&table).arg(&words);
    // SAFETY: arguments match `scatter_rows_to(const u32*, const u64*, int)`; every address in the table is a checked row of a destination.
    unsafe { launch.launch(grid1(rows, 128)) }.doing(|| format!("launching {OP} on {rows} rows"))?;
    Ok(())
}

/// `out[0] = argmax(a + b)` over `n` f32 pairs, `tf_core::ops::argmax`'s pick (the first maximum) of the f32 sums, as an i32 on the device.
pub fn argmax_sum(gpu: &Gpu, a: &In<'_>, b: &In<'_>, out: &mut Out<'_>, n: usize) -> Result<(), Error> {
    const OP: &str = "argmax_sum";
    need(OP, "a", a.len(), bytes(OP, &[n, 4])?)?;
    need(OP, "b", b.len(), bytes(OP, &[n, 4])?)?;
    need(OP, "out", out.len(), 4)?;
    let f = gpu.function(&ROWS.spec(&[]), OP)?;
    let n_i = int(OP, "n", n)?;
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(a).arg(b).arg(out).arg(&n_i);
    // SAFETY: arguments match `argmax_sum(const f32*, const f32*, int*, int)`; sizes checked above.
    unsafe { launch.launch(grid1(1, 1024)) }.doing(|| format!("launching {OP} over {n} values"))?;
    Ok(())
}
