//! The `tf` command: `tf inspect` lists a safetensors checkpoint, `tf generate` runs a prompt greedily.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use tf_server::generate;

const USAGE: &str = "usage: tf inspect PATH [--filter TEXT]
       tf generate --model DIR --prompt TEXT [--max-tokens N] [--chunk N] [--no-replay]
  inspect: list a checkpoint directory, model.safetensors.index.json, or one .safetensors file
  generate: greedy text from a prompt on the CPU reference model (tf generate --help for flags)";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
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
