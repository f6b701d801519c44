//! The `tf` command: `tf inspect` lists a safetensors checkpoint, `tf generate` runs a prompt greedily.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use tf_server::generate;

const USAGE: &str = "usage: tf serve [--model DIR] [--device cpu|cuda|cuda:N] [--engram-io mapped|mmap|direct] [--engram-cache-rows N] [--engram-from DIR] [--host H] [--port P] [--api-key K] [--no-replay] [--wide-sums] [--cuda-graphs] [--exl3-kernels exact|fast] [--exl3-prompt gemv|gemm] [--exl3-prompt-min-rows N] [--max-lanes N]
         [--prefill-experts exl3|mxfp4] [--prefill-mxfp4-layers N] [--prefill-mxfp4-min-rows N]
         [--max-queue N] [--max-queued-tokens N] [--max-active-tokens N] [--prefill-chunk N]
         [--admission fifo|short-first] [--prefix-block N] [--prefix-cache-tokens N (0: off)]
       tf inspect PATH [--filter TEXT]
       tf generate --model DIR --prompt TEXT [--max-tokens N] [--chunk N] [--no-replay]
  serve: OpenAI-compatible server (no --model: the small synthetic dsv41 model, written on first run)
  inspect: list a checkpoint directory, model.safetensors.index.json, or one .safetensors file
  generate: greedy text from a prompt on the CPU reference model (tf generate --help for flags)";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("serve") => serve(&args[1..]),
        Some("inspect") => inspect(&args[1..]),
        Some("generate") => generate(&args[1..]),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn inspect(args: &[String]) -> ExitCode {
    let mut path: Option<PathBuf> = None;
    let mut filter: Option<String> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--filter" => filter = it.next().cloned(),
            p if path.is_none() && !p.starts_with('-') => path = Some(PathBuf::from(p)),
            other => {
                eprintln!("tf inspect: unexpected argument `{other}`\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let Some(path) = path else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    match tf_server::inspect::report(&path, filter.as_deref()) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tf inspect: {e}");
            ExitCode::FAILURE
        }
    }
}

fn generate(args: &[String]) -> ExitCode {
    let args = match generate::parse_args(args) {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{}", generate::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("tf generate: {e}\n{}", generate::USAGE);
            return ExitCode::from(2);
        }
    };
    let mut out = std::io::stdout().lock();
    match generate::run(&args, &mut out) {
        Ok(stats) => {
            eprintln!("{stats}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            let _ = out.flush();
            eprintln!("tf generate: {e}");
            ExitCode::FAILURE
        }
    }
}

fn num(v: Result<String, String>) -> Result<usize, String> {
    v.and_then(|v| v.parse().map_err(|_| format!("`{v}` is not a count")))
}

fn serve(args: &[String]) -> ExitCode {
    let mut cfg = tf_server::http::serve::ServeConfig::default();
    let (mut mxfp4, mut mxfp4_layers, mut mxfp4_min_rows) = (false, None, None);
    let (mut prompt_gemm, mut prompt_min_rows) = (false, None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().cloned().ok_or_else(|| format!("{a} needs a value"));
        let r: Result<(), String> = match a.as_str() {
            "--model" => value().map(|v| cfg.model_dir = Some(PathBuf::from(v))),
            "--device" => value().and_then(|v| v.parse()).map(|d| cfg.device = d),
            "--host" => value().map(|v| cfg.host = v),
            "--port" => value().and_then(|v| v.parse().map_err(|_| format!("bad port `{v}`"))).map(|p| cfg.port = p),
            "--api-key" => value().map(|v| cfg.api_key = Some(v)),
            "--max-lanes" => num(value()).map(|n| cfg.limits.max_lanes = n),
            "--max-queue" => num(value()).map(|n| cfg.limits.max_queue = n),
            "--max-queued-tokens" => num(value()).map(|n| cfg.limits.max_queued_tokens = n),
            "--max-active-tokens" => num(value()).map(|n| cfg.limits.max_active_tokens = n),
            "--prefill-chunk" => num(value()).map(|n| cfg.limits.prefill_chunk = n),
            "--prefix-block" => num(value()).map(|n| cfg.limits.prefix_block = n),
            "--prefix-cache-tokens" => num(value()).map(|n| cfg.limits.prefix_cache_tokens = n),
            "--admission" => value().and_then(|v| v.parse()).map(|p| cfg.limits.admission = p),
            "--engram-io" => value()
                .and_then(|v| match v.as_str() {
                    "mapped" => Ok(None),
                    "mmap" => Ok(Some(tf_engram::IoMode::Mmap)),
                    "direct" => Ok(Some(tf_engram::IoMode::Direct)),
                    _ => Err(format!("--engram-io: `{v}` is not mapped, mmap or direct")),
                })
                .map(|m| cfg.engram_io = m),
            "--engram-cache-rows" => num(value()).map(|n| cfg.engram_cache_rows = n),
            "--engram-from" => value().map(|v| cfg.engram_from = Some(PathBuf::from(v))),
            "--no-replay" => {
                cfg.replay = false;
                Ok(())
            }
            "--wide-sums" => {
                cfg.wide_sums = true;
                Ok(())
            }
            "--cuda-graphs" => {
                cfg.cuda_graphs = true;
                Ok(())
            }
            "--exl3-kernels" => value().and_then(|v| match v.as_str() {
                "exact" | "fast" => {
                    cfg.exl3_fast = v == "fast";
                    Ok(())
                }
                _ => Err(format!("--exl3-kernels: `{v}` is not exact or fast")),
            }),
            "--exl3-prompt" => value().and_then(|v| match v.as_str() {
                "gemv" | "gemm" => {
                    prompt_gemm = v == "gemm";
                    Ok(())
                }
                _ => Err(format!("--exl3-prompt: `{v}` is not gemv or gemm")),
            }),
            "--exl3-prompt-min-rows" => num(value()).map(|n| prompt_min_rows = Some(n)),
            "--prefill-experts" => value().and_then(|v| match v.as_str() {
                "exl3" | "mxfp4" => {
                    mxfp4 = v == "mxfp4";
                    Ok(())
                }
                _ => Err(format!("--prefill-experts: `{v}` is not exl3 or mxfp4")),
            }),
            "--prefill-mxfp4-layers" => num(value()).map(|n| mxfp4_layers = Some(n)),
            "--prefill-mxfp4-min-rows" => num(value()).map(|n| mxfp4_min_rows = Some(n)),
            other => Err(format!("unexpected argument `{other}`")),
        };
        if let Err(e) = r {
            eprintln!("tf serve: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    }
    // TensorFold's adopted threshold: chunks under 2048 rows (decode, verify windows, short prompts) keep EXL3.
    cfg.prefill_mxfp4 = match (mxfp4, mxfp4_layers, mxfp4_min_rows) {
        (true, layers, min_rows) => {
            Some(tf_dsv41::PrefillMxfp4 { layers: layers.unwrap_or(usize::MAX), min_rows: min_rows.unwrap_or(2048) })
        }
        (false, None, None) => None,
        (false, ..) => {
            eprintln!(
                "tf serve: --prefill-mxfp4-layers and --prefill-mxfp4-min-rows need --prefill-experts mxfp4\n{USAGE}"
            );
            return ExitCode::from(2);
        }
    };
    if cfg.engram_cache_rows > 0 && cfg.engram_io.is_none() {
        eprintln!("tf serve: --engram-cache-rows needs --engram-io mmap|direct (mapped tables are in memory)\n{USAGE}");
        return ExitCode::from(2);
    }
    // Run 15's numbers put the routed experts' crossover near 256 rows (docs/exl3.md); decode rows stay on the GEMV.
    cfg.exl3_prompt_gemm = match (prompt_gemm, prompt_min_rows) {
        (true, Some(rows)) if rows < 2 => {
            eprintln!(
                "tf serve: --exl3-prompt-min-rows must be at least 2: one-row decode steps stay on the GEMV\n{USAGE}"
            );
            return ExitCode::from(2);
        }
        (true, rows) => Some(rows.unwrap_or(256)),
        (false, None) => None,
        (false, Some(_)) => {
            eprintln!("tf serve: --exl3-prompt-min-rows needs --exl3-prompt gemm\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if cfg.exl3_prompt_gemm.is_some() && cfg.device == tf_server::http::serve::Device::Cpu {
        eprintln!("tf serve: --exl3-prompt gemm needs --device cuda (the CPU reference has no GEMM path)\n{USAGE}");
        return ExitCode::from(2);
    }
    if cfg.cuda_graphs && cfg.device == tf_server::http::serve::Device::Cpu {
        eprintln!("tf serve: --cuda-graphs needs --device cuda\n{USAGE}");
        return ExitCode::from(2);
    }
    match tf_server::http::serve::run(cfg) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tf serve: {e}");
            ExitCode::FAILURE
        }
    }
}
