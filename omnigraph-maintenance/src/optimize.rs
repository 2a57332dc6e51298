//! Optimize as a detached writer (DESIGN §7).
//!
//! A table is a unit. For each, on the pinned version at the captured head: stage the
//! compaction (one detached Rewrite), then fold every index whose coverage lags the new
//! layout (rebuilt whole under its name; a vector index keeps its partition count;
//! full-text indexes are not folded and are reported), then build declared indexes
//! that are missing. The chain tip is published with an exact CAS on the pin the table
//! was planned from: if only other tables moved it lands on the new head; if this
//! table's pin moved, the unit fails with `ReadSetChanged { member: "pin:<table>" }` and
//! the next run re-plans. A writer is never blocked: nothing is held while staging.

use omnigraph_core::adapter::{self, CompactionBudget, IndexBuildKind};
use omnigraph_core::lance::index::DatasetIndexExt;
use omnigraph_core::schema::IndexKind;
use omnigraph_core::{Evidence, OmniError, Result};
use omnigraph_publish::indexes::{PendingIndex, built_partitions, stage_create_indices};
use omnigraph_publish::{CommitOperation, GraphCommit, Omnigraph, Staging};

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
    /// Declared indexes built for the first time.
    pub indexes_built: Vec<String>,
    /// Indexes that could not be built or folded, with why.
    pub pending_indexes: Vec<PendingIndex>,
    /// Whether the unit published.
    pub published: bool,
    /// The commit it published.
    pub commit_seq: Option<u64>,
    /// Why the unit did not publish, when it had work (a moved pin, a failure).
    pub error: Option<String>,
}

/// What an optimize run did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct OptimizeReport {
    /// One entry per table, in schema order.
    pub tables: Vec<TableOptimize>,
}

impl OptimizeReport {
    /// The entry of the table holding `type_key`.
    pub fn table(&self, type_key: &str) -> Option<&TableOptimize> {
        self.tables.iter().find(|table| table.type_key == type_key)
    }
}

/// One table's staged work, ready to publish.
pub struct PlannedUnit {
    staging: Staging,
    report: TableOptimize,
    planned_version: u64,
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

/// Optimizes every table of the graph, one unit at a time.
pub async fn optimize(graph: &Omnigraph, budget: &CompactionBudget) -> Result<OptimizeReport> {
    let head = graph.head().await?;
    let catalog = graph.catalog_at(&head).await?;
    let mut report = OptimizeReport::default();
    for type_def in catalog.types() {
        let unit = plan_unit(graph, type_def.name(), budget).await?;
        report.tables.push(publish_unit(graph, unit).await?);
    }
    Ok(report)
}

/// Plans and stages the unit of `type_name` on the current head.
pub async fn plan_unit(
    graph: &Omnigraph,
    type_name: &str,
    budget: &CompactionBudget,
) -> Result<PlannedUnit> {
    let base = graph.head().await?;
    let catalog = graph.catalog_at(&base).await?;
    let type_def = catalog.require(type_name)?;
    let pin = base.require_pin_of_type(type_name)?.clone();
    let snapshot = graph.graph().snapshot_of(base.clone());
    let table = snapshot.table(type_name).await?;
    let mut staging = Staging::new(graph.graph().root().clone(), base.clone());
    staging.seed(&pin.table_id, table.clone())?;
    let fragments_before = table.manifest().fragments.len();
    let built_before = table
        .load_indices()
        .await
        .map_err(|error| OmniError::from_lance("list indexes", error))?;

    // 1. Compaction.
    staging
        .stage_optional(&pin.table_id, |tip, origin| async move {
            adapter::stage_compaction(&tip, budget, &origin).await
        })
        .await?;

    // 2. Folds: every built index whose coverage lags the (rewritten) layout.
    let mut indexes_folded = Vec::new();
    let mut pending_indexes = Vec::new();
    for declared in type_def.declared_indexes() {
        let Some(index) = built_before
            .iter()
            .find(|index| index.name == declared.name)
        else {
            continue;
        };
        let tip = staging.chain(&pin.table_id).await?.tip().clone();
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
        let kind = match declared.kind {
            IndexKind::BTree => IndexBuildKind::BTree,
            IndexKind::Vector => match built_partitions(&table, &declared.name).await? {
                Some(partitions) => IndexBuildKind::IvfFlat { partitions },
                None => {
                    pending_indexes.push(PendingIndex {
                        type_name: type_name.to_string(),
                        property: declared.column.clone(),
                        index: declared.name.clone(),
                        reason: "the built vector index reports no partition count; rebuild it"
                            .into(),
                    });
                    continue;
                }
            },
            IndexKind::FullText => {
                pending_indexes.push(PendingIndex {
                    type_name: type_name.to_string(),
                    property: declared.column.clone(),
                    index: declared.name.clone(),
                    reason: "full-text indexes are not folded; new rows are searched once the index is rebuilt (Omnigraph::rebuild_index)".into(),
                });
                continue;
            }
        };
        staging
            .stage_index(&pin.table_id, declared, kind, true)
            .await?;
        indexes_folded.push(declared.name.clone());
    }

    // 3. Deferred builds of declared but unbuilt indexes.
    let (built, pending) =
        stage_create_indices(graph, &mut staging, std::slice::from_ref(type_def)).await?;
    pending_indexes.extend(pending);
    let tip = staging.chain(&pin.table_id).await?.tip().clone();
    let report = TableOptimize {
        type_key: type_name.to_string(),
        table_id: pin.table_id.clone(),
        fragments_before,
        fragments_after: tip.manifest().fragments.len(),
        rows: pin.row_count,
        indexes_folded,
        indexes_built: built.into_iter().map(|(_, index)| index).collect(),
        pending_indexes,
        published: false,
        commit_seq: None,
        error: None,
    };
    Ok(PlannedUnit {
        staging,
        report,
        planned_version: pin.version,
    })
}

/// Publishes a planned unit with an exact CAS on the pin it was planned from. A pin
/// that moved is reported on the unit (nothing published); other failures are errors
/// with `Unpublished` evidence.
pub async fn publish_unit(graph: &Omnigraph, unit: PlannedUnit) -> Result<TableOptimize> {
    let PlannedUnit {
        staging,
        mut report,
        planned_version,
    } = unit;
    if !staging.has_staged() {
        return Ok(report);
    }
    let read_set =
        omnigraph_publish::ReadSet::staged(vec![(report.table_id.clone(), planned_version)]);
    let operation = CommitOperation {
        kind: "optimize".into(),
        summary: format!(
            "{}: {} -> {} fragments, {} folded, {} built",
            report.type_key,
            report.fragments_before,
            report.fragments_after,
            report.indexes_folded.len(),
            report.indexes_built.len()
        ),
    };
    // Published through the handle, which remembers the new head: nothing is read
    // after the commit lands, so a landed unit is never reported as failed.
    match graph.publish_staged(&staging, read_set, operation).await {
        Ok(commit) => {
            mark_published(&mut report, &commit);
            Ok(report)
        }
        Err(OmniError::ReadSetChanged {
            member,
            expected,
            actual,
            ..
        }) if member.is_table() => {
            report.error = Some(format!(
                "ReadSetChanged {{ member: {member}, expected: {expected}, actual: {actual} }}"
            ));
            Ok(report)
        }
        Err(other) => Err(other.with_evidence(Evidence::Unpublished)),
    }
}

fn mark_published(report: &mut TableOptimize, commit: &GraphCommit) {
    report.published = true;
    report.commit_seq = Some(commit.seq);
}
