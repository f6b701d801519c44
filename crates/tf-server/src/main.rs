//! The `tf` command: `tf inspect PATH [--filter TEXT]` lists a safetensors checkpoint.

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: tf inspect PATH [--filter TEXT]\n  PATH: checkpoint directory, model.safetensors.index.json, or one .safetensors file";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("inspect") => inspect(&args[1..]),
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
