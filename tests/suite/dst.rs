//! Deterministic simulation (`cargo xtask dst`): universes of several logical actors on
//! one to three handles of one root, writing, reading and maintaining under faults,
//! each universe fixed by its seed and replayable from it.
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
use omnigraph_core::{ErrorKind, Evidence, OmniError, StorageKind, seams};
use omnigraph_maintenance::MaintenanceExt;
use omnigraph_publish::{CommitRef, GraphCommit, LoadMode, Omnigraph, PreparedWrite, ScanRequest};
use omnigraph_tests::{Backend, TestRoot, objects};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};
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
}

/// The operations a step picks from, with their weights.
const OPS: [(Op, u32); 12] = [
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
];

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
}

const FAULTS: [Fault; 8] = [
    Fault::StagingError,
    Fault::DataError,
    Fault::CommitTransient,
    Fault::CommitPermanent,
    Fault::LostAck,
    Fault::DuplicatedAck,
    Fault::CrashStaging,
    Fault::CrashCommit,
];

impl Fault {
    fn rule(self) -> FaultRule {
        let commits = "_graph/branches/main/commits/*";
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
        };
        FaultRule::new(path, &[kind], action).times(1)
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

fn company(id: &str) -> Map<String, Value> {
    row(json!({"id": id, "name": format!("company {id}")}))
}

fn edge(id: &str, src: &str, dst: &str) -> Map<String, Value> {
    row(json!({"id": id, "src": src, "dst": dst, "since": Value::Null}))
}

fn row(value: Value) -> Map<String, Value> {
    value.as_object().expect("a row").clone()
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

struct Universe {
    rng: StdRng,
    /// The universe's clock: cleanup runs after it moves on, so a staged write waiting
    /// through a cleanup is as old to its writer as to cleanup.
    clock: std::sync::Arc<seams::Simulation>,
    test: TestRoot,
    handles: Vec<Omnigraph>,
    /// Each actor's handle.
    actors: Vec<usize>,
    staged: BTreeMap<usize, Staged>,
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
}

impl Universe {
    async fn new(seed: u64, clock: std::sync::Arc<seams::Simulation>) -> Universe {
        let mut rng = StdRng::seed_from_u64(seed);
        let test = TestRoot::new(Backend::Memory).await;
        let first = Omnigraph::create(&test.uri, DST_SCHEMA).await.unwrap();
        let mut handles = vec![first];
        for _ in 1..rng.random_range(1..=HANDLES_MAX) {
            handles.push(Omnigraph::open(&test.uri).await.unwrap());
        }
        let actors = (0..rng.random_range(2..=ACTORS_MAX))
            .map(|_| rng.random_range(0..handles.len()))
            .collect();
        let head = handles[0].head().await.unwrap();
        let mut universe = Universe {
            rng,
            clock,
            test,
            handles,
            actors,
            staged: BTreeMap::new(),
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
            let actor = self.rng.random_range(0..self.actors.len());
            // An actor with a staged write publishes it first.
            if let Some(staged) = self.staged.remove(&actor) {
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
        Outcome {
            problems: self.problems,
            trace: self.trace,
            coverage: self.coverage,
        }
    }

    /// One operation of `actor`, under a fault for most writes.
    async fn step(&mut self, step: usize, actor: usize, op: Op) {
        let handle = self.actors[actor];
        let writes = !matches!(op, Op::TimeTravel | Op::Stage | Op::EdgeToMissing);
        let fault = (writes && self.rng.random_ratio(FAULT_PERCENT, 100))
            .then(|| FAULTS[self.rng.random_range(0..FAULTS.len())]);
        self.count(format!("op {op:?}"));
        if let Some(fault) = fault {
            self.count(format!("fault {fault:?}"));
        }
        let (intended, run): (Option<Rows>, _) = match op {
            Op::InsertPerson => {
                let key = self.fresh("p");
                let age = self.rng.random_range(0..100);
                let mut rows = self.rows.clone();
                rows.entry("Person")
                    .or_default()
                    .insert(key.clone(), person(&key, age));
                let value = Value::Object(person(&key, age));
                (Some(rows), Write::Insert("Person", value))
            }
            Op::InsertCompany => {
                let key = self.fresh("c");
                let mut rows = self.rows.clone();
                rows.entry("Company")
                    .or_default()
                    .insert(key.clone(), company(&key));
                (
                    Some(rows),
                    Write::Insert("Company", Value::Object(company(&key))),
                )
            }
            Op::EdgeInsert | Op::EdgeToMissing => {
                let (Some(src), Some(dst)) = (self.pick_key("Person"), self.pick_key("Company"))
                else {
                    self.trace.push(format!("{step} {actor} {op:?} skipped"));
                    return;
                };
                let key = self.fresh("e");
                if op == Op::EdgeToMissing {
                    let missing = self.fresh("nobody");
                    let value = json!({"id": key, "src": missing, "dst": dst});
                    (None, Write::Insert("WorksAt", value))
                } else {
                    let mut rows = self.rows.clone();
                    rows.entry("WorksAt")
                        .or_default()
                        .insert(key.clone(), edge(&key, &src, &dst));
                    let value = json!({"id": key, "src": src, "dst": dst});
                    (Some(rows), Write::Insert("WorksAt", value))
                }
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
                    Some(self.after_change(&key, delete, age)),
                    Write::Change { key, delete, age },
                )
            }
            Op::Load => {
                let mut rows = self.rows.clone();
                let mut lines = Vec::new();
                let people: Vec<String> = (0..self.rng.random_range(2..=4))
                    .map(|_| self.fresh("p"))
                    .collect();
                for key in &people {
                    let age = self.rng.random_range(0..100);
                    rows.entry("Person")
                        .or_default()
                        .insert(key.clone(), person(key, age));
                    let mut line = person(key, age);
                    line.insert("type".into(), json!("Person"));
                    lines.push(Value::Object(line).to_string());
                }
                if let Some(dst) = self.pick_key("Company") {
                    let key = self.fresh("e");
                    rows.entry("WorksAt")
                        .or_default()
                        .insert(key.clone(), edge(&key, &people[0], &dst));
                    lines.push(
                        json!({"type": "WorksAt", "id": key, "src": people[0], "dst": dst})
                            .to_string(),
                    );
                }
                (Some(rows), Write::Load(lines))
            }
            Op::Optimize => (None, Write::Optimize),
            Op::Cleanup => (None, Write::Cleanup),
            Op::BuildIndexes => (None, Write::BuildIndexes),
            Op::TimeTravel => {
                self.time_travel(step, handle).await;
                return;
            }
        };
        if op == Op::Cleanup {
            // Ten minutes on: what failures left is older than the grace period.
            self.clock.advance(CLEANUP_AFTER_MICROS);
        }
        let before = self.observe().await;
        let objects_before = self.objects().await;
        let injected: Option<FaultHandle> =
            fault.map(|fault| self.handles[handle].graph().root().inject(fault.rule()));
        let graph = &self.handles[handle];
        let result = match (fault, &injected) {
            (Some(fault), Some(held)) if fault.is_crash() => {
                tokio::select! {
                    biased;
                    result = Box::pin(run.run(graph)) => Some(result),
                    true = until_fired(held) => None,
                }
            }
            _ => Some(Box::pin(run.run(graph)).await),
        };
        let fired = injected.as_ref().is_some_and(|held| held.fired() > 0);
        drop(injected);
        if let Some(fault) = fault.filter(|_| fired) {
            // The window was reached, not only drawn: the ledger shows which were.
            self.count(format!("fired {fault:?}"));
            self.count(format!("fired {fault:?} in {op:?}"));
        }
        let after = self.observe().await;
        let moved = after.seq > before.seq;
        let outcome = match &result {
            None => "crashed".to_string(),
            Some(Ok(())) => "ok".to_string(),
            Some(Err(error)) => format!("{} ({})", error.code().code, error.evidence().code()),
        };
        self.trace.push(format!(
            "{step} actor {actor} on handle {handle}: {op:?} under {fault:?} (fired {fired}) -> {outcome}, head {}",
            after.seq
        ));
        let landed = match result {
            None => {
                if moved {
                    self.problem(
                        step,
                        format!("{op:?} crashed before its commit, but the head moved"),
                    );
                }
                false
            }
            Some(Ok(())) => {
                if op == Op::EdgeToMissing {
                    self.problem(step, "an edge to a missing person was accepted".into());
                }
                // A row write that says it landed moved the head.
                if intended.is_some() && !moved {
                    self.problem(step, format!("{op:?} succeeded, but the head did not move"));
                }
                moved
            }
            Some(Err(error)) => {
                // One actor steps at a time: a valid write fails only under a fault.
                if !fired && op != Op::EdgeToMissing {
                    self.problem(step, format!("{op:?} failed with no fault fired: {error}"));
                }
                let fault_at_commit = fired && fault.is_some_and(Fault::at_commit);
                self.judge_error(
                    step,
                    op,
                    &error,
                    (&before, &after),
                    fault_at_commit,
                    &objects_before,
                )
                .await
            }
        };
        if landed && let Some(rows) = intended {
            self.land(rows, &run);
        }
        if moved {
            self.snapshots.insert(after.seq, self.rows.clone());
        }
        self.check_head(step).await;
    }

    /// The rows if the person `key` is deleted (with its edges) or gets `age`.
    fn after_change(&self, key: &str, delete: bool, age: i64) -> Rows {
        if delete {
            return without_person(&self.rows, key);
        }
        let mut rows = self.rows.clone();
        if let Some(row) = rows.entry("Person").or_default().get_mut(key) {
            row.insert("age".into(), json!(age));
        }
        rows
    }

    /// The model takes `rows`; the people the write changed count a change.
    fn land(&mut self, rows: Rows, write: &Write) {
        self.changes += 1;
        if let Write::Change { key, .. } = write {
            self.changed_at.insert(key.clone(), self.changes);
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
        fault_at_commit: bool,
        objects_before: &BTreeSet<String>,
    ) -> bool {
        let moved = after.seq > before.seq;
        if matches!(error.kind(), ErrorKind::Internal | ErrorKind::Corrupt) {
            self.problem(step, format!("{op:?} failed unexpectedly: {error}"));
        }
        if op == Op::EdgeToMissing {
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
                for unit in omnigraph_tests::units_not_in_head(published_units, before, after) {
                    self.problem(
                        step,
                        format!("PartlyPublished lists {unit}, not in the head"),
                    );
                }
                // Only maintenance publishes in part, and it changes no row.
                false
            }
        }
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
            Ok(Some(_)) => "published".to_string(),
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
                let rows = self.after_change(&staged.key, staged.delete, staged.age);
                let write = Write::Change {
                    key: staged.key.clone(),
                    delete: staged.delete,
                    age: staged.age,
                };
                self.land(rows, &write);
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
            None if seq < oldest => {
                self.problem(
                    step,
                    format!("commit {seq} is reclaimed (from {oldest}) but read"),
                );
            }
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
    async fn finish(&mut self) {
        let step = STEPS_MAX;
        // Whatever is still staged is dropped: its actor crashed.
        self.staged.clear();
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
        // The log: no gap, each commit on its parent.
        let log = reader
            .graph()
            .log("main")
            .unwrap()
            .log(omnigraph_publish::log::LOG_PAGE_MAX, None)
            .await;
        match log {
            Ok(commits) => {
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
            let rows = omnigraph_tests::text_ids_and_row_ids(&table).await;
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

fn kind(delete: bool) -> &'static str {
    if delete { "delete" } else { "update" }
}

/// A write a step runs.
enum Write {
    Insert(&'static str, Value),
    Change { key: String, delete: bool, age: i64 },
    Load(Vec<String>),
    Optimize,
    Cleanup,
    BuildIndexes,
}

impl Write {
    async fn run(&self, graph: &Omnigraph) -> omnigraph_core::Result<()> {
        match self {
            Write::Insert(type_name, value) => graph
                .insert_json(type_name, objects(json!([value])))
                .await
                .map(|_| ()),
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
            Write::BuildIndexes => graph.build_indexes().await.map(|_| ()),
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
    for row in omnigraph_publish::rows::batches_to_json(&batches) {
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

/// Runs the universe of `seed` on its own simulated clock and ids.
async fn universe(seed: u64) -> Outcome {
    // The clock starts at the wall clock's second: cleanup compares it with the store's
    // modified times, which are the wall clock's.
    let second = 1_000_000;
    let clock = seams::Simulation::new(seed, seams::now_micros() / second * second, 1);
    seams::simulate(clock.clone(), async move {
        let universe = Universe::new(seed, clock).await;
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
            std::thread::Builder::new()
                .stack_size(omnigraph_tests::BIG_STACK_BYTES)
                .spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("a runtime");
                    let mut done = Vec::new();
                    loop {
                        let Some(seed) = queue.lock().expect("the seed queue").pop() else {
                            return done;
                        };
                        done.push((seed, runtime.block_on(universe(seed))));
                    }
                })
                .expect("a universe thread")
        })
        .collect();
    let mut outcomes: Vec<(u64, Outcome)> = threads
        .into_iter()
        .flat_map(|thread| thread.join().expect("a universe thread ran"))
        .collect();
    outcomes.sort_by_key(|(seed, _)| *seed);
    outcomes
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
    let mut failing = Vec::new();
    for (seed, outcome) in &outcomes {
        if std::env::var_os(TRACE_VAR).is_some() {
            println!("seed {seed}:\n  {}", outcome.trace.join("\n  "));
        }
        for (what, times) in &outcome.coverage {
            *coverage.entry(what.clone()).or_default() += times;
        }
        if !outcome.problems.is_empty() {
            failing.push(format!(
                "seed {seed}:\n    {}\n    replay: cargo xtask dst --replay {seed}\n    trace:\n      {}",
                outcome.problems.join("\n    "),
                outcome.trace.join("\n      ")
            ));
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
    assert!(
        failing.is_empty(),
        "{} failing universes:\n{}",
        failing.len(),
        failing.join("\n")
    );
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
        for fault in FAULTS {
            assert!(
                coverage.contains_key(&format!("fault {fault:?}")),
                "no universe drew {fault:?}"
            );
            assert!(
                coverage.contains_key(&format!("fired {fault:?}")),
                "no universe reached the window of {fault:?}"
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
