//! Optimize as a detached writer (`docs/maintenance.md`).
//!
//! A table is a unit. For each, on the pinned version at the captured head: stage the
//! compaction (one detached Rewrite), then fold every index whose coverage lags the new
//! layout, judged on the chain's tip (rebuilt whole under its name; a vector index
//! keeps its partition count and quantisation unless its vectors outgrew or shrank
//! below them, then it is retrained with a fresh choice; one that can no longer train is reported pending;
//! a full-text index is rebuilt whole), then build declared indexes
//! that are missing. The chain tip is published with an exact CAS on the pin the table
//! was planned from: if only other tables moved it lands on the new head; if this
//! table's pin moved, the unit is staged again on the new pin from what still applies
//! ([`publish_unit`]), and when nothing does its outcome is `pin_moved` and the next
//! run re-plans. A writer is never blocked: nothing is held while staging.
//!
//! An edge table's unit that published, or had nothing to do, then builds the adjacency
//! artifact of the version the head pins unless it has one
//! ([`crate::adjacency`]). The artifact is best effort: its failure is
//! reported beside the unit's outcome and never changes it, and a cancel skips it.
//!
//! Runs go through the root's maintenance lane ([`crate::Maintenance`]); every unit
//! ends with a typed [`UnitOutcome`], and a cancel stops the run at the next cancel
//! point (staging is dropped where it stands; a publication in progress finishes).

use crate::adjacency::AdjacencyOutcome;
use crate::budget::MaintenanceBudget;
use crate::indexes::{PendingIndex, stage_create_indices, vector_training_rows};
use crate::indexes::{kept, outgrown, vector_index_for};
use crate::lane::{CancelToken, cancelled};
use crate::limits::RESTAGES_MAX;
use crate::progress::{self, MaintenanceProgress, ProgressItems, ProgressSink, ProgressStage};
use crate::run::RunRecord;
use futures::StreamExt;
use omnigraph_core::adapter::built_vector_index;
use omnigraph_core::adapter::{
    self, BaseDrift, CompactionBudget, FullTextBudget, IndexBuildKind, LinkKind,
};
use omnigraph_core::lance::Dataset;
use omnigraph_core::lance::index::DatasetIndexExt;
use omnigraph_core::schema::IndexKind;
use omnigraph_core::{ErrorKind, Evidence, OmniError, Result};
use omnigraph_publish::{BranchWriter, CommitAttempts, CommitOperation, LinkRunner, Staging};
use std::sync::Arc;

/// How one unit (table) of a run ended.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum UnitOutcome {
    /// The unit's commit landed.
    Published {
        /// The commit's seq.
        commit_seq: u64,
    },
    /// Nothing to compact, fold or build (pending indexes may still be listed).
    NothingToDo,
    /// Another writer moved the table's pin first, or a schema apply landed; nothing
    /// published, the next run re-plans. The typed read-set conflict, as its parts.
    PinMoved {
        /// The read-set member (`pin:<table>`, or `schema:<branch>`).
        member: String,
        /// The version (or schema hash) the unit was planned from.
        expected: String,
        /// The version (or schema hash) at the head.
        actual: String,
    },
    /// The unit failed; the run went on with the next one.
    Failed {
        /// The error's stable code.
        code: String,
        /// The error's process exit code, from the error table.
        exit_code: i32,
        /// The error's message.
        message: String,
        /// What the unit left behind.
        evidence: Evidence,
    },
}

/// What optimize did to one table.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TableOptimize {
    /// The type the table holds.
    pub type_key: String,
    /// The table id.
    pub table_id: String,
    /// Fragments at the planned pin.
    pub fragments_before: usize,
    /// Fragments at the staged tip (what it published, or would have).
    pub fragments_after: usize,
    /// Rows in the table.
    pub rows: u64,
    /// Indexes rebuilt because their coverage lagged.
    pub indexes_folded: Vec<String>,
    /// Of those, the vector indexes retrained with a fresh partition count because
    /// their vectors outgrew the built one (`RETRAIN_PARTITIONS_RATIO`); the others
    /// kept theirs.
    pub indexes_retrained: Vec<String>,
    /// Declared indexes built for the first time.
    pub indexes_built: Vec<String>,
    /// Indexes that could not be built or folded, with why.
    pub pending_indexes: Vec<PendingIndex>,
    /// How the unit ended.
    #[serde(flatten)]
    pub outcome: UnitOutcome,
    /// How long the unit took (planning, staging and publishing; its adjacency
    /// artifact's build is timed apart).
    pub unit_millis: u64,
    /// For an edge table whose unit published or had nothing to do: its adjacency
    /// artifact.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adjacency: Option<AdjacencyOutcome>,
}

impl TableOptimize {
    /// Whether the unit's commit landed.
    pub fn published(&self) -> bool {
        matches!(self.outcome, UnitOutcome::Published { .. })
    }

    /// The seq of the commit the unit published (the later one, when its index work
    /// followed its compaction as a second commit).
    pub fn commit_seq(&self) -> Option<u64> {
        match self.outcome {
            UnitOutcome::Published { commit_seq } => Some(commit_seq),
            _ => None,
        }
    }

    /// A unit that failed before it had a plan.
    fn failed(type_key: &str, error: &OmniError) -> TableOptimize {
        TableOptimize {
            type_key: type_key.to_string(),
            table_id: String::new(),
            fragments_before: 0,
            fragments_after: 0,
            rows: 0,
            indexes_folded: Vec::new(),
            indexes_retrained: Vec::new(),
            indexes_built: Vec::new(),
            pending_indexes: Vec::new(),
            outcome: failed_outcome(error),
            unit_millis: 0,
            adjacency: None,
        }
    }
}

fn failed_outcome(error: &OmniError) -> UnitOutcome {
    UnitOutcome::Failed {
        code: error.code().code.to_string(),
        exit_code: error.code().exit_code,
        message: error.to_string(),
        evidence: error.evidence().clone(),
    }
}

/// What an optimize run did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct OptimizeReport {
    /// One entry per table, in schema order.
    pub tables: Vec<TableOptimize>,
    /// The most units that were staging or publishing at once: never more than the
    /// budget's unit concurrency.
    pub units_at_once_max: usize,
}

impl OptimizeReport {
    /// The entry of the table holding `type_key`.
    pub fn table(&self, type_key: &str) -> Option<&TableOptimize> {
        self.tables.iter().find(|table| table.type_key == type_key)
    }

    /// The process exit status of the worst outcome: 0 when every unit published or
    /// had nothing to do; 4 when a unit lost its pin to a writer (a rerun re-plans); 75
    /// when a unit failed with a temporary error (its exit code in the error table); 1
    /// for any other failure.
    pub fn exit_code(&self) -> i32 {
        self.tables
            .iter()
            .map(|table| match &table.outcome {
                UnitOutcome::Published { .. } | UnitOutcome::NothingToDo => {
                    omnigraph_core::EXIT_SUCCESS
                }
                UnitOutcome::PinMoved { .. } => omnigraph_core::EXIT_CONFLICT,
                UnitOutcome::Failed { exit_code, .. } => {
                    if *exit_code == omnigraph_core::EXIT_TEMPORARY {
                        omnigraph_core::EXIT_TEMPORARY
                    } else {
                        omnigraph_core::EXIT_FAILURE
                    }
                }
            })
            .max_by_key(|code| exit_severity(*code))
            .unwrap_or(omnigraph_core::EXIT_SUCCESS)
    }
}

/// Orders exit codes by how bad the outcome is.
fn exit_severity(code: i32) -> u8 {
    match code {
        omnigraph_core::EXIT_SUCCESS => 0,
        omnigraph_core::EXIT_CONFLICT => 1,
        omnigraph_core::EXIT_TEMPORARY => 2,
        _ => 3,
    }
}

/// Optimizes every table of the graph through the root's maintenance lane, within
/// `budget`. See [`crate::Maintenance::optimize`].
pub async fn optimize(
    graph: &dyn BranchWriter,
    budget: &MaintenanceBudget,
) -> Result<OptimizeReport> {
    crate::Maintenance::of(graph)
        .with_maintenance_budget(*budget)
        .optimize()
        .await
}

/// The units of one run, `budget.unit_concurrency` at a time, in schema order. Every
/// unit ends with an outcome; a cancel stops the run once the units in flight have
/// stopped at their cancel points (a publication in progress finishes).
pub(crate) async fn run_units(
    graph: &dyn BranchWriter,
    budget: &MaintenanceBudget,
    runner: Option<&LinkRunner>,
    token: &CancelToken,
    record: &mut RunRecord,
    progress: Option<&ProgressSink>,
) -> Result<OptimizeReport> {
    let head = graph.head().await?;
    let catalog = graph.catalog_at(&head).await?;
    let types: Vec<String> = catalog
        .types()
        .iter()
        .map(|type_def| type_def.name().to_string())
        .collect();
    let edge = |type_name: &str| {
        catalog
            .get(type_name)
            .is_some_and(|type_def| !type_def.is_node())
    };
    // Rows as the head pins them: a unit's rows count as done when it ends, whatever
    // its outcome, so the figures reach their totals.
    let rows_of = |type_name: &str| {
        head.pins
            .iter()
            .find(|pin| pin.type_name == type_name)
            .map_or(0, |pin| pin.row_count)
    };
    let mut figures = MaintenanceProgress {
        operation: "optimize",
        stage: ProgressStage::Working,
        tables_done: 0,
        tables_total: types.len() as u64,
        done: 0,
        total: types.iter().map(|type_name| rows_of(type_name)).sum(),
        items: ProgressItems::Rows,
    };
    progress::report(progress, figures.clone());
    let (compaction, full_text) = (budget.compaction, budget.full_text);
    let at_once = UnitsAtOnce::default();
    let mut units = futures::stream::iter(types)
        .map(|type_name| async {
            let started = std::time::Instant::now();
            let running = at_once.start();
            let outcome = run_unit(graph, &type_name, &compaction, &full_text, runner, token).await;
            let outcome = match outcome {
                Ran::Done { mut table, staged } => {
                    table.unit_millis = started.elapsed().as_millis() as u64;
                    if edge(&type_name) {
                        table = Box::new(with_adjacency(graph, *table, token).await);
                    }
                    Ran::Done { table, staged }
                }
                other => other,
            };
            drop(running);
            (type_name, outcome)
        })
        .buffered(budget.unit_concurrency);
    let mut report = OptimizeReport::default();
    while let Some((type_name, outcome)) = units.next().await {
        figures.tables_done += 1;
        figures.done += rows_of(&type_name);
        progress::report(progress, figures.clone());
        match outcome {
            Ran::Done { table, staged } => {
                if table.published() {
                    record.note_published(&type_name);
                } else if staged {
                    record.note_staged();
                }
                report.tables.push(*table);
            }
            Ran::Cancelled { staged } => {
                if staged {
                    record.note_staged();
                }
            }
        }
    }
    report.units_at_once_max = at_once.most();
    if token.is_cancelled() {
        return Err(cancelled(Evidence::BeforeEffect));
    }
    Ok(report)
}

/// The units of a run in flight, and the most at once.
#[derive(Default)]
struct UnitsAtOnce {
    now: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

impl UnitsAtOnce {
    /// A unit starts; it ends when the guard drops.
    fn start(&self) -> UnitRunning<'_> {
        use std::sync::atomic::Ordering;
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        UnitRunning(self)
    }

    fn most(&self) -> usize {
        self.most.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A unit in flight.
struct UnitRunning<'a>(&'a UnitsAtOnce);

impl Drop for UnitRunning<'_> {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// How one unit's run ended.
enum Ran {
    /// With an outcome; `staged` when it left files it did not publish.
    Done {
        table: Box<TableOptimize>,
        staged: bool,
    },
    /// Stopped at a cancel point.
    Cancelled { staged: bool },
}

/// `table`'s unit, with its edge table's adjacency artifact built when the unit
/// published or had nothing to do. A cancel, before or while it builds, skips it.
async fn with_adjacency(
    graph: &dyn BranchWriter,
    table: TableOptimize,
    token: &CancelToken,
) -> TableOptimize {
    if !matches!(
        table.outcome,
        UnitOutcome::Published { .. } | UnitOutcome::NothingToDo
    ) {
        return table;
    }
    let adjacency = if token.is_cancelled() {
        AdjacencyOutcome::Cancelled
    } else {
        // Dropped where it stands on a cancel: the artifact is one object, put whole.
        tokio::select! {
            built = crate::adjacency::build_adjacency(graph, &table.type_key) => match built {
                Ok(built) => built,
                Err(error) => AdjacencyOutcome::Failed {
                    code: error.code().code.to_string(),
                    message: error.to_string(),
                },
            },
            () = token.cancelled() => AdjacencyOutcome::Cancelled,
        }
    };
    TableOptimize {
        adjacency: Some(adjacency),
        ..table
    }
}

async fn run_unit(
    graph: &dyn BranchWriter,
    type_name: &str,
    budget: &CompactionBudget,
    full_text: &FullTextBudget,
    runner: Option<&LinkRunner>,
    token: &CancelToken,
) -> Ran {
    if token.is_cancelled() {
        return Ran::Cancelled { staged: false };
    }
    // Staging is dropped where it stands when a cancel comes: its effects stay
    // unreachable, and cleanup reclaims them.
    let planned = tokio::select! {
        planned = plan_unit_on(graph, type_name, budget, full_text, runner.cloned()) => planned,
        () = token.cancelled() => return Ran::Cancelled { staged: true },
    };
    let unit = match planned {
        Ok(unit) => unit,
        Err(error) => {
            let staged = error.evidence() != &Evidence::BeforeEffect;
            return Ran::Done {
                table: Box::new(TableOptimize::failed(type_name, &error)),
                staged,
            };
        }
    };
    let staged = unit.staging.has_staged();
    // The cancel point before publication; a publication once started finishes.
    if token.is_cancelled() {
        return Ran::Cancelled { staged };
    }
    let planned = unit.report.clone();
    match publish_unit_until(graph, unit, Some(token), &CommitAttempts::new()).await {
        Ok(UnitRun {
            table,
            left_staging,
        }) => Ran::Done {
            table: Box::new(table),
            staged: left_staging,
        },
        Err(error) if error.kind() == ErrorKind::MaintenanceCancelled => {
            Ran::Cancelled { staged: true }
        }
        Err(error) => Ran::Done {
            table: Box::new(TableOptimize {
                outcome: failed_outcome(&error),
                ..planned
            }),
            staged,
        },
    }
}

/// One table's staged work, ready to publish.
pub struct PlannedUnit {
    staging: Staging,
    report: TableOptimize,
    /// The table at the pin the unit was planned from.
    planned: Arc<Dataset>,
    budget: CompactionBudget,
}

impl PlannedUnit {
    /// What the unit will publish.
    pub fn report(&self) -> &TableOptimize {
        &self.report
    }

    /// Whether there is anything to publish.
    pub fn has_work(&self) -> bool {
        self.staging.has_staged()
    }
}

/// Plans and stages the unit of `type_name` on the current head.
pub async fn plan_unit(
    graph: &dyn BranchWriter,
    type_name: &str,
    budget: &CompactionBudget,
) -> Result<PlannedUnit> {
    plan_unit_on(
        graph,
        type_name,
        budget,
        &FullTextBudget::default(),
        Some(crate::runtime::link_runner()),
    )
    .await
}

/// [`plan_unit`], with the links' Lance work run by `runner` (the caller's task when
/// `None`).
async fn plan_unit_on(
    graph: &dyn BranchWriter,
    type_name: &str,
    budget: &CompactionBudget,
    full_text: &FullTextBudget,
    runner: Option<LinkRunner>,
) -> Result<PlannedUnit> {
    let base = graph.head().await?;
    let catalog = graph.catalog_at(&base).await?;
    let type_def = catalog.require(type_name)?;
    let pin = base.require_pin_of_type(type_name)?.clone();
    let snapshot = graph.graph().snapshot_of(base.clone());
    let table = snapshot.table(type_name).await?;
    let mut staging = graph.staging_on(&base);
    if let Some(runner) = runner {
        staging.run_links_with(runner);
    }
    staging.use_full_text_budget(*full_text);
    staging.seed(&pin.table_id, table.clone())?;
    // Evidence comes from what the chain holds when a step fails.
    let planned = plan_chain(graph, &mut staging, type_def, &pin, &table, budget).await;
    let report = planned.map_err(|error| error.with_evidence(staging.evidence()))?;
    Ok(PlannedUnit {
        staging,
        report,
        planned: table,
        budget: *budget,
    })
}

/// Stages the unit's chain on `staging`: compaction, folds, deferred builds.
async fn plan_chain(
    graph: &dyn BranchWriter,
    staging: &mut Staging,
    type_def: &omnigraph_core::schema::TypeDef,
    pin: &omnigraph_publish::TablePin,
    table: &std::sync::Arc<omnigraph_core::lance::Dataset>,
    budget: &CompactionBudget,
) -> Result<TableOptimize> {
    let type_name = type_def.name();
    let fragments_before = table.manifest().fragments.len();

    // The compaction first, then the index work on its tip.
    staging
        .stage_optional(&pin.table_id, |tip, origin| {
            let budget = *budget;
            async move { adapter::stage_compaction(&tip, &budget, &origin).await }
        })
        .await?;

    let work = stage_index_work(graph, staging, type_def, &pin.table_id, table).await?;
    let tip = staging.chain(&pin.table_id).await?.tip().clone();
    Ok(TableOptimize {
        type_key: type_name.to_string(),
        table_id: pin.table_id.clone(),
        fragments_before,
        fragments_after: tip.manifest().fragments.len(),
        rows: pin.row_count,
        indexes_folded: work.folded,
        indexes_retrained: work.retrained,
        indexes_built: work.built,
        pending_indexes: work.pending,
        outcome: UnitOutcome::NothingToDo,
        unit_millis: 0,
        adjacency: None,
    })
}

/// The index work of a unit, staged after its compaction.
struct IndexWork {
    folded: Vec<String>,
    retrained: Vec<String>,
    built: Vec<String>,
    pending: Vec<PendingIndex>,
}

/// Stages the index work on the tip of `table_id`'s chain: folds of every index whose
/// coverage lags, then builds of declared indexes that are missing. `table` is the
/// table at the unit's base (a fold keeps its vector index's partition count there).
async fn stage_index_work(
    graph: &dyn BranchWriter,
    staging: &mut Staging,
    type_def: &omnigraph_core::schema::TypeDef,
    table_id: &str,
    table: &Arc<Dataset>,
) -> Result<IndexWork> {
    let type_name = type_def.name();
    // Folds: every index whose coverage lags the (rewritten) layout, judged on the
    // chain's tip: an index Lance carried across the rewrite (row-id domain) covers the
    // new fragments there and is not rebuilt.
    let mut indexes_folded = Vec::new();
    let mut indexes_retrained = Vec::new();
    let mut pending_indexes = Vec::new();
    let tip = staging.chain(table_id).await?.tip().clone();
    let built_at_tip = tip
        .load_indices()
        .await
        .map_err(|error| OmniError::from_lance("list indexes", error))?;
    for declared in type_def.declared_indexes() {
        let Some(index) = built_at_tip
            .iter()
            .find(|index| index.name == declared.name)
        else {
            continue;
        };
        let covered = index
            .effective_fragment_bitmap(tip.fragment_bitmap())
            .unwrap_or_default();
        let lagging = tip
            .manifest()
            .fragments
            .iter()
            .any(|fragment| !covered.contains(fragment.id as u32));
        if !lagging {
            continue;
        }
        let pending = |reason: String| PendingIndex {
            type_name: type_name.to_string(),
            property: declared.column.clone(),
            index: declared.name.clone(),
            reason,
        };
        let kind = match declared.kind {
            IndexKind::BTree => IndexBuildKind::BTree,
            IndexKind::Vector => {
                // A fold trains like a first build: too few vectors wait, they never
                // abort the run.
                let vectors = match vector_training_rows(&tip, &declared.column).await? {
                    Ok(vectors) => vectors,
                    Err(reason) => {
                        pending_indexes.push(pending(reason));
                        continue;
                    }
                };
                let dimension = crate::indexes::vector_dimension(type_def, &declared.column);
                match built_vector_index(table, &declared.name).await? {
                    Some(built) if outgrown(built, vectors) => {
                        indexes_retrained.push(declared.name.clone());
                        vector_index_for(vectors, dimension)
                    }
                    Some(built) => kept(built, dimension),
                    // Built, but untrained or of a kind the engine does not build: a
                    // fresh choice.
                    None => {
                        indexes_retrained.push(declared.name.clone());
                        vector_index_for(vectors, dimension)
                    }
                }
            }
            // Rebuilt whole within the full-text budget: Lance merges new rows into an
            // inverted index only by committing a version of its own.
            IndexKind::FullText => IndexBuildKind::FullText,
        };
        staging
            .stage_index_rebuild(table_id, declared, kind)
            .await?;
        indexes_folded.push(declared.name.clone());
    }

    // Deferred builds of declared but unbuilt indexes.
    let (built, pending) =
        stage_create_indices(graph, staging, std::slice::from_ref(type_def)).await?;
    pending_indexes.extend(pending);
    Ok(IndexWork {
        folded: indexes_folded,
        retrained: indexes_retrained,
        built: built.into_iter().map(|(_, index)| index).collect(),
        pending: pending_indexes,
    })
}

/// Publishes a planned unit with an exact CAS on the pin it was planned from. When
/// another writer moved the pin first, the unit is staged again on the new pin (see
/// `restage_unit`) and published again, at most [`RESTAGES_MAX`] times; a unit that
/// cannot follow, or still loses after that, ends `pin_moved` with nothing published,
/// as does one that a schema apply overtook (its member is the schema).
/// Other failures are errors with at least `Unpublished` evidence.
pub async fn publish_unit(graph: &dyn BranchWriter, unit: PlannedUnit) -> Result<TableOptimize> {
    publish_unit_until(graph, unit, None, &CommitAttempts::new())
        .await
        .map(|run| run.table)
}

/// How a unit's publication ended.
struct UnitRun {
    table: TableOptimize,
    /// Whether it left staged files that no commit references.
    left_staging: bool,
}

/// Resolves once `token` is cancelled; never without one.
async fn cancel_of(token: Option<&CancelToken>) {
    match token {
        Some(token) => token.cancelled().await,
        None => std::future::pending().await,
    }
}

/// [`publish_unit`], stopping at the cancel points of `token`: before each publication
/// after the first (whose cancel point is the caller's), and while a restage stages
/// (dropped where it stands). A cancel there is `MaintenanceCancelled` with
/// `Unpublished` evidence: the unit's staging is unreachable, and cleanup reclaims it.
/// Every commit PUT of the unit, its restages' and its index work's included, counts in
/// `attempts`: one write's bound.
async fn publish_unit_until(
    graph: &dyn BranchWriter,
    unit: PlannedUnit,
    token: Option<&CancelToken>,
    attempts: &CommitAttempts,
) -> Result<UnitRun> {
    let PlannedUnit {
        mut staging,
        mut report,
        mut planned,
        budget,
    } = unit;
    if !staging.has_staged() {
        return Ok(UnitRun {
            table: report,
            left_staging: false,
        });
    }
    let mut restages = 0;
    // Whether the unit's index work was set aside to land its compaction first.
    let mut indexes_deferred = false;
    let mut first = true;
    loop {
        if !std::mem::take(&mut first) && token.is_some_and(CancelToken::is_cancelled) {
            return Err(cancelled(Evidence::Unpublished));
        }
        let planned_version = adapter::version_of(&planned);
        let read_set =
            omnigraph_publish::ReadSet::staged(vec![(report.table_id.clone(), planned_version)]);
        // Index work set aside is not in this commit.
        let (folded, built) = if indexes_deferred {
            (0, 0)
        } else {
            (report.indexes_folded.len(), report.indexes_built.len())
        };
        let operation = CommitOperation {
            kind: "optimize".into(),
            summary: format!(
                "{}: {} -> {} fragments, {folded} folded, {built} built",
                report.type_key, report.fragments_before, report.fragments_after,
            ),
        };
        // Published through the handle, which remembers the new head: nothing is read
        // after the commit lands, so a landed unit is never reported as failed.
        let (member, expected, actual) = match graph
            .publish_staged_within(&staging, read_set, operation, attempts)
            .await
        {
            Ok(commit) => {
                report.outcome = UnitOutcome::Published {
                    commit_seq: commit.seq,
                };
                if indexes_deferred {
                    return Ok(Box::pin(index_work_after(
                        graph, staging, report, commit, budget, token, attempts,
                    ))
                    .await);
                }
                return Ok(UnitRun {
                    table: report,
                    left_staging: false,
                });
            }
            Err(OmniError::ReadSetChanged {
                member,
                expected,
                actual,
                ..
            }) => (member, expected, actual),
            Err(other) => return Err(other.with_evidence(Evidence::Unpublished)),
        };
        let pin_moved = UnitOutcome::PinMoved {
            member: member.to_string(),
            expected,
            actual,
        };
        // A schema apply overtook the unit: a conflict too, but no restage follows a
        // table whose columns may have changed.
        if !member.is_table()
            || restages == RESTAGES_MAX
            || token.is_some_and(CancelToken::is_cancelled)
        {
            report.outcome = pin_moved;
            return Ok(UnitRun {
                table: report,
                left_staging: true,
            });
        }
        restages += 1;
        let restaged = tokio::select! {
            restaged = restage_unit(graph, &mut staging, &mut report, &planned, &budget) => restaged,
            () = cancel_of(token) => return Err(cancelled(Evidence::Unpublished)),
        };
        match restaged {
            Ok(Some(Restaged { table, deferred })) => {
                planned = table;
                indexes_deferred |= deferred;
            }
            Ok(None) => {
                report.outcome = pin_moved;
                return Ok(UnitRun {
                    table: report,
                    left_staging: true,
                });
            }
            Err(error) => return Err(error.with_evidence(Evidence::Unpublished)),
        }
    }
}

/// The index work of a unit whose compaction published alone: staged on the commit
/// that published it, and published as a unit of its own (re-committed as it is when
/// writers only add or delete rows meanwhile). The compaction stays published whatever
/// happens here: index work that does not land (it fails, loses its pin again, or the
/// run is cancelled first) is reported pending, for the next run.
async fn index_work_after(
    graph: &dyn BranchWriter,
    mut staging: Staging,
    mut report: TableOptimize,
    compacted: omnigraph_publish::GraphCommit,
    budget: CompactionBudget,
    token: Option<&CancelToken>,
    attempts: &CommitAttempts,
) -> UnitRun {
    let published = report.outcome.clone();
    let catalog = graph.catalog_at(&compacted).await.ok();
    let type_def = catalog
        .as_ref()
        .and_then(|catalog| catalog.require(&report.type_key).ok());
    // Index work that did not land: pending, with the declared index's property.
    let type_key = report.type_key.clone();
    let set_aside = |report: &mut TableOptimize, why: &str| {
        let reason = format!(
            "the compaction published alone beside writers; then {why}; the next run builds it"
        );
        report.indexes_retrained.clear();
        let lost: Vec<String> = report
            .indexes_folded
            .drain(..)
            .chain(report.indexes_built.drain(..))
            .collect();
        report.pending_indexes.extend(lost.into_iter().map(|index| {
            PendingIndex {
                type_name: type_key.clone(),
                property: type_def
                    .and_then(|type_def| {
                        type_def
                            .declared_indexes()
                            .iter()
                            .find(|declared| declared.name == index)
                            .map(|declared| declared.column.clone())
                    })
                    .unwrap_or_else(|| index.clone()),
                index,
                reason: reason.clone(),
            }
        }));
        report.outcome = published.clone();
    };
    if token.is_some_and(CancelToken::is_cancelled) {
        set_aside(&mut report, "the run was cancelled");
        return UnitRun {
            table: report,
            left_staging: false,
        };
    }
    let staged = async {
        // The compaction's chain published: only the table at the new commit is left.
        let moved = staging.rebase(compacted.clone())?;
        assert!(
            moved
                .iter()
                .all(|(table_id, _)| *table_id == report.table_id),
            "an optimize unit stages one table"
        );
        let type_def = type_def.ok_or_else(|| {
            OmniError::internal(format!(
                "no type {} at the compaction's commit",
                report.type_key
            ))
        })?;
        let table = graph
            .graph()
            .snapshot_of(compacted.clone())
            .table(&report.type_key)
            .await?;
        staging.seed(&report.table_id, table.clone())?;
        let work =
            stage_index_work(graph, &mut staging, type_def, &report.table_id, &table).await?;
        Ok::<_, OmniError>((work, table))
    };
    // Dropped where it stands on a cancel: its files are unreachable.
    let staged = tokio::select! {
        staged = staged => staged,
        () = cancel_of(token) => {
            set_aside(&mut report, "the run was cancelled");
            return UnitRun {
                table: report,
                left_staging: true,
            };
        }
    };
    let (work, table) = match staged {
        Ok(staged) => staged,
        Err(error) => {
            let left_staging = error.evidence() != &Evidence::BeforeEffect;
            set_aside(
                &mut report,
                &format!("staging its index work failed: {error}"),
            );
            return UnitRun {
                table: report,
                left_staging,
            };
        }
    };
    report.indexes_folded = work.folded;
    report.indexes_retrained = work.retrained;
    report.indexes_built = work.built;
    report.pending_indexes = work.pending;
    if !staging.has_staged() {
        return UnitRun {
            table: report,
            left_staging: false,
        };
    }
    // The unit's figures are the compaction's; a restage of the index work would
    // measure the table it moved to instead.
    let figures = (report.fragments_before, report.fragments_after, report.rows);
    let unit = PlannedUnit {
        staging,
        report: report.clone(),
        planned: table,
        budget,
    };
    let restore = |table: &mut TableOptimize| {
        (table.fragments_before, table.fragments_after, table.rows) = figures;
    };
    // The cancel point before the index work's publication.
    if token.is_some_and(CancelToken::is_cancelled) {
        set_aside(&mut report, "the run was cancelled");
        return UnitRun {
            table: report,
            left_staging: true,
        };
    }
    match publish_unit_until(graph, unit, token, attempts).await {
        Ok(mut run) if run.table.published() => {
            restore(&mut run.table);
            run
        }
        Ok(mut run) => {
            restore(&mut run.table);
            set_aside(
                &mut run.table,
                "its index work lost its pin (or the schema) too",
            );
            run
        }
        Err(error) => {
            let why = if error.kind() == ErrorKind::MaintenanceCancelled {
                "the run was cancelled".to_string()
            } else {
                format!("publishing its index work failed: {error}")
            };
            set_aside(&mut report, &why);
            UnitRun {
                table: report,
                left_staging: true,
            }
        }
    }
}

/// A unit staged again on a moved pin.
struct Restaged {
    /// The table at the new pin.
    table: Arc<Dataset>,
    /// Whether the unit's index work was set aside, to follow its compaction.
    deferred: bool,
}

/// Stages a unit again on the table's new pin. A compaction is carried over (see
/// `adapter::restage_compaction`); index work after a compaction is not staged again
/// here but set aside, to be staged once the compaction publishes: rebuilding it on
/// every attempt took longer than writers take to move the pin again, so the unit
/// never landed beside busy writers. Index work alone is re-committed as it is when
/// the table only gained or lost rows, and staged again otherwise.
async fn restage_unit(
    graph: &dyn BranchWriter,
    staging: &mut Staging,
    report: &mut TableOptimize,
    planned: &Arc<Dataset>,
    budget: &CompactionBudget,
) -> Result<Option<Restaged>> {
    let head = graph.head().await?;
    if head.schema != staging.base().schema {
        return Ok(None);
    }
    let catalog = graph.catalog_at(&head).await?;
    let type_def = catalog.require(&report.type_key)?;
    let table = graph
        .graph()
        .snapshot_of(head.clone())
        .table(&report.type_key)
        .await?;
    let drift = adapter::base_drift(planned, &table).await?;
    let mut moved = staging.rebase(head)?;
    let Some((table_id, links)) = moved.pop() else {
        return Ok(Some(Restaged {
            table,
            deferred: false,
        }));
    };
    assert!(moved.is_empty(), "an optimize unit stages one table");
    assert_eq!(table_id, report.table_id, "the unit's own table moved");
    staging.seed(&table_id, table.clone())?;
    let compacted = links.iter().any(|link| link.kind == LinkKind::Rewrite);
    let indexed = links.iter().any(|link| link.kind == LinkKind::CreateIndex);
    // Index builds are re-committed as they are only over the very fragments they read;
    // after a re-staged compaction (new fragment ids) they wait for it to publish, and
    // after any other change they are staged again on the new tip.
    let deferred = compacted && indexed;
    let mut recommit_indexes = drift == BaseDrift::FilesKept && !compacted;
    for link in links {
        match link.kind {
            LinkKind::Rewrite => {
                let budget = *budget;
                let restaged = staging
                    .stage_optional(&table_id, |tip, origin| async move {
                        adapter::restage_compaction(&link, &tip, &budget, &origin).await
                    })
                    .await?;
                if restaged.is_none() {
                    return Ok(None);
                }
            }
            LinkKind::CreateIndex if recommit_indexes => {
                let recommitted = staging
                    .stage_optional(&table_id, |tip, origin| async move {
                        adapter::recommit_index_build(&link, &tip, &origin).await
                    })
                    .await?;
                // One that cannot be moved: the index work is staged again instead.
                if recommitted.is_none() {
                    recommit_indexes = false;
                }
            }
            LinkKind::CreateIndex => {}
            other => {
                return Err(OmniError::internal(format!(
                    "optimize staged a {} link, which it cannot stage again",
                    other.name()
                )));
            }
        }
    }
    if indexed && !recommit_indexes && !deferred {
        let work = stage_index_work(graph, staging, type_def, &table_id, &table).await?;
        report.indexes_folded = work.folded;
        report.indexes_retrained = work.retrained;
        report.indexes_built = work.built;
        report.pending_indexes = work.pending;
    }
    if !staging.has_staged() {
        return Ok(None);
    }
    let tip = staging.chain(&table_id).await?.tip().clone();
    report.fragments_before = table.manifest().fragments.len();
    report.fragments_after = tip.manifest().fragments.len();
    report.rows = staging
        .base()
        .require_pin_of_type(&report.type_key)?
        .row_count;
    Ok(Some(Restaged { table, deferred }))
}
