//! `dense`, `rope`, the fake-quant points, `f32_to_bf16` and exp/ln_1p against their CPU twins.

use crate::util::{bf16s, diff_bf16, diff_f32, download_bf16, normals, poisoned_bf16, poisoned_f32};
use tf_core::bf16;
use tf_core::formats::{Fp4Scale, qdq_fp4, qdq_fp8_pow2, to_bf16};
use tf_core::ops::SumOrder;
use tf_core::ops::math;
use tf_core::rng::SplitMix64;
use tf_cuda::report::Report;
use tf_cuda::{Error, Gpu};
use tf_dsv41::attn::rope_bf16;
use tf_dsv41::config::RopeKind;
use tf_dsv41::cuda::ops::{self, Io, Sum};
use tf_dsv41::linear::{Dense, Norm};
use tf_dsv41::rope::Rope;
use tf_dsv41::tiny::TinyKind;

pub fn check(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report) -> Result<(), Error> {
    for (rows, n, k, groups, io) in [
        (1, 64, 96, 1, (Io::Bf16, Io::Bf16, Io::F32)),
        (13, 40, 300, 1, (Io::F32, Io::F32, Io::F32)),
        (5, 96, 64, 4, (Io::Bf16, Io::Bf16, Io::Bf16)),
        (3, 10, 5000, 1, (Io::Bf16, Io::F32, Io::Bf16)),
        (9, 37, 1031, 1, (Io::F32, Io::Bf16, Io::F32)),
        (1, 24, 20480, 1, (Io::Bf16, Io::F32, Io::F32)),
        (3, 256, 296, 2, (Io::Bf16, Io::Bf16, Io::Bf16)),
        (10, 1024, 4096, 4, (Io::Bf16, Io::Bf16, Io::Bf16)),
        (2, 300, 5120, 1, (Io::Bf16, Io::Bf16, Io::F32)),
    ] {
        dense_case(gpu, rng, report, (rows, n, k), groups, io, groups > 1)?;
    }
    // Grouped `wo_a` in the 8-lane order (the default since 2026-12-07): one row, a window and a prompt chunk at the gate model's and Flash's shapes.
    for (rows, n, k, groups) in [(1, 128, 256, 2), (6, 128, 256, 2), (1, 8192, 4096, 8), (40, 8192, 4096, 8)] {
        dense_case(gpu, rng, report, (rows, n, k), groups, (Io::Bf16, Io::Bf16, Io::Bf16), false)?;
    }
    norm_case(gpu, rng, report)?;
    rope_case(gpu, rng, report)?;
    fakequant_case(gpu, rng, report)?;
    convert_case(gpu, rng, report)?;
    math_case(gpu, rng, report)
}

/// Host values as `io` stores them: bf16 rounding or f32 as is.
fn stored(v: Vec<f32>, io: Io) -> Vec<f32> {
    if io == Io::Bf16 { v.into_iter().map(|x| to_bf16(x).to_f32()).collect() } else { v }
}

fn upload_as<'g>(gpu: &'g Gpu, v: &[f32], io: Io) -> Result<tf_cuda::PoolBuf<'g>, Error> {
    match io {
        Io::Bf16 => gpu.upload(&v.iter().map(|&x| to_bf16(x).to_bits()).collect::<Vec<u16>>()),
        Io::F32 => gpu.upload(v),
    }
}

fn download_as(gpu: &Gpu, b: &tf_cuda::PoolBuf<'_>, io: Io) -> Result<Vec<f32>, Error> {
    match io {
        Io::Bf16 => Ok(download_bf16(gpu, b)?.into_iter().map(bf16::to_f32).collect()),
        Io::F32 => gpu.download::<f32>(b),
    }
}

/// `x·Wᵀ` bit for bit: in `matmul_nt`'s order (`Dense`, per group), or with `sequential` in grouped `wo_a`'s index order.
fn dense_case(
    gpu: &Gpu,
    rng: &mut SplitMix64,
    report: &mut Report,
    (rows, n, k): (usize, usize, usize),
    groups: usize,
    (xi, wi, yi): (Io, Io, Io),
    sequential: bool,
) -> Result<(), Error> {
    let x = stored(normals(rng, rows * groups * k, 1.0), xi);
    let w = stored(normals(rng, n * k, 0.05), wi);
    let per = n / groups;
    let order = if sequential { Sum::Sequential } else { Sum::Lanes8 };
    let want: Vec<f32> = if !sequential {
        let xs = |g: usize| -> Vec<f32> { (0..rows).flat_map(|r| x[(r * groups + g) * k..][..k].to_vec()).collect() };
        let ys: Vec<Vec<f32>> = (0..groups)
            .map(|g| Dense { out: per, inp: k, w: w[g * per * k..][..per * k].to_vec() }.forward_f32(&xs(g), rows))
            .collect();
        (0..rows * n).map(|i| ys[(i % n) / per][(i / n) * per + i % per]).collect()
    } else {
        let xs = |r: usize, g: usize| &x[(r * groups + g) * k..(r * groups + g + 1) * k];
        (0..rows * n)
            .map(|i| {
                let (r, o) = (i / n, i % n);
                xs(r, o / per).iter().zip(&w[o * k..(o + 1) * k]).map(|(a, b)| a * b).sum()
            })
            .collect()
    };
    let want: Vec<f32> = stored(want, yi);
    let (xd, wd) = (upload_as(gpu, &x, xi)?, upload_as(gpu, &w, wi)?);
    let run = |xd: &tf_cuda::PoolBuf<'_>, rows: usize| -> Result<Vec<f32>, Error> {
        let mut y = if yi == Io::Bf16 { poisoned_bf16(gpu, rows * n)? } else { poisoned_f32(gpu, rows * n)? };
        ops::dense(gpu, &xd.view(), xi, &wd.view(), wi, &mut y.view_mut(), yi, (rows, n, k), groups, order)?;
        download_as(gpu, &y, yi)
    };
    let got = run(&xd, rows)?;
    let what = format!("{rows}×{n}×{k}, {groups} groups ({order:?}), x {xi:?} w {wi:?} y {yi:?}");
    let d = diff_f32(&got, &want, 1.0);
    report.row("dense", what.clone(), d.describe("relative"), d.pass(0.0));
    let one = run(&upload_as(gpu, &x[..groups * k], xi)?, 1)?;
    let same = one.iter().zip(&got[..n]).all(|(a, b)| a.to_bits() == b.to_bits());
    report.row("dense row invariance", what, "row 0 alone == row 0 in the batch, bit for bit", same);
    Ok(())
}

/// RMSNorm of rows at dims that are and are not multiples of the block: bit-exact to the CPU's.
fn norm_case(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report) -> Result<(), Error> {
    let orders = [SumOrder::Sequential, SumOrder::Lanes32];
    for ((rows, dim), sums) in
        [(1, 5120), (9, 128), (4, 300), (2, 20480)].into_iter().flat_map(|s| orders.map(|o| (s, o)))
    {
        let norm = Norm { eps: 1e-6, sums };
        let x = bf16s(rng, rows * dim, 3.0);
        let w = bf16s(rng, dim, 1.0);
        let want = tf_dsv41::linear::rms_norm_rows(&x, &w, norm);
        let up = |v: &[bf16]| gpu.upload(&v.iter().map(|b| b.to_bits()).collect::<Vec<u16>>());
        let (xd, wd) = (up(&x)?, up(&w)?);
        let mut yd = poisoned_bf16(gpu, rows * dim)?;
        ops::rms_norm(gpu, &xd.view(), &wd.view(), &mut yd.view_mut(), None, rows, dim, norm)?;
        let d = diff_bf16(&download_bf16(gpu, &yd)?, &want);
        report.row("rms_norm", format!("{rows} rows × {dim}, {sums:?}"), d.describe("ulp"), d.pass(0.0));
    }
    Ok(())
}

/// RoPE and its inverse on heads at scattered positions: bit-exact, as both use the CPU's cos/sin table.
fn rope_case(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report) -> Result<(), Error> {
    let cfg = TinyKind::Small.config();
    let (heads, d, rd) = (3, cfg.head_dim, cfg.rope_head_dim);
    let positions: Vec<usize> = (0..7).map(|_| (rng.next_u64() % 70_000) as usize).collect();
    for (kind, inverse) in [(RopeKind::Plain, false), (RopeKind::Yarn, false), (RopeKind::Yarn, true)] {
        let rope = Rope::new(&cfg, kind);
        let x = bf16s(rng, positions.len() * heads * d, 2.0);
        let mut want = x.clone();
        for (r, &p) in positions.iter().enumerate() {
            for h in want[r * heads * d..(r + 1) * heads * d].chunks_exact_mut(d) {
                rope_bf16(h, &rope, p, inverse);
            }
        }
        let mut xd = gpu.upload(&x.iter().map(|v| v.to_bits()).collect::<Vec<u16>>())?;
        let cs = gpu.upload(&ops::rope_table(&rope, &positions))?;
        ops::rope(gpu, &mut xd.view_mut(), &cs.view(), (positions.len(), heads, d, rd), inverse)?;
        let diff = diff_bf16(&download_bf16(gpu, &xd)?, &want);
        report.row(
            "rope",
            format!("{kind:?}, inverse {inverse}, {heads} heads of {d} ({rd} rotated)"),
            diff.describe("ulp"),
            diff.pass(0.0),
        );
    }
    Ok(())
}

/// Groups at ordinary, tiny (amax floor) and huge (saturating) magnitudes, one with NaN and ∞: bits equal.
fn fakequant_case(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report) -> Result<(), Error> {
    for (group, kind) in [(128, None), (32, None), (32, Some(Fp4Scale::E8m0)), (16, Some(Fp4Scale::E4m3))] {
        let mut x = bf16s(rng, group * 9, 1.0);
        x[group..2 * group].iter_mut().for_each(|v| *v = bf16::from_f32(v.to_f32() * 1e-30));
        x[2 * group..3 * group].iter_mut().for_each(|v| *v = bf16::from_f32(v.to_f32() * 1e30));
        x[3 * group + 1] = bf16::NAN;
        x[4 * group + 2] = bf16::INFINITY;
        let mut want = x.clone();
        match kind {
            None => qdq_fp8_pow2(&mut want, group),
            Some(k) => qdq_fp4(&mut want, group, k),
        }
        let mut xd = gpu.upload(&x.iter().map(|v| v.to_bits()).collect::<Vec<u16>>())?;
        match kind {
            None => ops::qdq_fp8_pow2(gpu, &mut xd.view_mut(), x.len(), group)?,
            Some(k) => ops::qdq_fp4(gpu, &mut xd.view_mut(), x.len(), group, k)?,
        }
        let got = gpu.download::<u16>(&xd)?;
        let bad = got.iter().zip(&want).filter(|(g, w)| **g != w.to_bits()).count();
        let name = if kind.is_none() { "qdq_fp8_pow2" } else { "qdq_fp4" };
        report.row(
            name,
            format!("group {group}, scale {kind:?}, 9 groups with tiny, huge, NaN and ∞"),
            format!("{bad} of {} bits differ", x.len()),
            bad == 0,
        );
    }
    Ok(())
}

/// f32 → bf16 on normals, exact ties, NaN payloads and infinities: bits equal to `to_bf16`.
fn convert_case(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report) -> Result<(), Error> {
    let mut x = normals(rng, 4099, 3.0);
    x.extend([
        f32::from_bits(0x3F80_8000),
        f32::from_bits(0x3F81_8000),
        f32::from_bits(0x7FA0_0001),
        f32::from_bits(0xFFC0_1234),
        f32::INFINITY,
        -0.0,
        3.0e38,
    ]);
    let want: Vec<u16> = x.iter().map(|&v| to_bf16(v).to_bits()).collect();
    let xd = gpu.upload(&x)?;
    let mut yd = poisoned_bf16(gpu, x.len())?;
    ops::f32_to_bf16(gpu, &xd.view(), &mut yd.view_mut(), x.len())?;
    let got = gpu.download::<u16>(&yd)?;
    let bad = got.iter().zip(&want).filter(|(g, w)| g != w).count();
    report.row(
        "f32_to_bf16",
        format!("{} values with ties, NaN payloads, ∞", x.len()),
        format!("{bad} differ"),
        bad == 0,
    );
    Ok(())
}

/// exp and ln_1p as the kernels compute them, on 2^20 fresh values over their whole range plus edges: bits equal to `tf_core::ops::math`.
fn math_case(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report) -> Result<(), Error> {
    let n = 1 << 20;
    let unit = |rng: &mut SplitMix64| (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    let mut x: Vec<f32> = (0..n)
        .map(|i| match i % 3 {
            0 => (-112.0 + 204.0 * unit(rng)) as f32,
            1 => 10f64.powf(-38.0 + 76.0 * unit(rng)) as f32,
            _ => -(10f64.powf(-30.0 * unit(rng))) as f32,
        })
        .collect();
    x.extend([0.0, -0.0, -1.0, -1.5, 89.0, 88.72, -103.97, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e-10, -1e-9]);
    let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
    let xd = gpu.upload(&x)?;
    let (mut ed, mut ld) = (poisoned_f32(gpu, x.len())?, poisoned_f32(gpu, x.len())?);
    ops::exp_ln_1p(gpu, &xd.view(), &mut ed.view_mut(), &mut ld.view_mut(), x.len())?;
    let (e, l) = (gpu.download::<f32>(&ed)?, gpu.download::<f32>(&ld)?);
    let bad_e = x.iter().zip(&e).filter(|&(&v, &g)| !same(g, math::exp(v))).count();
    let bad_l = x.iter().zip(&l).filter(|&(&v, &g)| !same(g, math::ln_1p(v))).count();
    let libm = x.iter().filter(|&&v| !same(v.exp(), math::exp(v))).count();
    report.row(
        "exp, ln_1p",
        format!("{} values over both ranges, with ±0, −1, overflow, ∞, NaN", x.len()),
        format!("{bad_e} exp and {bad_l} ln_1p bits differ (libm's expf differs from ours on {libm})"),
        bad_e == 0 && bad_l == 0,
    );
    Ok(())
}
