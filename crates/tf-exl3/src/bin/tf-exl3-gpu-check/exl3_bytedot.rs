//! MUL1's integer core on the GPU: `exl3_mul1_bytedot` equals `bytedot_cpu` exactly, then its cold time, the ceiling of any MUL1 GEMV.

use crate::{Report, SAMPLES, time_row};
use serde_json::json;
use tf_core::rng::SplitMix64;
use tf_cuda::timing::{cold_median_ms, copies_for};
use tf_cuda::{Error, Gpu};
use tf_exl3::Codebook;
use tf_exl3::exl3::encode::random_weight;
use tf_exl3::exl3_bytedot::{bytedot_cpu, pack_acts};
use tf_exl3::exl3_cuda::GpuExl3;
use tf_exl3::exl3_mma::{Exl3Experts, x_rows};

/// Random int8 activations.
pub fn int8_rows(rng: &mut SplitMix64, n: usize) -> Vec<i8> {
    (0..n).map(|_| rng.next_u64() as i8).collect()
}

/// Declared before measuring: tolerance 0 (integer sums are exact in any order).
pub fn check(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report, copy_gbps: f64) -> Result<(), Error> {
    // Every K alone on a small matrix, then routed pairs over experts of K 2-4 on both expert shapes, with one bad id.
    let small = (1..=8).map(|k| (256, 384, vec![k], 3, 0));
    let routed = [(5120, 2304, vec![2, 3, 4], 12, 6), (2304, 5120, vec![4, 2, 3], 7, 0)];
    for (in_p, out_p, ks, pairs, topk) in small.chain(routed) {
        let count = ks.len().max(4);
        let ws: Vec<_> =
            (0..count).map(|e| random_weight(rng, (in_p, out_p, ks[e % ks.len()]), Codebook::Mul1, 1.0)).collect();
        let gs = ws.iter().map(|w| GpuExl3::upload(gpu, w)).collect::<Result<Vec<_>, _>>()?;
        let table = Exl3Experts::new(gpu, &gs.iter().collect::<Vec<_>>(), pairs)?;
        let a = int8_rows(rng, x_rows(pairs, topk) * in_p);
        let xs = gpu.upload(&pack_acts(&a, in_p))?;
        let mut ids: Vec<i32> = (0..pairs).map(|_| (rng.next_u64() % count as u64) as i32).collect();
        let run = |ids: &[i32]| -> Result<Vec<i32>, Error> {
            let mut y = gpu.pool().take(pairs * out_p * 4)?;
            table.mul1_bytedot(gpu, &gpu.upload(ids)?, &xs, topk, &mut y, pairs)?;
            Ok(gpu.download::<i32>(&y)?[..pairs * out_p].to_vec())
        };
        let got = run(&ids)?;
        let mut same = 0;
        for (p, &e) in ids.iter().enumerate() {
            let r = p.checked_div(topk).unwrap_or(p);
            let want = bytedot_cpu(&ws[e as usize], &a[r * in_p..(r + 1) * in_p]);
            same += usize::from(want == got[p * out_p..(p + 1) * out_p]);
        }
        ids[1] = count as i32;
        let bad = run(&ids)?;
        let marked = bad[out_p..2 * out_p].iter().all(|&v| v == i32::MIN);
        let others = bad[..out_p] == got[..out_p] && bad[2 * out_p..] == got[2 * out_p..];
        let case = format!("{pairs} pairs over {count} experts (K {ks:?}) {in_p}→{out_p}, topk {topk}");
        let what = format!(
            "{same} of {pairs} pairs = bytedot_cpu exactly; bad id → i32::MIN row {marked}, others unchanged {others}"
        );
        report.row("exl3 bytedot", &case, what, same == pairs && marked && others);
        report.push("exl3_bytedot", json!({"case": case, "same": same, "pairs": pairs}));
    }
    timing(gpu, rng, report, copy_gbps)
}

/// One weight and a decode step's routed launches (12/14 jobs of w1+w3, 6/7 of w2) at K = 2, 3, 4, cold: trellis bytes against copy.
fn timing(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report, copy_gbps: f64) -> Result<(), Error> {
    for (in_p, out_p, jobs_set, topk) in [(5120, 2304, [1, 12, 14], 1), (2304, 5120, [1, 6, 7], 0)] {
        for k in 2..=4 {
            let w = random_weight(rng, (in_p, out_p, k), Codebook::Mul1, 1.0);
            let wbytes = in_p * out_p * k / 8;
            let count = copies_for(wbytes).max(28);
            let gs = (0..count).map(|_| GpuExl3::upload(gpu, &w)).collect::<Result<Vec<_>, _>>()?;
            let table = Exl3Experts::new(gpu, &gs.iter().collect::<Vec<_>>(), 14)?;
            for jobs in jobs_set {
                // w1+w3 jobs share one token's row (topk = jobs); w2 jobs each read their own.
                let (topk, x_rows) = if topk > 0 { (jobs, 1) } else { (0, jobs) };
                let xs = gpu.upload(&pack_acts(&int8_rows(rng, x_rows * in_p), in_p))?;
                let launches = count / jobs;
                let ids = (0..launches)
                    .map(|l| gpu.upload(&(0..jobs).map(|j| (l * jobs + j) as i32).collect::<Vec<i32>>()))
                    .collect::<Result<Vec<_>, _>>()?;
                let mut y = gpu.pool().take(jobs * out_p * 4)?;
                let us = cold_median_ms(gpu, launches, SAMPLES, |g, i| {
                    table.mul1_bytedot(g, &ids[i], &xs, topk, &mut y, jobs)
                })? * 1e3;
                let case = format!("exl3 mul1_bytedot {jobs} jobs {in_p}→{out_p} K={k} (cold, {launches} launches)");
                time_row(report, &case, us, jobs * wbytes + x_rows * in_p * 4, copy_gbps);
            }
        }
    }
    Ok(())
}
