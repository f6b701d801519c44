//! Developer tasks for TensorFold-rs, run as `cargo xtask <command>`.

mod lean_check;
mod make_tiny;

use std::process::ExitCode;

const USAGE: &str = "\
usage: cargo xtask <command> [options]

commands:
  lean-check [--root DIR] [--update-baseline]
      check the lean rules (file length, one-line comments) against lean-baseline.txt
  make-tiny --out DIR [--config tiny|small] [--seed N]
      write a deterministic synthetic dsv41 checkpoint in the official format";

/// Exit status for bad command lines, distinct from a failed check.
pub(crate) const USAGE_ERROR: u8 = 2;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(command) = args.next() else {
        return usage_error("missing command");
    };
    let rest: Vec<String> = args.collect();
    match command.as_str() {
        "lean-check" => lean_check::run(&rest),
        "make-tiny" => make_tiny::run(&rest),
        "-h" | "--help" | "help" => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        other => usage_error(&format!("unknown command `{other}`")),
    }
}

fn usage_error(message: &str) -> ExitCode {
    eprintln!("error: {message}\n\n{USAGE}");
    ExitCode::from(USAGE_ERROR)
}
