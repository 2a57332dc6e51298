//! The detached-commit matrix, fast tier (`cargo xtask matrix`): every writer in every
//! window under the faults that fit it, each followed by every recovery actor, checked
//! against a reference model of the rows that should be visible.
//!
//! A cell is (writer, window, fault, actor). Each runs on a new graph in memory,
//! seeded the same way, and checks:
//! 1. the evidence is honest: `BeforeEffect` leaves no object behind, `Unpublished`
//!    leaves the head where it was, `InDoubt` appears only where the fault makes the
//!    outcome undecidable, a success moved the head;
//! 2. nothing is lost and nothing is invented: after the actor, the rows at the head
//!    equal the model, with no key twice and no dangling edge;
//! 3. the next operation lands (the actor succeeds);
//! 4. cleanup (every commit kept, the grace period passed) reclaims every file a failed
//!    write left under `tables/`, and nothing else.
//!
//! Cells that cannot exist are listed as skipped, with the reason.

use omnigraph_core::storage::{FaultAction, FaultRule, RequestKind};
use omnigraph_core::{ErrorKind, Evidence, OmniError, StorageKind, failpoints};
use omnigraph_graph::{LoadMode, Omnigraph, ScanRequest};
use omnigraph_maintenance::{MaintenanceExt, UnitOutcome};
use omnigraph_publish::CommitRef;
use omnigraph_tests::{Backend, TestRoot, objects};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

const MATRIX_SCHEMA: &str = "
node Person { id: String @key, name: String, age: Int32? @index }
node Company { id: String @key, name: String }
edge WorksAt: Person -> Company { since: Int32? }
";

/// The schema a schema-apply cell moves to: one new optional property, and a new type
/// (whose table the apply creates).
const MATRIX_SCHEMA_WITH_CITY: &str = "
node Person { id: String @key, name: String, age: Int32? @index }
node Company { id: String @key, name: String, city: String? }
node Project { id: String @key, name: String }
edge WorksAt: Person -> Company { since: Int32? }
";

/// Failpoints no matrix cell reaches, and why.
const FAILPOINTS_NOT_IN_THE_MATRIX: [(failpoints::Failpoint, &str); 1] = [(
    failpoints::CREATE_AFTER_FORMAT,
    "graph creation, before there is a graph to write (tests/suite/protocol.rs)",
)];

/// The branch a creation cell creates.
const CREATED_BRANCH: &str = "fresh";
/// The branch a deletion cell deletes.
const DELETED_BRANCH: &str = "gone";

/// People in a load cell: more than one batch of the loader's.
const LOAD_PEOPLE: usize = omnigraph_graph::limits::INGEST_BATCH_ROWS_MAX + 100;

/// The types, in the order the checks read them.
const TYPES: [&str; 3] = ["Person", "Company", "WorksAt"];

/// How long a race cell holds its writer's first staged manifest while another writer
/// publishes.
const RACE_HOLD: Duration = Duration::from_millis(300);
/// How many times a race cell is run, its hold doubled each time, until the rival
/// publishes first.
const RACE_ATTEMPTS_MAX: u32 = 4;
/// The longest a cell waits for its window's request.
const WINDOW_WAIT_MAX: Duration = Duration::from_secs(20);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Writer {
    Insert,
    Load,
    LoadMerge,
    EdgeInsert,
    Update,
    DeleteCascade,
    SchemaApply,
    BuildIndexes,
    Optimize,
    Cleanup,
    /// Merges branch `feature` (which added a person and changed another) into main,
    /// which changed Person too: a row merge.
    Merge,
    /// Inserts a person on branch `side`, created from the seed: the cell's checks
    /// read that branch.
    BranchWrite,
    /// Creates branch `fresh` from main's head (a new life: the seed created and
    /// deleted it once), through the publisher's windows around its commit PUT. The
    /// cell's checks read main, which creation leaves alone, and judge the evidence on
    /// `fresh`'s log; the branch then exists exactly when the creation landed, with the
    /// seed's rows.
    BranchCreate,
    /// Deletes branch `gone` (created from the seed, with a person only it holds),
    /// through the publisher's windows around its commit PUT. The cell's checks read
    /// main, which the deletion leaves alone, and judge the evidence on `gone`'s log;
    /// the branch is then live exactly when the deletion did not land. After it,
    /// cleanup (the full tier's actor) reclaims what only the branch kept, and main
    /// still reads.
    BranchDelete,
}

impl Writer {
    const ALL: [Writer; 14] = [
        Writer::Insert,
        Writer::Load,
        Writer::LoadMerge,
        Writer::EdgeInsert,
        Writer::Update,
        Writer::DeleteCascade,
        Writer::SchemaApply,
        Writer::BuildIndexes,
        Writer::Optimize,
        Writer::Cleanup,
        Writer::Merge,
        Writer::BranchWrite,
        Writer::BranchCreate,
        Writer::BranchDelete,
    ];

    /// The branch the writer writes, and the cell's checks read.
    fn branch(self) -> &'static str {
        match self {
            Writer::BranchWrite => "side",
            _ => "main",
        }
    }

    /// The branch whose log the writer commits to.
    fn log(self) -> &'static str {
        match self {
            Writer::BranchCreate => CREATED_BRANCH,
            Writer::BranchDelete => DELETED_BRANCH,
            _ => self.branch(),
        }
    }

    /// The newest commit of the writer's log (a deleted life's last included).
    async fn log_head(self, uri: &str) -> omnigraph_publish::GraphCommit {
        let graph = Omnigraph::open(uri).await.unwrap();
        graph
            .graph()
            .log(self.log())
            .unwrap()
            .newest()
            .await
            .unwrap()
            .expect("the writer's log has a commit")
    }

    /// A new handle on `uri`, on the writer's branch.
    async fn open(self, uri: &str) -> Omnigraph {
        Omnigraph::open(uri)
            .await
            .unwrap()
            .with_branch(self.branch())
            .unwrap()
    }

    /// The type whose table the writer changes first (the actor writes it next).
    fn table(self) -> &'static str {
        match self {
            Writer::EdgeInsert => "WorksAt",
            Writer::SchemaApply => "Company",
            _ => "Person",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Window {
    /// A link's files are written, its manifest is not.
    MidStaging,
    /// A link's manifest is written; the writer has not seen it (between links).
    BetweenLinks,
    /// Every link is staged; the commit is not put.
    AfterStaging,
    /// The commit's put-if-absent itself.
    AtCommitPut,
    /// The commit landed; the `HEAD` copy is not written.
    AfterCommitPut,
    /// Another writer publishes while the cell's writer stages: it loses `n+1`.
    Race,
}

impl Window {
    const ALL: [Window; 6] = [
        Window::MidStaging,
        Window::BetweenLinks,
        Window::AfterStaging,
        Window::AtCommitPut,
        Window::AfterCommitPut,
        Window::Race,
    ];
}

/// What goes wrong in the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// An error is returned: a failpoint fires, or every commit PUT fails (transient).
    ReturnedError,
    /// Every commit PUT fails with a permanent error (a refused request).
    PermanentError,
    /// The commit PUT is applied, and a transient error reported.
    LostAck,
    /// The commit PUT is applied, and `AlreadyExists` reported (a retried conditional PUT).
    DuplicatedAck,
    /// The writer's future is dropped while the window's request is held: a crash.
    Crash,
    /// Another writer publishes first.
    Contention,
}

impl Fault {
    /// The faults each window is run with.
    fn of(window: Window) -> &'static [Fault] {
        match window {
            Window::MidStaging => &[Fault::ReturnedError, Fault::Crash],
            Window::BetweenLinks | Window::AfterStaging | Window::AfterCommitPut => {
                &[Fault::ReturnedError]
            }
            Window::AtCommitPut => &[
                Fault::ReturnedError,
                Fault::PermanentError,
                Fault::LostAck,
                Fault::DuplicatedAck,
                Fault::Crash,
            ],
            Window::Race => &[Fault::Contention],
        }
    }
}

/// How long a crash cell holds the request it drops the writer at.
const CRASH_HOLD: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Actor {
    /// The next writer on the table the cell's writer changed.
    NextWriterSameTable,
    /// The next writer on another table.
    NextWriterOtherTable,
    /// An optimize run.
    Optimize,
    /// Cleanup keeping one commit, once the grace period has passed.
    Cleanup,
    /// A new handle on the root, and a full read.
    Reopen,
}

impl Actor {
    const ALL: [Actor; 5] = [
        Actor::NextWriterSameTable,
        Actor::NextWriterOtherTable,
        Actor::Optimize,
        Actor::Cleanup,
        Actor::Reopen,
    ];
}

/// Runs the recovery `actor` after a cell's writer, which changed `table`
/// (`schema_moved` when its schema apply landed); returns the handle the checks read
/// through. The actor must succeed: what it does joins `expected`.
async fn act(
    actor: Actor,
    graph: Omnigraph,
    test: &TestRoot,
    table: &'static str,
    schema_moved: bool,
    expected: &mut Model,
    problems: &mut Vec<String>,
) -> Omnigraph {
    let write_to = |type_name: &'static str, expected: &mut Model| match type_name {
        "WorksAt" => {
            expected.put("WorksAt", edge("ea", "p3", "c0"));
            ("WorksAt", json!([{"id": "ea", "src": "p3", "dst": "c0"}]))
        }
        "Company" => {
            let mut row = json!({"id": "ca", "name": "next"});
            if schema_moved {
                row["city"] = Value::Null;
            }
            expected.put("Company", row);
            ("Company", json!([{"id": "ca", "name": "next"}]))
        }
        _ => {
            expected.put("Person", person("na", 50));
            ("Person", json!([person("na", 50)]))
        }
    };
    match actor {
        Actor::NextWriterSameTable | Actor::NextWriterOtherTable => {
            let type_name = match (actor, table) {
                (Actor::NextWriterSameTable, same) => same,
                (_, "Person") => "Company",
                _ => "Person",
            };
            let (type_name, rows) = write_to(type_name, expected);
            if let Err(error) = graph.insert_json(type_name, objects(rows)).await {
                problems.push(format!("the next writer on {type_name} failed: {error}"));
            }
            graph
        }
        Actor::Optimize => {
            match graph.maintenance().optimize().await {
                Ok(report) => {
                    for unit in &report.tables {
                        if let UnitOutcome::Failed { message, .. } = &unit.outcome {
                            problems
                                .push(format!("optimize after it: {}: {message}", unit.type_key));
                        }
                    }
                }
                Err(error) => problems.push(format!("optimize after it: {error}")),
            }
            graph
        }
        Actor::Cleanup => {
            let cleaned = omnigraph_tests::later_by(
                Duration::from_secs(120),
                graph
                    .maintenance()
                    .cleanup(&omnigraph_tests::keep_with_minimum_grace(1)),
            )
            .await;
            if let Err(error) = cleaned {
                problems.push(format!("cleanup after it: {error}"));
            }
            graph
        }
        Actor::Reopen => Omnigraph::open(&test.uri)
            .await
            .unwrap()
            .with_branch(graph.branch())
            .unwrap(),
    }
}

/// Why a cell cannot exist, or `None`.
fn skipped(writer: Writer, window: Window) -> Option<&'static str> {
    match (writer, window) {
        (Writer::Cleanup, Window::MidStaging | Window::BetweenLinks) => Some(
            "cleanup stages no link: it publishes its record, then deletes (its failed deletes are in tests/suite/cleanup.rs)",
        ),
        (Writer::BranchCreate, Window::MidStaging | Window::BetweenLinks) => {
            Some("creation stages nothing: it puts its first commit")
        }
        (Writer::BranchCreate, Window::Race) => Some(
            "creation reads no table, so no writer can change what it read; two creators of one name are in tests/suite/branches.rs",
        ),
        (Writer::BranchDelete, Window::MidStaging | Window::BetweenLinks) => {
            Some("deletion stages nothing: it puts its last commit")
        }
        (Writer::BranchDelete, Window::Race) => Some(
            "deletion reads nothing (it follows any head); a deletion beside a merge and cleanup is in tests/suite/merge.rs",
        ),
        _ => None,
    }
}

/// The rows that should be visible, by type and key.
#[derive(Clone, Debug, Default, PartialEq)]
struct Model {
    rows: BTreeMap<&'static str, BTreeMap<String, Map<String, Value>>>,
}

impl Model {
    fn put(&mut self, type_name: &'static str, row: Value) {
        let row = row.as_object().expect("a row").clone();
        let key = row["id"].as_str().expect("an id").to_string();
        self.rows.entry(type_name).or_default().insert(key, row);
    }

    fn set(&mut self, type_name: &'static str, key: &str, property: &str, value: Value) {
        if let Some(row) = self
            .rows
            .get_mut(type_name)
            .and_then(|rows| rows.get_mut(key))
        {
            row.insert(property.to_string(), value);
        }
    }

    fn delete_person(&mut self, key: &str) {
        self.rows.entry("Person").or_default().remove(key);
        self.rows
            .entry("WorksAt")
            .or_default()
            .retain(|_, edge| edge["src"] != json!(key));
    }

    /// The model after `writer` landed.
    fn after(&self, writer: Writer) -> Model {
        let mut model = self.clone();
        match writer {
            Writer::Insert | Writer::BranchWrite => model.put("Person", person("n1", 41)),
            Writer::Load => {
                for i in 0..LOAD_PEOPLE {
                    model.put("Person", person(&format!("n{i}"), 42));
                }
                model.put("WorksAt", edge("en1", "n0", "c0"));
            }
            Writer::LoadMerge => {
                model.put("Person", json!({"id": "p1", "name": "merged", "age": 11}));
                model.put("Person", person("n4", 44));
            }
            Writer::EdgeInsert => model.put("WorksAt", edge("en2", "p5", "c1")),
            Writer::Update => model.set("Person", "p2", "age", json!(77)),
            Writer::DeleteCascade => model.delete_person("p0"),
            Writer::SchemaApply => {
                for row in model.rows.entry("Company").or_default().values_mut() {
                    row.insert("city".into(), Value::Null);
                }
            }
            Writer::Merge => {
                model.put("Person", person("f1", 1));
                model.set("Person", "p3", "age", json!(33));
            }
            Writer::BuildIndexes
            | Writer::Optimize
            | Writer::Cleanup
            | Writer::BranchCreate
            | Writer::BranchDelete => {}
        }
        model
    }
}

fn person(id: &str, age: i64) -> Value {
    json!({"id": id, "name": format!("name {id}"), "age": age})
}

fn edge(id: &str, src: &str, dst: &str) -> Value {
    json!({"id": id, "src": src, "dst": dst, "since": Value::Null})
}

/// A new graph with people (two fragments more than the load made, so optimize has
/// work), companies and edges, and no index built (so index builds have work).
async fn seeded(writer: Writer) -> (Omnigraph, TestRoot, Model) {
    seeded_on(Backend::Memory, writer).await
}

/// The seed graph; for a merge, also branch `feature` from it after the load, with a
/// person added and another changed there (main's own inserts follow); for a branch
/// write, a handle on branch `side`, created from the seed.
async fn seeded_on(backend: Backend, writer: Writer) -> (Omnigraph, TestRoot, Model) {
    let test = TestRoot::new(backend).await;
    let graph = Omnigraph::create(&test.uri, MATRIX_SCHEMA).await.unwrap();
    let mut model = Model::default();
    let mut lines = Vec::new();
    for i in 0..6 {
        let row = person(&format!("p{i}"), i);
        lines.push(with_type("Person", &row));
        model.put("Person", row);
    }
    for c in 0..2 {
        let row = json!({"id": format!("c{c}"), "name": format!("company {c}")});
        lines.push(with_type("Company", &row));
        model.put("Company", row);
    }
    for e in 0..4 {
        let row = edge(&format!("e{e}"), &format!("p{e}"), "c0");
        lines.push(with_type("WorksAt", &row));
        model.put("WorksAt", row);
    }
    load_lines(&graph, &lines, LoadMode::Append).await.unwrap();
    if writer == Writer::Merge {
        graph
            .create_branch("feature", &CommitRef::Head)
            .await
            .unwrap();
        let feature = omnigraph_tests::on_branch(&graph, "feature").await;
        feature
            .insert_json("Person", objects(json!([person("f1", 1)])))
            .await
            .unwrap();
        feature
            .update("Person", "id = 'p3'", &[("age".into(), json!(33))])
            .await
            .unwrap();
    }
    for i in 6..8 {
        let row = person(&format!("p{i}"), i);
        graph
            .insert_json("Person", objects(json!([row.clone()])))
            .await
            .unwrap();
        model.put("Person", row);
    }
    if writer == Writer::BranchCreate {
        graph
            .create_branch(CREATED_BRANCH, &CommitRef::Head)
            .await
            .unwrap();
        graph.delete_branch(CREATED_BRANCH).await.unwrap();
    }
    if writer == Writer::BranchDelete {
        graph
            .create_branch(DELETED_BRANCH, &CommitRef::Head)
            .await
            .unwrap();
        omnigraph_tests::on_branch(&graph, DELETED_BRANCH)
            .await
            .insert_json("Person", objects(json!([person("gone1", 9)])))
            .await
            .unwrap();
    }
    if writer == Writer::BranchWrite {
        graph.create_branch("side", &CommitRef::Head).await.unwrap();
        let graph = graph.with_branch("side").unwrap();
        return (graph, test, model);
    }
    (graph, test, model)
}

fn with_type(type_name: &str, row: &Value) -> String {
    let mut object = row.as_object().unwrap().clone();
    object.insert("type".into(), json!(type_name));
    if type_name == "WorksAt" {
        object.remove("since");
    }
    Value::Object(object).to_string()
}

async fn load_lines(
    graph: &Omnigraph,
    lines: &[String],
    mode: LoadMode,
) -> omnigraph_core::Result<()> {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), lines.join("\n") + "\n").unwrap();
    graph.load(file.path(), mode).await.map(|_| ())
}

/// Runs `writer` once; an optimize unit that failed is its error.
/// Runs `writer` once: its result, and what the checks of its own report found (an
/// optimize unit's outcome must match whether its table's pin moved). An optimize unit
/// that failed is its error.
async fn run_writer(
    graph: &Omnigraph,
    writer: Writer,
) -> (omnigraph_core::Result<()>, Vec<String>) {
    if writer == Writer::Optimize {
        return run_optimize(graph).await;
    }
    let result = match writer {
        Writer::Insert | Writer::BranchWrite => graph
            .insert_json("Person", objects(json!([person("n1", 41)])))
            .await
            .map(|_| ()),
        Writer::Load => {
            let mut lines: Vec<String> = (0..LOAD_PEOPLE)
                .map(|i| with_type("Person", &person(&format!("n{i}"), 42)))
                .collect();
            lines.push(with_type("WorksAt", &edge("en1", "n0", "c0")));
            load_lines(graph, &lines, LoadMode::Append).await
        }
        Writer::LoadMerge => {
            let lines = [
                with_type("Person", &json!({"id": "p1", "name": "merged", "age": 11})),
                with_type("Person", &person("n4", 44)),
            ];
            load_lines(graph, &lines, LoadMode::Merge).await
        }
        Writer::EdgeInsert => graph
            .insert_json(
                "WorksAt",
                objects(json!([{"id": "en2", "src": "p5", "dst": "c1"}])),
            )
            .await
            .map(|_| ()),
        Writer::Update => graph
            .update("Person", "id = 'p2'", &[("age".into(), json!(77))])
            .await
            .map(|_| ()),
        Writer::DeleteCascade => graph.delete("Person", "id = 'p0'").await.map(|_| ()),
        Writer::SchemaApply => graph
            .apply_schema(MATRIX_SCHEMA_WITH_CITY, false)
            .await
            .map(|_| ()),
        Writer::BuildIndexes => graph.maintenance().build_indexes().await.map(|_| ()),
        Writer::Optimize => unreachable!("run above"),
        Writer::Merge => graph.merge("feature").await.map(|_| ()),
        Writer::BranchCreate => graph
            .create_branch(CREATED_BRANCH, &CommitRef::Head)
            .await
            .map(|_| ()),
        Writer::BranchDelete => graph.delete_branch(DELETED_BRANCH).await.map(|_| ()),
        // Two minutes on, past the grace period: the seeded commits are reclaimable,
        // so the run has a record to publish.
        Writer::Cleanup => omnigraph_tests::later_by(
            Duration::from_secs(120),
            graph
                .maintenance()
                .cleanup(&omnigraph_tests::keep_with_minimum_grace(1)),
        )
        .await
        .and_then(|report| {
            if report.recorded.is_empty() {
                Err(OmniError::internal("cleanup published no record"))
            } else {
                Ok(())
            }
        }),
    };
    (result, Vec::new())
}

async fn run_optimize(graph: &Omnigraph) -> (omnigraph_core::Result<()>, Vec<String>) {
    let mut claims = Vec::new();
    let before = match graph.head().await {
        Ok(head) => head,
        Err(error) => return (Err(error), claims),
    };
    let report = match graph.maintenance().optimize().await {
        Ok(report) => report,
        Err(error) => return (Err(error), claims),
    };
    // Each unit's outcome says whether its table moved: a published unit's pin is new at
    // the head, a failed unit's is not (a race's rival writes only Company).
    let head = async { graph.graph().log(graph.branch())?.head().await }.await;
    match head {
        Ok(head) => {
            for unit in &report.tables {
                let pin = |commit: &omnigraph_publish::GraphCommit| {
                    commit.pin_of_type(&unit.type_key).map(|pin| pin.version)
                };
                let moved = pin(&head) != pin(&before);
                match &unit.outcome {
                    UnitOutcome::Published { .. } if !moved => claims.push(format!(
                        "optimize says {} published, but its pin did not move",
                        unit.type_key
                    )),
                    UnitOutcome::Failed { .. } if moved && unit.type_key != "Company" => claims
                        .push(format!(
                            "optimize says {} failed, but its pin moved",
                            unit.type_key
                        )),
                    _ => {}
                }
            }
        }
        Err(error) => claims.push(format!("the head after optimize: {error}")),
    }
    for table in &report.tables {
        if let UnitOutcome::Failed {
            message, evidence, ..
        } = &table.outcome
        {
            let error = OmniError::internal(format!("optimize {}: {message}", table.type_key))
                .with_evidence(evidence.clone());
            return (Err(error), claims);
        }
    }
    (Ok(()), claims)
}

/// The requests a window's wrapper fault applies to, for `writer`.
fn window_requests(window: Window, writer: Writer) -> String {
    match window {
        Window::AtCommitPut => format!("_graph/branches/{}/commits/*", writer.log()),
        _ => "tables/*/_versions/*".into(),
    }
}

/// What a race holds while the rival publishes: the writer's first staged manifest, or
/// for cleanup (which stages nothing) its read of genesis as it traces the log, after
/// it read the head and before it publishes its record. The rival never reads genesis.
fn race_hold_rule(writer: Writer, hold: Duration) -> FaultRule {
    let action = FaultAction::Delay(hold);
    match writer {
        Writer::Cleanup => FaultRule::new(
            omnigraph_publish::layout::commit_path("main", 0),
            &[RequestKind::Get],
            action,
        ),
        _ => FaultRule::new(
            window_requests(Window::Race, writer),
            &[RequestKind::PutIfAbsent],
            action,
        ),
    }
    .times(1)
}

/// What running a writer in its window did.
struct Windowed {
    /// The writer's result; `None` when it crashed (its future dropped).
    outcome: Option<omnigraph_core::Result<()>>,
    /// What the checks of the writer's own report found.
    claims: Vec<String>,
    /// Whether the window's fault fired (for the faults that report it).
    fired: bool,
    /// In a race: the rival's commit, or why it did not land.
    rival: Option<omnigraph_core::Result<omnigraph_publish::GraphCommit>>,
}

/// Waits until `fault` fired, at most [`WINDOW_WAIT_MAX`]; whether it did.
async fn until_fired(fault: &omnigraph_core::storage::FaultHandle) -> bool {
    let began = std::time::Instant::now();
    while fault.fired() == 0 {
        if began.elapsed() > WINDOW_WAIT_MAX {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    true
}

/// Runs `writer` with `fault` in `window` (a race holds the writer's first staged
/// manifest for `race_hold`).
async fn run_in_window(
    graph: &Omnigraph,
    test: &TestRoot,
    writer: Writer,
    window: Window,
    fault: Fault,
    race_hold: Duration,
) -> Windowed {
    let root = graph.graph().root();
    let on_requests = |action: FaultAction| {
        FaultRule::new(
            window_requests(window, writer),
            &[RequestKind::PutIfAbsent],
            action,
        )
    };
    let done = |(outcome, claims): (omnigraph_core::Result<()>, Vec<String>), fired| Windowed {
        outcome: Some(outcome),
        claims,
        fired,
        rival: None,
    };
    match (window, fault) {
        (_, Fault::Crash) => {
            let held = root.inject(on_requests(FaultAction::Delay(CRASH_HOLD)).times(1));
            tokio::select! {
                written = Box::pin(run_writer(graph, writer)) => done(written, held.fired() > 0),
                true = until_fired(&held) => Windowed {
                    outcome: None,
                    claims: Vec::new(),
                    fired: true,
                    rival: None,
                },
            }
        }
        (Window::MidStaging, _) => {
            let armed = failpoints::arm(failpoints::STAGE_BEFORE_MANIFEST, "return");
            done(armed.run(Box::pin(run_writer(graph, writer))).await, true)
        }
        (Window::BetweenLinks, _) => {
            let armed = failpoints::arm(failpoints::STAGE_AFTER_MANIFEST, "return");
            done(armed.run(Box::pin(run_writer(graph, writer))).await, true)
        }
        (Window::AfterStaging, _) => {
            let armed = failpoints::arm(failpoints::PUBLISH_BEFORE_COMMIT_PUT, "return");
            done(armed.run(Box::pin(run_writer(graph, writer))).await, true)
        }
        (Window::AtCommitPut, Fault::LostAck | Fault::DuplicatedAck) => {
            let action = if fault == Fault::LostAck {
                FaultAction::LostAck
            } else {
                FaultAction::DuplicatedAck
            };
            let injected = root.inject(on_requests(action).times(1));
            let written = Box::pin(run_writer(graph, writer)).await;
            done(written, injected.fired() == 1)
        }
        (Window::AtCommitPut, _) => {
            let kind = if fault == Fault::PermanentError {
                StorageKind::Permanent
            } else {
                StorageKind::Transient
            };
            let injected = root.inject(on_requests(FaultAction::FailBefore(kind)));
            let written = Box::pin(run_writer(graph, writer)).await;
            done(written, injected.fired() > 0)
        }
        (Window::AfterCommitPut, _) => {
            // The failpoint skips the HEAD copy: no PUT of `HEAD` while it is armed.
            let probe = root.probe();
            let armed = failpoints::arm(failpoints::PUBLISH_AFTER_COMMIT_PUT, "return");
            let written = armed.run(Box::pin(run_writer(graph, writer))).await;
            let head_copied = probe
                .requests()
                .iter()
                .any(|request| request.kind == RequestKind::Put && request.path.ends_with("/HEAD"));
            done(written, !head_copied)
        }
        (Window::Race, _) => {
            // The writer's first staged manifest is held; meanwhile another handle
            // publishes a row on another table.
            let hold = root.inject(race_hold_rule(writer, race_hold));
            let other = writer.open(&test.uri).await;
            let concurrent = async {
                if !until_fired(&hold).await {
                    return None;
                }
                Some(
                    other
                        .insert_json("Company", objects(json!([{"id": "c9", "name": "rival"}])))
                        .await,
                )
            };
            let ((outcome, claims), rival) =
                tokio::join!(Box::pin(run_writer(graph, writer)), Box::pin(concurrent));
            Windowed {
                fired: rival.is_some(),
                outcome: Some(outcome),
                claims,
                rival,
            }
        }
    }
}

/// Everything under `tables/`.
async fn table_objects(test: &TestRoot) -> BTreeSet<String> {
    test.root
        .list("tables")
        .await
        .unwrap()
        .into_iter()
        .collect()
}

/// The rows of every type at the head, or the violations found reading them.
async fn rows_at_head(
    graph: &Omnigraph,
) -> BTreeMap<&'static str, BTreeMap<String, Map<String, Value>>> {
    let mut found = BTreeMap::new();
    for type_name in TYPES {
        let request = ScanRequest {
            filter: None,
            columns: Vec::new(),
            limit: Some(10_000),
        };
        let batches = graph
            .scan(type_name, &request, &CommitRef::Head)
            .await
            .unwrap_or_else(|error| panic!("scan {type_name}: {error}"));
        let mut rows = BTreeMap::new();
        for row in omnigraph_graph::rows::batches_to_json(&batches) {
            let key = row["id"].as_str().unwrap().to_string();
            assert!(
                rows.insert(key.clone(), row).is_none(),
                "{type_name}: key {key} twice"
            );
        }
        found.insert(type_name, rows);
    }
    found
}

/// What one cell found.
struct CellResult {
    /// What it found wrong; empty when it passed.
    problems: Vec<String>,
    /// In a race cell: whether the rival published before the writer (else the cell
    /// is run again with a longer hold).
    race_exercised: bool,
}

/// The rows at the head equal `expected`, with no dangling edge (keys are unique by
/// [`rows_at_head`]).
async fn check_head(reader: &Omnigraph, expected: &Model, problems: &mut Vec<String>) {
    let found = rows_at_head(reader).await;
    for type_name in TYPES {
        let want = expected.rows.get(type_name).cloned().unwrap_or_default();
        let got = found.get(type_name).cloned().unwrap_or_default();
        if want != got {
            let missing: Vec<&String> = want.keys().filter(|key| !got.contains_key(*key)).collect();
            let invented: Vec<&String> =
                got.keys().filter(|key| !want.contains_key(*key)).collect();
            let differ: Vec<&String> = want
                .iter()
                .filter(|(key, row)| got.get(*key).is_some_and(|found| found != *row))
                .map(|(key, _)| key)
                .collect();
            problems.push(format!(
                "{type_name} differs from the model: missing {missing:?}, invented {invented:?}, other values {differ:?}"
            ));
        }
    }
    // Stable row ids are unique in every table.
    for type_name in TYPES {
        let table = omnigraph_tests::head_table(reader, type_name).await;
        let rows = omnigraph_tests::text_ids_and_row_ids(&table).await;
        let row_ids: BTreeSet<u64> = rows.iter().map(|(_, row_id)| *row_id).collect();
        if row_ids.len() != rows.len() {
            problems.push(format!(
                "{type_name}: {} rows but {} stable row ids",
                rows.len(),
                row_ids.len()
            ));
        }
    }
    let people = &found["Person"];
    let companies = &found["Company"];
    for (key, edge) in &found["WorksAt"] {
        let src = edge["src"].as_str().unwrap_or_default();
        let dst = edge["dst"].as_str().unwrap_or_default();
        if !people.contains_key(src) || !companies.contains_key(dst) {
            problems.push(format!("edge {key} dangles: {src} -> {dst}"));
        }
    }
}

/// Whether every file of `leftovers` is gone; what is left under `tables/`.
async fn check_reclaimed(
    test: &TestRoot,
    leftovers: &BTreeSet<String>,
    problems: &mut Vec<String>,
) -> BTreeSet<String> {
    let left = table_objects(test).await;
    let kept: Vec<&String> = leftovers
        .iter()
        .filter(|object| left.contains(*object))
        .take(3)
        .collect();
    if !kept.is_empty() {
        problems.push(format!("cleanup kept what the failure left: {kept:?}"));
    }
    left
}

/// Check 4: cleanup (every commit kept, the grace period passed) reclaims every file a
/// failed write left (`leftovers`), and removes nothing of `objects_before`.
async fn check_cleanup(
    reader: &Omnigraph,
    test: &TestRoot,
    objects_before: &BTreeSet<String>,
    leftovers: &BTreeSet<String>,
    problems: &mut Vec<String>,
) {
    let options = omnigraph_maintenance::CleanupOptions::new(
        omnigraph_maintenance::CleanupPolicy::keep_commits(10_000).unwrap(),
    )
    .with_grace(omnigraph_publish::limits::GRACE_MIN)
    .unwrap();
    let cleaned = omnigraph_tests::later_by(
        Duration::from_secs(120),
        reader.maintenance().cleanup(&options),
    )
    .await;
    if let Err(error) = cleaned {
        problems.push(format!("cleanup after the failure: {error}"));
    }
    let left = check_reclaimed(test, leftovers, problems).await;
    let lost: Vec<&String> = objects_before.difference(&left).take(3).collect();
    if !lost.is_empty() {
        problems.push(format!(
            "cleanup removed files a kept commit needs: {lost:?}"
        ));
    }
}

/// A cell whose writer crashed in its window (before its commit PUT landed): nothing of
/// it is visible, the next operation lands, and cleanup reclaims what it left once its
/// table moves on.
async fn crashed(
    graph: Omnigraph,
    test: TestRoot,
    model: Model,
    writer: Writer,
    head_before: omnigraph_publish::GraphCommit,
    objects_before: BTreeSet<String>,
    actor: Actor,
) -> Vec<String> {
    let mut problems = Vec::new();
    let head_after = writer.log_head(&test.uri).await;
    if head_after.seq != head_before.seq {
        problems.push("the writer crashed before its commit PUT, but the head moved".into());
    }
    if writer == Writer::BranchCreate {
        check_created(&test, false, &model, &mut problems).await;
    }
    if writer == Writer::BranchDelete {
        check_deleted(&test, false, &mut problems).await;
    }
    let leftovers: BTreeSet<String> = table_objects(&test)
        .await
        .difference(&objects_before)
        .cloned()
        .collect();
    let mut expected = model;
    let reader = act(
        actor,
        graph,
        &test,
        writer.table(),
        false,
        &mut expected,
        &mut problems,
    )
    .await;
    if actor == Actor::Cleanup {
        // Keeping one commit, it may remove old versions too; only the leftovers are
        // known to go.
        check_reclaimed(&test, &leftovers, &mut problems).await;
    } else {
        check_cleanup(&reader, &test, &objects_before, &leftovers, &mut problems).await;
    }
    check_head(&reader, &expected, &mut problems).await;
    problems
}

/// After a creation cell's writer: branch `fresh` is live exactly when the creation
/// landed, and then holds `model` (the seed's rows).
async fn check_created(test: &TestRoot, landed: bool, model: &Model, problems: &mut Vec<String>) {
    let graph = Omnigraph::open(&test.uri).await.unwrap();
    let live = omnigraph_tests::branch_names(&graph)
        .await
        .iter()
        .any(|name| name == CREATED_BRANCH);
    if live != landed {
        problems.push(format!(
            "the creation landed: {landed}, but the branch is live: {live}"
        ));
    }
    if live {
        let created = graph.with_branch(CREATED_BRANCH).unwrap();
        let mut found = Vec::new();
        check_head(&created, model, &mut found).await;
        problems.extend(
            found
                .into_iter()
                .map(|problem| format!("on {CREATED_BRANCH}: {problem}")),
        );
    }
}

/// After a deletion cell's writer: branch `gone` is live exactly when the deletion did
/// not land, and then still holds its person.
async fn check_deleted(test: &TestRoot, landed: bool, problems: &mut Vec<String>) {
    let graph = Omnigraph::open(&test.uri).await.unwrap();
    let live = omnigraph_tests::branch_names(&graph)
        .await
        .iter()
        .any(|name| name == DELETED_BRANCH);
    if live == landed {
        problems.push(format!(
            "the deletion landed: {landed}, but the branch is live: {live}"
        ));
    }
    if live {
        let gone = graph.with_branch(DELETED_BRANCH).unwrap();
        let ids = omnigraph_tests::ids_at(&gone, "Person", &CommitRef::Head).await;
        if !ids.contains(&"gone1".to_string()) {
            problems.push(format!("{DELETED_BRANCH} lost its person: {ids:?}"));
        }
    }
}

/// Runs one cell on a new graph; a race cell holds its writer for `race_hold`.
async fn run_cell(
    writer: Writer,
    window: Window,
    fault: Fault,
    actor: Actor,
    race_hold: Duration,
) -> CellResult {
    let (graph, test, mut model) = seeded(writer).await;
    let mut problems = Vec::new();
    let head_before = writer.log_head(&test.uri).await;
    let objects_before = table_objects(&test).await;
    let windowed = Box::pin(run_in_window(
        &graph, &test, writer, window, fault, race_hold,
    ))
    .await;
    if !windowed.fired {
        problems.push(format!(
            "the {fault:?} fault never fired: the window was never reached"
        ));
    }
    problems.extend(windowed.claims);
    let Some(outcome) = windowed.outcome else {
        let problems_after = Box::pin(crashed(
            graph,
            test,
            model,
            writer,
            head_before,
            objects_before,
            actor,
        ))
        .await;
        problems.extend(problems_after);
        return CellResult {
            problems,
            race_exercised: true,
        };
    };
    if fault == Fault::Crash {
        problems.push("the writer finished: the crash window was never reached".into());
    }
    // In a race the rival must publish first, as `n+1`; the writer then loses it.
    let mut race_exercised = true;
    let mut rival_commits = 0;
    if window == Window::Race {
        match &windowed.rival {
            Some(Ok(rival)) => {
                model.put("Company", json!({"id": "c9", "name": "rival"}));
                rival_commits = 1;
                race_exercised = rival.seq == head_before.seq + 1;
            }
            // A schema change that landed first refuses the rival's insert.
            Some(Err(error))
                if writer == Writer::SchemaApply && error.kind() == ErrorKind::ReadSetChanged =>
            {
                race_exercised = false;
            }
            Some(Err(error)) => problems.push(format!("the rival's insert failed: {error}")),
            None => {}
        }
        if !race_exercised {
            return CellResult {
                problems,
                race_exercised,
            };
        }
    }
    let head_after = writer.log_head(&test.uri).await;
    let must_fail = matches!(fault, Fault::ReturnedError | Fault::PermanentError)
        && matches!(
            window,
            Window::MidStaging | Window::BetweenLinks | Window::AfterStaging | Window::AtCommitPut
        );
    if must_fail && outcome.is_ok() {
        problems.push("the writer succeeded: the window was never reached".into());
    }
    // The commit was applied: only a success, or an honest InDoubt, may be reported.
    let applied = matches!(fault, Fault::LostAck | Fault::DuplicatedAck);
    if applied
        && let Err(error) = &outcome
        && error.evidence() != &Evidence::InDoubt
    {
        problems.push(format!(
            "the commit landed, but the writer said {:?}: {error}",
            error.evidence()
        ));
    }
    let landed = match &outcome {
        Ok(()) => {
            if head_after.seq <= head_before.seq + rival_commits {
                problems.push("acknowledged, but the head did not move".into());
            }
            true
        }
        Err(error) => {
            let evidence = error.evidence().clone();
            match &evidence {
                Evidence::BeforeEffect => {
                    if table_objects(&test).await != objects_before {
                        problems.push(format!("BeforeEffect, but objects were written: {error}"));
                    }
                    if head_after.seq != head_before.seq + rival_commits {
                        problems.push(format!("BeforeEffect, but the head moved: {error}"));
                    }
                }
                Evidence::Unpublished => {
                    if head_after.seq != head_before.seq + rival_commits {
                        problems.push(format!("Unpublished, but the head moved: {error}"));
                    }
                }
                Evidence::InDoubt => {
                    if window != Window::AtCommitPut {
                        problems.push(format!("InDoubt outside the commit PUT: {error}"));
                    }
                }
                Evidence::PartlyPublished { published_units } => {
                    // Every unit it lists is in the head (each cell's graph is new, so
                    // a record in the head is the run's own).
                    for unit in omnigraph_tests::units_not_in_head(
                        published_units,
                        &head_before,
                        &head_after,
                    ) {
                        problems.push(format!(
                            "PartlyPublished lists {unit}, which is not in the head: {error}"
                        ));
                    }
                }
            }
            if window == Window::AfterCommitPut {
                problems.push(format!(
                    "the commit landed, but the writer reported failure: {error}"
                ));
            }
            let allowed = match error.kind() {
                ErrorKind::Storage(_)
                | ErrorKind::ReadSetChanged
                | ErrorKind::ContentionExhausted
                | ErrorKind::PublishInDoubt => true,
                // Optimize reports a failed unit, which the cell makes its error.
                ErrorKind::Internal => writer == Writer::Optimize,
                _ => false,
            };
            if !allowed {
                problems.push(format!("an unexpected kind of error: {error}"));
            }
            // In doubt: whatever the head shows decides (no other writer runs).
            evidence == Evidence::InDoubt && head_after.seq > head_before.seq + rival_commits
        }
    };
    if writer == Writer::BranchCreate {
        check_created(&test, landed, &model, &mut problems).await;
    }
    if writer == Writer::BranchDelete {
        check_deleted(&test, landed, &mut problems).await;
    }
    let mut expected = if landed { model.after(writer) } else { model };
    let failed = outcome.is_err() && !landed;
    // What a failed write left; in a race the rival's published files are new too, so
    // only the rule that nothing a commit needs is removed applies there.
    let leftovers: BTreeSet<String> = if failed && window != Window::Race {
        table_objects(&test)
            .await
            .difference(&objects_before)
            .cloned()
            .collect()
    } else {
        BTreeSet::new()
    };
    // The recovery actor; the next operation must land.
    let schema_moved = landed && writer == Writer::SchemaApply;
    let reader = act(
        actor,
        graph,
        &test,
        writer.table(),
        schema_moved,
        &mut expected,
        &mut problems,
    )
    .await;
    if failed && actor == Actor::Cleanup {
        check_reclaimed(&test, &leftovers, &mut problems).await;
    } else if failed {
        check_cleanup(&reader, &test, &objects_before, &leftovers, &mut problems).await;
    }
    check_head(&reader, &expected, &mut problems).await;
    CellResult {
        problems,
        race_exercised,
    }
}

#[test]
fn matrix_every_writer_window_fault_and_actor() {
    // Deep writer futures in a debug build: see `on_a_big_stack`.
    omnigraph_tests::on_a_big_stack(fast_tier);
}

/// The root a process cell's child writes, and the writer it runs.
const CHILD_ROOT_VAR: &str = "OMNIGRAPH_MATRIX_CHILD_ROOT";
const CHILD_WRITER_VAR: &str = "OMNIGRAPH_MATRIX_CHILD_WRITER";
/// How long a process cell waits for its child to stage a link.
const CHILD_STAGED_WAIT_MAX: Duration = Duration::from_secs(60);

/// A process cell's child: runs its writer held just after its first link's manifest,
/// where the parent kills it.
#[test]
fn matrix_process_child() {
    let (Ok(uri), Ok(name)) = (
        std::env::var(CHILD_ROOT_VAR),
        std::env::var(CHILD_WRITER_VAR),
    ) else {
        return; // Only runs as a child of a process cell.
    };
    let writer = Writer::ALL
        .into_iter()
        .find(|writer| format!("{writer:?}") == name)
        .expect("a writer's name");
    omnigraph_tests::on_a_big_stack(move || async move {
        let graph = writer.open(&uri).await;
        let armed = failpoints::arm(failpoints::STAGE_AFTER_MANIFEST, "sleep(600000)");
        let _ = armed.run(Box::pin(run_writer(&graph, writer))).await;
        panic!("the writer was meant to be killed while staging");
    });
}

/// The detached manifests under `tables/`.
async fn staged_manifests(test: &TestRoot) -> BTreeSet<String> {
    table_objects(test)
        .await
        .into_iter()
        .filter(|object| object.contains("/_versions/d"))
        .collect()
}

/// A process cell: the writer runs in a child process that is killed (SIGKILL) just
/// after its first link's manifest; then the same checks as a crash.
async fn run_process_cell(writer: Writer, actor: Actor) -> Vec<String> {
    let (graph, test, model) = seeded_on(Backend::Local, writer).await;
    let head_before = writer.log_head(&test.uri).await;
    let objects_before = table_objects(&test).await;
    let manifests_before = staged_manifests(&test).await;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "matrix::matrix_process_child",
            "--exact",
            "--test-threads=1",
        ])
        .env(CHILD_ROOT_VAR, &test.uri)
        .env(CHILD_WRITER_VAR, format!("{writer:?}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let began = std::time::Instant::now();
    let mut staged = false;
    while began.elapsed() < CHILD_STAGED_WAIT_MAX {
        if staged_manifests(&test).await != manifests_before {
            staged = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let mut problems = Vec::new();
    if !staged {
        problems.push("the child never staged a link: the window was never reached".into());
    }
    problems.extend(
        Box::pin(crashed(
            graph,
            test,
            model,
            writer,
            head_before,
            objects_before,
            actor,
        ))
        .await,
    );
    problems
}

/// The environment variable that picks the tier: `full` runs every actor after every
/// fault; anything else (or unset) the fast tier, which CI runs.
const TIER_VAR: &str = "OMNIGRAPH_MATRIX";
/// The environment variable that runs one cell only: `Writer/Window/Fault/Actor`.
const CELL_VAR: &str = "OMNIGRAPH_MATRIX_CELL";
/// The actors of the fast tier.
const FAST_ACTORS: [Actor; 2] = [Actor::NextWriterSameTable, Actor::Reopen];

/// The (writer, window, fault) triples every actor runs after.
fn faulted_writes() -> usize {
    Writer::ALL
        .iter()
        .flat_map(|writer| {
            Window::ALL
                .iter()
                .filter(|window| skipped(*writer, **window).is_none())
        })
        .map(|window| Fault::of(*window).len())
        .sum()
}

/// The process cells: one per writer that stages links.
fn process_cells_of_the_tier() -> usize {
    Writer::ALL
        .iter()
        .filter(|writer| skipped(**writer, Window::BetweenLinks).is_none())
        .count()
}

/// The cells a tier of `actors` actors runs.
fn cells(actors: usize) -> usize {
    actors * faulted_writes() + process_cells_of_the_tier()
}

/// `docs/testing.md` states the matrix as the code defines it: how many writers, and how
/// many cells each tier runs.
#[test]
fn the_testing_doc_states_the_matrix_as_the_code_defines_it() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/testing.md"))
        .expect("docs/testing.md");
    let doc = doc.split_whitespace().collect::<Vec<_>>().join(" ");
    for stated in [
        format!("every one of its {} writers", Writer::ALL.len()),
        format!("The fast tier ({} cells", cells(FAST_ACTORS.len())),
        format!("`--full` ({} cells", cells(Actor::ALL.len())),
    ] {
        assert!(
            doc.contains(&stated),
            "docs/testing.md should say {stated:?}"
        );
    }
}

/// A cell's name, as [`CELL_VAR`] takes it.
fn cell_name(writer: Writer, window: Window, fault: Fault, actor: Actor) -> String {
    format!("{writer:?}/{window:?}/{fault:?}/{actor:?}")
}

/// Runs a cell, again with a longer hold while a race's rival did not publish first.
async fn run_cell_until_raced(
    writer: Writer,
    window: Window,
    fault: Fault,
    actor: Actor,
) -> Vec<String> {
    let mut hold = RACE_HOLD;
    let mut cell = Box::pin(run_cell(writer, window, fault, actor, hold)).await;
    for _ in 1..RACE_ATTEMPTS_MAX {
        if cell.race_exercised {
            break;
        }
        hold *= 2;
        cell = Box::pin(run_cell(writer, window, fault, actor, hold)).await;
    }
    let mut problems = cell.problems;
    if !cell.race_exercised {
        problems.push(format!(
            "the rival never published first in {RACE_ATTEMPTS_MAX} attempts"
        ));
    }
    problems
}

/// The cells run, what failed, and the counts by writer and by actor (cells, failed).
#[derive(Default)]
struct Ledger {
    ran: usize,
    failures: Vec<String>,
    by_writer: BTreeMap<String, (usize, usize)>,
    by_actor: BTreeMap<String, (usize, usize)>,
}

impl Ledger {
    /// Records the cell `name` and its problems, each with the command that reruns it.
    fn record(&mut self, name: &str, writer: Writer, actor: Actor, problems: Vec<String>) {
        self.ran += 1;
        let failed = usize::from(!problems.is_empty());
        for (tally, key) in [
            (&mut self.by_writer, format!("{writer:?}")),
            (&mut self.by_actor, format!("{actor:?}")),
        ] {
            let entry = tally.entry(key).or_default();
            entry.0 += 1;
            entry.1 += failed;
        }
        for problem in problems {
            self.failures.push(format!(
                "{name}: {problem}\n    rerun: {CELL_VAR}={name} cargo xtask matrix"
            ));
        }
    }
}

async fn fast_tier() {
    let full = std::env::var(TIER_VAR).is_ok_and(|tier| tier == "full");
    let only = std::env::var(CELL_VAR).ok();
    let actors: &[Actor] = if full || only.is_some() {
        &Actor::ALL
    } else {
        &FAST_ACTORS
    };
    let started = std::time::Instant::now();
    let reached_before: Vec<u64> = failpoints::ALL
        .iter()
        .map(|point| failpoints::reached(*point))
        .collect();
    let mut process_cells = 0usize;
    let mut skipped_cells = Vec::new();
    let mut ledger = Ledger::default();
    for writer in Writer::ALL {
        for window in Window::ALL {
            if let Some(reason) = skipped(writer, window) {
                skipped_cells.push(format!("{writer:?} x {window:?}: {reason}"));
                continue;
            }
            for fault in Fault::of(window) {
                for actor in actors {
                    let name = cell_name(writer, window, *fault, *actor);
                    if only.as_ref().is_some_and(|only| *only != name) {
                        continue;
                    }
                    let problems = run_cell_until_raced(writer, window, *fault, *actor).await;
                    ledger.record(&name, writer, *actor, problems);
                }
            }
        }
    }
    // Process cells: the writer's process is killed between links.
    for writer in Writer::ALL {
        if skipped(writer, Window::BetweenLinks).is_some() {
            continue;
        }
        for actor in [Actor::NextWriterSameTable] {
            let name = format!("{writer:?}/BetweenLinks/ProcessKilled/{actor:?}");
            if only.as_ref().is_some_and(|only| *only != name) {
                continue;
            }
            let problems = Box::pin(run_process_cell(writer, actor)).await;
            process_cells += 1;
            ledger.record(&name, writer, actor, problems);
        }
    }
    let Ledger {
        ran,
        failures,
        by_writer,
        by_actor,
    } = ledger;
    let tier = if full { "full" } else { "fast" };
    println!(
        "matrix {tier} tier: {ran} cells, {} passed, {} failed, {} skipped, {:.1} s",
        ran - by_writer.values().map(|(_, failed)| failed).sum::<usize>(),
        by_writer.values().map(|(_, failed)| failed).sum::<usize>(),
        skipped_cells.len(),
        started.elapsed().as_secs_f64()
    );
    for (title, tally) in [("writer", &by_writer), ("actor", &by_actor)] {
        println!("  by {title}:");
        for (key, (cells, failed)) in tally {
            println!("    {key:<22} {cells:>4} cells, {failed} failed");
        }
    }
    for cell in &skipped_cells {
        println!("  skipped {cell}");
    }
    assert!(
        failures.is_empty(),
        "{} problems in {ran} cells:\n{}",
        failures.len(),
        failures.join("\n")
    );
    if only.is_none() {
        // The coverage ledger: every registered failpoint is reached by some cell.
        for (point, before) in failpoints::ALL.iter().zip(reached_before) {
            println!(
                "  failpoint {:<32} reached {} times",
                point.name(),
                failpoints::reached(*point) - before
            );
            let exempt = FAILPOINTS_NOT_IN_THE_MATRIX
                .iter()
                .any(|(not_here, _)| not_here == point);
            assert!(
                exempt || failpoints::reached(*point) > before,
                "no cell reaches failpoint {}",
                point.name()
            );
        }
        for (point, why) in FAILPOINTS_NOT_IN_THE_MATRIX {
            println!("  failpoint {} is not in the matrix: {why}", point.name());
        }
        assert_eq!(ran, cells(actors.len()));
        assert_eq!(process_cells, process_cells_of_the_tier());
    } else {
        assert_eq!(ran, 1, "{CELL_VAR} names no cell");
    }
}
