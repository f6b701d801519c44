//! mHC mixes/collapse/expand, the MoE glue (router, SwiGLU, combine) and the Engram gate against their CPU twins.

use crate::util::{bf16s, diff_bf16, diff_f32, download_bf16, normals, poisoned_bf16, poisoned_f32};
use tf_core::bf16;
use tf_core::formats::{quant_fp8_pow2, to_bf16};
use tf_core::ops::SumOrder;
use tf_core::rng::SplitMix64;
use tf_cuda::report::Report;
use tf_cuda::{Error, Gpu, PoolBuf};
use tf_dsv41::cuda::ops;
use tf_dsv41::engram::gate_rows;
use tf_dsv41::linear::{Dense, Norm, rms_norm_rows};
use tf_dsv41::mhc::{HcMix, HcSite, hc_post, hc_pre};
use tf_dsv41::moe::{route, swiglu};

/// Declared: the mixes use the CPU's summation orders and exp rounded once, so they match bit for bit.
const MIX_TOL: f64 = 0.0;
/// Declared: GPU expf/sqrtf/log1pf differ from the host's by ≤ 2 f32 ulps: router weights within 1e-6 relative.
const ROUTE_TOL: f64 = 1e-6;
/// Declared: the CPU's sum orders and exp rounded once from double leave nothing to differ: zero ulps.
const ONE_ULP: f64 = 0.0;

fn up_bf16<'g>(gpu: &'g Gpu, v: &[bf16]) -> Result<PoolBuf<'g>, Error> {
    gpu.upload(&v.iter().map(|b| b.to_bits()).collect::<Vec<u16>>())
}

fn flat(m: &[HcMix]) -> Vec<f32> {
    m.iter().flat_map(|m| m.pre.iter().chain(&m.post).chain(&m.comb).copied()).collect()
}

pub fn check(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report) -> Result<(), Error> {
    // 11 rows at the flash width cross dense's 8-row tiles, width 1,284 sums x² apart, 70 rows take the tiled dense, hc 3 and 6 the generic Sinkhorns, dims 9,000 and 9,024 the unstaged norm (9,024 with codes).
    for shape in [
        (6, 4, 320),
        (11, 4, 5120),
        (1, 4, 5120),
        (3, 4, 321),
        (32, 4, 4096),
        (70, 4, 256),
        (5, 3, 320),
        (4, 6, 160),
        (2, 4, 9000),
        (2, 4, 9024),
    ] {
        for sums in [SumOrder::Sequential, SumOrder::Lanes32] {
            mhc_case(gpu, rng, report, shape, Norm { eps: 1e-6, sums })?;
        }
    }
    moe_case(gpu, rng, report)?;
    engram_case(gpu, rng, report)
}

/// Mixes bit for bit (MIX_TOL); collapse and expand from the CPU's own mixes bit for bit (same f32 ops, same order).
fn mhc_case(
    gpu: &Gpu,
    rng: &mut SplitMix64,
    report: &mut Report,
    (rows, hc, dim): (usize, usize, usize),
    norm: Norm,
) -> Result<(), Error> {
    let iters = 20;
    let mix = (2 + hc) * hc;
    let site = HcSite {
        func: Dense { out: mix, inp: hc * dim, w: normals(rng, mix * hc * dim, 0.02) },
        scale: normals(rng, 3, 0.5),
        base: normals(rng, mix, 0.5),
    };
    let x = bf16s(rng, rows * hc * dim, 1.0);
    let want = site.mixes(&x, rows, hc, iters, norm, 1e-6);
    let (xd, fd, sd, bd) =
        (up_bf16(gpu, &x)?, gpu.upload(&site.func.w)?, gpu.upload(&site.scale)?, gpu.upload(&site.base)?);
    // hc 4 runs both Sinkhorn kernels it can take: the generic warp one and `hc_sinkhorn_warp4`.
    for hc4 in if hc == 4 { vec![false, true] } else { vec![false] } {
        let mut md = poisoned_f32(gpu, rows * mix)?;
        let (sinkhorn, shape) = (ops::Sinkhorn { iters, eps: 1e-6, hc4 }, (rows, hc, dim));
        ops::hc_mixes(gpu, &xd.view(), &fd.view(), &sd.view(), &bd.view(), &mut md.view_mut(), shape, sinkhorn, norm)?;
        let d = diff_f32(&gpu.download::<f32>(&md)?, &flat(&want), 1e-3);
        report.row(
            "hc_mixes",
            format!("{rows} rows, hc {hc}, dim {dim}, {iters} Sinkhorn iterations (hc4 {hc4}), x² {:?}", norm.sums),
            d.describe("relative"),
            d.pass(MIX_TOL),
        );
    }
    let cpu_mix = gpu.upload(&flat(&want))?;
    let pre_want: Vec<bf16> =
        (0..rows).flat_map(|r| hc_pre(&x[r * hc * dim..(r + 1) * hc * dim], &want[r].pre, dim)).collect();
    let mut yd = poisoned_bf16(gpu, rows * dim)?;
    ops::hc_pre(gpu, &xd.view(), &cpu_mix.view(), &mut yd.view_mut(), (rows, hc, dim))?;
    let d = diff_bf16(&download_bf16(gpu, &yd)?, &pre_want);
    report.row("hc_pre", format!("{rows} rows from the CPU's mixes"), d.describe("ulp"), d.pass(0.0));
    let w = bf16s(rng, dim, 1.0);
    let mut nd = poisoned_bf16(gpu, rows * dim)?;
    let (wd, normed_want) = (up_bf16(gpu, &w)?, rms_norm_rows(&pre_want, &w, norm));
    ops::hc_pre_norm(gpu, &xd.view(), &cpu_mix.view(), &wd.view(), &mut nd.view_mut(), None, (rows, hc, dim), norm)?;
    let d = diff_bf16(&download_bf16(gpu, &nd)?, &normed_want);
    report.row(
        "hc_pre_norm",
        format!("{rows} rows, x² {:?}, against rms_norm(hc_pre)", norm.sums),
        d.describe("ulp"),
        d.pass(0.0),
    );
    let case = format!("{rows} rows × {dim}, hc {hc}, x² {:?}", norm.sums);
    codes_case(gpu, report, ("hc_pre_norm_quant", &case), &normed_want, dim, |y, c| {
        ops::hc_pre_norm(gpu, &xd.view(), &cpu_mix.view(), &wd.view(), y, Some(c), (rows, hc, dim), norm)
    })?;
    codes_case(gpu, report, ("rms_norm_quant", &case), &normed_want, dim, |y, c| {
        ops::rms_norm(gpu, &yd.view(), &wd.view(), y, Some(c), rows, dim, norm)
    })?;
    let f = bf16s(rng, rows * dim, 1.0);
    let post_want: Vec<bf16> = (0..rows)
        .flat_map(|r| hc_post(&f[r * dim..(r + 1) * dim], &x[r * hc * dim..(r + 1) * hc * dim], &want[r], dim))
        .collect();
    let mut od = poisoned_bf16(gpu, rows * hc * dim)?;
    ops::hc_post(gpu, &up_bf16(gpu, &f)?.view(), &xd.view(), &cpu_mix.view(), &mut od.view_mut(), (rows, hc, dim))?;
    let d = diff_bf16(&download_bf16(gpu, &od)?, &post_want);
    report.row("hc_post", format!("{rows} rows from the CPU's mixes"), d.describe("ulp"), d.pass(0.0));
    Ok(())
}

/// A norm that writes its FP8 codes: its rows equal `want` and its codes and scales act_quant_fp8's of `want` (the CPU's `quant_fp8_pow2`), bit for bit; a dim of partial 32-groups is refused naming it.
fn codes_case(
    gpu: &Gpu,
    report: &mut Report,
    (op, case): (&str, &str),
    want: &[bf16],
    dim: usize,
    run: impl FnOnce(&mut ops::Out<'_>, ops::Codes<'_>) -> Result<(), Error>,
) -> Result<(), Error> {
    let n = want.len();
    let (mut y, mut cd, mut sd) =
        (poisoned_bf16(gpu, n)?, gpu.upload(&vec![0xA5u8; n])?, poisoned_f32(gpu, n.div_ceil(32))?);
    let got = run(&mut y.view_mut(), ops::Codes { codes: cd.view_mut(), scales: sd.view_mut() });
    if !dim.is_multiple_of(32) {
        let refused = got.as_ref().is_err_and(|e| e.to_string().contains("not a multiple of 32"));
        report.row(op, case.to_string(), format!("{got:?}"), refused);
        return Ok(());
    }
    got?;
    let q = quant_fp8_pow2(want, 32);
    let rows_ok = diff_bf16(&download_bf16(gpu, &y)?, want);
    let codes: Vec<u8> = gpu.download(&cd)?;
    let scales: Vec<f32> = gpu.download(&sd)?;
    let code_diff = codes.iter().zip(&q.codes).filter(|(a, b)| a != b).count();
    let scale_diff = scales.iter().zip(&q.scales).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
    let what = format!("{}; {code_diff} codes, {scale_diff} scales differ", rows_ok.describe("ulp"));
    report.row(op, case.to_string(), what, rows_ok.pass(0.0) && code_diff == 0 && scale_diff == 0);
    Ok(())
}

/// Router ids exactly and weights within ROUTE_TOL (log1p may round apart from the host's); SwiGLU and the combine bit for bit.
fn moe_case(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report) -> Result<(), Error> {
    let (rows, experts, topk, inter, dim, limit) = (7, 48, 6, 96, 128, 7.0);
    let logits = normals(rng, rows * experts, 2.0);
    let bias = normals(rng, experts, 0.1);
    let want: Vec<Vec<(usize, f32)>> = logits.chunks_exact(experts).map(|l| route(l, &bias, topk, true, 2.5)).collect();
    let (ld, bd) = (gpu.upload(&logits)?, gpu.upload(&bias)?);
    let (mut ids, mut wts) = (gpu.upload(&vec![-7i32; rows * topk])?, poisoned_f32(gpu, rows * topk)?);
    ops::route(
        gpu,
        &ld.view(),
        &bd.view(),
        &mut ids.view_mut(),
        &mut wts.view_mut(),
        (rows, experts, topk),
        true,
        2.5,
    )?;
    let got_ids = gpu.download::<i32>(&ids)?;
    let want_ids: Vec<i32> = want.iter().flatten().map(|(e, _)| *e as i32).collect();
    let want_w: Vec<f32> = want.iter().flatten().map(|(_, w)| *w).collect();
    let d = diff_f32(&gpu.download::<f32>(&wts)?, &want_w, 1e-3);
    report.row(
        "route",
        format!("{rows} rows, top-{topk} of {experts}"),
        format!("ids equal: {}; weights {}", got_ids == want_ids, d.describe("relative")),
        got_ids == want_ids && d.pass(ROUTE_TOL),
    );
    let pairs = rows * topk;
    let (g, u) = (normals(rng, pairs * inter, 4.0), normals(rng, pairs * inter, 4.0));
    let b = |v: &[f32]| v.iter().map(|&x| to_bf16(x)).collect::<Vec<bf16>>();
    let sw_want = swiglu(&b(&g), &b(&u), Some(&want_w), limit);
    let mut hd = poisoned_bf16(gpu, pairs * inter)?;
    let wd = gpu.upload(&want_w)?;
    ops::swiglu(
        gpu,
        &gpu.upload(&g)?.view(),
        &gpu.upload(&u)?.view(),
        Some(&wd.view()),
        &mut hd.view_mut(),
        (pairs, inter),
        limit,
    )?;
    let d = diff_bf16(&download_bf16(gpu, &hd)?, &sw_want);
    report.row(
        "swiglu",
        format!("{pairs} pairs × {inter}, limit {limit}, weighted"),
        d.describe("ulp"),
        d.pass(ONE_ULP),
    );
    let (down, shared) = (normals(rng, pairs * dim, 1.0), normals(rng, rows * dim, 1.0));
    let mut comb_want = Vec::with_capacity(rows * dim);
    for r in 0..rows {
        let mut order: Vec<usize> = (0..topk).collect();
        order.sort_by_key(|&i| want_ids[r * topk + i]);
        for c in 0..dim {
            let s = order.iter().fold(0.0f32, |a, &i| a + to_bf16(down[(r * topk + i) * dim + c]).to_f32());
            comb_want.push(to_bf16(s + to_bf16(shared[r * dim + c]).to_f32()));
        }
    }
    let mut yd = poisoned_bf16(gpu, rows * dim)?;
    let idd = gpu.upload(&want_ids)?;
    ops::moe_combine(
        gpu,
        &gpu.upload(&down)?.view(),
        &idd.view(),
        &gpu.upload(&shared)?.view(),
        &mut yd.view_mut(),
        (rows, topk, dim),
    )?;
    let d = diff_bf16(&download_bf16(gpu, &yd)?, &comb_want);
    report.row(
        "moe_combine",
        format!("{rows} rows × top-{topk} × {dim}, ascending expert order"),
        d.describe("ulp"),
        d.pass(0.0),
    );
    joined_case(gpu, report, (&down, &shared, &comb_want), (&want_ids, &want_w), (rows, topk, dim))
}

/// The shared expert riding as each row's last pair: moe_with_shared's ids and weights, and moe_combine_joined = moe_combine bit for bit.
fn joined_case(
    gpu: &Gpu,
    report: &mut Report,
    (down, shared, comb_want): (&[f32], &[f32], &[bf16]),
    (ids, wts): (&[i32], &[f32]),
    (rows, topk, dim): (usize, usize, usize),
) -> Result<(), Error> {
    let (k1, sid) = (topk + 1, 1000);
    let mut down2 = Vec::with_capacity(rows * k1 * dim);
    let (mut ids2_want, mut wts2_want) = (Vec::new(), Vec::new());
    for r in 0..rows {
        down2.extend_from_slice(&down[r * topk * dim..(r + 1) * topk * dim]);
        down2.extend_from_slice(&shared[r * dim..(r + 1) * dim]);
        ids2_want.extend(ids[r * topk..(r + 1) * topk].iter().copied().chain([sid as i32]));
        wts2_want.extend(wts[r * topk..(r + 1) * topk].iter().copied().chain([1.0f32]));
    }
    let (idd, wd) = (gpu.upload(ids)?, gpu.upload(wts)?);
    let (mut ids2, mut wts2) = (gpu.pool().take(rows * k1 * 4)?, gpu.pool().take(rows * k1 * 4)?);
    ops::moe_with_shared(
        gpu,
        (&idd.view(), &wd.view()),
        (&mut ids2.view_mut(), &mut wts2.view_mut()),
        (rows, topk, sid),
    )?;
    let (got_ids, got_w) = (gpu.download::<i32>(&ids2)?, gpu.download::<f32>(&wts2)?);
    let same = got_ids == ids2_want && got_w.iter().zip(&wts2_want).all(|(a, b)| a.to_bits() == b.to_bits());
    report.row("moe_with_shared", format!("{rows} rows × top-{topk}, shared row {sid}"), format!("equal {same}"), same);
    let mut yd = poisoned_bf16(gpu, rows * dim)?;
    ops::moe_combine_joined(gpu, &gpu.upload(&down2)?.view(), &idd.view(), &mut yd.view_mut(), (rows, topk, dim))?;
    let d = diff_bf16(&download_bf16(gpu, &yd)?, comb_want);
    report.row("moe_combine_joined", format!("{rows} rows × top-{topk}+1 × {dim}"), d.describe("ulp"), d.pass(0.0));
    Ok(())
}

/// The gate from wkv's f32 output (rounded to bf16 on both sides): bit for bit.
fn engram_case(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report) -> Result<(), Error> {
    let (rows, hc, dim) = (5, 4, 256);
    let x = bf16s(rng, rows * hc * dim, 1.0);
    let kv = normals(rng, rows * (hc + 1) * dim, 1.0);
    let weight = normals(rng, hc * dim, 1.0);
    let mut want = x.clone();
    let kvb: Vec<bf16> = kv.iter().map(|&v| to_bf16(v)).collect();
    gate_rows(&mut want, &kvb, &weight, (hc, dim), None, 1e-6);
    let mut xd = up_bf16(gpu, &x)?;
    ops::engram_gate(
        gpu,
        &mut xd.view_mut(),
        &gpu.upload(&kv)?.view(),
        &gpu.upload(&weight)?.view(),
        (rows, hc, dim),
        1e-6,
    )?;
    let d = diff_bf16(&download_bf16(gpu, &xd)?, &want);
    report.row("engram_gate", format!("{rows} rows × {hc} streams × {dim}"), d.describe("ulp"), d.pass(ONE_ULP));
    Ok(())
}
