//! The `tf` command: `serve` (the OpenAI-compatible server), `generate` (greedy text), `inspect` (a checkpoint's tensors), `plan` (TP memory), `tp-profile` (collective timings).

use clap::Parser;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use tf_server::cli::{Cli, Command, GenerateArgs, InspectArgs, ServeArgs};
use tf_server::generate;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logs();
    match cli.command {
        Command::Serve(a) => serve(*a),
        Command::Generate(a) => generate(a),
        Command::Inspect(a) => inspect(a),
        Command::Plan(a) => match tf_server::plan::run(&a) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("tf plan: {e}");
                ExitCode::FAILURE
            }
        },
        Command::TpProfile { dir } => match tf_collective::profile::read_dir(&dir) {
            Ok(ranks) if !ranks.is_empty() => {
                print!("{}", tf_collective::profile::summarize(&ranks));
                ExitCode::SUCCESS
            }
            Ok(_) => {
                eprintln!("tf tp-profile: no rank-0.jsonl in {}", dir.display());
                ExitCode::FAILURE
            }
            Err(e) => {
                eprintln!("tf tp-profile {}: {e}", dir.display());
                ExitCode::FAILURE
            }
        },
    }
}

/// Logs to stderr, filtered by `RUST_LOG` (default `info`), e.g. `RUST_LOG=tf_server=debug`.
fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let ansi = std::io::stderr().is_terminal();
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_target(false)
        .init();
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
