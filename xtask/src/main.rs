//! `cargo xtask`: every project task in one place.
//!
//! - `cargo xtask ci`: format check, clippy with `-D warnings`, the guards, the tests,
//!   the rustdoc of every crate (warning-free) and its examples.
//! - `cargo xtask guards [--root DIR]`: the tidy rules that keep Lance write calls in the
//!   adapter and failpoint names in their registry (see `guards.rs`).
//! - `cargo xtask interop`: the format's interop check (`tools/interop/`): a Python
//!   reader written from `docs/format.md` reads, with pylance from PyPI in a venv, a
//!   graph the CLI wrote.
//! - `cargo xtask client`: the Python client (`clients/python`), with requests, pyarrow
//!   and pandas from PyPI in a venv, against a live `omnigraph serve` its test starts.
//! - `cargo xtask cypher-diff [--start S] [--seeds N] [--queries Q]`: the query
//!   language's oracle: random graphs and queries run on OmniGraph and on Kuzu 0.11.3
//!   (from PyPI, in a venv), results compared (`tools/cypher-diff/`).
//!
//! xtask depends on no Lance, so it builds in seconds on a fresh machine.

mod guards;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("guards") => run_guards(&args[1..]),
        Some("s3") => s3(),
        Some("bench") => bench(&args[1..]),
        Some("stress") => stress(&args[1..]),
        Some("matrix") => matrix(&args[1..]),
        Some("dst") => dst(&args[1..]),
        Some("interop") => interop(),
        Some("client") => client(),
        Some("cypher-diff") => cypher_diff(&args[1..]),
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
         guards [--root D]  Lance write calls only in the adapter, no Lance cleanup, failpoint names are constants\n  \
         s3                 start a local S3-compatible server (SeaweedFS) and run the S3 suite against it\n  \
         bench [--rows N] [--json]  ingest benchmark: JSONL and Parquet loads vs arrow-json/parquet + plain Lance, warm inserts\n  \
         bench --graph [--nodes N] [--edges E]  1M nodes and 5M edges from Parquet, time and peak memory, and Kuzu's COPY FROM\n  \
         bench --retrieval [--vectors N] [--queries Q]  N × 128 clustered vectors: OmniGraph's index build and omni.vector (recall@10, p50/p99, build time and bytes) beside pylance 14.0.2 building the same index on the same data; then hybrid retrieval on 200,000 documents (a vector leg, a BM25 leg and their fusion under a one-hop graph filter; --docs N), checked against brute force\n  \
         bench --query [--people N] [--runs R]  a social graph (100,000 people, ~2.4M power-law follows, cities, states, countries, interests) loaded into OmniGraph and Kuzu 0.11.3, and a suite of Cypher queries on both: p50/p99, load time, peak memory, ratios\n  \
         bench --traverse [--nodes N] [--edges E]  1- and 2-hop traversals by scan, BTree and adjacency artifact; the artifact's build against optimize\n  \
         bench --merge [--rows N] [--changed M] [--pass-rows P]  a row merge of M rows changed on a branch into a table of N rows, P rows per pass: time and peak memory\n  \
         cypher-diff [--start S] [--seeds N] [--queries Q]  random graphs and Cypher queries on OmniGraph and on Kuzu 0.11.3, results compared; a differing seed replays with --start SEED --seeds 1\n  \
         interop            a second reader (Python, pylance, written from docs/format.md) reads a graph the CLI wrote\n  \
         client             the Python client (clients/python) against a live omnigraph serve\n  \
         bench --serve [--people N] [--edges E]  a served graph over loopback: reads at 1, 8, 32 clients, inserts from 8 (and with every store request held 17 ms), reads beside optimize on 1M rows\n  \
         stress [--procs P] [--ops N] [--seed S] [--s3] [--compare] [--json] [--store-delay-ms D]  P processes write one root at once, then a checker\n  \
         matrix [--full]    the detached-commit matrix: every writer x window x fault, then two recovery actors (the fast tier, also in ci) or all five (--full); OMNIGRAPH_MATRIX_CELL=W/Wi/F/A runs one cell\n  \
         dst [--seeds N] [--start S] | --replay SEED | --shrink SEED  deterministic simulation: N universes (default 200) of actors, maintenance and faults, from seed S; a failing seed prints its replay and shrink commands; --replay prints one universe's trace; --shrink prints the fewest steps of a failing universe that still fail"
    );
}

/// The workspace the command was run in: the nearest folder at or above the current
/// one whose `Cargo.toml` declares `[workspace]`. Not the folder this binary was built
/// from: a shared build cache can hand one checkout's xtask binary to another.
fn workspace_root() -> PathBuf {
    let start = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let mut dir: Option<&Path> = Some(start.as_path());
    while let Some(candidate) = dir {
        let manifest = candidate.join("Cargo.toml");
        if std::fs::read_to_string(&manifest).is_ok_and(|text| text.contains("[workspace]")) {
            return candidate.to_path_buf();
        }
        dir = candidate.parent();
    }
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

/// Runs the ingest benchmark binary (dev profile, so it reuses the test build).
fn bench(args: &[String]) -> Result<(), String> {
    let root = workspace_root();
    let binary = test_build_binary(&root, "bench build", "omnigraph-bench")?;
    println!("== bench: {}", binary.display());
    let graph = args.iter().any(|arg| arg == "--graph");
    let queries = args.iter().any(|arg| arg == "--query");
    let retrieval = args.iter().any(|arg| arg == "--retrieval");
    let kuzu_dir = target_dir(&root).join("bench-graph");
    let retrieval_dir = target_dir(&root).join("bench-retrieval");
    let mut command = Command::new(&binary);
    command.args(args).current_dir(&root);
    if graph || queries {
        let _ = std::fs::remove_dir_all(&kuzu_dir);
        command.arg("--kuzu-dir").arg(&kuzu_dir);
    }
    if retrieval {
        let _ = std::fs::remove_dir_all(&retrieval_dir);
        command.arg("--retrieval-dir").arg(&retrieval_dir);
    }
    let status = command
        .status()
        .map_err(|error| format!("bench: could not run {}: {error}", binary.display()))?;
    if !status.success() {
        return Err(format!("bench failed ({status})"));
    }
    if graph {
        kuzu_comparison(&root, &kuzu_dir, "kuzu_load.py");
        let _ = std::fs::remove_dir_all(&kuzu_dir);
    }
    if queries {
        kuzu_comparison(&root, &kuzu_dir, "kuzu_query.py");
        let _ = std::fs::remove_dir_all(&kuzu_dir);
    }
    if retrieval {
        pylance_comparison(&root, &retrieval_dir);
        let _ = std::fs::remove_dir_all(&retrieval_dir);
    }
    Ok(())
}

/// After `omnigraph-bench --retrieval --retrieval-dir DIR`: pylance 14.0.2 (the interop
/// venv) builds the same index on the same vectors and runs the same queries
/// (`tools/bench/retrieval_pylance.py`). Reported, never required, as Kuzu's is.
fn pylance_comparison(root: &Path, dir: &Path) {
    let python = match python_venv(root, "interop", INTEROP_REQUIREMENTS) {
        Ok(python) => python,
        Err(error) => {
            println!("== pylance: skipped ({error})");
            return;
        }
    };
    println!("== pylance: tools/bench/retrieval_pylance.py");
    match Command::new(&python)
        .arg(root.join("tools/bench/retrieval_pylance.py"))
        .arg(dir)
        .status()
    {
        Ok(status) if status.success() => {}
        Ok(status) => println!("== pylance: the comparison failed ({status})"),
        Err(error) => println!("== pylance: could not run it: {error}"),
    }
}

/// The CI's test build (`cargo test --workspace --lib --bins --tests --no-run`: the one
/// feature set every command shares, so nothing is compiled twice), and the path of its
/// binary `name`.
fn test_build_binary(root: &Path, step_name: &str, name: &str) -> Result<PathBuf, String> {
    step(
        root,
        step_name,
        &[
            "test",
            "--workspace",
            "--lib",
            "--bins",
            "--tests",
            "--no-run",
        ],
    )?;
    Ok(target_dir(root).join("debug").join(name))
}

/// Where cargo builds: `CARGO_TARGET_DIR`, else the workspace's `target`.
fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
}

/// The interop reader's pinned Python packages (pylance 14.0.2 and what it pulls in).
const INTEROP_REQUIREMENTS: &str = "tools/interop/requirements.txt";

/// The interop check: builds the CLI (the test build, so nothing else rebuilds), makes a
/// venv with the pinned packages under the build folder once, and runs
/// `tools/interop/check.py`.
fn interop() -> Result<(), String> {
    let root = workspace_root();
    python_found("interop")?;
    let python = python_venv(&root, "interop", INTEROP_REQUIREMENTS)?;
    let binary = test_build_binary(&root, "interop build", "omnigraph")?;
    println!("== interop: tools/interop/check.py");
    let checked = Command::new(&python)
        .arg("check.py")
        .arg(&binary)
        .arg(root.join("examples/social.pg"))
        .current_dir(root.join("tools/interop"))
        .status()
        .map_err(|error| format!("interop: could not run the check: {error}"))?;
    if checked.success() {
        Ok(())
    } else {
        Err(format!("interop: the second reader disagrees ({checked})"))
    }
}

/// CPython 3.9 or newer with `venv` and `ensurepip` as `python3` on PATH, or an error
/// that says how to get it.
fn python_found(task: &str) -> Result<(), String> {
    let found = Command::new("python3")
        .args([
            "-c",
            "import venv, ensurepip, sys; sys.exit(sys.version_info < (3, 9))",
        ])
        .status()
        .is_ok_and(|status| status.success());
    if found {
        return Ok(());
    }
    Err(format!(
        "{task} needs CPython 3.9 or newer with the venv and ensurepip modules \
         as `python3` on PATH (on Debian: apt install python3 python3-venv)"
    ))
}

/// The Python client's test venv, pinned.
const CLIENT_REQUIREMENTS: &str = "clients/python/requirements-test.txt";

/// The Python client (`clients/python`) against a live `omnigraph serve` its test
/// starts: every kind of call, and the server's errors as the client raises them.
fn client() -> Result<(), String> {
    let root = workspace_root();
    python_found("client")?;
    let python = python_venv(&root, "client", CLIENT_REQUIREMENTS)?;
    let binary = test_build_binary(&root, "client build", "omnigraph")?;
    println!("== client: clients/python/tests");
    let tested = Command::new(&python)
        .args(["-m", "unittest", "discover", "-v", "-s", "tests"])
        .env("OMNIGRAPH_BIN", &binary)
        .env("OMNIGRAPH_SCHEMA", root.join("examples/social.pg"))
        .current_dir(root.join("clients/python"))
        .status()
        .map_err(|error| format!("client: could not run the tests: {error}"))?;
    if tested.success() {
        Ok(())
    } else {
        Err(format!(
            "client: the Python client's tests failed ({tested})"
        ))
    }
}

/// The query language's oracle: `omnigraph-cypher-diff` (the test build) writes each
/// seed's graph, queries and OmniGraph's rows; `tools/cypher-diff/kuzu_diff.py` runs the
/// same queries on Kuzu (the bench's venv) and compares.
fn cypher_diff(args: &[String]) -> Result<(), String> {
    let root = workspace_root();
    let python = python_venv(&root, "bench", BENCH_REQUIREMENTS)?;
    let binary = test_build_binary(&root, "cypher-diff build", "omnigraph-cypher-diff")?;
    let cases = target_dir(&root).join("cypher-diff.jsonl");
    println!("== cypher-diff: {}", binary.display());
    let generated = Command::new(&binary)
        .args(args)
        .arg("--out")
        .arg(&cases)
        .status()
        .map_err(|error| format!("cypher-diff: could not run {}: {error}", binary.display()))?;
    if !generated.success() {
        return Err(format!(
            "cypher-diff: the OmniGraph side failed ({generated})"
        ));
    }
    println!("== cypher-diff: tools/cypher-diff/kuzu_diff.py");
    let compared = Command::new(&python)
        .arg(root.join("tools/cypher-diff/kuzu_diff.py"))
        .arg(&cases)
        .status()
        .map_err(|error| format!("cypher-diff: could not run the Kuzu side: {error}"))?;
    if compared.success() {
        Ok(())
    } else {
        Err(format!(
            "cypher-diff: OmniGraph and Kuzu disagree ({compared}); each difference names its seed"
        ))
    }
}

/// A venv named `name` under the build folder with the pinned packages of
/// `requirements` (a workspace-relative path), made once and made again when the file
/// changes; returns its python.
fn python_venv(root: &Path, name: &str, requirements: &str) -> Result<PathBuf, String> {
    let venv = target_dir(root).join(format!("{name}-venv"));
    let python = venv.join("bin/python");
    let wanted = std::fs::read_to_string(root.join(requirements))
        .map_err(|error| format!("{name}: read {requirements}: {error}"))?;
    // The venv records the requirements it was built from; a change rebuilds it.
    let stamp = venv.join("omnigraph-requirements.txt");
    let ready =
        python.exists() && std::fs::read_to_string(&stamp).is_ok_and(|built| built == wanted);
    if ready {
        return Ok(python);
    }
    println!(
        "== {name}: a venv with {requirements} in {}",
        venv.display()
    );
    let made = Command::new("python3")
        .args(["-m", "venv", "--clear"])
        .arg(&venv)
        .status()
        .map_err(|error| format!("{name}: python3 -m venv: {error}"))?;
    if !made.success() {
        return Err(format!("{name}: python3 -m venv failed ({made})"));
    }
    let installed = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-r",
        ])
        .arg(root.join(requirements))
        .status()
        .map_err(|error| format!("{name}: pip: {error}"))?;
    if !installed.success() {
        return Err(format!(
            "{name}: pip install -r {requirements} failed ({installed}); it needs PyPI"
        ));
    }
    std::fs::write(&stamp, &wanted)
        .map_err(|error| format!("{name}: write {}: {error}", stamp.display()))?;
    Ok(python)
}

/// The Kuzu comparison's pinned package.
const BENCH_REQUIREMENTS: &str = "tools/bench/requirements.txt";

/// After `omnigraph-bench --graph` or `--query` with `--kuzu-dir DIR`: Kuzu on the same
/// files (`script`: its COPY FROM, or the query suite), in a venv. Reported, never required: a machine without Python or PyPI says so and
/// the bench still succeeds.
fn kuzu_comparison(root: &Path, dir: &Path, script: &str) {
    let python = match python_venv(root, "bench", BENCH_REQUIREMENTS) {
        Ok(python) => python,
        Err(error) => {
            println!("== kuzu: skipped ({error})");
            return;
        }
    };
    println!("== kuzu: tools/bench/{script}");
    match Command::new(&python)
        .arg(root.join("tools/bench").join(script))
        .arg(dir)
        .status()
    {
        Ok(status) if status.success() => {}
        Ok(status) => println!("== kuzu: the comparison failed ({status})"),
        Err(error) => println!("== kuzu: could not run it: {error}"),
    }
}

/// Runs the S3 suite against a local SeaweedFS started by `tools/s3-test-server`.
fn s3() -> Result<(), String> {
    let root = workspace_root();
    with_s3_server(&root, |environment| {
        // The S3 tests are the ignored ones under `s3::`.
        let environment: Vec<(&str, &str)> = environment
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect();
        suite_tests("s3::", &environment, &["--ignored"])
    })
}

/// Starts the local S3-compatible server (`tools/s3-test-server`), runs `work` with the
/// variables that reach it, and stops the server whatever `work` did. A server that
/// does not start is an error, never a skip.
fn with_s3_server(
    root: &Path,
    work: impl FnOnce(&[(String, String)]) -> Result<(), String>,
) -> Result<(), String> {
    let server = root.join("tools/s3-test-server");
    let run = |action: &str| {
        Command::new("bash")
            .arg(&server)
            .arg(action)
            .current_dir(root)
            .output()
            .map_err(|error| format!("s3: could not run {}: {error}", server.display()))
    };
    let started = run("start")?;
    print!("{}", String::from_utf8_lossy(&started.stdout));
    if !started.status.success() {
        eprint!("{}", String::from_utf8_lossy(&started.stderr));
        let _ = run("stop");
        return Err(
            "s3: the test server did not start (it needs python3 with venv and PyPI)".into(),
        );
    }
    let environment: Vec<(String, String)> = match run("env") {
        Ok(output) => String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| line.split_once('='))
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect(),
        Err(error) => {
            let _ = run("stop");
            return Err(error);
        }
    };
    let done = work(&environment);
    let _ = run("stop");
    done
}

/// Many processes on one root (`tests/stress/main.rs`): on a folder under the temp
/// directory, or with `--s3` in the local S3 server's bucket.
fn stress(args: &[String]) -> Result<(), String> {
    let root = workspace_root();
    let binary = test_build_binary(&root, "stress build", "omnigraph-stress")?;
    let on_s3 = args.iter().any(|arg| arg == "--s3");
    let passed: Vec<&String> = args.iter().filter(|arg| *arg != "--s3").collect();
    let run = |graph_root: &str, environment: &[(String, String)]| {
        println!("== stress on {graph_root}");
        let status = Command::new(&binary)
            .args(["run", "--root", graph_root])
            .args(&passed)
            .envs(environment.iter().cloned())
            .status()
            .map_err(|error| format!("stress: could not run {}: {error}", binary.display()))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("stress failed ({status})"))
        }
    };
    let unique = format!(
        "stress-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_millis())
            .unwrap_or(0)
    );
    if on_s3 {
        return with_s3_server(&root, |environment| {
            let base = environment
                .iter()
                .find(|(key, _)| key == "OMNIGRAPH_S3_TEST_URI")
                .map(|(_, value)| value.clone())
                .ok_or("s3: the server gave no OMNIGRAPH_S3_TEST_URI")?;
            run(
                &format!("{}/{unique}", base.trim_end_matches('/')),
                environment,
            )
        });
    }
    let folder = std::env::temp_dir().join(unique);
    let done = run(&folder.display().to_string(), &[]);
    let _ = std::fs::remove_dir_all(&folder);
    // `--compare` ran its one-process graph beside it.
    let _ = std::fs::remove_dir_all(format!("{}-single", folder.display()));
    done
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
    // The build the README's first command runs: the CLI alone, without the features
    // the test crates turn on (failpoints), where dead code shows as a warning. Its
    // dependencies are the workspace's, with the same features: only our crates and
    // `fail` are checked again.
    step_reusing_the_workspace_build(
        &root,
        "clippy (the CLI as the README builds it)",
        &["-p", "omnigraph-cli"],
    )?;
    supported_apis(&root)?;
    println!("== guards");
    run_guards(&[])?;
    // Library, binary and integration tests.
    let (passed, failed) = test_step(
        &root,
        &["test", "--workspace", "--lib", "--bins", "--tests"],
    )?;
    // The rustdoc of every crate, warning-free, and its examples run: each crate's
    // entry points have one (edition 2024 builds a crate's examples as one binary, so
    // Lance is linked once per crate).
    doc_step(&root, "docs", &["doc", "--no-deps", "--workspace"])?;
    let (doc_passed, doc_failed) = test_step(&root, &["test", "--workspace", "--doc"])?;
    let (passed, failed) = (passed + doc_passed, failed + doc_failed);
    println!("tests: {passed} passed, {failed} failed");
    println!("xtask ci: all green");
    Ok(())
}

/// The library crates checked alone, without `internal-api`: one group per cargo run, as
/// a crate in a group would turn on `internal-api` of a crate below it in the same run.
const SUPPORTED_API_GROUPS: [&[&str]; 5] = [
    &["omnigraph-core"],
    &["omnigraph-publish"],
    &["omnigraph-graph", "omnigraph-maintenance"],
    &["omnigraph-query"],
    &["omnigraph-server"],
];

/// Each library crate's supported API alone: it compiles without `internal-api`, names
/// every type it hands out (`unnameable_types` is denied there), and its rustdoc links to
/// nothing it hides. The crates' dependencies keep the workspace's features (see
/// `omnigraph-core/Cargo.toml`), so only our crates are checked again.
fn supported_apis(root: &Path) -> Result<(), String> {
    features_aligned(root)?;
    for group in SUPPORTED_API_GROUPS {
        let packages: Vec<&str> = group.iter().flat_map(|name| ["-p", *name]).collect();
        step_reusing_the_workspace_build(
            root,
            &format!("supported API alone: {}", group.join(", ")),
            &packages,
        )?;
        let mut doc = vec!["doc", "--no-deps"];
        doc.extend(&packages);
        doc_step(
            root,
            &format!("supported API docs alone: {}", group.join(", ")),
            &doc,
        )?;
    }
    Ok(())
}

/// Each crate checked alone resolves its dependencies' features (target and host) to
/// ones the workspace's build has: a crate's feature set that the workspace lacks is a
/// second build of it and of everything above it, which a warm cache hides and a cold
/// CI pays (3 minutes a step when Lance's build scripts run again). Read from
/// `cargo tree`, so it fails in seconds, warm or cold.
fn features_aligned(root: &Path) -> Result<(), String> {
    let resolved = |packages: &[&str]| -> Result<BTreeSet<String>, String> {
        let mut args = vec![
            "tree",
            "-e",
            "normal,build",
            "-f",
            "{p} {f}",
            "--prefix",
            "none",
        ];
        args.extend(packages);
        let output = cargo(root, &args)
            .output()
            .map_err(|error| format!("cargo tree: {error}"))?;
        if !output.status.success() {
            return Err(format!(
                "cargo tree {packages:?} failed ({})",
                output.status
            ));
        }
        Ok(String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|line| line.replace(" (*)", "").replace(" (proc-macro)", ""))
            // Our crates differ by design (internal-api), and `fail` by the tests'
            // failpoints; neither is below Lance.
            .filter(|line| {
                !line.starts_with("omnigraph")
                    && !line.starts_with("xtask")
                    && !line.starts_with("fail ")
            })
            .collect())
    };
    println!(
        "== features: each crate checked alone resolves its dependencies as the workspace does"
    );
    let workspace = resolved(&["--workspace"])?;
    let mut groups: Vec<Vec<&str>> = SUPPORTED_API_GROUPS
        .iter()
        .map(|group| group.iter().flat_map(|name| ["-p", *name]).collect())
        .collect();
    groups.push(vec!["-p", "omnigraph-cli"]);
    for packages in groups {
        let extra: Vec<String> = resolved(&packages)?
            .difference(&workspace)
            .cloned()
            .collect();
        if !extra.is_empty() {
            return Err(format!(
                "{packages:?} resolves dependency features the workspace does not: {extra:?}; align them in omnigraph-core/Cargo.toml"
            ));
        }
    }
    Ok(())
}

/// The dependencies a check of some crates alone must find already built by the
/// workspace's check: building them again means a dependency's features differ.
const REBUILT_NEVER: [&str; 2] = ["datafusion", "lance"];

/// `cargo clippy` of `packages` alone with `-D warnings`, failing also when it compiled
/// DataFusion or Lance again: their features must be the workspace's (aligned in
/// `omnigraph-core/Cargo.toml`), or every such step costs minutes.
fn step_reusing_the_workspace_build(
    root: &Path,
    name: &str,
    packages: &[&str],
) -> Result<(), String> {
    let mut args = vec!["clippy", "--message-format=json-render-diagnostics"];
    args.extend(packages);
    args.extend(["--", "-D", "warnings"]);
    println!("== {name}: cargo {}", args.join(" "));
    let output = cargo(root, &args)
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|error| format!("{name}: could not run cargo: {error}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut rebuilt = Vec::new();
    for line in stdout.lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if message["reason"] == "compiler-artifact" && message["fresh"] == false {
            let target = message["target"]["name"].as_str().unwrap_or_default();
            if REBUILT_NEVER.contains(&target) {
                rebuilt.push(target.to_string());
            }
        }
    }
    if !output.status.success() {
        return Err(format!("{name} failed ({})", output.status));
    }
    if !rebuilt.is_empty() {
        return Err(format!(
            "{name} checked {rebuilt:?} again: a dependency's features differ from the workspace's; align them in omnigraph-core/Cargo.toml"
        ));
    }
    Ok(())
}

/// A `cargo doc` step with rustdoc's warnings as errors.
fn doc_step(root: &Path, name: &str, args: &[&str]) -> Result<(), String> {
    println!(
        "== {name}: cargo {} (RUSTDOCFLAGS=-D warnings)",
        args.join(" ")
    );
    let status = cargo(root, args)
        .env("RUSTDOCFLAGS", "-D warnings")
        .status()
        .map_err(|error| format!("{name}: could not run cargo: {error}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{name} failed ({status})"))
    }
}

/// A cargo command for a step. `cargo run` hands the xtask binary its own
/// `CARGO_MANIFEST_DIR` and `CARGO_PKG_*`; some build scripts (ring's) rerun when those
/// change, so they are removed to keep the child's environment the same as a plain
/// `cargo` invocation and the shared build cache warm.
fn cargo(root: &Path, args: &[&str]) -> Command {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    command.args(args).current_dir(root);
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().to_string();
        let from_cargo_run = key.starts_with("CARGO_PKG_")
            || key.starts_with("CARGO_MANIFEST_")
            || matches!(
                key.as_str(),
                "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE" | "OUT_DIR"
            );
        if from_cargo_run {
            command.env_remove(&key);
        }
    }
    command
}

fn step(root: &Path, name: &str, args: &[&str]) -> Result<(), String> {
    println!("== {name}: cargo {}", args.join(" "));
    let status = cargo(root, args)
        .status()
        .map_err(|error| format!("{name}: could not run cargo: {error}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{name} failed ({status})"))
    }
}

/// The detached-commit matrix's fast tier (`tests/suite/matrix.rs`), with its cell
/// listing. `ci` runs it too; this runs it alone, with the workspace's feature set.
fn matrix(args: &[String]) -> Result<(), String> {
    let tier = if args.iter().any(|arg| arg == "--full") {
        "full"
    } else {
        "fast"
    };
    suite_tests("matrix::", &[("OMNIGRAPH_MATRIX", tier)], &[])
}

/// Runs the suite's tests whose names contain `filter`, with `environment` and their
/// output shown; fails when none ran.
fn suite_tests(
    filter: &str,
    environment: &[(&str, &str)],
    harness_args: &[&str],
) -> Result<(), String> {
    let mut args = vec![
        "test",
        "--workspace",
        "--lib",
        "--bins",
        "--tests",
        "--",
        filter,
        "--nocapture",
    ];
    args.extend_from_slice(harness_args);
    let (passed, _) = test_step_with(&workspace_root(), environment, &args)?;
    if passed == 0 {
        return Err(format!("{filter}: no test ran"));
    }
    Ok(())
}

/// The deterministic simulation (`tests/suite/dst.rs`): `--seeds N` universes from
/// `--start S`, two at a time, then the replay check of the first seed; or, with
/// `--replay SEED` (which takes neither), that one universe with its trace; or, with
/// `--shrink SEED`, that universe and, when it fails, its shrunk form.
fn dst(args: &[String]) -> Result<(), String> {
    let value = |name: &str| -> Result<Option<String>, String> {
        match args.iter().position(|arg| arg == name) {
            None => Ok(None),
            Some(at) => {
                let text = args
                    .get(at + 1)
                    .ok_or_else(|| format!("{name} takes a number"))?;
                text.parse::<u64>()
                    .map_err(|_| format!("{name} takes a number, not {text:?}"))?;
                Ok(Some(text.clone()))
            }
        }
    };
    if let Some(seed) = value("--replay")? {
        // One universe with its trace, and the check that it runs the same twice.
        return suite_tests(
            "dst::",
            &[
                ("OMNIGRAPH_DST_SEEDS", "1"),
                ("OMNIGRAPH_DST_START", &seed),
                ("OMNIGRAPH_DST_TRACE", "1"),
            ],
            &["--test-threads=1"],
        );
    }
    if let Some(seed) = value("--shrink")? {
        // That universe; when it fails, the fewest of its steps (and faults) that
        // still fail, with their trace.
        return suite_tests(
            "dst::dst_universes",
            &[
                ("OMNIGRAPH_DST_SEEDS", "1"),
                ("OMNIGRAPH_DST_START", &seed),
                ("OMNIGRAPH_DST_SHRINK", "1"),
            ],
            &["--test-threads=1"],
        );
    }
    let seeds = value("--seeds")?.unwrap_or_else(|| "200".to_string());
    let start = value("--start")?.unwrap_or_else(|| "1".to_string());
    suite_tests(
        "dst::",
        &[
            ("OMNIGRAPH_DST_SEEDS", &seeds),
            ("OMNIGRAPH_DST_START", &start),
        ],
        &["--test-threads=1"],
    )
}

/// Runs the tests, echoing their output, and totals the `test result:` lines.
fn test_step(root: &Path, args: &[&str]) -> Result<(u64, u64), String> {
    test_step_with(root, &[], args)
}

/// [`test_step`] with `environment` set for the tests.
fn test_step_with(
    root: &Path,
    environment: &[(&str, &str)],
    args: &[&str],
) -> Result<(u64, u64), String> {
    use std::io::{BufRead, BufReader, Write};
    println!("== tests: cargo {}", args.join(" "));
    let mut child = cargo(root, args)
        .envs(environment.iter().copied())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|error| format!("tests: could not run cargo: {error}"))?;
    let (mut passed, mut failed) = (0u64, 0u64);
    if let Some(stdout) = child.stdout.take() {
        let mut out = std::io::stdout();
        for line in BufReader::new(stdout).lines() {
            let line = line.map_err(|error| format!("tests: reading output: {error}"))?;
            let _ = writeln!(out, "{line}");
            if let Some((line_passed, line_failed)) = parse_test_result(&line) {
                passed += line_passed;
                failed += line_failed;
            }
        }
    }
    let status = child
        .wait()
        .map_err(|error| format!("tests: waiting for cargo: {error}"))?;
    if status.success() {
        Ok((passed, failed))
    } else {
        println!("tests: {passed} passed, {failed} failed");
        Err(format!("tests failed ({status})"))
    }
}

/// `test result: ok. 31 passed; 0 failed; …` → (31, 0).
fn parse_test_result(line: &str) -> Option<(u64, u64)> {
    let rest = line.strip_prefix("test result: ")?;
    let number_before = |word: &str| -> Option<u64> {
        let end = rest.find(word)?;
        rest[..end].trim_end().rsplit(' ').next()?.parse().ok()
    };
    Some((number_before(" passed")?, number_before(" failed")?))
}

#[cfg(test)]
mod tests {
    #[test]
    fn test_result_lines_are_totalled() {
        assert_eq!(
            super::parse_test_result(
                "test result: ok. 31 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out"
            ),
            Some((31, 0))
        );
        assert_eq!(
            super::parse_test_result("test result: FAILED. 3 passed; 2 failed; 0 ignored"),
            Some((3, 2))
        );
        assert_eq!(super::parse_test_result("running 3 tests"), None);
    }

    /// Every product library crate of the layer map is checked alone once, and no group holds a
    /// crate with one it depends on (which would turn that one's `internal-api` on).
    #[test]
    fn every_library_crate_has_its_supported_api_checked_alone() {
        let root = super::workspace_root();
        let grouped: Vec<&str> = super::SUPPORTED_API_GROUPS.concat();
        for (name, _) in super::guards::LAYERS {
            // The test crate's library is test support, not an API.
            let library =
                name.starts_with("omnigraph-") && root.join(name).join("src/lib.rs").exists();
            let times = grouped.iter().filter(|grouped| *grouped == name).count();
            assert_eq!(
                times,
                usize::from(library),
                "{name}: checked alone {times} times"
            );
        }
        for group in super::SUPPORTED_API_GROUPS {
            for name in group {
                let (_, below) = super::guards::LAYERS
                    .iter()
                    .find(|(layer, _)| layer == name)
                    .expect("a grouped crate is in the layer map");
                assert!(
                    group.iter().all(|other| !below.contains(other)),
                    "{name} is grouped with a crate below it"
                );
            }
        }
    }
}
