//! `cargo xtask`: every project task in one place.
//!
//! - `cargo xtask ci`: format check, clippy with `-D warnings`, the guards, the tests.
//! - `cargo xtask guards [--root DIR]`: the tidy rules that keep Lance write calls in the
//!   adapter and failpoint names in their registry (see `guards.rs`).
//!
//! xtask depends on no Lance, so it builds in seconds on a fresh machine.

mod guards;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("guards") => run_guards(&args[1..]),
        Some("help") | Some("--help") | Some("-h") | None => {
            print_help();
            Ok(())
        }
        Some(other) => Err(format!("unknown task '{other}'; try `cargo xtask help`")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

fn print_help() {
    println!(
        "cargo xtask <task>\n\n\
         tasks:\n  \
         ci                 format check, clippy -D warnings, guards, the whole test suite\n  \
         guards [--root D]  Lance write calls only in the adapter, no Lance cleanup, failpoint names are constants"
    );
}

/// The workspace root: xtask lives one level below it.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn run_guards(args: &[String]) -> Result<(), String> {
    let root = match args {
        [] => workspace_root(),
        [flag, dir] if flag == "--root" => PathBuf::from(dir),
        _ => return Err("usage: cargo xtask guards [--root DIR]".into()),
    };
    let report = guards::check_tree(&root).map_err(|error| format!("guards: {error}"))?;
    if report.violations.is_empty() {
        println!(
            "guards: ok ({} files, {} adapter entry points registered)",
            report.files_scanned, report.registered_entry_points
        );
        Ok(())
    } else {
        for violation in &report.violations {
            eprintln!("{violation}");
        }
        Err(format!("guards: {} violation(s)", report.violations.len()))
    }
}

fn ci() -> Result<(), String> {
    let root = workspace_root();
    step(&root, "format", &["fmt", "--all", "--", "--check"])?;
    step(
        &root,
        "clippy",
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
    )?;
    println!("== guards");
    run_guards(&[])?;
    step(&root, "tests", &["test", "--workspace"])?;
    println!("xtask ci: all green");
    Ok(())
}

fn step(root: &Path, name: &str, args: &[&str]) -> Result<(), String> {
    println!("== {name}: cargo {}", args.join(" "));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(args)
        .current_dir(root)
        .status()
        .map_err(|error| format!("{name}: could not run cargo: {error}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{name} failed ({status})"))
    }
}
