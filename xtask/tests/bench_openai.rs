//! `cargo xtask bench openai` against our own server on the tiny model: the receipt's shape and sane numbers.

mod common;

use common::serve;
use serde_json::Value;
use std::collections::HashSet;
use std::process::Command;

#[test]
fn bench_openai_measures_every_cell_against_our_server() {
    let d = tempfile::tempdir().unwrap();
    let base = serve(&d.path().join("tiny-model"));
    let (out, plot) = (d.path().join("receipt.json"), d.path().join("receipt.png"));
    let o = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["bench", "openai", "--url", &base, "--prompt-tokens", "64", "--concurrency", "1,2"])
        .args(["--kinds", "prose,structured", "--max-tokens", "4", "--requests-per-stream", "2"])
        .args(["--out", out.to_str().unwrap(), "--plot", plot.to_str().unwrap()])
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    eprintln!("{log}");
    assert!(o.status.success(), "{log}");
    assert!(log.contains("| kind | prompt tok | c |") && log.contains("[cell 4/4]"), "table and progress: {log}");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(r["model"], "tiny-model");
    assert_eq!(r["url"], base.as_str());
    assert!(r["prompt_sizing"].as_str().unwrap().contains("/tokenize"), "{}", r["prompt_sizing"]);
    assert!(r["command"].as_str().unwrap().starts_with("cargo xtask bench openai --url"));
    let cells = r["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 4, "2 kinds × 1 length × 2 concurrencies");
    for cell in cells {
        let c = cell["concurrency"].as_u64().unwrap() as usize;
        let raw = cell["raw"].as_array().unwrap();
        assert_eq!((raw.len(), cell["errors"].as_u64()), (2 * c, Some(0)), "{cell}");
        let streams: HashSet<u64> = raw.iter().map(|s| s["stream"].as_u64().unwrap()).collect();
        assert_eq!(streams.len(), c, "{c} streams ran");
        let prompts: HashSet<&str> = raw.iter().map(|s| s["prompt_sha256_16"].as_str().unwrap()).collect();
        assert_eq!(prompts.len(), raw.len(), "every request has its own prompt");
        for s in raw {
            let counted = s["prompt_tokens_counted"].as_u64().unwrap();
            assert!((60..=68).contains(&counted), "sized near 64 tokens: {s}");
            assert!(s["prompt_tokens"].as_u64().unwrap() >= counted, "usage counts the whole prompt: {s}");
            assert_eq!(s["completion_tokens"].as_u64(), Some(4), "max_tokens 4: {s}");
            assert_eq!(s["content_chunks"], s["completion_tokens"], "one chunk per token: {s}");
            let (ttft, last, e2e) =
                (s["ttft_s"].as_f64().unwrap(), s["last_token_s"].as_f64().unwrap(), s["e2e_s"].as_f64().unwrap());
            assert!(0.0 < ttft && ttft < last && last <= e2e, "{s}");
            assert!(s["prefill_tok_s"].as_f64().unwrap() > 0.0 && s["decode_tok_s"].as_f64().unwrap() > 0.0, "{s}");
        }
        for key in ["ttft_s", "prefill_tok_s", "decode_tok_s_per_stream", "e2e_s"] {
            let st = &cell[key];
            assert_eq!(st["n"].as_u64(), Some(2 * c as u64), "{key}: {st}");
            let (p50, p90, p99) =
                (st["p50"].as_f64().unwrap(), st["p90"].as_f64().unwrap(), st["p99"].as_f64().unwrap());
            assert!(0.0 < p50 && p50 <= p90 && p90 <= p99, "{key}: {st}");
        }
        assert!(cell["aggregate_decode_tok_s"].as_f64().unwrap() > 0.0, "{cell}");
    }
    let png = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&plot).unwrap()));
    let mut reader = png.read_info().unwrap();
    let mut px = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut px).unwrap();
    assert_eq!((info.width, info.color_type), (1500, png::ColorType::Rgb));
    // The first two series' colours (one per kind at one length) are drawn: the lines and points of the charts.
    for rgb in [[31u8, 119, 180], [255, 127, 14]] {
        let n = px.chunks_exact(3).filter(|p| *p == rgb).count();
        assert!(n > 100, "{rgb:?} drawn on {n} pixels");
    }
}

#[test]
fn a_bad_command_line_exits_2_naming_the_flag() {
    let o =
        Command::new(env!("CARGO_BIN_EXE_xtask")).args(["bench", "openai", "--concurrency", "many"]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--concurrency"), "{err}");
}
