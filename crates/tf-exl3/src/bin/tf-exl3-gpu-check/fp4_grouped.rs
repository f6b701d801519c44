//! `fp4_group`, `fp4_gemv_grouped` and `fp4_gemm_grouped`: the device's grouping equals the CPU's, every pair equals its per-pair launch and the CPU.

use super::{Report, judge, routed_inputs, table_of, time_row};
use serde_json::json;
use tf_core::rng::SplitMix64;
use tf_cuda::{Error, Gpu};
use tf_exl3::cuda::{RoutedActs, fp4_gemv_routed};
use tf_exl3::{TILE_ROWS, fp4_gemv_grouped, fp4_group, group_pairs};

/// (tokens, top-k, experts, (out, in), acts per token, rows per tile).
type Case = (usize, usize, usize, (usize, usize), bool, usize);
const CASES: [Case; 4] = [
    (48, 6, 16, (2304, 5120), true, 8),
    (20, 2, 8, (5120, 2304), false, 8),
    (33, 4, 12, (300, 1056), true, 3),
    (7, 6, 64, (2304, 5120), true, 8),
];

/// Skewed ids: half the pairs go to expert 1 (whole tiles and a ragged one), two are bad (NaN rows, never a wild read).
fn skewed_ids(rng: &mut SplitMix64, pairs: usize, experts: usize) -> Vec<i32> {
    let mut ids: Vec<i32> =
        (0..pairs).map(|p| if p % 2 == 0 { 1 } else { (rng.next_u64() % experts as u64) as i32 }).collect();
    ids[pairs / 3] = -1;
    ids[pairs - 1] = experts as i32;
    ids
}

pub fn check(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report) -> Result<(), Error> {
    for (tokens, topk, count, (n, k), per_token, rows) in CASES {
        let pairs = tokens * topk;
        let kind = if per_token { "per token" } else { "per pair" };
        let case = format!("{tokens} tok × top-{topk} of {count}, {k}→{n}, acts {kind}, tiles of {rows}");
        let act_rows = if per_token { tokens } else { pairs };
        let (experts, x, (codes, scales)) = routed_inputs(gpu, rng, count, (n, k), act_rows)?;
        let table = table_of(gpu, &experts, (n, k))?;
        let acts = if per_token { RoutedActs::PerToken { topk } } else { RoutedActs::PerPair };
        let ids = skewed_ids(rng, pairs, count);
        let ids_d = gpu.upload(&ids)?;
        let groups = fp4_group(gpu, &ids_d, pairs, count, rows)?;
        let same_groups = groups.download(gpu)? == group_pairs(&ids, count, rows);
        report.row("fp4_group", case.as_str(), format!("device grouping == CPU's: {same_groups}"), same_groups);
        let mut y = gpu.upload(&vec![0.5f32; pairs * n])?;
        fp4_gemv_grouped(gpu, &table, &groups, (&codes, &scales), acts, &mut y, pairs)?;
        let got: Vec<f32> = gpu.download(&y)?;
        let mut y1 = gpu.upload(&vec![0.25f32; pairs * n])?;
        fp4_gemv_routed(gpu, &table, &ids_d, (&codes, &scales), acts, &mut y1, pairs)?;
        let per_pair: Vec<f32> = gpu.download(&y1)?;
        // Bits equal per pair; a bad id's row is NaN in both (NaN payloads compared by bits too).
        let same =
            (0..pairs).filter(|&p| bits(&got[p * n..(p + 1) * n]) == bits(&per_pair[p * n..(p + 1) * n])).count();
        let bad = ids.iter().enumerate().filter(|(_, e)| !(0..count as i32).contains(e)).map(|(p, _)| p);
        let nan = bad.clone().all(|p| got[p * n..(p + 1) * n].iter().all(|v| v.is_nan()));
        let result = format!("{same}/{pairs} pairs bit-identical to fp4_gemv_routed, bad ids NaN {nan}");
        report.row("fp4_gemv_grouped", case.as_str(), result, same == pairs && nan);
        // The tiled kernel from tiles of up to 64 pairs (several tiles for expert 1), against the same per-pair launch.
        let big = fp4_group(gpu, &ids_d, pairs, count, TILE_ROWS)?;
        let mut y2 = gpu.upload(&vec![0.75f32; pairs * n])?;
        fp4_gemv_grouped(gpu, &table, &big, (&codes, &scales), acts, &mut y2, pairs)?;
        let tiled: Vec<f32> = gpu.download(&y2)?;
        let same_t =
            (0..pairs).filter(|&p| bits(&tiled[p * n..(p + 1) * n]) == bits(&per_pair[p * n..(p + 1) * n])).count();
        let result = format!("tiles of {TILE_ROWS}: {same_t}/{pairs} pairs bit-identical to fp4_gemv_routed");
        report.row("fp4_gemm_grouped", case.as_str(), result, same_t == pairs);
        // Against the CPU on the good pairs.
        let good: Vec<usize> = (0..pairs).filter(|p| (0..count as i32).contains(&ids[*p])).collect();
        let mut want = Vec::with_capacity(good.len() * n);
        let mut have = Vec::with_capacity(good.len() * n);
        for &p in &good {
            let a = if per_token { p / topk } else { p };
            want.extend(experts[ids[p] as usize].cpu.forward_f32(&x[a * k..(a + 1) * k], 1));
            have.extend_from_slice(&got[p * n..(p + 1) * n]);
        }
        judge(report, "fp4_gemv_grouped vs CPU", &case, &have, &want, json!({"pairs": pairs, "rows": rows}));
    }
    Ok(())
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// A prompt chunk's w1 (512 tokens × top-6 of 64 experts, 5120→2304): per-pair launch against grouped tiles of 8, cold.
pub fn timing(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report, copy_gbps: f64) -> Result<(), Error> {
    let (tokens, topk, count, n, k) = (512, 6, 64, 2304, 5120);
    let pairs = tokens * topk;
    let (experts, _, (codes, scales)) = routed_inputs(gpu, rng, count, (n, k), tokens)?;
    let table = table_of(gpu, &experts, (n, k))?;
    let ids: Vec<i32> = super::random_ids(rng, tokens, topk, count);
    let ids_d = gpu.upload(&ids)?;
    let groups = fp4_group(gpu, &ids_d, pairs, count, 8)?;
    let acts = RoutedActs::PerToken { topk };
    let mut y = gpu.pool().take(pairs * n * 4)?;
    let wbytes = experts[0].w.len() + experts[0].ws.len();
    let touched = count * wbytes + tokens * (k + k / 8);
    let per_pair = super::per_launch_us(gpu, 1, |g, _| {
        fp4_gemv_routed(g, &table, &ids_d, (&codes, &scales), acts, &mut y, pairs)
    })?;
    let case = format!("fp4_gemv_routed {tokens} tok × top-{topk} of {count} {k}→{n} ({pairs} launches of an expert)");
    time_row(report, &case, per_pair, touched, copy_gbps);
    let grouped = super::per_launch_us(gpu, 1, |g, _| {
        fp4_gemv_grouped(g, &table, &groups, (&codes, &scales), acts, &mut y, pairs)
    })?;
    let case = format!("fp4_gemv_grouped, same pairs in tiles of 8 ({} tiles at most)", groups.cap());
    time_row(report, &case, grouped, touched, copy_gbps);
    let big = fp4_group(gpu, &ids_d, pairs, count, TILE_ROWS)?;
    let tiled =
        super::per_launch_us(gpu, 1, |g, _| fp4_gemv_grouped(g, &table, &big, (&codes, &scales), acts, &mut y, pairs))?;
    let case = format!("fp4_gemm_grouped, same pairs in tiles of {TILE_ROWS} ({} tiles at most)", big.cap());
    time_row(report, &case, tiled, touched, copy_gbps);
    let flops = 2.0 * (pairs * n * k) as f64;
    report.row(
        "time",
        format!("fp4_gemm_grouped rate, {pairs}×{n}×{k}"),
        format!("{:.2} TFLOP/s", flops / f64::from(tiled) / 1e6),
        true,
    );
    let regroup = super::per_launch_us(gpu, 1, |g, _| fp4_group(g, &ids_d, pairs, count, 8).map(drop))?;
    report.row("time", format!("fp4_group of {pairs} pairs over {count} experts"), format!("{regroup:.2} µs"), true);
    report.push(
        "grouped_speedup",
        json!({"per_pair_us": per_pair, "grouped_us": grouped, "tiled_us": tiled, "group_us": regroup}),
    );
    Ok(())
}
