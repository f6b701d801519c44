//! The `tf` command: `serve` (the OpenAI-compatible server), `generate` (greedy text) and `inspect` (a checkpoint's tensors).

use clap::Parser;
use std::io::Write;
use std::process::ExitCode;
use tf_server::cli::{Cli, Command, GenerateArgs, InspectArgs, ServeArgs};
use tf_server::generate;

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Serve(a) => serve(*a),
        Command::Generate(a) => generate(a),
        Command::Inspect(a) => inspect(a),
    }
}

fn inspect(a: InspectArgs) -> ExitCode {
    match tf_server::inspect::report(&a.path, a.filter.as_deref()) {
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

fn generate(a: GenerateArgs) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match generate::run(&a.into_args(), &mut out) {
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

fn serve(a: ServeArgs) -> ExitCode {
    let cfg = match a.into_config() {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("tf serve: {e} (tf serve --help lists every flag)");
            return ExitCode::from(2);
        }
    };
    match tf_server::http::serve::run(cfg) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tf serve: {e}");
            ExitCode::FAILURE
        }
    }
}
