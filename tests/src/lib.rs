//! Helpers the suites share: test roots on a local folder and in memory, a small typed
//! table, and readers that return what a user would check (rows, keys, row ids).

#![warn(missing_docs)]
#![warn(unreachable_pub)]

use arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
use arrow_array::{Array, Int64Array, RecordBatch, StringArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use futures::TryStreamExt;
use lance::Dataset;
use omnigraph_core::adapter::{self, LinkOrigin};
use omnigraph_core::storage::StorageRoot;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The dimension of the test table's vectors.
pub const DIMENSION: i32 = 4;

/// Where a test root lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// A fresh temporary folder.
    Local,
    /// A fresh process-shared `memory://` name.
    Memory,
}

/// Both backends, for tests that must hold on each.
pub const BACKENDS: [Backend; 2] = [Backend::Local, Backend::Memory];

/// A root for one test; the folder (if any) lives as long as it does.
pub struct TestRoot {
    /// The open root.
    pub root: Arc<StorageRoot>,
    /// The URI it was opened from.
    pub uri: String,
    _dir: Option<tempfile::TempDir>,
}

impl TestRoot {
    /// A fresh, empty root on `backend`.
    pub async fn new(backend: Backend) -> TestRoot {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let (uri, dir) = match backend {
            Backend::Local => {
                let dir = tempfile::tempdir().expect("temp dir");
                (dir.path().join("graph").display().to_string(), Some(dir))
            }
            Backend::Memory => (
                format!(
                    "memory://test-{}-{}",
                    std::process::id(),
                    NEXT.fetch_add(1, Ordering::SeqCst)
                ),
                None,
            ),
        };
        let root = StorageRoot::open(&uri).await.expect("open root");
        TestRoot {
            root,
            uri,
            _dir: dir,
        }
    }

    /// A second, independent handle on the same root (its own Lance session).
    pub async fn reopen(&self) -> Arc<StorageRoot> {
        StorageRoot::open(&self.uri).await.expect("reopen root")
    }
}

/// The test table: `id: Int64` key, `name: String`, `text: String?`, `vec: Vector(4)?`.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, false),
        Field::new("text", DataType::Utf8, true),
        Field::new(
            "vec",
            DataType::FixedSizeList(
                Arc::new(Field::new("item", DataType::Float32, true)),
                DIMENSION,
            ),
            true,
        ),
    ]))
}

/// Rows with ids `start..start+count`; vectors are deterministic, or all null.
pub fn rows(start: i64, count: usize, null_vectors: bool) -> RecordBatch {
    let ids: Vec<i64> = (start..start + count as i64).collect();
    let names: Vec<String> = ids.iter().map(|id| format!("name-{id}")).collect();
    let words = ["apple", "banana", "cherry", "durian"];
    let texts: Vec<String> = ids
        .iter()
        .map(|id| format!("{} pie number {id}", words[(*id as usize) % words.len()]))
        .collect();
    let mut vectors = FixedSizeListBuilder::new(Float32Builder::new(), DIMENSION);
    for id in &ids {
        if null_vectors {
            for _ in 0..DIMENSION {
                vectors.values().append_null();
            }
            vectors.append(false);
        } else {
            for component in 0..DIMENSION {
                let value = ((id * 7919 + component as i64 * 104_729) % 1000) as f32 / 1000.0;
                vectors.values().append_value(value);
            }
            vectors.append(true);
        }
    }
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(StringArray::from(names)),
            Arc::new(StringArray::from(texts)),
            Arc::new(vectors.finish()),
        ],
    )
    .expect("test batch")
}

/// An origin for links staged in tests.
pub fn origin(base_version: u64) -> LinkOrigin {
    LinkOrigin {
        branch: "main".into(),
        base_seq: 0,
        base_version,
    }
}

/// A new table `tables/<name>` with the test schema.
pub async fn new_table(root: &StorageRoot, name: &str) -> Arc<Dataset> {
    adapter::create_table(root, &format!("tables/{name}"), schema())
        .await
        .expect("create table")
}

/// `(id, stable row id)` of every row, sorted by id.
pub async fn ids_and_row_ids(dataset: &Dataset) -> Vec<(i64, u64)> {
    let batches = id_and_row_id_batches(dataset).await;
    let mut out = Vec::new();
    for batch in batches {
        let ids = batch
            .column_by_name("id")
            .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
            .expect("id column")
            .clone();
        let row_ids = batch
            .column_by_name("_rowid")
            .and_then(|c| c.as_any().downcast_ref::<UInt64Array>())
            .expect("_rowid column")
            .clone();
        for index in 0..batch.num_rows() {
            out.push((ids.value(index), row_ids.value(index)));
        }
    }
    out.sort();
    out
}

/// Every row's `id` and `_rowid`, as scanned.
async fn id_and_row_id_batches(dataset: &Dataset) -> Vec<RecordBatch> {
    try_id_and_row_id_batches(dataset)
        .await
        .expect("scan batches")
}

/// Every row's `id` and `_rowid`, as scanned; what went wrong when the scan fails.
async fn try_id_and_row_id_batches(dataset: &Dataset) -> Result<Vec<RecordBatch>, String> {
    let mut scanner = dataset.scan();
    scanner
        .project(&["id"])
        .map_err(|error| error.to_string())?;
    scanner.with_row_id();
    scanner
        .try_into_stream()
        .await
        .map_err(|error| error.to_string())?
        .try_collect()
        .await
        .map_err(|error| error.to_string())
}

/// The ids of the rows where `filter` holds, sorted.
pub async fn ids_where(dataset: &Dataset, filter: &str) -> Vec<i64> {
    let mut scanner = dataset.scan();
    scanner.project(&["id"]).expect("project");
    scanner.filter(filter).expect("filter");
    let batches: Vec<RecordBatch> = scanner
        .try_into_stream()
        .await
        .expect("scan")
        .try_collect()
        .await
        .expect("scan batches");
    let mut ids: Vec<i64> = batches
        .iter()
        .flat_map(|batch| {
            let column = batch
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .expect("id column")
                .clone();
            (0..column.len()).map(move |index| column.value(index))
        })
        .collect();
    ids.sort();
    ids
}

/// The string value of `column` for the row with `id`.
pub async fn string_of(dataset: &Dataset, id: i64, column: &str) -> Option<String> {
    let mut scanner = dataset.scan();
    scanner.project(&[column]).expect("project");
    scanner.filter(&format!("id = {id}")).expect("filter");
    let batch = scanner.try_into_batch().await.expect("scan");
    if batch.num_rows() == 0 {
        return None;
    }
    let values = batch.column(0).as_any().downcast_ref::<StringArray>()?;
    (!values.is_null(0)).then(|| values.value(0).to_string())
}

/// The schema the graph suites use.
pub const SOCIAL_SCHEMA: &str = "
node Person { id: String @key, name: String @index(fts), age: Int32? @index }
node Company { id: String @key, name: String }
edge WorksAt: Person -> Company { since: Int32? }
";

/// A graph for one test; the folder (if any) lives as long as it does.
pub struct TestGraph {
    /// The open graph.
    pub graph: omnigraph_publish::Graph,
    /// Its genesis commit.
    pub genesis: omnigraph_publish::GraphCommit,
    /// The URI it was created at.
    pub uri: String,
    _dir: Option<tempfile::TempDir>,
}

impl TestGraph {
    /// A fresh graph with [`SOCIAL_SCHEMA`] on `backend`.
    pub async fn new(backend: Backend) -> TestGraph {
        let TestRoot { uri, _dir, .. } = TestRoot::new(backend).await;
        let catalog = omnigraph_core::schema::parse("social.pg", SOCIAL_SCHEMA).expect("schema");
        let (graph, genesis) = omnigraph_publish::Graph::create(&uri, &catalog, "test")
            .await
            .expect("create graph");
        TestGraph {
            graph,
            genesis,
            uri,
            _dir,
        }
    }

    /// A second, independent handle on the same graph.
    pub async fn reopen(&self) -> omnigraph_publish::Graph {
        omnigraph_publish::Graph::open(&self.uri)
            .await
            .expect("open graph")
    }

    /// The table id of `type_name` at genesis.
    pub fn table_id(&self, type_name: &str) -> String {
        self.genesis
            .pin_of_type(type_name)
            .expect("type in genesis")
            .table_id
            .clone()
    }
}

/// `count` Person rows with keys `p{start}…`.
pub fn people(start: usize, count: usize) -> RecordBatch {
    let ids: Vec<String> = (start..start + count).map(|i| format!("p{i}")).collect();
    let names: Vec<String> = ids.iter().map(|id| format!("name of {id}")).collect();
    let ages: Vec<Option<i32>> = (start..start + count)
        .map(|i| Some(20 + (i % 50) as i32))
        .collect();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("name", DataType::Utf8, false),
        Field::new("age", DataType::Int32, true),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(ids)),
            Arc::new(StringArray::from(names)),
            Arc::new(arrow_array::Int32Array::from(ages)),
        ],
    )
    .expect("people batch")
}

/// `count` Company rows with keys `c{start}…`.
pub fn companies(start: usize, count: usize) -> RecordBatch {
    let ids: Vec<String> = (start..start + count).map(|i| format!("c{i}")).collect();
    let names: Vec<String> = ids.iter().map(|id| format!("company {id}")).collect();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("name", DataType::Utf8, false),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(ids)),
            Arc::new(StringArray::from(names)),
        ],
    )
    .expect("companies batch")
}

/// Every object under the root, for "nothing changed" assertions.
pub async fn all_objects(root: &StorageRoot) -> Vec<String> {
    root.list("").await.expect("list root")
}

/// The objects of a JSON array, as rows for `insert_json`.
pub fn objects(values: serde_json::Value) -> Vec<serde_json::Map<String, serde_json::Value>> {
    values
        .as_array()
        .expect("a JSON array")
        .iter()
        .map(|value| value.as_object().expect("a JSON object").clone())
        .collect()
}

/// The table of `type_name` at the head of `graph`'s main branch.
pub async fn head_table(graph: &omnigraph_graph::Omnigraph, type_name: &str) -> Arc<Dataset> {
    graph
        .graph()
        .snapshot("main", &omnigraph_publish::CommitRef::Head)
        .await
        .expect("head snapshot")
        .table(type_name)
        .await
        .expect("head table")
}

/// A fault on every put-if-absent of a commit object of `main` until the handle drops.
pub fn fault_commit_puts(
    root: &StorageRoot,
    action: omnigraph_core::storage::FaultAction,
) -> omnigraph_core::storage::FaultHandle {
    root.inject(omnigraph_core::storage::FaultRule::new(
        "_graph/branches/main/commits/*",
        &[omnigraph_core::storage::RequestKind::PutIfAbsent],
        action,
    ))
}

/// Runs `future` on a logical clock `ahead` of the wall clock: what was written just
/// before is that much older to it. Safe only while nothing else writes the root.
pub async fn later_by<F: std::future::Future>(ahead: std::time::Duration, future: F) -> F::Output {
    let start = omnigraph_core::seams::now_micros()
        + i64::try_from(ahead.as_micros()).expect("a test clock offset fits i64");
    omnigraph_core::seams::simulate(omnigraph_core::seams::Simulation::new(7, start, 0), future)
        .await
}

/// Cleanup keeping the newest `n` commits, at the smallest grace period.
pub fn keep_with_minimum_grace(n: u64) -> omnigraph_maintenance::CleanupOptions {
    omnigraph_maintenance::CleanupOptions::new(
        omnigraph_maintenance::CleanupPolicy::keep_commits(n).expect("keep at least one"),
    )
    .with_grace(omnigraph_publish::limits::GRACE_MIN)
    .expect("the minimum grace")
}

/// Cleanup keeping the newest commit of each branch, at the smallest grace period, on
/// a clock `later` ahead (so what was written before is older than the grace period).
pub async fn cleanup_keeping_one_after(
    graph: &omnigraph_graph::Omnigraph,
    later: std::time::Duration,
) -> omnigraph_maintenance::CleanupReport {
    use omnigraph_maintenance::MaintenanceExt;
    later_by(
        later,
        graph.maintenance().cleanup(&keep_with_minimum_grace(1)),
    )
    .await
    .expect("cleanup")
}

/// The names of the live branches of `graph`'s root, as it lists them.
pub async fn branch_names(graph: &omnigraph_graph::Omnigraph) -> Vec<String> {
    graph
        .list_branches()
        .await
        .expect("list branches")
        .into_iter()
        .map(|branch| branch.name)
        .collect()
}

/// A new handle on `graph`'s root, on `branch`.
pub async fn on_branch(
    graph: &omnigraph_graph::Omnigraph,
    branch: &str,
) -> omnigraph_graph::Omnigraph {
    omnigraph_graph::Omnigraph::open_root(graph.graph().root().clone())
        .await
        .expect("open the root")
        .with_branch(branch)
        .expect("a valid branch name")
}

/// The table id of `type_name` at `graph`'s head.
pub async fn head_table_id(graph: &omnigraph_graph::Omnigraph, type_name: &str) -> String {
    graph
        .head()
        .await
        .expect("the head")
        .require_pin_of_type(type_name)
        .expect("the type")
        .table_id
        .clone()
}

/// The ids of `type_name` at `at`, sorted.
pub async fn ids_at(
    graph: &omnigraph_graph::Omnigraph,
    type_name: &str,
    at: &omnigraph_publish::CommitRef,
) -> Vec<String> {
    let request = omnigraph_graph::ScanRequest {
        filter: None,
        columns: vec!["id".into()],
        limit: Some(1_000_000),
    };
    let batches = graph
        .scan(type_name, &request, at)
        .await
        .unwrap_or_else(|error| panic!("scan {type_name} at {at:?}: {error}"));
    let mut ids: Vec<String> = omnigraph_graph::rows::batches_to_json(&batches)
        .into_iter()
        .map(|row| row["id"].as_str().expect("a string id").to_string())
        .collect();
    ids.sort();
    ids
}

/// The `id` (text) and stable row id of every row of `table`, sorted by id.
pub async fn text_ids_and_row_ids(table: &Dataset) -> Vec<(String, u64)> {
    try_text_ids_and_row_ids(table).await.expect("scan batches")
}

/// [`text_ids_and_row_ids`], or what went wrong reading them.
pub async fn try_text_ids_and_row_ids(table: &Dataset) -> Result<Vec<(String, u64)>, String> {
    let batches = try_id_and_row_id_batches(table).await?;
    let mut out: Vec<(String, u64)> = omnigraph_graph::rows::batches_to_json(&batches)
        .into_iter()
        .map(|row| {
            (
                row["id"].as_str().expect("text id").to_string(),
                row["_rowid"].as_u64().expect("row id"),
            )
        })
        .collect();
    out.sort();
    Ok(out)
}

/// The stack [`on_a_big_stack`] runs on: a debug build's poll frames for a whole chain
/// of writers (a merge load, an update, a cascading delete) nested in one test outgrow a
/// test thread's 2 MiB.
pub const BIG_STACK_BYTES: usize = 64 << 20;

/// Runs `future` to completion on a thread (and runtime workers) with
/// [`BIG_STACK_BYTES`] of stack.
pub fn on_a_big_stack<F>(future: impl FnOnce() -> F + Send + 'static) -> F::Output
where
    F: std::future::Future + 'static,
    F::Output: Send + 'static,
{
    std::thread::Builder::new()
        .name("big-stack".into())
        .stack_size(BIG_STACK_BYTES)
        .spawn(move || {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_stack_size(BIG_STACK_BYTES)
                .enable_all()
                .build()
                .expect("a runtime")
                .block_on(future())
        })
        .expect("the big-stack thread")
        .join()
        .expect("the big-stack thread ran")
}

/// A publication on `base` that changes no table (as actor `test`, kind `test`): a
/// record when it reads nothing, else a table change of no table that read `read_set`.
pub fn publication_changing_nothing(
    base: omnigraph_publish::GraphCommit,
    read_set: omnigraph_publish::ReadSet,
    summary: &str,
) -> omnigraph_publish::Publication {
    publication_changing(base, read_set, Vec::new(), summary)
}

/// A publication on `base` that pins `pins` (as actor `test`, kind `test`), having read
/// `read_set` (a record that changes nothing when it reads nothing and pins nothing).
pub fn publication_changing(
    base: omnigraph_publish::GraphCommit,
    read_set: omnigraph_publish::ReadSet,
    pins: Vec<omnigraph_publish::TablePin>,
    summary: &str,
) -> omnigraph_publish::Publication {
    use omnigraph_publish::{Change, CommitOperation, Publication, ReadSet, Requirements};
    let operation = CommitOperation {
        kind: "test".into(),
        summary: summary.into(),
    };
    if read_set == ReadSet::Nothing && pins.is_empty() {
        return Publication::record(base, Change::Nothing, None, operation, "test");
    }
    let requires = Requirements::reading(read_set);
    Publication::new(base, requires, Change::tables(pins), operation, "test")
}

/// Every unit a `PartlyPublished` lists that is not in `after`, the head after the run
/// (`before` the head before it): a table is in when its pin moved, cleanup's record
/// (`retention:<branch>`) when the head's record changed.
pub fn units_not_in_head(
    units: &[String],
    before: &omnigraph_publish::GraphCommit,
    after: &omnigraph_publish::GraphCommit,
) -> Vec<String> {
    units
        .iter()
        .filter(|unit| match unit.strip_prefix("retention:") {
            // Another branch's record cannot be judged from these heads: left out.
            Some(branch) => branch == after.branch && after.retention == before.retention,
            None => {
                let pin = |commit: &omnigraph_publish::GraphCommit| {
                    commit.pin_of_type(unit).map(|pin| pin.version)
                };
                pin(after) == pin(before)
            }
        })
        .cloned()
        .collect()
}

/// `(id, age)` of every Person of `graph` at the head, sorted (every person has an age).
pub async fn people_and_ages(graph: &omnigraph_graph::Omnigraph) -> Vec<(String, i64)> {
    use omnigraph_graph::ScanRequest;
    use omnigraph_publish::CommitRef;
    let people = graph.count("Person", None, &CommitRef::Head).await.unwrap();
    let every = ScanRequest {
        limit: Some(people.max(1) as usize),
        ..ScanRequest::default()
    };
    let batches = graph
        .scan("Person", &every, &CommitRef::Head)
        .await
        .unwrap();
    let mut rows: Vec<(String, i64)> = omnigraph_graph::rows::batches_to_json(&batches)
        .into_iter()
        .map(|row| {
            (
                row["id"].as_str().unwrap().to_string(),
                row["age"].as_i64().unwrap(),
            )
        })
        .collect();
    rows.sort();
    rows
}

/// Polls `running` (a future under `clock`'s simulation) until it parks at `point`,
/// and returns the ticket that releases it. Panics, naming `step`, if it ends first.
pub async fn parked_at<F: std::future::Future + ?Sized>(
    clock: &omnigraph_core::seams::Simulation,
    running: &mut std::pin::Pin<Box<F>>,
    point: omnigraph_core::failpoints::Failpoint,
    step: &str,
) -> u64
where
    F::Output: std::fmt::Debug,
{
    clock.windows().park_at(point);
    std::future::poll_fn(|context| {
        if let std::task::Poll::Ready(ended) = running.as_mut().poll(context) {
            panic!("it ended before {step}: {ended:?}");
        }
        clock.windows().watch(context.waker());
        match clock.windows().take_parked() {
            Some(ticket) => std::task::Poll::Ready(ticket),
            None => std::task::Poll::Pending,
        }
    })
    .await
}

/// Rows as JSON arrays, each value in the position of its column in `schema` (a query's
/// columns are ordered; the graph's JSON objects are not).
pub fn rows_in_column_order(schema: &SchemaRef, batches: &[RecordBatch]) -> Vec<serde_json::Value> {
    let columns: Vec<&String> = schema.fields().iter().map(|field| field.name()).collect();
    omnigraph_graph::rows::batches_to_json(batches)
        .into_iter()
        .map(|row| {
            serde_json::Value::Array(columns.iter().map(|c| row[c.as_str()].clone()).collect())
        })
        .collect()
}
