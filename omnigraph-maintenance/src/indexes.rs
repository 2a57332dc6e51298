//! The index builds maintenance runs in the lane: every declared index a table lacks,
//! and the rebuild of one index whole.
//!
//! `build_indexes` stages, for every declared index a table lacks at its pin, the build
//! as a detached link (BTree for keys, `@index` and edge endpoints; IVF for
//! `@index(vector)`; inverted for `@index(fts)`) and publishes them all in one commit.
//! Whether a vector column can be trained is decided here, not by Lance (which builds
//! an untrained PQ index on too few rows and fails IVF_FLAT on all-null vectors): an
//! untrainable column is reported under `pending_indexes` with its reason.

use crate::limits::{
    FLAT_VECTOR_BYTES_MAX, IVF_PARTITIONS_MAX, PQ_DIMENSION_MIN, VECTOR_TRAINING_ROWS_MIN,
};
use omnigraph_core::adapter::{IndexBuildKind, Quantisation};
use omnigraph_core::adapter::{built_vector_index, is_built};
use omnigraph_core::lance::Dataset;
use omnigraph_core::lance::index::DatasetIndexExt;
use omnigraph_core::schema::{DeclaredIndex, IndexKind, TypeDef};
use omnigraph_core::{OmniError, Result};
use omnigraph_publish::{BranchWriter, CommitOperation, GraphCommit, Staging};
use std::sync::Arc;

/// Dimensions per PQ sub-vector.
pub const PQ_DIMENSIONS_PER_SUB_VECTOR: u32 = 16;

/// A fold retrains the index with a fresh partition count once the count its vectors
/// now call for is at least this many times the built one; below it, a fold keeps the
/// built partition count and quantisation.
pub const RETRAIN_PARTITIONS_RATIO: usize = 2;

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
/// its partition count and quantisation unless its vectors outgrew or shrank below
/// them, as a fold does; a full-text index covers
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
            let built = built_vector_index(&tip, index_name).await?;
            let dimension = vector_dimension(type_def, &declared.column);
            match (vector_training_rows(&tip, &declared.column).await?, built) {
                // Untrained, or of a kind the engine does not build: a fresh choice.
                (Ok(vectors), None) => vector_index_for(vectors, dimension),
                (Ok(vectors), Some(built)) if outgrown(built, vectors) => {
                    vector_index_for(vectors, dimension)
                }
                (Ok(_), Some(built)) => kept(built, dimension),
                (Err(reason), _) => {
                    return Err(OmniError::bad_input(
                        omnigraph_core::InputLocation::in_source("rebuild-index")
                            .field(index_name.to_string()),
                        format!("{index_name} cannot be trained now: {reason}"),
                    ));
                }
            }
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
            let dimension = vector_dimension(type_def, &declared.column);
            match plan_build(&table, pin.row_count, declared, dimension).await? {
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
    dimension: u32,
) -> Result<std::result::Result<IndexBuildKind, String>> {
    if row_count == 0 {
        return Ok(Err("the table has no rows yet".into()));
    }
    Ok(Ok(match declared.kind {
        IndexKind::BTree => IndexBuildKind::BTree,
        IndexKind::FullText => IndexBuildKind::FullText,
        IndexKind::Vector => match vector_training_rows(table, &declared.column).await? {
            Ok(vectors) => vector_index_for(vectors, dimension),
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

/// The partition count a build chooses for `vectors` training vectors: √N rounded,
/// 1 to `IVF_PARTITIONS_MAX`: about √N vectors each. A search probes a share of them
/// (`omnigraph_core::adapter::default_nprobes`), so it reads about that share of the
/// vectors.
pub fn first_partition_count(vectors: u64) -> usize {
    ((vectors as f64).sqrt().round() as u64).clamp(1, IVF_PARTITIONS_MAX) as usize
}

/// How a build of `vectors` vectors of `dimension` holds them: uncompressed up to
/// `FLAT_VECTOR_BYTES_MAX`, then SQ, or PQ from `PQ_DIMENSION_MIN` dimensions when
/// [`PQ_DIMENSIONS_PER_SUB_VECTOR`] divides the dimension.
pub fn quantisation_for(vectors: u64, dimension: u32) -> Quantisation {
    let bytes = vectors
        .saturating_mul(u64::from(dimension))
        .saturating_mul(4);
    if bytes <= FLAT_VECTOR_BYTES_MAX {
        Quantisation::Flat
    } else if dimension >= PQ_DIMENSION_MIN
        && dimension.is_multiple_of(PQ_DIMENSIONS_PER_SUB_VECTOR)
    {
        Quantisation::Pq
    } else {
        Quantisation::Sq
    }
}

/// The index a first build (or a retrain) makes for `vectors` vectors of `dimension`.
pub fn vector_index_for(vectors: u64, dimension: u32) -> IndexBuildKind {
    build_kind(
        quantisation_for(vectors, dimension),
        first_partition_count(vectors),
        dimension,
    )
}

/// The build that keeps `built`'s quantisation and partitions (a fold, a rebuild).
pub fn kept(built: omnigraph_core::adapter::BuiltVectorIndex, dimension: u32) -> IndexBuildKind {
    build_kind(built.quantisation, built.partitions, dimension)
}

fn build_kind(quantisation: Quantisation, partitions: usize, dimension: u32) -> IndexBuildKind {
    match quantisation {
        Quantisation::Flat => IndexBuildKind::IvfFlat { partitions },
        Quantisation::Sq => IndexBuildKind::IvfSq { partitions },
        Quantisation::Pq => IndexBuildKind::IvfPq {
            partitions,
            sub_vectors: (dimension / PQ_DIMENSIONS_PER_SUB_VECTOR).max(1) as usize,
        },
    }
}

/// Whether a fold of `built`, now over `vectors` vectors, retrains with a fresh
/// partition count: the count the vectors call for is [`RETRAIN_PARTITIONS_RATIO`]
/// times the built one or more (they outgrew it), or that share of it or less (they
/// shrank: k-means cannot train more centroids than it has vectors).
pub fn outgrown(built: omnigraph_core::adapter::BuiltVectorIndex, vectors: u64) -> bool {
    let fresh = first_partition_count(vectors);
    fresh >= built.partitions.saturating_mul(RETRAIN_PARTITIONS_RATIO)
        || fresh.saturating_mul(RETRAIN_PARTITIONS_RATIO) <= built.partitions
        || built.partitions as u64 > vectors
}

/// The dimension of `type_def`'s vector property `column` (0 for another property).
pub(crate) fn vector_dimension(type_def: &TypeDef, column: &str) -> u32 {
    type_def
        .columns()
        .iter()
        .find(|c| c.name == column)
        .and_then(|c| match c.data_type {
            omnigraph_core::schema::PropertyType::Vector(dimension) => Some(dimension),
            _ => None,
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_grow_as_the_square_root_and_never_exceed_the_vectors() {
        assert_eq!(first_partition_count(1), 1);
        assert_eq!(first_partition_count(256), 16);
        assert_eq!(first_partition_count(10_000), 100);
        assert_eq!(first_partition_count(1_000_000), 1_000);
        assert_eq!(first_partition_count(u64::MAX), IVF_PARTITIONS_MAX as usize);
        for vectors in [
            VECTOR_TRAINING_ROWS_MIN,
            VECTOR_TRAINING_ROWS_MIN + 1,
            999,
            65_536,
        ] {
            assert!(first_partition_count(vectors) as u64 <= vectors);
        }
    }

    #[test]
    fn quantisation_follows_the_bytes_and_the_dimension() {
        // 1M × 128: 512 MiB raw, past the flat limit: SQ.
        assert_eq!(quantisation_for(1_000_000, 128), Quantisation::Sq);
        assert_eq!(quantisation_for(100_000, 128), Quantisation::Flat);
        assert_eq!(quantisation_for(1_000_000, 768), Quantisation::Pq);
        // PQ needs whole sub-vectors.
        assert_eq!(quantisation_for(1_000_000, 520), Quantisation::Sq);
        assert_eq!(
            vector_index_for(1_000_000, 768),
            IndexBuildKind::IvfPq {
                partitions: 1_000,
                sub_vectors: 48
            }
        );
        let built = omnigraph_core::adapter::BuiltVectorIndex {
            quantisation: Quantisation::Flat,
            partitions: 50,
        };
        assert!(!outgrown(built, 9_800));
        assert!(outgrown(built, 10_000));
        // Shrunk: 600 vectors call for 24 partitions, half of 50 or less.
        assert!(!outgrown(built, 700));
        assert!(outgrown(built, 600));
        let wide = omnigraph_core::adapter::BuiltVectorIndex {
            quantisation: Quantisation::Flat,
            partitions: 4_096,
        };
        assert!(outgrown(wide, 300));
    }
}
