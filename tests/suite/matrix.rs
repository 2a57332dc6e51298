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
use omnigraph_maintenance::{MaintenanceExt, UnitOutcome};
use omnigraph_publish::{CommitRef, LoadMode, Omnigraph, ScanRequest};
use omnigraph_tests::{Backend, TestRoot, objects};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

const MATRIX_SCHEMA: &str = "
node Person { id: String @key, name: String, age: Int32? @index }
node Company { id: String @key, name: String }
edge WorksAt: Person -> Company { since: Int32? }
";

/// The schema a schema-apply cell moves to: one new optional property.
const MATRIX_SCHEMA_WITH_CITY: &str = "
node Person { id: String @key, name: String, age: Int32? @index }
node Company { id: String @key, name: String, city: String? }
edge WorksAt: Person -> Company { since: Int32? }
";

/// The types, in the order the checks read them.
const TYPES: [&str; 3] = ["Person", "Company", "WorksAt"];

/// How long a race cell holds its writer's first staged manifest while another writer
/// publishes.
const RACE_HOLD: Duration = Duration::from_millis(300);

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
}

impl Writer {
    const ALL: [Writer; 10] = [
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
    ];

    /// The type whose table the writer changes first (the actor writes it next).
    fn table(self) -> &'static str {
        match self {
            Writer::EdgeInsert => "WorksAt",
            Writer::SchemaApply => "Company",
            _ => "Person",
        }
    }

    /// Whether the writer changes rows (the model follows it when it lands).
    fn changes_rows(self) -> bool {
        !matches!(
            self,
            Writer::BuildIndexes | Writer::Optimize | Writer::Cleanup
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Window {
    /// A link's files are written, its manifest is not.
    MidStaging,
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
    const ALL: [Window; 5] = [
        Window::MidStaging,
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
            Window::AfterStaging | Window::AfterCommitPut => &[Fault::ReturnedError],
            Window::AtCommitPut => &[
                Fault::ReturnedError,
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
        Actor::Reopen => Omnigraph::open(&test.uri).await.unwrap(),
    }
}

/// Why a cell cannot exist, or `None`.
fn skipped(writer: Writer, window: Window) -> Option<&'static str> {
    match (writer, window) {
        (Writer::Cleanup, _) => Some(
            "cleanup stages no link and publishes no commit: its faults are failed deletes (tests/suite/cleanup.rs)",
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
            Writer::Insert => model.put("Person", person("n1", 41)),
            Writer::Load => {
                model.put("Person", person("n2", 42));
                model.put("Person", person("n3", 43));
                model.put("WorksAt", edge("en1", "n2", "c0"));
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
            Writer::BuildIndexes | Writer::Optimize | Writer::Cleanup => {}
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
async fn seeded() -> (Omnigraph, TestRoot, Model) {
    let test = TestRoot::new(Backend::Memory).await;
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
    for i in 6..8 {
        let row = person(&format!("p{i}"), i);
        graph
            .insert_json("Person", objects(json!([row.clone()])))
            .await
            .unwrap();
        model.put("Person", row);
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
async fn run_writer(graph: &Omnigraph, writer: Writer) -> omnigraph_core::Result<()> {
    match writer {
        Writer::Insert => graph
            .insert_json("Person", objects(json!([person("n1", 41)])))
            .await
            .map(|_| ()),
        Writer::Load => {
            let lines = [
                with_type("Person", &person("n2", 42)),
                with_type("Person", &person("n3", 43)),
                with_type("WorksAt", &edge("en1", "n2", "c0")),
            ];
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
        Writer::BuildIndexes => graph.build_indexes().await.map(|_| ()),
        Writer::Optimize => {
            let before = graph.head().await?;
            let report = graph.maintenance().optimize().await?;
            // Each unit's outcome says whether its table moved: a published unit's pin
            // is new at the head, a failed unit's is not (a race's rival writes only
            // Company).
            let head = graph.graph().log("main")?.head().await?;
            for unit in &report.tables {
                let pin = |commit: &omnigraph_publish::GraphCommit| {
                    commit.pin_of_type(&unit.type_key).map(|pin| pin.version)
                };
                let moved = pin(&head) != pin(&before);
                match &unit.outcome {
                    UnitOutcome::Published { .. } => assert!(
                        moved,
                        "optimize says {} published, but its pin did not move",
                        unit.type_key
                    ),
                    UnitOutcome::Failed { .. } if unit.type_key != "Company" => assert!(
                        !moved,
                        "optimize says {} failed, but its pin moved",
                        unit.type_key
                    ),
                    _ => {}
                }
            }
            for table in &report.tables {
                if let UnitOutcome::Failed {
                    message, evidence, ..
                } = &table.outcome
                {
                    return Err(OmniError::internal(format!(
                        "optimize {}: {message}",
                        table.type_key
                    ))
                    .with_evidence(evidence.clone()));
                }
            }
            Ok(())
        }
        Writer::Cleanup => unreachable!("cleanup cells are skipped"),
    }
}

/// The requests a window's wrapper fault applies to.
fn window_requests(window: Window) -> &'static str {
    match window {
        Window::AtCommitPut => "_graph/branches/main/commits/*",
        _ => "tables/*/_versions/*",
    }
}

/// Runs `writer` with `fault` in `window`; `None` when it crashed (its future dropped).
async fn run_in_window(
    graph: &Omnigraph,
    test: &TestRoot,
    writer: Writer,
    window: Window,
    fault: Fault,
) -> Option<omnigraph_core::Result<()>> {
    let root = graph.graph().root();
    let on_requests = |action: FaultAction| {
        FaultRule::new(window_requests(window), &[RequestKind::PutIfAbsent], action)
    };
    let written = match (window, fault) {
        (_, Fault::Crash) => {
            let held = root.inject(on_requests(FaultAction::Delay(CRASH_HOLD)).times(1));
            let reached = async {
                while held.fired() == 0 {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            };
            tokio::select! {
                written = Box::pin(run_writer(graph, writer)) => written,
                () = reached => return None,
            }
        }
        (Window::MidStaging, _) => {
            let armed = failpoints::arm(failpoints::STAGE_BEFORE_MANIFEST, "return");
            armed.run(Box::pin(run_writer(graph, writer))).await
        }
        (Window::AfterStaging, _) => {
            let armed = failpoints::arm(failpoints::PUBLISH_BEFORE_COMMIT_PUT, "return");
            armed.run(Box::pin(run_writer(graph, writer))).await
        }
        (Window::AtCommitPut, Fault::LostAck) => {
            let _fault = root.inject(on_requests(FaultAction::LostAck).times(1));
            Box::pin(run_writer(graph, writer)).await
        }
        (Window::AtCommitPut, Fault::DuplicatedAck) => {
            let _fault = root.inject(on_requests(FaultAction::DuplicatedAck).times(1));
            Box::pin(run_writer(graph, writer)).await
        }
        (Window::AtCommitPut, _) => {
            let _fault = root.inject(on_requests(FaultAction::FailBefore(StorageKind::Transient)));
            Box::pin(run_writer(graph, writer)).await
        }
        (Window::AfterCommitPut, _) => {
            let armed = failpoints::arm(failpoints::PUBLISH_AFTER_COMMIT_PUT, "return");
            armed.run(Box::pin(run_writer(graph, writer))).await
        }
        (Window::Race, _) => {
            // The writer's first staged manifest is held; meanwhile another handle
            // publishes a row on another table.
            let hold = root.inject(on_requests(FaultAction::Delay(RACE_HOLD)).times(1));
            let other = Omnigraph::open(&test.uri).await.unwrap();
            let concurrent = async {
                while hold.fired() == 0 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                other
                    .insert_json("Company", objects(json!([{"id": "c9", "name": "rival"}])))
                    .await
            };
            let (written, rival) =
                tokio::join!(Box::pin(run_writer(graph, writer)), Box::pin(concurrent));
            rival.expect("the rival's insert lands");
            written
        }
    };
    Some(written)
}

/// A cell whose writer crashed in its window: either nothing of it is visible or all
/// of it is; the next writer lands; the rows equal the model, with or without it.
async fn crashed(
    graph: Omnigraph,
    test: TestRoot,
    model: Model,
    writer: Writer,
    head_before: omnigraph_publish::GraphCommit,
    actor: Actor,
) -> Vec<String> {
    let mut problems = Vec::new();
    let observer = Omnigraph::open(&test.uri).await.unwrap();
    let head_after = observer.head().await.unwrap();
    if head_after.seq != head_before.seq {
        problems.push("the writer crashed before its commit PUT, but the head moved".into());
    }
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
    let found = rows_at_head(&reader).await;
    for type_name in TYPES {
        let want = expected.rows.get(type_name).cloned().unwrap_or_default();
        if found.get(type_name).cloned().unwrap_or_default() != want {
            problems.push(format!(
                "{type_name} differs from the model after the {writer:?} crash"
            ));
        }
    }
    problems
}

/// The version each table is pinned at in `commit`.
fn pins(commit: &omnigraph_publish::GraphCommit) -> BTreeMap<String, u64> {
    commit
        .pins
        .iter()
        .map(|pin| (pin.table_id.clone(), pin.version))
        .collect()
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
        for row in omnigraph_publish::rows::batches_to_json(&batches) {
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

/// What one cell found wrong; empty when it passed.
async fn run_cell(writer: Writer, window: Window, fault: Fault, actor: Actor) -> Vec<String> {
    let (graph, test, model) = seeded().await;
    let mut problems = Vec::new();
    let head_before = graph.head().await.unwrap();
    let objects_before = table_objects(&test).await;
    let Some(outcome) = Box::pin(run_in_window(&graph, &test, writer, window, fault)).await else {
        return Box::pin(crashed(graph, test, model, writer, head_before, actor)).await;
    };
    // The rival's row, when there was one.
    let mut model = model;
    if window == Window::Race {
        model.put("Company", json!({"id": "c9", "name": "rival"}));
    }
    let observer = Omnigraph::open(&test.uri).await.unwrap();
    let head_after = observer.head().await.unwrap();
    if fault == Fault::Crash {
        problems.push("the writer finished: the crash window was never reached".into());
    }
    let must_fail = fault == Fault::ReturnedError
        && matches!(
            window,
            Window::MidStaging | Window::AfterStaging | Window::AtCommitPut
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
            if writer.changes_rows() && head_after.seq == head_before.seq {
                problems.push("acknowledged, but the head did not move".into());
            }
            true
        }
        Err(error) => {
            let evidence = error.evidence().clone();
            let rival_commits = u64::from(window == Window::Race);
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
                Evidence::PartlyPublished { .. } => {}
            }
            if window == Window::AfterCommitPut {
                problems.push(format!(
                    "the commit landed, but the writer reported failure: {error}"
                ));
            }
            // In doubt: whatever the head shows decides.
            evidence == Evidence::InDoubt
                && head_after.seq > head_before.seq + u64::from(window == Window::Race)
        }
    };
    let mut expected = if landed { model.after(writer) } else { model };
    // What a failed write left: reclaimed by cleanup once its table's pin moves (until
    // then it is staging that could still publish, a root whatever its age).
    let failed = outcome.is_err() && !landed;
    // In a race the rival's published files are new too: only the rule that nothing a
    // commit needs is removed applies there.
    let leftovers: BTreeSet<String> = if failed && window != Window::Race {
        table_objects(&test)
            .await
            .difference(&objects_before)
            .cloned()
            .collect()
    } else {
        BTreeSet::new()
    };
    let pins_at_failure = pins(&head_after);
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
    // Check 4: cleanup (every commit kept, the grace period passed) reclaims what the
    // failure left on tables whose pin moved since, and nothing a commit needs.
    if failed && actor != Actor::Cleanup {
        let options = omnigraph_maintenance::CleanupOptions::new(
            omnigraph_maintenance::CleanupPolicy::keep_commits(10_000).unwrap(),
        )
        .with_grace(omnigraph_publish::retention::GRACE_MIN)
        .unwrap();
        let cleaned = omnigraph_tests::later_by(
            Duration::from_secs(120),
            reader.maintenance().cleanup(&options),
        )
        .await;
        if let Err(error) = cleaned {
            problems.push(format!("cleanup after the failure: {error}"));
        }
        let left = table_objects(&test).await;
        let pins_now = pins(&reader.head().await.unwrap());
        let kept: Vec<&String> = leftovers
            .iter()
            .filter(|object| left.contains(*object))
            .filter(|object| {
                let table = object.split('/').nth(1).unwrap_or_default();
                pins_now.get(table) != pins_at_failure.get(table) || !pins_now.contains_key(table)
            })
            .take(3)
            .collect();
        if !kept.is_empty() {
            problems.push(format!(
                "cleanup kept what the failure left on a moved table: {kept:?}"
            ));
        }
        let lost: Vec<&String> = objects_before.difference(&left).take(3).collect();
        if !lost.is_empty() {
            problems.push(format!(
                "cleanup removed files a kept commit needs: {lost:?}"
            ));
        }
    }
    let found = rows_at_head(&reader).await;
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
    let people = &found["Person"];
    let companies = &found["Company"];
    for (key, edge) in &found["WorksAt"] {
        let src = edge["src"].as_str().unwrap_or_default();
        let dst = edge["dst"].as_str().unwrap_or_default();
        if !people.contains_key(src) || !companies.contains_key(dst) {
            problems.push(format!("edge {key} dangles: {src} -> {dst}"));
        }
    }
    if let Err(error) = outcome
        && !matches!(
            error.kind(),
            ErrorKind::Storage(_)
                | ErrorKind::ReadSetChanged
                | ErrorKind::ContentionExhausted
                | ErrorKind::PublishInDoubt
                | ErrorKind::Internal
        )
    {
        problems.push(format!("an unexpected kind of error: {error}"));
    }
    problems
}

/// The stack the matrix runs on: a debug build's poll frames for a merge load, nested
/// under a cell's fault scope, outgrow a test thread's 2 MiB.
const MATRIX_STACK_BYTES: usize = 64 << 20;

#[test]
fn matrix_fast_tier_every_writer_window_and_actor() {
    std::thread::Builder::new()
        .name("matrix".into())
        .stack_size(MATRIX_STACK_BYTES)
        .spawn(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_stack_size(MATRIX_STACK_BYTES)
                .enable_all()
                .build()
                .expect("a runtime")
                .block_on(fast_tier())
        })
        .expect("the matrix thread")
        .join()
        .expect("the matrix ran");
}

async fn fast_tier() {
    let mut ran = 0;
    let mut skipped_cells = Vec::new();
    let mut failures = Vec::new();
    for writer in Writer::ALL {
        for window in Window::ALL {
            if let Some(reason) = skipped(writer, window) {
                skipped_cells.push(format!("{writer:?} x {window:?}: {reason}"));
                continue;
            }
            for fault in Fault::of(window) {
                for actor in Actor::ALL {
                    let problems = Box::pin(run_cell(writer, window, *fault, actor)).await;
                    ran += 1;
                    for problem in problems {
                        failures.push(format!(
                            "{writer:?} x {window:?} x {fault:?} x {actor:?}: {problem}"
                        ));
                    }
                }
            }
        }
    }
    println!(
        "matrix fast tier: {ran} cells ran, {} skipped",
        skipped_cells.len()
    );
    for cell in &skipped_cells {
        println!("  skipped {cell}");
    }
    assert!(
        failures.is_empty(),
        "{} problems in {ran} cells:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let faults_per_writer: usize = Window::ALL
        .iter()
        .map(|window| Fault::of(*window).len())
        .sum();
    assert_eq!(
        ran,
        Actor::ALL.len() * (Writer::ALL.len() - 1) * faults_per_writer
    );
}
