//! GPU self-check of the FP4 expert GEMV against `Fp4Weight::forward_f32` (rows alone, routed pairs, batch-1 time) and of EXL3 (exl3.rs).

mod exl3;
mod exl3_bytedot;
mod exl3_fast;
mod exl3_gemm;
mod fp4_grouped;

use serde_json::{Map, Value, json};
use std::path::PathBuf;
use std::process::ExitCode;
use tf_core::formats::{pack_fp4, quant_fp8_pow2};
use tf_core::rng::SplitMix64;
use tf_core::{DType, Tensor, bf16};
use tf_cuda::timing::{self, ROTATE_BYTES, median};
use tf_cuda::{Error, Gpu, PoolBuf};
use tf_exl3::Fp4Weight;
use tf_exl3::cuda::{Fp4Experts, Fp4Plan, RoutedActs, fp4_gemv, fp4_gemv_routed};

/// Declared before measuring: 0, as exact products, exact lane sums, the lane tree, (p·sx)·sw and K-order adds are the CPU's.
const TOLERANCE_ABS: f32 = 0.0;
/// (rows, out, in): the brief's expert shapes (w1/w3 5120 -> 2304, w2 2304 -> 5120), then other row counts and ragged cases.
const SHAPES: [(usize, usize, usize); 9] = [
    (1, 2304, 5120),
    (1, 5120, 2304),
    (4, 2304, 5120),
    (8, 5120, 2304),
    (2, 300, 5120),
    (3, 100, 160),
    (5, 77, 2304),
    (6, 64, 5120),
    (7, 50, 1056),
];
/// A routed check: tokens, experts chosen per token, experts in the table, (out, in), activations per token (or pair).
type Routed = (usize, usize, usize, (usize, usize), bool);
const ROUTED: [Routed; 2] = [(4, 8, 32, (2304, 5120), true), (2, 8, 16, (5120, 2304), false)];
const COPY_BYTES: usize = 4 << 30;
const SAMPLES: usize = 31;

/// Findings: one row per check (echoed at once), the table printed last, JSON for the lead's records.
#[derive(Default)]
struct Report {
    rows: Vec<(String, String, String, bool)>,
    json: Map<String, Value>,
}

impl Report {
    fn row(&mut self, check: &str, case: impl Into<String>, result: impl Into<String>, pass: bool) {
        let (case, result) = (case.into(), result.into());
        println!("[{}] {check} {case}: {result}", if pass { "ok" } else { "FAIL" });
        self.rows.push((check.into(), case, result, pass));
    }

    fn push(&mut self, key: &str, value: Value) {
        if let Value::Array(items) = self.json.entry(key).or_insert_with(|| Value::Array(vec![])) {
            items.push(value);
        }
    }

    fn passed(&self) -> bool {
        !self.rows.is_empty() && self.rows.iter().all(|r| r.3)
    }

    fn print_table(&self) {
        let wc = self.rows.iter().map(|r| r.0.chars().count()).max().unwrap_or(0);
        let wk = self.rows.iter().map(|r| r.1.chars().count()).max().unwrap_or(0);
        println!("\n{:<6} {:<wc$}  {:<wk$}  result", "", "check", "case");
        for (check, case, result, pass) in &self.rows {
            println!("{:<6} {check:<wc$}  {case:<wk$}  {result}", if *pass { "ok" } else { "FAIL" });
        }
        let failed = self.rows.iter().filter(|r| !r.3).count();
        println!("{} checks, {failed} failed: {}", self.rows.len(), if self.passed() { "PASS" } else { "FAIL" });
    }

    fn write_json(&self, path: &std::path::Path) -> std::io::Result<()> {
        let mut all = self.json.clone();
        let rows = self.rows.iter().map(|(c, k, r, p)| json!({"check": c, "case": k, "result": r, "pass": p}));
        all.insert("rows".into(), Value::Array(rows.collect()));
        all.insert("pass".into(), Value::Bool(self.passed()));
        std::fs::write(path, serde_json::to_string_pretty(&Value::Object(all)).map_err(std::io::Error::other)? + "\n")
    }
}

fn data_err(e: tf_core::Error) -> Error {
    Error::Launch { op: "fp4 check data", what: e.to_string() }
}

/// One expert: packed E2M1 codes (all 16 occur), E8M0 scales near 1 (never 0 or NaN), as the CPU weight and on the GPU.
struct Expert<'g> {
    cpu: Fp4Weight,
    w: PoolBuf<'g>,
    ws: PoolBuf<'g>,
}

fn random_weight(rng: &mut SplitMix64, n: usize, k: usize) -> (Vec<u8>, Vec<u8>) {
    let packed = pack_fp4(&(0..n * k).map(|_| (rng.next_u64() % 16) as u8).collect::<Vec<u8>>());
    (packed, (0..n * k / 32).map(|_| 112 + (rng.next_u64() % 28) as u8).collect())
}

fn expert<'g>(gpu: &'g Gpu, rng: &mut SplitMix64, n: usize, k: usize) -> Result<Expert<'g>, Error> {
    let (packed, ws) = random_weight(rng, n, k);
    let wt = Tensor::from_bytes(DType::I8, &[n, k / 2], &packed).map_err(data_err)?;
    let st = Tensor::from_bytes(DType::F8E8M0, &[n, k / 32], &ws).map_err(data_err)?;
    let cpu = Fp4Weight::from_tensors("check", &wt, &st).map_err(data_err)?;
    Ok(Expert { cpu, w: gpu.upload(&packed)?, ws: gpu.upload(&ws)? })
}

/// Activation rows, no zero group: magnitudes 2^-12..2^12, with tiny elements that become subnormal E4M3 codes.
fn random_acts(rng: &mut SplitMix64, rows: usize, k: usize) -> Vec<bf16> {
    let mut x = Vec::with_capacity(rows * k);
    for _ in 0..rows * k / 32 {
        let mag = 2f32.powi((rng.next_u64() % 25) as i32 - 12);
        x.extend((0..32).map(|i| {
            let v = (rng.normal() + 0.01) * mag;
            bf16::from_f32(if i % 13 == 5 { v * 1e-4 } else { v })
        }));
    }
    x
}

/// Quantized activations (the CPU's act_quant, so this checks the GEMV alone) on the GPU: codes and f32 scales.
fn upload_acts<'g>(gpu: &'g Gpu, x: &[bf16]) -> Result<(PoolBuf<'g>, PoolBuf<'g>), Error> {
    let q = quant_fp8_pow2(x, 32);
    Ok((gpu.upload(&q.codes)?, gpu.upload(&q.scales)?))
}

/// Max |a−b|, ‖a−b‖₂/‖b‖₂, elements whose bits differ, and NaNs in either.
fn compare(got: &[f32], want: &[f32]) -> (f32, f64, usize, usize) {
    let (mut max, mut d2, mut r2, mut differ, mut nan) = (0.0f32, 0.0f64, 0.0f64, 0, 0);
    for (&g, &w) in got.iter().zip(want) {
        differ += usize::from(g.to_bits() != w.to_bits());
        if g.is_nan() || w.is_nan() {
            nan += 1;
            continue;
        }
        let d = (g - w).abs();
        max = max.max(d);
        d2 += f64::from(d) * f64::from(d);
        r2 += f64::from(w) * f64::from(w);
    }
    (max, (d2 / r2.max(f64::MIN_POSITIVE)).sqrt(), differ, nan + got.len().abs_diff(want.len()))
}

/// Records one comparison as a row and a JSON entry; passes within the tolerance and with no NaN.
fn judge(report: &mut Report, check: &str, case: &str, got: &[f32], want: &[f32], extra: Value) -> bool {
    let (max_abs, rel, differ, nan) = compare(got, want);
    let pass = nan == 0 && max_abs <= TOLERANCE_ABS;
    let result = format!("max |Δ| {max_abs:e}, ‖Δ‖/‖ref‖ {rel:e}, {differ}/{} bits differ, {nan} NaN", want.len());
    report.row(check, case, result, pass);
    let mut entry = json!({"case": case, "max_abs_diff": max_abs, "rel_l2_err": rel, "differing": differ, "nan": nan,
        "outputs": want.len(), "tolerance_abs": TOLERANCE_ABS, "pass": pass});
    if let (Value::Object(e), Value::Object(x)) = (&mut entry, extra) {
        e.extend(x);
    }
    report.push(check, entry);
    pass
}

/// `fp4_gemv` into a NaN-poisoned output, downloaded.
fn dense(
    gpu: &Gpu,
    e: &Expert<'_>,
    x: (&PoolBuf<'_>, &PoolBuf<'_>),
    shape: (usize, usize, usize),
) -> Result<Vec<f32>, Error> {
    let mut y = gpu.upload(&vec![f32::NAN; shape.0 * shape.1])?;
    fp4_gemv(gpu, (&e.w, &e.ws), x.0, x.1, &mut y, shape)?;
    gpu.download(&y)
}

fn check_dense(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report) -> Result<(), Error> {
    for (rows, n, k) in SHAPES {
        let case = format!("{rows}×{k}→{n}");
        let e = expert(gpu, rng, n, k)?;
        let x = random_acts(rng, rows, k);
        let want = e.cpu.forward_f32(&x, rows);
        let (codes, scales) = upload_acts(gpu, &x)?;
        let got = dense(gpu, &e, (&codes, &scales), (rows, n, k))?;
        let plan = Fp4Plan::new(rows.min(8), k);
        judge(
            report,
            "fp4_gemv",
            &case,
            &got,
            &want,
            json!({"rows": rows, "out": n, "in": k, "plan": format!("{plan:?}")}),
        );
        if rows > 1 {
            // Every row alone (a one-row launch with its own plan) must give the bits it got in the batch.
            let mut same = 0;
            for j in 0..rows {
                let (c1, s1) = upload_acts(gpu, &x[j * k..(j + 1) * k])?;
                same += usize::from(dense(gpu, &e, (&c1, &s1), (1, n, k))? == got[j * n..(j + 1) * n]);
            }
            let result = format!("{same}/{rows} rows alone bit-identical to the batch");
            report.row("row alone", case.as_str(), result, same == rows);
        }
    }
    Ok(())
}

/// Distinct experts per token, drawn from the table.
fn random_ids(rng: &mut SplitMix64, tokens: usize, topk: usize, experts: usize) -> Vec<i32> {
    let mut ids = Vec::with_capacity(tokens * topk);
    for _ in 0..tokens {
        let mut chosen: Vec<i32> = Vec::with_capacity(topk);
        while chosen.len() < topk {
            let e = (rng.next_u64() % experts as u64) as i32;
            if !chosen.contains(&e) {
                chosen.push(e);
            }
        }
        ids.extend(chosen);
    }
    ids
}

/// `count` random experts of `[n, k]`, and `rows` random activation rows with their codes and scales on the GPU.
type RoutedInputs<'g> = (Vec<Expert<'g>>, Vec<bf16>, (PoolBuf<'g>, PoolBuf<'g>));

fn routed_inputs<'g>(
    gpu: &'g Gpu,
    rng: &mut SplitMix64,
    count: usize,
    (n, k): (usize, usize),
    rows: usize,
) -> Result<RoutedInputs<'g>, Error> {
    let experts: Vec<Expert<'g>> = (0..count).map(|_| expert(gpu, rng, n, k)).collect::<Result<_, _>>()?;
    let x = random_acts(rng, rows, k);
    let acts = upload_acts(gpu, &x)?;
    Ok((experts, x, acts))
}

/// The device pointer table of `experts`.
fn table_of<'g, 'b>(
    gpu: &'g Gpu,
    experts: &'b [Expert<'g>],
    (n, k): (usize, usize),
) -> Result<Fp4Experts<'g, 'b>, Error> {
    let refs: Vec<(&'b PoolBuf<'g>, &'b PoolBuf<'g>)> = experts.iter().map(|e| (&e.w, &e.ws)).collect();
    Fp4Experts::new(gpu, &refs, (n, k))
}

fn check_routed(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report) -> Result<(), Error> {
    for (tokens, topk, count, (n, k), per_token) in ROUTED {
        let pairs = tokens * topk;
        let kind = if per_token { "per token" } else { "per pair" };
        let case = format!("{tokens} tok × top-{topk} of {count}, {k}→{n}, acts {kind}");
        let act_rows = if per_token { tokens } else { pairs };
        let (experts, x, (codes, scales)) = routed_inputs(gpu, rng, count, (n, k), act_rows)?;
        let table = table_of(gpu, &experts, (n, k))?;
        let acts = if per_token { RoutedActs::PerToken { topk } } else { RoutedActs::PerPair };
        let mut ids = random_ids(rng, tokens, topk, count);
        let run = |ids: &[i32]| -> Result<Vec<f32>, Error> {
            let ids = gpu.upload(ids)?;
            let mut y = gpu.upload(&vec![f32::NAN; pairs * n])?;
            fp4_gemv_routed(gpu, &table, &ids, (&codes, &scales), acts, &mut y, pairs)?;
            gpu.download(&y)
        };
        let got = run(&ids)?;
        let mut want = Vec::with_capacity(pairs * n);
        for (p, &e) in ids.iter().enumerate() {
            let a = if per_token { p / topk } else { p };
            want.extend(experts[e as usize].cpu.forward_f32(&x[a * k..(a + 1) * k], 1));
        }
        judge(report, "fp4_gemv_routed", &case, &got, &want, json!({"tokens": tokens, "topk": topk, "experts": count}));
        // A pair equals the plain GEMV of its expert on its row; a bad id poisons only its own row.
        let a0 = 0;
        let (c0, s0) = upload_acts(gpu, &x[a0 * k..(a0 + 1) * k])?;
        let plain = dense(gpu, &experts[ids[0] as usize], (&c0, &s0), (1, n, k))?;
        ids[1] = count as i32;
        let bad = run(&ids)?;
        let poisoned = bad[n..2 * n].iter().all(|v| v.is_nan());
        let others = bad[..n] == got[..n] && bad[2 * n..] == got[2 * n..];
        let ok = plain == got[..n] && poisoned && others;
        let result = format!(
            "pair 0 = plain GEMV {}, bad id → NaN row {poisoned}, other pairs unchanged {others}",
            plain == got[..n]
        );
        report.row("routed pairs", case.as_str(), result, ok);
    }
    Ok(())
}

/// Median GB/s (read + written) of 4 GiB device-to-device copies timed by events.
fn copy_bandwidth(gpu: &Gpu, report: &mut Report) -> Result<f64, Error> {
    let ms = timing::copy_ms(gpu, COPY_BYTES, 3, 10)?;
    let gbps = 2.0 * COPY_BYTES as f64 / (f64::from(median(&ms)) * 1e-3) / 1e9;
    report.json.insert("copy_gbps".into(), json!(gbps));
    report.row("copy bandwidth", "4 GiB d2d, median of 10", format!("{gbps:.0} GB/s read+written"), gbps > 0.0);
    Ok(gbps)
}

/// Median µs per launch over rotated weight copies, replayed from one graph (no host launch cost, cold L2).
fn per_launch_us(gpu: &Gpu, copies: usize, f: impl FnMut(&Gpu, usize) -> Result<(), Error>) -> Result<f32, Error> {
    Ok(timing::cold_median_ms(gpu, copies, SAMPLES, f)? * 1e3)
}

fn time_row(report: &mut Report, case: &str, us: f32, bytes: usize, copy_gbps: f64) {
    let gbps = bytes as f64 / (f64::from(us) * 1e-6) / 1e9;
    let of_copy = gbps / copy_gbps;
    report.row("time", case, format!("{us:.2} µs, {gbps:.0} GB/s read = {of_copy:.2} of copy"), us.is_finite());
    report
        .push("timing", json!({"case": case, "median_us": us, "bytes_read": bytes, "gbps": gbps, "of_copy": of_copy}));
}

/// Batch 1: each expert shape alone, and one routed launch of six experts (DeepSeek-V4.1's top-6), rotating copies.
fn check_timing(gpu: &Gpu, rng: &mut SplitMix64, report: &mut Report, copy_gbps: f64) -> Result<(), Error> {
    for (n, k) in [(2304, 5120), (5120, 2304)] {
        let (packed, ws) = random_weight(rng, n, k);
        let wbytes = packed.len() + ws.len();
        let copies = ROTATE_BYTES.div_ceil(wbytes).max(2);
        let ws_copies: Vec<(PoolBuf<'_>, PoolBuf<'_>)> =
            (0..copies).map(|_| Ok((gpu.upload(&packed)?, gpu.upload(&ws)?))).collect::<Result<_, Error>>()?;
        let (codes, scales) = upload_acts(gpu, &random_acts(rng, 6, k))?;
        let mut y = gpu.pool().take(6 * n * 4)?;
        let us = per_launch_us(gpu, copies, |g, i| {
            fp4_gemv(g, (&ws_copies[i].0, &ws_copies[i].1), &codes, &scales, &mut y, (1, n, k))
        })?;
        time_row(report, &format!("fp4_gemv 1×{k}→{n}"), us, wbytes + k + k / 8, copy_gbps);
        let refs: Vec<(&PoolBuf<'_>, &PoolBuf<'_>)> = ws_copies.iter().map(|(w, s)| (w, s)).collect();
        let table = Fp4Experts::new(gpu, &refs, (n, k))?;
        let launches = copies.div_ceil(6);
        let ids: Vec<i32> = (0..launches * 6).map(|i| (i % copies) as i32).collect();
        let ids_d: Vec<PoolBuf<'_>> = ids.chunks(6).map(|c| gpu.upload(c)).collect::<Result<_, _>>()?;
        let (acts, rows) = if n == 2304 { (RoutedActs::PerToken { topk: 6 }, 1) } else { (RoutedActs::PerPair, 6) };
        let us = per_launch_us(gpu, launches, |g, i| {
            fp4_gemv_routed(g, &table, &ids_d[i], (&codes, &scales), acts, &mut y, 6)
        })?;
        let case = format!("fp4_gemv_routed 1 tok × 6 experts {k}→{n}");
        time_row(report, &case, us, 6 * wbytes + rows * (k + k / 8), copy_gbps);
        drop((table, ids_d, y, codes, scales));
        drop(ws_copies);
        gpu.pool().release_free()?;
    }
    Ok(())
}

/// Runs one section; its error or panic becomes a failed row naming it, and later sections still run.
fn section(report: &mut Report, name: &str, f: impl FnOnce(&mut Report) -> Result<(), Error>) {
    // TF_SECTIONS=a,b runs only the sections whose names start with one of them; "profile" and "time exl3" run only when named.
    let only = std::env::var("TF_SECTIONS").unwrap_or_default();
    let only: Vec<&str> = only.split(',').filter(|s| !s.is_empty()).collect();
    let picked = if only.is_empty() {
        !matches!(name, "profile" | "time exl3")
    } else {
        only.iter().any(|o| name.starts_with(o))
    };
    if !picked {
        return;
    }
    let t = std::time::Instant::now();
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(report))) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => report.row(name, "section", e.to_string(), false),
        Err(p) => {
            let what = p.downcast_ref::<String>().cloned().or(p.downcast_ref::<&str>().map(|s| s.to_string()));
            report.row(name, "section", format!("panicked: {}", what.unwrap_or_default()), false);
        }
    }
    println!("{name} section took {:.1} s", t.elapsed().as_secs_f32());
}

fn main() -> ExitCode {
    let mut report = Report::default();
    let seed = std::env::var("TF_CHECK_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    println!("tf-exl3-gpu-check: seed {seed} (TF_CHECK_SEED={seed} replays this run); tolerance {TOLERANCE_ABS}");
    report.json.insert("seed".into(), json!(seed));
    let ordinal = std::env::var("TF_GPU").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    match Gpu::open(ordinal) {
        Err(e) => report.row("open", format!("GPU {ordinal}"), e.to_string(), false),
        Ok(gpu) => {
            let rng = &mut SplitMix64::new(seed);
            section(&mut report, "device", |r| {
                let i = gpu.info()?;
                r.json.insert(
                    "device".into(),
                    json!({"name": i.name, "sm_count": i.sm_count, "arch": i.arch.to_string()}),
                );
                r.row("device", i.name.clone(), format!("{} SMs, kernels for {}", i.sm_count, i.arch), true);
                Ok(())
            });
            let mut copy = f64::NAN;
            section(&mut report, "copy bandwidth", |r| copy_bandwidth(&gpu, r).map(|bw| copy = bw));
            section(&mut report, "fp4_gemv", |r| check_dense(&gpu, rng, r));
            section(&mut report, "fp4_gemv_routed", |r| check_routed(&gpu, rng, r));
            section(&mut report, "fp4 grouped", |r| fp4_grouped::check(&gpu, rng, r));
            section(&mut report, "fp4 grouped time", |r| fp4_grouped::timing(&gpu, rng, r, copy));
            section(&mut report, "timing", |r| check_timing(&gpu, rng, r, copy));
            section(&mut report, "exl3", |r| exl3::check(&gpu, rng, r, copy));
            section(&mut report, "exl3 fast", |r| exl3_fast::check(&gpu, rng, r, copy));
            section(&mut report, "exl3 gemm", |r| exl3_gemm::check(&gpu, rng, r));
            section(&mut report, "exl3 bytedot", |r| exl3_bytedot::check(&gpu, rng, r, copy));
            section(&mut report, "profile", |_| exl3_fast::profile(&gpu, rng));
            section(&mut report, "time exl3", |r| exl3_fast::time_only(&gpu, rng, r, copy));
        }
    }
    // The JSON first, so the table is the last thing printed.
    let mut wrote = true;
    if let Some(out) = std::env::var_os("OUT") {
        let path = PathBuf::from(out).join("exl3-gpu-check.json");
        match report.write_json(&path) {
            Ok(()) => println!("wrote {}", path.display()),
            Err(e) => {
                wrote = false;
                println!("FAIL writing {}: {e}", path.display());
            }
        }
    }
    report.print_table();
    if report.passed() && wrote { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
