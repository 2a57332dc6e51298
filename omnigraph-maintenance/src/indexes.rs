//! The index builds maintenance runs in the lane: every declared index a table lacks,
//! and the rebuild of one index whole.
//!
//! `build_indexes` stages, for every declared index a table lacks at its pin, the build
//! as a detached link (BTree for keys, `@index` and edge endpoints; IVF for
//! `@index(vector)`; inverted for `@index(fts)`) and publishes them all in one commit.
//! Whether a vector column can be trained is decided here, not by Lance (which builds
//! an untrained PQ index on too few rows and fails IVF_FLAT on all-null vectors): an
//! untrainable column is reported under `pending_indexes` with its reason.

use crate::limits::{IVF_PARTITIONS_MAX, VECTOR_TRAINING_ROWS_MIN};
use omnigraph_core::adapter::IndexBuildKind;
use omnigraph_core::adapter::{built_partitions, is_built};
use omnigraph_core::lance::Dataset;
use omnigraph_core::lance::index::DatasetIndexExt;
use omnigraph_core::schema::{DeclaredIndex, IndexKind, TypeDef};
use omnigraph_core::{OmniError, Result};
use omnigraph_publish::{BranchWriter, CommitOperation, GraphCommit, Staging};
use std::sync::Arc;

/// Vectors per IVF partition aimed for when a first build chooses the partition count.
pub(crate) const VECTORS_PER_PARTITION: u64 = 1_000;

/// A declared index that could not be built yet, and why.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PendingIndex {
    /// The type.
    pub type_name: String,
    /// The indexed property.
    pub property: String,
    /// The index name.
    pub index: String,
    /// Why it is pending.
    pub reason: String,
}

/// What an index build run did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexBuildReport {
    /// The commit that made the new indexes visible; `None` when nothing was built.
    pub commit: Option<GraphCommit>,
    /// `(type, index)` of every index built.
    pub built: Vec<(String, String)>,
    /// Declared indexes that cannot be built yet.
    pub pending_indexes: Vec<PendingIndex>,
}

/// How far an index build run has gone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexBuildProgress {
    /// Tables whose missing indexes are all staged.
    pub tables_done: u64,
    /// Tables that miss at least one declared index.
    pub tables_total: u64,
    /// Indexes staged (or found untrainable) so far.
    pub indexes_done: u64,
    /// Declared indexes missing at the base.
    pub indexes_total: u64,
}

/// Index builds staged on a captured head, ready to publish.
#[derive(Debug)]
pub struct PreparedIndexBuild {
    staging: Staging,
    built: Vec<(String, String)>,
    pending_indexes: Vec<PendingIndex>,
    operation: CommitOperation,
}

impl PreparedIndexBuild {
    /// What dropping the prepared build leaves behind.
    pub fn evidence(&self) -> omnigraph_core::Evidence {
        self.staging.evidence()
    }

    /// Publishes the staged builds in one commit (nothing when none was staged).
    pub async fn publish(self, writer: &dyn BranchWriter) -> Result<IndexBuildReport> {
        let PreparedIndexBuild {
            staging,
            built,
            pending_indexes,
            operation,
        } = self;
        if built.is_empty() {
            return Ok(IndexBuildReport {
                commit: None,
                built,
                pending_indexes,
            });
        }
        let commit = writer
            .publish_staged(&staging, staging.planned_pins(), operation)
            .await?;
        Ok(IndexBuildReport {
            commit: Some(commit),
            built,
            pending_indexes,
        })
    }
}

/// Stages the build of every declared index that the tables lack at the head, on a
/// staging that `setup` configures first (the maintenance runtime, the full-text
/// budget), reporting to `progress` as each index is staged; nothing is visible
/// until the prepared build is published. Maintenance runs it in the root's lane
/// (`omnigraph_maintenance::Maintenance::build_indexes`), cancellable.
pub async fn prepare_build_indexes_with(
    writer: &dyn BranchWriter,
    setup: impl FnOnce(&mut Staging),
    mut progress: impl FnMut(&IndexBuildProgress) + Send,
) -> Result<PreparedIndexBuild> {
    let base = writer.head().await?;
    let catalog = writer.catalog_at(&base).await?;
    let mut staging = writer.staging_on(&base);
    setup(&mut staging);
    let staged =
        stage_create_indices_reporting(writer, &mut staging, catalog.types(), &mut progress).await;
    let (built, pending_indexes) =
        staged.map_err(|error| error.with_evidence(staging.evidence()))?;
    let operation = CommitOperation {
        kind: "build_indexes".into(),
        summary: format!("{} indexes", built.len()),
    };
    Ok(PreparedIndexBuild {
        staging,
        built,
        pending_indexes,
        operation,
    })
}

/// Stages the rebuild of one built index whole under its name (a vector index keeps
/// its partition count; a full-text index, which optimize does not fold, covers
/// every row again), on a staging that `setup` configures first. Maintenance runs
/// it in the root's lane (`omnigraph_maintenance::Maintenance::rebuild_index`).
pub async fn prepare_rebuild_index_with(
    writer: &dyn BranchWriter,
    type_name: &str,
    index_name: &str,
    setup: impl FnOnce(&mut Staging),
) -> Result<PreparedIndexBuild> {
    let base = writer.head().await?;
    let catalog = writer.catalog_at(&base).await?;
    let type_def = catalog.require(type_name)?;
    let declared = type_def
        .declared_indexes()
        .iter()
        .find(|index| index.name == index_name)
        .ok_or_else(|| OmniError::not_found(format!("index {index_name} declared on {type_name}")))?
        .clone();
    let pin = base.require_pin_of_type(type_name)?.clone();
    let mut staging = writer.staging_on(&base);
    setup(&mut staging);
    staging.seed(&pin.table_id, writer.table_at(&base, &pin.table_id).await?)?;
    let tip = staging.chain(&pin.table_id).await?.tip().clone();
    if !is_built(&tip, index_name).await? {
        return Err(OmniError::not_found(format!(
            "built index {index_name} on {type_name} (`omnigraph build-indexes` builds it)"
        )));
    }
    let kind = match declared.kind {
        IndexKind::Vector => {
            let partitions = built_partitions(&tip, index_name).await?.ok_or_else(|| {
                OmniError::not_found(format!("built index {index_name} on {type_name}"))
            })?;
            IndexBuildKind::IvfFlat { partitions }
        }
        IndexKind::BTree => IndexBuildKind::BTree,
        IndexKind::FullText => IndexBuildKind::FullText,
    };
    let staged = staging
        .stage_index_rebuild(&pin.table_id, &declared, kind)
        .await
        .map(|_| ());
    staged.map_err(|error| error.with_evidence(staging.evidence()))?;
    Ok(PreparedIndexBuild {
        staging,
        built: vec![(type_name.to_string(), index_name.to_string())],
        pending_indexes: Vec::new(),
        operation: CommitOperation {
            kind: "rebuild_index".into(),
            summary: format!("{type_name}.{index_name}"),
        },
    })
}

/// Stages on `staging` the build of every declared index of `types` that is missing at
/// the base; returns what was staged and what must wait.
pub async fn stage_create_indices(
    writer: &dyn BranchWriter,
    staging: &mut Staging,
    types: &[TypeDef],
) -> Result<(Vec<(String, String)>, Vec<PendingIndex>)> {
    stage_create_indices_reporting(writer, staging, types, &mut |_| {}).await
}

/// [`stage_create_indices`], reporting to `progress`: once every table's missing
/// indexes are known, then after each index.
async fn stage_create_indices_reporting(
    writer: &dyn BranchWriter,
    staging: &mut Staging,
    types: &[TypeDef],
    progress: &mut (dyn FnMut(&IndexBuildProgress) + Send),
) -> Result<(Vec<(String, String)>, Vec<PendingIndex>)> {
    let base = staging.base().clone();
    // First what is missing everywhere, so progress has its totals.
    let mut missing = Vec::new();
    for type_def in types {
        let pin = base.require_pin_of_type(type_def.name())?.clone();
        let table = writer.table_at(&base, &pin.table_id).await?;
        let existing = table
            .load_indices()
            .await
            .map_err(|error| OmniError::from_lance("list indexes", error))?;
        let declared: Vec<&DeclaredIndex> = type_def
            .declared_indexes()
            .iter()
            .filter(|declared| !existing.iter().any(|index| index.name == declared.name))
            .collect();
        if !declared.is_empty() {
            missing.push((type_def, pin, table, declared));
        }
    }
    let mut figures = IndexBuildProgress {
        tables_done: 0,
        tables_total: missing.len() as u64,
        indexes_done: 0,
        indexes_total: missing
            .iter()
            .map(|(.., declared)| declared.len() as u64)
            .sum(),
    };
    progress(&figures);
    let mut built = Vec::new();
    let mut pending = Vec::new();
    for (type_def, pin, table, declared_missing) in missing {
        for declared in declared_missing {
            match plan_build(&table, pin.row_count, declared).await? {
                Ok(kind) => {
                    if !staging.has_chain(&pin.table_id) {
                        staging.seed(&pin.table_id, table.clone())?;
                    }
                    staging.stage_index(&pin.table_id, declared, kind).await?;
                    built.push((type_def.name().to_string(), declared.name.clone()));
                }
                Err(reason) => pending.push(PendingIndex {
                    type_name: type_def.name().to_string(),
                    property: declared.column.clone(),
                    index: declared.name.clone(),
                    reason,
                }),
            }
            figures.indexes_done += 1;
            progress(&figures);
        }
        figures.tables_done += 1;
        progress(&figures);
    }
    Ok((built, pending))
}

/// What to build for `declared`, or why it must wait.
async fn plan_build(
    table: &Arc<Dataset>,
    row_count: u64,
    declared: &DeclaredIndex,
) -> Result<std::result::Result<IndexBuildKind, String>> {
    if row_count == 0 {
        return Ok(Err("the table has no rows yet".into()));
    }
    Ok(Ok(match declared.kind {
        IndexKind::BTree => IndexBuildKind::BTree,
        IndexKind::FullText => IndexBuildKind::FullText,
        IndexKind::Vector => match vector_training_rows(table, &declared.column).await? {
            Ok(vectors) => IndexBuildKind::IvfFlat {
                partitions: first_partition_count(vectors),
            },
            Err(reason) => return Ok(Err(reason)),
        },
    }))
}

/// The non-null vectors of `column` an IVF index would train on, or why there are too
/// few. A first build and a fold judge trainability the same way.
pub async fn vector_training_rows(
    table: &Dataset,
    column: &str,
) -> Result<std::result::Result<u64, String>> {
    let vectors = table
        .count_rows(Some(format!("`{column}` IS NOT NULL")))
        .await
        .map_err(|error| OmniError::from_lance("count vectors", error))? as u64;
    if vectors == 0 {
        return Ok(Err("no non-null vectors to train on".into()));
    }
    if vectors < VECTOR_TRAINING_ROWS_MIN {
        return Ok(Err(format!(
            "{vectors} non-null vectors; an IVF index trains on at least {VECTOR_TRAINING_ROWS_MIN}"
        )));
    }
    Ok(Ok(vectors))
}

/// The partition count a first build chooses for `vectors` training vectors.
pub fn first_partition_count(vectors: u64) -> usize {
    (vectors / VECTORS_PER_PARTITION).clamp(1, IVF_PARTITIONS_MAX) as usize
}
