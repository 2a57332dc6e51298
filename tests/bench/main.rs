//! `cargo xtask bench`: OmniGraph's ingest measured against a baseline run in the same
//! process. Figures are for the dev profile the workspace builds in (dependencies at
//! opt-level 1); compare ratios, not absolute times, across machines.
//!
//! - load: a JSONL file of N Person rows (default 200,000) through `Omnigraph::load`,
//!   against the same file decoded by arrow-json and written by plain Lance in one call;
//!   and the same rows as a Parquet file through `Omnigraph::load_columnar`, against
//!   the parquet crate's reader and the same plain Lance write; in 5 interleaved rounds,
//!   each side's median (every round's time is in `load_rounds`).
//! - insert: single-row inserts on a warm handle: requests (exact, from the root's
//!   probe) and wall time per insert, before and after the key index is built.
//! - reads: on M Person rows (default 100,000) with 16-dimensional embeddings and one
//!   edge each to 1,000 companies, the median latency of `neighbors` and `nearest`
//!   without indexes and with them, as ratios.
//!
//! - optimize (with `--optimize`): identical copies of a K-row table (default
//!   1,000,000) made by 200 appends with a BTree and an IVF index; OmniGraph's optimize
//!   against Lance's own linear `compact_files` then `optimize_indices`, as a time ratio,
//!   with the peak resident memory of each (Linux VmHWM, reset between phases).
//!
//! - maintenance (with `--maintenance`, alone): two identical K-row tables (default
//!   1,000,000, 200 appends) with a BTree, an IVF and a full-text index. Optimize at the
//!   default budget on each: once with Lance's work on the maintenance runtime, once on
//!   the caller's runtime, while a trivial task on the caller's runtime sleeps 1 ms in a
//!   loop; its wake-up delay (p50, p99) against the same task with nothing running, and
//!   the peak resident memory of each optimize.
//!
//! - cleanup (with `--cleanup`, alone): the footprint of a graph of 4 types after U
//!   single-row updates (default 4,000), optimize and `cleanup --keep 1` at the minimum
//!   grace period, against a fresh graph loaded with the same final rows and indexes;
//!   and deletes per second with cleanup's fan-out of 8 against serial deletes of the
//!   same kind of garbage (G files each, default 2,000), as a ratio in one run.
//!
//! - graph (with `--graph`, alone): N Person nodes (default 1,000,000) and E edges
//!   between them (default 5,000,000) as Parquet files, loaded with keys and endpoints
//!   checked, against the parquet crate's reader and plain Lance writes; time and peak
//!   resident memory of each. `--kuzu-dir D` keeps the files in D for
//!   `tools/bench/kuzu_load.py`. `--uuid-keys` gives the nodes 36-character UUID
//!   keys instead of short ones (`p123`): more keys than one key set holds.
//!
//! - traverse (with `--traverse`, alone): N Person nodes (default 1,000,000) with E
//!   power-law Knows edges (default 5,000,000, in 20 loads), N/10 companies and N WorksAt edges; the
//!   p50 and p99 of 1-hop and 2-hop traversals from random start nodes on the scan path
//!   and, after `build_indexes`, on the BTree path; then, after `optimize` builds the
//!   adjacency artifacts, on the artifact and again on the BTree path beside it (a
//!   handle that never reads artifacts), with the same results by every path, and the
//!   artifact's build time and bytes against the Knows unit's time.
//!
//! - merge (with `--merge`, alone): a branch updates M rows (`--changed`, default
//!   100,000) of a Person table of N rows (`--rows`, default 1,000,000) while main adds
//!   one; the time of the merge's dry run and of the merge (a row merge), and its peak
//!   resident memory. `--pass-rows P` sets the merge budget's rows per pass (default
//!   `MERGE_PASS_ROWS_MAX`): fewer rows per pass, more passes and less memory.
//!
//! - serve (with `--serve`, alone): a graph of N people (`--people`, default 1,000,000)
//!   and E Knows edges (`--edges`, default 2,000,000) served in this process and driven
//!   over loopback by concurrent HTTP clients: reads at 1, 8 and 32 clients, inserts
//!   from 8 (also with every store request held 17 ms), the read mix beside optimize on
//!   1M rows with Lance on the maintenance runtime and on the serving one (`serve.rs`).
//!
//! - retrieval (with `--retrieval`, alone): N vectors of 128 float32 (`--vectors`,
//!   default 1,000,000) from a seeded Gaussian mixture and Q queries (`--queries`,
//!   default 1,000): OmniGraph's index build (its own sizing) and `omni.vector` at the
//!   default probe count and twice it, recall@10 against exact search, p50 and p99,
//!   build time and index bytes; `--retrieval-dir D` keeps the data for
//!   `tools/bench/retrieval_pylance.py`, which does the same with pylance (`retrieval.rs`);
//!   then hybrid retrieval: D documents (`--docs`, default 200,000) with text, embeddings
//!   and authors, a vector leg, a BM25 leg and their fusion under a one-hop graph filter,
//!   timed over `--hybrid-queries` (default 200) and checked against brute force on a
//!   sample (`hybrid.rs`; `--hybrid` runs it alone).
//!
//! `--rows N`, `--read-rows M`, `--nodes N`, `--edges E`, `--optimize-rows K`, `--updates U` and `--garbage G`
//! change the sizes; `--json` prints one JSON document.

// Deep futures (writers -> staging -> publisher -> Lance) exceed the default query
// depth of 128 when their layout is computed.
#![recursion_limit = "256"]

mod hybrid;
mod query;
mod retrieval;
mod serve;

use omnigraph_core::adapter;
use omnigraph_graph::{Direction, LoadMode, Omnigraph};
use omnigraph_maintenance::MaintenanceExt;
use omnigraph_publish::CommitRef;
use omnigraph_tests::SOCIAL_SCHEMA;
use rand::{Rng, SeedableRng, rngs::StdRng};
use serde_json::{Map, Value, json};
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Interleaved rounds of each load and its baseline: one run of each swung by a tenth
/// from run to run on a 2-core machine; the median of a few does not.
const LOAD_ROUNDS: usize = 5;
/// Single-row inserts timed on the warm handle.
const INSERTS: usize = 50;
/// Queries timed per read kind.
const READ_QUERIES: usize = 30;
/// Companies the read benchmark's edges point at.
const COMPANIES: usize = 1_000;
/// The read benchmark's vector dimension (the schema's `Vector(16)`).
const DIMENSION: usize = 16;

const READ_SCHEMA: &str = "
node Person { id: String @key, name: String @index(fts), age: Int32? @index, embedding: Vector(16)? @index(vector) }
node Company { id: String @key, name: String }
edge WorksAt: Person -> Company { since: Int32? }
";

fn argument(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|arg| arg == name)
        .and_then(|at| args.get(at + 1))
        .and_then(|value| value.parse::<usize>().ok())
        .unwrap_or(default)
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// Median latencies of neighbors and nearest on `graph` at its head.
async fn read_latencies(
    graph: &Omnigraph,
    rng: &mut StdRng,
    people: usize,
) -> (Duration, Duration) {
    let mut neighbor_times = Vec::with_capacity(READ_QUERIES);
    let mut nearest_times = Vec::with_capacity(READ_QUERIES);
    for _ in 0..READ_QUERIES {
        let key = json!(format!("p{}", rng.random_range(0..people)));
        let started = Instant::now();
        graph
            .neighbors(
                "Person",
                &key,
                "WorksAt",
                Direction::Out,
                10,
                &CommitRef::Head,
            )
            .await
            .expect("neighbors");
        neighbor_times.push(started.elapsed());
        let query: Vec<f32> = (0..DIMENSION).map(|_| rng.random::<f32>()).collect();
        let started = Instant::now();
        graph
            .nearest("Person", "embedding", &query, 10, None, &CommitRef::Head)
            .await
            .expect("nearest");
        nearest_times.push(started.elapsed());
    }
    (median(neighbor_times), median(nearest_times))
}

/// The read benchmark: latencies without and with indexes.
async fn read_bench(dir: &std::path::Path, people: usize) -> Value {
    let mut rng = StdRng::seed_from_u64(42);
    let path = dir.join("read.jsonl");
    {
        let mut file = std::io::BufWriter::new(std::fs::File::create(&path).expect("create jsonl"));
        for company in 0..COMPANIES {
            writeln!(
                file,
                "{}",
                json!({"type": "Company", "id": format!("c{company}"), "name": "co"})
            )
            .expect("write");
        }
        for index in 0..people {
            let embedding: Vec<f32> = (0..DIMENSION).map(|_| rng.random::<f32>()).collect();
            let row = json!({"type": "Person", "id": format!("p{index}"), "name": "x", "embedding": embedding});
            writeln!(file, "{row}").expect("write");
            let edge = json!({"type": "WorksAt", "id": format!("e{index}"), "src": format!("p{index}"), "dst": format!("c{}", index % COMPANIES)});
            writeln!(file, "{edge}").expect("write");
        }
    }
    let uri = dir.join("read-graph").display().to_string();
    let graph = Omnigraph::create(&uri, READ_SCHEMA)
        .await
        .expect("create graph");
    graph.load(&path, LoadMode::Append).await.expect("load");
    let (neighbors_plain, nearest_plain) = read_latencies(&graph, &mut rng, people).await;
    graph
        .maintenance()
        .build_indexes()
        .await
        .expect("build indexes");
    let (neighbors_indexed, nearest_indexed) = read_latencies(&graph, &mut rng, people).await;
    json!({
        "read_rows": people,
        "neighbors_ms_without_indexes": millis(neighbors_plain),
        "neighbors_ms_with_indexes": millis(neighbors_indexed),
        "neighbors_speedup": neighbors_plain.as_secs_f64() / neighbors_indexed.as_secs_f64().max(f64::EPSILON),
        "nearest_ms_without_indexes": millis(nearest_plain),
        "nearest_ms_with_indexes": millis(nearest_indexed),
        "nearest_speedup": nearest_plain.as_secs_f64() / nearest_indexed.as_secs_f64().max(f64::EPSILON),
    })
}

fn person(index: usize) -> Map<String, Value> {
    json!({"type": "Person", "id": format!("p{index}"), "name": format!("person {index}"), "age": (index % 90) as i32})
        .as_object()
        .cloned()
        .unwrap_or_default()
}

const OPTIMIZE_SCHEMA: &str = "node Item { id: Int64 @key, v: Vector(16)? @index(vector) }";
/// Appends that build the optimize benchmark's table.
const OPTIMIZE_APPENDS: usize = 200;

/// Peak resident memory since the last reset, in MiB (Linux; 0 elsewhere).
pub(crate) fn peak_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("VmHWM:"))
                .and_then(|line| line.split_whitespace().nth(1))
                .and_then(|kib| kib.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

/// Resets the peak resident memory (Linux `clear_refs` 5).
pub(crate) fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// `count` random vectors of [`DIMENSION`] components.
fn random_vectors(
    count: usize,
    rng: &mut StdRng,
) -> omnigraph_core::arrow_array::FixedSizeListArray {
    use omnigraph_core::arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
    let mut vectors = FixedSizeListBuilder::new(Float32Builder::new(), DIMENSION as i32);
    for _ in 0..count {
        for _ in 0..DIMENSION {
            vectors.values().append_value(rng.random::<f32>());
        }
        vectors.append(true);
    }
    vectors.finish()
}

fn item_batch(
    start: usize,
    count: usize,
    rng: &mut StdRng,
) -> omnigraph_core::arrow_array::RecordBatch {
    use omnigraph_core::arrow_array::{ArrayRef, Int64Array};
    let catalog = omnigraph_core::schema::parse("bench.pg", OPTIMIZE_SCHEMA).expect("schema");
    let schema = catalog.get("Item").expect("Item").arrow_schema();
    let ids = Int64Array::from((start as i64..(start + count) as i64).collect::<Vec<_>>());
    let vectors = random_vectors(count, rng);
    let columns: Vec<ArrayRef> = vec![std::sync::Arc::new(ids), std::sync::Arc::new(vectors)];
    omnigraph_core::arrow_array::RecordBatch::try_new(schema, columns).expect("item batch")
}

/// OmniGraph's optimize against Lance's linear compaction on identical tables.
async fn optimize_bench(dir: &std::path::Path, rows: usize) -> Value {
    let per_append = rows.div_ceil(OPTIMIZE_APPENDS);
    let partitions = omnigraph_maintenance::indexes::first_partition_count(per_append as u64);
    let mut rng = StdRng::seed_from_u64(99);
    let batches: Vec<_> = (0..OPTIMIZE_APPENDS)
        .map(|i| item_batch(i * per_append, per_append, &mut rng))
        .collect();

    let uri = dir.join("optimize-graph").display().to_string();
    let graph = Omnigraph::create(&uri, OPTIMIZE_SCHEMA)
        .await
        .expect("create graph");
    for (index, batch) in batches.iter().enumerate() {
        graph
            .insert_batches("Item", std::slice::from_ref(batch))
            .await
            .expect("append");
        if index == 0 {
            graph
                .maintenance()
                .build_indexes()
                .await
                .expect("build indexes");
        }
    }
    reset_peak();
    let started = Instant::now();
    let report = omnigraph_maintenance::optimize(&graph, &Default::default())
        .await
        .expect("optimize");
    let ours = started.elapsed();
    let ours_peak = peak_mib();

    let catalog = omnigraph_core::schema::parse("bench.pg", OPTIMIZE_SCHEMA).expect("schema");
    let schema = catalog.get("Item").expect("Item").arrow_schema();
    let path = dir.join("optimize-baseline").display().to_string();
    let mut baseline = adapter::baseline_create(&path, schema)
        .await
        .expect("baseline create");
    for (index, batch) in batches.into_iter().enumerate() {
        adapter::baseline_append(&mut baseline, batch)
            .await
            .expect("baseline append");
        if index == 0 {
            adapter::baseline_index(&mut baseline, "id", "v", partitions)
                .await
                .expect("baseline index");
        }
    }
    reset_peak();
    let started = Instant::now();
    adapter::baseline_compact_and_optimize_indices(
        &mut baseline,
        adapter::COMPACTION_IO_BUFFER_BYTES_DEFAULT,
    )
    .await
    .expect("baseline optimize");
    let theirs = started.elapsed();
    let theirs_peak = peak_mib();
    let table = &report.tables[0];
    json!({
        "optimize_rows": rows,
        "appends": OPTIMIZE_APPENDS,
        "omnigraph_optimize_seconds": ours.as_secs_f64(),
        "lance_linear_seconds": theirs.as_secs_f64(),
        "ratio": ours.as_secs_f64() / theirs.as_secs_f64().max(f64::EPSILON),
        "omnigraph_peak_mib": ours_peak,
        "lance_linear_peak_mib": theirs_peak,
        "fragments_before": table.fragments_before,
        "fragments_after": table.fragments_after,
    })
}

/// The peak process RSS `docs/maintenance.md` states for a 1M-row optimize, and a
/// full-text rebuild, with the default budget, in MiB.
const MAINTENANCE_PEAK_ENVELOPE_MIB: f64 = 1024.0;

const MAINTENANCE_SCHEMA: &str =
    "node Item { id: Int64 @key, text: String @index(fts), v: Vector(16)? @index(vector) }";
/// The ticker's sleep: a request handler's trivial work.
const TICK: Duration = Duration::from_millis(1);

fn text_item_batch(
    start: usize,
    count: usize,
    rng: &mut StdRng,
) -> omnigraph_core::arrow_array::RecordBatch {
    use omnigraph_core::arrow_array::{ArrayRef, Int64Array, StringArray};
    // A vocabulary as text has: many words, a few of them frequent.
    const VOCABULARY: f64 = 50_000.0;
    let catalog = omnigraph_core::schema::parse("bench.pg", MAINTENANCE_SCHEMA).expect("schema");
    let schema = catalog.get("Item").expect("Item").arrow_schema();
    let ids = Int64Array::from((start as i64..(start + count) as i64).collect::<Vec<_>>());
    let texts: Vec<String> = (0..count)
        .map(|_| {
            (0..8)
                .map(|_| format!("w{}", (rng.random::<f64>().powi(3) * VOCABULARY) as u32))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let vectors = random_vectors(count, rng);
    let columns: Vec<ArrayRef> = vec![
        std::sync::Arc::new(ids),
        std::sync::Arc::new(StringArray::from(texts)),
        std::sync::Arc::new(vectors),
    ];
    omnigraph_core::arrow_array::RecordBatch::try_new(schema, columns).expect("item batch")
}

/// Wake-up delays of a task that sleeps [`TICK`] in a loop until `stop`.
fn ticker(
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Vec<Duration>> {
    tokio::spawn(async move {
        let mut delays = Vec::new();
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            let started = Instant::now();
            tokio::time::sleep(TICK).await;
            delays.push(started.elapsed().saturating_sub(TICK));
        }
        delays
    })
}

fn percentile(delays: &mut [Duration], percent: usize) -> f64 {
    delays.sort();
    if delays.is_empty() {
        return 0.0;
    }
    millis(delays[(delays.len() * percent / 100).min(delays.len() - 1)])
}

/// Optimize's peak memory and the caller runtime's latency, with Lance's work on the
/// maintenance runtime and on the caller's.
async fn maintenance_bench(dir: &std::path::Path, rows: usize) -> Value {
    let per_append = rows.div_ceil(OPTIMIZE_APPENDS);
    let mut results = Map::new();
    // The ticker alone: the floor.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let idle = ticker(stop.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut idle = idle.await.expect("ticker");
    results.insert(
        "idle_tick_delay_ms".into(),
        json!({"p50": percentile(&mut idle, 50), "p99": percentile(&mut idle, 99)}),
    );
    for on_own_runtime in [true, false] {
        let label = if on_own_runtime {
            "maintenance_runtime"
        } else {
            "callers_runtime"
        };
        let mut rng = StdRng::seed_from_u64(7);
        let uri = dir.join(label).display().to_string();
        let graph = Omnigraph::create(&uri, MAINTENANCE_SCHEMA)
            .await
            .expect("create graph");
        for index in 0..OPTIMIZE_APPENDS {
            let batch = text_item_batch(index * per_append, per_append, &mut rng);
            graph
                .insert_batches("Item", std::slice::from_ref(&batch))
                .await
                .expect("append");
            if index == 0 {
                graph
                    .maintenance()
                    .build_indexes()
                    .await
                    .expect("build indexes");
            }
        }
        let maintenance = omnigraph_maintenance::Maintenance::of(&graph);
        let maintenance = if on_own_runtime {
            maintenance
        } else {
            maintenance.with_lance_work_on_callers_runtime()
        };
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        reset_peak();
        // What the process holds before the run (the rows it generated, the runtime):
        // the peak below is this plus what the run takes.
        let before_mib = peak_mib();
        let ticks = ticker(stop.clone());
        let started = Instant::now();
        let report = maintenance.optimize().await.expect("optimize");
        let seconds = started.elapsed().as_secs_f64();
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let peak = peak_mib();
        let mut delays = ticks.await.expect("ticker");
        let table = &report.tables[0];
        // The full-text index over every row, as `rebuild-index` builds it: the
        // budget's memory limit and workers bound it.
        reset_peak();
        let fts_before_mib = peak_mib();
        let started = Instant::now();
        let rebuilt = maintenance
            .rebuild_index("Item", "text_fts")
            .await
            .expect("full-text rebuild");
        assert_eq!(
            rebuilt.built,
            [("Item".to_string(), "text_fts".to_string())]
        );
        let fts_seconds = started.elapsed().as_secs_f64();
        let fts_peak = peak_mib();
        results.insert(
            label.into(),
            json!({
                "before_mib": before_mib,
                "optimize_seconds": seconds,
                "peak_mib": peak,
                "fts_rebuild": {
                    "before_mib": fts_before_mib,
                    "seconds": fts_seconds,
                    "peak_mib": fts_peak,
                },
                "envelope_mib": MAINTENANCE_PEAK_ENVELOPE_MIB,
                "within_envelope": peak.max(fts_peak) <= MAINTENANCE_PEAK_ENVELOPE_MIB,
                "tick_delay_ms": {"p50": percentile(&mut delays, 50), "p99": percentile(&mut delays, 99)},
                "ticks": delays.len(),
                "fragments_before": table.fragments_before,
                "fragments_after": table.fragments_after,
                "folded": table.indexes_folded,
            }),
        );
    }
    results.insert("rows".into(), json!(rows));
    Value::Object(results)
}

const CLEANUP_SCHEMA: &str = "
node Person { id: String @key, name: String @index(fts), age: Int32? @index }
node Company { id: String @key, name: String }
node City { id: String @key, name: String }
edge WorksAt: Person -> Company { since: Int32? }
";
/// Rows per type in the footprint graph.
const CLEANUP_ROWS: usize = 100;
/// The node types updated, with their key prefixes.
const UPDATED_TYPES: [(&str, &str); 3] = [("Person", "p"), ("Company", "c"), ("City", "t")];

async fn bytes_under(root: &omnigraph_core::storage::StorageRoot, prefix: &str) -> u64 {
    root.list_with_meta(prefix)
        .await
        .expect("list")
        .iter()
        .map(|object| object.size)
        .sum()
}

async fn cleanup_graph(uri: &str, names: &std::collections::BTreeMap<String, String>) -> Omnigraph {
    let graph = Omnigraph::create(uri, CLEANUP_SCHEMA)
        .await
        .expect("create");
    for (type_name, prefix) in UPDATED_TYPES {
        let rows: Vec<Map<String, Value>> = (0..CLEANUP_ROWS)
            .map(|i| {
                let key = format!("{prefix}{i}");
                let name = names.get(&key).cloned().unwrap_or_else(|| key.clone());
                json!({"id": key, "name": name})
                    .as_object()
                    .unwrap()
                    .clone()
            })
            .collect();
        graph.insert_json(type_name, rows).await.expect("insert");
    }
    let edges: Vec<Map<String, Value>> = (0..CLEANUP_ROWS)
        .map(|i| {
            json!({"id": format!("w{i}"), "src": format!("p{i}"), "dst": format!("c{i}")})
                .as_object()
                .unwrap()
                .clone()
        })
        .collect();
    graph.insert_json("WorksAt", edges).await.expect("edges");
    graph
}

async fn cleanup_after_grace(graph: &Omnigraph) -> omnigraph_maintenance::CleanupReport {
    let options = omnigraph_tests::keep_with_minimum_grace(1);
    // Nothing else runs: a clock minutes ahead makes everything older than the grace.
    omnigraph_tests::later_by(
        Duration::from_secs(10 * 60),
        graph.maintenance().cleanup(&options),
    )
    .await
    .expect("cleanup")
}

/// Seconds to delete `files` garbage files one at a time, then another `files` with
/// cleanup's fan-out, through the adapter's delete (each DELETE held `latency`).
async fn delete_times(
    dir: &std::path::Path,
    files: usize,
    latency: Option<Duration>,
) -> (f64, f64) {
    use futures::StreamExt;
    for name in ["serial", "fanned"] {
        let folder = dir.join(name).join("data");
        std::fs::create_dir_all(&folder).expect("garbage folder");
        for i in 0..files {
            std::fs::write(folder.join(format!("{i}.lance")), [0u8; 512]).expect("garbage");
        }
    }
    let root = omnigraph_core::storage::StorageRoot::open(&dir.display().to_string())
        .await
        .expect("garbage root");
    let _held = latency.map(|delay| {
        root.inject(omnigraph_core::storage::FaultRule::new(
            "*",
            &[omnigraph_core::storage::RequestKind::Delete],
            omnigraph_core::storage::FaultAction::Delay(delay),
        ))
    });
    let objects = || (0..files).map(|i| format!("data/{i}.lance"));
    let started = Instant::now();
    for object in objects() {
        adapter::delete_table_object(&root, "serial", &object)
            .await
            .expect("delete");
    }
    let serial = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let root_ref = &root;
    futures::stream::iter(objects())
        .map(|object| async move {
            adapter::delete_table_object(root_ref, "fanned", &object)
                .await
                .expect("delete")
        })
        .buffer_unordered(omnigraph_maintenance::limits::DELETES_IN_FLIGHT_MAX)
        .collect::<Vec<()>>()
        .await;
    let fanned = started.elapsed().as_secs_f64();
    assert_eq!(bytes_under(&root, "").await, 0, "every garbage file went");
    (serial, fanned)
}

async fn cleanup_bench(dir: &std::path::Path, updates: usize, garbage: usize) -> Value {
    // Footprint: many single-row updates, then optimize and cleanup.
    let uri = dir.join("updated").display().to_string();
    let graph = cleanup_graph(&uri, &Default::default()).await;
    let mut names = std::collections::BTreeMap::new();
    let started = Instant::now();
    for u in 0..updates {
        let (type_name, prefix) = UPDATED_TYPES[u % UPDATED_TYPES.len()];
        let key = format!("{prefix}{}", (u / UPDATED_TYPES.len()) % CLEANUP_ROWS);
        let name = format!("v{u}");
        graph
            .update(
                type_name,
                &format!("id = '{key}'"),
                &[("name".into(), json!(name))],
            )
            .await
            .expect("update");
        names.insert(key, name);
    }
    let update_secs = started.elapsed().as_secs_f64();
    let root = graph.graph().root().clone();
    let grown = bytes_under(&root, "tables").await;
    graph.maintenance().optimize().await.expect("optimize");
    let optimized = bytes_under(&root, "tables").await;
    let report = cleanup_after_grace(&graph).await;
    let kept = bytes_under(&root, "tables").await;
    let log_bytes = bytes_under(&root, "_graph").await;
    let history_bytes = bytes_under(&root, &omnigraph_publish::layout::history_dir("main")).await;
    let reclaimed_commits: u64 = report.logs.iter().map(|log| log.history_written).sum();

    let fresh_uri = dir.join("fresh").display().to_string();
    let fresh = cleanup_graph(&fresh_uri, &names).await;
    fresh
        .maintenance()
        .optimize()
        .await
        .expect("optimize fresh");
    cleanup_after_grace(&fresh).await;
    let baseline = bytes_under(fresh.graph().root(), "tables").await;

    // Fan-out: the same garbage deleted serially and 8 at a time, on the local folder,
    // then with each DELETE held 5 ms, as an object store's round trip would.
    let (serial_secs, fanned_secs) = delete_times(&dir.join("local"), garbage, None).await;
    let latency_files = garbage.min(400);
    let (serial_latency, fanned_latency) = delete_times(
        &dir.join("latency"),
        latency_files,
        Some(Duration::from_millis(5)),
    )
    .await;

    json!({
        "types": 4,
        "rows_per_type": CLEANUP_ROWS,
        "single_row_updates": updates,
        "update_seconds": update_secs,
        "tables_bytes_after_updates": grown,
        "tables_bytes_after_optimize": optimized,
        "tables_bytes_after_cleanup": kept,
        "fresh_graph_tables_bytes": baseline,
        "footprint_ratio_to_fresh": kept as f64 / baseline as f64,
        "commit_log_bytes": log_bytes,
        "commit_log_bytes_without_history": log_bytes - history_bytes,
        "history_bytes": history_bytes,
        "reclaimed_commits": reclaimed_commits,
        "history_bytes_per_reclaimed_commit": history_bytes as f64 / reclaimed_commits.max(1) as f64,
        "cleanup_removed": report.totals,
        "garbage_files": garbage,
        "serial_deletes_per_second": garbage as f64 / serial_secs,
        "fanned_deletes_per_second": garbage as f64 / fanned_secs,
        "fan_out": omnigraph_maintenance::limits::DELETES_IN_FLIGHT_MAX,
        "fan_out_speedup": serial_secs / fanned_secs,
        "latency_5ms_files": latency_files,
        "latency_5ms_fan_out_speedup": serial_latency / fanned_latency,
    })
}

const GRAPH_SCHEMA: &str = "
node Person { id: String @key, name: String, age: Int32? }
edge Knows: Person -> Person { since: Int32? }
";
/// Rows per batch the graph bench writes its Parquet files in.
const GRAPH_WRITE_BATCH_ROWS: usize = 65_536;

/// Writes `rows` rows made by `batch(start, count)` as one Parquet file.
pub(crate) fn write_parquet(
    path: &std::path::Path,
    rows: usize,
    batch: impl Fn(usize, usize) -> omnigraph_core::arrow_array::RecordBatch,
) {
    let first = batch(0, rows.min(GRAPH_WRITE_BATCH_ROWS));
    let file = std::fs::File::create(path).expect("create parquet");
    let mut writer =
        parquet::arrow::ArrowWriter::try_new(file, first.schema(), None).expect("parquet writer");
    writer.write(&first).expect("write parquet");
    let mut start = first.num_rows();
    while start < rows {
        let count = (rows - start).min(GRAPH_WRITE_BATCH_ROWS);
        writer.write(&batch(start, count)).expect("write parquet");
        start += count;
    }
    writer.close().expect("close parquet");
}

const TRAVERSE_SCHEMA: &str = "
node Person { id: String @key, name: String }
node Company { id: String @key, name: String }
edge Knows: Person -> Person
edge WorksAt: Person -> Company
";
/// The loads Knows's edges arrive in.
const TRAVERSE_KNOWS_LOADS: usize = 20;
/// Start nodes per latency figure on the BTree path.
const TRAVERSE_STARTS: usize = 1_000;
/// Start nodes per latency figure on the scan path (each step scans every edge).
const TRAVERSE_SCAN_STARTS: usize = 20;

/// A node position drawn with power-law skew: low positions are hubs.
fn skewed(rng: &mut StdRng, nodes: usize) -> usize {
    ((rng.random::<f64>().powi(3)) * nodes as f64) as usize % nodes.max(1)
}

/// p50 and p99 (ms) of `steps` from `starts` on `graph`, with the nodes each reached.
async fn traverse_latencies(
    graph: &Omnigraph,
    starts: &[String],
    steps: &[omnigraph_graph::Step],
) -> (f64, f64, Vec<Vec<Value>>) {
    let mut times = Vec::with_capacity(starts.len());
    let mut reached = Vec::with_capacity(starts.len());
    for start in starts {
        let started = Instant::now();
        let found = graph
            .traverse("Person", &[json!(start)], steps, false, &CommitRef::Head)
            .await
            .expect("traverse");
        times.push(started.elapsed());
        reached.push(found.nodes.iter().map(|node| node["id"].clone()).collect());
    }
    (
        percentile(&mut times, 50),
        percentile(&mut times, 99),
        reached,
    )
}

/// `--traverse` (alone): N Person nodes with E power-law Knows edges, N/10 companies
/// and N WorksAt edges, loaded from Parquet; the p50 and p99 of 1-hop and 2-hop
/// traversals along Knows from random start nodes on the scan path (no index, few
/// starts) and on the BTree path (after `build_indexes`), with the same results asserted
/// for the starts both measured.
async fn traverse_bench(dir: &std::path::Path, nodes: usize, edges: usize) -> Value {
    use omnigraph_core::arrow_array::{RecordBatch, StringArray};
    use omnigraph_core::arrow_schema::{DataType, Field, Schema};
    use omnigraph_graph::{Step, StepDirection};
    let node_schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("name", DataType::Utf8, false),
    ]));
    let edge_schema = Arc::new(Schema::new(vec![
        Field::new("src", DataType::Utf8, false),
        Field::new("dst", DataType::Utf8, false),
    ]));
    let companies = (nodes / 10).max(1);
    let nodes_file = |name: &str, prefix: &'static str, count: usize| {
        let path = dir.join(name);
        write_parquet(&path, count, |start, count| {
            let ids: StringArray = (start..start + count)
                .map(|i| Some(format!("{prefix}{i}")))
                .collect();
            let names: StringArray = (start..start + count)
                .map(|i| Some(format!("{prefix} {i}")))
                .collect();
            RecordBatch::try_new(node_schema.clone(), vec![Arc::new(ids), Arc::new(names)])
                .expect("node batch")
        });
        path
    };
    let people = nodes_file("people.parquet", "p", nodes);
    let firms = nodes_file("companies.parquet", "c", companies);
    // Knows arrives as many loads, as edges do over time, so optimize has its table to
    // compact and reindex: the artifact's build is measured against that work.
    let knows_parts: Vec<usize> = (0..TRAVERSE_KNOWS_LOADS)
        .map(|part| edges * (part + 1) / TRAVERSE_KNOWS_LOADS - edges * part / TRAVERSE_KNOWS_LOADS)
        .collect();
    let mut knows = Vec::with_capacity(TRAVERSE_KNOWS_LOADS);
    for (part, rows) in knows_parts.iter().enumerate() {
        let path = dir.join(format!("knows-{part}.parquet"));
        write_parquet(&path, *rows, |start, count| {
            let mut rng = StdRng::seed_from_u64((part * edges + start) as u64);
            let src: StringArray = (0..count)
                .map(|_| Some(format!("p{}", skewed(&mut rng, nodes))))
                .collect();
            let dst: StringArray = (0..count)
                .map(|_| Some(format!("p{}", skewed(&mut rng, nodes))))
                .collect();
            RecordBatch::try_new(edge_schema.clone(), vec![Arc::new(src), Arc::new(dst)])
                .expect("edge batch")
        });
        knows.push(path);
    }
    let works = dir.join("works.parquet");
    write_parquet(&works, nodes, |start, count| {
        let mut rng = StdRng::seed_from_u64(start as u64 ^ 0x5eed);
        let src: StringArray = (start..start + count)
            .map(|i| Some(format!("p{i}")))
            .collect();
        let dst: StringArray = (0..count)
            .map(|_| Some(format!("c{}", skewed(&mut rng, companies))))
            .collect();
        RecordBatch::try_new(edge_schema.clone(), vec![Arc::new(src), Arc::new(dst)])
            .expect("edge batch")
    });
    let uri = dir.join("traverse-graph").display().to_string();
    let graph = Omnigraph::create(&uri, TRAVERSE_SCHEMA)
        .await
        .expect("create graph");
    let started = Instant::now();
    let loads = [
        (&people, "Person"),
        (&firms, "Company"),
        (&works, "WorksAt"),
    ]
    .into_iter()
    .chain(knows.iter().map(|part| (part, "Knows")));
    for (file, type_name) in loads {
        graph
            .load_columnar(
                file,
                omnigraph_graph::InputFormat::Parquet,
                type_name,
                LoadMode::Append,
            )
            .await
            .expect("load");
    }
    let load_seconds = started.elapsed().as_secs_f64();
    let mut rng = StdRng::seed_from_u64(20);
    let starts: Vec<String> = (0..TRAVERSE_STARTS)
        .map(|_| format!("p{}", rng.random_range(0..nodes)))
        .collect();
    let one = [Step::new("Knows", StepDirection::Out)];
    let two = [
        Step::new("Knows", StepDirection::Out),
        Step::new("Knows", StepDirection::Out),
    ];
    let scan_starts = &starts[..TRAVERSE_SCAN_STARTS.min(starts.len())];
    let (scan_one_p50, scan_one_p99, scan_one) =
        traverse_latencies(&graph, scan_starts, &one).await;
    let (scan_two_p50, scan_two_p99, scan_two) =
        traverse_latencies(&graph, scan_starts, &two).await;
    let started = Instant::now();
    graph
        .maintenance()
        .build_indexes()
        .await
        .expect("build indexes");
    let index_seconds = started.elapsed().as_secs_f64();
    let (btree_one_p50, btree_one_p99, btree_one) = traverse_latencies(&graph, &starts, &one).await;
    let (btree_two_p50, btree_two_p99, btree_two) = traverse_latencies(&graph, &starts, &two).await;
    assert_eq!(
        scan_one,
        btree_one[..scan_one.len()],
        "1-hop: the same nodes by both paths"
    );
    assert_eq!(
        scan_two,
        btree_two[..scan_two.len()],
        "2-hop: the same nodes by both paths"
    );
    // Optimize builds the adjacency artifacts; the BTree path is measured again beside
    // them, on the compacted tables, from a handle that never reads an artifact.
    let started = Instant::now();
    let report = omnigraph_maintenance::optimize(&graph, &Default::default())
        .await
        .expect("optimize");
    let optimize_seconds = started.elapsed().as_secs_f64();
    let knows = report.table("Knows").expect("the Knows unit");
    let (build_ms, artifact_bytes) = match &knows.adjacency {
        Some(omnigraph_maintenance::AdjacencyOutcome::Built { millis, bytes, .. }) => {
            (*millis, *bytes)
        }
        other => panic!("Knows's artifact was not built: {other:?}"),
    };
    let reader = Omnigraph::open(&uri).await.expect("open");
    let plain = Omnigraph::open(&uri)
        .await
        .expect("open")
        .without_adjacency();
    let started = Instant::now();
    let first = reader
        .traverse("Person", &[json!(starts[0])], &one, false, &CommitRef::Head)
        .await
        .expect("traverse");
    let first_read_ms = started.elapsed().as_secs_f64() * 1_000.0;
    assert_eq!(
        first.steps[0].via,
        Some(omnigraph_graph::StepVia::Adjacency),
        "{:?}",
        first.steps[0].adjacency_passed
    );
    plain
        .traverse("Person", &[json!(starts[0])], &one, false, &CommitRef::Head)
        .await
        .expect("traverse");
    let (after_one_p50, after_one_p99, after_one) = traverse_latencies(&plain, &starts, &one).await;
    let (after_two_p50, after_two_p99, after_two) = traverse_latencies(&plain, &starts, &two).await;
    let (adjacency_one_p50, adjacency_one_p99, adjacency_one) =
        traverse_latencies(&reader, &starts, &one).await;
    let (adjacency_two_p50, adjacency_two_p99, adjacency_two) =
        traverse_latencies(&reader, &starts, &two).await;
    assert_eq!(
        adjacency_one, after_one,
        "1-hop: the same nodes by the artifact"
    );
    assert_eq!(
        adjacency_two, after_two,
        "2-hop: the same nodes by the artifact"
    );
    assert_eq!(
        adjacency_one, btree_one,
        "1-hop: the same nodes after optimize"
    );
    let mean = |reached: &[Vec<Value>]| {
        reached.iter().map(Vec::len).sum::<usize>() as f64 / reached.len().max(1) as f64
    };
    json!({
        "nodes": nodes,
        "knows_edges": edges,
        "companies": companies,
        "works_at_edges": nodes,
        "load_seconds": load_seconds,
        "build_indexes_seconds": index_seconds,
        "scan": {
            "starts": scan_starts.len(),
            "one_hop_p50_ms": scan_one_p50, "one_hop_p99_ms": scan_one_p99,
            "two_hop_p50_ms": scan_two_p50, "two_hop_p99_ms": scan_two_p99,
        },
        "btree": {
            "starts": starts.len(),
            "one_hop_p50_ms": btree_one_p50, "one_hop_p99_ms": btree_one_p99,
            "two_hop_p50_ms": btree_two_p50, "two_hop_p99_ms": btree_two_p99,
            "one_hop_mean_reached": mean(&btree_one),
            "two_hop_mean_reached": mean(&btree_two),
            "two_hop_over_one_hop_p50": btree_two_p50 / btree_one_p50.max(f64::EPSILON),
        },
        "optimize_seconds": optimize_seconds,
        "btree_after_optimize": {
            "starts": starts.len(),
            "one_hop_p50_ms": after_one_p50, "one_hop_p99_ms": after_one_p99,
            "two_hop_p50_ms": after_two_p50, "two_hop_p99_ms": after_two_p99,
        },
        "adjacency": {
            "starts": starts.len(),
            "knows_build_ms": build_ms,
            "knows_bytes": artifact_bytes,
            "knows_loads": TRAVERSE_KNOWS_LOADS,
            "knows_unit_ms": knows.unit_millis,
            "knows_unit_outcome": format!("{:?}", knows.outcome),
            "knows_fragments": [knows.fragments_before, knows.fragments_after],
            "build_share_of_knows_optimize": build_ms as f64 / (knows.unit_millis + build_ms).max(1) as f64,
            "first_traversal_ms": first_read_ms,
            "one_hop_p50_ms": adjacency_one_p50, "one_hop_p99_ms": adjacency_one_p99,
            "two_hop_p50_ms": adjacency_two_p50, "two_hop_p99_ms": adjacency_two_p99,
            "two_hop_over_one_hop_p50": adjacency_two_p50 / adjacency_one_p50.max(f64::EPSILON),
            "btree_over_adjacency_one_hop_p50": after_one_p50 / adjacency_one_p50.max(f64::EPSILON),
        },
    })
}

/// `--graph`: N Person nodes and E Knows edges (random endpoints among them) as Parquet
/// files, loaded by `omnigraph load` (keys and endpoints checked) against the parquet
/// crate's reader and plain Lance writes of the same files; the time and peak resident
/// memory of each. With `--kuzu-dir D`, the files stay in D for the Kuzu comparison
/// (`tools/bench/kuzu_load.py`).
/// The keys of the graph bench's nodes.
#[derive(Clone, Copy, Debug)]
enum NodeKeys {
    /// `p0`, `p1`, ...
    Short,
    /// A UUID's text made from the node's number: the same for the same number.
    Uuid,
}

impl NodeKeys {
    fn of(self, index: usize) -> String {
        match self {
            NodeKeys::Short => format!("p{index}"),
            NodeKeys::Uuid => {
                // SplitMix64 of the number, a bijection: distinct numbers, distinct keys.
                let mix = |mut z: u64| {
                    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
                    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                    z ^ (z >> 31)
                };
                let (high, low) = (mix(index as u64), index as u64 ^ mix(!(index as u64)));
                format!(
                    "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
                    high >> 32,
                    (high >> 16) & 0xFFFF,
                    high & 0xFFFF,
                    low >> 48,
                    low & 0xFFFF_FFFF_FFFF
                )
            }
        }
    }
}

async fn graph_bench(dir: &std::path::Path, nodes: usize, edges: usize, keys: NodeKeys) -> Value {
    use omnigraph_core::arrow_array::{Int32Array, RecordBatch, StringArray};
    use omnigraph_core::arrow_schema::{DataType, Field, Schema};
    let person_schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("name", DataType::Utf8, false),
        Field::new("age", DataType::Int32, true),
    ]));
    let edge_schema = Arc::new(Schema::new(vec![
        Field::new("src", DataType::Utf8, false),
        Field::new("dst", DataType::Utf8, false),
        Field::new("since", DataType::Int32, true),
    ]));
    let people = dir.join("people.parquet");
    let knows = dir.join("knows.parquet");
    write_parquet(&people, nodes, |start, count| {
        let ids: StringArray = (start..start + count).map(|i| Some(keys.of(i))).collect();
        let names: StringArray = (start..start + count)
            .map(|i| Some(format!("person {i}")))
            .collect();
        let ages: Int32Array = (start..start + count)
            .map(|i| Some((i % 90) as i32))
            .collect();
        RecordBatch::try_new(
            person_schema.clone(),
            vec![Arc::new(ids), Arc::new(names), Arc::new(ages)],
        )
        .expect("people batch")
    });
    write_parquet(&knows, edges, |start, count| {
        let mut rng = StdRng::seed_from_u64(start as u64);
        let src: StringArray = (0..count)
            .map(|_| Some(keys.of(rng.random_range(0..nodes))))
            .collect();
        let dst: StringArray = (0..count)
            .map(|_| Some(keys.of(rng.random_range(0..nodes))))
            .collect();
        let since: Int32Array = (start..start + count)
            .map(|i| Some(1990 + (i % 35) as i32))
            .collect();
        RecordBatch::try_new(
            edge_schema.clone(),
            vec![Arc::new(src), Arc::new(dst), Arc::new(since)],
        )
        .expect("edge batch")
    });

    // Baseline: the parquet crate reads each file, plain Lance writes it in one call.
    reset_peak();
    let started = Instant::now();
    for (file, name) in [(&people, "people"), (&knows, "knows")] {
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
            std::fs::File::open(file).expect("open parquet"),
        )
        .expect("parquet reader")
        .with_batch_size(omnigraph_graph::limits::INGEST_BATCH_ROWS_MAX)
        .build()
        .expect("parquet reader");
        let schema = omnigraph_core::arrow_array::RecordBatchReader::schema(&reader);
        let batches: Vec<RecordBatch> = reader.collect::<Result<_, _>>().expect("decode");
        adapter::baseline_write(
            &dir.join(format!("baseline-{name}")).display().to_string(),
            schema,
            batches,
        )
        .await
        .expect("baseline write");
    }
    let baseline = started.elapsed();
    let baseline_peak = peak_mib();

    let uri = dir.join("graph").display().to_string();
    let graph = Omnigraph::create(&uri, GRAPH_SCHEMA)
        .await
        .expect("create graph");
    reset_peak();
    let started = Instant::now();
    let loaded_nodes = graph
        .load_columnar(
            &people,
            omnigraph_graph::InputFormat::Parquet,
            "Person",
            LoadMode::Append,
        )
        .await
        .expect("load people");
    let nodes_seconds = started.elapsed();
    let loaded_edges = graph
        .load_columnar(
            &knows,
            omnigraph_graph::InputFormat::Parquet,
            "Knows",
            LoadMode::Append,
        )
        .await
        .expect("load knows");
    let total = started.elapsed();
    let peak = peak_mib();
    assert_eq!(loaded_nodes.rows.get("Person").copied(), Some(nodes as u64));
    assert_eq!(loaded_edges.rows.get("Knows").copied(), Some(edges as u64));
    json!({
        "nodes": nodes,
        "edges": edges,
        "node_keys": format!("{keys:?}"),
        "people_parquet_bytes": std::fs::metadata(&people).map(|meta| meta.len()).unwrap_or(0),
        "knows_parquet_bytes": std::fs::metadata(&knows).map(|meta| meta.len()).unwrap_or(0),
        "omnigraph_nodes_seconds": nodes_seconds.as_secs_f64(),
        "omnigraph_edges_seconds": (total - nodes_seconds).as_secs_f64(),
        "omnigraph_total_seconds": total.as_secs_f64(),
        "omnigraph_peak_mib": peak,
        "parquet_and_lance_seconds": baseline.as_secs_f64(),
        "parquet_and_lance_peak_mib": baseline_peak,
        "ratio": total.as_secs_f64() / baseline.as_secs_f64().max(f64::EPSILON),
    })
}

/// `--merge`: a branch updates M of the N rows of Person (default 100,000 of
/// 1,000,000) while main adds one, so the table is merged row by row: the time of the
/// dry run and of the merge, and the peak resident memory.
async fn merge_bench(
    dir: &std::path::Path,
    rows: usize,
    changed: usize,
    pass_rows_max: usize,
) -> Value {
    use omnigraph_core::arrow_array::{Int32Array, RecordBatch, StringArray};
    use omnigraph_core::arrow_schema::{DataType, Field, Schema};
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("name", DataType::Utf8, false),
        Field::new("age", DataType::Int32, true),
    ]));
    let people = dir.join("people.parquet");
    write_parquet(&people, rows, |start, count| {
        let ids: StringArray = (start..start + count)
            .map(|i| Some(format!("p{i:08}")))
            .collect();
        let names: StringArray = (start..start + count)
            .map(|i| Some(format!("person {i}")))
            .collect();
        let ages: Int32Array = (start..start + count).map(|i| Some(i as i32)).collect();
        RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(ids), Arc::new(names), Arc::new(ages)],
        )
        .expect("person batch")
    });
    let uri = dir.join("merge-graph").display().to_string();
    // As many passes as the rows per pass need.
    let passes = (rows + 1).div_ceil(pass_rows_max);
    let budget = omnigraph_graph::MergeBudget {
        pass_rows_max: pass_rows_max as u64,
        passes_max: passes as u64,
        ..Default::default()
    };
    let main = Omnigraph::create(&uri, GRAPH_SCHEMA)
        .await
        .expect("create graph")
        .with_merge_budget(budget)
        .expect("a merge budget");
    main.load_columnar(
        &people,
        omnigraph_graph::InputFormat::Parquet,
        "Person",
        LoadMode::Append,
    )
    .await
    .expect("load");
    main.create_branch("changes", &CommitRef::Head)
        .await
        .expect("branch");
    let branch = Omnigraph::open(&uri)
        .await
        .expect("open")
        .with_branch("changes")
        .expect("branch name");
    let started = Instant::now();
    branch
        .update(
            "Person",
            &format!("age < {changed}"),
            &[("name".into(), json!("changed"))],
        )
        .await
        .expect("update on the branch");
    let update_seconds = started.elapsed().as_secs_f64();
    main.insert_json(
        "Person",
        vec![
            json!({"id": "on-main", "name": "x"})
                .as_object()
                .unwrap()
                .clone(),
        ],
    )
    .await
    .expect("insert on main");
    reset_peak();
    let started = Instant::now();
    let dry = main.merge_dry_run("changes").await.expect("dry run");
    let dry_seconds = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let report = main.merge("changes").await.expect("merge");
    let merge_seconds = started.elapsed().as_secs_f64();
    let peak = peak_mib();
    let person = report
        .tables
        .iter()
        .find(|table| table.type_name == "Person")
        .expect("Person");
    assert_eq!(person.taken as usize, changed, "every changed row taken");
    assert!(dry.conflicts.is_empty());
    let changed_now = main
        .scan(
            "Person",
            &omnigraph_graph::ScanRequest {
                filter: Some("name = 'changed'".into()),
                columns: vec!["id".into()],
                limit: Some(rows),
            },
            &CommitRef::Head,
        )
        .await
        .expect("scan");
    let merged_rows: usize = changed_now.iter().map(|batch| batch.num_rows()).sum();
    assert_eq!(merged_rows, changed, "the merged rows read back");
    json!({
        "rows": rows,
        "changed_on_branch": changed,
        "branch_update_seconds": update_seconds,
        "dry_run_seconds": dry_seconds,
        "merge_seconds": merge_seconds,
        "merge_peak_mib": peak,
        "pass_rows_max": pass_rows_max,
        "passes": passes,
        "person_action": format!("{:?}", person.action),
    })
}

/// The folder a bench that Kuzu reads after it writes into: `--kuzu-dir D` (kept), or a
/// temporary one (dropped with the guard).
fn kuzu_dir(args: &[String]) -> (std::path::PathBuf, tempfile::TempDir) {
    let temp = tempfile::tempdir().expect("temp dir");
    let dir = args
        .iter()
        .position(|arg| arg == "--kuzu-dir")
        .and_then(|at| args.get(at + 1))
        .map_or_else(|| temp.path().to_path_buf(), std::path::PathBuf::from);
    std::fs::create_dir_all(&dir).expect("bench dir");
    (dir, temp)
}

/// The `omnigraph` binary's allocator (`omnigraph-cli/src/main.rs`): the bench measures
/// what the binary runs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rows = argument(&args, "--rows", 200_000);
    let read_rows = argument(&args, "--read-rows", 100_000);
    let optimize_rows = argument(&args, "--optimize-rows", 1_000_000);
    if args.iter().any(|arg| arg == "--cleanup") {
        let dir = tempfile::tempdir().expect("temp dir");
        let document = json!({
            "profile": if cfg!(debug_assertions) { "dev" } else { "release" },
            "cleanup": cleanup_bench(
                dir.path(),
                argument(&args, "--updates", 4_000),
                argument(&args, "--garbage", 2_000),
            )
            .await,
        });
        println!("{document:#}");
        return;
    }
    if args.iter().any(|arg| arg == "--merge") {
        let dir = tempfile::tempdir().expect("temp dir");
        let document = json!({
            "profile": if cfg!(debug_assertions) { "dev" } else { "release" },
            "merge": merge_bench(
                dir.path(),
                argument(&args, "--rows", 1_000_000),
                argument(&args, "--changed", 100_000),
                argument(
                    &args,
                    "--pass-rows",
                    omnigraph_graph::limits::MERGE_PASS_ROWS_MAX as usize,
                ),
            )
            .await,
        });
        println!("{document:#}");
        return;
    }
    if args.iter().any(|arg| arg == "--traverse") {
        let dir = tempfile::tempdir().expect("temp dir");
        let document = json!({
            "profile": if cfg!(debug_assertions) { "dev" } else { "release" },
            "traverse": traverse_bench(
                dir.path(),
                argument(&args, "--nodes", 1_000_000),
                argument(&args, "--edges", 5_000_000),
            )
            .await,
        });
        println!("{document:#}");
        return;
    }
    if args.iter().any(|arg| arg == "--serve") {
        let dir = tempfile::tempdir().expect("temp dir");
        let document = json!({
            "profile": if cfg!(debug_assertions) { "dev" } else { "release" },
            "serve": serve::serve_bench(
                dir.path(),
                argument(&args, "--people", 1_000_000),
                argument(&args, "--edges", 2_000_000),
            )
            .await,
        });
        println!("{document:#}");
        return;
    }
    if args.iter().any(|arg| arg == "--hybrid") {
        let temp = tempfile::tempdir().expect("temp dir");
        let document = json!({
            "profile": if cfg!(debug_assertions) { "dev" } else { "release" },
            "hybrid": hybrid::hybrid_bench(
                temp.path(),
                argument(&args, "--docs", 200_000),
                argument(&args, "--hybrid-queries", 200),
            )
            .await,
        });
        println!("{document:#}");
        return;
    }
    if args.iter().any(|arg| arg == "--retrieval") {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = args
            .iter()
            .position(|arg| arg == "--retrieval-dir")
            .and_then(|at| args.get(at + 1))
            .map_or_else(|| temp.path().to_path_buf(), std::path::PathBuf::from);
        let vectors = retrieval::retrieval_bench(
            &dir,
            argument(&args, "--vectors", 1_000_000),
            argument(&args, "--queries", 1_000),
        )
        .await;
        let hybrid = hybrid::hybrid_bench(
            &dir.join("hybrid"),
            argument(&args, "--docs", 200_000),
            argument(&args, "--hybrid-queries", 200),
        )
        .await;
        let _ = std::fs::remove_dir_all(dir.join("hybrid"));
        let document = json!({
            "profile": if cfg!(debug_assertions) { "dev" } else { "release" },
            "retrieval": vectors,
            "hybrid": hybrid,
        });
        println!("{document:#}");
        return;
    }
    if args.iter().any(|arg| arg == "--query") {
        let (dir, _temp) = kuzu_dir(&args);
        let document = json!({
            "profile": if cfg!(debug_assertions) { "dev" } else { "release" },
            "query": query::query_bench(
                &dir,
                argument(&args, "--people", 100_000),
                argument(&args, "--runs", 20),
            )
            .await,
        });
        println!("{document:#}");
        return;
    }
    if args.iter().any(|arg| arg == "--graph") {
        let (dir, _temp) = kuzu_dir(&args);
        let document = json!({
            "profile": if cfg!(debug_assertions) { "dev" } else { "release" },
            "graph": graph_bench(
                &dir,
                argument(&args, "--nodes", 1_000_000),
                argument(&args, "--edges", 5_000_000),
                if args.iter().any(|arg| arg == "--uuid-keys") {
                    NodeKeys::Uuid
                } else {
                    NodeKeys::Short
                },
            )
            .await,
        });
        println!("{document:#}");
        return;
    }
    if args.iter().any(|arg| arg == "--maintenance") {
        let dir = tempfile::tempdir().expect("temp dir");
        let document = json!({
            "profile": if cfg!(debug_assertions) { "dev" } else { "release" },
            "maintenance": maintenance_bench(dir.path(), optimize_rows).await,
        });
        println!("{document:#}");
        return;
    }
    let with_optimize = args.iter().any(|arg| arg == "--optimize");
    let as_json = args.iter().any(|arg| arg == "--json");
    let dir = tempfile::tempdir().expect("temp dir");

    // The input file.
    let path = dir.path().join("people.jsonl");
    {
        let mut file = std::io::BufWriter::new(std::fs::File::create(&path).expect("create jsonl"));
        for index in 0..rows {
            writeln!(file, "{}", Value::Object(person(index))).expect("write jsonl");
        }
    }

    // Baselines: what a user of Lance alone does with the same file. JSONL: arrow-json
    // decodes it, plain Lance writes the batches in one call. Parquet: the parquet crate
    // reads it, plain Lance writes it. Each against OmniGraph's load of the same file,
    // in LOAD_ROUNDS interleaved rounds; the figures are each side's median.
    let catalog = omnigraph_core::schema::parse("bench.pg", SOCIAL_SCHEMA).expect("schema");
    let person_type = catalog.get("Person").expect("Person");
    let schema = person_type.arrow_schema();
    let parquet_path = dir.path().join("people.parquet");
    {
        let decoded = arrow::json::ReaderBuilder::new(schema.clone())
            .with_batch_size(omnigraph_graph::limits::INGEST_BATCH_ROWS_MAX)
            .build(std::io::BufReader::new(
                std::fs::File::open(&path).expect("open jsonl"),
            ))
            .expect("arrow-json reader");
        let file = std::fs::File::create(&parquet_path).expect("create parquet");
        let mut writer = parquet::arrow::ArrowWriter::try_new(file, schema.clone(), None)
            .expect("parquet writer");
        for batch in decoded {
            writer
                .write(&batch.expect("arrow-json decode"))
                .expect("write parquet");
        }
        writer.close().expect("close parquet");
    }
    let (mut jsonl_baselines, mut parquet_baselines) = (Vec::new(), Vec::new());
    let (mut loads, mut parquet_loads) = (Vec::new(), Vec::new());
    let mut loaded = None;
    for round in 0..LOAD_ROUNDS {
        let started = Instant::now();
        let decoded: Vec<arrow::record_batch::RecordBatch> =
            arrow::json::ReaderBuilder::new(schema.clone())
                .with_batch_size(omnigraph_graph::limits::INGEST_BATCH_ROWS_MAX)
                .build(std::io::BufReader::new(
                    std::fs::File::open(&path).expect("open jsonl"),
                ))
                .expect("arrow-json reader")
                .collect::<Result<_, _>>()
                .expect("arrow-json decode");
        adapter::baseline_write(
            &dir.path()
                .join(format!("baseline-jsonl-{round}"))
                .display()
                .to_string(),
            schema.clone(),
            decoded,
        )
        .await
        .expect("baseline write");
        jsonl_baselines.push(started.elapsed());

        let uri = dir
            .path()
            .join(format!("graph-{round}"))
            .display()
            .to_string();
        let graph = Omnigraph::create(&uri, SOCIAL_SCHEMA)
            .await
            .expect("create graph");
        let started = Instant::now();
        let report = graph.load(&path, LoadMode::Append).await.expect("load");
        loads.push(started.elapsed());
        assert_eq!(report.rows.get("Person").copied(), Some(rows as u64));
        loaded = Some(graph);

        let started = Instant::now();
        let read: Vec<arrow::record_batch::RecordBatch> =
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                std::fs::File::open(&parquet_path).expect("open parquet"),
            )
            .expect("parquet reader")
            .with_batch_size(omnigraph_graph::limits::INGEST_BATCH_ROWS_MAX)
            .build()
            .expect("parquet reader")
            .collect::<Result<_, _>>()
            .expect("parquet decode");
        adapter::baseline_write(
            &dir.path()
                .join(format!("baseline-parquet-{round}"))
                .display()
                .to_string(),
            schema.clone(),
            read,
        )
        .await
        .expect("baseline write");
        parquet_baselines.push(started.elapsed());

        let uri = dir
            .path()
            .join(format!("graph-parquet-{round}"))
            .display()
            .to_string();
        let parquet_graph = Omnigraph::create(&uri, SOCIAL_SCHEMA)
            .await
            .expect("create graph");
        let started = Instant::now();
        let report = parquet_graph
            .load_columnar(
                &parquet_path,
                omnigraph_graph::InputFormat::Parquet,
                "Person",
                LoadMode::Append,
            )
            .await
            .expect("parquet load");
        parquet_loads.push(started.elapsed());
        assert_eq!(report.rows.get("Person").copied(), Some(rows as u64));
    }
    let seconds = |times: &[Duration]| times.iter().map(Duration::as_secs_f64).collect::<Vec<_>>();
    let rounds = json!({
        "jsonl_baseline_seconds": seconds(&jsonl_baselines),
        "load_seconds": seconds(&loads),
        "parquet_baseline_seconds": seconds(&parquet_baselines),
        "parquet_load_seconds": seconds(&parquet_loads),
    });
    let jsonl_baseline = median(jsonl_baselines);
    let load = median(loads);
    let parquet_baseline = median(parquet_baselines);
    let parquet_load = median(parquet_loads);
    let graph = loaded.expect("a round ran");

    // Single-row inserts on the warm handle.
    let mut requests = Vec::with_capacity(INSERTS);
    let mut times = Vec::with_capacity(INSERTS);
    for index in 0..INSERTS {
        let probe = graph.graph().root().probe();
        let started = Instant::now();
        graph
            .insert_json("Person", vec![person(rows + index)])
            .await
            .expect("insert");
        times.push(started.elapsed());
        requests.push(probe.counts().total());
    }
    // The same after the key index is built: covered fragments are looked up in it.
    graph
        .maintenance()
        .build_indexes()
        .await
        .expect("build indexes");
    let mut indexed_requests = Vec::with_capacity(INSERTS);
    for index in 0..INSERTS {
        let probe = graph.graph().root().probe();
        graph
            .insert_json("Person", vec![person(rows + INSERTS + index)])
            .await
            .expect("insert");
        indexed_requests.push(probe.counts().total());
    }
    let reads = read_bench(dir.path(), read_rows).await;
    let optimize = if with_optimize {
        optimize_bench(dir.path(), optimize_rows).await
    } else {
        Value::Null
    };
    times.sort();
    let median = times[times.len() / 2];
    let ratio = load.as_secs_f64() / jsonl_baseline.as_secs_f64().max(f64::EPSILON);
    let parquet_ratio =
        parquet_load.as_secs_f64() / parquet_baseline.as_secs_f64().max(f64::EPSILON);
    let rows_per_second = rows as f64 / load.as_secs_f64().max(f64::EPSILON);
    let document = json!({
        "profile": if cfg!(debug_assertions) { "dev (dependencies at opt-level 1)" } else { "release" },
        "rows": rows,
        "load_seconds": load.as_secs_f64(),
        "load_rows_per_second": rows_per_second,
        "jsonl_baseline_seconds": jsonl_baseline.as_secs_f64(),
        "load_to_baseline_ratio": ratio,
        "parquet_load_seconds": parquet_load.as_secs_f64(),
        "parquet_baseline_seconds": parquet_baseline.as_secs_f64(),
        "parquet_load_to_baseline_ratio": parquet_ratio,
        "load_rounds": rounds,
        "insert_requests_min": requests.iter().min(),
        "insert_requests_max": requests.iter().max(),
        "insert_median_ms": millis(median),
        "insert_p90_ms": millis(times[times.len() * 9 / 10]),
        "insert_requests_after_index_min": indexed_requests.iter().min(),
        "insert_requests_after_index_max": indexed_requests.iter().max(),
        "reads": reads,
        "optimize": optimize,
    });
    if as_json {
        println!("{document}");
        return;
    }
    println!(
        "OmniGraph ingest benchmark ({})",
        document["profile"].as_str().unwrap_or_default()
    );
    println!(
        "  load {rows} rows from JSONL    {:>10.2} s   {:>12.0} rows/s",
        load.as_secs_f64(),
        rows_per_second
    );
    println!(
        "  baseline: arrow-json + Lance    {:>10.2} s   (load / baseline = {ratio:.2})",
        jsonl_baseline.as_secs_f64()
    );
    println!(
        "  load {rows} rows from Parquet  {:>10.2} s   vs parquet + Lance {:.2} s (ratio {parquet_ratio:.2})",
        parquet_load.as_secs_f64(),
        parquet_baseline.as_secs_f64()
    );
    println!(
        "  single-row insert, warm handle  {:>10.2} ms median, {:.2} ms p90, {}..{} requests",
        millis(median),
        millis(times[times.len() * 9 / 10]),
        requests.iter().min().unwrap_or(&0),
        requests.iter().max().unwrap_or(&0)
    );
    println!(
        "  ... after build-indexes          {}..{} requests",
        indexed_requests.iter().min().unwrap_or(&0),
        indexed_requests.iter().max().unwrap_or(&0)
    );
    let reads = &document["reads"];
    println!(
        "  neighbors on {} rows          {:>8.2} ms -> {:>8.2} ms with indexes ({:.1}x)",
        reads["read_rows"],
        reads["neighbors_ms_without_indexes"]
            .as_f64()
            .unwrap_or(0.0),
        reads["neighbors_ms_with_indexes"].as_f64().unwrap_or(0.0),
        reads["neighbors_speedup"].as_f64().unwrap_or(0.0)
    );
    println!(
        "  nearest k=10 on {} rows       {:>8.2} ms -> {:>8.2} ms with indexes ({:.1}x)",
        reads["read_rows"],
        reads["nearest_ms_without_indexes"].as_f64().unwrap_or(0.0),
        reads["nearest_ms_with_indexes"].as_f64().unwrap_or(0.0),
        reads["nearest_speedup"].as_f64().unwrap_or(0.0)
    );
    let optimize = &document["optimize"];
    if !optimize.is_null() {
        println!(
            "  optimize {} rows / {} appends   {:>8.2} s vs Lance linear {:.2} s (ratio {:.2}); peak {:.0} MiB vs {:.0} MiB; fragments {} -> {}",
            optimize["optimize_rows"],
            optimize["appends"],
            optimize["omnigraph_optimize_seconds"]
                .as_f64()
                .unwrap_or(0.0),
            optimize["lance_linear_seconds"].as_f64().unwrap_or(0.0),
            optimize["ratio"].as_f64().unwrap_or(0.0),
            optimize["omnigraph_peak_mib"].as_f64().unwrap_or(0.0),
            optimize["lance_linear_peak_mib"].as_f64().unwrap_or(0.0),
            optimize["fragments_before"],
            optimize["fragments_after"]
        );
    }
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
