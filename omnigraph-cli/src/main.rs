//! `omnigraph`: the command line over an OmniGraph root.
//!
//! Every command takes `--json` and then prints one JSON document on stdout and nothing
//! else there; without it, aligned tables for people. Errors print their code, message
//! and evidence on stderr and exit with the code from the core error table.

// The commands await deep futures (load -> ingest -> staging -> publisher -> Lance);
// computing their layout exceeds the default query depth of 128.
#![recursion_limit = "256"]

mod commands;
mod demo;
mod duration;
mod output;
mod serve;

use clap::{Parser, Subcommand, ValueEnum};
use omnigraph_core::OmniError;
use std::path::PathBuf;
use std::process::ExitCode;

/// mimalloc, not glibc's allocator: a served query makes many small allocations in
/// DataFusion and Lance, and with glibc's a fifth of the server's CPU was `malloc` and
/// `free`. In `omnigraph-bench --serve` the server's CPU per read fell by 15-25% and
/// the peak memory beside optimize by about a fifth; `omnigraph-bench --maintenance`
/// stayed within its envelope, optimize taking up to 13% longer (`docs/performance.md`,
/// "The allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// OmniGraph: typed property graphs kept as Lance tables, published by exact CAS.
#[derive(Parser)]
#[command(name = "omnigraph", version, about, long_about = None)]
pub struct Cli {
    /// Print one JSON document on stdout and nothing else there.
    #[arg(long, global = true)]
    json: bool,
    /// More logging on stderr (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// A setting for an s3:// root's store, as KEY=VALUE (endpoint, region,
    /// allow_http, ...); repeatable. The AWS_* variables are read too.
    #[arg(long = "storage-option", global = true, value_name = "KEY=VALUE")]
    storage_options: Vec<String>,
    /// The branch every read and write of the command goes to.
    #[arg(long, global = true, default_value = "main", value_name = "NAME")]
    branch: String,
    #[command(subcommand)]
    command: Command,
}

/// How a load meets existing keys.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ModeArg {
    /// Every key must be new.
    Append,
    /// Upsert by key.
    Merge,
}

/// The format of a file to load.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum FormatArg {
    /// JSON lines, each with its `type`.
    Jsonl,
    /// CSV with a header line (needs --type).
    Csv,
    /// An Arrow IPC file (needs --type).
    Arrow,
    /// A Parquet file (needs --type).
    Parquet,
}

/// How a query's rows are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RowsFormatArg {
    /// Aligned columns.
    Table,
    /// One JSON array per row, columns in order.
    Json,
    /// Comma-separated values with a header line.
    Csv,
}

/// The format of an export.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExportFormatArg {
    /// JSON lines in the load format, `{"type": T, ...}` per row.
    Jsonl,
    /// An Arrow IPC file in the type's columns (needs --output).
    Arrow,
    /// A Parquet file in the type's columns (needs --output).
    Parquet,
}

/// Which way to follow an edge.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum DirectionArg {
    /// Source to destination.
    Out,
    /// Destination to source.
    In,
}

#[derive(Subcommand)]
enum Command {
    /// Create a graph at ROOT with the schema in FILE.
    Init {
        /// A local path or a URI (file://, memory://, s3://).
        root: String,
        /// The `.pg` schema file.
        #[arg(long)]
        schema: PathBuf,
    },
    /// Load a JSONL file (one object per line, each with a "type").
    Load {
        /// The graph root.
        root: String,
        /// The file: JSONL, CSV, Parquet or Arrow IPC.
        file: PathBuf,
        /// append: keys must be new; merge: upsert by key.
        #[arg(long, value_enum, default_value = "append")]
        mode: ModeArg,
        /// The file's format (default: from its extension: .csv, .parquet, .arrow, else
        /// JSONL).
        #[arg(long, value_enum)]
        format: Option<FormatArg>,
        /// The type of every row of a CSV, Parquet or Arrow file.
        #[arg(long = "type")]
        type_name: Option<String>,
    },
    /// Insert rows of one type given as a JSON object or array.
    Insert {
        /// The graph root.
        root: String,
        /// The node or edge type.
        #[arg(long = "type")]
        type_name: String,
        /// A JSON object, or an array of objects. (`--json` is taken by the output
        /// switch every command has.)
        #[arg(long)]
        rows: String,
    },
    /// Set properties on the rows of a type where a predicate holds.
    Update {
        /// The graph root.
        root: String,
        /// The type.
        #[arg(long = "type")]
        type_name: String,
        /// A SQL predicate, e.g. "age > 30".
        #[arg(long = "where")]
        predicate: String,
        /// prop=value (value as JSON, or a bare string).
        #[arg(long = "set", required = true)]
        assignments: Vec<String>,
    },
    /// Delete the rows of a type where a predicate holds (nodes take their edges).
    Delete {
        /// The graph root.
        root: String,
        /// The type.
        #[arg(long = "type")]
        type_name: String,
        /// A SQL predicate.
        #[arg(long = "where")]
        predicate: String,
    },
    /// Schema files and the graph's schema.
    #[command(subcommand)]
    Schema(SchemaCommand),
    /// Every row of one type at a commit, in a file `load` reads back (JSON lines on
    /// stdout without --output).
    Export {
        /// The graph root.
        root: String,
        /// The type.
        #[arg(long = "type")]
        type_name: String,
        /// The format.
        #[arg(long, value_enum, default_value_t = ExportFormatArg::Jsonl)]
        format: ExportFormatArg,
        /// The file to write (replaced whole when the export ends, never left short).
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// A commit seq or id (default: the head).
        #[arg(long)]
        at: Option<String>,
    },
    /// The row of a type with a key.
    Get {
        /// The graph root.
        root: String,
        /// The type.
        #[arg(long = "type")]
        type_name: String,
        /// The key.
        key: String,
        /// A commit seq or id (default: the head).
        #[arg(long)]
        at: Option<String>,
    },
    /// A Cypher query (`docs/query.md`), or with `--type` the rows of one type,
    /// filtered, projected and limited.
    Query {
        /// The graph root.
        root: String,
        /// The Cypher query, e.g. 'MATCH (p:Person) RETURN p.name'.
        #[arg(conflicts_with_all = ["type_name", "predicate", "select"])]
        cypher: Option<String>,
        /// A query parameter, NAME=VALUE (VALUE read as JSON when it parses, else as a string).
        #[arg(long = "param", value_name = "NAME=VALUE")]
        params: Vec<String>,
        /// How to print a Cypher query's rows.
        #[arg(long, value_enum, default_value_t = RowsFormatArg::Table)]
        format: RowsFormatArg,
        /// Print planning and execution time on stderr.
        #[arg(long)]
        timing: bool,
        /// The query's memory budget in bytes (default 1 GiB).
        #[arg(long)]
        memory: Option<usize>,
        /// The shorthand: the type whose rows to read.
        #[arg(long = "type")]
        type_name: Option<String>,
        /// A SQL predicate.
        #[arg(long = "where")]
        predicate: Option<String>,
        /// Columns, comma-separated.
        #[arg(long)]
        select: Option<String>,
        /// The most rows.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// A commit seq or id (default: the head).
        #[arg(long)]
        at: Option<String>,
    },
    /// Nodes reached from a node through an edge type.
    Neighbors {
        /// The graph root.
        root: String,
        /// The node type.
        #[arg(long = "type")]
        type_name: String,
        /// The node's key.
        key: String,
        /// The edge type.
        #[arg(long)]
        edge: String,
        /// out: along the edge; in: against it.
        #[arg(long, value_enum, default_value = "out")]
        direction: DirectionArg,
        /// The most neighbours.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// A commit seq or id (default: the head).
        #[arg(long)]
        at: Option<String>,
    },
    /// Follow edge types from nodes of one type, one step after another.
    Traverse {
        /// The graph root.
        root: String,
        /// The start nodes' type.
        #[arg(long = "type")]
        type_name: String,
        /// The start nodes' keys.
        #[arg(required = true)]
        keys: Vec<String>,
        /// A step, `EDGE:out`, `EDGE:in` or `EDGE:both`, taken in the order given.
        #[arg(long = "step", required = true)]
        steps: Vec<String>,
        /// A filter on the nodes the last step reaches (SQL over their properties).
        #[arg(long = "where")]
        filter: Option<String>,
        /// The most nodes each step reaches, in key order.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// One path (nodes and edge ids) to each node reached.
        #[arg(long)]
        paths: bool,
        /// A commit seq or id (default: the head).
        #[arg(long)]
        at: Option<String>,
    },
    /// Full-text or vector search on a property: one retrieval leg of the query
    /// language (`CALL omni.text` or `omni.vector`), run by its planner.
    Search {
        /// The graph root.
        root: String,
        /// The type.
        #[arg(long = "type")]
        type_name: String,
        /// The property.
        #[arg(long)]
        property: String,
        /// Text to match (needs @index(fts), built).
        #[arg(long, conflicts_with = "vector", required_unless_present = "vector")]
        text: Option<String>,
        /// A query vector: comma-separated numbers.
        #[arg(long, value_delimiter = ',', allow_hyphen_values = true)]
        vector: Option<Vec<f32>>,
        /// How many results.
        #[arg(short, default_value_t = 10)]
        k: usize,
        /// A Cypher predicate on `n`, the node searched (`n.lang = 'en'`): only the
        /// nodes it keeps are ranked.
        #[arg(long = "where")]
        predicate: Option<String>,
        /// How a text search matches its words: any (the default), all, phrase, or
        /// prefix (any, the last word a prefix).
        #[arg(long = "match", value_parser = ["any", "all", "phrase", "prefix"])]
        matching: Option<String>,
        /// A commit seq or id (default: the head).
        #[arg(long)]
        at: Option<String>,
    },
    /// Build every declared index the tables lack (Ctrl-C cancels; twice exits).
    BuildIndexes {
        /// The graph root.
        root: String,
    },
    /// Rebuild one built index whole under its name: a full-text index, which
    /// optimize does not fold, then covers every row (Ctrl-C cancels; twice exits at
    /// once).
    RebuildIndex {
        /// The graph root.
        root: String,
        /// The type that declares the index.
        #[arg(long = "type")]
        type_name: String,
        /// The index's name (`omnigraph status` lists them, e.g. `name_fts`).
        #[arg(long)]
        index: String,
    },
    /// Compact each table and fold or build its indexes, one commit per table
    /// (Ctrl-C cancels at the next cancel point; twice exits at once).
    Optimize {
        /// The graph root.
        root: String,
        /// Tables optimized at once, 1 or 2 (default: OMNIGRAPH_MAINTENANCE_CONCURRENCY, or 1).
        #[arg(long)]
        concurrency: Option<usize>,
    },
    /// Reclaim storage no retained commit needs. Previews by default; --confirm deletes
    /// (Ctrl-C cancels before the next deletion; twice exits at once).
    #[command(group(clap::ArgGroup::new("policy").required(true).multiple(true).args(["keep", "older_than"])))]
    Cleanup {
        /// The graph root.
        root: String,
        /// Keep the newest N commits of each branch readable.
        #[arg(long)]
        keep: Option<u64>,
        /// Keep commits younger than this readable (`90s`, `30m`, `12h`, `7d`).
        #[arg(long, value_parser = duration::parse)]
        older_than: Option<std::time::Duration>,
        /// Keep every commit and file younger than this (default 24h; at least 1m). A
        /// longer grace an earlier run recorded stays in force.
        #[arg(long, value_parser = duration::parse)]
        grace: Option<std::time::Duration>,
        /// Record `--grace` even when it is shorter than the recorded one: only while
        /// no cleanup with a longer grace runs on the root.
        #[arg(long, requires = "grace")]
        lower_grace: bool,
        /// Delete (without it, only preview what would be deleted).
        #[arg(long)]
        confirm: bool,
    },
    /// Report per table: foreign drift, missing pins and unpublished staging (read-only;
    /// exits 3 when it finds drift or missing pins).
    Repair {
        /// The graph root.
        root: String,
    },
    /// The commit log, newest first.
    Log {
        /// The graph root.
        root: String,
        /// The most commits.
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
    /// Each table's Lance URI and pinned version, for any Lance reader.
    Tables {
        /// The graph root.
        root: String,
        /// A commit seq or id (default: the head).
        #[arg(long)]
        at: Option<String>,
    },
    /// The head, the tables and their index coverage.
    Status {
        /// The graph root.
        root: String,
    },
    /// Create, list or delete branches.
    #[command(subcommand)]
    Branch(BranchCommand),
    /// Merge branch SOURCE into --into (default: --branch): one commit, or the
    /// conflicts and nothing published.
    Merge {
        /// The graph root.
        root: String,
        /// The branch to merge from.
        source: String,
        /// The branch to merge into (default: --branch, which defaults to main).
        #[arg(long)]
        into: Option<String>,
        /// Report what the merge would do, conflicts included, and change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Serve graphs over HTTP until Ctrl-C (`docs/server.md`): ROOT named after its
    /// folder, and each --graph NAME=ROOT.
    Serve {
        /// A graph root to serve, named after its last path segment.
        root: Option<String>,
        /// Serve the graph at ROOT as NAME; repeatable.
        #[arg(long = "graph", value_name = "NAME=ROOT")]
        graphs: Vec<String>,
        /// The address to listen on (port 0: any free port).
        #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
        listen: std::net::SocketAddr,
        /// The tokens file (`omnigraph token add`); every request needs a token in it.
        #[arg(long, value_name = "FILE")]
        tokens: Option<PathBuf>,
        /// Admit every request with every role, without a token. Announced on every start.
        #[arg(long)]
        insecure_no_auth: bool,
        /// Most bytes of a JSON request body (default 16 MiB).
        #[arg(long, value_name = "BYTES")]
        body_bytes_max: Option<usize>,
        /// Most bytes of a load's body (default 4 GiB).
        #[arg(long, value_name = "BYTES")]
        load_bytes_max: Option<u64>,
        /// Most time a query may take (default 30s).
        #[arg(long, value_parser = duration::parse, value_name = "DURATION")]
        query_time: Option<std::time::Duration>,
        /// Each query's memory budget in bytes (default 1 GiB).
        #[arg(long, value_name = "BYTES")]
        query_memory: Option<usize>,
        /// Most memory a query's rows may take while the server gathers its answer;
        /// past it, 422 result_too_large (default 64 MiB).
        #[arg(long, value_name = "BYTES")]
        query_result_bytes_max: Option<usize>,
        /// Most time a client may pause while sending a body (default 600s).
        #[arg(long, value_parser = duration::parse, value_name = "DURATION")]
        request_time: Option<std::time::Duration>,
        /// Most time a client may take to send a request's headers; past it, the
        /// connection is closed (default 30s).
        #[arg(long, value_parser = duration::parse, value_name = "DURATION")]
        header_read_time: Option<std::time::Duration>,
        /// Most requests one token has in flight; past it, 429 (default 32).
        #[arg(long, value_name = "N")]
        concurrent_requests_per_token: Option<usize>,
        /// Most requests one token makes per second, in bursts of as many; past it, 429
        /// (default: no rate limit).
        #[arg(long, value_name = "N")]
        requests_per_second_per_token: Option<u32>,
    },
    /// The tokens file of `omnigraph serve`: add, list, revoke.
    #[command(subcommand)]
    Token(TokenCommand),
    /// The main job on an embedded default: build a sample graph and query it.
    Demo {
        /// Where to build it.
        #[arg(long, default_value = "demo.omni")]
        root: PathBuf,
        /// People in the sample graph.
        #[arg(long, default_value_t = 3_000)]
        people: usize,
    },
}

/// `omnigraph token`: the tokens file of a server.
#[derive(Subcommand)]
enum TokenCommand {
    /// Make a token with a role (on one graph, or on all): prints it once and stores
    /// only its hash.
    Add {
        /// The tokens file (made when missing).
        file: PathBuf,
        /// read, write, maintain or admin; each includes the ones before it.
        #[arg(long)]
        role: String,
        /// The graph the role is on (default: every graph).
        #[arg(long, value_name = "NAME")]
        graph: Option<String>,
    },
    /// The tokens' ids, roles and graphs (never the tokens).
    List {
        /// The tokens file.
        file: PathBuf,
    },
    /// Remove a token; a running server stops admitting it at its next request.
    Revoke {
        /// The tokens file.
        file: PathBuf,
        /// The token's id (`tok_...`, from `token list`).
        id: String,
    },
}

#[derive(Subcommand)]
enum BranchCommand {
    /// Create branch NAME from a commit of --branch (its head unless --at): no data is
    /// copied.
    Create {
        /// The graph root.
        root: String,
        /// The new branch.
        name: String,
        /// A commit seq or id of --branch to create it from (default: the head).
        #[arg(long)]
        at: Option<String>,
    },
    /// The live branches: each one's head, fork point and age.
    List {
        /// The graph root.
        root: String,
    },
    /// Delete branch NAME (never main); cleanup then reclaims what only it kept.
    Delete {
        /// The graph root.
        root: String,
        /// The branch to delete.
        name: String,
        /// Delete it (without this, nothing is deleted and the command fails).
        #[arg(long)]
        confirm: bool,
    },
}

#[derive(Subcommand)]
enum SchemaCommand {
    /// Check a schema file and show its tables, columns, indexes and content hash.
    Check {
        /// The `.pg` file.
        file: PathBuf,
    },
    /// Move a graph to the schema in FILE (data loss needs --force).
    Apply {
        /// The graph root.
        root: String,
        /// The `.pg` file.
        file: PathBuf,
        /// Allow changes that lose data.
        #[arg(long)]
        force: bool,
    },
    /// The schema in force at the head.
    Show {
        /// The graph root.
        root: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error[internal]: cannot start the runtime: {error}");
            return ExitCode::from(1);
        }
    };
    let json = cli.json;
    // Tests of this binary arm failpoints through the environment.
    match runtime.block_on(omnigraph_core::failpoints::run_armed_from_env(run(cli))) {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(error) => output::report_error(&error, json),
    }
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Runs a command; returns its exit status (a maintenance report's worst outcome, or
/// success).
async fn run(cli: Cli) -> Result<i32, OmniError> {
    let out = output::Output::new(cli.json);
    let mut options = omnigraph_core::storage::StorageOptions::new();
    for pair in &cli.storage_options {
        options = options.with_pair(pair)?;
    }
    commands::use_storage_options(options);
    commands::use_branch(&cli.branch)?;
    let done = match cli.command {
        Command::Init { root, schema } => commands::init(&out, &root, &schema).await,
        Command::Load {
            root,
            file,
            mode,
            format,
            type_name,
        } => {
            let format = match format {
                Some(FormatArg::Jsonl) => omnigraph_graph::InputFormat::Jsonl,
                Some(FormatArg::Csv) => omnigraph_graph::InputFormat::Csv,
                Some(FormatArg::Arrow) => omnigraph_graph::InputFormat::ArrowIpc,
                Some(FormatArg::Parquet) => omnigraph_graph::InputFormat::Parquet,
                None => omnigraph_graph::InputFormat::of_path(&file),
            };
            commands::load(&out, &root, &file, mode, format, type_name.as_deref()).await
        }
        Command::Insert {
            root,
            type_name,
            rows,
        } => commands::insert(&out, &root, &type_name, &rows).await,
        Command::Update {
            root,
            type_name,
            predicate,
            assignments,
        } => commands::update(&out, &root, &type_name, &predicate, &assignments).await,
        Command::Delete {
            root,
            type_name,
            predicate,
        } => commands::delete(&out, &root, &type_name, &predicate).await,
        Command::Schema(SchemaCommand::Check { file }) => commands::schema_check(&out, &file),
        Command::Schema(SchemaCommand::Apply { root, file, force }) => {
            commands::schema_apply(&out, &root, &file, force).await
        }
        Command::Schema(SchemaCommand::Show { root }) => commands::schema_show(&out, &root).await,
        Command::Export {
            root,
            type_name,
            format,
            output,
            at,
        } => {
            let format = match format {
                ExportFormatArg::Jsonl => omnigraph_graph::ExportFormat::JsonLines,
                ExportFormatArg::Arrow => omnigraph_graph::ExportFormat::ArrowFile,
                ExportFormatArg::Parquet => omnigraph_graph::ExportFormat::Parquet,
            };
            let request = commands::ExportRequest {
                type_name,
                format,
                output,
                at,
            };
            commands::export(&out, &root, request).await
        }
        Command::Get {
            root,
            type_name,
            key,
            at,
        } => commands::get(&out, &root, &type_name, &key, at.as_deref()).await,
        Command::Query {
            root,
            cypher,
            params,
            format,
            timing,
            memory,
            type_name,
            predicate,
            select,
            limit,
            at,
        } => match (cypher, type_name) {
            (Some(cypher), None) => {
                let request = commands::CypherRequest {
                    text: cypher,
                    params,
                    format,
                    timing,
                    memory,
                };
                commands::cypher(&out, &root, request, at.as_deref()).await
            }
            (None, Some(type_name)) => {
                commands::query(
                    &out,
                    &root,
                    &type_name,
                    predicate,
                    select,
                    limit,
                    at.as_deref(),
                )
                .await
            }
            _ => Err(omnigraph_core::OmniError::bad_input(
                omnigraph_core::InputLocation::in_source("query"),
                "give a Cypher query ('MATCH ... RETURN ...') or --type T, not both",
            )),
        },
        Command::Neighbors {
            root,
            type_name,
            key,
            edge,
            direction,
            limit,
            at,
        } => {
            commands::neighbors(
                &out,
                &root,
                &type_name,
                &key,
                &edge,
                direction,
                limit,
                at.as_deref(),
            )
            .await
        }
        Command::Traverse {
            root,
            type_name,
            keys,
            steps,
            filter,
            limit,
            paths,
            at,
        } => {
            let request = commands::TraverseRequest {
                type_name: &type_name,
                keys: &keys,
                steps: &steps,
                filter: filter.as_deref(),
                limit,
                paths,
            };
            commands::traverse(&out, &root, &request, at.as_deref()).await
        }
        Command::Search {
            root,
            type_name,
            property,
            text,
            vector,
            k,
            predicate,
            matching,
            at,
        } => {
            let query = commands::SearchQuery {
                text,
                vector,
                k,
                predicate,
                matching,
            };
            commands::search(&out, &root, &type_name, &property, query, at.as_deref()).await
        }
        Command::BuildIndexes { root } => commands::build_indexes(&out, &root).await,
        Command::RebuildIndex {
            root,
            type_name,
            index,
        } => commands::rebuild_index(&out, &root, &type_name, &index).await,
        Command::Optimize { root, concurrency } => {
            return commands::optimize(&out, &root, concurrency).await;
        }
        Command::Cleanup {
            root,
            keep,
            older_than,
            grace,
            lower_grace,
            confirm,
        } => {
            let policy = omnigraph_maintenance::CleanupSettings {
                keep,
                older_than,
                grace,
                lower_grace,
            };
            return if confirm {
                commands::cleanup(&out, &root, policy).await
            } else {
                commands::cleanup_preview(&out, &root, policy).await
            };
        }
        Command::Repair { root } => return commands::repair(&out, &root).await,
        Command::Log { root, limit } => commands::log(&out, &root, limit).await,
        Command::Tables { root, at } => commands::tables(&out, &root, at.as_deref()).await,
        Command::Status { root } => commands::status(&out, &root).await,
        Command::Branch(BranchCommand::Create { root, name, at }) => {
            commands::branch_create(&out, &root, &name, at.as_deref()).await
        }
        Command::Branch(BranchCommand::List { root }) => commands::branch_list(&out, &root).await,
        Command::Branch(BranchCommand::Delete {
            root,
            name,
            confirm,
        }) => commands::branch_delete(&out, &root, &name, confirm).await,
        Command::Merge {
            root,
            source,
            into,
            dry_run,
        } => {
            let into = into.unwrap_or(cli.branch);
            return if dry_run {
                commands::merge_dry_run(&out, &root, &source, &into).await
            } else {
                commands::merge(&out, &root, &source, &into).await
            };
        }
        Command::Serve {
            root,
            graphs,
            listen,
            tokens,
            insecure_no_auth,
            body_bytes_max,
            load_bytes_max,
            query_time,
            query_memory,
            query_result_bytes_max,
            request_time,
            header_read_time,
            concurrent_requests_per_token,
            requests_per_second_per_token,
        } => {
            let defaults = omnigraph_server::Limits::default();
            let limits = omnigraph_server::Limits {
                request_body_bytes: body_bytes_max.unwrap_or(defaults.request_body_bytes),
                load_body_bytes: load_bytes_max.unwrap_or(defaults.load_body_bytes),
                query_time: query_time.unwrap_or(defaults.query_time),
                query_memory_bytes: query_memory,
                query_result_bytes: query_result_bytes_max.unwrap_or(defaults.query_result_bytes),
                request_time: request_time.unwrap_or(defaults.request_time),
                header_read_time: header_read_time.unwrap_or(defaults.header_read_time),
                token_concurrent_requests: concurrent_requests_per_token
                    .unwrap_or(defaults.token_concurrent_requests),
                token_requests_per_second: requests_per_second_per_token,
            };
            let request = serve::ServeRequest {
                root,
                graphs,
                listen,
                tokens,
                insecure_no_auth,
                limits,
            };
            serve::serve(&out, request, commands::storage_options().clone()).await
        }
        Command::Token(TokenCommand::Add { file, role, graph }) => {
            serve::token_add(&out, &file, &role, graph.as_deref())
        }
        Command::Token(TokenCommand::List { file }) => serve::token_list(&out, &file),
        Command::Token(TokenCommand::Revoke { file, id }) => serve::token_revoke(&out, &file, &id),
        Command::Demo { root, people } => demo::run(&out, &root, people).await,
    };
    done.map(|()| omnigraph_core::EXIT_SUCCESS)
}
