//! Speed of the dsv41 CUDA forward on flash-shaped layers, as ratios to floors measured in the same run.

mod count;
mod draft;
mod lanes;
mod ops;

use count::{row_flops, step_bytes};
use serde_json::{Value, json};
use std::process::ExitCode;
use std::time::Instant;
use tf_core::rng::SplitMix64;
use tf_cuda::timing::{copy_ms, median};
use tf_dsv41::cuda::weights::Exl3Run;
use tf_dsv41::cuda::{GpuLane, GpuModel, flash_config, flash_config_dspark, open_gpu};
use tf_exl3::exl3_mma::Exl3Kernels;

/// Decode batches measured by default (`TF_BENCH_BATCHES=1,8` picks): rows of one call, as a verify window.
const BATCHES: [usize; 3] = [1, 8, 32];
/// The FP8 GEMM shapes whose best rate is the prefill ceiling (scripts/fp8_rate.py's, so the two agree).
const FP8_SHAPES: [(usize, usize, usize); 3] = [(8192, 8192, 8192), (8192, 5120, 5120), (8192, 2304, 5120)];
/// Timed decode calls per batch after two warm ones.
const STEPS: usize = 10;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn tokens(rng: &mut SplitMix64, n: usize, vocab: usize) -> Vec<u32> {
    (0..n).map(|_| (rng.next_u64() % vocab as u64) as u32).collect()
}

fn fail(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn main() -> ExitCode {
    match run() {
        Ok(v) => {
            if let Some(out) = std::env::var_os("OUT") {
                let path = std::path::Path::new(&out).join("dsv41-bench.json");
                if let Err(e) = std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap_or_default()) {
                    println!("FAIL writing {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
                println!("wrote {}", path.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("FAIL: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<Value, String> {
    let (layers, ctx, prompt) =
        (env("TF_BENCH_LAYERS", 8), env("TF_BENCH_CONTEXT", 1024), env("TF_BENCH_PROMPT", 8192));
    let (chunk, budget_s) = (env("TF_BENCH_CHUNK", 2048), env("TF_BENCH_PREFILL_SECONDS", 240));
    let gpu = open_gpu(env("TF_GPU", 0)).map_err(fail)?;
    let copy = median(&copy_ms(gpu, 4 << 30, 3, 10).map_err(fail)?);
    let gbps = 2.0 * (4u64 << 30) as f64 / (f64::from(copy) * 1e-3) / 1e9;
    println!("[bench] copy bandwidth {gbps:.0} GB/s (4 GiB device-to-device, median of 10)");
    let op_times = if env("TF_BENCH_OPS", 1) == 1 {
        json!([ops::ops_bench(gpu, 1).map_err(fail)?, ops::ops_bench(gpu, 8).map_err(fail)?])
    } else {
        Value::Null
    };
    gpu.pool().release_free().map_err(fail)?;
    // TF_BENCH_DRAFT=1 adds V4.1-Flash's three DSpark stages and times drafting (draft.rs).
    let drafting = env("TF_BENCH_DRAFT", 0) == 1;
    let mut cfg = if drafting { flash_config_dspark(layers) } else { flash_config(layers) }.map_err(fail)?;
    // TF_BENCH_SEQUENTIAL=1 times the `--sequential-sums` switch (RMSNorm and mHC x² in index order, the earlier contract).
    if env("TF_BENCH_SEQUENTIAL", 0) == 1 {
        cfg.sums = tf_core::ops::SumOrder::Sequential;
    }
    // TF_BENCH_SEQUENTIAL_WO_A=1 times the `--sequential-wo-a` switch (grouped wo_a in index order, the earlier order).
    cfg.wo_a_lanes8 = env("TF_BENCH_SEQUENTIAL_WO_A", 0) != 1;
    println!("[bench] sum order {:?}, wo_a in 8 lanes {}", cfg.sums, cfg.wo_a_lanes8);
    let t = Instant::now();
    // TF_BENCH_EXL3=K makes every linear and expert an EXL3 MUL1 trellis at K; TF_BENCH_EXL3_PROMPT=N adds the prompt GEMM from N rows.
    let mut model = match env("TF_BENCH_EXL3", 0) {
        0 => GpuModel::synthetic(cfg.clone(), gpu, 0x5EED),
        k => {
            let prompt_rows = Some(env("TF_BENCH_EXL3_PROMPT", 0)).filter(|&n| n > 0);
            let run = Exl3Run { kernels: Exl3Kernels::Exact, prompt_rows };
            println!("[bench] EXL3 weights at K = {k}, prompt GEMM from {prompt_rows:?} rows");
            GpuModel::synthetic_exl3(cfg.clone(), gpu, 0x5EED, (k, run))
        }
    }
    .map_err(fail)?;
    let all: usize = (0..layers).map(|l| model.block_weight_bytes(l)).map(|(r, e)| r + e * cfg.n_routed_experts).sum();
    println!(
        "[bench] flash-shaped model: {layers} layers, {:.1} GB of weights, generated in {:.1} s",
        all as f64 / 1e9,
        t.elapsed().as_secs_f64()
    );
    let mut rng = SplitMix64::new(7);
    let mut base = model.new_lane().map_err(fail)?;
    let t = Instant::now();
    model.prefill(&mut base, &tokens(&mut rng, ctx, cfg.vocab_size), true).map_err(fail)?;
    println!("[bench] context prefill: {ctx} tokens in one call, {:.2} s", t.elapsed().as_secs_f64());
    let mut decode = Vec::new();
    let batches: Vec<usize> = match std::env::var("TF_BENCH_BATCHES") {
        Ok(list) => list.split(',').filter_map(|b| b.trim().parse().ok()).collect(),
        Err(_) => BATCHES.to_vec(),
    };
    // TF_BENCH_GRAPHS=0 times direct launches only; 1 (the default) times each batch both ways in this run.
    let modes: &[bool] = if env("TF_BENCH_GRAPHS", 1) == 1 { &[false, true] } else { &[false] };
    // TF_BENCH_SPLIT_ATTN=0,1 times each batch with `Options::split_attn` off, then on; the rest of the run keeps the last.
    let splits = switch_list("TF_BENCH_SPLIT_ATTN", model.opts.split_attn);
    // TF_BENCH_FUSED_MHC=0,1 and TF_BENCH_NORM_CODES=0,1 likewise for `Options::fused_mhc` and `Options::norm_codes`.
    let fused = switch_list("TF_BENCH_FUSED_MHC", model.opts.fused_mhc);
    let codes = switch_list("TF_BENCH_NORM_CODES", model.opts.norm_codes);
    let mut combos = Vec::new();
    for &s in &splits {
        for &f in &fused {
            combos.extend(codes.iter().map(|&c| (s, f, c)));
        }
    }
    for b in batches {
        for &(split, fuse, code) in &combos {
            (model.opts.split_attn, model.opts.fused_mhc, model.opts.norm_codes) = (split, fuse, code);
            println!("[bench] split_attn {split} fused_mhc {fuse} norm_codes {code}");
            for &graphs in modes {
                model.graphs = graphs;
                let mut row = decode_batch(&model, &base, b, ctx, gbps, &mut rng)?;
                (row["split_attn"], row["fused_mhc"], row["norm_codes"]) = (split.into(), fuse.into(), code.into());
                decode.push(row);
            }
        }
    }
    model.graphs = false;
    let g = gpu.graph_stats();
    println!(
        "[bench] graphs: {} steps captured, {} updated an executable, {} instantiated",
        g.captured, g.updated, g.instantiated
    );
    // TF_BENCH_LANES=2,8 picks the lane counts decoded in one step (one row each); 0 skips.
    let counts: Vec<usize> = std::env::var("TF_BENCH_LANES")
        .unwrap_or_else(|_| "8,32".into())
        .split(',')
        .filter_map(|b| b.trim().parse().ok())
        .filter(|&n| n > 0)
        .collect();
    // Each lane's own launches, then one launch over all lanes (`Options::joint_lanes`), in this run; the profile then takes TF_BENCH_JOINT_LANES (default 1).
    let mut lanes = serde_json::Map::new();
    for joint in [false, true] {
        model.opts.joint_lanes = joint;
        println!("[bench] lanes: joint_lanes {joint}");
        lanes.insert(format!("joint_{joint}"), lanes::lanes_bench(&model, &base, &counts, (ctx, gbps), &mut rng)?);
    }
    model.opts.joint_lanes = env("TF_BENCH_JOINT_LANES", 1) == 1;
    let drafts = if drafting { draft::draft_bench(&model, &base, &mut rng)? } else { Value::Null };
    // TF_BENCH_GROUP_EXPERTS=0,4 profiles and prefills once per `Options::group_experts` value, in this run.
    let groups: Vec<usize> = std::env::var("TF_BENCH_GROUP_EXPERTS")
        .map(|l| l.split(',').filter_map(|g| g.trim().parse().ok()).collect())
        .unwrap_or_else(|_| vec![model.opts.group_experts]);
    // TF_BENCH_TILED_EXPERTS=0,32 does the same for `Options::tiled_experts`, inside each group setting.
    let tileds: Vec<usize> = std::env::var("TF_BENCH_TILED_EXPERTS")
        .map(|l| l.split(',').filter_map(|g| g.trim().parse().ok()).collect())
        .unwrap_or_else(|_| vec![model.opts.tiled_experts]);
    let (mut profiles, mut prefills) = (Vec::new(), Vec::new());
    for (&g, &t) in groups.iter().flat_map(|g| tileds.iter().map(move |t| (g, t))) {
        (model.opts.group_experts, model.opts.tiled_experts) = (g, t);
        println!("[bench] group_experts {g} tiled_experts {t}");
        profiles.push(profile(&model, &base, &mut rng)?);
        prefills.push(if prompt == 0 { Value::Null } else { prefill(&model, prompt, chunk, budget_s, &mut rng)? });
    }
    drop(base);
    let one = |mut v: Vec<Value>| if v.len() == 1 { v.remove(0) } else { Value::Array(v) };
    let (profile, prefill) = (one(profiles), one(prefills));
    let exl3 = json!({"k": env("TF_BENCH_EXL3", 0), "prompt_gemm_rows": env("TF_BENCH_EXL3_PROMPT", 0)});
    Ok(
        json!({"copy_gbps": gbps, "layers": layers, "group_experts": groups, "tiled_experts": tileds, "exl3": exl3, "weights_bytes": all, "context": ctx,
              "decode": decode, "lanes": lanes, "drafting": drafts, "profile": profile, "prefill": prefill, "ops": op_times}),
    )
}

/// A switch's values from `var` (a list such as `0,1`), else its current value alone.
fn switch_list(var: &str, current: bool) -> Vec<bool> {
    std::env::var(var)
        .map(|l| l.split(',').filter_map(|v| v.trim().parse::<u8>().ok()).map(|v| v == 1).collect())
        .unwrap_or_else(|_| vec![current])
}

/// `b` rows per call on a fork of the context lane: route pass (untimed), two warm calls, then the median of STEPS.
fn decode_batch(
    model: &GpuModel,
    base: &GpuLane,
    b: usize,
    ctx: usize,
    gbps: f64,
    rng: &mut SplitMix64,
) -> Result<Value, String> {
    let vocab = model.cfg().vocab_size;
    let mut lane = base.fork(model.gpu).map_err(fail)?;
    *model.route_log.lock() = Some(Vec::new());
    model.decode(&mut lane, &tokens(rng, b, vocab)).map_err(fail)?;
    let routes = model.route_log.lock().take().unwrap_or_default();
    let bytes = step_bytes(model, &routes, b, ctx);
    model.decode(&mut lane, &tokens(rng, b, vocab)).map_err(fail)?;
    model.decode(&mut lane, &tokens(rng, b, vocab)).map_err(fail)?;
    let mut ms = Vec::with_capacity(STEPS);
    for _ in 0..STEPS {
        let t = Instant::now();
        model.decode(&mut lane, &tokens(rng, b, vocab)).map_err(fail)?;
        ms.push(t.elapsed().as_secs_f32() * 1e3);
    }
    let step_ms = f64::from(median(&ms));
    // The GPU's own time for the last step: its graph relaunched as is, so host launch cost drops out.
    let gpu_only_ms = if model.graphs {
        let reps = 20;
        let t = model.gpu.time_ms(|g| (0..reps).try_for_each(|_| g.relaunch(b as u64).map(drop))).map_err(fail)?;
        let ms = f64::from(t) / f64::from(reps);
        println!("[bench] decode batch {b:2} graph relaunched as is (GPU time alone): {ms:.2} ms/step");
        Some(ms)
    } else {
        None
    };
    let read = bytes.weights + b * bytes.kv;
    let floor_ms = read as f64 / (gbps * 1e9) * 1e3;
    let layers = model.cfg().n_layers;
    let mean_distinct = bytes.distinct_experts.iter().sum::<usize>() as f64 / layers as f64;
    let how = if model.graphs { "graph " } else { "direct" };
    println!(
        "[bench] decode batch {b:2} {how}: {step_ms:8.2} ms/step {:7.3} ms/layer {:7.3} ms/token; floor {floor_ms:.3} ms ({:.1} MB: weights touched {:.1} MB with {mean_distinct:.1} experts/layer, KV {:.2} MB); ratio {:.2}× floor",
        step_ms / layers as f64,
        step_ms / b as f64,
        read as f64 / 1e6,
        bytes.weights as f64 / 1e6,
        (b * bytes.kv) as f64 / 1e6,
        step_ms / floor_ms
    );
    Ok(
        json!({"batch": b, "graphs": model.graphs, "gpu_only_ms": gpu_only_ms, "step_ms": step_ms, "ms_per_token": step_ms / b as f64, "floor_ms": floor_ms,
              "bytes_read": read, "weight_bytes": bytes.weights, "kv_bytes": b * bytes.kv,
              "distinct_experts": bytes.distinct_experts, "ratio_to_floor": step_ms / floor_ms, "samples_ms": ms}),
    )
}

/// A `prompt`-token prefill in `chunk`-row calls, each timed to its end; stops after `budget_s` seconds.
fn prefill(
    model: &GpuModel,
    prompt: usize,
    chunk: usize,
    budget_s: usize,
    rng: &mut SplitMix64,
) -> Result<Value, String> {
    let cfg = model.cfg();
    let mut lane = model.new_lane().map_err(fail)?;
    let toks = tokens(rng, prompt, cfg.vocab_size);
    let (start, mut done, mut flops, mut chunks) = (Instant::now(), 0, 0.0, Vec::new());
    for c in toks.chunks(chunk) {
        let t = Instant::now();
        let last = done + c.len() == prompt;
        model.prefill(&mut lane, c, last).map_err(fail)?;
        model.gpu.sync("prefill chunk").map_err(fail)?;
        let s = t.elapsed().as_secs_f64();
        let f: f64 = (done..done + c.len()).map(|p| row_flops(cfg, p)).sum();
        println!("[bench] prefill rows {done}..{}: {s:.2} s, {:.1} TFLOP/s", done + c.len(), f / s / 1e12);
        chunks.push(json!({"from": done, "rows": c.len(), "seconds": s, "flops": f}));
        (done, flops) = (done + c.len(), flops + f);
        if start.elapsed().as_secs() as usize >= budget_s && done < prompt {
            println!("[bench] prefill stopped at {done} of {prompt} rows: over the {budget_s} s budget");
            break;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let rate = flops / secs;
    let torch = std::env::var("TF_FP8_TFLOPS").ok().and_then(|s| s.parse::<f64>().ok());
    // Our own cuBLASLt call measures the ceiling in this process too; the ratio divides by the higher of the two.
    let ours = tf_cuda::blas::fp8_rate(model.gpu, &FP8_SHAPES, 30);
    if let Err(e) = &ours {
        println!("[bench] cuBLASLt FP8 rate not measured: {e}");
    }
    let ours = ours.ok();
    println!(
        "[bench] FP8 matrix rate: cuBLASLt here {}, torch._scaled_mm {}",
        ours.map_or("n/a".into(), |t| format!("{t:.0} TFLOP/s")),
        torch.map_or("n/a".into(), |t| format!("{t:.0} TFLOP/s"))
    );
    let fp8 = match (ours, torch) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    let ratio = fp8.map(|t| rate / (t * 1e12));
    println!(
        "[bench] prefill: {done} rows in {secs:.1} s, {:.0} tok/s, {:.2} TFLOP/s model FLOPs; FP8 matrix rate {}; ratio {}",
        done as f64 / secs,
        rate / 1e12,
        fp8.map_or("not measured".into(), |t| format!("{t:.0} TFLOP/s")),
        ratio.map_or("n/a".into(), |r| format!("{r:.4}"))
    );
    Ok(json!({"rows": done, "seconds": secs, "model_flops": flops, "tflops": rate / 1e12,
              "fp8_matrix_tflops": fp8, "fp8_cublaslt_tflops": ours, "fp8_torch_tflops": torch, "ratio_to_fp8_rate": ratio, "chunks": chunks}))
}

/// Where a decode step goes (`TF_BENCH_PROFILE_ROWS` rows on each of `TF_BENCH_PROFILE_LANES` lanes, default 1 and 1): each phase between syncs, host enqueue time beside the total.
fn profile(model: &GpuModel, base: &GpuLane, rng: &mut SplitMix64) -> Result<Value, String> {
    const STEPS: usize = 3;
    let (rows, n) = (env("TF_BENCH_PROFILE_ROWS", 1), env("TF_BENCH_PROFILE_LANES", 1).max(1));
    let mut lanes = (0..n).map(|_| base.fork(model.gpu)).collect::<Result<Vec<_>, _>>().map_err(fail)?;
    *model.profile.lock() = Some(Default::default());
    let t = Instant::now();
    for _ in 0..STEPS {
        let toks: Vec<Vec<u32>> = (0..n).map(|_| tokens(rng, rows, model.cfg().vocab_size)).collect();
        let toks: Vec<&[u32]> = toks.iter().map(Vec::as_slice).collect();
        model.decode_lanes(&mut lanes.iter_mut().collect::<Vec<_>>(), &toks).map_err(fail)?;
    }
    let step_ms = t.elapsed().as_secs_f64() * 1e3 / STEPS as f64;
    let map = model.profile.lock().take().unwrap_or_default();
    println!(
        "[bench] profile of a step of {n} lane(s) × {rows} row(s) with a sync around each phase: {step_ms:.2} ms/step (names with ':' lie inside attention or moe)"
    );
    let mut phases = Vec::new();
    for (name, (host, total, calls)) in &map {
        let (h, t) = (host * 1e3 / STEPS as f64, total * 1e3 / STEPS as f64);
        println!("[bench]   {name:24} {t:8.3} ms/step total, {h:8.3} ms host enqueue, {} calls/step", calls / STEPS);
        phases.push(json!({"phase": name, "ms_per_step": t, "host_ms_per_step": h, "calls_per_step": calls / STEPS}));
    }
    Ok(json!({"rows": rows, "lanes": n, "step_ms_with_syncs": step_ms, "phases": phases}))
}
