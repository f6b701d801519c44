//! `embed_rows`, `scatter_rows` and `argmax_sum` against plain host copies and `tf_core::ops::argmax`: exact.

use crate::util::{bf16s, download_bf16, poisoned_bf16};
use tf_core::rng::SplitMix64;
use tf_cuda::report::Report;
use tf_cuda::{Error, Gpu};
use tf_dsv41::cuda::ops;

pub fn check(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report) -> Result<(), Error> {
    let (vocab, dim, hc, rows) = (300, 96, 4, 7);
    let table = bf16s(rng, vocab * dim, 1.0);
    let ids: Vec<i32> = (0..rows).map(|_| (rng.next_u64() % vocab as u64) as i32).collect();
    let want: Vec<_> = ids
        .iter()
        .flat_map(|&t| (0..hc).flat_map(move |_| (0..dim).map(move |c| (t as usize, c))))
        .map(|(t, c)| table[t * dim + c])
        .collect();
    let (td, idd) = (gpu.upload(&table)?, gpu.upload(&ids)?);
    let mut x = poisoned_bf16(gpu, rows * hc * dim)?;
    ops::embed_rows(gpu, &idd.view(), &td.view(), &mut x.view_mut(), rows, dim, hc)?;
    let got = download_bf16(gpu, &x)?;
    report.row("embed_rows", format!("{rows} rows × {hc} streams × {dim}"), "bit-exact gather", got == want);
    let (ring, width) = (16, 40);
    let src = bf16s(rng, rows * width, 1.0);
    let mut slots: Vec<i32> = (0..rows as i32).map(|r| (r * 5 + 3) % ring as i32).collect();
    slots[2] = -1;
    let mut want = bf16s(rng, ring * width, 1.0);
    let mut dst = gpu.upload(&want)?;
    for (r, &s) in slots.iter().enumerate().filter(|(_, s)| **s >= 0) {
        want[s as usize * width..(s as usize + 1) * width].copy_from_slice(&src[r * width..(r + 1) * width]);
    }
    let (sd, sl) = (gpu.upload(&src)?, gpu.upload(&slots)?);
    ops::scatter_rows(gpu, &sd.view(), &mut dst.view_mut(), &sl.view(), (rows, width * 2, ring))?;
    let got = download_bf16(gpu, &dst)?;
    report.row("scatter_rows", format!("{rows} rows into {ring} slots, one skipped"), "bit-exact scatter", got == want);
    argmax_cases(gpu, rng, report)
}

/// The device pick equals `tf_core::ops::argmax` of the f32 sums: random rows, ties, NaN at the top, rows of -inf.
fn argmax_cases(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report) -> Result<(), Error> {
    let mut normal = |n: usize| crate::util::normals(rng, n, 3.0);
    let (big, small) = (normal(129_280), normal(129_280));
    let mut tie = normal(5000);
    tie[4321] = 50.0;
    tie[1234] = 50.0;
    let mut nan_top = normal(3000);
    nan_top[7] = f32::NAN;
    nan_top[2999] = 40.0;
    let mut inf_nan = vec![f32::NEG_INFINITY; 2048];
    inf_nan[0] = f32::NAN;
    let cases: Vec<(&str, Vec<f32>, Vec<f32>)> = vec![
        ("129,280 random pairs", big, small),
        ("a planted tie at 1,234 and 4,321", tie, vec![0.0; 5000]),
        ("NaN beside the top", nan_top, vec![0.0; 3000]),
        ("NaN then -inf only", inf_nan, vec![0.0; 2048]),
        ("one value", vec![-3.0], vec![1.0]),
    ];
    for (name, a, b) in cases {
        let want = tf_core::ops::argmax(&a.iter().zip(&b).map(|(x, y)| x + y).collect::<Vec<f32>>());
        let (ad, bd, mut out) = (gpu.upload(&a)?, gpu.upload(&b)?, gpu.upload(&[-7i32])?);
        ops::argmax_sum(gpu, &ad.view(), &bd.view(), &mut out.view_mut(), a.len())?;
        let got = gpu.download::<i32>(&out)?[0];
        report.row("argmax_sum", name.to_string(), format!("{got} (CPU {want})"), got == want as i32);
    }
    Ok(())
}
