//! `tf plan`: per-rank weights, KV, Engram and workspace bytes of a config under `--tp N`, and the longest context that fits.

use std::fmt::Write;
use std::path::PathBuf;
use tf_dsv41::tp::{Budget, ExpertSplit, Limits, WeightFormat, budget};

#[derive(Clone, Debug, clap::Args)]
pub struct PlanArgs {
    /// Ranks (GPUs) the model is split over
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub tp: u64,
    /// Memory of one GPU in GB (10^9 bytes), e.g. 141 for an H200, 80 for an H100, 128 for a GB10
    #[arg(long, value_name = "GB")]
    pub gpu_mem: f64,
    /// A checkpoint directory whose config to plan (default: the released V4.1-Flash config)
    #[arg(long, value_name = "DIR")]
    pub model: Option<PathBuf>,
    /// fp8 (the official FP8/FP4 checkpoint) or exl3 (every FP8/FP4 linear at --bpw)
    #[arg(long, default_value = "fp8", value_parser = ["fp8", "exl3"])]
    pub weights: String,
    /// Bits per weight of an EXL3 quant
    #[arg(long, value_name = "BITS", default_value_t = 2.9)]
    pub bpw: f64,
    /// Routed experts split by intermediate width, or whole experts per rank; `ep-heads` and `ep`: what `tf serve --tp` runs by default and with `--tp-split experts`
    #[arg(long, default_value = "width", value_parser = ["width", "whole", "ep-heads", "ep"])]
    pub experts: String,
    /// Rows of a prefill chunk (the server's --prefill-chunk)
    #[arg(long, value_name = "N", default_value_t = 2048)]
    pub prefill_chunk: usize,
    /// Engram rows kept decoded in host memory per table (the server's --engram-cache-rows)
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub engram_cache_rows: usize,
    /// GB left per GPU for the CUDA context, allocator slack and kernel modules
    #[arg(long, value_name = "GB", default_value_t = 2.0)]
    pub reserve: f64,
    /// Print the budget as JSON instead of a table
    #[arg(long)]
    pub json: bool,
}

const GB: f64 = 1e9;

/// The budget `args` asks for, and a report in text or JSON.
pub fn run(a: &PlanArgs) -> Result<String, String> {
    let cfg = match &a.model {
        Some(dir) => tf_dsv41::Config::load(dir).map_err(|e| format!("{}: {e}", dir.display()))?,
        None => tf_dsv41::Config::v41_flash(),
    };
    if !(a.gpu_mem > 0.0 && a.bpw > 0.0 && a.reserve >= 0.0) {
        return Err("--gpu-mem and --bpw must be positive, --reserve not negative".into());
    }
    let format = if a.weights == "exl3" { WeightFormat::Exl3 { bpw: a.bpw } } else { WeightFormat::Official };
    let experts = match a.experts.as_str() {
        "whole" => ExpertSplit::Whole,
        "ep" => ExpertSplit::ExpertsOnly,
        "ep-heads" => ExpertSplit::ExpertsAndHeads,
        _ => ExpertSplit::Width,
    };
    let lim = Limits {
        gpu_bytes: (a.gpu_mem * GB) as u64,
        prefill_chunk: a.prefill_chunk.max(1),
        engram_cache_rows: a.engram_cache_rows,
        reserve_bytes: (a.reserve * GB) as u64,
    };
    let b = budget(&cfg, a.tp as usize, experts, format, lim);
    if a.json {
        return Ok(json(&b, &cfg).to_string() + "\n");
    }
    Ok(table(&b, &cfg, a))
}

fn json(b: &Budget, cfg: &tf_dsv41::Config) -> serde_json::Value {
    serde_json::json!({
        "world": b.world, "heads": b.heads, "weights_bytes": b.weights, "engram_table_bytes": b.engram_tables,
        "engram_cache_bytes": b.engram_cache, "kv_bytes_per_token": b.kv_per_token, "kv_fixed_bytes": b.kv_fixed,
        "workspace_fixed_bytes": b.workspace_fixed, "workspace_bytes_per_token": b.workspace_per_token,
        "max_context": b.max_context, "config_max_seq_len": cfg.max_seq_len,
    })
}

fn table(b: &Budget, cfg: &tf_dsv41::Config, a: &PlanArgs) -> String {
    let mut s = String::new();
    let fmt = if a.weights == "exl3" { format!("EXL3 {} bpw", a.bpw) } else { "FP8/FP4".into() };
    let _ = writeln!(
        s,
        "TP{} on {} GB GPUs, {fmt} weights, experts split by {}, prefill chunk {}",
        b.world, a.gpu_mem, a.experts, a.prefill_chunk
    );
    let _ = writeln!(s, "rank  heads  weights GB  engram tables GB (disk)  longest context (tokens)");
    for r in 0..b.world {
        let ctx = b.max_context[r];
        let fits = if ctx == 0 { "does not fit".into() } else { ctx.min(cfg.max_seq_len as u64).to_string() };
        let _ = writeln!(
            s,
            "{r:>4}  {:>5}  {:>10.1}  {:>23.1}  {fits}",
            b.heads[r],
            b.weights[r] as f64 / GB,
            b.engram_tables[r] as f64 / GB
        );
    }
    let _ = writeln!(
        s,
        "per lane: {:.0} bytes of compressed KV and index keys per token (on every rank), {:.2} GB fixed",
        b.kv_per_token,
        b.kv_fixed as f64 / GB
    );
    let _ = writeln!(
        s,
        "workspace: {:.2} GB per prefill chunk + {:.0} bytes per context token (indexer scores)",
        b.workspace_fixed as f64 / GB,
        b.workspace_per_token
    );
    let _ = writeln!(
        s,
        "host: Engram cache {:.2} GB per rank; the model's own limit is {} tokens",
        b.engram_cache as f64 / GB,
        cfg.max_seq_len
    );
    s
}
