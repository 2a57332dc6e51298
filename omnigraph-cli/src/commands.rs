//! One function per command: open the graph, call the library, emit the result.

use crate::output::{Output, noun, print_columns, print_rows};
use crate::{DirectionArg, ModeArg, RowsFormatArg};
use omnigraph_core::schema::{self, Catalog, PropertyType};
use omnigraph_core::storage::{StorageOptions, StorageRoot};
use omnigraph_core::{InputLocation, OmniError, Result};
use omnigraph_graph::{
    Direction, ExportFormat, InputFormat, LoadMode, Omnigraph, ScanRequest, Step, StepDirection,
    default_actor,
};
use omnigraph_maintenance::{
    CleanupReport, CleanupSettings, MaintenanceBudget, MaintenanceExt, UnitOutcome,
};
use omnigraph_publish::{CommitRef, GraphCommit};
use omnigraph_server::view::{LogPage, catalog_json, commit_json, merge_json};
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

fn at_ref(at: Option<&str>) -> CommitRef {
    at.map_or(CommitRef::Head, CommitRef::parse)
}

fn read_file(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|error| {
        OmniError::bad_input(
            InputLocation::in_source(path.display().to_string()),
            format!("cannot read the file: {error}"),
        )
    })
}

fn print_commit(verb: &str, commit: Option<&GraphCommit>) {
    match commit {
        Some(commit) => println!(
            "{verb}: commit {} ({}) on {}: {}",
            commit.seq, commit.commit_id, commit.branch, commit.operation.summary
        ),
        None => println!("{verb}: nothing to publish"),
    }
}

/// A key from the command line, typed by the type's key column.
async fn parse_key(graph: &Omnigraph, type_name: &str, key: &str) -> Result<Value> {
    let head = graph.head().await?;
    let catalog = graph.catalog_at(&head).await?;
    let type_def = catalog.require(type_name)?;
    match type_def.key_type() {
        PropertyType::Int32 | PropertyType::Int64 => {
            key.parse::<i64>().map(Value::from).map_err(|_| {
                OmniError::bad_input(
                    InputLocation::in_source("key").type_name(type_name),
                    format!("the key of {type_name} is an integer; {key:?} is not"),
                )
            })
        }
        _ => Ok(Value::String(key.to_string())),
    }
}

/// The storage options of this run (`--storage-option`), set once before any command.
static STORAGE_OPTIONS: std::sync::OnceLock<StorageOptions> = std::sync::OnceLock::new();

/// Sets the storage options every root of this run is opened with.
pub fn use_storage_options(options: StorageOptions) {
    let _ = STORAGE_OPTIONS.set(options);
}

pub fn storage_options() -> &'static StorageOptions {
    STORAGE_OPTIONS.get_or_init(StorageOptions::new)
}

/// The branch of this run (`--branch`), set once before any command.
static BRANCH: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Sets the branch every command of this run reads and writes (checked).
pub fn use_branch(branch: &str) -> Result<()> {
    omnigraph_publish::check_branch(branch)?;
    let _ = BRANCH.set(branch.to_string());
    Ok(())
}

fn branch() -> &'static str {
    BRANCH
        .get()
        .map_or(omnigraph_publish::MAIN_BRANCH, String::as_str)
}

/// `at` pinned to the seq it names now, so every read of one command sees one commit.
async fn pinned(graph: &Omnigraph, at: Option<&str>) -> Result<CommitRef> {
    let commit = graph.graph().commit(graph.branch(), &at_ref(at)).await?;
    Ok(CommitRef::Seq(commit.seq))
}

/// Opens the graph at `root` with this run's storage options.
async fn open(root: &str) -> Result<Omnigraph> {
    Omnigraph::open_root(StorageRoot::open_with(root, storage_options()).await?)
        .await?
        .with_branch(branch())
}

pub async fn init(out: &Output, root: &str, schema_file: &Path) -> Result<()> {
    if branch() != omnigraph_publish::MAIN_BRANCH {
        return Err(OmniError::bad_input(
            InputLocation::in_source("--branch").field(branch()),
            "a graph is created on main; create other branches with `omnigraph branch create`",
        ));
    }
    let text = read_file(schema_file)?;
    let catalog = schema::parse(&schema_file.display().to_string(), &text)?;
    let root_store = StorageRoot::open_with(root, storage_options()).await?;
    let graph =
        Omnigraph::create_in_root(root_store, catalog.to_pg().as_str(), &default_actor()).await?;
    let head = graph.head().await?;
    out.emit(
        json!({"root": root, "commit": commit_json(&head), "schema": catalog.hash()}),
        |_| {
            println!(
                "created graph at {root}: {} types, schema {}",
                head.pins.len(),
                catalog.hash()
            );
        },
    );
    Ok(())
}

pub async fn load(
    out: &Output,
    root: &str,
    file: &Path,
    mode: ModeArg,
    format: InputFormat,
    type_name: Option<&str>,
) -> Result<()> {
    let graph = open(root).await?;
    let mode = match mode {
        ModeArg::Append => LoadMode::Append,
        ModeArg::Merge => LoadMode::Merge,
    };
    if format == InputFormat::Jsonl && type_name.is_some() {
        return Err(OmniError::bad_input(
            InputLocation::in_source("--type"),
            "JSONL rows name their own type; --type is for CSV, Parquet and Arrow files",
        ));
    }
    if format != InputFormat::Jsonl {
        let Some(type_name) = type_name else {
            return Err(OmniError::bad_input(
                InputLocation::in_source("--type"),
                "a CSV, Parquet or Arrow file holds one type: name it with --type",
            ));
        };
        let total = std::fs::metadata(file).map(|meta| meta.len()).unwrap_or(0);
        let bar = out.byte_bar(total);
        let started = std::time::Instant::now();
        let report = graph
            .load_columnar_with_progress(file, format, type_name, mode, |progress| {
                show_load_progress(bar.as_ref(), progress, started)
            })
            .await;
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
        return emit_load(out, &report?, started.elapsed().as_secs_f64());
    }
    let total = std::fs::metadata(file).map(|meta| meta.len()).unwrap_or(0);
    let bar = out.byte_bar(total);
    let started = std::time::Instant::now();
    let report = graph
        .load_with_progress(file, mode, |progress| {
            show_load_progress(bar.as_ref(), progress, started)
        })
        .await;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let report = report?;
    emit_load(out, &report, started.elapsed().as_secs_f64())
}

/// Prints a load's report.
fn emit_load(out: &Output, report: &omnigraph_graph::IngestReport, elapsed: f64) -> Result<()> {
    out.emit(
        json!({"commit": report.commit.as_ref().map(commit_json), "rows": report.rows, "seconds": elapsed}),
        |_| {
            for (type_name, count) in &report.rows {
                println!("  {type_name:<20} {count:>10} {}", noun(*count, "row", "rows"));
            }
            print_commit("loaded", report.commit.as_ref());
            println!("  in {elapsed:.2} s");
        },
    );
    Ok(())
}

pub async fn insert(out: &Output, root: &str, type_name: &str, rows: &str) -> Result<()> {
    let parsed: Value = serde_json::from_str(rows).map_err(|error| {
        OmniError::bad_input(
            InputLocation::in_source("--rows"),
            format!("not JSON: {error}"),
        )
    })?;
    let objects: Vec<Map<String, Value>> = match parsed {
        Value::Object(object) => vec![object],
        Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(row, item)| match item {
                Value::Object(object) => Ok(object),
                _ => Err(OmniError::bad_input(
                    InputLocation::in_source("--rows").row(row as u64),
                    "each row must be a JSON object",
                )),
            })
            .collect::<Result<_>>()?,
        _ => {
            return Err(OmniError::bad_input(
                InputLocation::in_source("--rows"),
                "give a JSON object or an array of objects",
            ));
        }
    };
    let graph = open(root).await?;
    let commit = graph.insert_json(type_name, objects).await?;
    out.emit(json!({"commit": commit_json(&commit)}), |_| {
        print_commit("inserted", Some(&commit))
    });
    Ok(())
}

pub async fn update(
    out: &Output,
    root: &str,
    type_name: &str,
    predicate: &str,
    assignments: &[String],
) -> Result<()> {
    let mut parsed = Vec::with_capacity(assignments.len());
    for assignment in assignments {
        let (property, value) = assignment.split_once('=').ok_or_else(|| {
            OmniError::bad_input(
                InputLocation::in_source("--set").field(assignment.clone()),
                "expected prop=value",
            )
        })?;
        let value =
            serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_string()));
        parsed.push((property.trim().to_string(), value));
    }
    let graph = open(root).await?;
    let commit = graph.update(type_name, predicate, &parsed).await?;
    out.emit(json!({"commit": commit.as_ref().map(commit_json)}), |_| {
        print_commit("updated", commit.as_ref())
    });
    Ok(())
}

pub async fn delete(out: &Output, root: &str, type_name: &str, predicate: &str) -> Result<()> {
    let graph = open(root).await?;
    let commit = graph.delete(type_name, predicate).await?;
    out.emit(json!({"commit": commit.as_ref().map(commit_json)}), |_| {
        print_commit("deleted", commit.as_ref())
    });
    Ok(())
}

pub fn schema_check(out: &Output, file: &Path) -> Result<()> {
    let text = read_file(file)?;
    let catalog = schema::parse(&file.display().to_string(), &text)?;
    out.emit(catalog_json(&catalog), |_| print_catalog(&catalog));
    Ok(())
}

pub async fn schema_apply(out: &Output, root: &str, file: &Path, force: bool) -> Result<()> {
    let text = read_file(file)?;
    schema::parse(&file.display().to_string(), &text)?;
    let graph = open(root).await?;
    let report = graph.apply_schema(&text, force).await?;
    out.emit(
        json!({"commit": report.commit.as_ref().map(commit_json), "changes": report.changes}),
        |_| {
            for change in &report.changes {
                println!("  {}", serde_json::to_string(change).unwrap_or_default());
            }
            print_commit("schema applied", report.commit.as_ref());
        },
    );
    Ok(())
}

pub async fn schema_show(out: &Output, root: &str) -> Result<()> {
    let graph = open(root).await?;
    let head = graph.head().await?;
    let catalog = graph.catalog_at(&head).await?;
    out.emit(catalog_json(&catalog), |_| print!("{}", catalog.to_pg()));
    Ok(())
}

/// What to export, and where.
pub struct ExportRequest {
    pub type_name: String,
    pub format: ExportFormat,
    pub output: Option<PathBuf>,
    pub at: Option<String>,
}

/// Every row of a type: to a file written beside `--output` and renamed onto it once
/// whole (a failure leaves no file there, nor a short one), or as JSON lines on stdout.
pub async fn export(out: &Output, root: &str, request: ExportRequest) -> Result<()> {
    let ExportRequest {
        type_name,
        format,
        output,
        at,
    } = request;
    let Some(path) = output else {
        if format != ExportFormat::JsonLines {
            return Err(OmniError::bad_input(
                InputLocation::in_source("--output"),
                "an Arrow or Parquet export is written to a file: give --output FILE",
            ));
        }
        if out.json() {
            return Err(OmniError::bad_input(
                InputLocation::in_source("--output"),
                "with --json, stdout holds the export's summary: give --output FILE",
            ));
        }
        let graph = open(root).await?;
        let export = graph.export(&type_name, &at_ref(at.as_deref())).await?;
        let (stdout, closed) = crate::output::ClosableStdout::new();
        // A failure part way exits non-zero after the lines printed so far; a reader
        // that stopped reading (`| head`) took what it wanted.
        return match export.write_to(format, stdout, |_| {}).await {
            Ok(_) => Ok(()),
            Err(_) if closed.load(std::sync::atomic::Ordering::Relaxed) => Ok(()),
            Err(error) => Err(error),
        };
    };
    // A place the user named wrongly is bad input; the store failing there is not.
    let in_place = |error: std::io::Error| match error.kind() {
        std::io::ErrorKind::NotFound
        | std::io::ErrorKind::PermissionDenied
        | std::io::ErrorKind::NotADirectory
        | std::io::ErrorKind::IsADirectory => OmniError::bad_input(
            InputLocation::in_source("--output").field(path.display().to_string()),
            format!("cannot write the export there: {error}"),
        ),
        _ => OmniError::from_io("write an export", error),
    };
    let graph = open(root).await?;
    let export = graph.export(&type_name, &at_ref(at.as_deref())).await?;
    let (seq, commit_id, total) = (export.seq(), export.commit_id().to_owned(), export.rows());
    // Beside its place, so the rename onto it is atomic; removed when dropped unused.
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut builder = tempfile::Builder::new();
    builder.prefix(".omnigraph-export-");
    // A file as `create` makes one (the umask applies), not a temporary file's 0600.
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    let temporary = builder.tempfile_in(&dir).map_err(in_place)?;
    let written = out
        .spinning(&format!("exporting {type_name}"), |spinner| {
            let writer = std::io::BufWriter::new(temporary);
            let type_name = type_name.clone();
            export.write_to(format, writer, move |rows| {
                if let Some(spinner) = &spinner {
                    spinner.set_message(format!("exporting {type_name}: {rows} of {total} rows"));
                }
            })
        })
        .await?;
    let (writer, rows) = written;
    let temporary = writer
        .into_inner()
        .map_err(|error| OmniError::from_io("write an export", error.into_error()))?;
    temporary
        .as_file()
        .sync_all()
        .map_err(|error| OmniError::from_io("write an export", error))?;
    let file = temporary
        .persist(&path)
        .map_err(|error| in_place(error.error))?;
    // The rename is durable once the folder that holds it is.
    #[cfg(unix)]
    std::fs::File::open(&dir)
        .and_then(|folder| folder.sync_all())
        .map_err(|error| OmniError::from_io("write an export", error))?;
    let bytes = file
        .metadata()
        .map_err(|error| OmniError::from_io("write an export", error))?
        .len();
    let format_name = match format {
        ExportFormat::JsonLines => "jsonl",
        ExportFormat::ArrowFile => "arrow",
        ExportFormat::Parquet => "parquet",
    };
    out.emit(
        json!({
            "type": type_name,
            "rows": rows,
            "format": format_name,
            "output": path.display().to_string(),
            "bytes": bytes,
            "seq": seq,
            "commit_id": commit_id,
        }),
        |_| {
            println!(
                "exported {rows} {} of {type_name} at commit {seq} to {} ({bytes} bytes, {format_name})",
                noun(rows, "row", "rows"),
                path.display()
            );
        },
    );
    Ok(())
}

pub async fn get(
    out: &Output,
    root: &str,
    type_name: &str,
    key: &str,
    at: Option<&str>,
) -> Result<()> {
    let graph = open(root).await?;
    let key = parse_key(&graph, type_name, key).await?;
    let row = graph.get(type_name, &key, &at_ref(at)).await?;
    let Some(row) = row else {
        return Err(OmniError::not_found(format!("{type_name} with key {key}")));
    };
    out.emit(Value::Object(row.clone()), |_| {
        let width = row.keys().map(String::len).max().unwrap_or(0);
        for (name, value) in &row {
            println!("{name:<width$}  {value}");
        }
    });
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub async fn query(
    out: &Output,
    root: &str,
    type_name: &str,
    predicate: Option<String>,
    select: Option<String>,
    limit: usize,
    at: Option<&str>,
) -> Result<()> {
    let graph = open(root).await?;
    let at = pinned(&graph, at).await?;
    let request = ScanRequest {
        filter: predicate.clone(),
        columns: select
            .map(|text| {
                text.split(',')
                    .map(|c| c.trim().to_string())
                    .filter(|c| !c.is_empty())
                    .collect()
            })
            .unwrap_or_default(),
        // One more than asked: whether more rows match is then known without a count.
        limit: Some(limit.saturating_add(1)),
    };
    let batches = graph.scan(type_name, &request, &at).await?;
    let mut rows = omnigraph_graph::batches_to_json(&batches);
    let truncated = rows.len() > limit;
    rows.truncate(limit);
    // Counted only when the rows were cut short: otherwise they are all there.
    let total = if truncated {
        graph.count(type_name, predicate.as_deref(), &at).await?
    } else {
        rows.len() as u64
    };
    out.emit(
        json!({"rows": rows, "limit": limit, "truncated": truncated, "total": total}),
        |_| {
            print_rows(&rows);
            if truncated {
                eprintln!(
                    "{} of {total} {} (use --limit)",
                    rows.len(),
                    noun(total as u64, "row", "rows")
                );
            }
        },
    );
    Ok(())
}

/// The most rows a Cypher query's table or `--json` document holds; `--format json`
/// and `csv` stream every row.
const CYPHER_HELD_ROWS_MAX: usize = 100_000;

/// What `omnigraph query ROOT 'MATCH ...'` was asked.
pub struct CypherRequest {
    pub text: String,
    /// `NAME=VALUE` pairs; a value is JSON when it parses, else a string.
    pub params: Vec<String>,
    pub format: RowsFormatArg,
    pub timing: bool,
    pub memory: Option<usize>,
}

/// Runs a Cypher query and prints its rows as they come (`--format`), or the whole
/// result as one JSON document (`--json`).
pub async fn cypher(
    out: &Output,
    root: &str,
    request: CypherRequest,
    at: Option<&str>,
) -> Result<()> {
    let started = std::time::Instant::now();
    let graph = open(root).await?;
    let mut options = omnigraph_query::QueryOptions::new().at(at_ref(at));
    for pair in &request.params {
        let Some((name, value)) = pair.split_once('=') else {
            return Err(OmniError::bad_input(
                InputLocation::in_source("--param").field(pair.clone()),
                "a parameter is NAME=VALUE",
            ));
        };
        let value = serde_json::from_str(value).unwrap_or_else(|_| Value::from(value));
        options = options.parameter(name.trim_start_matches('$'), value);
    }
    if let Some(bytes) = request.memory {
        options = options.memory_bytes(bytes);
    }
    let mut result = omnigraph_query::query(&graph, &request.text, &options).await?;
    let planned = started.elapsed();
    let columns: Vec<String> = result
        .schema()
        .fields()
        .iter()
        .map(|field| field.name().clone())
        .collect();
    let mut table: Vec<Vec<Value>> = Vec::new();
    let mut count: u64 = 0;
    let streams = !out.json() && request.format != RowsFormatArg::Table;
    if streams && request.format == RowsFormatArg::Csv {
        println!(
            "{}",
            columns
                .iter()
                .map(|c| csv_field(c))
                .collect::<Vec<_>>()
                .join(",")
        );
    }
    // On a terminal: a spinner with the rows so far, for a query that takes a while.
    let spinner = out.spinner("querying");
    while let Some(batch) = result.next().await {
        let batch = batch?;
        if let Some(spinner) = &spinner {
            spinner.set_message(format!(
                "querying: {} rows",
                count + batch.num_rows() as u64
            ));
        }
        for row in omnigraph_graph::batches_to_json(std::slice::from_ref(&batch)) {
            let values: Vec<Value> = columns
                .iter()
                .map(|c| row.get(c).cloned().unwrap_or(Value::Null))
                .collect();
            count += 1;
            let line = match (streams, request.format) {
                (true, RowsFormatArg::Json) => Value::Array(values).to_string(),
                (true, _) => values.iter().map(csv_value).collect::<Vec<_>>().join(","),
                (false, _) => {
                    // Held for alignment or one document, up to a bound; past it the
                    // rows are counted, and --format streams them all.
                    if table.len() < CYPHER_HELD_ROWS_MAX {
                        table.push(values);
                    }
                    continue;
                }
            };
            // The spinner steps aside while a row is printed on the same terminal.
            match &spinner {
                Some(spinner) => spinner.suspend(|| println!("{line}")),
                None => println!("{line}"),
            }
        }
    }
    if let Some(spinner) = spinner {
        spinner.finish_and_clear();
    }
    let executed = started.elapsed() - planned;
    let seq = result.seq();
    let mode = result.mode();
    let held = table.len() as u64;
    out.emit(
        json!({
            "columns": columns,
            "rows": table,
            "truncated": held < count,
            "seq": seq,
            "commit_id": result.commit_id(),
            "planning_ms": result.planning().as_secs_f64() * 1e3,
            "execution_ms": executed.as_secs_f64() * 1e3,
        }),
        |_| {
            if !streams {
                let names: Vec<&str> = columns.iter().map(String::as_str).collect();
                let cells: Vec<Vec<String>> = table
                    .iter()
                    .map(|row| row.iter().map(|v| crate::output::cell(Some(v))).collect())
                    .collect();
                if mode != omnigraph_query::Mode::Run {
                    // EXPLAIN and PROFILE: the plan as it is written, not as a cell.
                    print!("{}", table[0][0].as_str().unwrap_or_default());
                } else if cells.is_empty() {
                    println!("(no rows)");
                } else {
                    print_columns(&names, &cells);
                }
            }
            if !streams && held < count {
                eprintln!(
                    "the first {held} of {count} rows shown (use --format json or csv for all)"
                );
            } else {
                eprintln!("{count} {} at seq {seq}", noun(count, "row", "rows"));
            }
        },
    );
    if request.timing {
        eprintln!(
            "planning {:.1} ms, execution {:.1} ms",
            result.planning().as_secs_f64() * 1e3,
            executed.as_secs_f64() * 1e3
        );
    }
    Ok(())
}

fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

fn csv_value(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(text) => csv_field(text),
        other => csv_field(&other.to_string()),
    }
}

#[allow(clippy::too_many_arguments)]
pub async fn neighbors(
    out: &Output,
    root: &str,
    type_name: &str,
    key: &str,
    edge: &str,
    direction: DirectionArg,
    limit: usize,
    at: Option<&str>,
) -> Result<()> {
    let graph = open(root).await?;
    let key = parse_key(&graph, type_name, key).await?;
    let direction = match direction {
        DirectionArg::Out => Direction::Out,
        DirectionArg::In => Direction::In,
    };
    // One more than asked: whether more neighbours exist is then known (up to the most
    // one call reads, which a larger --limit is refused for).
    let asked = limit
        .saturating_add(1)
        .min(omnigraph_graph::limits::READ_LIMIT_MAX.max(limit));
    let at = pinned(&graph, at).await?;
    let mut rows = graph
        .neighbors(type_name, &key, edge, direction, asked, &at)
        .await?;
    // The limit counts edges, and two edges to one node give one row: whether the
    // limit cut anything is known from the edges, counted at the same commit.
    let edges = graph
        .count_neighbors(type_name, &key, edge, direction, &at)
        .await?;
    let truncated = edges > limit as u64;
    rows.truncate(limit);
    out.emit(
        json!({"rows": rows, "limit": limit, "truncated": truncated, "edges": edges}),
        |_| {
            print_rows(&rows);
            if truncated {
                eprintln!(
                    "followed {limit} of {edges} {} (use --limit)",
                    noun(edges as u64, "edge", "edges")
                );
            }
        },
    );
    Ok(())
}

/// What `traverse` follows, as given on the command line.
pub struct TraverseRequest<'a> {
    pub type_name: &'a str,
    pub keys: &'a [String],
    /// `EDGE:DIRECTION` per step.
    pub steps: &'a [String],
    /// On the nodes the last step reaches.
    pub filter: Option<&'a str>,
    pub limit: usize,
    pub paths: bool,
}

/// One `--step EDGE:DIRECTION`, the `index`th.
fn parse_step(index: usize, text: &str, limit: usize) -> Result<Step> {
    let refused = |message: String| {
        OmniError::bad_input(
            InputLocation::in_source("--step").field(format!("steps[{index}]")),
            message,
        )
    };
    let Some((edge, direction)) = text.rsplit_once(':') else {
        return Err(refused(format!(
            "{text:?} is not EDGE:DIRECTION (for example WorksAt:out)"
        )));
    };
    let direction = match direction {
        "out" => StepDirection::Out,
        "in" => StepDirection::In,
        "both" => StepDirection::Both,
        other => {
            return Err(refused(format!(
                "{other:?} is not a direction: out, in or both"
            )));
        }
    };
    let mut step = Step::new(edge, direction);
    step.limit = limit;
    Ok(step)
}

pub async fn traverse(
    out: &Output,
    root: &str,
    request: &TraverseRequest<'_>,
    at: Option<&str>,
) -> Result<()> {
    let mut steps = request
        .steps
        .iter()
        .enumerate()
        .map(|(index, text)| parse_step(index, text, request.limit))
        .collect::<Result<Vec<Step>>>()?;
    if let Some(last) = steps.last_mut() {
        last.node_filter = request.filter.map(str::to_string);
    }
    let graph = open(root).await?;
    let mut keys = Vec::with_capacity(request.keys.len());
    for key in request.keys {
        keys.push(parse_key(&graph, request.type_name, key).await?);
    }
    let at = pinned(&graph, at).await?;
    let found = graph
        .traverse(request.type_name, &keys, &steps, request.paths, &at)
        .await?;
    let truncated = found.steps.iter().any(|step| step.truncated);
    out.emit(
        json!({
            "seq": found.seq,
            "type": found.node_type,
            "rows": found.nodes,
            "steps": found.steps,
            "paths": found.paths,
            "limit": request.limit,
            "truncated": truncated,
        }),
        |_| {
            match &found.paths {
                Some(paths) => {
                    for path in paths {
                        println!("{}", path_text(path));
                    }
                }
                None => print_rows(&found.nodes),
            }
            for (index, step) in found.steps.iter().enumerate() {
                if step.truncated {
                    eprintln!(
                        "step {index} ({}) reached more than {} {} nodes (use --limit)",
                        step.edge_type, request.limit, step.node_type
                    );
                }
            }
        },
    );
    Ok(())
}

/// `p1 -[w1]- c1 -[w2]- p2`: the keys and edge ids of a path.
fn path_text(path: &omnigraph_graph::TraversalPath) -> String {
    let text = |value: &Value| match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    let mut line = path.nodes.first().map(text).unwrap_or_default();
    for (edge, node) in path.edges.iter().zip(path.nodes.iter().skip(1)) {
        line.push_str(&format!(" -[{}]- {}", text(edge), text(node)));
    }
    line
}

/// What `search` looks for.
pub struct SearchQuery {
    /// Text to match.
    pub text: Option<String>,
    /// A query vector.
    pub vector: Option<Vec<f32>>,
    /// How many results.
    pub k: usize,
    /// A Cypher predicate on `n`, the node searched: the candidates, before top-k.
    pub predicate: Option<String>,
    /// How a text search matches its words: `any`, `all`, `phrase` or `prefix`.
    pub matching: Option<String>,
}

/// `search` is one retrieval leg (`CALL omni.text` or `omni.vector`) run through the
/// query planner: the same code, limits and refusals as a query's leg.
pub async fn search(
    out: &Output,
    root: &str,
    type_name: &str,
    property: &str,
    query: SearchQuery,
    at: Option<&str>,
) -> Result<()> {
    let graph = open(root).await?;
    let commit = graph.graph().commit(graph.branch(), &at_ref(at)).await?;
    let catalog = graph.catalog_at(&commit).await?;
    let key = catalog.require(type_name)?.key_column().to_string();
    let k = query.k;
    let k_max = omnigraph_query::limits::LEG_K_MAX;
    if k == 0 || k > k_max {
        return Err(OmniError::bad_input(
            InputLocation::in_source("search").field("-k"),
            format!("k is 1 to {k_max}, not {k}"),
        ));
    }
    // One more than asked (up to the most a leg returns): whether more match is then
    // known.
    let asked = (k + 1).min(k_max);
    let mut options = omnigraph_query::QueryOptions::new()
        .at(CommitRef::Seq(commit.seq))
        .parameter("k", json!(asked));
    let label = cypher_name(type_name);
    // The predicate in brackets and on a line of its own: a comment in it ends with it.
    let (pattern, target) = match &query.predicate {
        Some(predicate) => (
            format!("MATCH (n:{label}) WHERE ({predicate}\n) "),
            "n".to_string(),
        ),
        None => (String::new(), cypher_string(type_name)),
    };
    let property = cypher_string(property);
    let (call, found, score) = match (query.text, query.vector) {
        (Some(text), None) => {
            options = options.parameter("query", json!(text));
            let matching = match query.matching {
                Some(matching) => {
                    options = options.parameter("match", json!(matching));
                    ", {match: $match}"
                }
                None => "",
            };
            (
                format!("omni.text({target}, {property}, $query, $k{matching})"),
                "score",
                "_score",
            )
        }
        (None, Some(vector)) => {
            if query.matching.is_some() {
                return Err(OmniError::bad_input(
                    InputLocation::in_source("search").field("--match"),
                    "--match applies to a text search",
                ));
            }
            options = options.parameter("query", json!(vector));
            (
                format!("omni.vector({target}, {property}, $query, $k)"),
                "distance",
                "_distance",
            )
        }
        _ => {
            return Err(OmniError::bad_input(
                InputLocation::in_source("search"),
                "give exactly one of --text and --vector",
            ));
        }
    };
    let text = format!(
        "{pattern}CALL {call} YIELD node, rank, {found} \
         RETURN node, rank, {found} ORDER BY rank, node.{}",
        cypher_name(&key)
    );
    let result = omnigraph_query::query(&graph, &text, &options)
        .await
        .map_err(|error| search_error(error, query.predicate.as_deref(), &label))?;
    let batches = result
        .collect()
        .await
        .map_err(|error| search_error(error, query.predicate.as_deref(), &label))?;
    let mut rows: Vec<Map<String, Value>> = omnigraph_graph::batches_to_json(&batches)
        .into_iter()
        .map(|mut row| {
            let mut hit = match row.remove("node") {
                Some(Value::Object(node)) => node,
                _ => Map::new(),
            };
            hit.insert("_rank".into(), row.remove("rank").unwrap_or(Value::Null));
            hit.insert(score.into(), row.remove(found).unwrap_or(Value::Null));
            hit
        })
        .collect();
    // At the largest k nothing more can be asked for: k results may be all of them or
    // not, and the output says it may be cut.
    let truncated = rows.len() > k || (asked == k && rows.len() == k);
    rows.truncate(k);
    out.emit(
        json!({"rows": rows, "limit": k, "truncated": truncated, "seq": commit.seq}),
        |_| {
            print_rows(&rows);
            if truncated {
                eprintln!("the best {k} matches; more may match (use -k)");
            }
        },
    );
    Ok(())
}

/// An error of the query `search` wrote, told of what the user gave: a refusal inside
/// the `--where` predicate at its line and column there (its first line starts after
/// `MATCH (n:LABEL) WHERE (`), any other refusal as bad input of the command, since the
/// query's own text is not the user's.
fn search_error(error: OmniError, predicate: Option<&str>, label: &str) -> OmniError {
    let OmniError::BadQuery {
        refusal,
        line,
        column,
        message,
        ..
    } = error
    else {
        return error;
    };
    if let Some(predicate) = predicate {
        let lines = predicate.lines().count().max(1) as u64;
        // The columns the query holds before the predicate on its first line.
        let before = format!("MATCH (n:{label}) WHERE (").chars().count() as u64;
        // The bracket that closes the predicate starts the line after it: an error
        // there is at the predicate's end.
        let (line, column) = if line == lines + 1 && column == 1 {
            let last = predicate.lines().last().unwrap_or_default().chars().count() as u64;
            let first_line_offset = if lines == 1 { before } else { 0 };
            (lines, first_line_offset + last + 1)
        } else {
            (line, column)
        };
        let inside = match line {
            1 => column > before,
            line => line <= lines,
        };
        if inside {
            let column = if line == 1 { column - before } else { column };
            return OmniError::bad_query(
                refusal,
                line,
                column,
                format!("--where `{predicate}`, at its line {line}, column {column}: {message}"),
            );
        }
    }
    OmniError::bad_input(InputLocation::in_source("search"), message)
}

/// A schema name as a Cypher name (backquoted, a backquote doubled).
fn cypher_name(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// Text as a Cypher string literal.
fn cypher_string(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
}

pub async fn build_indexes(out: &Output, root: &str) -> Result<()> {
    let graph = Arc::new(open(root).await?);
    cancel_on_interrupt(graph.clone());
    let report = out
        .with_maintenance_bar(|sink| {
            let maintenance = reporting(graph.maintenance(), sink);
            async move { maintenance.build_indexes().await }
        })
        .await;
    let report = report?;
    out.emit(
        json!({
            "commit": report.commit.as_ref().map(commit_json),
            "built": report.built.iter().map(|(t, i)| json!({"type": t, "index": i})).collect::<Vec<_>>(),
            "pending_indexes": report.pending_indexes,
        }),
        |_| {
            for (type_name, index) in &report.built {
                println!("  built    {type_name}.{index}");
            }
            for pending in &report.pending_indexes {
                println!("  pending  {}.{}: {}", pending.type_name, pending.index, pending.reason);
            }
            print_commit("build-indexes", report.commit.as_ref());
        },
    );
    Ok(())
}

/// Rebuilds one built index through the root's lane.
pub async fn rebuild_index(out: &Output, root: &str, type_name: &str, index: &str) -> Result<()> {
    let graph = Arc::new(open(root).await?);
    cancel_on_interrupt(graph.clone());
    let report = out
        .with_maintenance_bar(|sink| {
            let maintenance = reporting(graph.maintenance(), sink);
            let (type_name, index) = (type_name.to_string(), index.to_string());
            async move { maintenance.rebuild_index(&type_name, &index).await }
        })
        .await;
    let report = report?;
    out.emit(
        json!({
            "commit": report.commit.as_ref().map(commit_json),
            "type": type_name,
            "index": index,
        }),
        |_| {
            println!("  rebuilt  {type_name}.{index}");
            print_commit("rebuild-index", report.commit.as_ref());
        },
    );
    Ok(())
}

/// Optimizes through the root's lane with the environment's budget (and
/// `--concurrency`); returns the exit status of the worst unit outcome.
pub async fn optimize(out: &Output, root: &str, concurrency: Option<usize>) -> Result<i32> {
    let mut budget = MaintenanceBudget::from_env()?;
    if let Some(units) = concurrency {
        budget = budget.with_unit_concurrency(units);
    }
    let graph = Arc::new(open(root).await?);
    cancel_on_interrupt(graph.clone());
    let report = out
        .with_maintenance_bar(|sink| {
            let maintenance = reporting(graph.maintenance().with_maintenance_budget(budget), sink);
            async move { maintenance.optimize().await }
        })
        .await;
    let report = report?;
    out.emit(serde_json::to_value(&report).unwrap_or(Value::Null), |_| {
        print_optimize(&report)
    });
    Ok(report.exit_code())
}

/// `maintenance`, reporting its progress to `sink` when there is one.
fn reporting(
    maintenance: omnigraph_maintenance::Maintenance<'_>,
    sink: Option<omnigraph_maintenance::ProgressSink>,
) -> omnigraph_maintenance::Maintenance<'_> {
    match sink {
        Some(sink) => maintenance.with_progress(sink),
        None => maintenance,
    }
}

/// Previews cleanup: what `--confirm` would delete. Exits 0 unless a table failed.
pub async fn cleanup_preview(out: &Output, root: &str, request: CleanupSettings) -> Result<i32> {
    let options = request.options()?;
    let graph = Arc::new(open(root).await?);
    cancel_on_interrupt(graph.clone());
    let report = out
        .with_maintenance_bar(|sink| {
            let maintenance = reporting(graph.maintenance(), sink);
            async move { maintenance.preview_cleanup(&options).await }
        })
        .await;
    let report = report?;
    out.emit(serde_json::to_value(&report).unwrap_or(Value::Null), |_| {
        print_cleanup(&report)
    });
    Ok(report.exit_code())
}

/// Runs cleanup, with progress on stderr; exits 0 unless a table failed.
pub async fn cleanup(out: &Output, root: &str, request: CleanupSettings) -> Result<i32> {
    let options = request.options()?;
    let graph = Arc::new(open(root).await?);
    cancel_on_interrupt(graph.clone());
    let report = out
        .with_maintenance_bar(|sink| {
            let maintenance = reporting(graph.maintenance(), sink);
            async move { maintenance.cleanup(&options).await }
        })
        .await;
    let report = report?;
    out.emit(serde_json::to_value(&report).unwrap_or(Value::Null), |_| {
        print_cleanup(&report)
    });
    Ok(report.exit_code())
}

fn print_cleanup(report: &CleanupReport) {
    let verb = if report.deleted {
        "removed"
    } else {
        "would remove"
    };
    let oldest: Vec<String> = report
        .oldest_retained
        .iter()
        .map(|(branch, seq)| format!("{branch} from commit {seq}"))
        .collect();
    println!(
        "cleanup (grace {} s): readable: {}",
        report.grace_secs,
        oldest.join(", ")
    );
    for table in &report.tables {
        let name = table.type_name.as_deref().unwrap_or("(unpinned)");
        let mut line = format!(
            "  {:<16} {:<30} {verb} {:>5} {} {:>6} {} {:>12} {}; dead staging {} {} {} {}",
            name,
            table.table_id,
            table.manifests_removed,
            noun(table.manifests_removed, "manifest", "manifests"),
            table.files_removed,
            noun(table.files_removed, "file", "files"),
            table.bytes_removed,
            noun(table.bytes_removed, "byte", "bytes"),
            table.unpublished_manifests,
            noun(table.unpublished_manifests, "manifest", "manifests"),
            table.unpublished_bytes,
            noun(table.unpublished_bytes, "byte", "bytes"),
        );
        if table.foreign_versions > 0 {
            line.push_str(&format!(
                "; {} foreign {} (see `omnigraph repair`)",
                table.foreign_versions,
                noun(table.foreign_versions, "version", "versions")
            ));
        }
        println!("{line}");
        if let Some(error) = &table.error {
            println!("      error ({}): {}", error.code, error.message);
        }
    }
    let totals = &report.totals;
    println!(
        "total: {verb} {} {}, {} {}, {} {} in {} ms{}",
        totals.manifests_removed,
        noun(totals.manifests_removed, "manifest", "manifests"),
        totals.files_removed,
        noun(totals.files_removed, "file", "files"),
        totals.bytes_removed,
        noun(totals.bytes_removed, "byte", "bytes"),
        report.elapsed_ms,
        if report.deleted {
            ""
        } else {
            " (preview: add --confirm to delete)"
        }
    );
}

/// Prints the repair report; exits 0 when clean and 3 on drift or missing pins.
pub async fn repair(out: &Output, root: &str) -> Result<i32> {
    let graph = open(root).await?;
    let report = graph.maintenance().repair_report().await?;
    out.emit(serde_json::to_value(&report).unwrap_or(Value::Null), |_| {
        for table in &report.tables {
            let status = serde_json::to_value(table.status)
                .ok()
                .and_then(|value| value.as_str().map(str::to_string))
                .unwrap_or_default();
            println!(
                "  {:<16} {:<30} {status:<14} foreign versions {} staging {} ({} bytes)",
                table.type_name.as_deref().unwrap_or("(unpinned)"),
                table.table_id,
                table.foreign_versions,
                table.staging_versions,
                table.staging_bytes
            );
            for missing in &table.missing {
                println!("      missing: {missing}");
            }
            for link in &table.symlinks {
                println!("      symbolic link: {link}");
            }
            println!("      {}", table.advice);
        }
    });
    Ok(report.exit_code())
}

/// The first Ctrl-C cancels the maintenance run gracefully (the error then says what
/// was published); a second one exits at once. One handler per process: the `omnigraph`
/// process runs one command.
fn cancel_on_interrupt(graph: Arc<Omnigraph>) {
    let presses = AtomicU32::new(0);
    let installed = ctrlc::set_handler(move || {
        if presses.fetch_add(1, Ordering::SeqCst) == 0 {
            eprintln!(
                "cancelling: the run stops at its next cancel point (Ctrl-C again exits at once)"
            );
            graph.cancel_maintenance();
        } else {
            std::process::exit(130);
        }
    });
    if let Err(error) = installed {
        eprintln!("warning: Ctrl-C will not cancel gracefully: {error}");
    }
}

/// The per-table result of an optimize run, for people.
pub fn print_optimize(report: &omnigraph_maintenance::OptimizeReport) {
    for table in &report.tables {
        let outcome = match &table.outcome {
            UnitOutcome::Published { commit_seq } => format!("commit {commit_seq}"),
            UnitOutcome::NothingToDo => "nothing to do".to_string(),
            UnitOutcome::PinMoved { member, .. } => {
                format!("not published: {member} moved (a rerun re-plans)")
            }
            UnitOutcome::Failed {
                message, evidence, ..
            } => {
                format!("failed ({evidence}): {message}")
            }
        };
        println!(
            "  {:<16} fragments {:>4} -> {:<4} folded {:<2} built {:<2} {outcome}",
            table.type_key,
            table.fragments_before,
            table.fragments_after,
            table.indexes_folded.len(),
            table.indexes_built.len()
        );
        for pending in &table.pending_indexes {
            println!("      pending {}: {}", pending.index, pending.reason);
        }
        if let Some(adjacency) = &table.adjacency {
            println!("      adjacency: {}", adjacency_line(adjacency));
        }
    }
}

/// An adjacency artifact's outcome in an optimize run, for people.
fn adjacency_line(adjacency: &omnigraph_maintenance::AdjacencyOutcome) -> String {
    use omnigraph_maintenance::AdjacencyOutcome;
    match adjacency {
        AdjacencyOutcome::Built {
            edges,
            nodes,
            bytes,
            millis,
            ..
        } => format!(
            "built ({edges} {}, {nodes} {}, {bytes} {}, {millis} ms)",
            noun(*edges, "edge", "edges"),
            noun(*nodes, "node", "nodes"),
            noun(*bytes, "byte", "bytes")
        ),
        AdjacencyOutcome::Current { .. } => "current".into(),
        AdjacencyOutcome::Skipped { reason, .. } => format!("skipped: {reason}"),
        AdjacencyOutcome::Failed { message, .. } => {
            format!("failed (traversals read the edge table): {message}")
        }
        AdjacencyOutcome::Cancelled => "cancelled before it was built".into(),
    }
}

pub async fn log(out: &Output, root: &str, limit: usize) -> Result<()> {
    let graph = open(root).await?;
    // Below the floor, what cleanup kept of the commits it reclaimed.
    let page = LogPage::read(&graph, limit).await?;
    let rows: Vec<Vec<String>> = page
        .entries()
        .map(|entry| {
            let kind = match entry.reclaimed {
                true => format!("{} (reclaimed)", entry.operation.kind),
                false => entry.operation.kind,
            };
            vec![
                entry.seq.to_string(),
                omnigraph_server::view::rfc3339_micros(entry.created_at),
                entry.actor,
                kind,
                entry.operation.summary,
                entry.commit_id,
            ]
        })
        .collect();
    // The log reads at most one page: the JSON gives the limit applied, and whether
    // older commits were left out (their count is the oldest shown seq).
    let (applied, left_out) = (page.applied, page.left_out());
    out.emit(page.json(), |_| {
        print_columns(
            &[
                "seq",
                "created_at",
                "actor",
                "operation",
                "summary",
                "commit_id",
            ],
            &rows,
        );
        if left_out > 0 {
            eprintln!(
                "the newest {applied} {}; {left_out} older {} (use --limit)",
                noun(applied as u64, "commit", "commits"),
                noun(left_out, "one", "ones")
            );
        }
    });
    Ok(())
}

pub async fn tables(out: &Output, root: &str, at: Option<&str>) -> Result<()> {
    let graph = open(root).await?;
    let commit = graph.graph().commit(graph.branch(), &at_ref(at)).await?;
    let rows = omnigraph_server::view::table_rows(&graph, &commit);
    out.emit(omnigraph_server::view::tables_json(&graph, &commit), |_| {
        println!("commit {} ({})", commit.seq, commit.commit_id);
        print_rows(&rows);
    });
    Ok(())
}

pub async fn status(out: &Output, root: &str) -> Result<()> {
    let graph = open(root).await?;
    let status = omnigraph_server::view::Status::read(&graph).await?;
    let (head, coverage, adjacency) = (&status.head, &status.coverage, &status.adjacency);
    out.emit(status.json(&graph), |_| {
        println!(
            "graph {} on {}",
            graph.graph().root().canonical(),
            head.branch
        );
        println!(
            "head  commit {} ({}): {} {}",
            head.seq, head.commit_id, head.operation.kind, head.operation.summary
        );
        for pin in &head.pins {
            println!(
                "  {:<20} {:>10} {}",
                pin.type_name,
                pin.row_count,
                noun(pin.row_count, "row", "rows")
            );
        }
        for index in coverage {
            let state = if index.built { "built" } else { "not built" };
            let sizing = index.vector.map_or(String::new(), |v| {
                let refine = v
                    .refine_default
                    .map_or(String::new(), |r| format!(", re-ranking {r} × k"));
                format!(
                    ", {} with {} partitions, {} probed by default{refine}",
                    v.quantisation.lance_name(),
                    v.partitions,
                    v.nprobes_default
                )
            });
            println!(
                "  index {:<28} {state:<10} {} {} uncovered{sizing}",
                format!("{}.{}", index.type_name, index.index),
                index.uncovered_rows,
                noun(index.uncovered_rows, "row", "rows")
            );
        }
        for edge in adjacency {
            let state = if edge.current {
                "current"
            } else {
                "stale (rebuilt by the next optimize)"
            };
            println!("  adjacency {:<24} {state}", edge.edge_type);
        }
    });
    Ok(())
}

fn print_catalog(catalog: &Catalog) {
    println!("schema {}", catalog.hash());
    for type_def in catalog.types() {
        let kind = if type_def.is_node() { "node" } else { "edge" };
        println!(
            "\n{kind} {} (key {})",
            type_def.name(),
            type_def.key_column()
        );
        let width = type_def
            .columns()
            .iter()
            .map(|column| column.name.len())
            .max()
            .unwrap_or(0);
        for column in type_def.columns() {
            let optional = if column.nullable { "?" } else { "" };
            println!(
                "  {:width$}  {}{optional}",
                column.name,
                column.data_type.to_pg()
            );
        }
        for index in type_def.declared_indexes() {
            println!(
                "  index {} on {} ({})",
                index.name,
                index.column,
                index.kind.suffix()
            );
        }
    }
}

/// Moves a load's bar to the bytes read, with the rows and rows per second.
fn show_load_progress(
    bar: Option<&indicatif::ProgressBar>,
    progress: &omnigraph_graph::LoadProgress,
    started: std::time::Instant,
) {
    if let Some(bar) = bar {
        bar.set_position(progress.bytes_read);
        let seconds = started.elapsed().as_secs_f64().max(1e-3);
        bar.set_message(format!(
            "{} {}, {:.0} rows/s",
            progress.rows,
            noun(progress.rows, "row", "rows"),
            progress.rows as f64 / seconds
        ));
    }
}

pub async fn branch_create(out: &Output, root: &str, name: &str, at: Option<&str>) -> Result<()> {
    let graph = open(root).await?;
    let first = graph.create_branch(name, &at_ref(at)).await?;
    out.emit(
        json!({"branch": name, "commit": commit_json(&first)}),
        |_| {
            let fork = first.fork.as_ref();
            println!(
                "created branch {name} from {} at commit {} ({} {}, no data copied)",
                fork.map_or("?", |fork| fork.branch.as_str()),
                fork.map_or(0, |fork| fork.seq),
                first.pins.len(),
                noun(first.pins.len() as u64, "table", "tables")
            );
        },
    );
    Ok(())
}

pub async fn branch_list(out: &Output, root: &str) -> Result<()> {
    let graph = open(root).await?;
    let branches = graph.list_branches().await?;
    let views: Vec<omnigraph_server::view::BranchView<'_>> = branches
        .iter()
        .map(omnigraph_server::view::BranchView::of)
        .collect();
    out.emit(json!({"branches": views}), |_| {
        let rows: Vec<Vec<String>> = branches
            .iter()
            .map(|branch| {
                vec![
                    branch.name.clone(),
                    branch.head_seq.to_string(),
                    omnigraph_server::view::rfc3339_micros(branch.head_created_at),
                    branch.fork.as_ref().map_or_else(
                        || "-".to_string(),
                        |fork| format!("{}@{}", fork.branch, fork.seq),
                    ),
                    omnigraph_server::view::rfc3339_micros(branch.created_at),
                ]
            })
            .collect();
        print_columns(
            &[
                "branch",
                "head",
                "head_created_at",
                "forked_from",
                "created_at",
            ],
            &rows,
        );
    });
    Ok(())
}

pub async fn branch_delete(out: &Output, root: &str, name: &str, confirm: bool) -> Result<()> {
    let graph = open(root).await?;
    if !confirm {
        // Read it, so a name that is no branch says so first.
        let head = graph.graph().commit(name, &CommitRef::Head).await?;
        return Err(OmniError::bad_input(
            InputLocation::in_source("--confirm"),
            format!(
                "deleting branch {name} (head commit {}) needs --confirm; nothing was deleted",
                head.seq
            ),
        ));
    }
    let last = graph.delete_branch(name).await?;
    out.emit(
        json!({"branch": name, "commit": commit_json(&last)}),
        |_| {
            println!(
                "deleted branch {name} at commit {}; cleanup reclaims the files only it kept",
                last.seq
            );
        },
    );
    Ok(())
}

fn print_merge(report: &omnigraph_graph::MergeReport) {
    println!(
        "merge {} (commit {}) into {} (commit {}), base {} commit {}",
        report.from_branch,
        report.from_seq,
        report.into_branch,
        report.into_seq,
        report.base_branch,
        report.base_seq
    );
    let rows: Vec<Vec<String>> = report
        .tables
        .iter()
        .map(|table| {
            vec![
                table.type_name.clone(),
                serde_json::to_value(table.action)
                    .ok()
                    .and_then(|value| value.as_str().map(str::to_string))
                    .unwrap_or_default(),
                table.taken.to_string(),
                table.deleted.to_string(),
            ]
        })
        .collect();
    print_columns(&["type", "action", "taken", "deleted"], &rows);
}

pub async fn merge(out: &Output, root: &str, source: &str, into: &str) -> Result<i32> {
    let graph = open(root).await?.with_branch(into)?;
    let report = graph.merge(source).await?;
    out.emit(merge_json(&report, false), |_| {
        print_merge(&report);
        print_commit("merged", report.commit.as_ref());
    });
    Ok(omnigraph_core::EXIT_SUCCESS)
}

/// A dry run exits 4 when the merge would conflict, listing the conflicts.
pub async fn merge_dry_run(out: &Output, root: &str, source: &str, into: &str) -> Result<i32> {
    let graph = open(root).await?.with_branch(into)?;
    let report = graph.merge_dry_run(source).await?;
    out.emit(merge_json(&report, true), |_| {
        print_merge(&report);
        for conflict in &report.conflicts {
            println!(
                "conflict: {} {} ({:?})",
                conflict.type_name, conflict.key, conflict.kind
            );
        }
        if report.conflicts.is_empty() {
            println!("dry run: nothing was published");
        }
    });
    Ok(if report.conflicts.is_empty() {
        omnigraph_core::EXIT_SUCCESS
    } else {
        omnigraph_core::EXIT_CONFLICT
    })
}
