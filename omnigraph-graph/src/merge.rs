//! Merging one branch into another (`docs/format.md` §5.2): one commit on the target,
//! published with an exact CAS on the target's head.
//!
//! The merge base is the newest commit both branches contain: where one was created
//! from the other, or the last commit of one that was merged into the other. Per
//! table: changed only on the source since the base, the source's pin is taken (a
//! fast-forward); changed only on the target, the target's pin stays; changed on both,
//! rows are merged by key (an edge's by id). A key changed on both sides to different
//! values, or deleted on one and changed on the other, is a conflict; so is an edge the
//! merge would keep whose endpoint the merge removes. Any conflict publishes nothing.
//!
//! A schema change on one side takes that side's tables of the types it changed, when
//! the other side did not write them. A row merge streams its versions in passes, each
//! holding the keys of one hash partition, within a [`MergeBudget`].

use crate::commit::{CommitOperation, GraphCommit, MergedFrom, TablePin};
use crate::graph::CommitRef;
use crate::limits::{
    KEY_LOOKUP_KEYS_MAX, MERGE_CHANGED_ROWS_MAX, MERGE_KEYS_PER_DELETE_MAX, MERGE_PASS_ROWS_MAX,
    MERGE_PASSES_MAX,
};
use crate::omnigraph::Omnigraph;
use crate::publication::{Change, Publication, ReadSet, Requirements};
use crate::reads::collect;
use crate::rows;
use crate::staging::open_pinned;
use futures::TryStreamExt;
use omnigraph_core::arrow_array::{ArrayRef, RecordBatch, UInt32Array};
use omnigraph_core::lance::Dataset;
use omnigraph_core::schema::{
    Catalog, DeclKind, EDGE_DST_COLUMN, EDGE_ID_COLUMN, EDGE_SRC_COLUMN, TypeDef,
};
use omnigraph_core::{InputLocation, MergeConflict, MergeConflictKind, OmniError, Result};
use omnigraph_publish::BranchWriter;
use omnigraph_publish::CommitAttempts;
use omnigraph_publish::limits::MERGED_FROM_MAX;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// The seed of the hash that puts each key in one pass: fixed, so the three versions'
/// reads agree.
const MERGE_PASS_SEED: u64 = 0x6f6d_6e69_6772_6170;
/// The operation kind of a merge commit.
pub const MERGE_OPERATION: &str = "merge";

/// The memory a merge may use: what one pass of a row merge holds, how many passes it
/// may make, and how many changed rows the merge may hold. Past any of them a merge
/// (and a dry run) fails before any effect, naming the limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MergeBudget {
    /// Rows of each version one pass holds (see [`MERGE_PASS_ROWS_MAX`]).
    pub pass_rows_max: u64,
    /// Passes over one table (see [`MERGE_PASSES_MAX`]).
    pub passes_max: u64,
    /// Changed rows over all tables (see [`MERGE_CHANGED_ROWS_MAX`]).
    pub changed_rows_max: u64,
}

impl Default for MergeBudget {
    fn default() -> MergeBudget {
        MergeBudget {
            pass_rows_max: MERGE_PASS_ROWS_MAX,
            passes_max: MERGE_PASSES_MAX,
            changed_rows_max: MERGE_CHANGED_ROWS_MAX,
        }
    }
}

impl MergeBudget {
    /// Every limit is at least 1.
    pub(crate) fn check(&self) -> Result<()> {
        for (field, value) in [
            ("pass_rows_max", self.pass_rows_max),
            ("passes_max", self.passes_max),
            ("changed_rows_max", self.changed_rows_max),
        ] {
            if value == 0 {
                return Err(OmniError::bad_input(
                    InputLocation::in_source("merge budget").field(field),
                    format!("MergeBudget::{field} is 0: every limit of a merge is at least 1"),
                ));
            }
        }
        Ok(())
    }
}

/// What a merge does with one table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TableMergeAction {
    /// Both branches pin the same version.
    Unchanged,
    /// Only the target changed it since the base: its pin stays.
    Keep,
    /// Only the source changed it: the source's pin is taken.
    FastForward,
    /// Both changed it: rows are merged by key.
    RowMerge,
}

/// One table of a merge.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TableMerge {
    /// The type the table holds.
    pub type_name: String,
    /// The table.
    pub table_id: String,
    /// What the merge does with it.
    pub action: TableMergeAction,
    /// Rows of a row merge taken from the source (added or changed there only).
    pub taken: u64,
    /// Rows of a row merge deleted because the source deleted them.
    pub deleted: u64,
}

/// What a merge did, or (a dry run) would do.
#[derive(Clone, Debug, serde::Serialize)]
pub struct MergeReport {
    /// The branch merged from.
    pub from_branch: String,
    /// The branch merged into.
    pub into_branch: String,
    /// The merge base: a branch and one of its commits.
    pub base_branch: String,
    /// The merge base's seq on `base_branch`.
    pub base_seq: u64,
    /// The source head merged.
    pub from_seq: u64,
    /// The target head merged onto.
    pub into_seq: u64,
    /// Per table of the merged schema.
    pub tables: Vec<TableMerge>,
    /// Every conflict (a dry run reports them; a merge fails with them).
    pub conflicts: Vec<MergeConflict>,
    /// The merge commit; `None` for a dry run, or when the target holds the source
    /// already.
    pub commit: Option<GraphCommit>,
}

/// A row merge's effect on the target's table.
struct RowMergePlan {
    table_id: String,
    type_def: TypeDef,
    /// Rendered keys to delete from the target: the source's deletions, and the keys
    /// whose rows the source's version replaces.
    delete: Vec<String>,
    /// The source's rows to append.
    taken: Vec<RecordBatch>,
    /// Rows the source deleted (the rest of `delete` makes room for `taken`).
    deleted_by_source: u64,
}

/// A merge, planned.
struct Plan {
    report: MergeReport,
    target: GraphCommit,
    /// The source head merged, for the target's record of merges.
    merged: MergedFrom,
    /// The source's schema, when the merge takes the source's commit whole.
    schema: Option<String>,
    fast_forward: Vec<TablePin>,
    dropped: Vec<String>,
    rows: Vec<RowMergePlan>,
}

/// Rendered key to (batch, row).
type KeyPlaces = hashbrown::HashMap<String, (usize, usize), foldhash::fast::RandomState>;
/// Rendered keys.
type KeySet = hashbrown::HashSet<String, foldhash::fast::RandomState>;

/// The rows of one pass over one version of a table: their columns (the target
/// table's), each row in Arrow's row format
/// (comparable across the three versions), and where each key is.
struct ReadVersion {
    columns: Vec<Vec<ArrayRef>>,
    rows: Vec<arrow::row::Rows>,
    keys: KeyPlaces,
}

impl ReadVersion {
    fn row(&self, at: (usize, usize)) -> arrow::row::Row<'_> {
        self.rows[at.0].row(at.1)
    }
}

/// Per node type, the keys one side of the merge has that the merged result does not:
/// an edge from that side naming one dangles.
#[derive(Default)]
struct Removed {
    from_target: BTreeSet<String>,
    from_source: BTreeSet<String>,
}

impl TableMerge {
    fn new(type_name: &str, table_id: &str, action: TableMergeAction) -> TableMerge {
        TableMerge {
            type_name: type_name.to_string(),
            table_id: table_id.to_string(),
            action,
            taken: 0,
            deleted: 0,
        }
    }
}

/// One side of a merge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Source,
    Target,
}

impl Side {
    fn other(self) -> Side {
        match self {
            Side::Source => Side::Target,
            Side::Target => Side::Source,
        }
    }

    fn of<'a>(self, source: &'a GraphCommit, target: &'a GraphCommit) -> &'a GraphCommit {
        match self {
            Side::Source => source,
            Side::Target => target,
        }
    }
}

/// The rows a merge holds as its result so far, against its budget.
struct Changed {
    budget: MergeBudget,
    rows: u64,
}

impl Changed {
    fn new(budget: MergeBudget) -> Changed {
        Changed { budget, rows: 0 }
    }

    /// Counts `rows` more; past the budget the merge stops, before any effect.
    fn add(&mut self, rows: u64) -> Result<()> {
        self.rows = self.rows.saturating_add(rows);
        if self.rows > self.budget.changed_rows_max {
            return Err(OmniError::bad_input(
                InputLocation::in_source("merge"),
                format!(
                    "the merge changes or conflicts on more than {} rows, the most it holds (MergeBudget::changed_rows_max); nothing was changed: merge in smaller steps",
                    self.budget.changed_rows_max
                ),
            ));
        }
        Ok(())
    }

    /// The passes that read every version in `pins` within the budget's rows per pass;
    /// a table too large for the budget's passes fails before any effect.
    fn passes<const N: usize>(&self, type_name: &str, pins: [&TablePin; N]) -> Result<u64> {
        let rows = pins.iter().map(|pin| pin.row_count).max().unwrap_or(0);
        let per_pass = self.budget.pass_rows_max;
        assert!(per_pass > 0, "a merge budget is checked when it is set");
        let passes = rows.div_ceil(per_pass).max(1);
        if passes > self.budget.passes_max {
            return Err(OmniError::bad_input(
                InputLocation::in_source("merge").type_name(type_name),
                format!(
                    "{type_name} holds {rows} rows, more than a merge reads in {} passes of {per_pass} rows (MergeBudget); nothing was changed: merge smaller changes, or move the rows on one branch",
                    self.budget.passes_max
                ),
            ));
        }
        Ok(passes)
    }
}

/// One pass of a merge over a table: the keys whose hash falls in its partition.
#[derive(Clone, Copy, Debug)]
struct Pass {
    index: u64,
    count: u64,
}

impl Pass {
    /// This pass over the version `pin` pins, with about the rows of it the pass holds
    /// (a capacity hint: the budget bounds it).
    fn of(self, pin: &TablePin) -> (Pass, usize) {
        (
            self,
            usize::try_from(pin.row_count / self.count).unwrap_or(0),
        )
    }

    fn holds(self, key: &str) -> bool {
        use std::hash::BuildHasher;
        self.count == 1
            || foldhash::fast::FixedState::with_seed(MERGE_PASS_SEED).hash_one(key) % self.count
                == self.index
    }
}

/// Whether the merge, taking one side's table of node type `node` (`action`: `Keep`
/// the target's, `FastForward` the source's), keeps edges of the other side that may
/// name its lost keys: an edge table touching `node` whose other side's edges stay
/// (the target's, when kept or row merged; the source's, when fast-forwarded or row
/// merged). An edge table unchanged on both sides never names a key one side
/// deleted: the delete took its edges with it.
fn keeps_edges_of_the_losing_side(
    catalog: &Catalog,
    node: &str,
    action: TableMergeAction,
    tables: &[TableMerge],
) -> bool {
    catalog.types().iter().any(|edge| {
        let DeclKind::Edge { from, to } = edge.kind() else {
            return false;
        };
        let Some(edges) = tables.iter().find(|table| table.type_name == edge.name()) else {
            return false;
        };
        let losing_side_kept = match action {
            TableMergeAction::Keep => matches!(
                edges.action,
                TableMergeAction::FastForward | TableMergeAction::RowMerge
            ),
            _ => matches!(
                edges.action,
                TableMergeAction::Keep | TableMergeAction::RowMerge
            ),
        };
        (from == node || to == node) && losing_side_kept
    })
}

fn schema_conflict(type_name: &str) -> MergeConflict {
    MergeConflict {
        type_name: type_name.to_string(),
        key: String::new(),
        kind: MergeConflictKind::Schema,
    }
}

impl Omnigraph {
    /// Merges branch `from` into this handle's branch: one commit, published with an
    /// exact CAS on this branch's head. A writer that moved the head first makes the
    /// merge plan again on the new head, within the write's commit attempts
    /// ([`omnigraph_publish::limits::COMMIT_PUTS_MAX`]); a merge that keeps losing
    /// reserves every table of the branch for its next attempt (`docs/format.md` §7.7).
    /// Conflicts publish nothing and fail with `MergeConflict`, listing every one.
    /// `commit` is `None` when this branch holds everything `from` changed already.
    pub async fn merge(&self, from: &str) -> Result<MergeReport> {
        self.replanning(
            crate::replanning::OnSchemaChange::PlanAgain,
            || self.every_table(),
            |target, holding, attempts| async move {
                self.merge_on(from, target, holding, &attempts).await
            },
        )
        .await
    }

    /// One attempt of [`Omnigraph::merge`] onto `target`, holding the reservation
    /// `holding`.
    async fn merge_on(
        &self,
        from: &str,
        target: GraphCommit,
        holding: Option<String>,
        attempts: &CommitAttempts,
    ) -> Result<MergeReport> {
        // The source's pins are published as they are: cleanup keeps them as a head's
        // for its grace period, so the commit lands soon after they were seen at the
        // source's head (`FOREIGN_PINS_AGE_MAX`).
        let read = omnigraph_core::seams::Since::now();
        let plan = self.plan_merge(from, target).await?;
        if !plan.report.conflicts.is_empty() {
            return Err(OmniError::MergeConflict {
                from_branch: plan.report.from_branch,
                into_branch: plan.report.into_branch,
                conflicts: plan.report.conflicts,
                evidence: omnigraph_core::Evidence::BeforeEffect,
            });
        }
        let changes = plan.schema.is_some()
            || !plan.fast_forward.is_empty()
            || plan
                .rows
                .iter()
                .any(|rows| !rows.delete.is_empty() || !rows.taken.is_empty());
        if !changes {
            return Ok(plan.report);
        }
        let Plan {
            mut report,
            target,
            merged,
            schema,
            fast_forward,
            dropped,
            rows,
        } = plan;
        // Only a merge that publishes records itself (a dry run never refuses over it).
        let merged_from = self.merged_from_after(&target, merged).await?;
        let mut staging = self.staging_on(&target);
        for merge in &rows {
            let key_type = merge.type_def.key_type();
            for chunk in merge.delete.chunks(MERGE_KEYS_PER_DELETE_MAX) {
                let predicate = rows::key_in_filter(
                    merge.type_def.key_column(),
                    chunk.iter().map(String::as_str),
                    key_type,
                );
                staging.stage_delete(&merge.table_id, &predicate).await?;
            }
            if !merge.taken.is_empty() {
                staging
                    .stage_append(&merge.table_id, merge.taken.clone())
                    .await?;
            }
        }
        let operation = CommitOperation {
            kind: MERGE_OPERATION.to_string(),
            summary: format!(
                "from {} at commit {}: {} fast-forward, {} row merges",
                report.from_branch,
                report.from_seq,
                fast_forward.len(),
                rows.len()
            ),
        };
        // A plan that took a while: the pins it takes are seen again at the source's
        // head, so they are as fresh as this read (else the plan's read stands).
        let read = match fast_forward.is_empty() {
            true => None,
            false => Some(self.seen_again(from, &fast_forward).await.unwrap_or(read)),
        };
        let mut pins = staging.tip_pins().await?;
        pins.extend(fast_forward);
        let requires = Requirements {
            foreign_pins_read: read,
            ..staging.requirements(ReadSet::Strict).holding(holding)
        };
        let change = Change::Merge {
            pins,
            dropped,
            schema,
            merged_from,
        };
        let base = staging.base().clone();
        let publication = Publication::new(base, requires, change, operation, self.actor());
        let commit = self
            .publish_as_handle(&publication, &staging, attempts)
            .await?;
        for table in &report.tables {
            if table.action != TableMergeAction::Keep {
                self.forget_keys(&table.table_id).await;
            }
        }
        report.commit = Some(commit);
        Ok(report)
    }

    /// When `pins` were seen at the head of branch `from`: now, when its head still pins
    /// each at its version (the head is read after this moment is taken); `None` when
    /// it does not, or cannot be read.
    async fn seen_again(
        &self,
        from: &str,
        pins: &[TablePin],
    ) -> Option<omnigraph_core::seams::Since> {
        let before_the_read = omnigraph_core::seams::Since::now();
        let head = self.graph().commit(from, &CommitRef::Head).await.ok()?;
        pins.iter()
            .all(|pin| {
                head.pin(&pin.table_id)
                    .is_some_and(|now| now.version == pin.version)
            })
            .then_some(before_the_read)
    }

    /// What [`Omnigraph::merge`] would do, conflicts included, without an effect.
    pub async fn merge_dry_run(&self, from: &str) -> Result<MergeReport> {
        let target = self.head().await?;
        Ok(self.plan_merge(from, target).await?.report)
    }

    /// Plans merging `from` onto `target`, this branch's head as the caller read it.
    async fn plan_merge(&self, from: &str, target: GraphCommit) -> Result<Plan> {
        let into = self.branch().to_string();
        crate::layout::check_branch(from)?;
        if from == into {
            return Err(merge_input(format!("{from} cannot be merged into itself")));
        }
        let source = self.graph().commit(from, &CommitRef::Head).await?;
        let base = self.merge_base(&source, &target).await?;
        let mut plan = Plan {
            report: MergeReport {
                from_branch: from.to_string(),
                into_branch: into.clone(),
                base_branch: base.branch.clone(),
                base_seq: base.seq,
                from_seq: source.seq,
                into_seq: target.seq,
                tables: Vec::new(),
                conflicts: Vec::new(),
                commit: None,
            },
            target: target.clone(),
            merged: MergedFrom {
                branch: from.to_string(),
                seq: source.seq,
                commit_id: source.commit_id.clone(),
            },
            schema: None,
            fast_forward: Vec::new(),
            dropped: Vec::new(),
            rows: Vec::new(),
        };
        let unchanged_since_base = |side: &GraphCommit| {
            side.schema == base.schema
                && side.pins.len() == base.pins.len()
                && side.pins.iter().all(|pin| {
                    base.pin(&pin.table_id)
                        .is_some_and(|at_base| at_base.version == pin.version)
                })
        };
        if unchanged_since_base(&source) {
            // The target holds everything the source has.
            return Ok(plan);
        }
        if source.schema != target.schema && unchanged_since_base(&target) {
            // Only the source wrote (its schema change included): take it whole.
            plan.schema = Some(source.schema.clone());
            plan.fast_forward = source.pins.clone();
            plan.dropped = target
                .pins
                .iter()
                .filter(|pin| source.pin(&pin.table_id).is_none())
                .map(|pin| pin.table_id.clone())
                .collect();
            plan.report.tables = source
                .pins
                .iter()
                .map(|pin| {
                    TableMerge::new(&pin.type_name, &pin.table_id, TableMergeAction::FastForward)
                })
                .collect();
            return Ok(plan);
        }
        let schema_side = match (source.schema != base.schema, target.schema != base.schema) {
            (true, true) if source.schema != target.schema => {
                // Both changed the schema, differently.
                plan.report.conflicts.push(schema_conflict(""));
                return Ok(plan);
            }
            (true, false) => Some(Side::Source),
            (false, true) => Some(Side::Target),
            // The same schema on both sides, changed identically or not at all.
            _ => None,
        };
        if schema_side == Some(Side::Source) {
            plan.schema = Some(source.schema.clone());
        }
        let catalog = match schema_side {
            Some(Side::Source) => self.catalog_at(&source).await?,
            _ => self.catalog_at(&target).await?,
        };
        let base_catalog = self.catalog_at(&base).await?;
        let budget = self.merge_budget();
        let mut changed = Changed::new(budget);
        let mut removed: HashMap<String, Removed> = HashMap::new();
        if let Some(side) = schema_side {
            // Types the side that changed the schema dropped: the other side must not
            // have written them since the base.
            for type_def in base_catalog.types() {
                let name = type_def.name();
                if catalog.get(name).is_some() {
                    continue;
                }
                let other = side.other().of(&source, &target);
                let at_other = other.pin_of_type(name);
                let at_base = base.pin_of_type(name);
                if at_other.map(|pin| pin.version) != at_base.map(|pin| pin.version) {
                    plan.report.conflicts.push(schema_conflict(name));
                } else if let (Side::Source, Some(pin)) = (side, at_other) {
                    plan.dropped.push(pin.table_id.clone());
                }
            }
        }
        // Per type of the merged schema that has an action: its pins on both sides.
        let mut sides: Vec<(&TypeDef, Option<&TablePin>, Option<&TablePin>)> = Vec::new();
        for type_def in catalog.types() {
            let name = type_def.name();
            // A type whose columns the schema side changed, or that it added, or dropped
            // and added again (a new table: how endpoints or a key change). Declaring or
            // dropping an index changes neither, and its rows merge as any.
            let changed_by_schema = schema_side.filter(|side| {
                let table_id =
                    |commit: &GraphCommit| commit.pin_of_type(name).map(|pin| pin.table_id.clone());
                base_catalog.get(name).map(TypeDef::arrow_schema) != Some(type_def.arrow_schema())
                    || table_id(side.of(&source, &target)) != table_id(&base)
            });
            let (at_source, at_target) = (source.pin_of_type(name), target.pin_of_type(name));
            let action = match (changed_by_schema, at_source, at_target) {
                (Some(side), _, _) => {
                    // The side that changed the schema changed this type: its table is
                    // taken whole, when the other side did not write it since the base.
                    let other = side.other().of(&source, &target).pin_of_type(name);
                    let written = other.map(|pin| pin.version)
                        != base.pin_of_type(name).map(|pin| pin.version);
                    if written {
                        plan.report.conflicts.push(schema_conflict(name));
                        continue;
                    }
                    match side {
                        Side::Source => TableMergeAction::FastForward,
                        Side::Target => TableMergeAction::Keep,
                    }
                }
                (None, Some(at_source), Some(at_target))
                    if at_source.table_id == at_target.table_id =>
                {
                    let at_base = base.pin(&at_target.table_id).map(|pin| pin.version);
                    if at_source.version == at_target.version {
                        TableMergeAction::Unchanged
                    } else if at_base == Some(at_source.version) {
                        TableMergeAction::Keep
                    } else if at_base == Some(at_target.version) {
                        TableMergeAction::FastForward
                    } else {
                        TableMergeAction::RowMerge
                    }
                }
                (None, Some(at_source), Some(at_target))
                    if [at_source, at_target].iter().all(|pin| {
                        base.pin_of_type(name)
                            .is_none_or(|at_base| at_base.table_id != pin.table_id)
                    }) && (at_source.row_count == 0 || at_target.row_count == 0) =>
                {
                    // Both sides added the type (or dropped and added it again), each
                    // with its own new table, and at most one wrote rows to it: that
                    // one's table is taken.
                    if at_source.row_count == 0 {
                        TableMergeAction::Keep
                    } else {
                        TableMergeAction::FastForward
                    }
                }
                (None, Some(_), Some(_)) => {
                    // Each branch created its own table for the type, and wrote it.
                    plan.report.conflicts.push(schema_conflict(name));
                    continue;
                }
                (None, _, _) => {
                    return Err(OmniError::corrupt(
                        format!("commit {} of {from}", source.seq),
                        format!("type {name} is not pinned on both branches under one schema"),
                    ));
                }
            };
            let chosen = match action {
                TableMergeAction::FastForward => at_source,
                _ => at_target,
            }
            .ok_or_else(|| {
                OmniError::corrupt(
                    format!("commit {} of {from}", source.seq),
                    format!("type {name} is not pinned where its schema has it"),
                )
            })?;
            if let Some(at_target) = at_target.filter(|pin| pin.table_id != chosen.table_id) {
                // The source dropped the type and created it again.
                plan.dropped.push(at_target.table_id.clone());
            }
            if action == TableMergeAction::FastForward {
                plan.fast_forward.push(chosen.clone());
            }
            plan.report
                .tables
                .push(TableMerge::new(name, &chosen.table_id, action));
            sides.push((type_def, at_source, at_target));
        }
        // Then the reads: each row merge, and the keys one side loses where the merge
        // keeps that side's edges.
        for (index, (type_def, at_source, at_target)) in sides.into_iter().enumerate() {
            let name = type_def.name();
            let action = plan.report.tables[index].action;
            match (action, at_source, at_target) {
                (TableMergeAction::RowMerge, Some(at_source), Some(at_target)) => {
                    let Some(at_base) = base.pin(&at_target.table_id) else {
                        return Err(OmniError::internal(format!(
                            "{name} changed on both sides but is not in the base"
                        )));
                    };
                    // Boxed: a row merge's future is large, and a merge plans several.
                    let (merge, conflicts, removed_here) = Box::pin(self.merge_table_rows(
                        type_def,
                        [(&base, at_base), (&source, at_source), (&target, at_target)],
                        &mut changed,
                    ))
                    .await?;
                    let table = &mut plan.report.tables[index];
                    table.taken = merge
                        .taken
                        .iter()
                        .map(|batch| batch.num_rows() as u64)
                        .sum();
                    table.deleted = merge.deleted_by_source;
                    plan.report.conflicts.extend(conflicts);
                    if type_def.is_node() {
                        removed.insert(name.to_string(), removed_here);
                    }
                    plan.rows.push(merge);
                }
                (
                    TableMergeAction::Keep | TableMergeAction::FastForward,
                    Some(at_source),
                    Some(at_target),
                ) if type_def.is_node()
                    && keeps_edges_of_the_losing_side(
                        &catalog,
                        name,
                        action,
                        &plan.report.tables,
                    ) =>
                {
                    let (kept, lost) = match action {
                        TableMergeAction::Keep => ((&target, at_target), (&source, at_source)),
                        _ => ((&source, at_source), (&target, at_target)),
                    };
                    let gone = Box::pin(self.keys_lost(type_def, kept, lost, &mut changed)).await?;
                    let entry = removed.entry(name.to_string()).or_default();
                    if action == TableMergeAction::Keep {
                        entry.from_source = gone;
                    } else {
                        entry.from_target = gone;
                    }
                }
                _ => {}
            }
        }
        let dangling = self
            .dangling_edges(
                &mut changed,
                &catalog,
                (&source, &target),
                &plan.report.tables,
                &plan.rows,
                &removed,
            )
            .await?;
        plan.report.conflicts.extend(dangling);
        Ok(plan)
    }

    /// The three-way merge of one table's rows (`versions`: base, source, target), in
    /// as many passes as the budget needs, each over the keys of one hash partition.
    async fn merge_table_rows(
        &self,
        type_def: &TypeDef,
        versions: [(&GraphCommit, &TablePin); 3],
        changed: &mut Changed,
    ) -> Result<(RowMergePlan, Vec<MergeConflict>, Removed)> {
        let [base, source, target] = versions;
        let passes = changed.passes(type_def.name(), versions.map(|(_, pin)| pin))?;
        let root = self.graph().root();
        let (base_table, source_table, target_table) = tokio::try_join!(
            open_pinned(root, base.0, base.1),
            open_pinned(root, source.0, source.1),
            open_pinned(root, target.0, target.1),
        )?;
        // Every version is read with the target's table's columns: a schema change both
        // sides made identically leaves the base with other columns.
        let schema: omnigraph_core::arrow_schema::SchemaRef =
            Arc::new(target_table.schema().into());
        let converter = row_converter(&schema)?;
        let mut merge = RowMergePlan {
            table_id: target.1.table_id.clone(),
            type_def: type_def.clone(),
            delete: Vec::new(),
            taken: Vec::new(),
            deleted_by_source: 0,
        };
        let (mut conflicts, mut removed) = (Vec::new(), Removed::default());
        for index in 0..passes {
            let pass = Pass {
                index,
                count: passes,
            };
            let (as_base, as_side) = (
                (&schema, &converter, base_columns as Conform),
                (&schema, &converter, side_columns as Conform),
            );
            // The three reads overlap their I/O.
            let (base_rows, source_rows, target_rows) = tokio::try_join!(
                read_version(&base_table, type_def, as_base, pass.of(base.1)),
                read_version(&source_table, type_def, as_side, pass.of(source.1)),
                read_version(&target_table, type_def, as_side, pass.of(target.1)),
            )?;
            let before = (
                merge.delete.len(),
                merge.taken.len(),
                conflicts.len(),
                removed.from_source.len(),
            );
            merge_rows(
                type_def,
                &schema,
                [&base_rows, &source_rows, &target_rows],
                &mut merge,
                &mut conflicts,
                &mut removed,
            )?;
            let taken: usize = merge.taken[before.1..]
                .iter()
                .map(RecordBatch::num_rows)
                .sum();
            // A key the source deleted is in `delete` and `removed.from_target`: once.
            let held = merge.delete.len() - before.0 + taken + conflicts.len() - before.2
                + removed.from_source.len()
                - before.3;
            changed.add(held as u64)?;
        }
        // Key order: the same conflicts read the same at every run.
        conflicts.sort_by(|a, b| a.key.cmp(&b.key));
        Ok((merge, conflicts, removed))
    }

    /// The keys of a node type that `lost`'s version has and `kept`'s does not, read in
    /// as many passes as the budget needs.
    async fn keys_lost(
        &self,
        type_def: &TypeDef,
        kept: (&GraphCommit, &TablePin),
        lost: (&GraphCommit, &TablePin),
        changed: &mut Changed,
    ) -> Result<BTreeSet<String>> {
        let passes = changed.passes(type_def.name(), [kept.1, lost.1])?;
        let root = self.graph().root();
        let (kept_table, lost_table) = tokio::try_join!(
            open_pinned(root, kept.0, kept.1),
            open_pinned(root, lost.0, lost.1)
        )?;
        let mut gone = BTreeSet::new();
        for index in 0..passes {
            let pass = Pass {
                index,
                count: passes,
            };
            let (kept_keys, lost_keys) = tokio::try_join!(
                key_set(&kept_table, type_def, pass),
                key_set(&lost_table, type_def, pass)
            )?;
            let before = gone.len();
            gone.extend(lost_keys.into_iter().filter(|key| !kept_keys.contains(key)));
            changed.add((gone.len() - before) as u64)?;
        }
        Ok(gone)
    }

    /// The newest commit both branches contain (see the module docs).
    async fn merge_base(&self, source: &GraphCommit, target: &GraphCommit) -> Result<GraphCommit> {
        let (from, into) = (source.branch.as_str(), target.branch.as_str());
        // Each candidate is a commit of one branch that both heads contain, named by a
        // head: (its branch's live head, seq, commit id).
        let mut named: Vec<(&GraphCommit, u64, &str)> = Vec::new();
        for (head, other) in [(target, source), (source, target)] {
            if let Some(merged) = head
                .merged_from
                .iter()
                .find(|merged| merged.branch == other.branch)
            {
                named.push((other, merged.seq, &merged.commit_id));
            }
            if let Some(fork) = head
                .fork
                .as_ref()
                .filter(|fork| fork.branch == other.branch)
            {
                named.push((other, fork.seq, &fork.commit_id));
            }
        }
        let mut candidates = Vec::with_capacity(named.len());
        for (live, seq, commit_id) in named {
            // The base is read from the log itself: cleanup keeps a merge base's
            // tables even when the branch's retention no longer lists the commit.
            let Some(commit) = self.graph().log(&live.branch)?.read(seq).await? else {
                continue;
            };
            // Only a commit of the branch's current life: a deleted life's commits
            // stay in the log under their ids, but the live branch holds none of them.
            if commit.commit_id != commit_id || !live.continues_life_of(&commit) || seq > live.seq {
                continue;
            }
            candidates.push(commit);
        }
        if candidates.is_empty() {
            return Err(merge_input(format!(
                "{from} and {into} have no merge base: neither was created from the other in its current life, nor merged into it"
            )));
        }
        choose_base(candidates).ok_or_else(|| {
            merge_input(format!(
                "{from} and {into} have no single merge base: each merged the other while the other merged it (criss-cross), and neither merge contains the other. Create a new branch from {into}'s head, make {from}'s remaining changes there, and merge that"
            ))
        })
    }

    /// `target`'s record of merges with `merged` in its branch's place. Past
    /// [`MERGED_FROM_MAX`] the entries of branches whose life they name has ended go;
    /// when every one is live the merge is refused: dropping one would make the next
    /// merge from that branch start from an older base.
    async fn merged_from_after(
        &self,
        target: &GraphCommit,
        merged: MergedFrom,
    ) -> Result<Vec<MergedFrom>> {
        let mut after: Vec<MergedFrom> = target
            .merged_from
            .iter()
            .filter(|from| from.branch != merged.branch)
            .cloned()
            .collect();
        if after.len() >= MERGED_FROM_MAX {
            let mut live = Vec::with_capacity(after.len());
            for from in after {
                let log = self.graph().log(&from.branch)?;
                let (head, recorded) = tokio::try_join!(log.newest(), log.read(from.seq))?;
                let alive = head.zip(recorded).is_some_and(|(head, recorded)| {
                    recorded.commit_id == from.commit_id && head.continues_life_of(&recorded)
                });
                if alive {
                    live.push(from);
                }
            }
            after = live;
        }
        if after.len() >= MERGED_FROM_MAX {
            return Err(merge_input(format!(
                "{} remembers merges from {MERGED_FROM_MAX} live branches, the most a commit holds: delete branches that are merged, then merge {}",
                target.branch, merged.branch
            )));
        }
        after.push(merged);
        Ok(after)
    }

    /// The edges the merged result would keep whose endpoint it removes.
    async fn dangling_edges(
        &self,
        changed: &mut Changed,
        catalog: &Catalog,
        (source, target): (&GraphCommit, &GraphCommit),
        tables: &[TableMerge],
        rows: &[RowMergePlan],
        removed: &HashMap<String, Removed>,
    ) -> Result<Vec<MergeConflict>> {
        let empty = Removed::default();
        let mut conflicts = Vec::new();
        for edge in catalog.types() {
            let DeclKind::Edge { from, to } = edge.kind() else {
                continue;
            };
            let Some(table) = tables.iter().find(|table| table.type_name == edge.name()) else {
                continue;
            };
            let (near, far) = (
                removed.get(from).unwrap_or(&empty),
                removed.get(to).unwrap_or(&empty),
            );
            let row_merge = rows.iter().find(|plan| plan.table_id == table.table_id);
            let mut found: BTreeSet<String> = BTreeSet::new();
            // The target's edges the result keeps: all of them unless the source's
            // table is taken.
            if table.action != TableMergeAction::FastForward
                && (!near.from_target.is_empty() || !far.from_target.is_empty())
            {
                let dropped: BTreeSet<&str> = row_merge
                    .map(|plan| plan.delete.iter().map(String::as_str).collect())
                    .unwrap_or_default();
                for id in self
                    .edges_naming(
                        changed,
                        target,
                        edge,
                        (&near.from_target, &far.from_target),
                        catalog,
                    )
                    .await?
                {
                    if !dropped.contains(id.as_str()) {
                        found.insert(id);
                    }
                }
            }
            // The source's edges the result takes.
            match (table.action, row_merge) {
                (TableMergeAction::FastForward, _)
                    if !near.from_source.is_empty() || !far.from_source.is_empty() =>
                {
                    found.extend(
                        self.edges_naming(
                            changed,
                            source,
                            edge,
                            (&near.from_source, &far.from_source),
                            catalog,
                        )
                        .await?,
                    );
                }
                (TableMergeAction::RowMerge, Some(plan)) => {
                    let gone = |set: &BTreeSet<String>, key: &str| set.contains(key);
                    for batch in &plan.taken {
                        let (ids, sources, destinations) = (
                            column(batch, EDGE_ID_COLUMN)?,
                            column(batch, EDGE_SRC_COLUMN)?,
                            column(batch, EDGE_DST_COLUMN)?,
                        );
                        for row in 0..batch.num_rows() {
                            let src = rows::render_array_key(sources.as_ref(), row);
                            let dst = rows::render_array_key(destinations.as_ref(), row);
                            let near_gone =
                                gone(&near.from_source, &src) || gone(&near.from_target, &src);
                            let far_gone =
                                gone(&far.from_source, &dst) || gone(&far.from_target, &dst);
                            if near_gone || far_gone {
                                found.insert(rows::render_array_key(ids.as_ref(), row));
                            }
                        }
                    }
                }
                _ => {}
            }
            conflicts.extend(found.into_iter().map(|key| MergeConflict {
                type_name: edge.name().to_string(),
                key,
                kind: MergeConflictKind::DanglingEdge,
            }));
        }
        Ok(conflicts)
    }

    /// The rendered ids of the edges of `edge` at `commit` whose source is among
    /// `sources` or whose destination is among `destinations` (rendered node keys).
    async fn edges_naming(
        &self,
        changed: &mut Changed,
        commit: &GraphCommit,
        edge: &TypeDef,
        (sources, destinations): (&BTreeSet<String>, &BTreeSet<String>),
        catalog: &Catalog,
    ) -> Result<Vec<String>> {
        let DeclKind::Edge { from, to } = edge.kind() else {
            return Ok(Vec::new());
        };
        let pin = commit.require_pin_of_type(edge.name())?;
        let table = open_pinned(self.graph().root(), commit, pin).await?;
        let mut ids = Vec::new();
        for (column, keys, node) in [
            (EDGE_SRC_COLUMN, sources, from),
            (EDGE_DST_COLUMN, destinations, to),
        ] {
            let key_type = catalog.require(node)?.key_type();
            let keys: Vec<&String> = keys.iter().collect();
            for chunk in keys.chunks(KEY_LOOKUP_KEYS_MAX) {
                let filter =
                    rows::key_in_filter(column, chunk.iter().map(|key| key.as_str()), key_type);
                let before = ids.len();
                for row in collect(&table, Some(&filter), &[EDGE_ID_COLUMN], None).await? {
                    if let Some(id) = row.get(EDGE_ID_COLUMN) {
                        ids.push(rows::render_key(id));
                    }
                }
                // A conflict the merge reports is a row it holds.
                changed.add((ids.len() - before) as u64)?;
            }
        }
        Ok(ids)
    }
}

/// Of commits both branches contain, the one that contains every other; `None` when
/// none does (criss-cross merges). Never by time: writers' clocks may disagree.
fn choose_base(candidates: Vec<GraphCommit>) -> Option<GraphCommit> {
    let contains = |newer: &GraphCommit, older: &GraphCommit| {
        if newer.branch == older.branch {
            return newer.seq >= older.seq;
        }
        let merged = newer
            .merged_from
            .iter()
            .any(|merged| merged.branch == older.branch && merged.seq >= older.seq);
        let forked = newer
            .fork
            .as_ref()
            .is_some_and(|fork| fork.branch == older.branch && fork.seq >= older.seq);
        merged || forked
    };
    candidates
        .iter()
        .find(|base| candidates.iter().all(|other| contains(base, other)))
        .cloned()
}

fn merge_input(message: String) -> OmniError {
    OmniError::bad_input(InputLocation::in_source("merge"), message)
}

/// A converter to Arrow's row format for every column of `schema`.
fn row_converter(
    schema: &omnigraph_core::arrow_schema::Schema,
) -> Result<arrow::row::RowConverter> {
    let fields = schema
        .fields()
        .iter()
        .map(|field| arrow::row::SortField::new(field.data_type().clone()))
        .collect();
    arrow::row::RowConverter::new(fields)
        .map_err(|error| OmniError::internal(format!("compare the rows of a merge: {error}")))
}

/// The rows of `table` whose keys fall in `pass`, by rendered key, each with the
/// columns of `schema` (a column the version lacks reads null, as a property added
/// later reads on rows written before).
async fn read_version(
    table: &Dataset,
    type_def: &TypeDef,
    (schema, converter, conform): (
        &omnigraph_core::arrow_schema::SchemaRef,
        &arrow::row::RowConverter,
        Conform,
    ),
    (pass, rows_expected): (Pass, usize),
) -> Result<ReadVersion> {
    let mut batches = scan(table, &[]).await?;
    let mut read = ReadVersion {
        rows: Vec::new(),
        keys: KeyPlaces::with_capacity_and_hasher(rows_expected, Default::default()),
        columns: Vec::new(),
    };
    while let Some(batch) = batches.try_next().await.map_err(scan_failed)? {
        let keys = column(&batch, type_def.key_column())?;
        let mut held = Vec::with_capacity(batch.num_rows());
        let mut rows_held = Vec::with_capacity(batch.num_rows());
        for row in 0..batch.num_rows() {
            let key = rows::render_array_key(keys.as_ref(), row);
            if pass.holds(&key) {
                held.push(key);
                rows_held.push(row as u32);
            }
        }
        if held.is_empty() {
            continue;
        }
        let batch = if held.len() == batch.num_rows() {
            batch
        } else {
            arrow::compute::take_record_batch(&batch, &UInt32Array::from(rows_held))
                .map_err(|error| OmniError::internal(format!("read a pass of a merge: {error}")))?
        };
        let columns = conform(&batch, schema)?;
        let rows = converter.convert_columns(&columns).map_err(|error| {
            OmniError::internal(format!("compare the rows of a merge: {error}"))
        })?;
        let index = read.columns.len();
        for (row, key) in held.into_iter().enumerate() {
            read.keys.insert(key, (index, row));
        }
        read.rows.push(rows);
        read.columns.push(columns);
    }
    Ok(read)
}

/// How a version's columns are put in the target table's order.
type Conform = fn(&RecordBatch, &omnigraph_core::arrow_schema::Schema) -> Result<Vec<ArrayRef>>;

/// The base's columns in `schema`'s order, by name: a missing one null (so is one of
/// another type: dropped and added again, it is a new column), an extra one dropped.
/// Columns only, not a batch: a column the base lacks is null where the target may
/// require it, and comparing rows needs no schema.
fn base_columns(
    batch: &RecordBatch,
    schema: &omnigraph_core::arrow_schema::Schema,
) -> Result<Vec<ArrayRef>> {
    Ok(schema
        .fields()
        .iter()
        .map(|field| match batch.column_by_name(field.name()) {
            Some(column) if column.data_type() == field.data_type() => column.clone(),
            _ => omnigraph_core::arrow_array::new_null_array(field.data_type(), batch.num_rows()),
        })
        .collect())
}

/// A side's columns in `schema`'s order, by name: both sides have the merged schema's
/// columns, so a missing one, or one of another type, is an internal error (never
/// nulls written into the result).
fn side_columns(
    batch: &RecordBatch,
    schema: &omnigraph_core::arrow_schema::Schema,
) -> Result<Vec<ArrayRef>> {
    schema
        .fields()
        .iter()
        .map(|field| match batch.column_by_name(field.name()) {
            Some(column) if column.data_type() == field.data_type() => Ok(column.clone()),
            _ => Err(OmniError::internal(format!(
                "a version merged lacks column {} as {}",
                field.name(),
                field.data_type()
            ))),
        })
        .collect()
}

/// The rendered keys of the rows of `table` whose keys fall in `pass`.
async fn key_set(table: &Dataset, type_def: &TypeDef, pass: Pass) -> Result<KeySet> {
    let mut batches = scan(table, &[type_def.key_column()]).await?;
    let mut keys = KeySet::default();
    while let Some(batch) = batches.try_next().await.map_err(scan_failed)? {
        let column = batch.column(0);
        for row in 0..batch.num_rows() {
            let key = rows::render_array_key(column.as_ref(), row);
            if pass.holds(&key) {
                keys.insert(key);
            }
        }
    }
    Ok(keys)
}

fn scan_failed(error: omnigraph_core::lance::Error) -> OmniError {
    OmniError::from_lance("read a table to merge", error)
}

/// The rows of `table`, its `columns` (all when empty), batch by batch.
async fn scan(
    table: &Dataset,
    columns: &[&str],
) -> Result<omnigraph_core::lance::dataset::scanner::DatasetRecordBatchStream> {
    let mut scanner = table.scan();
    if !columns.is_empty() {
        scanner.project(columns).map_err(scan_failed)?;
    }
    scanner.try_into_stream().await.map_err(scan_failed)
}

fn column(batch: &RecordBatch, name: &str) -> Result<ArrayRef> {
    batch
        .column_by_name(name)
        .cloned()
        .ok_or_else(|| OmniError::internal(format!("a row read to merge has no column {name}")))
}

/// The three-way merge by key of the rows of one pass (`versions`: base, source,
/// target), added to `merge`, `conflicts` and `removed`.
fn merge_rows(
    type_def: &TypeDef,
    schema: &omnigraph_core::arrow_schema::SchemaRef,
    versions: [&ReadVersion; 3],
    merge: &mut RowMergePlan,
    conflicts: &mut Vec<MergeConflict>,
    removed: &mut Removed,
) -> Result<()> {
    let [base, source, target] = versions;
    // Every key once: the base's, then the source's new ones, then the target's.
    let keys = base
        .keys
        .keys()
        .chain(
            source
                .keys
                .keys()
                .filter(|key| !base.keys.contains_key(*key)),
        )
        .chain(
            target
                .keys
                .keys()
                .filter(|key| !base.keys.contains_key(*key) && !source.keys.contains_key(*key)),
        );
    let mut take: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
    for key in keys {
        let (b, s, t) = (
            base.keys.get(key).map(|at| base.row(*at)),
            source.keys.get(key).map(|at| source.row(*at)),
            target.keys.get(key).map(|at| target.row(*at)),
        );
        if s == t || s == b {
            // The same on both sides, or changed on the target only.
            if s.is_some() && t.is_none() {
                removed.from_source.insert(key.clone());
            }
            continue;
        }
        if t == b {
            // Changed on the source only: the source's version is taken.
            match source.keys.get(key) {
                Some((batch, row)) => {
                    if t.is_some() {
                        merge.delete.push(key.clone());
                    }
                    take.entry(*batch).or_default().push(*row as u32);
                }
                None => {
                    merge.delete.push(key.clone());
                    merge.deleted_by_source += 1;
                    removed.from_target.insert(key.clone());
                }
            }
            continue;
        }
        conflicts.push(MergeConflict {
            type_name: type_def.name().to_string(),
            key: key.clone(),
            kind: if s.is_none() || t.is_none() {
                MergeConflictKind::DeletedAndChanged
            } else {
                MergeConflictKind::ChangedOnBoth
            },
        });
    }
    let failed = |error: arrow::error::ArrowError| {
        OmniError::internal(format!("take the source's rows of a merge: {error}"))
    };
    for (batch, rows) in take {
        let indices = UInt32Array::from(rows);
        let columns = source.columns[batch]
            .iter()
            .map(|column| arrow::compute::take(column.as_ref(), &indices, None))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(failed)?;
        merge
            .taken
            .push(RecordBatch::try_new(schema.clone(), columns).map_err(failed)?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commit::ForkPoint;

    /// A commit of `branch` at `seq` that pins nothing: its id is the branch and seq,
    /// its parent the one before.
    fn commit(branch: &str, seq: u64) -> GraphCommit {
        GraphCommit {
            seq,
            commit_id: format!("{branch}{seq}"),
            parent_commit_id: (seq > 0).then(|| format!("{branch}{}", seq - 1)),
            branch: branch.into(),
            created_at: 0,
            actor: "test".into(),
            operation: crate::commit::CommitOperation {
                kind: "test".into(),
                summary: String::new(),
            },
            schema: "0".repeat(64),
            pins: Vec::new(),
            retention: None,
            fork: None,
            deleted: false,
            merged_from: Vec::new(),
            reservations: Vec::new(),
            idempotency_keys: Vec::new(),
            idempotency_fingerprints: Vec::new(),
        }
    }

    fn merged(mut commit: GraphCommit, branch: &str, seq: u64) -> GraphCommit {
        commit.merged_from.push(MergedFrom {
            branch: branch.into(),
            seq,
            commit_id: format!("{branch}{seq}"),
        });
        commit
    }

    #[test]
    fn the_base_is_the_candidate_that_contains_the_others_whatever_the_clocks_say() {
        // feature forked from main at 5 and was merged into main at feature 3: feature
        // 3 contains main 5 (its fork), even when its clock ran behind.
        let mut feature3 = commit("feature", 3);
        feature3.fork = Some(ForkPoint {
            branch: "main".into(),
            seq: 5,
            commit_id: "main5".into(),
            created_at: 0,
        });
        let mut main5 = commit("main", 5);
        main5.created_at = 1_000;
        let base = choose_base(vec![main5.clone(), feature3.clone()]).unwrap();
        assert_eq!((base.branch.as_str(), base.seq), ("feature", 3));
        // Of two commits of one branch, the later.
        let base = choose_base(vec![commit("main", 2), commit("main", 7)]).unwrap();
        assert_eq!(base.seq, 7);
    }

    #[test]
    fn every_key_falls_in_exactly_one_pass_and_every_pass_holds_some() {
        let count = 4;
        let mut held = [0usize; 4];
        for key in (0..400).map(|index| format!("\"k{index}\"")) {
            let passes: Vec<u64> = (0..count)
                .filter(|index| {
                    Pass {
                        index: *index,
                        count,
                    }
                    .holds(&key)
                })
                .collect();
            assert_eq!(passes.len(), 1, "{key} in passes {passes:?}");
            held[passes[0] as usize] += 1;
        }
        assert!(held.iter().all(|keys| *keys >= 50), "{held:?}");
        assert!(Pass { index: 0, count: 1 }.holds("anything"));
    }

    #[test]
    fn criss_cross_merges_have_no_single_base() {
        // main merged feature 1 while feature merged main 1: neither contains the other.
        let main1 = merged(commit("main", 1), "feature", 0);
        let feature1 = merged(commit("feature", 1), "main", 0);
        assert!(choose_base(vec![main1.clone(), feature1.clone()]).is_none());
        // Of two candidates, one that contains the other is the base.
        let feature2 = merged(commit("feature", 2), "main", 1);
        let base = choose_base(vec![main1, feature2]).unwrap();
        assert_eq!((base.branch.as_str(), base.seq), ("feature", 2));
    }
}
