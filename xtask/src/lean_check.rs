//! `cargo xtask lean-check`: the lean rules with a ratcheting baseline.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tf_lint::{BASELINE_FILE, Error, Problem, Tally, check, check_tree, update_baseline};

const USAGE: &str = "\
usage: cargo xtask lean-check [--root DIR] [--update-baseline]

  --root DIR          tree to check, holding its lean-baseline.txt (default: the workspace root)
  --update-baseline   write the current counts to the baseline; refuses to raise any count";

struct Options {
    root: PathBuf,
    update_baseline: bool,
}

impl Options {
    /// Returns `Ok(None)` when help was asked for.
    fn parse(args: &[String]) -> Result<Option<Self>, String> {
        let mut root = None;
        let mut update_baseline = false;
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let value = match arg.as_str() {
                "-h" | "--help" => return Ok(None),
                "--update-baseline" => {
                    update_baseline = true;
                    continue;
                }
                "--root" => args.next().ok_or("--root needs a directory")?.clone(),
                other => match other.strip_prefix("--root=") {
                    Some(value) => value.to_owned(),
                    None => return Err(format!("unexpected argument `{other}`")),
                },
            };
            if root.replace(PathBuf::from(value)).is_some() {
                return Err("--root given more than once".to_owned());
            }
        }
        let root = root.unwrap_or_else(crate::workspace_root);
        if !root.is_dir() {
            return Err(format!("--root {}: not a directory", root.display()));
        }
        Ok(Some(Options { root, update_baseline }))
    }
}

pub(crate) fn run(args: &[String]) -> ExitCode {
    let options = match Options::parse(args) {
        Ok(Some(options)) => options,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("error: {message}\n\n{USAGE}");
            return ExitCode::from(crate::USAGE_ERROR);
        }
    };
    let baseline = options.root.join(BASELINE_FILE);
    let outcome =
        if options.update_baseline { update(&options.root, &baseline) } else { verify(&options.root, &baseline) };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("lean-check: {message}");
            ExitCode::FAILURE
        }
    }
}

fn verify(root: &Path, baseline: &Path) -> Result<(), String> {
    let report = check(root, baseline).map_err(|e| e.to_string())?;
    if !report.passed() {
        print_problems(&report.problems);
        print_tallies(&report.tallies);
        let raised: Vec<&str> = report.tallies.iter().filter(|t| t.is_above()).map(|t| t.rule.name()).collect();
        return Err(format!("FAILED: above baseline: {}", raised.join(", ")));
    }
    print_tallies(&report.tallies);
    println!("lean-check: passed");
    if report.can_lower_baseline() {
        println!("the baseline can be lowered: run `cargo xtask lean-check --update-baseline`");
    }
    Ok(())
}

fn update(root: &Path, baseline: &Path) -> Result<(), String> {
    let problems = check_tree(root).map_err(|e| e.to_string())?;
    match update_baseline(baseline, &problems) {
        Ok(tallies) => {
            for tally in &tallies {
                println!("{}: {} -> {}", tally.rule, tally.baseline, tally.current);
            }
            println!("lean-check: wrote {}", baseline.display());
            Ok(())
        }
        Err(Error::WouldRaise(raised)) => {
            let raised_problems: Vec<Problem> =
                problems.into_iter().filter(|p| raised.iter().any(|t| t.rule == p.rule)).collect();
            print_problems(&raised_problems);
            print_tallies(&raised);
            Err(format!("{} left unchanged: fix these problems instead of raising the baseline", baseline.display()))
        }
        Err(e) => Err(e.to_string()),
    }
}

fn print_problems(problems: &[Problem]) {
    for problem in problems {
        println!("{problem}");
    }
}

fn print_tallies(tallies: &[Tally]) {
    for tally in tallies {
        println!("{tally}");
    }
}
