//! Tidy rules over the source tree, read as text (no build needed).
//!
//! 1. Lance write APIs appear only in the adapter module of `omnigraph-core`, and Lance's
//!    own version cleanup appears nowhere except the one surface test that proves why it
//!    is forbidden (it deletes the files of detached versions).
//! 2. Every public free function of the adapter (a `pub fn` at the start of a line) is
//!    in its registered list
//!    (`ENTRY_POINTS` in `adapter/registry.rs`), and every listed name exists.
//! 3. Failpoint call sites name a constant from the registry, never a string literal.
//! 4. The crates keep their layers ([`LAYERS`]): a crate names, in its `Cargo.toml`
//!    and in its code, only the crates the map lets it use. The protocol
//!    (`omnigraph-publish`) sees only the core; the graph and maintenance see the
//!    protocol and the core, never each other; the query crate sees the graph and
//!    what is below it; the CLI sees all five.
//!
//! 5. `ARCHITECTURE.md` has a line for every module: each `.rs` file under a crate's
//!    `src/` is named there as `- \`path\`: ...`, and every such line names a file that
//!    exists.
//! 6. Each library crate keeps its limits in one module: a constant named `*_MAX` or
//!    `*_MIN` at the top level of a file under its `src/` is defined in `limits.rs`.
//!
//! Comment lines are skipped, so documentation may name the APIs it forbids.

use regex::Regex;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

/// The adapter: the only place Lance write APIs may be called.
pub const ADAPTER_DIR: &str = "omnigraph-core/src/adapter";
/// The adapter's registered list of entry points.
pub const ADAPTER_REGISTRY: &str = "omnigraph-core/src/adapter/registry.rs";
/// The failpoint registry: the only place failpoint names are spelled.
pub const FAILPOINT_REGISTRY: &str = "omnigraph-core/src/failpoints.rs";
/// The layer map: each crate of the workspace (its folder), and the OmniGraph crates it
/// may use. Every arrow points down; the graph and maintenance are siblings.
pub const LAYERS: &[(&str, &[&str])] = &[
    ("omnigraph-core", &[]),
    ("omnigraph-publish", &["omnigraph-core"]),
    ("omnigraph-graph", &["omnigraph-core", "omnigraph-publish"]),
    (
        "omnigraph-maintenance",
        &["omnigraph-core", "omnigraph-publish"],
    ),
    (
        "omnigraph-query",
        &["omnigraph-core", "omnigraph-publish", "omnigraph-graph"],
    ),
    (
        "omnigraph-server",
        &[
            "omnigraph-core",
            "omnigraph-publish",
            "omnigraph-graph",
            "omnigraph-maintenance",
            "omnigraph-query",
        ],
    ),
    (
        "omnigraph-cli",
        &[
            "omnigraph-core",
            "omnigraph-publish",
            "omnigraph-graph",
            "omnigraph-maintenance",
            "omnigraph-query",
            "omnigraph-server",
        ],
    ),
    (
        "tests",
        &[
            "omnigraph-tests",
            "omnigraph-core",
            "omnigraph-publish",
            "omnigraph-graph",
            "omnigraph-maintenance",
            "omnigraph-query",
            "omnigraph-server",
        ],
    ),
    ("xtask", &[]),
];
/// The library crates whose limits live in their `src/limits.rs`.
pub const LIMITED_CRATES: &[&str] = &[
    "omnigraph-core",
    "omnigraph-publish",
    "omnigraph-graph",
    "omnigraph-maintenance",
    "omnigraph-query",
    "omnigraph-server",
];
/// The map of the code: one line per module.
pub const ARCHITECTURE: &str = "ARCHITECTURE.md";
/// Files allowed to call Lance's cleanup: the surface test that pins the hazard.
pub const CLEANUP_HAZARD_PROOFS: &[&str] = &["tests/suite/lance_surface/cleanup_hazard.rs"];

/// Lance write entry points: any mention outside the adapter is a violation.
const LANCE_WRITE_NAMES: &[&str] = &[
    "InsertBuilder",
    "DeleteBuilder",
    "MergeInsertBuilder",
    "UpdateBuilder",
    "CommitBuilder",
    "create_index_builder",
    "compact_files",
    "commit_compaction",
    "optimize_indices",
    "commit_detached",
    "extend_deletions",
];
/// Lance write methods whose names are common words (arrow builders append, object
/// stores delete). In files that use Lance they are flagged by their Lance call shape:
/// `.restore()` always, `.append(reader, params)` with two arguments, and
/// `.delete("predicate")` / `.delete(&format!(..))` with a predicate string.
const LANCE_WRITE_METHODS: &[&str] = &["append", "delete", "restore"];
/// Lance's version cleanup: forbidden everywhere.
const LANCE_CLEANUP_NAMES: &[&str] = &["cleanup_old_versions", "cleanup_with_policy"];

/// One broken rule at a place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The rule: `lance-write-outside-adapter`, `lance-cleanup`, `adapter-unregistered`,
    /// `adapter-registry-stale`, `failpoint-literal`, `layer-import`, `layer-dependency`,
    /// `internal-import`, `architecture-stale`, `architecture-missing`,
    /// `limit-outside-limits`.
    pub rule: &'static str,
    /// The file, relative to the root.
    pub path: PathBuf,
    /// One-based line (0 for whole-file findings).
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: [{}] {}",
            self.path.display(),
            self.line,
            self.rule,
            self.message
        )
    }
}

/// What a guard run found.
#[derive(Debug, Default)]
pub struct Report {
    /// Every violation, in path order.
    pub violations: Vec<Violation>,
    /// How many `.rs` files were read.
    pub files_scanned: usize,
    /// How many names the adapter registry lists.
    pub registered_entry_points: usize,
}

/// Checks every `.rs` file below `root` (skipping `target`, `.git` and `xtask`, whose
/// rules name what they forbid).
pub fn check_tree(root: &Path) -> std::io::Result<Report> {
    let mut files = Vec::new();
    collect_rust_files(root, root, &mut files)?;
    files.sort();
    let rules = Rules::new();
    let mut report = Report::default();
    let mut adapter_public: Vec<(PathBuf, usize, String)> = Vec::new();
    let (internal, enabled) = (internal_modules(root), internal_api_enabled(root));
    for relative in &files {
        let text = std::fs::read_to_string(root.join(relative))?;
        report.files_scanned += 1;
        let in_adapter = relative.starts_with(ADAPTER_DIR);
        let in_failpoint_registry = relative == Path::new(FAILPOINT_REGISTRY);
        let layer = layer_of(relative);
        let limits_elsewhere = LIMITED_CRATES.iter().any(|folder| {
            relative.starts_with(Path::new(folder).join("src"))
                && !relative.ends_with("src/limits.rs")
        });
        let may_clean = CLEANUP_HAZARD_PROOFS
            .iter()
            .any(|allowed| relative == Path::new(allowed));
        let uses_lance = text.contains("lance::") || text.contains("lance_");
        for (index, line) in text.lines().enumerate() {
            let code = strip_comment(line);
            if code.trim().is_empty() {
                continue;
            }
            let at = |rule, message: String| Violation {
                rule,
                path: relative.clone(),
                line: index + 1,
                message,
            };
            if !may_clean && let Some(name) = rules.find_cleanup(code) {
                report.violations.push(at(
                    "lance-cleanup",
                    format!("`{name}` is Lance's version cleanup: it deletes the files of detached versions; cleanup is the engine's own"),
                ));
            }
            if !in_adapter {
                if let Some(name) = rules.find_write(code, uses_lance) {
                    report.violations.push(at(
                        "lance-write-outside-adapter",
                        format!("Lance write API `{name}` outside {ADAPTER_DIR}: add an adapter entry point and call it"),
                    ));
                }
            } else if let Some(captures) = rules.public_fn.captures(code) {
                adapter_public.push((relative.clone(), index + 1, captures[1].to_string()));
            }
            if limits_elsewhere && let Some(found) = rules.limit.captures(line) {
                report.violations.push(at(
                    "limit-outside-limits",
                    format!(
                        "the limit `{}` is defined outside the crate's limits.rs",
                        &found[1]
                    ),
                ));
            }
            if let Some((name, allowed)) = layer {
                for found in rules.crate_path.captures_iter(code) {
                    let used = found[1].replace('_', "-");
                    if used != name && !allowed.contains(&used.as_str()) {
                        report.violations.push(at(
                            "layer-import",
                            format!("`{}` named in {name}, which may use only {allowed:?} (xtask/src/guards.rs LAYERS)", &found[1]),
                        ));
                    }
                }
            }
            if let Some((name, _)) = layer {
                for found in rules.module_path.captures_iter(code) {
                    let used = format!("omnigraph-{}", &found[1]);
                    let modules: Vec<&str> = match (found.get(2), found.get(3)) {
                        (Some(list), _) => list
                            .as_str()
                            .split(',')
                            .filter_map(|item| {
                                item.trim().split_once("::").map(|(module, _)| module)
                            })
                            .collect(),
                        (None, Some(module)) => vec![module.as_str()],
                        (None, None) => Vec::new(),
                    };
                    let hidden = internal.get(&used);
                    let turned_on = enabled.get(name).is_some_and(|on| on.contains(&used));
                    for module in modules {
                        if used != name && !turned_on && hidden.is_some_and(|h| h.contains(module))
                        {
                            report.violations.push(at(
                                "internal-import",
                                format!("`{}::{module}` is outside {used}'s supported API, and {name} does not turn on its `internal-api`", &found[1]),
                            ));
                        }
                    }
                }
            }
            if !in_failpoint_registry && rules.failpoint_literal.is_match(code) {
                report.violations.push(at(
                    "failpoint-literal",
                    "failpoint named by a string literal: use a constant from omnigraph_core::failpoints".into(),
                ));
            }
        }
    }
    check_registry(root, &rules, &adapter_public, &mut report)?;
    check_manifests(root, &mut report)?;
    check_architecture(root, &files, &mut report)?;
    report
        .violations
        .sort_by(|a, b| (&a.path, a.line).cmp(&(&b.path, b.line)));
    Ok(report)
}

fn check_registry(
    root: &Path,
    rules: &Rules,
    adapter_public: &[(PathBuf, usize, String)],
    report: &mut Report,
) -> std::io::Result<()> {
    let registry_path = root.join(ADAPTER_REGISTRY);
    if !registry_path.exists() {
        if let Some((path, line, name)) = adapter_public.first() {
            report.violations.push(Violation {
                rule: "adapter-unregistered",
                path: path.clone(),
                line: *line,
                message: format!("adapter function `{name}` but no registry at {ADAPTER_REGISTRY}"),
            });
        }
        return Ok(());
    }
    let registry_text = std::fs::read_to_string(&registry_path)?;
    let listed: BTreeSet<String> = match rules.registry_list.captures(&registry_text) {
        Some(captures) => rules
            .quoted
            .captures_iter(&captures[1])
            .map(|name| name[1].to_string())
            .collect(),
        None => {
            report.violations.push(Violation {
                rule: "adapter-registry-stale",
                path: PathBuf::from(ADAPTER_REGISTRY),
                line: 0,
                message: "no `pub const ENTRY_POINTS: &[&str] = &[...]` list".into(),
            });
            return Ok(());
        }
    };
    report.registered_entry_points = listed.len();
    let defined: BTreeSet<String> = adapter_public
        .iter()
        .map(|(_, _, name)| name.clone())
        .collect();
    for (path, line, name) in adapter_public {
        if !listed.contains(name) {
            report.violations.push(Violation {
                rule: "adapter-unregistered",
                path: path.clone(),
                line: *line,
                message: format!("public adapter function `{name}` is not in ENTRY_POINTS"),
            });
        }
    }
    for name in listed.difference(&defined) {
        report.violations.push(Violation {
            rule: "adapter-registry-stale",
            path: PathBuf::from(ADAPTER_REGISTRY),
            line: 0,
            message: format!(
                "ENTRY_POINTS lists `{name}`, which no public adapter function defines"
            ),
        });
    }
    Ok(())
}

/// Per crate folder, the modules its `lib.rs` makes public only with `internal-api`
/// (`#[cfg(feature = "internal-api")]` on the line before `pub mod name;`).
fn internal_modules(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut found = BTreeMap::new();
    for (folder, _) in LAYERS {
        let Ok(text) = std::fs::read_to_string(root.join(folder).join("src/lib.rs")) else {
            continue;
        };
        let mut gated = false;
        let mut modules = BTreeSet::new();
        for line in text.lines().map(str::trim) {
            if gated
                && let Some(module) = line
                    .strip_prefix("pub mod ")
                    .and_then(|rest| rest.strip_suffix(';'))
            {
                modules.insert(module.to_string());
            }
            gated = line == "#[cfg(feature = \"internal-api\")]";
        }
        found.insert(folder.to_string(), modules);
    }
    found
}

/// Per crate folder, the workspace crates whose `internal-api` its manifest turns on:
/// a dependency line with `"internal-api"` in its features, or `omnigraph-x/internal-api`
/// in a feature of its own.
fn internal_api_enabled(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut found = BTreeMap::new();
    for (folder, _) in LAYERS {
        let Ok(text) = std::fs::read_to_string(root.join(folder).join("Cargo.toml")) else {
            continue;
        };
        let mut crates = BTreeSet::new();
        for line in text
            .lines()
            .map(str::trim)
            .filter(|line| line.contains("internal-api"))
        {
            if line.starts_with("omnigraph-") {
                let name: String = line
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                crates.insert(name);
            }
            for (at, _) in line.match_indices("/internal-api") {
                let name: String = line[..at]
                    .chars()
                    .rev()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                crates.insert(name);
            }
        }
        found.insert(folder.to_string(), crates);
    }
    found
}

/// The layer a file is in (its crate's folder and what that crate may use), when it is
/// in one of the workspace's crates.
fn layer_of(relative: &Path) -> Option<(&'static str, &'static [&'static str])> {
    LAYERS
        .iter()
        .find(|(folder, _)| relative.starts_with(folder))
        .copied()
}

/// Checks each crate's `Cargo.toml`: every OmniGraph crate it depends on (normal, dev
/// or build) is one the layer map lets it use.
fn check_manifests(root: &Path, report: &mut Report) -> std::io::Result<()> {
    let (path_value, crate_names) = (manifest_path_value(), workspace_crate_names());
    for (folder, allowed) in LAYERS {
        let relative = Path::new(folder).join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(root.join(&relative)) else {
            continue;
        };
        // Every section but the package's own: a dependency under any table form
        // (`[dependencies.omnigraph-graph]`, a renamed `package = "omnigraph-graph"`, a
        // target's dependencies) or a feature that turns one on names the crate.
        let mut in_package = false;
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.starts_with('[') {
                in_package = line == "[package]";
            }
            if in_package || line.starts_with('#') {
                continue;
            }
            // A path names a folder, not a dependency: the key or `package` does.
            let line = path_value.replace_all(line, "");
            let disallowed = crate_names
                .find_iter(&line)
                .map(|found| found.as_str().to_string())
                .find(|name| name != folder && !allowed.contains(&name.as_str()));
            if let Some(name) = disallowed {
                report.violations.push(Violation {
                    rule: "layer-dependency",
                    path: relative.clone(),
                    line: index + 1,
                    message: format!(
                        "{folder} depends on {name}; it may use only {allowed:?} (xtask/src/guards.rs LAYERS)"
                    ),
                });
            }
        }
    }
    Ok(())
}

/// A `path = "..."` value in a manifest line.
fn manifest_path_value() -> Regex {
    Regex::new(r#"path\s*=\s*"[^"]*""#).expect("static regex")
}

/// The workspace's crates as a manifest names them.
fn workspace_crate_names() -> Regex {
    Regex::new(r"\bomnigraph-(?:core|publish|graph|maintenance|cli|tests)\b").expect("static regex")
}

/// Checks that [`ARCHITECTURE`] names every module of the crates in [`LAYERS`] (a
/// `.rs` file under a crate's `src/`), and that every module line names a file that
/// exists. A tree without the file (a planted tree in a test) has nothing to check.
fn check_architecture(root: &Path, files: &[PathBuf], report: &mut Report) -> std::io::Result<()> {
    let Ok(text) = std::fs::read_to_string(root.join(ARCHITECTURE)) else {
        return Ok(());
    };
    let mut named = BTreeSet::new();
    for (index, line) in text.lines().enumerate() {
        let Some(rest) = line.strip_prefix("- `") else {
            continue;
        };
        let Some((path, _)) = rest.split_once("`:") else {
            continue;
        };
        if !path.ends_with(".rs") {
            continue;
        }
        if !root.join(path).is_file() {
            report.violations.push(Violation {
                rule: "architecture-stale",
                path: PathBuf::from(ARCHITECTURE),
                line: index + 1,
                message: format!("`{path}` is named as a module but there is no such file"),
            });
        }
        named.insert(PathBuf::from(path));
    }
    for relative in files {
        let in_a_crate = LAYERS
            .iter()
            .any(|(folder, _)| relative.starts_with(Path::new(folder).join("src")));
        if in_a_crate && !named.contains(relative) {
            report.violations.push(Violation {
                rule: "architecture-missing",
                path: relative.clone(),
                line: 0,
                message: format!(
                    "a module with no line in {ARCHITECTURE}: add `- `{}`: what it owns`",
                    relative.display()
                ),
            });
        }
    }
    Ok(())
}

struct Rules {
    write_names: Regex,
    write_methods: Regex,
    dataset_write: Regex,
    cleanup: Regex,
    public_fn: Regex,
    failpoint_literal: Regex,
    crate_path: Regex,
    module_path: Regex,
    limit: Regex,
    registry_list: Regex,
    quoted: Regex,
}

impl Rules {
    fn new() -> Rules {
        let words = |names: &[&str]| format!(r"\b({})\b", names.join("|"));
        Rules {
            write_names: Regex::new(&words(LANCE_WRITE_NAMES)).expect("static regex"),
            write_methods: Regex::new(&format!(r"\.({})\s*\(", LANCE_WRITE_METHODS.join("|")))
                .expect("static regex"),
            dataset_write: Regex::new(r"\bDataset::(write|append|delete|restore)\b")
                .expect("static regex"),
            cleanup: Regex::new(&words(LANCE_CLEANUP_NAMES)).expect("static regex"),
            public_fn: Regex::new(r"^pub(?:\(crate\))?\s+(?:async\s+)?fn\s+([A-Za-z_][A-Za-z0-9_]*)")
                .expect("static regex"),
            // A crate named anywhere in code: a path, `use omnigraph_graph as g`, or
            // `extern crate`.
            crate_path: Regex::new(r"\b(omnigraph_(?:core|publish|graph|maintenance|query|cli|tests))\b")
                .expect("static regex"),
            // `crate::module::` or `crate::{module::item, ...}`: a module followed by
            // `::` (a root item of the same name, `omnigraph_maintenance::optimize(..)`,
            // is the supported re-export).
            module_path: Regex::new(r"\bomnigraph_([a-z]+)::(?:\{([^}]*)\}|([a-z_]+)::)")
                .expect("static regex"),
            limit: Regex::new(r"^(?:pub(?:\([a-z]+\))? )?const ([A-Z0-9_]+_(?:MAX|MIN))\s*:")
                .expect("static regex"),
            failpoint_literal: Regex::new(
                r#"(fail_point!\s*\(\s*"|fail::(cfg|remove|cfg_callback)\s*\(\s*"|failpoints::(arm|disarm|arm_with)\s*\(\s*")"#,
            )
            .expect("static regex"),
            registry_list: Regex::new(r"(?s)pub const ENTRY_POINTS\s*:\s*&\[&str\]\s*=\s*&\[(.*?)\];")
                .expect("static regex"),
            quoted: Regex::new(r#""([A-Za-z_][A-Za-z0-9_]*)""#).expect("static regex"),
        }
    }

    fn find_cleanup(&self, code: &str) -> Option<String> {
        self.cleanup.captures(code).map(|c| c[1].to_string())
    }

    fn find_write(&self, code: &str, uses_lance: bool) -> Option<String> {
        if let Some(captures) = self.write_names.captures(code) {
            return Some(captures[1].to_string());
        }
        if let Some(captures) = self.dataset_write.captures(code) {
            return Some(format!("Dataset::{}", &captures[1]));
        }
        if uses_lance {
            for captures in self.write_methods.captures_iter(code) {
                let method = &captures[1];
                let whole = captures.get(0).expect("match");
                let arguments = call_arguments(&code[whole.end()..]);
                let lance_shaped = match method {
                    "restore" => true,
                    "append" => arguments.len() >= 2,
                    // Lance's delete takes the predicate alone; the engine's takes a
                    // type and a predicate.
                    "delete" => {
                        arguments.len() == 1
                            && arguments.first().is_some_and(|first| {
                                let first = first.trim_start_matches('&').trim();
                                first.starts_with('"') || first.starts_with("format!")
                            })
                    }
                    _ => false,
                };
                if lance_shaped {
                    return Some(format!(".{method}("));
                }
            }
        }
        None
    }
}

/// The top-level arguments of a call whose text starts just after its `(`.
fn call_arguments(rest: &str) -> Vec<String> {
    let mut arguments = Vec::new();
    let mut current = String::new();
    let mut depth = 0usize;
    let mut in_string = false;
    let mut previous = '\0';
    for c in rest.chars() {
        if in_string {
            in_string = !(c == '"' && previous != '\\');
            current.push(c);
        } else {
            match c {
                '"' => {
                    in_string = true;
                    current.push(c);
                }
                '(' | '[' | '{' => {
                    depth += 1;
                    current.push(c);
                }
                ')' | ']' | '}' if depth == 0 => break,
                ')' | ']' | '}' => {
                    depth -= 1;
                    current.push(c);
                }
                ',' if depth == 0 => arguments.push(std::mem::take(&mut current)),
                _ => current.push(c),
            }
        }
        previous = c;
    }
    if !current.trim().is_empty() {
        arguments.push(current);
    }
    arguments
        .into_iter()
        .map(|argument| argument.trim().to_string())
        .collect()
}

/// The code part of a line: everything before a `//` that is not inside a string.
fn strip_comment(line: &str) -> &str {
    let mut in_string = false;
    let mut previous = '\0';
    for (index, c) in line.char_indices() {
        match c {
            '"' if previous != '\\' => in_string = !in_string,
            '/' if !in_string && previous == '/' => return &line[..index - 1],
            _ => {}
        }
        previous = c;
    }
    line
}

fn collect_rust_files(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if entry.file_type()?.is_dir() {
            let skipped = name.starts_with('.') || name == "target" || name == "xtask";
            if !skipped {
                collect_rust_files(root, &path, out)?;
            }
        } else if name.ends_with(".rs") {
            let relative = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
            out.push(relative);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree that obeys every rule: an adapter with a registered entry point, a
    /// failpoint registry and a caller of both.
    fn clean_tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "omnigraph-core/src/adapter/mod.rs",
            "use lance::dataset::InsertBuilder;\n\
             pub async fn stage_append(ds: &lance::Dataset) { let _ = InsertBuilder::new(ds); ds.delete(\"x\"); }\n\
             fn helper() {}\n",
        );
        write(
            dir.path(),
            "omnigraph-core/src/adapter/registry.rs",
            "/// Entry points.\npub const ENTRY_POINTS: &[&str] = &[\n    \"stage_append\",\n];\n",
        );
        write(
            dir.path(),
            "omnigraph-core/src/failpoints.rs",
            "pub const BEFORE_PUBLISH: &str = \"before_publish\";\n",
        );
        write(
            dir.path(),
            "omnigraph-publish/src/writer.rs",
            "// InsertBuilder is named in a comment, which is fine.\n\
             fn publish(graph: &Graph) { fail::fail_point!(failpoints::BEFORE_PUBLISH); graph.delete(\"k\"); }\n",
        );
        dir
    }

    fn write(root: &Path, relative: &str, text: &str) {
        let path = root.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn rules_broken(root: &Path) -> Vec<&'static str> {
        check_tree(root)
            .unwrap()
            .violations
            .iter()
            .map(|violation| violation.rule)
            .collect()
    }

    #[test]
    fn a_clean_tree_passes() {
        let tree = clean_tree();
        let report = check_tree(tree.path()).unwrap();
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!(report.registered_entry_points, 1);
        assert_eq!(report.files_scanned, 4);
    }

    #[test]
    fn lance_write_outside_the_adapter_fails() {
        let tree = clean_tree();
        write(
            tree.path(),
            "omnigraph-publish/src/sneaky.rs",
            "use lance::dataset::CommitBuilder;\nfn f() {}\n",
        );
        assert_eq!(rules_broken(tree.path()), ["lance-write-outside-adapter"]);
        let report = check_tree(tree.path()).unwrap();
        assert_eq!(report.violations[0].line, 1);
        assert!(report.violations[0].message.contains("CommitBuilder"));
    }

    #[test]
    fn common_word_methods_fail_only_in_files_that_use_lance() {
        let tree = clean_tree();
        write(
            tree.path(),
            "omnigraph-maintenance/src/x.rs",
            "fn f(ds: &mut lance::Dataset) { ds.restore(); }\n",
        );
        assert_eq!(rules_broken(tree.path()), ["lance-write-outside-adapter"]);
        for call in [
            "ds.append(reader, Some(params))",
            "ds.delete(\"id > 3\")",
            "ds.delete(&format!(\"id > {x}\"))",
        ] {
            let tree = clean_tree();
            write(
                tree.path(),
                "omnigraph-publish/src/w.rs",
                &format!("fn f(ds: &mut lance::Dataset) {{ {call}; }}\n"),
            );
            assert_eq!(
                rules_broken(tree.path()),
                ["lance-write-outside-adapter"],
                "{call}"
            );
        }
        // Arrow builders append and object stores delete paths: not Lance writes.
        let tree = clean_tree();
        write(
            tree.path(),
            "tests/src/lib.rs",
            "use lance::Dataset;\nfn f() { vectors.append(true); values.append_null(); store.delete(&path); graph.delete(\"Person\", \"id = 'p7'\"); }\n",
        );
        assert_eq!(rules_broken(tree.path()), Vec::<&str>::new());
        let tree = clean_tree();
        write(
            tree.path(),
            "tests/suite/y.rs",
            "fn f() { lance::Dataset::write(reader, uri, None); }\n",
        );
        assert_eq!(rules_broken(tree.path()), ["lance-write-outside-adapter"]);
    }

    #[test]
    fn lance_cleanup_fails_everywhere_even_in_the_adapter() {
        let tree = clean_tree();
        write(
            tree.path(),
            "omnigraph-core/src/adapter/gc.rs",
            "fn gc(ds: &lance::Dataset) { ds.cleanup_old_versions(d, None, None); }\n",
        );
        assert_eq!(rules_broken(tree.path()), ["lance-cleanup"]);
        // The one surface test that proves the hazard may call it.
        let tree = clean_tree();
        write(
            tree.path(),
            CLEANUP_HAZARD_PROOFS[0],
            "async fn f(ds: &lance::Dataset) { ds.cleanup_old_versions(d, None, None).await; }\n",
        );
        assert_eq!(rules_broken(tree.path()), Vec::<&str>::new());
    }

    #[test]
    fn an_unregistered_adapter_entry_point_fails() {
        let tree = clean_tree();
        write(
            tree.path(),
            "omnigraph-core/src/adapter/index.rs",
            "pub async fn stage_index(ds: &lance::Dataset) {}\n",
        );
        let report = check_tree(tree.path()).unwrap();
        assert_eq!(report.violations.len(), 1);
        assert_eq!(report.violations[0].rule, "adapter-unregistered");
        assert!(report.violations[0].message.contains("stage_index"));
    }

    #[test]
    fn a_listed_name_that_does_not_exist_fails() {
        let tree = clean_tree();
        write(
            tree.path(),
            ADAPTER_REGISTRY,
            "pub const ENTRY_POINTS: &[&str] = &[\"stage_append\", \"stage_vanished\"];\n",
        );
        let report = check_tree(tree.path()).unwrap();
        assert_eq!(report.violations.len(), 1);
        assert_eq!(report.violations[0].rule, "adapter-registry-stale");
        assert!(report.violations[0].message.contains("stage_vanished"));
    }

    #[test]
    fn a_failpoint_named_by_a_literal_fails() {
        let tree = clean_tree();
        write(
            tree.path(),
            "omnigraph-publish/src/publisher.rs",
            "fn p() { fail::fail_point!(\"before_publish\"); }\n",
        );
        assert_eq!(rules_broken(tree.path()), ["failpoint-literal"]);
        let tree = clean_tree();
        write(
            tree.path(),
            "tests/suite/fp.rs",
            "fn t() { failpoints::arm(\"before_publish\", \"return\"); }\n",
        );
        assert_eq!(rules_broken(tree.path()), ["failpoint-literal"]);
    }

    #[test]
    fn a_crate_may_not_use_one_beside_or_above_it() {
        let tree = clean_tree();
        // Maintenance may use the protocol, never the graph beside it.
        write(
            tree.path(),
            "omnigraph-maintenance/src/optimize.rs",
            "use omnigraph_publish::Staging;\nuse omnigraph_graph::Omnigraph;\n/// omnigraph_graph::Omnigraph in a doc comment is fine.\n",
        );
        // The protocol may use the core, never the graph above it.
        write(
            tree.path(),
            "omnigraph-publish/src/staging.rs",
            "use omnigraph_core::Result;\nfn f() { omnigraph_graph::ingest::run(); }\n",
        );
        write(
            tree.path(),
            "omnigraph-publish/Cargo.toml",
            "[package]\nname = \"omnigraph-publish\"\n\n[features]\ns3 = [\"omnigraph-core/s3\"]\n\n[dependencies]\nomnigraph-core.workspace = true\n\n[dev-dependencies]\nomnigraph-graph = { path = \"../omnigraph-graph\" }\n",
        );
        // Evasions: a dependency table and a renamed dependency; an aliased import.
        write(
            tree.path(),
            "omnigraph-maintenance/Cargo.toml",
            "[package]\nname = \"omnigraph-maintenance\"\n\n[dependencies.omnigraph-graph]\npath = \"../omnigraph-graph\"\n\n[dependencies]\ng = { package = \"omnigraph-graph\", path = \"x\" }\n",
        );
        write(
            tree.path(),
            "omnigraph-maintenance/src/lane.rs",
            "use omnigraph_graph as g;\n",
        );
        // The CLI may use every layer.
        write(
            tree.path(),
            "omnigraph-cli/src/main.rs",
            "use omnigraph_graph::Omnigraph;\nuse omnigraph_maintenance::MaintenanceExt;\n",
        );
        let report = check_tree(tree.path()).unwrap();
        let found: Vec<(&str, String, usize)> = report
            .violations
            .iter()
            .map(|v| (v.rule, v.path.display().to_string(), v.line))
            .collect();
        assert_eq!(
            found,
            [
                (
                    "layer-dependency",
                    "omnigraph-maintenance/Cargo.toml".into(),
                    4
                ),
                (
                    "layer-dependency",
                    "omnigraph-maintenance/Cargo.toml".into(),
                    8
                ),
                (
                    "layer-import",
                    "omnigraph-maintenance/src/lane.rs".into(),
                    1
                ),
                (
                    "layer-import",
                    "omnigraph-maintenance/src/optimize.rs".into(),
                    2
                ),
                (
                    "layer-dependency",
                    "omnigraph-publish/Cargo.toml".into(),
                    11
                ),
                ("layer-import", "omnigraph-publish/src/staging.rs".into(), 2),
            ]
        );
    }

    #[test]
    fn a_crate_uses_internals_only_of_crates_whose_internal_api_it_turns_on() {
        let tree = clean_tree();
        write(
            tree.path(),
            "omnigraph-publish/src/lib.rs",
            "pub mod writer;\n#[cfg(feature = \"internal-api\")]\npub mod layout;\n#[cfg(not(feature = \"internal-api\"))]\nmod layout;\n",
        );
        // The graph turns it on; the CLI does not.
        write(
            tree.path(),
            "omnigraph-graph/Cargo.toml",
            "[package]\nname = \"omnigraph-graph\"\n\n[dependencies]\nomnigraph-publish = { workspace = true, features = [\"internal-api\"] }\n",
        );
        write(
            tree.path(),
            "omnigraph-graph/src/branching.rs",
            "use omnigraph_publish::layout::MAIN_BRANCH;\n",
        );
        write(
            tree.path(),
            "omnigraph-cli/Cargo.toml",
            "[package]\nname = \"omnigraph-cli\"\n\n[dependencies]\nomnigraph-publish.workspace = true\n",
        );
        write(
            tree.path(),
            "omnigraph-cli/src/commands.rs",
            "use omnigraph_publish::writer::Branch;\nfn f() { omnigraph_publish::layout::check_branch(\"x\"); }\nuse omnigraph_publish::{writer, layout::MAIN_BRANCH};\nfn g() { omnigraph_publish::layout(); }\n",
        );
        let report = check_tree(tree.path()).unwrap();
        let found: Vec<(&str, String, usize)> = report
            .violations
            .iter()
            .map(|v| (v.rule, v.path.display().to_string(), v.line))
            .collect();
        assert_eq!(
            found,
            [
                ("internal-import", "omnigraph-cli/src/commands.rs".into(), 2),
                ("internal-import", "omnigraph-cli/src/commands.rs".into(), 3),
            ]
        );
    }

    #[test]
    fn a_module_without_its_line_in_the_map_fails() {
        let tree = clean_tree();
        let map = "## Modules\n\
             - `omnigraph-core/src/adapter/mod.rs`: the adapter.\n\
             - `omnigraph-core/src/adapter/registry.rs`: its entry points.\n\
             - `omnigraph-core/src/failpoints.rs`: failpoint names.\n\
             - `omnigraph-publish/src/writer.rs`: the writer.\n";
        write(tree.path(), "ARCHITECTURE.md", map);
        assert!(rules_broken(tree.path()).is_empty());
        // A new module with no line, and a line whose module is gone.
        write(
            tree.path(),
            "omnigraph-publish/src/gate.rs",
            "fn gate() {}\n",
        );
        let stale = format!("{map}- `omnigraph-publish/src/gone.rs`: removed long ago.\n");
        write(tree.path(), "ARCHITECTURE.md", &stale);
        assert_eq!(
            rules_broken(tree.path()),
            ["architecture-stale", "architecture-missing"]
        );
    }

    #[test]
    fn a_limit_outside_its_crates_limits_module_fails() {
        let tree = clean_tree();
        write(
            tree.path(),
            "omnigraph-publish/src/limits.rs",
            "pub const COMMIT_BYTES_MAX: usize = 4 << 20;\n",
        );
        // A limit in a test module (indented) or in the CLI is not the crate's.
        write(
            tree.path(),
            "omnigraph-publish/src/log.rs",
            "pub const HEAD_PROBE_MAX: usize = 64;\n#[cfg(test)]\nmod tests {\n    const ROWS_MAX: usize = 3;\n}\n",
        );
        write(
            tree.path(),
            "omnigraph-cli/src/demo.rs",
            "pub const DEMO_PEOPLE_MAX: usize = 1_000_000;\n",
        );
        assert_eq!(rules_broken(tree.path()), ["limit-outside-limits"]);
    }

    #[test]
    fn comments_and_strings_do_not_hide_code() {
        assert_eq!(strip_comment("let x = 1; // CommitBuilder"), "let x = 1; ");
        assert_eq!(strip_comment("let s = \"a//b\"; x"), "let s = \"a//b\"; x");
    }

    #[test]
    fn the_real_workspace_passes() {
        // The checkout the test runs in (cargo runs it from the crate's folder), not the
        // one a shared build cache compiled it in.
        let root = crate::workspace_root();
        let report = check_tree(&root).unwrap();
        assert!(report.violations.is_empty(), "{:#?}", report.violations);
    }
}
