//! The tensor-core EXL3 path against the CPU: its register decode bit for bit, `forward` within a declared bound, cold timing.

use crate::exl3::{acts, case_weight, cases, exact_against_cpu};
use crate::exl3_bytedot::int8_rows;
use crate::{Report, SAMPLES, time_row};
use serde_json::json;
use tf_core::formats::f16_bits_to_f32;
use tf_core::rng::SplitMix64;
use tf_cuda::timing::{cold_median_ms, copies_for};
use tf_cuda::{Error, Gpu};
use tf_exl3::exl3::encode::random_weight;
use tf_exl3::exl3::{HAD, fwht_blocks};
use tf_exl3::exl3_bytedot::pack_acts;
use tf_exl3::exl3_cuda::GpuExl3;
use tf_exl3::exl3_mma::{Exl3Experts, Exl3Kernels};
use tf_exl3::{Codebook, Exl3Weight};

/// Declared before measuring: per column c before Hadamard out, |Δ| ≤ 2^-16 · Σ_i |xh_i·q_ic| (x as fp16 hi + lo is ~22 bits, f32 sums).
const REL: f64 = 1.0 / 65536.0;

/// Per output, the declared bound: `rel` times the column bounds of its 128-block through Hadamard out, plus f32 rounding of y.
pub fn bound(w: &Exl3Weight, q: &[f32], x: &[f32], want: &[f32], rel: f64) -> Vec<f64> {
    let (n, m) = (w.in_p, w.out_p);
    let mut tol = Vec::with_capacity(want.len());
    for (xr, yr) in x.chunks_exact(n).zip(want.chunks_exact(m)) {
        let mut xh: Vec<f32> = xr.iter().zip(&w.suh).map(|(v, &s)| v * f16_bits_to_f32(s)).collect();
        fwht_blocks(&mut xh);
        let mut col = vec![0.0f64; m];
        for (i, &a) in xh.iter().enumerate() {
            col.iter_mut().zip(&q[i * m..(i + 1) * m]).for_each(|(c, &v)| *c += f64::from((a * v).abs()));
        }
        for (j, y) in yr.iter().enumerate() {
            let block: f64 = col[j / HAD * HAD..(j / HAD + 1) * HAD].iter().sum();
            let svh = f64::from(f16_bits_to_f32(w.svh[j]).abs());
            tol.push(svh * rel * block / (HAD as f64).sqrt() + f64::from(y.abs()) * 1e-6);
        }
    }
    tol
}

pub fn check(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report, copy_gbps: f64) -> Result<(), Error> {
    for (i, shape) in cases().into_iter().enumerate() {
        let (w, g, case) = case_weight(gpu, rng, shape, i % 5 == 1)?;
        let (in_p, out_p) = (w.in_p, w.out_p);
        let q_cpu = w.decode_q();
        let mut q = gpu.pool().take(in_p * out_p * 2)?;
        g.decode_frag(gpu, &mut q)?;
        let got: Vec<u16> = gpu.download(&q)?;
        let differ = got.iter().zip(&q_cpu).filter(|(a, b)| a != b).count();
        report.row("exl3 decode_frag", &case, format!("{differ} of {} fp16 values differ", got.len()), differ == 0);
        let qf: Vec<f32> = q_cpu.into_iter().map(f16_bits_to_f32).collect();
        for rows in if in_p * out_p > 1 << 20 { vec![1, 8, 16, 20] } else { vec![1, 3, 11, 16, 19] } {
            let x = acts(rng, rows * in_p);
            let want = w.forward_q(&qf, &x, rows);
            let xd = gpu.upload(&x)?;
            let y: Vec<f32> = gpu.download(&g.forward(gpu, &xd, rows)?)?;
            let tol = bound(&w, &qf, &x, &want, REL);
            let over = y.iter().zip(&want).zip(&tol).filter(|((a, b), t)| f64::from((*a - *b).abs()) > **t).count();
            let worst =
                y.iter().zip(&want).zip(&tol).map(|((a, b), t)| f64::from((a - b).abs()) / t).fold(0.0, f64::max);
            let finite = y.iter().all(|v| v.is_finite());
            let again: Vec<f32> = gpu.download(&g.forward(gpu, &xd, rows)?)?;
            let same = again.iter().zip(&y).all(|(a, b)| a.to_bits() == b.to_bits());
            // Row 0 alone must give the bits it gave inside the batch.
            let one: Vec<f32> = gpu.download(&g.forward(gpu, &gpu.upload(&x[..in_p])?, 1)?)?;
            let alone = one.iter().zip(&y[..out_p]).all(|(a, b)| a.to_bits() == b.to_bits());
            let what = format!(
                "{rows} rows: {over} of {} over the bound, worst {worst:.3} of it; rerun same bits {same}, row 0 alone same bits {alone}",
                y.len()
            );
            report.row("exl3 forward (mma)", &case, what, over == 0 && finite && same && alone);
            report.push(
                "exl3_fast",
                json!({"case": case, "rows": rows, "decode_differ": differ, "over": over, "worst_of_bound": worst}),
            );
        }
    }
    routed(gpu, rng, report)?;
    timing(gpu, rng, report, copy_gbps)?;
    routed_timing(gpu, rng, report, copy_gbps)
}

/// The timings of `check` without its checks: several builds can then be timed in one device call.
pub fn time_only(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report, copy_gbps: f64) -> Result<(), Error> {
    // A few exact rows against the CPU first, so a variant's times come with its bits.
    for (in_p, out_p, k, rows) in [(5120, 2304, 3, 1), (2304, 5120, 2, 3), (512, 384, 4, 11)] {
        let w = random_weight(rng, (in_p, out_p, k), Codebook::Mul1, 1.0);
        let (bits, len, _, _) = exact_against_cpu(gpu, rng, (&w, &GpuExl3::upload(gpu, &w)?), rows)?;
        let case = format!("{rows}×{in_p}→{out_p} K={k} MUL1");
        report.row("exl3 forward_exact", &case, format!("{bits} of {len} outputs differ in bits"), bits == 0);
    }
    timing(gpu, rng, report, copy_gbps)?;
    routed_timing(gpu, rng, report, copy_gbps)
}

/// The bench: K = 2, 3, 4 on both expert shapes, one row, cold (rotating copies from one graph), against this run's copy.
fn timing(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report, copy_gbps: f64) -> Result<(), Error> {
    for (in_p, out_p) in [(5120, 2304), (2304, 5120)] {
        for k in 2..=4 {
            let w = random_weight(rng, (in_p, out_p, k), Codebook::Mul1, 1.0);
            let wbytes = in_p * out_p * k / 8 + (in_p + out_p) * 2;
            let copies = copies_for(wbytes);
            let gs = (0..copies).map(|_| GpuExl3::upload(gpu, &w)).collect::<Result<Vec<_>, _>>()?;
            for rows in if k == 3 { vec![1, 8, 16] } else { vec![1] } {
                let x = gpu.upload(&acts(rng, rows * in_p))?;
                let mut y = gpu.pool().take(rows * out_p * 4)?;
                let mut part = gpu.pool().take(gs[0].part_bytes(rows))?;
                let us =
                    cold_median_ms(gpu, copies, SAMPLES, |g, i| gs[i].forward_into(g, &x, rows, &mut y, &mut part))?
                        * 1e3;
                let case = format!("exl3 forward (mma) {rows}×{in_p}→{out_p} K={k} (cold, {copies} copies)");
                time_row(report, &case, us, wbytes + rows * (in_p + out_p) * 4, copy_gbps);
                if rows == 1 || rows == 8 {
                    let us =
                        cold_median_ms(gpu, copies, SAMPLES, |g, i| gs[i].forward_exact(g, &x, rows).map(drop))? * 1e3;
                    let case = format!("exl3 forward_exact {rows}×{in_p}→{out_p} K={k} (cold, {copies} copies)");
                    time_row(report, &case, us, wbytes + rows * (in_p + out_p) * 4, copy_gbps);
                }
                if rows == 1 && k == 3 {
                    // The same copy every launch (L2-hot): what is left is latency, not DRAM.
                    let us =
                        cold_median_ms(gpu, copies, SAMPLES, |g, _| gs[0].forward_exact(g, &x, 1).map(drop))? * 1e3;
                    let case = format!("exl3 forward_exact 1×{in_p}→{out_p} K={k} (hot, one copy)");
                    time_row(report, &case, us, wbytes + (in_p + out_p) * 4, copy_gbps);
                }
            }
        }
    }
    // One split of one column group: the launch and one block's serial path, nothing else.
    let w = random_weight(rng, (512, 128, 3), Codebook::Mul1, 1.0);
    let g = GpuExl3::upload(gpu, &w)?;
    let x = gpu.upload(&acts(rng, 512))?;
    let us = cold_median_ms(gpu, 64, SAMPLES, |gp, _| g.forward_exact(gp, &x, 1).map(drop))? * 1e3;
    time_row(report, "exl3 forward_exact 1×512→128 K=3 (hot, one block)", us, 512 * 128 * 3 / 8, copy_gbps);
    Ok(())
}

/// One exact launch per shape, then one routed launch of 12 jobs, for a profiler (`ncu -k exl3_gemv_exact` with TF_SECTIONS=profile).
pub fn profile(gpu: &Gpu, rng: &mut SplitMix64) -> Result<(), Error> {
    for (in_p, out_p) in [(512, 128), (5120, 2304)] {
        let g = GpuExl3::upload(gpu, &random_weight(rng, (in_p, out_p, 3), Codebook::Mul1, 1.0))?;
        let x = gpu.upload(&acts(rng, in_p))?;
        g.forward_exact(gpu, &x, 1)?;
    }
    // A decode step's w1+w3: 12 routed jobs of one token over 12 experts.
    let gs = (0..12)
        .map(|_| GpuExl3::upload(gpu, &random_weight(rng, (5120, 2304, 3), Codebook::Mul1, 1.0)))
        .collect::<Result<Vec<_>, _>>()?;
    let table = Exl3Experts::new(gpu, &gs.iter().collect::<Vec<_>>(), 12)?;
    let ids = gpu.upload(&(0..12).collect::<Vec<i32>>())?;
    let x = gpu.upload(&acts(rng, 5120))?;
    let mut y = gpu.pool().take(12 * 2304 * 4)?;
    let mut part = gpu.pool().take(table.part_bytes(12))?;
    table.routed(gpu, &ids, &x, 12, (&mut y, &mut part), (12, Exl3Kernels::Exact))?;
    // The same 12 jobs through MUL1's integer core alone, the ceiling the exact launch is measured against.
    let xs = gpu.upload(&pack_acts(&int8_rows(rng, 5120), 5120))?;
    table.mul1_bytedot(gpu, &ids, &xs, 12, &mut y, 12)?;
    gpu.stream().synchronize().map_err(|e| Error::Launch { op: "profile", what: e.to_string() })
}

/// Routed pairs over experts of mixed K: exact pairs equal the CPU's forward bit for bit, fast ones their expert's one-row fast forward.
fn routed(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report) -> Result<(), Error> {
    for (in_p, out_p, topk) in [(5120, 2304, 6), (2304, 5120, 0)] {
        let (count, pairs) = (12, 12);
        let ws: Vec<Exl3Weight> =
            (0..count).map(|e| random_weight(rng, (in_p, out_p, 2 + e % 3), Codebook::Mul1, 1.0)).collect();
        let gs = ws.iter().map(|w| GpuExl3::upload(gpu, w)).collect::<Result<Vec<_>, _>>()?;
        let table = Exl3Experts::new(gpu, &gs.iter().collect::<Vec<_>>(), pairs)?;
        let x_rows = pairs.checked_div(topk).unwrap_or(pairs);
        let x = acts(rng, x_rows * in_p);
        let xd = gpu.upload(&x)?;
        for kernels in [Exl3Kernels::Exact, Exl3Kernels::Fast] {
            let mut ids: Vec<i32> = (0..pairs).map(|_| (rng.next_u64() % count as u64) as i32).collect();
            let mut part = gpu.pool().take(table.part_bytes(pairs))?;
            let mut run = |ids: &[i32]| -> Result<Vec<f32>, Error> {
                let idd = gpu.upload(ids)?;
                let mut y = gpu.upload(&vec![0.0f32; pairs * out_p])?;
                table.routed(gpu, &idd, &xd, topk, (&mut y, &mut part), (pairs, kernels))?;
                gpu.download(&y)
            };
            let got = run(&ids)?;
            let mut same = 0;
            for (p, &e) in ids.iter().enumerate() {
                let a = p.checked_div(topk).unwrap_or(p);
                let row = &x[a * in_p..(a + 1) * in_p];
                let one: Vec<f32> = match kernels {
                    Exl3Kernels::Exact => ws[e as usize].forward(row, 1),
                    Exl3Kernels::Fast => gpu.download(&gs[e as usize].forward(gpu, &gpu.upload(row)?, 1)?)?,
                };
                let got_p = &got[p * out_p..(p + 1) * out_p];
                same += usize::from(one.iter().zip(got_p).all(|(u, v)| u.to_bits() == v.to_bits()));
            }
            ids[1] = count as i32;
            let bad = run(&ids)?;
            let nan = bad[out_p..2 * out_p].iter().all(|v| v.is_nan());
            let others = bad[..out_p] == got[..out_p] && bad[2 * out_p..] == got[2 * out_p..];
            let case = format!("{kernels:?}: {pairs} pairs over {count} experts (K 2-4) {in_p}→{out_p}, topk {topk}");
            let against = if kernels == Exl3Kernels::Exact { "the CPU's forward" } else { "one-row fast forward" };
            let what =
                format!("{same} of {pairs} pairs = {against} bits; bad id → NaN row {nan}, others unchanged {others}");
            report.row("exl3 routed", &case, what, same == pairs && nan && others);
        }
    }
    Ok(())
}

/// A decode step's routed experts in one launch each: w1+w3 of six experts (12 jobs), then w2 of six, at K = 3, cold, both kernels; 14 and 7 jobs carry the shared expert too.
fn routed_timing(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report, copy_gbps: f64) -> Result<(), Error> {
    // Mixed: experts of K 2, 3, 4 in turn (the published checkpoint's K varies per expert), the same bytes on average.
    let cases = [
        (5120, 2304, 12, 12, false),
        (5120, 2304, 14, 14, false),
        (2304, 5120, 6, 0, false),
        (2304, 5120, 7, 0, false),
    ];
    let mixed = [(5120, 2304, 14, 14, true), (2304, 5120, 7, 0, true)];
    for (in_p, out_p, jobs, topk, mix) in cases.into_iter().chain(mixed) {
        let k = 3;
        let ws: Vec<_> = (2..=4)
            .map(|kk| random_weight(rng, (in_p, out_p, if mix { kk } else { k }), Codebook::Mul1, 1.0))
            .collect();
        let wbytes = in_p * out_p * k / 8 + (in_p + out_p) * 2;
        let count = copies_for(wbytes).max(2 * jobs);
        let gs = (0..count).map(|i| GpuExl3::upload(gpu, &ws[i % 3])).collect::<Result<Vec<_>, _>>()?;
        let table = Exl3Experts::new(gpu, &gs.iter().collect::<Vec<_>>(), jobs)?;
        let launches = count / jobs;
        let ids = (0..launches)
            .map(|l| gpu.upload(&(0..jobs).map(|j| (l * jobs + j) as i32).collect::<Vec<i32>>()))
            .collect::<Result<Vec<_>, _>>()?;
        let x_rows = if topk > 0 { 1 } else { jobs };
        let x = gpu.upload(&acts(rng, x_rows * in_p))?;
        let mut y = gpu.pool().take(jobs * out_p * 4)?;
        let mut part = gpu.pool().take(table.part_bytes(jobs))?;
        for kernels in [Exl3Kernels::Exact, Exl3Kernels::Fast] {
            let us = cold_median_ms(gpu, launches, SAMPLES, |g, i| {
                table.routed(g, &ids[i], &x, topk, (&mut y, &mut part), (jobs, kernels))
            })? * 1e3;
            let kk = if mix { "2-4 mixed".to_string() } else { k.to_string() };
            let case = format!("exl3 routed {kernels:?} {jobs} jobs {in_p}→{out_p} K={kk} (cold, {launches} launches)");
            time_row(report, &case, us, jobs * (wbytes + (in_p + out_p) * 4), copy_gbps);
        }
    }
    Ok(())
}
