//! `omnigraph-stress`: several OS processes write one root at once, then a checker reads
//! what they were told was written (`cargo xtask stress`).
//!
//! ```text
//! omnigraph-stress run --root URI [--procs P] [--ops N] [--seed S] [--compare] [--json]
//!                       [--store-delay-ms D]
//! ```
//!
//! `run` creates the graph and starts P copies of itself as workers, and two more as
//! maintainers: one optimizes and one cleans up, every few seconds. Each worker owns its
//! keys (`p<worker>_<n>`, `e<worker>_<n>`, company `c<worker>`), so its own record of
//! acknowledged writes is exact however the workers interleave; the workers still
//! contend for every table and every commit. A worker runs a seeded mix of single-row
//! inserts, small loads (nodes with their edges), edge inserts to its existing nodes and
//! to nodes it just deleted (which must be refused), updates, deletes (which cascade to
//! edges) and reads, including time-travel reads. Then the checker opens
//! the head and verifies: every acknowledged row is there with its last acknowledged
//! value, nothing else is; no key twice; no dangling edge; the log has no gap; every
//! retained commit opens and reads. It prints commits per second, conflicts per 100
//! operations by kind, p50 and p99 per operation, the requests by kind, and per
//! operation the commit puts (one per try at slot n+1, and one per PUT re-issued after
//! a transport fault: past one per acknowledged write, mostly lost races), and how
//! busy the machine's cores were while the workers ran, with the workers' CPU time per
//! commit (Linux only: from `/proc`).
//!
//! `--compare` first runs the same total work (P x N operations) with one worker and
//! the same maintainers, on a root of its own (`URI-single`), and then prints the
//! ratio of the two commit rates, over each run's wall time and over the time in which
//! all of its workers ran. A graph's per-commit cost grows with its tables, so only
//! equal work compares: one worker running N operations leaves smaller tables. The
//! second ratio leaves out the workers' start and tail, so it takes a middle slice of
//! the parallel run, whose tables are then smaller than at its end.
//!
//! `--store-delay-ms D` holds every request of the workers and maintainers D ms before
//! it is made (a delay fault of the root's wrapper), as on a store that far away: a
//! local S3-compatible server on the machine's own cores charges CPU per request where
//! a remote store charges time. The checker's requests are not held.

// The worker awaits deep futures (load -> ingest -> staging -> publisher -> Lance).
#![recursion_limit = "256"]

use omnigraph_core::storage::{FaultAction, FaultHandle, FaultRule, RequestKind, RequestProbe};
use omnigraph_core::{ErrorKind, OmniError};
use omnigraph_graph::{LoadMode, Omnigraph, ScanRequest};
use omnigraph_maintenance::{CleanupOptions, CleanupPolicy, MaintenanceExt};
use omnigraph_publish::CommitRef;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

const STRESS_SCHEMA: &str = "
node Person { id: String @key, name: String, age: Int32? @index }
node Company { id: String @key, name: String }
edge WorksAt: Person -> Company { since: Int32? }
";
/// The most worker processes one run starts.
const PROCS_MAX: usize = 64;
/// The most operations one worker runs.
const OPS_MAX: usize = 100_000;
/// Rows the checker reads per type at most (it fails when a type has more).
const CHECK_ROWS_MAX: usize = 10_000;
/// The longest `--store-delay-ms` holds a request.
const STORE_DELAY_MS_MAX: usize = 1_000;
/// How often the maintainers optimize and clean up.
const OPTIMIZE_EVERY: Duration = Duration::from_secs(2);
const CLEANUP_EVERY: Duration = Duration::from_secs(3);
/// The longest a maintainer runs: it stops then even without the stop file (its
/// parent was killed, say).
const MAINTAIN_FOR_MAX: Duration = Duration::from_secs(3600);
/// How soon a maintainer notices that the workers are done.
const STOP_POLL: Duration = Duration::from_millis(50);
/// Nodes read when looking for another worker's node to point an edge at.
const CROSS_CANDIDATES_MAX: usize = 200;
/// Nodes in one small load.
const LOAD_NODES: usize = 4;

fn argument(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|arg| arg == name)
        .and_then(|index| args.get(index + 1).cloned())
}

fn number(args: &[String], name: &str, default: usize, max: usize) -> usize {
    let value = argument(args, name).map_or(default, |text| {
        text.parse()
            .unwrap_or_else(|_| fail(&format!("{name} takes a number, not {text:?}")))
    });
    if value == 0 || value > max {
        fail(&format!("{name} is 1 to {max}"));
    }
    value
}

/// The hold `--store-delay-ms` asks for, if any.
fn store_delay_ms(args: &[String]) -> Option<usize> {
    argument(args, "--store-delay-ms")
        .map(|_| number(args, "--store-delay-ms", 1, STORE_DELAY_MS_MAX))
}

/// Holds every request of `graph`'s root `delay_ms` before it is made, while the
/// returned fault lives.
fn hold_requests(graph: &Omnigraph, delay_ms: Option<usize>) -> Option<FaultHandle> {
    delay_ms.map(|ms| {
        let hold = FaultAction::Delay(Duration::from_millis(ms as u64));
        graph.graph().root().inject(FaultRule::new("*", &[], hold))
    })
}

fn fail(message: &str) -> ! {
    eprintln!("omnigraph-stress: {message}");
    std::process::exit(2);
}

// One thread per process: each process is one writer (or one maintainer), and six
// processes with two runtime workers each thrashed 2 cores (a fifth of the CPU time
// went to the kernel's task switching). Lance's own CPU pool still runs beside it.
#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let root = argument(&args, "--root").unwrap_or_else(|| fail("--root URI is required"));
    match args.get(1).map(String::as_str) {
        Some("run") => run(&args, &root).await,
        Some("worker") => worker(&args, &root).await,
        Some("maintainer") => maintainer(&args, &root).await,
        _ => fail(
            "usage: omnigraph-stress run --root URI [--procs P] [--ops N] [--seed S] [--compare] [--json] [--store-delay-ms D]",
        ),
    }
}

// ---- the worker ----------------------------------------------------------------

/// What a worker knows it wrote: exact, since only it writes its keys.
#[derive(Default)]
struct Model {
    persons: BTreeMap<String, i64>,
    companies: BTreeSet<String>,
    edges: BTreeMap<String, (String, String)>,
    /// Acknowledged edges from another worker's node: present at the end exactly when
    /// that node is (its delete takes them with it).
    cross_edges: BTreeMap<String, (String, String)>,
    /// Nodes it deleted: an edge to one must be refused.
    deleted: Vec<String>,
}

impl Model {
    fn delete_person(&mut self, id: &str) {
        self.persons.remove(id);
        self.edges.retain(|_, (src, _)| src != id);
        self.deleted.push(id.to_string());
    }

    fn to_json(&self) -> Value {
        json!({
            "persons": self.persons,
            "companies": self.companies,
            "edges": self.edges.iter().map(|(id, (src, dst))| (id.clone(), json!([src, dst]))).collect::<Map<String, Value>>(),
            "cross_edges": self.cross_edges.iter().map(|(id, (src, dst))| (id.clone(), json!([src, dst]))).collect::<Map<String, Value>>(),
        })
    }
}

/// What one worker did.
#[derive(Default)]
struct Tally {
    ops: BTreeMap<&'static str, u64>,
    acknowledged: u64,
    conflicts: BTreeMap<String, u64>,
    /// Conflicts of the operation under way, counted against it when it is timed.
    pending_conflicts: Vec<String>,
    /// Conflicts by operation and kind.
    conflicts_by_op: BTreeMap<&'static str, BTreeMap<String, u64>>,
    latencies: BTreeMap<&'static str, Vec<f64>>,
    /// Object-store requests by operation, and the probe's count when the current
    /// operation began.
    requests: BTreeMap<&'static str, u64>,
    requests_before: u64,
    /// Each timed operation and the span of the probe's log it made, to attribute
    /// reads to operations by place at the end.
    spans: Vec<(&'static str, usize, usize)>,
    violations: Vec<String>,
    /// After each timed operation: when it ended (microseconds since the epoch, which
    /// every process on the machine shares) and the writes acknowledged so far.
    progress: Vec<(u64, u64)>,
}

impl Tally {
    fn begin(&mut self, probe: &RequestProbe) -> Instant {
        // Conflicts outside a timed operation (the setup's writes) count in the totals
        // only.
        self.pending_conflicts.clear();
        self.requests_before = probe.total();
        Instant::now()
    }

    fn timed(&mut self, op: &'static str, started: Instant, probe: &RequestProbe) {
        *self.ops.entry(op).or_default() += 1;
        for code in std::mem::take(&mut self.pending_conflicts) {
            *self
                .conflicts_by_op
                .entry(op)
                .or_default()
                .entry(code)
                .or_default() += 1;
        }
        let now = probe.total();
        *self.requests.entry(op).or_default() += now - self.requests_before;
        self.spans
            .push((op, self.requests_before as usize, now as usize));
        self.latencies
            .entry(op)
            .or_default()
            .push(started.elapsed().as_secs_f64() * 1_000.0);
        self.progress.push((unix_micros(), self.acknowledged));
    }

    fn refused(&mut self, error: &OmniError) {
        let code = error.code().code.to_string();
        *self.conflicts.entry(code.clone()).or_default() += 1;
        self.pending_conflicts.push(code);
    }
}

/// Whether an error says nothing was published for a reason a correct engine can give
/// under contention or a flaky store: a typed conflict, or a passing storage failure
/// (not in doubt: that is its own kind).
fn is_conflict(error: &OmniError) -> bool {
    matches!(
        error.kind(),
        ErrorKind::ReadSetChanged
            | ErrorKind::KeyConflict
            | ErrorKind::ContentionExhausted
            | ErrorKind::MaintenanceCancelled
            | ErrorKind::Storage(omnigraph_core::StorageKind::Transient)
    )
}

/// The row of `type_name` with `key` at the head, to settle a write in doubt.
async fn read_back(graph: &Omnigraph, type_name: &str, key: &str) -> Option<Map<String, Value>> {
    graph
        .get(type_name, &json!(key), &CommitRef::Head)
        .await
        .ok()
        .flatten()
}

/// Now, in microseconds since the epoch: the one clock every worker shares.
fn unix_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
        })
}

fn in_doubt(error: &OmniError) -> bool {
    error.kind() == ErrorKind::PublishInDoubt
}

async fn worker(args: &[String], root: &str) {
    let id = number(args, "--id", 1, PROCS_MAX) - 1;
    let ops = number(args, "--ops", 50, OPS_MAX);
    let seed = number(args, "--seed", 1, usize::MAX) as u64;
    let out = argument(args, "--out").unwrap_or_else(|| fail("--out FILE is required"));
    let graph = Omnigraph::open(root)
        .await
        .unwrap_or_else(|error| fail(&format!("open {root}: {error}")));
    let _held = hold_requests(&graph, store_delay_ms(args));
    let probe = graph.graph().root().probe();
    let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(1_000_003).wrapping_add(id as u64));
    let mut model = Model::default();
    let mut tally = Tally::default();
    let company = format!("c{id}");
    let started = Instant::now();
    let started_unix = unix_micros();
    write_or_fail(
        &graph,
        "Company",
        json!({"id": company, "name": format!("Company {id}")}),
        &mut tally,
    )
    .await;
    // The setup's commit counts before the window of another worker that started later.
    tally.progress.push((unix_micros(), tally.acknowledged));
    model.companies.insert(company.clone());
    let mut next = 0usize;
    let mut new_key = |prefix: &str| {
        next += 1;
        format!("{prefix}{id}_{next}")
    };
    for _ in 0..ops {
        let roll = rng.random_range(0..100);
        let begun = tally.begin(&probe);
        match roll {
            0..30 => {
                let key = new_key("p");
                let age = rng.random_range(0..100);
                let row = json!({"id": key, "name": "n", "age": age});
                match graph.insert_json("Person", one(row)).await {
                    Ok(_) => {
                        tally.acknowledged += 1;
                        model.persons.insert(key, age);
                    }
                    Err(error) => {
                        settle(&graph, &mut tally, &error, "Person", &key, || {
                            model.persons.insert(key.clone(), age);
                        })
                        .await
                    }
                }
                tally.timed("insert", begun, &probe);
            }
            30..40 => {
                let mut lines = Vec::new();
                let mut nodes = Vec::new();
                for _ in 0..LOAD_NODES {
                    let key = new_key("p");
                    let edge = new_key("e");
                    let age = rng.random_range(0..100);
                    lines.push(
                        json!({"type": "Person", "id": key, "name": "l", "age": age}).to_string(),
                    );
                    lines.push(
                        json!({"type": "WorksAt", "id": edge, "src": key, "dst": company})
                            .to_string(),
                    );
                    nodes.push((key, edge, age));
                }
                let file = tempfile::NamedTempFile::new().expect("temp file");
                std::fs::write(file.path(), lines.join("\n") + "\n").expect("write load");
                match graph.load(file.path(), LoadMode::Append).await {
                    Ok(_) => {
                        tally.acknowledged += 1;
                        for (key, edge, age) in nodes {
                            model.persons.insert(key.clone(), age);
                            model.edges.insert(edge, (key, company.clone()));
                        }
                    }
                    Err(error) if is_conflict(&error) => tally.refused(&error),
                    Err(error) if in_doubt(&error) => {
                        tally.refused(&error);
                        // One commit: the first node tells whether all landed.
                        if read_back(&graph, "Person", &nodes[0].0).await.is_some() {
                            tally.acknowledged += 1;
                            for (key, edge, age) in nodes {
                                model.persons.insert(key.clone(), age);
                                model.edges.insert(edge, (key, company.clone()));
                            }
                        }
                    }
                    Err(error) => tally.violations.push(format!("load failed: {error}")),
                }
                tally.timed("load", begun, &probe);
            }
            40..55 => {
                // Mostly to a node that exists; a third of the time to one just deleted.
                let target = if rng.random_range(0..3) == 0 && !model.deleted.is_empty() {
                    Some((
                        model.deleted[rng.random_range(0..model.deleted.len())].clone(),
                        false,
                    ))
                } else {
                    pick(&model.persons, &mut rng).map(|key| (key, true))
                };
                let Some((src, exists)) = target else {
                    continue;
                };
                let edge = new_key("e");
                // A quarter of the time, to another worker's node, which that worker
                // may be deleting: the edge is refused, or lands and goes with it.
                if rng.random_range(0..4) == 0
                    && let Some(theirs) = someone_elses_person(&graph, id, &mut rng).await
                {
                    let row = json!({"id": edge, "src": theirs, "dst": company});
                    match graph.insert_json("WorksAt", one(row)).await {
                        Ok(_) => {
                            tally.acknowledged += 1;
                            model.cross_edges.insert(edge, (theirs, company.clone()));
                        }
                        Err(error)
                            if matches!(
                                error.kind(),
                                ErrorKind::BadInput | ErrorKind::SchemaViolation
                            ) => {}
                        Err(error) if is_conflict(&error) => tally.refused(&error),
                        Err(error) if in_doubt(&error) => {
                            tally.refused(&error);
                            if read_back(&graph, "WorksAt", &edge).await.is_some() {
                                tally.acknowledged += 1;
                                model.cross_edges.insert(edge, (theirs, company.clone()));
                            }
                        }
                        Err(error) => tally.violations.push(format!("cross edge insert: {error}")),
                    }
                    tally.timed("edge_insert", begun, &probe);
                    continue;
                }
                let row = json!({"id": edge, "src": src, "dst": company});
                match (graph.insert_json("WorksAt", one(row)).await, exists) {
                    (Ok(_), true) => {
                        tally.acknowledged += 1;
                        model.edges.insert(edge, (src, company.clone()));
                    }
                    (Ok(_), false) => tally
                        .violations
                        .push(format!("edge {edge} to deleted node {src} was accepted")),
                    (Err(error), false)
                        if matches!(
                            error.kind(),
                            ErrorKind::BadInput | ErrorKind::SchemaViolation
                        ) => {}
                    (Err(error), _) if is_conflict(&error) => tally.refused(&error),
                    (Err(error), true) if in_doubt(&error) => {
                        tally.refused(&error);
                        if read_back(&graph, "WorksAt", &edge).await.is_some() {
                            tally.acknowledged += 1;
                            model.edges.insert(edge, (src, company.clone()));
                        }
                    }
                    (Err(error), _) => tally.violations.push(format!("edge insert: {error}")),
                }
                tally.timed("edge_insert", begun, &probe);
            }
            55..75 => {
                let Some(key) = pick(&model.persons, &mut rng) else {
                    continue;
                };
                let age = rng.random_range(0..100);
                let predicate = format!("id = '{key}'");
                match graph
                    .update("Person", &predicate, &[("age".into(), json!(age))])
                    .await
                {
                    Ok(_) => {
                        tally.acknowledged += 1;
                        model.persons.insert(key, age);
                    }
                    Err(error) if is_conflict(&error) => tally.refused(&error),
                    Err(error) if in_doubt(&error) => {
                        tally.refused(&error);
                        let found = read_back(&graph, "Person", &key).await;
                        if found.is_some_and(|row| row.get("age") == Some(&json!(age))) {
                            tally.acknowledged += 1;
                            model.persons.insert(key, age);
                        }
                    }
                    Err(error) => tally.violations.push(format!("update {key}: {error}")),
                }
                tally.timed("update", begun, &probe);
            }
            75..85 => {
                let Some(key) = pick(&model.persons, &mut rng) else {
                    continue;
                };
                match graph.delete("Person", &format!("id = '{key}'")).await {
                    Ok(_) => {
                        tally.acknowledged += 1;
                        model.delete_person(&key);
                    }
                    Err(error) if is_conflict(&error) => tally.refused(&error),
                    Err(error) if in_doubt(&error) => {
                        tally.refused(&error);
                        if read_back(&graph, "Person", &key).await.is_none() {
                            tally.acknowledged += 1;
                            model.delete_person(&key);
                        }
                    }
                    Err(error) => tally.violations.push(format!("delete {key}: {error}")),
                }
                tally.timed("delete", begun, &probe);
            }
            _ => {
                // Read your own writes; sometimes at an older commit.
                if let Some(key) = pick(&model.persons, &mut rng) {
                    match graph.get("Person", &json!(key), &CommitRef::Head).await {
                        Ok(Some(row)) if row.get("age") == Some(&json!(model.persons[&key])) => {}
                        Ok(found) => tally.violations.push(format!(
                            "read {key}: {found:?}, acknowledged age {}",
                            model.persons[&key]
                        )),
                        Err(error) => tally.violations.push(format!("read {key}: {error}")),
                    }
                }
                if let Ok(head) = graph.head().await
                    && head.seq > 0
                {
                    let at = CommitRef::Seq(rng.random_range(0..head.seq));
                    match graph.scan("Company", &ScanRequest::default(), &at).await {
                        Ok(_) => {}
                        Err(error) if error.kind() == ErrorKind::CommitReclaimed => {}
                        Err(error) => tally.violations.push(format!("time travel: {error}")),
                    }
                }
                tally.timed("read", begun, &probe);
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let counts = probe.counts();
    // Where the reads went: commit log, table manifests, data and indexes.
    let mut reads_by_place: BTreeMap<&'static str, u64> = BTreeMap::new();
    let is_read = |kind: RequestKind| {
        matches!(
            kind,
            RequestKind::Get | RequestKind::RangedGet | RequestKind::Head
        )
    };
    let log = probe.requests();
    for request in &log {
        if is_read(request.kind) {
            *reads_by_place.entry(place_of(&request.path)).or_default() += 1;
        }
    }
    let mut reads_by_op_place: BTreeMap<&'static str, BTreeMap<&'static str, u64>> =
        BTreeMap::new();
    // One put-if-absent of a commit per try at slot n+1 (and per PUT the publisher
    // re-issues after a transport fault): past the first of an acknowledged write,
    // mostly races it lost.
    let mut commit_puts_by_op: BTreeMap<&'static str, u64> = BTreeMap::new();
    for (op, from, to) in &tally.spans {
        let places = reads_by_op_place.entry(op).or_default();
        let commit_puts = commit_puts_by_op.entry(op).or_default();
        for request in log.get(*from..*to).unwrap_or_default() {
            if is_read(request.kind) {
                *places.entry(place_of(&request.path)).or_default() += 1;
            } else if request.kind == RequestKind::PutIfAbsent
                && place_of(&request.path) == "commits"
            {
                *commit_puts += 1;
            }
        }
    }
    let requests: Map<String, Value> = RequestKind::ALL
        .iter()
        .map(|kind| (format!("{kind:?}"), json!(counts.get(*kind))))
        .collect();
    let document = json!({
        "id": id,
        "seconds": seconds,
        "started_unix_micros": started_unix,
        "progress": tally.progress,
        "acknowledged": tally.acknowledged,
        "ops": tally.ops,
        "conflicts": tally.conflicts,
        "conflicts_by_op": tally.conflicts_by_op,
        "latencies_ms": tally.latencies,
        "requests_by_op": tally.requests,
        "violations": tally.violations,
        "requests": requests,
        "reads_by_place": reads_by_place,
        "reads_by_op_place": reads_by_op_place,
        "commit_puts_by_op": commit_puts_by_op,
        "model": model.to_json(),
    });
    std::fs::write(&out, document.to_string()).expect("write the worker's report");
}

/// The part of the root layout a path is in.
fn place_of(path: &str) -> &'static str {
    let parts: Vec<&str> = path.split('/').collect();
    match parts.as_slice() {
        ["_graph", "branches", _, "commits", ..] => "commits",
        ["_graph", "branches", _, "HEAD"] => "head_hint",
        ["_graph", "schemas", ..] => "schemas",
        ["_graph", ..] => "graph_other",
        ["tables", _, "_versions", ..] => "table_manifests",
        ["tables", _, "data", ..] => "table_data",
        ["tables", _, "_indices", ..] => "table_indexes",
        ["tables", _, "_deletions", ..] => "table_deletions",
        ["tables", _, "_transactions", ..] => "table_transactions",
        _ => "other",
    }
}

/// One object as the rows of an insert.
fn one(value: Value) -> Vec<Map<String, Value>> {
    vec![value.as_object().expect("an object").clone()]
}

/// A node of another worker at the head, at random.
async fn someone_elses_person(graph: &Omnigraph, id: usize, rng: &mut StdRng) -> Option<String> {
    let own = format!("p{id}_");
    let request = ScanRequest {
        filter: None,
        columns: vec!["id".into()],
        limit: Some(CROSS_CANDIDATES_MAX),
    };
    let batches = graph
        .scan("Person", &request, &CommitRef::Head)
        .await
        .ok()?;
    let theirs: Vec<String> = omnigraph_graph::rows::batches_to_json(&batches)
        .into_iter()
        .filter_map(|row| row["id"].as_str().map(str::to_string))
        .filter(|key| !key.starts_with(&own))
        .collect();
    (!theirs.is_empty()).then(|| theirs[rng.random_range(0..theirs.len())].clone())
}

/// A key of the model, at random.
fn pick(persons: &BTreeMap<String, i64>, rng: &mut StdRng) -> Option<String> {
    (!persons.is_empty()).then(|| {
        persons
            .keys()
            .nth(rng.random_range(0..persons.len()))
            .expect("in range")
            .clone()
    })
}

async fn write_or_fail(graph: &Omnigraph, type_name: &str, row: Value, tally: &mut Tally) {
    for _ in 0..100 {
        match graph.insert_json(type_name, one(row.clone())).await {
            Ok(_) => {
                tally.acknowledged += 1;
                return;
            }
            Err(error) if is_conflict(&error) => tally.refused(&error),
            Err(error) => fail(&format!("insert {type_name}: {error}")),
        }
    }
    fail(&format!("insert {type_name}: 100 conflicts in a row"));
}

/// A failed insert: a conflict changed nothing; an in-doubt one is read back.
async fn settle(
    graph: &Omnigraph,
    tally: &mut Tally,
    error: &OmniError,
    type_name: &str,
    key: &str,
    landed: impl FnOnce(),
) {
    if is_conflict(error) {
        tally.refused(error);
    } else if error.kind() == ErrorKind::PublishInDoubt {
        tally.refused(error);
        if let Ok(Some(_)) = graph.get(type_name, &json!(key), &CommitRef::Head).await {
            tally.acknowledged += 1;
            landed();
        }
    } else {
        tally.violations.push(format!("insert {key}: {error}"));
    }
}

/// Worker 0 optimizes and worker 1 cleans up, every few seconds, until `stop`.
/// What a maintainer runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Maintenance {
    Optimize,
    Cleanup,
}

impl Maintenance {
    const ALL: [Maintenance; 2] = [Maintenance::Optimize, Maintenance::Cleanup];

    fn name(self) -> &'static str {
        match self {
            Maintenance::Optimize => "optimize",
            Maintenance::Cleanup => "cleanup",
        }
    }

    fn every(self) -> Duration {
        match self {
            Maintenance::Optimize => OPTIMIZE_EVERY,
            Maintenance::Cleanup => CLEANUP_EVERY,
        }
    }
}

/// A maintainer process: runs its maintenance every few seconds until the file named
/// by `--stop` exists, then writes its outcomes to `--out`.
async fn maintainer(args: &[String], root: &str) {
    let kind = match argument(args, "--kind").as_deref() {
        Some("optimize") => Maintenance::Optimize,
        Some("cleanup") => Maintenance::Cleanup,
        other => fail(&format!("--kind is optimize or cleanup, not {other:?}")),
    };
    let stop = argument(args, "--stop").unwrap_or_else(|| fail("--stop FILE is required"));
    let out = argument(args, "--out").unwrap_or_else(|| fail("--out FILE is required"));
    let began = Instant::now();
    let stopped = || std::path::Path::new(&stop).exists() || began.elapsed() > MAINTAIN_FOR_MAX;
    let report = maintain(root, kind, store_delay_ms(args), &stopped).await;
    std::fs::write(&out, Value::Object(report).to_string()).expect("write the maintainer's report");
}

async fn maintain(
    root: &str,
    kind: Maintenance,
    delay_ms: Option<usize>,
    stopped: &dyn Fn() -> bool,
) -> Map<String, Value> {
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    let graph = match Omnigraph::open(root).await {
        Ok(graph) => graph,
        Err(error) => {
            let mut report = Map::new();
            report.insert("violations".into(), json!([format!("open: {error}")]));
            return report;
        }
    };
    let _held = hold_requests(&graph, delay_ms);
    let (every, name) = (kind.every(), kind.name());
    // The smallest grace period: a run longer than it reclaims while writers write.
    let options = CleanupOptions::new(CleanupPolicy::keep_commits(5).expect("a policy"))
        .with_grace(omnigraph_publish::limits::GRACE_MIN)
        .expect("the minimum grace");
    let mut violations = Vec::new();
    loop {
        // Waits in short steps, so the worker's end is not held up by a whole period.
        let since = Instant::now();
        while since.elapsed() < every && !stopped() {
            tokio::time::sleep(STOP_POLL).await;
        }
        if stopped() {
            break;
        }
        let outcome = if kind == Maintenance::Optimize {
            graph.maintenance().optimize().await.map(|report| {
                // Each unit's outcome, so a run that lost one table's pin still shows
                // the tables it compacted.
                for table in &report.tables {
                    let described = serde_json::to_value(&table.outcome).unwrap_or_default();
                    let outcome = described["outcome"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    if outcome == "failed" {
                        violations.push(format!("optimize {}: {described}", table.type_key));
                    }
                    *outcomes
                        .entry(format!("optimize {} {outcome}", table.type_key))
                        .or_default() += 1;
                }
                report.exit_code().to_string()
            })
        } else {
            graph
                .maintenance()
                .cleanup(&options)
                .await
                .map(|_| "0".to_string())
        };
        let key = match outcome {
            Ok(code) => {
                // 0: done; 4: a unit lost its pin to a writer; 75: a transient fault.
                if !["0", "4", "75"].contains(&code.as_str()) {
                    violations.push(format!("{name} exited {code}"));
                }
                format!("{name} exit {code}")
            }
            Err(error) => {
                if !is_conflict(&error) {
                    violations.push(format!("{name}: {error}"));
                }
                format!("{name} {}", error.code().code)
            }
        };
        *outcomes.entry(key).or_default() += 1;
    }
    let mut report: Map<String, Value> = outcomes
        .into_iter()
        .map(|(key, count)| (key, json!(count)))
        .collect();
    report.insert("violations".into(), json!(violations));
    report
}

// ---- the run and its checker ---------------------------------------------------

async fn run(args: &[String], root: &str) {
    let procs = number(args, "--procs", 4, PROCS_MAX);
    let ops = number(args, "--ops", 50, OPS_MAX);
    let seed = number(args, "--seed", 1, usize::MAX);
    let as_json = args.iter().any(|arg| arg == "--json");
    let compare = args.iter().any(|arg| arg == "--compare");
    let delay_ms = store_delay_ms(args);
    let single = if compare {
        if procs * ops > OPS_MAX {
            fail(&format!(
                "--compare runs --procs x --ops on one worker: at most {OPS_MAX}"
            ));
        }
        let single_root = format!("{}-single", root.trim_end_matches('/'));
        Some(scenario(&single_root, 1, procs * ops, seed, delay_ms).await)
    } else {
        None
    };
    let summary = scenario(root, procs, ops, seed, delay_ms).await;
    let rate = |summary: &Value| summary["commits_per_second"].as_f64().unwrap_or(0.0);
    let wall_ratio = |single: &Value| rate(&summary) / rate(single).max(1e-9);
    // `None` when a run's workers never all ran at once.
    let steady_ratio = |single: &Value| {
        let rate = |summary: &Value| summary["while_all_ran"]["commits_per_second"].as_f64();
        Some(rate(&summary)? / rate(single)?.max(1e-9))
    };
    let failed = |summary: &Value| {
        summary["violations"]
            .as_array()
            .is_some_and(|violations| !violations.is_empty())
    };
    let any_failed = failed(&summary) || single.as_ref().is_some_and(failed);
    match (&single, as_json) {
        (None, true) => println!("{summary:#}"),
        (None, false) => print_summary(&summary),
        (Some(single), true) => println!(
            "{:#}",
            json!({
                "single": single,
                "parallel": summary,
                "ratio": wall_ratio(single),
                "ratio_while_all_ran": steady_ratio(single),
            })
        ),
        (Some(single), false) => {
            print_summary(single);
            print_summary(&summary);
            println!(
                "scaling: {procs} processes x {ops} ops {:.1} commits/s; 1 process x {} ops {:.1} commits/s; ratio {:.2}",
                rate(&summary),
                procs * ops,
                rate(single),
                wall_ratio(single)
            );
            match steady_ratio(single) {
                Some(ratio) => println!("scaling while all ran: ratio {ratio:.2}"),
                None => println!("scaling while all ran: the workers never all ran at once"),
            }
        }
    }
    if any_failed {
        std::process::exit(1);
    }
}

/// One run on a new graph at `root`: `procs` workers of `ops` operations each beside
/// the two maintainers, then the checker. The summary lists what failed.
async fn scenario(
    root: &str,
    procs: usize,
    ops: usize,
    seed: usize,
    delay_ms: Option<usize>,
) -> Value {
    Omnigraph::create(root, STRESS_SCHEMA)
        .await
        .unwrap_or_else(|error| fail(&format!("create {root}: {error}")));
    let reports = tempfile::tempdir().expect("temp dir");
    let exe = std::env::current_exe().expect("this binary");
    let report_path = |name: String| reports.path().join(name).display().to_string();
    let stop = report_path("stop".into());
    let held: Vec<String> = delay_ms
        .map(|ms| vec!["--store-delay-ms".to_string(), ms.to_string()])
        .unwrap_or_default();
    let started = Instant::now();
    let machine_before = MachineCpu::read();
    let maintainers: Vec<(String, std::process::Child)> = Maintenance::ALL
        .iter()
        .map(|kind| {
            let out = report_path(format!("{}.json", kind.name()));
            let child = std::process::Command::new(&exe)
                .args(["maintainer", "--root", root, "--kind", kind.name()])
                .args(["--stop", &stop, "--out", &out])
                .args(&held)
                .spawn()
                .unwrap_or_else(|error| fail(&format!("start a maintainer: {error}")));
            (out, child)
        })
        .collect();
    let workers: Vec<(String, std::process::Child)> = (1..=procs)
        .map(|id| {
            let out = report_path(format!("{id}.json"));
            let child = std::process::Command::new(&exe)
                .args(["worker", "--root", root, "--id", &id.to_string()])
                .args(["--ops", &ops.to_string(), "--seed", &seed.to_string()])
                .args(["--out", &out])
                .args(&held)
                .spawn()
                .unwrap_or_else(|error| fail(&format!("start a worker: {error}")));
            (out, child)
        })
        .collect();
    let collect = |children: Vec<(String, std::process::Child)>, role: &str| {
        children
            .into_iter()
            .map(|(out, mut child)| {
                let status = child.wait().expect("a child ends");
                if !status.success() {
                    // The maintainers stop at the stop file: never leave them running.
                    let _ = std::fs::write(&stop, b"");
                    fail(&format!("a {role} failed ({status})"));
                }
                let text = std::fs::read_to_string(&out).expect("the child's report");
                serde_json::from_str::<Value>(&text).expect("a JSON report")
            })
            .collect::<Vec<Value>>()
    };
    let reaped_before = reaped_cpu_seconds();
    let workers = collect(workers, "worker");
    let wall = started.elapsed().as_secs_f64();
    let machine_busy = MachineCpu::read()
        .zip(machine_before)
        .map(|(after, before)| after.busy_since(&before));
    let workers_cpu = reaped_cpu_seconds()
        .zip(reaped_before)
        .map(|(after, before)| after - before);
    std::fs::write(&stop, b"").expect("write the stop file");
    let maintainers = collect(maintainers, "maintainer");
    let violations = check(root, &workers, &maintainers).await;
    let mut summary = summarize(&workers, &maintainers, wall, procs, ops, seed, &violations);
    summary["cpu"] = json!({
        "cores": std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
        "machine_busy": machine_busy,
        "workers_seconds": workers_cpu,
        "workers_ms_per_commit": workers_cpu.map(|seconds| {
            seconds * 1_000.0 / summary["commits"].as_f64().unwrap_or(0.0).max(1.0)
        }),
    });
    summary["fragments_at_end"] = json!(fragments_at_head(root).await);
    summary["log_commits_by_kind"] = json!(commits_by_kind(root).await);
    // A held run's rates are not comparable with an unheld one's: the summary says so.
    summary["store_delay_ms"] = json!(delay_ms);
    summary
}

/// The time the machine's cores spent busy and in all, from `/proc/stat` (Linux; `None`
/// elsewhere). It counts every process, the S3 test server's too: on a machine of few
/// cores, a run whose cores are all busy is bound by them, not by the store or the log.
struct MachineCpu {
    busy: u64,
    total: u64,
}

impl MachineCpu {
    fn read() -> Option<MachineCpu> {
        MachineCpu::parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    /// The machine's line (`cpu  user nice system idle iowait irq softirq steal ...`,
    /// in ticks) of a `/proc/stat`.
    fn parse(stat: &str) -> Option<MachineCpu> {
        let line = stat.lines().find(|line| line.starts_with("cpu "))?;
        let ticks: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        // Past `steal` come guest times, which `user` and `nice` already hold.
        let total: u64 = ticks.get(..8)?.iter().sum();
        let (idle, iowait) = (ticks[3], ticks[4]);
        Some(MachineCpu {
            busy: total - idle - iowait,
            total,
        })
    }

    /// The share of the cores' time spent busy since `before`, from 0 to 1.
    fn busy_since(&self, before: &MachineCpu) -> f64 {
        let total = self.total.saturating_sub(before.total);
        self.busy.saturating_sub(before.busy) as f64 / total.max(1) as f64
    }
}

/// The CPU time (user and system, seconds) of this process's children that it has
/// waited for (Linux; `None` elsewhere).
fn reaped_cpu_seconds() -> Option<f64> {
    reaped_cpu_seconds_in(&std::fs::read_to_string("/proc/self/stat").ok()?)
}

/// The children's CPU time (`cutime` and `cstime`, fields 16 and 17) of a
/// `/proc/<pid>/stat`, in seconds.
fn reaped_cpu_seconds_in(stat: &str) -> Option<f64> {
    // `/proc` counts in USER_HZ, which Linux fixes at 100 for its user-space ABI.
    const USER_HZ: f64 = 100.0;
    // The command name (field 2) may hold spaces and parentheses: the fields after it
    // follow its last `)`.
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Field 3 is the first after the name, so field k is at k - 3.
    let ticks = |field: usize| fields.get(field - 3)?.parse::<u64>().ok();
    Some((ticks(16)? + ticks(17)?) as f64 / USER_HZ)
}

/// The log's commits per operation kind: how many writers reserved their tables
/// (`reserve`) and gave a reservation up (`release`), beside the writes.
async fn commits_by_kind(root: &str) -> BTreeMap<String, u64> {
    let mut kinds = BTreeMap::new();
    let Ok(graph) = Omnigraph::open(root).await else {
        return kinds;
    };
    let Ok(log) = graph.graph().log("main") else {
        return kinds;
    };
    let mut before = None;
    // A bounded walk: one page per LOG_PAGE_MAX commits of the largest run.
    for _ in 0..=(PROCS_MAX * OPS_MAX) / omnigraph_publish::limits::LOG_PAGE_MAX + 1 {
        let Ok(page) = log
            .entries(omnigraph_publish::limits::LOG_PAGE_MAX, before)
            .await
        else {
            break;
        };
        let Some(last) = page.last() else {
            break;
        };
        before = Some(last.seq);
        for commit in &page {
            *kinds.entry(commit.operation.kind.clone()).or_default() += 1;
        }
    }
    kinds
}

/// Fragments per type at the head: what the maintainers left the next writer to scan.
async fn fragments_at_head(root: &str) -> BTreeMap<&'static str, usize> {
    let mut fragments = BTreeMap::new();
    let Ok(graph) = Omnigraph::open(root).await else {
        return fragments;
    };
    let Ok(snapshot) = graph.graph().snapshot("main", &CommitRef::Head).await else {
        return fragments;
    };
    for type_name in ["Person", "Company", "WorksAt"] {
        if let Ok(table) = snapshot.table(type_name).await {
            fragments.insert(type_name, table.manifest().fragments.len());
        }
    }
    fragments
}

/// Every check on the final state; the list of what failed.
async fn check(root: &str, workers: &[Value], maintainers: &[Value]) -> Vec<String> {
    let mut violations: Vec<String> = workers
        .iter()
        .chain(maintainers)
        .flat_map(|report| report["violations"].as_array().cloned().unwrap_or_default())
        .map(|violation| format!("process: {}", violation.as_str().unwrap_or_default()))
        .collect();
    let mut persons = BTreeMap::new();
    let mut companies = BTreeSet::new();
    let mut edges = BTreeMap::new();
    let mut cross_edges = BTreeMap::new();
    for worker in workers {
        let model = &worker["model"];
        for (key, age) in model["persons"].as_object().cloned().unwrap_or_default() {
            persons.insert(key, age);
        }
        for company in model["companies"].as_array().cloned().unwrap_or_default() {
            companies.insert(company.as_str().unwrap_or_default().to_string());
        }
        for (key, ends) in model["edges"].as_object().cloned().unwrap_or_default() {
            edges.insert(key, ends);
        }
        for (key, ends) in model["cross_edges"]
            .as_object()
            .cloned()
            .unwrap_or_default()
        {
            cross_edges.insert(key, ends);
        }
    }
    let graph = match Omnigraph::open(root).await {
        Ok(graph) => graph,
        Err(error) => return vec![format!("open for the check: {error}")],
    };
    let rows = |type_name: &'static str| {
        let graph = &graph;
        async move {
            let request = ScanRequest {
                filter: None,
                columns: Vec::new(),
                limit: Some(CHECK_ROWS_MAX),
            };
            let batches = graph.scan(type_name, &request, &CommitRef::Head).await;
            batches.map(|batches| omnigraph_graph::rows::batches_to_json(&batches))
        }
    };
    let (Ok(found_persons), Ok(found_companies), Ok(found_edges)) = (
        rows("Person").await,
        rows("Company").await,
        rows("WorksAt").await,
    ) else {
        return vec!["the head could not be read".into()];
    };
    for (name, found) in [
        ("Person", &found_persons),
        ("Company", &found_companies),
        ("WorksAt", &found_edges),
    ] {
        if found.len() >= CHECK_ROWS_MAX {
            violations.push(format!(
                "{name} has {CHECK_ROWS_MAX} rows or more: not all checked"
            ));
        }
        let keys: BTreeSet<&str> = found.iter().filter_map(|row| row["id"].as_str()).collect();
        if keys.len() != found.len() {
            violations.push(format!(
                "{name}: {} rows but {} keys",
                found.len(),
                keys.len()
            ));
        }
    }
    let found_ages: BTreeMap<String, Value> = found_persons
        .iter()
        .map(|row| {
            (
                row["id"].as_str().unwrap_or_default().to_string(),
                row["age"].clone(),
            )
        })
        .collect();
    let persons: BTreeMap<String, Value> = persons.into_iter().collect();
    if found_ages != persons {
        let missing: Vec<_> = persons
            .keys()
            .filter(|key| !found_ages.contains_key(*key))
            .take(5)
            .collect();
        let extra: Vec<_> = found_ages
            .keys()
            .filter(|key| !persons.contains_key(*key))
            .take(5)
            .collect();
        let changed: Vec<_> = persons
            .iter()
            .filter(|(key, age)| found_ages.get(*key).is_some_and(|found| found != *age))
            .take(5)
            .collect();
        violations.push(format!(
            "Person differs from the acknowledged writes: missing {missing:?}, not acknowledged {extra:?}, other values {changed:?}"
        ));
    }
    let found_company_ids: BTreeSet<String> = found_companies
        .iter()
        .filter_map(|row| row["id"].as_str().map(str::to_string))
        .collect();
    if found_company_ids != companies {
        violations.push(format!(
            "Company: {found_company_ids:?}, acknowledged {companies:?}"
        ));
    }
    let found_edge_ends: BTreeMap<String, Value> = found_edges
        .iter()
        .map(|row| {
            (
                row["id"].as_str().unwrap_or_default().to_string(),
                json!([row["src"], row["dst"]]),
            )
        })
        .collect();
    // A cross edge is expected exactly when its source node is still there.
    for (key, ends) in cross_edges {
        if found_ages.contains_key(ends[0].as_str().unwrap_or_default()) {
            edges.insert(key, ends);
        }
    }
    if found_edge_ends != edges {
        let missing: Vec<_> = edges
            .keys()
            .filter(|key| !found_edge_ends.contains_key(*key))
            .take(5)
            .collect();
        let extra: Vec<_> = found_edge_ends
            .keys()
            .filter(|key| !edges.contains_key(*key))
            .take(5)
            .collect();
        violations.push(format!(
            "WorksAt differs: missing {missing:?}, not acknowledged {extra:?}"
        ));
    }
    for (edge, ends) in &found_edge_ends {
        let src = ends[0].as_str().unwrap_or_default();
        let dst = ends[1].as_str().unwrap_or_default();
        if !found_ages.contains_key(src) || !found_company_ids.contains(dst) {
            violations.push(format!("edge {edge} dangles: {src} -> {dst}"));
        }
    }
    violations.extend(check_log(&graph).await);
    violations
}

/// The log (commits, then the history of those cleanup reclaimed) has every seq from 0
/// to the head, and every retained commit reads.
async fn check_log(graph: &Omnigraph) -> Vec<String> {
    let mut violations = Vec::new();
    let Ok(head) = graph.head().await else {
        return vec!["the head could not be read".into()];
    };
    let log = match graph.graph().log("main") {
        Ok(log) => log,
        Err(error) => return vec![format!("the log: {error}")],
    };
    let mut seqs = Vec::new();
    let mut before = None;
    while seqs.len() as u64 <= head.seq {
        match log
            .entries(omnigraph_publish::limits::LOG_PAGE_MAX, before)
            .await
        {
            Ok(page) if page.is_empty() => break,
            Ok(page) => {
                before = page.last().map(|entry| entry.seq);
                seqs.extend(page.iter().map(|entry| entry.seq));
            }
            Err(error) => {
                violations.push(format!("the log: {error}"));
                break;
            }
        }
    }
    seqs.sort_unstable();
    if seqs != (0..=head.seq).collect::<Vec<_>>() {
        violations.push(format!(
            "the log has gaps: {} commits for head {}",
            seqs.len(),
            head.seq
        ));
    }
    let oldest = omnigraph_publish::retention::oldest_retained(&head);
    for seq in oldest..=head.seq {
        let readable = async {
            let snapshot = graph.graph().snapshot("main", &CommitRef::Seq(seq)).await?;
            for type_name in ["Person", "Company", "WorksAt"] {
                let table = snapshot.table(type_name).await?;
                table
                    .count_rows(None)
                    .await
                    .map_err(|error| OmniError::from_lance("count rows", error))?;
            }
            Ok::<(), OmniError>(())
        };
        if let Err(error) = readable.await {
            violations.push(format!("retained commit {seq} does not read: {error}"));
        }
    }
    violations
}

fn percentile(values: &mut [f64], percent: usize) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    values[(values.len() * percent / 100).min(values.len() - 1)]
}

/// The commits made while every worker ran: from the last one's start to the first
/// one's end. A run's wall time also holds the workers' start and the tail in which
/// fewer of them are left, and neither is P processes writing at once. `null` when the
/// workers never all ran at once (one ended before another began).
fn while_all_ran(workers: &[Value]) -> Value {
    let progress_of = |worker: &Value| -> Vec<(u64, u64)> {
        let entries = worker["progress"]
            .as_array()
            .expect("a worker reports its progress");
        let progress: Vec<(u64, u64)> = entries
            .iter()
            .map(|entry| {
                let field = |at: usize| entry[at].as_u64().expect("progress is two counts");
                (field(0), field(1))
            })
            .collect();
        assert!(!progress.is_empty(), "a worker records its setup write");
        progress
    };
    let progress: Vec<Vec<(u64, u64)>> = workers.iter().map(progress_of).collect();
    let from = workers
        .iter()
        .map(|worker| {
            worker["started_unix_micros"]
                .as_u64()
                .expect("a worker reports its start")
        })
        .max()
        .expect("a run has workers");
    let to = progress
        .iter()
        .filter_map(|entries| entries.last().map(|(at, _)| *at))
        .min()
        .expect("a run has workers");
    if to <= from {
        return Value::Null;
    }
    // Acknowledged writes count when their operation ends: the last entry by `at`
    // (entries are in the order the worker made them, so a clock stepping back
    // misplaces one at most).
    let acknowledged_by = |entries: &[(u64, u64)], at: u64| {
        entries
            .iter()
            .take_while(|(ended, _)| *ended <= at)
            .last()
            .map_or(0, |(_, acknowledged)| *acknowledged)
    };
    let commits: u64 = progress
        .iter()
        .map(|entries| acknowledged_by(entries, to) - acknowledged_by(entries, from))
        .sum();
    let seconds = (to - from) as f64 / 1e6;
    json!({
        "seconds": seconds,
        "commits": commits,
        "commits_per_second": commits as f64 / seconds,
    })
}

fn summarize(
    workers: &[Value],
    maintainers: &[Value],
    wall: f64,
    procs: usize,
    ops: usize,
    seed: usize,
    violations: &[String],
) -> Value {
    let acknowledged: u64 = workers
        .iter()
        .map(|w| w["acknowledged"].as_u64().unwrap_or(0))
        .sum();
    let total_ops: u64 = workers
        .iter()
        .flat_map(|w| w["ops"].as_object().cloned().unwrap_or_default())
        .map(|(_, count)| count.as_u64().unwrap_or(0))
        .sum();
    let mut conflicts: BTreeMap<String, u64> = BTreeMap::new();
    let mut conflicts_by_op: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    let mut latencies: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut requests_by_op: BTreeMap<String, u64> = BTreeMap::new();
    let mut commit_puts_by_op: BTreeMap<String, u64> = BTreeMap::new();
    let mut requests: BTreeMap<String, u64> = BTreeMap::new();
    let mut reads_by_place: BTreeMap<String, u64> = BTreeMap::new();
    let mut reads_by_op_place: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    let mut maintenance: BTreeMap<String, u64> = BTreeMap::new();
    for worker in workers {
        for (code, count) in worker["conflicts"].as_object().cloned().unwrap_or_default() {
            *conflicts.entry(code).or_default() += count.as_u64().unwrap_or(0);
        }
        for (op, codes) in worker["conflicts_by_op"]
            .as_object()
            .cloned()
            .unwrap_or_default()
        {
            for (code, count) in codes.as_object().cloned().unwrap_or_default() {
                *conflicts_by_op
                    .entry(op.clone())
                    .or_default()
                    .entry(code)
                    .or_default() += count.as_u64().unwrap_or(0);
            }
        }
        for (op, values) in worker["latencies_ms"]
            .as_object()
            .cloned()
            .unwrap_or_default()
        {
            latencies.entry(op).or_default().extend(
                values
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .iter()
                    .filter_map(Value::as_f64),
            );
        }
        for (op, count) in worker["requests_by_op"]
            .as_object()
            .cloned()
            .unwrap_or_default()
        {
            *requests_by_op.entry(op).or_default() += count.as_u64().unwrap_or(0);
        }
        for (op, count) in worker["commit_puts_by_op"]
            .as_object()
            .cloned()
            .unwrap_or_default()
        {
            *commit_puts_by_op.entry(op).or_default() += count.as_u64().unwrap_or(0);
        }
        for (kind, count) in worker["requests"].as_object().cloned().unwrap_or_default() {
            *requests.entry(kind).or_default() += count.as_u64().unwrap_or(0);
        }
        for (place, count) in worker["reads_by_place"]
            .as_object()
            .cloned()
            .unwrap_or_default()
        {
            *reads_by_place.entry(place).or_default() += count.as_u64().unwrap_or(0);
        }
        for (op, places) in worker["reads_by_op_place"]
            .as_object()
            .cloned()
            .unwrap_or_default()
        {
            let into = reads_by_op_place.entry(op).or_default();
            for (place, count) in places.as_object().cloned().unwrap_or_default() {
                *into.entry(place).or_default() += count.as_u64().unwrap_or(0);
            }
        }
    }
    for maintainer in maintainers {
        for (outcome, count) in maintainer.as_object().cloned().unwrap_or_default() {
            if let Some(count) = count.as_u64() {
                *maintenance.entry(outcome).or_default() += count;
            }
        }
    }
    let per_100 = |count: u64| {
        if total_ops == 0 {
            0.0
        } else {
            count as f64 * 100.0 / total_ops as f64
        }
    };
    json!({
        "procs": procs,
        "ops_per_worker": ops,
        "seed": seed,
        "seconds": wall,
        "commits": acknowledged,
        "commits_per_second": acknowledged as f64 / wall,
        "while_all_ran": while_all_ran(workers),
        "per_worker_commits_per_second": workers
            .iter()
            .map(|w| w["acknowledged"].as_f64().unwrap_or(0.0) / w["seconds"].as_f64().unwrap_or(1.0).max(1e-9))
            .collect::<Vec<_>>(),
        "conflicts_per_100_ops": conflicts.iter().map(|(code, count)| (code.clone(), json!(per_100(*count)))).collect::<Map<String, Value>>(),
        "latency_ms": latencies
            .iter_mut()
            .map(|(op, values)| {
                let count = values.len().max(1) as f64;
                let requests = requests_by_op.get(op).copied().unwrap_or(0) as f64 / count;
                let commit_puts = commit_puts_by_op.get(op).copied().unwrap_or(0) as f64 / count;
                let reads: Map<String, Value> = reads_by_op_place
                    .get(op)
                    .into_iter()
                    .flatten()
                    .map(|(place, reads)| (place.clone(), json!(*reads as f64 / count)))
                    .collect();
                let conflicts: Map<String, Value> = conflicts_by_op
                    .get(op)
                    .into_iter()
                    .flatten()
                    .map(|(code, refused)| (code.clone(), json!(*refused as f64 * 100.0 / count)))
                    .collect();
                (op.clone(), json!({"p50": percentile(values, 50), "p99": percentile(values, 99), "count": values.len(), "requests_per_op": requests, "commit_puts_per_op": commit_puts, "reads_per_op_by_place": reads, "conflicts_per_100": conflicts}))
            })
            .collect::<Map<String, Value>>(),
        "requests": requests,
        "reads_by_place": reads_by_place,
        "maintenance": maintenance,
        "violations": violations,
    })
}

fn print_summary(summary: &Value) {
    let held = summary["store_delay_ms"]
        .as_u64()
        .map_or(String::new(), |ms| format!(", each request held {ms} ms"));
    println!(
        "{} processes x {} ops (seed {}{held}): {} commits in {:.1} s, {:.1} commits/s",
        summary["procs"],
        summary["ops_per_worker"],
        summary["seed"],
        summary["commits"],
        summary["seconds"].as_f64().unwrap_or(0.0),
        summary["commits_per_second"].as_f64().unwrap_or(0.0)
    );
    println!(
        "per worker commits/s: {}",
        summary["per_worker_commits_per_second"]
    );
    match &summary["while_all_ran"] {
        Value::Null => println!("while all ran: never all at once"),
        steady => println!(
            "while all ran: {} commits in {:.1} s, {:.1} commits/s",
            steady["commits"],
            steady["seconds"].as_f64().unwrap_or(0.0),
            steady["commits_per_second"].as_f64().unwrap_or(0.0)
        ),
    }
    println!(
        "conflicts per 100 ops: {}",
        summary["conflicts_per_100_ops"]
    );
    let logged = |kind: &str| summary["log_commits_by_kind"][kind].as_u64().unwrap_or(0);
    println!(
        "log: {} reservations, {} releases",
        logged("reserve"),
        logged("release")
    );
    for (op, figures) in summary["latency_ms"]
        .as_object()
        .cloned()
        .unwrap_or_default()
    {
        println!(
            "  {op:<12} p50 {:>8.2} ms  p99 {:>8.2} ms  ({} ops, {:.1} requests and {:.2} commit puts each)",
            figures["p50"].as_f64().unwrap_or(0.0),
            figures["p99"].as_f64().unwrap_or(0.0),
            figures["count"],
            figures["requests_per_op"].as_f64().unwrap_or(0.0),
            figures["commit_puts_per_op"].as_f64().unwrap_or(0.0)
        );
        let reads: Vec<String> = figures["reads_per_op_by_place"]
            .as_object()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|(place, reads)| format!("{place} {:.1}", reads.as_f64().unwrap_or(0.0)))
            .collect();
        println!("  {:<12} reads each: {}", "", reads.join(", "));
        let conflicts: Vec<String> = figures["conflicts_per_100"]
            .as_object()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|(code, rate)| format!("{code} {:.1}", rate.as_f64().unwrap_or(0.0)))
            .collect();
        if !conflicts.is_empty() {
            println!("  {:<12} conflicts per 100: {}", "", conflicts.join(", "));
        }
    }
    println!("requests: {}", summary["requests"]);
    println!("reads by place: {}", summary["reads_by_place"]);
    println!("maintenance: {}", summary["maintenance"]);
    let cpu = &summary["cpu"];
    match cpu["machine_busy"].as_f64() {
        Some(busy) => println!(
            "cpu: the machine's {} cores {:.0}% busy while the workers ran; workers {:.1} s, {:.1} ms per commit",
            cpu["cores"],
            busy * 100.0,
            cpu["workers_seconds"].as_f64().unwrap_or(0.0),
            cpu["workers_ms_per_commit"].as_f64().unwrap_or(0.0)
        ),
        None => println!("cpu: not measured here (no /proc)"),
    }
    println!("fragments at the end: {}", summary["fragments_at_end"]);
    let violations = summary["violations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if violations.is_empty() {
        println!(
            "check: every acknowledged row present with its last value, no duplicate key, no dangling edge, no log gap, every retained commit readable"
        );
    } else {
        println!("check FAILED:");
        for violation in violations {
            println!("  {}", violation.as_str().unwrap_or_default());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machines_busy_share_leaves_out_idle_and_waiting_time() {
        let before = MachineCpu::parse(
            "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0 0 0\nintr 1 2\n",
        )
        .unwrap();
        // 300 more ticks: 150 busy (user, system, irq, steal), 150 idle or waiting.
        let after = MachineCpu::parse("cpu  200 0 90 900 100 5 0 5 7 0\n").unwrap();
        assert_eq!((before.busy, before.total), (150, 1000));
        assert_eq!((after.busy, after.total), (300, 1300));
        assert!((after.busy_since(&before) - 0.5).abs() < 1e-9);
        assert!(MachineCpu::parse("cpu  1 2 3\n").is_none());
        assert!(MachineCpu::parse("intr 1 2\n").is_none());
    }

    #[test]
    fn the_reaped_cpu_time_is_read_past_a_name_with_spaces() {
        // Fields 14 to 17: utime 7, stime 3, cutime 250, cstime 50 (ticks of 1/100 s).
        let stat = "4242 (omni graph) x) S 1 4242 4242 0 -1 4194304 10 0 0 0 7 3 250 50 20 0 4 0";
        assert_eq!(reaped_cpu_seconds_in(stat), Some(3.0));
        assert_eq!(reaped_cpu_seconds_in("4242 (short) S 1 2"), None);
        // On Linux, a child that spins for a while adds its time once waited for.
        if let Some(before) = reaped_cpu_seconds() {
            let status = std::process::Command::new("sh")
                .args(["-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"])
                .status()
                .expect("sh runs");
            assert!(status.success());
            let spent = reaped_cpu_seconds().unwrap() - before;
            assert!(spent >= 0.05, "the child's {spent} s");
        }
    }
}
