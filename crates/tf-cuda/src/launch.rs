//! Launch helpers of every crate: grid shapes and argument checks (launchers push args on `launch_builder`, then launch one of these).

use crate::Error;
use crate::pool::PoolBuf;
use cudarc::driver::LaunchConfig;

/// `n` blocks of `threads` along x (e.g. one block per row), without dynamic shared memory.
pub fn grid1(n: usize, threads: u32) -> LaunchConfig {
    grid((n, 1), threads, 0)
}

/// Enough blocks to fill any GPU: a grid-stride kernel loops over what more would have taken.
pub const STRIDE_BLOCKS: usize = 1 << 16;

/// A grid-stride launch over `items`, `per_block` per block: at least one block, at most [`STRIDE_BLOCKS`].
pub fn strided(items: usize, per_block: usize, threads: u32) -> LaunchConfig {
    grid1(items.div_ceil(per_block).clamp(1, STRIDE_BLOCKS), threads)
}

/// A launch of `grid` (x, y) blocks of `threads` with `smem` bytes of dynamic shared memory.
pub fn grid(grid: (usize, usize), threads: u32, smem: usize) -> LaunchConfig {
    grid3((grid.0, grid.1, 1), threads, smem)
}

/// A launch of `grid` (x, y, z) blocks of `threads` with `smem` bytes of dynamic shared memory (z: one per job).
pub fn grid3(grid: (usize, usize, usize), threads: u32, smem: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (grid.0 as u32, grid.1 as u32, grid.2 as u32),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: smem as u32,
    }
}

/// Fails naming `op` and the buffer unless `buf` holds at least `need` bytes.
pub fn check_len(op: &'static str, name: &str, buf: &PoolBuf<'_>, need: usize) -> Result<(), Error> {
    check_bytes(op, name, buf.len(), need)
}

/// Fails naming `op` and the buffer unless its `have` bytes are at least `need`.
pub fn check_bytes(op: &'static str, name: &str, have: usize, need: usize) -> Result<(), Error> {
    if have >= need {
        return Ok(());
    }
    Err(Error::Launch { op, what: format!("buffer `{name}` holds {have} bytes, needs {need}") })
}

/// `v` as a kernel's `int` argument, or an error naming it.
pub fn as_i32(op: &'static str, name: &str, v: usize) -> Result<i32, Error> {
    i32::try_from(v).map_err(|_| Error::Launch { op, what: format!("{name} = {v} does not fit a 32-bit int") })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dims(c: LaunchConfig) -> ((u32, u32, u32), (u32, u32, u32), u32) {
        (c.grid_dim, c.block_dim, c.shared_mem_bytes)
    }

    #[test]
    fn shapes_put_every_value_where_the_driver_reads_it() {
        assert_eq!(dims(grid1(7, 256)), ((7, 1, 1), (256, 1, 1), 0));
        assert_eq!(dims(strided(0, 256, 256)), ((1, 1, 1), (256, 1, 1), 0));
        assert_eq!(dims(strided(257, 256, 256)), ((2, 1, 1), (256, 1, 1), 0));
        assert_eq!(dims(strided(1 << 40, 8, 256)), ((1 << 16, 1, 1), (256, 1, 1), 0));
        assert_eq!(dims(grid((3, 5), 128, 4096)), ((3, 5, 1), (128, 1, 1), 4096));
        assert_eq!(dims(grid3((3, 5, 9), 32, 66_048)), ((3, 5, 9), (32, 1, 1), 66_048));
    }

    #[test]
    fn checks_name_the_op_and_the_value() {
        assert!(check_bytes("op", "x", 8, 8).is_ok());
        let err = check_bytes("op", "x", 7, 8).unwrap_err().to_string();
        assert!(err.contains("`x` holds 7 bytes, needs 8"), "{err}");
        assert_eq!(as_i32("op", "n", 5).unwrap(), 5);
        assert!(as_i32("op", "n", 1 << 31).unwrap_err().to_string().contains("n = 2147483648"));
    }
}
