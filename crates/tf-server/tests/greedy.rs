//! The greedy loop and `tf generate`'s flags, on a scripted model with no checkpoint.

use clap::Parser;
use tf_server::cli::{Cli, Command};
use tf_server::generate::{Args, argmax, greedy};

/// A family whose next id is fixed by a script; its lane records the prefill chunks and decoded ids it was fed.
struct Script {
    next: Vec<u32>,
}

#[derive(Default)]
struct Fed {
    chunks: Vec<(usize, bool)>,
    decoded: Vec<u32>,
}

fn one_hot(id: u32) -> Vec<f32> {
    let mut v = vec![0.0; 8];
    v[id as usize] = 1.0;
    v
}

impl tf_family::Family for Script {
    type Lane = Fed;
    type Error = std::io::Error;
    type Prefetch = ();

    fn new_lane(&self) -> Result<Fed, Self::Error> {
        Ok(Fed::default())
    }

    fn fork(&self, _lane: &Fed) -> Result<Fed, Self::Error> {
        Err(std::io::Error::other("not used by tf generate"))
    }

    fn vocab_size(&self) -> usize {
        8
    }

    fn eos_token(&self) -> u32 {
        1
    }

    fn max_context(&self) -> usize {
        1 << 20
    }

    fn prefill(&self, lane: &mut Fed, tokens: &[u32], last: bool) -> Result<Option<Vec<f32>>, Self::Error> {
        lane.chunks.push((tokens.len(), last));
        Ok(last.then(|| one_hot(self.next[0])))
    }

    fn decode(&self, lane: &mut Fed, tokens: &[u32]) -> Result<Vec<Vec<f32>>, Self::Error> {
        lane.decoded.extend(tokens);
        Ok(vec![one_hot(self.next[lane.decoded.len()])])
    }
}

fn script(next: &[u32]) -> (Script, Fed) {
    (Script { next: next.to_vec() }, Fed::default())
}

fn run(s: &mut (Script, Fed), prompt: usize, chunk: usize, max: usize) -> (Vec<u32>, tf_server::generate::Stats) {
    let mut out = Vec::new();
    let prompt: Vec<u32> = (0..prompt as u32).collect();
    let stats = greedy(&s.0, &mut s.1, &prompt, chunk, max, 1, |id| {
        out.push(id);
        Ok(())
    })
    .unwrap();
    (out, stats)
}

#[test]
fn argmax_takes_the_lowest_id_on_ties_and_skips_nan() {
    assert_eq!(argmax(&[0.0, 2.0, 2.0, 1.0]), 1);
    assert_eq!(argmax(&[3.0, 3.0]), 0);
    assert_eq!(argmax(&[f32::NAN, -1.0, f32::NAN, 5.0]), 3);
    assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY]), 0);
}

#[test]
fn stops_at_eos_without_emitting_it() {
    let mut s = script(&[4, 5, 1, 6]);
    let (out, stats) = run(&mut s, 3, 3, 32);
    assert_eq!(out, [4, 5]);
    assert_eq!(s.1.decoded, [4, 5]);
    assert_eq!((stats.prompt_tokens, stats.generated, stats.decode_steps), (3, 3, 2));
}

#[test]
fn stops_at_max_tokens_without_a_wasted_forward() {
    let mut s = script(&[4, 5, 6, 7, 2]);
    let (out, stats) = run(&mut s, 2, 2, 3);
    assert_eq!(out, [4, 5, 6]);
    assert_eq!(s.1.decoded, [4, 5]);
    assert_eq!((stats.generated, stats.decode_steps), (3, 2));
    let mut s = script(&[4]);
    assert_eq!(run(&mut s, 2, 2, 0).0, Vec::<u32>::new());
}

#[test]
fn prefill_is_fed_in_chunks_and_only_the_last_asks_for_logits() {
    let mut s = script(&[1]);
    run(&mut s, 17, 7, 4);
    assert_eq!(s.1.chunks, [(7, false), (7, false), (3, true)]);
}

#[test]
fn stats_line_names_counts_and_rates() {
    let stats = tf_server::generate::Stats {
        prompt_tokens: 40,
        prompt_secs: 0.14,
        generated: 32,
        decode_steps: 31,
        decode_secs: 0.25,
    };
    assert_eq!(stats.to_string(), "prompt 40 tokens in 0.14 s (286 tok/s), generated 32 tokens in 0.25 s (124 tok/s)");
}

fn args(s: &[&str]) -> std::result::Result<Option<Args>, String> {
    match Cli::try_parse_from(["tf", "generate"].iter().chain(s)) {
        Ok(Cli { command: Command::Generate(g) }) => Ok(Some(g.into_args())),
        Ok(other) => Err(format!("not generate: {other:?}")),
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

#[test]
fn flags_parse_with_defaults_and_inline_values() {
    let a = args(&["--model", "/m", "--prompt", "Hi there"]).unwrap().unwrap();
    assert_eq!((a.max_tokens, a.chunk, a.replay), (32, None, true));
    assert_eq!(a.model.as_deref(), Some(std::path::Path::new("/m")));
    assert_eq!(args(&["--prompt", "p"]).unwrap().unwrap().model, None, "no --model: the default model");
    let a = args(&["--prompt=a=b", "--model=/m", "--max-tokens", "5", "--chunk=7", "--no-replay"]).unwrap().unwrap();
    assert_eq!((a.prompt.as_str(), a.max_tokens, a.chunk, a.replay), ("a=b", 5, Some(7), false));
    let a = args(&["--model", "/m", "--prompt", "p", "--engram-from", "/orig"]).unwrap().unwrap();
    assert_eq!(a.engram_from.as_deref(), Some(std::path::Path::new("/orig")));
    assert_eq!(args(&["--help"]).unwrap(), None);
}

#[test]
fn bad_flags_are_explained() {
    let err = |s: &[&str]| args(s).unwrap_err();
    assert!(err(&["--model", "m"]).contains("--prompt"));
    assert!(err(&["--model", "m", "--prompt", "x", "--chunk", "0"]).contains("--chunk"));
    assert!(err(&["--model", "m", "--prompt", "x", "--max-tokens", "-1"]).contains("--max-tokens"));
    assert!(err(&["--model", "m", "--prompt", "x", "--bogus"]).contains("'--bogus'"));
    assert!(err(&["--model"]).contains("a value is required for '--model <DIR>'"));
}
