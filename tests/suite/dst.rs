//! Deterministic simulation (`cargo xtask dst`): universes of several logical actors on
//! one to three handles of one root, writing, reading and maintaining under faults,
//! each universe fixed by its seed and replayable from it. A merge step creates a
//! branch of main, writes a person there, then merges the branch into main and deletes
//! it once merged; the step's fault falls on the creation, the write or the merge, and
//! a faulted creation or write is judged on the branch, which then goes.
//!
//! A seed fixes the actors and their handles, every operation and its target, the fault
//! each step runs under, the ids and the clock (the seams). Interleaving is the
//! harness's, never the runtime's: one actor steps at a time, and a write can be staged
//! in one step and published in a later one, after other actors wrote (a two-phase
//! update or delete), which is where writers meet. Faults go through the root's
//! wrapper: a failed staged manifest or data file, a transient or permanent commit PUT,
//! a lost or duplicated acknowledgement, and a crash that drops the writer while its
//! staged manifest or its commit PUT is held.
//!
//! After every step the universe checks: the error's evidence against storage
//! (`BeforeEffect`: no object written; `Unpublished`: the head did not move; `InDoubt`:
//! only where the commit PUT was faulted; `PartlyPublished`: what it lists is in the
//! head), the rows at the head against a reference model (no key twice, no dangling
//! edge), and that a staged write never lands over another actor's change to its rows.
//! A time-travel step reads a retained commit and compares it with the model as it was
//! then; a reclaimed one must say so. At the end: the log has no gap and links each
//! commit to its parent, every retained commit reads, stable row ids are unique, and a
//! last cleanup leaves no detached version that no retained commit pins.

use omnigraph_core::storage::{FaultAction, FaultHandle, FaultRule, RequestKind};
use omnigraph_core::{ErrorKind, Evidence, OmniError, StorageKind, failpoints, seams};
use omnigraph_graph::{LoadMode, Omnigraph, PreparedWrite, ScanRequest};
use omnigraph_maintenance::MaintenanceExt;
use omnigraph_publish::{CommitRef, GraphCommit};
use omnigraph_tests::{Backend, TestRoot, objects};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

const DST_SCHEMA: &str = "
node Person { id: String @key, name: String, age: Int32? @index }
node Company { id: String @key, name: String }
edge WorksAt: Person -> Company { since: Int32? }
";

/// The types, in the order the checks read them.
const TYPES: [&str; 3] = ["Person", "Company", "WorksAt"];
/// Steps in one universe.
const STEPS_MAX: usize = 40;
/// Logical actors in one universe: 2 to this many.
const ACTORS_MAX: usize = 6;
/// Handles on the root: 1 to this many.
const HANDLES_MAX: usize = 3;
/// The chance (in percent) that a write step runs under a fault.
const FAULT_PERCENT: u32 = 30;
/// How long a crash holds the request the writer is dropped at.
const CRASH_HOLD: Duration = Duration::from_secs(30);
/// How long a slow request is held before it is made: a write still finishes.
const SLOW_HOLD: Duration = Duration::from_millis(5);
/// The longest a write that a step runs or lets go on may take: a hang is a problem,
/// not a stuck run.
const HANG_MAX: Duration = Duration::from_secs(120);
/// How long a crash waits for its request before calling the window unreached.
const WINDOW_WAIT_MAX: Duration = Duration::from_secs(20);
/// Rows a check reads per type at most.
const ROWS_MAX: usize = 10_000;
/// Universes run at once (one per core of the machine CI runs on).
const THREADS_MAX: usize = 2;
/// The environment variables `cargo xtask dst` sets: how many universes, from which
/// seed.
const SEEDS_VAR: &str = "OMNIGRAPH_DST_SEEDS";
const START_VAR: &str = "OMNIGRAPH_DST_START";
/// How far a universe's clock moves before each cleanup: past the grace period.
const CLEANUP_AFTER_MICROS: i64 = 600_000_000;
/// Set, every universe's trace is printed.
const TRACE_VAR: &str = "OMNIGRAPH_DST_TRACE";
/// Universes when no count is given (the CI tier).
const SEEDS_DEFAULT: u64 = 200;
/// Set, `cargo xtask dst --shrink` shrinks each failing seed (the first few).
const SHRINK_VAR: &str = "OMNIGRAPH_DST_SHRINK";
/// Failing seeds one run shrinks.
const SHRINK_SEEDS_MAX: usize = 3;
/// Universes from which every operation and fault kind must have been drawn, and
/// every fault's window reached, somewhere.
const LEDGER_SEEDS_MIN: u64 = 100;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Op {
    InsertPerson,
    InsertCompany,
    EdgeInsert,
    /// An edge to a person that does not exist: refused, nothing written.
    EdgeToMissing,
    Update,
    DeleteCascade,
    Load,
    /// Stage an update or a delete now, publish it at the actor's next step.
    Stage,
    Optimize,
    Cleanup,
    BuildIndexes,
    TimeTravel,
    /// Adds an optional property to Company (up to [`SCHEMA_LEVEL_MAX`] of them).
    SchemaApply,
    /// Creates a branch from main's head, inserts a person there, merges the branch
    /// into main (a fast-forward of Person) and deletes the branch. The step's fault
    /// falls on one of the three (see [`BranchPhase`]); the others run unfaulted.
    BranchMerge,
}

impl Op {
    /// Whether the operation runs in the root's maintenance lane.
    fn in_lane(self) -> bool {
        matches!(self, Op::Optimize | Op::Cleanup | Op::BuildIndexes)
    }
}

/// The operations a step picks from, with their weights.
const OPS: [(Op, u32); 14] = [
    (Op::InsertPerson, 6),
    (Op::InsertCompany, 2),
    (Op::EdgeInsert, 4),
    (Op::EdgeToMissing, 1),
    (Op::Update, 4),
    (Op::DeleteCascade, 3),
    (Op::Load, 3),
    (Op::Stage, 3),
    (Op::Optimize, 2),
    (Op::Cleanup, 1),
    (Op::BuildIndexes, 1),
    (Op::TimeTravel, 2),
    (Op::SchemaApply, 1),
    (Op::BranchMerge, 2),
];

/// The part of a [`Op::BranchMerge`] step its fault falls on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BranchPhase {
    /// Creating the branch: afterwards it exists exactly when the evidence says so,
    /// with main's pins, and then goes.
    Create,
    /// The insert on the branch: afterwards the branch holds the row exactly when the
    /// evidence says so, and then goes (a parked insert goes on later, and its branch
    /// stays).
    Write,
    /// The merge into main, judged on main's model.
    Merge,
}

/// Schema applies in one universe, at most.
const SCHEMA_LEVEL_MAX: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    /// The writer's first staged manifest fails (transient).
    StagingError,
    /// The writer's first data file fails (transient).
    DataError,
    /// The commit PUT fails once (transient).
    CommitTransient,
    /// The commit PUT is refused (permanent).
    CommitPermanent,
    /// The commit PUT is applied and a transient error reported.
    LostAck,
    /// The commit PUT is applied and `AlreadyExists` reported.
    DuplicatedAck,
    /// The writer is dropped while its first staged manifest is held.
    CrashStaging,
    /// The writer is dropped while its commit PUT is held.
    CrashCommit,
    /// The writer's first staged manifest is delayed, then made.
    SlowStaging,
    /// The commit PUT is delayed, then made.
    SlowCommit,
    /// The writer parks at a staging window; it goes on at its actor's next step, after
    /// whatever the others did meanwhile.
    Park(Window),
    /// The writer is dropped at a window.
    CrashAt(Window),
}

/// The named windows (failpoints) a writer parks or crashes at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Window {
    StageBeforeManifest,
    StageAfterManifest,
    /// Everything the writer publishes is staged or chosen; it holds no gate yet.
    PublishBeforeGate,
    PublishBeforeCommitPut,
    PublishAfterCommitPut,
}

const WINDOWS: [Window; 5] = [
    Window::StageBeforeManifest,
    Window::StageAfterManifest,
    Window::PublishBeforeGate,
    Window::PublishBeforeCommitPut,
    Window::PublishAfterCommitPut,
];

impl Window {
    fn point(self) -> failpoints::Failpoint {
        match self {
            Window::StageBeforeManifest => failpoints::STAGE_BEFORE_MANIFEST,
            Window::StageAfterManifest => failpoints::STAGE_AFTER_MANIFEST,
            Window::PublishBeforeGate => failpoints::PUBLISH_BEFORE_GATE,
            Window::PublishBeforeCommitPut => failpoints::PUBLISH_BEFORE_COMMIT_PUT,
            Window::PublishAfterCommitPut => failpoints::PUBLISH_AFTER_COMMIT_PUT,
        }
    }

    /// Whether a writer may park here while others run. The windows around the commit
    /// PUT are inside the process's publish gate, which every other writer of the
    /// branch would wait for: a writer is only crashed there. Before the gate, a
    /// writer that staged everything (or a merge, which takes its source's pins as
    /// they are) waits while others publish, delete its source branch and clean up.
    fn parks(self) -> bool {
        matches!(
            self,
            Window::StageBeforeManifest | Window::StageAfterManifest | Window::PublishBeforeGate
        )
    }
}

/// Every fault a write step draws from.
fn faults() -> Vec<Fault> {
    let mut faults = vec![
        Fault::StagingError,
        Fault::DataError,
        Fault::CommitTransient,
        Fault::CommitPermanent,
        Fault::LostAck,
        Fault::DuplicatedAck,
        Fault::CrashStaging,
        Fault::CrashCommit,
        Fault::SlowStaging,
        Fault::SlowCommit,
    ];
    for window in WINDOWS {
        if window.parks() {
            faults.push(Fault::Park(window));
        }
        faults.push(Fault::CrashAt(window));
    }
    faults
}

impl Fault {
    /// The window the fault parks or crashes the writer at, if it is a window fault.
    fn window(self) -> Option<Window> {
        match self {
            Fault::Park(window) | Fault::CrashAt(window) => Some(window),
            _ => None,
        }
    }

    /// The wrapper rule of a request fault.
    fn rule(self, branch: &str) -> Option<FaultRule> {
        let commits = format!("_graph/branches/{branch}/commits/*");
        let commits = commits.as_str();
        let manifests = "tables/*/_versions/*";
        let (path, kind, action) = match self {
            Fault::StagingError => (
                manifests,
                RequestKind::PutIfAbsent,
                FaultAction::FailBefore(StorageKind::Transient),
            ),
            Fault::DataError => (
                "tables/*/data/*",
                RequestKind::Put,
                FaultAction::FailBefore(StorageKind::Transient),
            ),
            Fault::CommitTransient => (
                commits,
                RequestKind::PutIfAbsent,
                FaultAction::FailBefore(StorageKind::Transient),
            ),
            Fault::CommitPermanent => (
                commits,
                RequestKind::PutIfAbsent,
                FaultAction::FailBefore(StorageKind::Permanent),
            ),
            Fault::LostAck => (commits, RequestKind::PutIfAbsent, FaultAction::LostAck),
            Fault::DuplicatedAck => (
                commits,
                RequestKind::PutIfAbsent,
                FaultAction::DuplicatedAck,
            ),
            Fault::CrashStaging => (
                manifests,
                RequestKind::PutIfAbsent,
                FaultAction::Delay(CRASH_HOLD),
            ),
            Fault::CrashCommit => (
                commits,
                RequestKind::PutIfAbsent,
                FaultAction::Delay(CRASH_HOLD),
            ),
            Fault::SlowStaging => (
                manifests,
                RequestKind::PutIfAbsent,
                FaultAction::Delay(SLOW_HOLD),
            ),
            Fault::SlowCommit => (
                commits,
                RequestKind::PutIfAbsent,
                FaultAction::Delay(SLOW_HOLD),
            ),
            Fault::Park(_) | Fault::CrashAt(_) => return None,
        };
        Some(FaultRule::new(path, &[kind], action).times(1))
    }

    fn is_crash(self) -> bool {
        matches!(self, Fault::CrashStaging | Fault::CrashCommit)
    }

    /// Whether the fault touches the commit PUT, the only place doubt may come from.
    fn at_commit(self) -> bool {
        matches!(
            self,
            Fault::CommitTransient
                | Fault::CommitPermanent
                | Fault::LostAck
                | Fault::DuplicatedAck
                | Fault::CrashCommit
        )
    }
}

/// The rows that should be visible, by type and key.
type Rows = BTreeMap<&'static str, BTreeMap<String, Map<String, Value>>>;

fn person(id: &str, age: i64) -> Map<String, Value> {
    row(json!({"id": id, "name": format!("name {id}"), "age": age}))
}

/// A company as read under schema level `level`: the properties that schema applies
/// added are null.
fn company(id: &str, level: usize) -> Map<String, Value> {
    let mut company = row(json!({"id": id, "name": format!("company {id}")}));
    for added in 1..=level {
        company.insert(format!("p{added}"), Value::Null);
    }
    company
}

/// The schema at `level`: the first, with `level` optional properties added to
/// Company.
fn schema_text(level: usize) -> String {
    let added: String = (1..=level).map(|at| format!(", p{at}: String?")).collect();
    format!(
        "node Person {{ id: String @key, name: String, age: Int32? @index }}
         node Company {{ id: String @key, name: String{added} }}
         edge WorksAt: Person -> Company {{ since: Int32? }}"
    )
}

fn edge(id: &str, src: &str, dst: &str) -> Map<String, Value> {
    row(json!({"id": id, "src": src, "dst": dst, "since": Value::Null}))
}

fn row(value: Value) -> Map<String, Value> {
    value.as_object().expect("a row").clone()
}

/// The rows if the person `key` is deleted (with its edges) or gets `age`.
fn after_change(rows: &Rows, key: &str, delete: bool, age: i64) -> Rows {
    if delete {
        return without_person(rows, key);
    }
    let mut rows = rows.clone();
    if let Some(row) = rows.entry("Person").or_default().get_mut(key) {
        row.insert("age".into(), json!(age));
    }
    rows
}

/// `rows` with the person `key` and its edges gone.
fn without_person(rows: &Rows, key: &str) -> Rows {
    let mut rows = rows.clone();
    rows.entry("Person").or_default().remove(key);
    rows.entry("WorksAt")
        .or_default()
        .retain(|_, edge| edge["src"] != json!(key));
    rows
}

/// A write an actor staged and will publish at its next step.
struct Staged {
    write: PreparedWrite,
    /// The person it changes, and the rows if it lands on the model as it is now.
    key: String,
    delete: bool,
    age: i64,
    /// The model's change count when it was staged: a later change to `key` means it
    /// must not land.
    staged_at: u64,
}

/// Which of a seed's steps run, and which run without the fault they drew: all, and
/// with theirs, for a seed as drawn; fewer while a failing seed is shrunk. Each step
/// draws from a generator of its own (from the seed and its number), so leaving one
/// out changes no other step's draws.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Plan {
    skipped: BTreeSet<usize>,
    calm: BTreeSet<usize>,
}

/// The generator of one step of the universe of `seed`.
fn step_rng(seed: u64, step: usize) -> StdRng {
    StdRng::seed_from_u64(seed ^ ((step as u64 + 1) << 40))
}

struct Universe {
    seed: u64,
    plan: Plan,
    /// The step's own generator (see [`Plan`]); the seed's for the universe's shape.
    rng: StdRng,
    /// An operation that counts as a problem when it succeeds: a planted failure, for
    /// the shrinker's own test.
    planted: Option<Op>,
    /// Per operation, the most requests one fault-free run of it made on its handle.
    costs: BTreeMap<Op, u64>,
    /// The universe's clock: cleanup runs after it moves on, so a staged write waiting
    /// through a cleanup is as old to its writer as to cleanup.
    clock: std::sync::Arc<seams::Simulation>,
    test: TestRoot,
    handles: Vec<Arc<Omnigraph>>,
    /// Each actor's handle.
    actors: Vec<usize>,
    staged: BTreeMap<usize, Staged>,
    /// Writes parked at a window, by actor: each goes on at its actor's next step.
    parked: BTreeMap<usize, ParkedOp>,
    /// Schema applies that landed: Company has properties `p1..=schema_level`.
    schema_level: usize,
    /// Cleanup steps run so far.
    cleanups: u64,
    /// Whether the last commit that landed left the branch's `HEAD` copy unwritten (its
    /// writer was dropped right after its commit PUT): a reader may then not know of
    /// the newest cleanup record.
    head_copy_lags: bool,
    rows: Rows,
    /// The model at each commit that landed.
    snapshots: BTreeMap<u64, Rows>,
    /// Per person, the model's change count at its last change.
    changed_at: BTreeMap<String, u64>,
    changes: u64,
    next_id: u64,
    trace: Vec<String>,
    problems: Vec<String>,
    coverage: BTreeMap<String, u64>,
}

/// What a universe found, and its trace (the replay test compares two runs' traces).
struct Outcome {
    problems: Vec<String>,
    trace: Vec<String>,
    coverage: BTreeMap<String, u64>,
    costs: BTreeMap<Op, u64>,
}

impl Universe {
    async fn new(
        seed: u64,
        plan: Plan,
        planted: Option<Op>,
        clock: std::sync::Arc<seams::Simulation>,
    ) -> Universe {
        let mut rng = StdRng::seed_from_u64(seed);
        let test = TestRoot::new(Backend::Memory).await;
        let first = Omnigraph::create(&test.uri, DST_SCHEMA).await.unwrap();
        let mut handles = vec![Arc::new(first)];
        for _ in 1..rng.random_range(1..=HANDLES_MAX) {
            handles.push(Arc::new(Omnigraph::open(&test.uri).await.unwrap()));
        }
        let actors = (0..rng.random_range(2..=ACTORS_MAX))
            .map(|_| rng.random_range(0..handles.len()))
            .collect();
        let head = handles[0].head().await.unwrap();
        let mut universe = Universe {
            seed,
            plan,
            rng,
            planted,
            costs: BTreeMap::new(),
            clock,
            test,
            handles,
            actors,
            staged: BTreeMap::new(),
            parked: BTreeMap::new(),
            schema_level: 0,
            cleanups: 0,
            head_copy_lags: false,
            rows: Rows::new(),
            snapshots: BTreeMap::new(),
            changed_at: BTreeMap::new(),
            changes: 0,
            next_id: 0,
            trace: Vec::new(),
            problems: Vec::new(),
            coverage: BTreeMap::new(),
        };
        universe.snapshots.insert(head.seq, universe.rows.clone());
        universe
    }

    fn fresh(&mut self, prefix: &str) -> String {
        self.next_id += 1;
        format!("{prefix}{}", self.next_id)
    }

    fn count(&mut self, what: String) {
        *self.coverage.entry(what).or_default() += 1;
    }

    fn pick_op(&mut self) -> Op {
        let total: u32 = OPS.iter().map(|(_, weight)| weight).sum();
        let mut at = self.rng.random_range(0..total);
        for (op, weight) in OPS {
            if at < weight {
                return op;
            }
            at -= weight;
        }
        unreachable!("the weights cover the range")
    }

    fn pick_key(&mut self, type_name: &str) -> Option<String> {
        let keys: Vec<String> = self
            .rows
            .get(type_name)
            .map(|rows| rows.keys().cloned().collect())
            .unwrap_or_default();
        (!keys.is_empty()).then(|| keys[self.rng.random_range(0..keys.len())].clone())
    }

    fn problem(&mut self, step: usize, what: String) {
        self.problems.push(format!("step {step}: {what}"));
    }

    async fn run(mut self) -> Outcome {
        for step in 0..STEPS_MAX {
            if self.plan.skipped.contains(&step) {
                continue;
            }
            self.rng = step_rng(self.seed, step);
            let actor = self.rng.random_range(0..self.actors.len());
            // An actor with a parked write lets it go on; one with a staged write
            // publishes it.
            if let Some(parked) = self.parked.remove(&actor) {
                Box::pin(self.resume(step, actor, parked)).await;
            } else if let Some(staged) = self.staged.remove(&actor) {
                Box::pin(self.publish_staged(step, actor, staged)).await;
            } else {
                let op = self.pick_op();
                Box::pin(self.step(step, actor, op)).await;
            }
            if self.problems.len() > 3 {
                break;
            }
        }
        Box::pin(self.finish()).await;
        for (point, times) in self.clock.windows().reached() {
            *self.coverage.entry(format!("reached {point}")).or_default() += times;
        }
        Outcome {
            problems: self.problems,
            trace: self.trace,
            coverage: self.coverage,
            costs: self.costs,
        }
    }

    /// One operation of `actor`, under a fault for most writes.
    async fn step(&mut self, step: usize, actor: usize, op: Op) {
        let handle = self.actors[actor];
        if op.in_lane() && self.parked.values().any(|parked| parked.op.in_lane()) {
            // A parked maintenance run holds the root's lane, and another run would wait
            // for it forever: a cancel point instead, which the parked run meets when it
            // goes on.
            self.handles[handle].cancel_maintenance();
            self.count("op cancel".into());
            self.trace.push(format!(
                "{step} actor {actor} on handle {handle}: {op:?} -> cancel maintenance"
            ));
            return;
        }
        let writes = !matches!(op, Op::TimeTravel | Op::Stage | Op::EdgeToMissing);
        let fault = (writes && self.rng.random_ratio(FAULT_PERCENT, 100))
            .then(|| {
                let faults = faults();
                faults[self.rng.random_range(0..faults.len())]
            })
            .filter(|_| !self.plan.calm.contains(&step))
            // A cleanup is never parked between its plan and its record: the in-memory
            // store stamps objects on the wall clock while the universe's clock runs
            // minutes ahead (each cleanup moves it on), so what others staged meanwhile
            // would look older to the run than it is. Writers beside a cleanup on one
            // clock are in tests/suite/cleanup.rs (three processes, one sped-up clock).
            .filter(|fault| {
                !(op == Op::Cleanup && *fault == Fault::Park(Window::PublishBeforeGate))
            });
        self.count(format!("op {op:?}"));
        if let Some(fault) = fault {
            self.count(format!("fault {fault:?}"));
        }
        // A branch step's phase, branch and person.
        let mut branch_step: Option<(BranchPhase, String, String)> = None;
        let (effect, run): (Effect, _) = match op {
            Op::InsertPerson => {
                let key = self.fresh("p");
                let age = self.rng.random_range(0..100);
                let value = Value::Object(person(&key, age));
                (
                    Effect::Insert(vec![("Person", key.clone(), person(&key, age))]),
                    Write::Insert("Person", value),
                )
            }
            Op::InsertCompany => {
                let key = self.fresh("c");
                (
                    Effect::Insert(vec![("Company", key.clone(), company(&key, 0))]),
                    Write::Insert("Company", Value::Object(company(&key, 0))),
                )
            }
            Op::EdgeInsert | Op::EdgeToMissing => {
                let (Some(src), Some(dst)) = (self.pick_key("Person"), self.pick_key("Company"))
                else {
                    self.trace.push(format!("{step} {actor} {op:?} skipped"));
                    return;
                };
                let key = self.fresh("e");
                let src = if op == Op::EdgeToMissing {
                    self.fresh("nobody")
                } else {
                    src
                };
                let value = json!({"id": key, "src": src, "dst": dst});
                (
                    Effect::Insert(vec![("WorksAt", key.clone(), edge(&key, &src, &dst))]),
                    Write::Insert("WorksAt", value),
                )
            }
            Op::Update | Op::DeleteCascade | Op::Stage => {
                let Some(key) = self.pick_key("Person") else {
                    self.trace.push(format!("{step} {actor} {op:?} skipped"));
                    return;
                };
                let age = self.rng.random_range(100..200);
                let delete = match op {
                    Op::Update => false,
                    Op::DeleteCascade => true,
                    _ => self.rng.random_bool(0.5),
                };
                if op == Op::Stage {
                    self.stage(step, actor, key, delete, age).await;
                    return;
                }
                (
                    Effect::Change {
                        key: key.clone(),
                        delete,
                        age,
                    },
                    Write::Change { key, delete, age },
                )
            }
            Op::Load => {
                let mut inserted = Vec::new();
                let mut lines = Vec::new();
                let people: Vec<String> = (0..self.rng.random_range(2..=4))
                    .map(|_| self.fresh("p"))
                    .collect();
                for key in &people {
                    let age = self.rng.random_range(0..100);
                    inserted.push(("Person", key.clone(), person(key, age)));
                    let mut line = person(key, age);
                    line.insert("type".into(), json!("Person"));
                    lines.push(Value::Object(line).to_string());
                }
                if let Some(dst) = self.pick_key("Company") {
                    let key = self.fresh("e");
                    inserted.push(("WorksAt", key.clone(), edge(&key, &people[0], &dst)));
                    lines.push(
                        json!({"type": "WorksAt", "id": key, "src": people[0], "dst": dst})
                            .to_string(),
                    );
                }
                (Effect::Insert(inserted), Write::Load(lines))
            }
            Op::SchemaApply => {
                if self.schema_level >= SCHEMA_LEVEL_MAX {
                    self.trace.push(format!("{step} {actor} {op:?} skipped"));
                    return;
                }
                let level = self.schema_level + 1;
                (
                    Effect::Schema(level),
                    Write::SchemaApply(schema_text(level)),
                )
            }
            Op::BranchMerge => {
                let key = self.fresh("p");
                let branch = self.fresh("branch");
                let age = self.rng.random_range(0..100);
                // A fault falls on one of the three; with none, the merge is the step.
                let phase = match fault {
                    Some(_) => [BranchPhase::Create, BranchPhase::Write, BranchPhase::Merge]
                        [self.rng.random_range(0..3)],
                    None => BranchPhase::Merge,
                };
                // What comes before the phase runs first, under no fault.
                let graph = self.handles[handle].clone();
                let prepared = async {
                    if phase != BranchPhase::Create {
                        graph.create_branch(&branch, &CommitRef::Head).await?;
                    }
                    if phase == BranchPhase::Merge {
                        Omnigraph::open_root(graph.graph().root().clone())
                            .await?
                            .with_branch(&branch)?
                            .insert_json("Person", objects(json!([person(&key, age)])))
                            .await?;
                    }
                    Ok::<_, OmniError>(())
                }
                .await;
                if let Err(error) = prepared {
                    self.problem(step, format!("preparing a branch to merge: {error}"));
                    return;
                }
                self.count(format!("op BranchMerge phase {phase:?}"));
                branch_step = Some((phase, branch.clone(), key.clone()));
                match phase {
                    BranchPhase::Create => (Effect::Nothing, Write::CreateBranch(branch)),
                    BranchPhase::Write => (
                        Effect::Nothing,
                        Write::BranchInsert(branch, Value::Object(person(&key, age))),
                    ),
                    BranchPhase::Merge => (
                        Effect::Insert(vec![("Person", key.clone(), person(&key, age))]),
                        Write::Merge(branch),
                    ),
                }
            }
            Op::Optimize => (Effect::Nothing, Write::Optimize),
            Op::Cleanup => (Effect::Nothing, Write::Cleanup),
            Op::BuildIndexes => (Effect::Nothing, Write::BuildIndexes),
            Op::TimeTravel => {
                self.time_travel(step, handle).await;
                return;
            }
        };
        if op == Op::Cleanup {
            // Ten minutes on: what failures left is older than the grace period.
            self.clock.advance(CLEANUP_AFTER_MICROS);
            self.cleanups += 1;
        }
        let before = self.observe().await;
        let objects_before = self.objects().await;
        let on_branch = matches!(
            &branch_step,
            Some((BranchPhase::Create | BranchPhase::Write, ..))
        );
        // A fault on a branch's creation or write falls on that branch's commits.
        let faulted_branch = match &branch_step {
            Some((BranchPhase::Create | BranchPhase::Write, branch, _)) => branch.as_str(),
            _ => "main",
        };
        let injected: Option<FaultHandle> = fault
            .and_then(|fault| fault.rule(faulted_branch))
            .map(|rule| self.handles[handle].graph().root().inject(rule));
        let clock = self.clock.clone();
        let windows = clock.windows();
        if let Some(window) = fault.and_then(Fault::window) {
            windows.park_at(window.point());
        }
        let graph = self.handles[handle].clone();
        let probe = graph.graph().root().probe();
        let mut future: Pending = Box::pin(async move { run.run(&graph).await });
        let running = async {
            match (fault, &injected) {
                (Some(fault), Some(held)) if fault.is_crash() => {
                    tokio::select! {
                        biased;
                        result = &mut future => Ran::Done(result),
                        true = until_fired(held) => Ran::Crashed,
                    }
                }
                (Some(fault), _) if fault.window().is_some() => {
                    match until_done_or_parked(&mut future, windows).await {
                        Ran::Parked(_) if matches!(fault, Fault::CrashAt(_)) => Ran::Crashed,
                        ran => ran,
                    }
                }
                _ => Ran::Done(future.as_mut().await),
            }
        };
        let ran = match tokio::time::timeout(HANG_MAX, running).await {
            Ok(ran) => ran,
            Err(_) => {
                self.problem(step, format!("{op:?} under {fault:?} never finished"));
                Ran::Crashed
            }
        };
        // Dropped right after its commit PUT: the `HEAD` copy was never written.
        let lags = matches!(ran, Ran::Crashed)
            && fault == Some(Fault::CrashAt(Window::PublishAfterCommitPut));
        // A crashed writer's future is dropped where it stood; a parked one waits.
        let mut future = match ran {
            Ran::Parked(_) => Some(future),
            _ => {
                drop(future);
                None
            }
        };
        windows.disarm();
        let fired = match &ran {
            Ran::Done(_) => injected.as_ref().is_some_and(|held| held.fired() > 0),
            Ran::Crashed | Ran::Parked(_) => true,
        };
        drop(injected);
        if let Some(fault) = fault.filter(|_| fired) {
            // The window was reached, not only drawn: the ledger shows which were.
            self.count(format!("fired {fault:?}"));
            self.count(format!("fired {fault:?} in {op:?}"));
        }
        if fault.is_none() && matches!(ran, Ran::Done(Ok(()))) {
            let cost = self.costs.entry(op).or_default();
            *cost = (*cost).max(probe.total());
        }
        drop(probe);
        let after = self.observe().await;
        let moved = after.seq > before.seq;
        let outcome = match &ran {
            Ran::Crashed => "crashed".to_string(),
            Ran::Parked(_) => "parked".to_string(),
            Ran::Done(Ok(())) => "ok".to_string(),
            Ran::Done(Err(error)) => {
                format!("{} ({})", error.code().code, error.evidence().code())
            }
        };
        self.trace.push(format!(
            "{step} actor {actor} on handle {handle}: {op:?} under {fault:?} (fired {fired}) -> {outcome}, head {}",
            after.seq
        ));
        // What a faulted branch creation or write says it did (dropped right after
        // its commit PUT, it landed): `None` when it crashed elsewhere or parked,
        // which says nothing.
        let branch_outcome: Option<Result<(), Evidence>> = match &ran {
            Ran::Done(Ok(())) => Some(Ok(())),
            Ran::Done(Err(error)) => Some(Err(error.evidence().clone())),
            Ran::Crashed if fault == Some(Fault::CrashAt(Window::PublishAfterCommitPut)) => {
                Some(Ok(()))
            }
            Ran::Crashed | Ran::Parked(_) => None,
        };
        let parked = matches!(ran, Ran::Parked(_));
        let landing = effect.apply(&self.rows, self.schema_level);
        let (changed, level) = (effect.changed(), effect.level());
        let landed = match ran {
            Ran::Parked(ticket) => {
                // Parked at the first staging window it reached: every write stages
                // before it publishes anything, a maintenance run's first unit too.
                if moved {
                    self.problem(
                        step,
                        format!("{op:?} parked before its commit, but the head moved"),
                    );
                }
                self.parked.insert(
                    actor,
                    ParkedOp {
                        future: future.take().expect("a parked write keeps its future"),
                        ticket,
                        op,
                        effect,
                        window: fault
                            .and_then(Fault::window)
                            .expect("a parked write had a window"),
                        seq: after.seq,
                        cleanups: self.cleanups,
                    },
                );
                // A merge parked before it publishes: its source branch goes now, and
                // cleanups may run before it goes on (it must land on a head that
                // reads, or fail saying so).
                if let Some((BranchPhase::Merge, branch, _)) = &branch_step {
                    let deleted = self.handles[handle].delete_branch(branch).await;
                    self.count("op delete source of a parked merge".into());
                    self.trace.push(format!(
                        "{step} actor {actor}: {branch} deleted while its merge is parked -> {}",
                        deleted
                            .as_ref()
                            .map_or_else(|error| error.to_string(), |_| "ok".into())
                    ));
                    if let Err(error) = deleted {
                        self.problem(step, format!("deleting {branch}: {error}"));
                    }
                }
                false
            }
            Ran::Crashed => {
                // Dropped at its first window: after its first commit landed, or before
                // anything was published.
                let after_commit = fault == Some(Fault::CrashAt(Window::PublishAfterCommitPut));
                if moved && !after_commit {
                    self.problem(
                        step,
                        format!("{op:?} crashed before its commit, but the head moved"),
                    );
                }
                // Cleanup records on every branch in name order: its first commit may
                // be on a branch left by a merge that failed, not on main.
                let first_commit_elsewhere =
                    on_branch || (op == Op::Cleanup && self.live_branch_before_main().await);
                if after_commit && !moved && !first_commit_elsewhere {
                    self.problem(
                        step,
                        format!("{op:?} crashed after its commit PUT, but the head did not move"),
                    );
                }
                moved && after_commit
            }
            Ran::Done(Ok(())) => {
                if let Landing::Refused(why) = &landing {
                    self.problem(step, format!("{op:?} was accepted, but {why}"));
                }
                if self.planted == Some(op) {
                    self.problem(step, format!("{op:?} ran (a planted failure)"));
                }
                // A row write or a schema apply that says it landed moved the head.
                if effect_moves(&effect, &landing, &self.rows, self.schema_level) && !moved {
                    self.problem(step, format!("{op:?} succeeded, but the head did not move"));
                }
                moved
            }
            Ran::Done(Err(error)) => {
                let refused = matches!(landing, Landing::Refused(_));
                // One actor steps at a time: a valid write fails only under a fault, and
                // a delay is not one.
                let slow = matches!(fault, Some(Fault::SlowStaging | Fault::SlowCommit));
                if (!fired || slow) && !refused {
                    self.problem(
                        step,
                        format!("{op:?} failed with no failing fault: {error}"),
                    );
                }
                let fault_at_commit = fired && fault.is_some_and(Fault::at_commit);
                self.judge_error(
                    step,
                    op,
                    &error,
                    (&before, &after),
                    (fault_at_commit, refused),
                    &objects_before,
                )
                .await
            }
        };
        if landed && let Landing::Rows(rows) = landing {
            self.land(rows, changed, level);
        }
        if moved {
            self.head_copy_lags = lags;
            self.snapshots.insert(after.seq, self.rows.clone());
        }
        if let Some((phase, branch, key)) = branch_step.filter(|_| !parked)
            && phase != BranchPhase::Merge
        {
            self.judge_branch(
                step,
                handle,
                (phase, &branch, &key),
                branch_outcome,
                &before,
            )
            .await;
        }
        self.check_head(step).await;
    }

    /// After a faulted branch creation or insert: the branch holds what the outcome
    /// says (`None`: it crashed, either is right), then it is deleted, under no fault.
    async fn judge_branch(
        &mut self,
        step: usize,
        handle: usize,
        (phase, branch, key): (BranchPhase, &str, &str),
        outcome: Option<Result<(), Evidence>>,
        main_before: &GraphCommit,
    ) {
        let graph = self.handles[handle].clone();
        let expected = match &outcome {
            Some(Ok(())) => Some(true),
            Some(Err(Evidence::BeforeEffect | Evidence::Unpublished)) => Some(false),
            Some(Err(_)) | None => None,
        };
        let branches = match graph.list_branches().await {
            Ok(branches) => branches,
            Err(error) => {
                self.problem(step, format!("listing branches after {phase:?}: {error}"));
                return;
            }
        };
        let live = branches.iter().find(|info| info.name == branch);
        let holds = match (phase, live) {
            (BranchPhase::Create, Some(info)) => {
                let forked = info
                    .fork
                    .as_ref()
                    .is_some_and(|fork| fork.commit_id == main_before.commit_id);
                let pins = graph
                    .graph()
                    .commit(branch, &CommitRef::Head)
                    .await
                    .map(|head| head.pins == main_before.pins);
                if !forked || !matches!(pins, Ok(true)) {
                    self.problem(
                        step,
                        format!("branch {branch} is not main's head at its creation: {pins:?}"),
                    );
                }
                true
            }
            (BranchPhase::Create, None) => false,
            (_, None) => {
                self.problem(step, format!("branch {branch} vanished under its insert"));
                return;
            }
            (_, Some(_)) => {
                let reader = Omnigraph::open(&self.test.uri)
                    .await
                    .unwrap()
                    .with_branch(branch)
                    .unwrap();
                match reader.get("Person", &json!(key), &CommitRef::Head).await {
                    Ok(row) => row.is_some(),
                    Err(error) => {
                        self.problem(step, format!("reading branch {branch}: {error}"));
                        return;
                    }
                }
            }
        };
        self.count(format!("branch {phase:?} holds {holds}"));
        if expected.is_some_and(|expected| expected != holds) {
            self.problem(
                step,
                format!(
                    "{phase:?} on {branch} ended {outcome:?}, but the branch holds it: {holds}"
                ),
            );
        }
        if live.is_some()
            && let Err(error) = graph.delete_branch(branch).await
        {
            self.problem(step, format!("deleting branch {branch}: {error}"));
        }
    }

    /// The model takes `rows`; the people the write changed count a change.
    fn land(&mut self, rows: Rows, changed: Option<String>, level: Option<usize>) {
        self.changes += 1;
        if let Some(key) = changed {
            self.changed_at.insert(key, self.changes);
        }
        if let Some(level) = level {
            self.schema_level = self.schema_level.max(level);
        }
        self.rows = rows;
    }

    /// Checks an error's evidence against what storage holds; whether the write landed.
    #[allow(clippy::too_many_arguments)]
    async fn judge_error(
        &mut self,
        step: usize,
        op: Op,
        error: &OmniError,
        (before, after): (&GraphCommit, &GraphCommit),
        (fault_at_commit, refused): (bool, bool),
        objects_before: &BTreeSet<String>,
    ) -> bool {
        let moved = after.seq > before.seq;
        if matches!(error.kind(), ErrorKind::Internal | ErrorKind::Corrupt) {
            self.problem(step, format!("{op:?} failed unexpectedly: {error}"));
        }
        if refused {
            if error.kind() != ErrorKind::BadInput || error.evidence() != &Evidence::BeforeEffect {
                self.problem(step, format!("an edge to a missing person: {error}"));
            }
        } else if error.kind() == ErrorKind::BadInput {
            // Every other write is valid on the model: only storage can refuse it.
            self.problem(step, format!("{op:?} was refused as bad input: {error}"));
        }
        match error.evidence() {
            Evidence::BeforeEffect => {
                if moved {
                    self.problem(step, format!("BeforeEffect, but the head moved: {error}"));
                }
                if self.objects().await != *objects_before {
                    self.problem(
                        step,
                        format!("BeforeEffect, but objects were written: {error}"),
                    );
                }
                false
            }
            Evidence::Unpublished => {
                if moved {
                    self.problem(step, format!("Unpublished, but the head moved: {error}"));
                }
                false
            }
            Evidence::InDoubt => {
                if !fault_at_commit {
                    self.problem(
                        step,
                        format!("InDoubt without a fault at the commit PUT: {error}"),
                    );
                }
                // No other actor runs meanwhile: the head decides.
                moved
            }
            Evidence::PartlyPublished { published_units } => {
                self.check_partly_published(step, published_units, before, after);
                // Only maintenance publishes in part, and it changes no row.
                false
            }
        }
    }

    /// Every unit a `PartlyPublished` error lists is in the head.
    fn check_partly_published(
        &mut self,
        step: usize,
        published_units: &[String],
        before: &GraphCommit,
        after: &GraphCommit,
    ) {
        for unit in omnigraph_tests::units_not_in_head(published_units, before, after) {
            self.problem(
                step,
                format!("PartlyPublished lists {unit}, not in the head"),
            );
        }
    }

    /// Lets `actor`'s parked write go on, after whatever the others did meanwhile, and
    /// judges it on the model as it is now: it staged before it parked, so a failure
    /// is never `BeforeEffect`, and it may lose to a change of what it read.
    async fn resume(&mut self, step: usize, actor: usize, parked: ParkedOp) {
        let ParkedOp {
            mut future,
            ticket,
            op,
            effect,
            window,
            seq,
            cleanups,
        } = parked;
        self.count(format!("op resume {op:?}"));
        let before = self.observe().await;
        self.clock.windows().release(ticket);
        let Ok(result) = tokio::time::timeout(HANG_MAX, future.as_mut()).await else {
            self.problem(step, format!("{op:?} parked at {window:?} never finished"));
            return;
        };
        drop(future);
        let after = self.observe().await;
        let moved = after.seq > before.seq;
        let outcome = match &result {
            Ok(()) => "ok".to_string(),
            Err(error) => format!("{} ({})", error.code().code, error.evidence().code()),
        };
        self.trace.push(format!(
            "{step} actor {actor}: {op:?} parked at {window:?} goes on -> {outcome}, head {}",
            after.seq
        ));
        let landing = effect.apply(&self.rows, self.schema_level);
        let landed = match &result {
            Ok(()) => {
                if let Landing::Refused(why) = &landing {
                    self.problem(step, format!("{op:?} went on and was accepted, but {why}"));
                }
                if effect_moves(&effect, &landing, &self.rows, self.schema_level) && !moved {
                    self.problem(
                        step,
                        format!("{op:?} went on and succeeded, but the head did not move"),
                    );
                }
                moved
            }
            Err(error) => {
                let refused = matches!(landing, Landing::Refused(_));
                let expected = match error.kind() {
                    // Another writer changed what it read while it was parked (nothing
                    // runs beside it now, so nothing can keep beating it).
                    ErrorKind::ReadSetChanged => before.seq > seq,
                    // A cleanup passed it by while it was parked.
                    ErrorKind::StagingExpired | ErrorKind::CommitReclaimed => {
                        self.cleanups > cleanups
                    }
                    ErrorKind::MaintenanceCancelled => op.in_lane(),
                    ErrorKind::BadInput => refused,
                    // A merge whose source went while it was parked, and that lost its
                    // slot meanwhile: planned again, it finds the source deleted.
                    ErrorKind::NotFound => op == Op::BranchMerge && before.seq > seq,
                    _ => false,
                };
                if !expected {
                    self.problem(step, format!("{op:?} went on and failed: {error}"));
                }
                // Parked before its gate, a merge (which takes its source's pins as they
                // are) or a cleanup (whose first publication is its record) may have
                // staged nothing.
                let may_have_staged_nothing = window == Window::PublishBeforeGate
                    && matches!(op, Op::BranchMerge | Op::Cleanup);
                match error.evidence() {
                    Evidence::BeforeEffect if may_have_staged_nothing => {}
                    Evidence::BeforeEffect => self.problem(
                        step,
                        format!("{op:?} staged before it parked, but says BeforeEffect: {error}"),
                    ),
                    Evidence::Unpublished if moved => {
                        self.problem(step, format!("Unpublished, but the head moved: {error}"))
                    }
                    Evidence::InDoubt => self.problem(
                        step,
                        format!("InDoubt without a fault at the commit PUT: {error}"),
                    ),
                    Evidence::PartlyPublished { published_units } => {
                        self.check_partly_published(step, published_units, &before, &after);
                    }
                    Evidence::Unpublished => {}
                }
                false
            }
        };
        if landed && let Landing::Rows(rows) = landing {
            self.land(rows, effect.changed(), effect.level());
        }
        if moved {
            // A commit that landed whole wrote the `HEAD` copy.
            self.head_copy_lags = false;
            self.snapshots.insert(after.seq, self.rows.clone());
        }
        self.check_head(step).await;
    }

    /// Stages an update or a delete of `key` for `actor` to publish later.
    async fn stage(&mut self, step: usize, actor: usize, key: String, delete: bool, age: i64) {
        let graph = &self.handles[self.actors[actor]];
        let predicate = format!("id = '{key}'");
        let prepared = if delete {
            graph.prepare_delete("Person", &predicate).await
        } else {
            graph
                .prepare_update("Person", &predicate, &[("age".into(), json!(age))])
                .await
        };
        match prepared {
            Ok(write) => {
                self.trace.push(format!(
                    "{step} actor {actor}: staged {} of {key}",
                    kind(delete)
                ));
                self.staged.insert(
                    actor,
                    Staged {
                        write,
                        key,
                        delete,
                        age,
                        staged_at: self.changes,
                    },
                );
            }
            Err(error) => self.problem(step, format!("staging a {} failed: {error}", kind(delete))),
        }
    }

    /// Publishes what `actor` staged, after whatever the others did meanwhile.
    async fn publish_staged(&mut self, step: usize, actor: usize, staged: Staged) {
        self.count(format!("op publish staged {}", kind(staged.delete)));
        let graph = &self.handles[self.actors[actor]];
        let before = self.observe().await;
        let result = staged.write.publish(graph).await;
        let after = self.observe().await;
        let moved = after.seq > before.seq;
        let outcome = match &result {
            Ok(Some(commit)) => format!("published at {}", commit.seq),
            Ok(None) => "nothing to publish".to_string(),
            Err(error) => format!("{} ({})", error.code().code, error.evidence().code()),
        };
        self.trace.push(format!(
            "{step} actor {actor}: published staged {} of {} -> {outcome}, head {}",
            kind(staged.delete),
            staged.key,
            after.seq
        ));
        let touched_since = self
            .changed_at
            .get(&staged.key)
            .is_some_and(|at| *at > staged.staged_at);
        let gone = !self
            .rows
            .get("Person")
            .is_some_and(|people| people.contains_key(&staged.key));
        match result {
            Ok(Some(_)) => {
                if touched_since || gone {
                    self.problem(
                        step,
                        format!(
                            "a staged {} of {} landed over another actor's change to it",
                            kind(staged.delete),
                            staged.key
                        ),
                    );
                }
                let rows = after_change(&self.rows, &staged.key, staged.delete, staged.age);
                self.land(rows, Some(staged.key.clone()), None);
            }
            Ok(None) => {
                if !touched_since && !gone {
                    self.problem(
                        step,
                        "a staged write of a row no one touched published nothing".into(),
                    );
                }
            }
            Err(error) => {
                if moved {
                    self.problem(
                        step,
                        format!("the staged write failed, but the head moved: {error}"),
                    );
                }
                // It lost to a change of its rows, or waited through a cleanup (which
                // may have reclaimed the commit it was staged on).
                if !matches!(
                    error.kind(),
                    ErrorKind::ReadSetChanged
                        | ErrorKind::ContentionExhausted
                        | ErrorKind::StagingExpired
                        | ErrorKind::CommitReclaimed
                ) {
                    self.problem(
                        step,
                        format!("the staged write failed unexpectedly: {error}"),
                    );
                }
            }
        }
        if moved {
            self.head_copy_lags = false;
            self.snapshots.insert(after.seq, self.rows.clone());
        }
        self.check_head(step).await;
    }

    /// Reads a commit as it was: rows as the model had them, or reclaimed.
    async fn time_travel(&mut self, step: usize, handle: usize) {
        let seqs: Vec<u64> = self.snapshots.keys().copied().collect();
        let seq = seqs[self.rng.random_range(0..seqs.len())];
        let head = self.observe().await;
        let oldest = omnigraph_publish::retention::oldest_retained(&head);
        let graph = &self.handles[handle];
        let mut found = Rows::new();
        let mut failure = None;
        for type_name in TYPES {
            match scan(graph, type_name, &CommitRef::Seq(seq)).await {
                Ok(rows) => {
                    found.insert(type_name, rows);
                }
                Err(error) => {
                    failure = Some(error);
                    break;
                }
            }
        }
        self.trace.push(format!(
            "{step} time travel to {seq} (oldest retained {oldest})"
        ));
        match failure {
            None if seq < oldest && !self.head_copy_lags => {
                self.problem(
                    step,
                    format!("commit {seq} is reclaimed (from {oldest}) but read"),
                );
            }
            // Reclaimed by a record whose `HEAD` copy a crash left unwritten: the read
            // is served while the files remain (docs/format.md), and must be exact.
            None => {
                let want = self.snapshots[&seq].clone();
                if let Some(difference) = differs(&want, &found) {
                    self.problem(
                        step,
                        format!("commit {seq} reads otherwise than it was: {difference}"),
                    );
                }
            }
            Some(error) if seq < oldest && error.kind() == ErrorKind::CommitReclaimed => {}
            Some(error) => self.problem(step, format!("reading commit {seq}: {error}")),
        }
    }

    /// The head, as a new handle reads it.
    async fn observe(&self) -> GraphCommit {
        Omnigraph::open(&self.test.uri)
            .await
            .unwrap()
            .head()
            .await
            .unwrap()
    }

    async fn objects(&self) -> BTreeSet<String> {
        self.test.root.list("").await.unwrap().into_iter().collect()
    }

    /// The rows at the head equal the model; no edge dangles.
    async fn check_head(&mut self, step: usize) {
        let reader = Omnigraph::open(&self.test.uri).await.unwrap();
        let mut found = Rows::new();
        for type_name in TYPES {
            match scan(&reader, type_name, &CommitRef::Head).await {
                Ok(rows) => {
                    found.insert(type_name, rows);
                }
                Err(error) => {
                    self.problem(step, format!("reading {type_name} at the head: {error}"));
                    return;
                }
            }
        }
        if let Some(difference) = differs(&self.rows, &found) {
            self.problem(
                step,
                format!("the head differs from the model: {difference}"),
            );
        }
        for (key, edge) in found.get("WorksAt").into_iter().flatten() {
            let src = edge["src"].as_str().unwrap_or_default();
            let dst = edge["dst"].as_str().unwrap_or_default();
            let there = |type_name: &str, key: &str| {
                found
                    .get(type_name)
                    .is_some_and(|rows| rows.contains_key(key))
            };
            if !there("Person", src) || !there("Company", dst) {
                self.problems
                    .push(format!("step {step}: edge {key} dangles: {src} -> {dst}"));
            }
        }
    }

    /// The end of a universe: the log, every retained commit, stable row ids, and a
    /// last cleanup that leaves no unpinned detached version.
    /// Whether a live branch other than main sorts before it (cleanup records on it
    /// first). A deleted branch's folder stays, but cleanup records nothing there.
    async fn live_branch_before_main(&self) -> bool {
        let root = self.test.root.clone();
        let Ok(names) = omnigraph_publish::branches::branch_names(root.as_ref()).await else {
            return false;
        };
        for name in names.iter().filter(|name| name.as_str() < "main") {
            let log = omnigraph_publish::CommitLog::new(root.clone(), name).unwrap();
            if let Ok(Some(head)) = log.newest().await
                && !head.deleted
            {
                return true;
            }
        }
        false
    }

    async fn finish(&mut self) {
        let step = STEPS_MAX;
        // Whatever is still staged or parked is dropped: its actor crashed.
        self.staged.clear();
        self.parked.clear();
        let reader = Omnigraph::open(&self.test.uri).await.unwrap();
        self.clock.advance(CLEANUP_AFTER_MICROS);
        let cleaned = reader
            .maintenance()
            .cleanup(&omnigraph_tests::keep_with_minimum_grace(1))
            .await;
        if let Err(error) = cleaned {
            self.problem(step, format!("the last cleanup: {error}"));
        }
        let head = self.observe().await;
        self.snapshots.insert(head.seq, self.rows.clone());
        self.check_head(step).await;
        // The log (commits, then the history of those cleanup reclaimed): no gap,
        // each commit on its parent, down to genesis.
        let log = reader
            .graph()
            .log("main")
            .unwrap()
            .entries(omnigraph_publish::limits::LOG_PAGE_MAX, None)
            .await;
        match log {
            Ok(commits) => {
                if commits.last().is_some_and(|oldest| oldest.seq != 0) {
                    self.problem(step, "the log does not reach genesis".into());
                }
                for pair in commits.windows(2) {
                    let (newer, older) = (&pair[0], &pair[1]);
                    if newer.seq != older.seq + 1
                        || newer.parent_commit_id.as_deref() != Some(older.commit_id.as_str())
                    {
                        self.problem(
                            step,
                            format!("the log breaks between {} and {}", older.seq, newer.seq),
                        );
                    }
                }
            }
            Err(error) => self.problem(step, format!("reading the log: {error}")),
        }
        // Stable row ids are unique in every table.
        for type_name in TYPES {
            let table = omnigraph_tests::head_table(&reader, type_name).await;
            let rows = match omnigraph_tests::try_text_ids_and_row_ids(&table).await {
                Ok(rows) => rows,
                Err(error) => {
                    self.problem(
                        step,
                        format!("{type_name} at the head does not read: {error}"),
                    );
                    continue;
                }
            };
            let ids: BTreeSet<u64> = rows.iter().map(|(_, row_id)| *row_id).collect();
            if ids.len() != rows.len() {
                self.problem(
                    step,
                    format!(
                        "{type_name}: {} rows, {} stable row ids",
                        rows.len(),
                        ids.len()
                    ),
                );
            }
        }
        // Every detached version left is pinned by a retained commit.
        let oldest = omnigraph_publish::retention::oldest_retained(&head);
        let mut pinned = BTreeSet::new();
        for seq in oldest..=head.seq {
            let commit = reader.graph().commit("main", &CommitRef::Seq(seq)).await;
            match commit {
                Ok(commit) => {
                    for pin in &commit.pins {
                        pinned.insert(format!(
                            "tables/{}/_versions/d{}.manifest",
                            pin.table_id, pin.version
                        ));
                    }
                }
                Err(error) => self.problem(step, format!("retained commit {seq}: {error}")),
            }
            // Its rows read, as the model had them when it landed.
            let mut found = Rows::new();
            for type_name in TYPES {
                match scan(&reader, type_name, &CommitRef::Seq(seq)).await {
                    Ok(rows) => {
                        found.insert(type_name, rows);
                    }
                    Err(error) => {
                        self.problem(step, format!("reading retained commit {seq}: {error}"));
                        break;
                    }
                }
            }
            if let Some(want) = self.snapshots.get(&seq)
                && found.len() == TYPES.len()
                && let Some(difference) = differs(want, &found)
            {
                self.problem(
                    step,
                    format!("retained commit {seq} reads otherwise: {difference}"),
                );
            }
        }
        // Other live branches keep what their retained commits and fork points pin, and
        // each retained commit of theirs reads.
        let names = omnigraph_publish::branches::branch_names(reader.graph().root())
            .await
            .unwrap_or_default();
        for branch in names.iter().filter(|name| name.as_str() != "main") {
            let log = reader.graph().log(branch).unwrap();
            let branch_head = match log.newest().await {
                Ok(Some(head)) if !head.deleted => head,
                Ok(_) => continue,
                Err(error) => {
                    self.problem(step, format!("the head of branch {branch}: {error}"));
                    continue;
                }
            };
            let on_branch = Omnigraph::open(&self.test.uri)
                .await
                .unwrap()
                .with_branch(branch)
                .unwrap();
            let from = omnigraph_publish::retention::oldest_retained(&branch_head);
            let mut commits = Vec::new();
            for seq in from..=branch_head.seq {
                match log.require(seq).await {
                    Ok(commit) => commits.push(commit),
                    Err(error) => {
                        self.problem(step, format!("commit {seq} of branch {branch}: {error}"))
                    }
                }
                for type_name in TYPES {
                    if let Err(error) = scan(&on_branch, type_name, &CommitRef::Seq(seq)).await {
                        self.problem(
                            step,
                            format!("reading retained commit {seq} of branch {branch}: {error}"),
                        );
                    }
                }
            }
            // Its fork point is a merge base, which cleanup keeps too.
            if let Some(fork) = &branch_head.fork {
                match reader
                    .graph()
                    .log(&fork.branch)
                    .unwrap()
                    .require(fork.seq)
                    .await
                {
                    Ok(commit) => commits.push(commit),
                    Err(error) => {
                        self.problem(step, format!("the fork point of branch {branch}: {error}"))
                    }
                }
            }
            for commit in commits {
                for pin in &commit.pins {
                    pinned.insert(format!(
                        "tables/{}/_versions/d{}.manifest",
                        pin.table_id, pin.version
                    ));
                }
            }
        }
        let left: Vec<String> = self
            .objects()
            .await
            .into_iter()
            .filter(|object| object.contains("/_versions/d") && !pinned.contains(object))
            .take(3)
            .collect();
        if !left.is_empty() {
            self.problem(
                step,
                format!("cleanup left detached versions no commit pins: {left:?}"),
            );
        }
    }
}

/// A write's future, owning its handle: a parked one is kept across steps.
type Pending = Pin<Box<dyn Future<Output = omnigraph_core::Result<()>>>>;

/// How a write's run ended for now.
enum Ran {
    Done(omnigraph_core::Result<()>),
    /// Dropped where it stood.
    Crashed,
    /// Parked at a window, with its ticket.
    Parked(u64),
}

/// A write parked at a window.
struct ParkedOp {
    future: Pending,
    ticket: u64,
    op: Op,
    effect: Effect,
    window: Window,
    /// The head when it parked, and the cleanups that had run.
    seq: u64,
    cleanups: u64,
}

/// Whether a write that lands must move the head: it changes rows, or the schema.
fn effect_moves(effect: &Effect, landing: &Landing, rows: &Rows, level: usize) -> bool {
    let changes_rows = matches!(landing, Landing::Rows(next) if differs(next, rows).is_some());
    changes_rows || matches!(effect, Effect::Schema(to) if *to > level)
}

/// What a write does to the rows, applied to the model when it lands: a write that
/// waited lands on whatever the others did meanwhile.
enum Effect {
    /// New rows (fresh keys). An edge whose endpoint is not there refuses the write.
    Insert(Vec<(&'static str, String, Map<String, Value>)>),
    /// The person `key` deleted (with its edges) or given `age`; nothing if gone.
    Change {
        key: String,
        delete: bool,
        age: i64,
    },
    /// The schema at this level.
    Schema(usize),
    Nothing,
}

/// The model after a write lands.
enum Landing {
    Unchanged,
    Rows(Rows),
    /// The write must be refused there; why.
    Refused(String),
}

impl Effect {
    fn apply(&self, rows: &Rows, level: usize) -> Landing {
        let there = |type_name: &str, key: &str| {
            rows.get(type_name)
                .is_some_and(|rows| rows.contains_key(key))
        };
        match self {
            Effect::Insert(inserted) => {
                let mut next = rows.clone();
                for (type_name, key, row) in inserted {
                    let mut row = row.clone();
                    match *type_name {
                        "WorksAt" => {
                            let src = row["src"].as_str().unwrap_or_default().to_string();
                            let dst = row["dst"].as_str().unwrap_or_default().to_string();
                            let loaded =
                                |key: &str| inserted.iter().any(|(_, other, _)| other == key);
                            if !(there("Person", &src) || loaded(&src)) {
                                return Landing::Refused(format!("{src} is not there"));
                            }
                            if !there("Company", &dst) {
                                return Landing::Refused(format!("{dst} is not there"));
                            }
                        }
                        "Company" => row = company(key, level),
                        _ => {}
                    }
                    next.entry(type_name).or_default().insert(key.clone(), row);
                }
                Landing::Rows(next)
            }
            Effect::Change { key, delete, age } => {
                Landing::Rows(after_change(rows, key, *delete, *age))
            }
            Effect::Schema(to) if *to > level => {
                let mut next = rows.clone();
                for (key, row) in next.entry("Company").or_default().iter_mut() {
                    *row = company(key, *to);
                }
                Landing::Rows(next)
            }
            Effect::Schema(_) | Effect::Nothing => Landing::Unchanged,
        }
    }

    /// The person whose row the write changes, if it changes one.
    fn changed(&self) -> Option<String> {
        match self {
            Effect::Change { key, .. } => Some(key.clone()),
            _ => None,
        }
    }

    /// The schema level the write sets, if it sets one.
    fn level(&self) -> Option<usize> {
        match self {
            Effect::Schema(level) => Some(*level),
            _ => None,
        }
    }
}

/// Polls `future` until it finishes or parks at the window its simulation armed.
async fn until_done_or_parked(future: &mut Pending, windows: &failpoints::Windows) -> Ran {
    std::future::poll_fn(|context| {
        if let std::task::Poll::Ready(result) = future.as_mut().poll(context) {
            return std::task::Poll::Ready(Ran::Done(result));
        }
        // Watch before looking, so a park in between still wakes this task.
        windows.watch(context.waker());
        if let Some(ticket) = windows.take_parked() {
            return std::task::Poll::Ready(Ran::Parked(ticket));
        }
        std::task::Poll::Pending
    })
    .await
}

fn kind(delete: bool) -> &'static str {
    if delete { "delete" } else { "update" }
}

/// A write a step runs.
enum Write {
    Insert(&'static str, Value),
    Change {
        key: String,
        delete: bool,
        age: i64,
    },
    Load(Vec<String>),
    Optimize,
    Cleanup,
    BuildIndexes,
    SchemaApply(String),
    /// Merge the branch of this name into the handle's branch, then delete it.
    Merge(String),
    /// Create the branch of this name from the handle's branch's head.
    CreateBranch(String),
    /// Insert the person on the branch of this name.
    BranchInsert(String, Value),
}

impl Write {
    async fn run(&self, graph: &Omnigraph) -> omnigraph_core::Result<()> {
        match self {
            Write::Insert(type_name, value) => graph
                .insert_json(type_name, objects(json!([value])))
                .await
                .map(|_| ()),
            Write::Merge(branch) => {
                // The merge is the write the step judges. Once it landed, deleting
                // the branch lets cleanup reclaim what the branch alone kept; a branch
                // left behind (the merge failed) keeps its data, as the last check
                // allows.
                graph.merge(branch).await?;
                let _ = graph.delete_branch(branch).await;
                Ok(())
            }
            Write::CreateBranch(branch) => graph
                .create_branch(branch, &CommitRef::Head)
                .await
                .map(|_| ()),
            Write::BranchInsert(branch, value) => {
                Omnigraph::open_root(graph.graph().root().clone())
                    .await?
                    .with_branch(branch)?
                    .insert_json("Person", objects(json!([value])))
                    .await
                    .map(|_| ())
            }
            Write::Change { key, delete, age } => {
                let predicate = format!("id = '{key}'");
                if *delete {
                    graph.delete("Person", &predicate).await.map(|_| ())
                } else {
                    graph
                        .update("Person", &predicate, &[("age".into(), json!(age))])
                        .await
                        .map(|_| ())
                }
            }
            Write::Load(lines) => {
                let file = tempfile::NamedTempFile::new().unwrap();
                std::fs::write(file.path(), lines.join("\n") + "\n").unwrap();
                graph.load(file.path(), LoadMode::Append).await.map(|_| ())
            }
            // A failed unit is the run's error; its evidence is the run's: the units
            // that published, if any did.
            Write::Optimize => graph.maintenance().optimize().await.and_then(|report| {
                let published: Vec<String> = report
                    .tables
                    .iter()
                    .filter(|unit| unit.published())
                    .map(|unit| unit.type_key.clone())
                    .collect();
                let failed = report.tables.iter().find_map(|unit| match &unit.outcome {
                    omnigraph_maintenance::UnitOutcome::Failed {
                        message, evidence, ..
                    } => Some((unit.type_key.clone(), message.clone(), evidence.clone())),
                    _ => None,
                });
                match failed {
                    None => Ok(()),
                    Some((type_key, message, evidence)) => {
                        let evidence = if published.is_empty() {
                            evidence
                        } else {
                            Evidence::PartlyPublished {
                                published_units: published,
                            }
                        };
                        Err(OmniError::storage(
                            StorageKind::Transient,
                            format!("optimize {type_key}"),
                            message.into(),
                        )
                        .with_evidence(evidence))
                    }
                }
            }),
            Write::Cleanup => graph
                .maintenance()
                .cleanup(&omnigraph_tests::keep_with_minimum_grace(3))
                .await
                .map(|_| ()),
            Write::BuildIndexes => graph.maintenance().build_indexes().await.map(|_| ()),
            Write::SchemaApply(text) => graph.apply_schema(text, false).await.map(|_| ()),
        }
    }
}

/// The rows of `type_name` at `at`, by key.
async fn scan(
    graph: &Omnigraph,
    type_name: &str,
    at: &CommitRef,
) -> omnigraph_core::Result<BTreeMap<String, Map<String, Value>>> {
    let request = ScanRequest {
        filter: None,
        columns: Vec::new(),
        limit: Some(ROWS_MAX),
    };
    let batches = graph.scan(type_name, &request, at).await?;
    let mut rows = BTreeMap::new();
    for row in omnigraph_graph::rows::batches_to_json(&batches) {
        let key = row["id"].as_str().unwrap_or_default().to_string();
        if rows.insert(key.clone(), row).is_some() {
            return Err(OmniError::internal(format!("{type_name}: key {key} twice")));
        }
    }
    Ok(rows)
}

/// How `found` differs from `want`, or `None`.
fn differs(want: &Rows, found: &Rows) -> Option<String> {
    let mut said = Vec::new();
    for type_name in TYPES {
        let empty = BTreeMap::new();
        let want = want.get(type_name).unwrap_or(&empty);
        let got = found.get(type_name).unwrap_or(&empty);
        if want == got {
            continue;
        }
        let missing: Vec<&String> = want
            .keys()
            .filter(|key| !got.contains_key(*key))
            .take(3)
            .collect();
        let invented: Vec<&String> = got
            .keys()
            .filter(|key| !want.contains_key(*key))
            .take(3)
            .collect();
        let other: Vec<&String> = want
            .iter()
            .filter(|(key, row)| got.get(*key).is_some_and(|found| found != *row))
            .map(|(key, _)| key)
            .take(3)
            .collect();
        said.push(format!(
            "{type_name}: missing {missing:?}, invented {invented:?}, other values {other:?}"
        ));
    }
    (!said.is_empty()).then(|| said.join("; "))
}

/// Waits until `fault` fired, at most [`WINDOW_WAIT_MAX`]; whether it did.
async fn until_fired(fault: &FaultHandle) -> bool {
    let began = std::time::Instant::now();
    while fault.fired() == 0 {
        if began.elapsed() > WINDOW_WAIT_MAX {
            // Never reached: let the write finish instead.
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    true
}

/// Runs the universe of `seed` (the steps `plan` keeps) on its own simulated clock
/// and ids.
async fn universe(seed: u64, plan: Plan, planted: Option<Op>) -> Outcome {
    // The clock starts at the wall clock's second: cleanup compares it with the store's
    // modified times, which are the wall clock's.
    let second = 1_000_000;
    let clock = seams::Simulation::new(seed, seams::now_micros() / second * second, 1);
    seams::simulate(clock.clone(), async move {
        let universe = Universe::new(seed, plan, planted, clock).await;
        Box::pin(universe.run()).await
    })
    .await
}

/// Runs `seeds` on [`THREADS_MAX`] threads, each universe on a runtime of its own.
fn run_seeds(seeds: Vec<u64>) -> Vec<(u64, Outcome)> {
    let queue = std::sync::Arc::new(std::sync::Mutex::new(seeds));
    let threads: Vec<_> = (0..THREADS_MAX)
        .map(|_| {
            let queue = queue.clone();
            universe_thread(move |runtime| {
                let mut done = Vec::new();
                loop {
                    let Some(seed) = queue.lock().expect("the seed queue").pop() else {
                        return done;
                    };
                    let outcome = runtime.block_on(universe(seed, Plan::default(), None));
                    done.push((seed, outcome));
                }
            })
        })
        .collect();
    let mut outcomes: Vec<(u64, Outcome)> = threads
        .into_iter()
        .flat_map(|thread| thread.join().expect("a universe thread ran"))
        .collect();
    outcomes.sort_by_key(|(seed, _)| *seed);
    outcomes
}

/// Runs one universe, with the steps `plan` keeps, on a thread and runtime of its own.
fn run_one(seed: u64, plan: Plan, planted: Option<Op>) -> Outcome {
    universe_thread(move |runtime| runtime.block_on(universe(seed, plan, planted)))
        .join()
        .expect("a universe thread ran")
}

/// A thread with the stack universes need and a current-thread runtime, running `work`.
fn universe_thread<T: Send + 'static>(
    work: impl FnOnce(&tokio::runtime::Runtime) -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    std::thread::Builder::new()
        .stack_size(omnigraph_tests::BIG_STACK_BYTES)
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            work(&runtime)
        })
        .expect("a universe thread")
}

/// Shrinks a failing universe: leaves out each step it can (the last first), then runs
/// each step left without its fault where it can, so that what stays is what the
/// failure needs. `fails` runs a plan; about twice [`STEPS_MAX`] runs in all.
fn shrink(mut fails: impl FnMut(&Plan) -> bool) -> Plan {
    let mut plan = Plan::default();
    for step in (0..STEPS_MAX).rev() {
        let mut without = plan.clone();
        without.skipped.insert(step);
        if fails(&without) {
            plan = without;
        }
    }
    for step in 0..STEPS_MAX {
        if plan.skipped.contains(&step) {
            continue;
        }
        let mut calmer = plan.clone();
        calmer.calm.insert(step);
        if fails(&calmer) {
            plan = calmer;
        }
    }
    plan
}

/// The shrunk universe of a failing `seed`, as a report: the steps it keeps, its
/// problems and its trace.
fn shrunk_report(seed: u64, planted: Option<Op>) -> (Plan, Outcome) {
    let plan = shrink(|plan| !run_one(seed, plan.clone(), planted).problems.is_empty());
    let outcome = run_one(seed, plan.clone(), planted);
    (plan, outcome)
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|text| {
            text.parse()
                .unwrap_or_else(|_| panic!("{name} takes a number"))
        })
        .unwrap_or(default)
}

#[test]
fn dst_universes() {
    let start = env_number(START_VAR, 1);
    let count = env_number(SEEDS_VAR, SEEDS_DEFAULT);
    let began = std::time::Instant::now();
    let outcomes = run_seeds((start..start + count).collect());
    let elapsed = began.elapsed().as_secs_f64();
    let mut coverage: BTreeMap<String, u64> = BTreeMap::new();
    let mut costs: BTreeMap<Op, u64> = BTreeMap::new();
    let mut failing = Vec::new();
    let shrinking = std::env::var_os(SHRINK_VAR).is_some();
    for (seed, outcome) in &outcomes {
        for (op, cost) in &outcome.costs {
            let most = costs.entry(*op).or_default();
            *most = (*most).max(*cost);
        }
        if std::env::var_os(TRACE_VAR).is_some() {
            println!("seed {seed}:\n  {}", outcome.trace.join("\n  "));
        }
        for (what, times) in &outcome.coverage {
            *coverage.entry(what.clone()).or_default() += times;
        }
        if !outcome.problems.is_empty() {
            failing.push(format!(
                "seed {seed}:\n    {}\n    replay: cargo xtask dst --replay {seed}\n    shrink: cargo xtask dst --shrink {seed}\n    trace:\n      {}",
                outcome.problems.join("\n    "),
                outcome.trace.join("\n      ")
            ));
            if shrinking && failing.len() <= SHRINK_SEEDS_MAX {
                let (plan, shrunk) = shrunk_report(*seed, None);
                let kept = STEPS_MAX - plan.skipped.len();
                println!(
                    "seed {seed} shrunk to {kept} steps (left out {:?}; without their fault {:?}):\n    {}\n  trace:\n    {}",
                    plan.skipped,
                    plan.calm,
                    shrunk.problems.join("\n    "),
                    shrunk.trace.join("\n    ")
                );
            }
        }
    }
    println!(
        "dst: {} universes from seed {start}, {} failed, {elapsed:.1} s ({:.2} universes/s)",
        outcomes.len(),
        failing.len(),
        outcomes.len() as f64 / elapsed.max(0.001)
    );
    println!("  coverage:");
    for (what, times) in &coverage {
        println!("    {what:<36} {times}");
    }
    println!("  most requests of one fault-free operation, on its handle (bound):");
    for (op, cost) in &costs {
        let bound = cost_bound(*op).map_or("unbounded".to_string(), |bound| bound.to_string());
        println!("    {:<36} {cost} ({bound})", format!("{op:?}"));
    }
    assert!(
        failing.is_empty(),
        "{} failing universes:\n{}",
        failing.len(),
        failing.join("\n")
    );
    for (op, cost) in &costs {
        if let Some(bound) = cost_bound(*op) {
            assert!(
                *cost <= bound,
                "a fault-free {op:?} made {cost} requests, more than its bound {bound}"
            );
        }
    }
    // Every operation and every fault kind was drawn somewhere: a kind never drawn is
    // visible, and with enough universes it fails the run.
    if count >= LEDGER_SEEDS_MIN {
        for (op, _) in OPS {
            if op != Op::Stage {
                assert!(
                    coverage.contains_key(&format!("op {op:?}")),
                    "no universe ran {op:?}"
                );
            }
        }
        for phase in [BranchPhase::Create, BranchPhase::Write, BranchPhase::Merge] {
            assert!(
                coverage.contains_key(&format!("op BranchMerge phase {phase:?}")),
                "no universe ran a branch step with its fault on {phase:?}"
            );
        }
        for fault in faults() {
            assert!(
                coverage.contains_key(&format!("fault {fault:?}")),
                "no universe drew {fault:?}"
            );
            assert!(
                coverage.contains_key(&format!("fired {fault:?}")),
                "no universe reached the window of {fault:?}"
            );
        }
        for point in failpoints::ALL {
            assert!(
                coverage.contains_key(&format!("reached {}", point.name())),
                "no universe reached the failpoint {}",
                point.name()
            );
        }
    }
}

#[test]
fn dst_a_seed_replays_the_same_universe() {
    let seed = env_number(START_VAR, 1);
    let first = run_seeds(vec![seed]);
    let second = run_seeds(vec![seed]);
    assert_eq!(
        first[0].1.trace, second[0].1.trace,
        "seed {seed} ran two different universes"
    );
}

#[test]
fn dst_the_shrinker_keeps_only_what_a_failure_needs() {
    // A failure that needs steps 3 and 17, and the fault of step 17.
    let plan = shrink(|plan| {
        !plan.skipped.contains(&3) && !plan.skipped.contains(&17) && !plan.calm.contains(&17)
    });
    let kept: Vec<usize> = (0..STEPS_MAX)
        .filter(|step| !plan.skipped.contains(step))
        .collect();
    assert_eq!(kept, [3, 17]);
    assert_eq!(plan.calm, BTreeSet::from([3]));
}

#[test]
fn dst_a_planted_failure_shrinks_to_the_steps_it_needs() {
    // A cascading delete that succeeds counts as a problem: it needs a person first.
    let seed = (1..=50)
        .find(|seed| {
            !run_one(*seed, Plan::default(), Some(Op::DeleteCascade))
                .problems
                .is_empty()
        })
        .expect("a universe of the first 50 deletes a person");
    let (plan, shrunk) = shrunk_report(seed, Some(Op::DeleteCascade));
    let kept = STEPS_MAX - plan.skipped.len();
    assert!(
        !shrunk.problems.is_empty(),
        "the shrunk universe of seed {seed} still fails"
    );
    assert!(
        (2..=3).contains(&kept),
        "seed {seed} shrunk to {kept} steps:\n{}",
        shrunk.trace.join("\n")
    );
}

/// The cost golden (`tests/golden/cost.txt`), whose figures bound the writes here.
const COST_GOLDEN: &str = include_str!("../golden/cost.txt");
/// How many of its golden's requests a fault-free write may make in a universe: its
/// golden figure is one lost race and one follow; a step's handle may also have to run
/// the write once more (after a schema apply it had not seen: a second figure), and
/// open tables it never opened and follow several tables that moved (at most a third).
const COST_GOLDEN_FACTOR: u64 = 3;

/// The most requests one fault-free run of a write may make on its handle:
/// [`COST_GOLDEN_FACTOR`] times the golden figure of the same write after a lost race.
/// Maintenance is not bounded here: its requests grow with what it compacts or
/// deletes (the golden fixes its fixed part).
fn cost_bound(op: Op) -> Option<u64> {
    let golden = match op {
        Op::InsertPerson | Op::InsertCompany => "writers.insert_one_row_after_a_lost_race",
        Op::EdgeInsert => "writers.edge_insert_after_a_lost_race",
        Op::Update => "writers.update_one_row_after_a_lost_race",
        Op::DeleteCascade => "writers.delete_one_row_cascade_after_a_lost_race",
        Op::Load => "writers.load_append_after_a_lost_race",
        Op::SchemaApply => "writers.schema_apply_add_property",
        Op::EdgeToMissing
        | Op::Stage
        | Op::Optimize
        | Op::Cleanup
        | Op::BuildIndexes
        | Op::TimeTravel
        | Op::BranchMerge => return None,
    };
    let figure = COST_GOLDEN
        .lines()
        .find_map(|line| {
            let (name, rest) = line.split_once(" = ")?;
            (name == golden).then(|| rest.split_whitespace().next()?.parse::<u64>().ok())?
        })
        .unwrap_or_else(|| panic!("the cost golden has no {golden}"));
    Some(COST_GOLDEN_FACTOR * figure)
}

/// Seeds that found a defect, each with what it found: they run in every tier.
const FINDING_SEEDS: [(u64, &str); 10] = [
    (
        9,
        "an insert on a handle's stale head after another handle's schema apply failed",
    ),
    (
        416,
        "an optimize unit that a schema apply overtook failed instead of ending pin_moved",
    ),
    (
        9367,
        "an index build that waited through a cleanup failed storage_not_found, not staging_expired",
    ),
    (
        103,
        "a staged delete that followed another writer's deletions read staged files a cleanup had reclaimed: storage_not_found, not staging_expired",
    ),
    (
        1775,
        "a schema apply parked before its publication, which planned again after another apply landed, undid that apply's property",
    ),
    (
        2994,
        "a cleanup parked before its record deleted what an insert staged meanwhile (the store's clock is the wall's, the universe's runs ahead): cleanup is no longer parked there",
    ),
    (
        96770,
        "a handle that probed from the head it knew, an old one that cleanup had reclaimed, took it for the head and published below the floor",
    ),
    (97089, "the same, found by another universe"),
    (97814, "the same: a merge then found no merge base"),
    (
        98659,
        "a staged delete on a reclaimed base lost its slot to another writer's leftover below the floor, took the leftover for the head and published past it, below the floor",
    ),
];

#[test]
fn dst_the_seeds_that_found_defects_pass() {
    for (seed, found) in FINDING_SEEDS {
        let outcome = run_one(seed, Plan::default(), None);
        assert!(
            outcome.problems.is_empty(),
            "seed {seed} (which found: {found}):\n{}",
            outcome.problems.join("\n")
        );
    }
}
