//! f32 matmul `C = A·Bᵀ`, blocked and multi-threaded, with a summation order fixed per element.

use rayon::prelude::*;

/// Accumulator lanes per dot product: element k goes to lane k % 8.
const LANES: usize = 8;
/// Rows of A and of B per register tile.
const MR: usize = 2;
const NR: usize = 4;
/// Rows of A and of B per parallel task.
const MB: usize = 32;
const NB: usize = 64;
/// Below this many multiply-adds the work stays on the calling thread.
const PARALLEL_MIN_WORK: usize = 1 << 16;

/// `C[m×n] = A[m×k] · B[n×k]ᵀ`; each element's sum depends only on its own rows, so results are batch-invariant.
pub fn matmul_nt(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
    let mut c = vec![0.0; m * n];
    matmul_nt_into(a, b, &mut c, m, n, k);
    c
}

/// As [`matmul_nt`], writing into `c`.
pub fn matmul_nt_into(a: &[f32], b: &[f32], c: &mut [f32], m: usize, n: usize, k: usize) {
    assert_eq!(a.len(), m * k, "matmul: A holds {} values, expected {m}×{k}", a.len());
    assert_eq!(b.len(), n * k, "matmul: B holds {} values, expected {n}×{k}", b.len());
    assert_eq!(c.len(), m * n, "matmul: C holds {} values, expected {m}×{n}", c.len());
    let simd = simd_available();
    let out = OutPtr(c.as_mut_ptr());
    let tiles_n = n.div_ceil(NB);
    let tiles = m.div_ceil(MB) * tiles_n;
    let run = |t: usize| {
        let (i0, j0) = ((t / tiles_n) * MB, (t % tiles_n) * NB);
        let rows = i0..(i0 + MB).min(m);
        let cols = j0..(j0 + NB).min(n);
        block(a, b, out, n, k, rows, cols, simd);
    };
    if m * n * k < PARALLEL_MIN_WORK {
        (0..tiles).for_each(run);
    } else {
        (0..tiles).into_par_iter().for_each(run);
    }
}

/// Raw output pointer shared by tasks that write disjoint tiles.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: every task writes a distinct (row, column) tile of C and nothing reads C meanwhile.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

fn simd_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[allow(clippy::too_many_arguments)]
fn block(
    a: &[f32],
    b: &[f32],
    c: OutPtr,
    n: usize,
    k: usize,
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
    simd: bool,
) {
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: avx2 was detected at run time; the body is the same code, so numerics are identical.
        unsafe { block_avx2(a, b, c, n, k, rows, cols) };
        return;
    }
    let _ = simd;
    block_body(a, b, c, n, k, rows, cols);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn block_avx2(
    a: &[f32],
    b: &[f32],
    c: OutPtr,
    n: usize,
    k: usize,
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
) {
    block_body(a, b, c, n, k, rows, cols);
}

#[inline(always)]
fn block_body(
    a: &[f32],
    b: &[f32],
    c: OutPtr,
    n: usize,
    k: usize,
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
) {
    let mut i = rows.start;
    while i < rows.end {
        let mr = (rows.end - i).min(MR);
        let mut j = cols.start;
        while j < cols.end {
            let nr = (cols.end - j).min(NR);
            if mr == MR && nr == NR {
                tile::<MR, NR>(a, b, c, n, k, i, j);
            } else {
                for ii in i..i + mr {
                    for jj in j..j + nr {
                        tile::<1, 1>(a, b, c, n, k, ii, jj);
                    }
                }
            }
            j += nr;
        }
        i += mr;
    }
}

/// One R×S tile: lane sums in k order, tail into the first lanes, then a fixed pairwise reduction.
#[inline(always)]
fn tile<const R: usize, const S: usize>(a: &[f32], b: &[f32], c: OutPtr, n: usize, k: usize, i: usize, j: usize) {
    let ar: [&[f32]; R] = std::array::from_fn(|r| &a[(i + r) * k..(i + r + 1) * k]);
    let br: [&[f32]; S] = std::array::from_fn(|s| &b[(j + s) * k..(j + s + 1) * k]);
    let mut acc = [[[0.0f32; LANES]; S]; R];
    let full = k - k % LANES;
    let mut p = 0;
    while p < full {
        for r in 0..R {
            let av: &[f32; LANES] = ar[r][p..p + LANES].try_into().unwrap();
            for s in 0..S {
                let bv: &[f32; LANES] = br[s][p..p + LANES].try_into().unwrap();
                for l in 0..LANES {
                    acc[r][s][l] += av[l] * bv[l];
                }
            }
        }
        p += LANES;
    }
    for r in 0..R {
        for s in 0..S {
            for (l, q) in (full..k).enumerate() {
                acc[r][s][l] += ar[r][q] * br[s][q];
            }
            let v = &acc[r][s];
            let sum = ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
            // SAFETY: (i + r, j + s) lies inside C and inside this task's tile only.
            unsafe { *c.0.add((i + r) * n + j + s) = sum };
        }
    }
}

/// The same product with plain (non-SIMD) code, for tests that pin SIMD and scalar paths together.
#[doc(hidden)]
pub fn matmul_nt_scalar(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
    let mut c = vec![0.0; m * n];
    block(a, b, OutPtr(c.as_mut_ptr()), n, k, 0..m, 0..n, false);
    c
}
