//! Index builds staged as detached CreateIndex links.
//!
//! Lance writes the index files (`execute_uncommitted`) and the link commits a
//! CreateIndex on the base; with `replace`, indexes of the same name at the base are
//! listed as removed, so the name keeps pointing at exactly one index. Whether a vector
//! column can be trained is the caller's judgement: Lance 14 builds an untrained PQ
//! index silently on too few rows and fails IVF_FLAT on all-null vectors.

use super::{LinkKind, LinkOrigin, StagedLink, commit_link, read_error, write_error};
use crate::error::Result;
use crate::limits::PQ_ITERATIONS_MAX;
use lance::Dataset;
use lance::dataset::transaction::{Operation, TransactionBuilder};
use lance::index::DatasetIndexExt;
use lance::index::vector::VectorIndexParams;
use lance_index::IndexType;
use lance_index::scalar::{InvertedIndexParams, ScalarIndexParams};
use lance_linalg::distance::MetricType;
use std::sync::Arc;

/// Full-text build memory across its workers (MiB); Lance's default is 2 GiB per worker.
pub const FULL_TEXT_MEMORY_MIB: u64 = 512;
/// Full-text build workers.
pub const FULL_TEXT_WORKERS: usize = 2;

/// The kind of index to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexBuildKind {
    /// A scalar BTree.
    BTree,
    /// An inverted full-text index.
    FullText,
    /// IVF with flat (uncompressed) partitions, L2 distance.
    IvfFlat {
        /// Number of IVF partitions.
        partitions: usize,
    },
    /// IVF with 8-bit scalar quantisation, L2 distance.
    IvfSq {
        /// Number of IVF partitions.
        partitions: usize,
    },
    /// IVF with product quantisation, L2 distance.
    IvfPq {
        /// Number of IVF partitions.
        partitions: usize,
        /// PQ sub-vectors (must divide the dimension).
        sub_vectors: usize,
    },
}

/// One index to build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexBuild {
    /// The indexed column.
    pub column: String,
    /// The index name, stable across rebuilds.
    pub name: String,
    /// What to build.
    pub kind: IndexBuildKind,
    /// Replace indexes of the same name at the base.
    pub replace: bool,
}

/// The memory a full-text build may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FullTextBudget {
    /// MiB in all, split across the workers.
    pub memory_mib: u64,
    /// Build workers.
    pub workers: usize,
}

impl Default for FullTextBudget {
    fn default() -> Self {
        FullTextBudget {
            memory_mib: FULL_TEXT_MEMORY_MIB,
            workers: FULL_TEXT_WORKERS,
        }
    }
}

/// The parameters a full-text build hands Lance: the budget's memory over its workers
/// (Lance's default is 2 GiB per worker).
pub fn full_text_params(budget: &FullTextBudget) -> InvertedIndexParams {
    // Positions are kept so a phrase query can be answered.
    InvertedIndexParams::default()
        .with_position(true)
        .memory_limit_mb(budget.memory_mib)
        .num_workers(budget.workers)
}

/// Builds `build` on `base` within the default full-text budget and stages it as a
/// detached CreateIndex link.
pub async fn stage_index(
    base: &Arc<Dataset>,
    build: &IndexBuild,
    origin: &LinkOrigin,
) -> Result<StagedLink> {
    stage_index_within(base, build, &FullTextBudget::default(), origin).await
}

/// [`stage_index`] within `full_text` (used only when `build` is a full-text index).
pub async fn stage_index_within(
    base: &Arc<Dataset>,
    build: &IndexBuild,
    full_text: &FullTextBudget,
    origin: &LinkOrigin,
) -> Result<StagedLink> {
    let removed_indices = if build.replace {
        base.load_indices()
            .await
            .map_err(|error| read_error("list indexes", error))?
            .iter()
            .filter(|index| index.name == build.name)
            .cloned()
            .collect()
    } else {
        Vec::new()
    };
    let mut dataset = (**base).clone();
    let columns = [build.column.as_str()];
    let scalar = ScalarIndexParams::default();
    if matches!(build.kind, IndexBuildKind::FullText) {
        super::observed::note_full_text(
            base.uri(),
            super::observed::FullTextSeen {
                memory_mib: full_text.memory_mib,
                workers: full_text.workers,
            },
        );
    }
    let full_text = full_text_params(full_text);
    let vector;
    let (index_type, params): (IndexType, &dyn lance_index::IndexParams) = match build.kind {
        IndexBuildKind::BTree => (IndexType::BTree, &scalar),
        IndexBuildKind::FullText => (IndexType::Inverted, &full_text),
        IndexBuildKind::IvfFlat { partitions } => {
            vector = VectorIndexParams::ivf_flat(partitions, MetricType::L2);
            (IndexType::Vector, &vector)
        }
        IndexBuildKind::IvfSq { partitions } => {
            vector = VectorIndexParams::with_ivf_sq_params(
                MetricType::L2,
                lance_index::vector::ivf::IvfBuildParams::new(partitions),
                lance_index::vector::sq::builder::SQBuildParams::default(),
            );
            (IndexType::Vector, &vector)
        }
        IndexBuildKind::IvfPq {
            partitions,
            sub_vectors,
        } => {
            vector = VectorIndexParams::ivf_pq(
                partitions,
                8,
                sub_vectors,
                MetricType::L2,
                PQ_ITERATIONS_MAX,
            );
            (IndexType::Vector, &vector)
        }
    };
    let metadata = dataset
        .create_index_builder(&columns, index_type, params)
        .name(build.name.clone())
        .replace(build.replace)
        .execute_uncommitted()
        .await
        .map_err(|error| write_error(format!("build index {}", build.name), error))?;
    let transaction = TransactionBuilder::new(
        super::version_of(base),
        Operation::CreateIndex {
            new_indices: vec![metadata],
            removed_indices,
        },
    )
    .build();
    commit_link(base, transaction, origin, LinkKind::CreateIndex, 0).await
}

/// The partition count of a built IVF index, from Lance's own statistics.
pub async fn built_partitions(table: &Dataset, index_name: &str) -> Result<Option<usize>> {
    Ok(built_vector_index(table, index_name)
        .await?
        .map(|built| built.partitions))
}

/// A built IVF index as Lance's statistics describe it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BuiltVectorIndex {
    /// How its partitions hold vectors.
    pub quantisation: Quantisation,
    /// Its IVF partitions.
    pub partitions: usize,
}

/// How an IVF index's partitions hold vectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Quantisation {
    /// Uncompressed: exact distances within the partitions probed.
    Flat,
    /// 8-bit scalar quantisation: a quarter of the bytes, approximate distances.
    Sq,
    /// Product quantisation: a byte per sub-vector, approximate distances.
    Pq,
}

impl Quantisation {
    /// Lance's name of the index type (`IVF_FLAT`, ...).
    pub fn lance_name(self) -> &'static str {
        match self {
            Quantisation::Flat => "IVF_FLAT",
            Quantisation::Sq => "IVF_SQ",
            Quantisation::Pq => "IVF_PQ",
        }
    }

    fn of_lance_name(name: &str) -> Option<Quantisation> {
        [Quantisation::Flat, Quantisation::Sq, Quantisation::Pq]
            .into_iter()
            .find(|q| q.lance_name() == name)
    }
}

/// The built IVF index `index_name` of `table`: `None` when there is none, Lance
/// reports no partitions (an untrained index), or it is of a kind the engine does not
/// build. Lance's statistics are read as untrusted:
/// a partition count of 0 or past `IVF_PARTITIONS_READ_MAX` is refused as corrupt.
pub async fn built_vector_index(
    table: &Dataset,
    index_name: &str,
) -> Result<Option<BuiltVectorIndex>> {
    // Lance's statistics of a vector index carry its centroids, too dear to read for
    // each search; a built index never changes, so its sizing is kept by the ids of
    // its segments (from the manifest, which the table has read).
    let segments: Vec<String> = table
        .load_indices()
        .await
        .map_err(|error| read_error("list indexes", error))?
        .iter()
        .filter(|index| index.name == index_name)
        .map(|index| index.uuid.to_string())
        .collect();
    if segments.is_empty() {
        return Ok(None);
    }
    if let Some(known) = sizings::get(&segments) {
        return Ok(known);
    }
    let built = read_vector_index(table, index_name).await?;
    sizings::insert(segments, built);
    Ok(built)
}

/// The sizings of built vector indexes read so far in the process, by their segments'
/// ids, at most `VECTOR_SIZINGS_CACHED_MAX` (a full cache is emptied).
mod sizings {
    use super::BuiltVectorIndex;
    use crate::limits::VECTOR_SIZINGS_CACHED_MAX;
    use std::collections::HashMap;
    use std::sync::{Mutex, PoisonError};

    type Cache = Option<HashMap<Vec<String>, Option<BuiltVectorIndex>>>;
    static CACHED: Mutex<Cache> = Mutex::new(None);

    pub(super) fn get(segments: &[String]) -> Option<Option<BuiltVectorIndex>> {
        let cached = CACHED.lock().unwrap_or_else(PoisonError::into_inner);
        cached.as_ref()?.get(segments).copied()
    }

    pub(super) fn insert(segments: Vec<String>, built: Option<BuiltVectorIndex>) {
        let mut cached = CACHED.lock().unwrap_or_else(PoisonError::into_inner);
        let cached = cached.get_or_insert_with(HashMap::new);
        if cached.len() >= VECTOR_SIZINGS_CACHED_MAX {
            cached.clear();
        }
        cached.insert(segments, built);
    }
}

/// [`built_vector_index`] read from Lance's statistics.
async fn read_vector_index(table: &Dataset, index_name: &str) -> Result<Option<BuiltVectorIndex>> {
    let statistics = match table.index_statistics(index_name).await {
        Ok(text) => text,
        Err(lance::Error::IndexNotFound { .. }) => return Ok(None),
        Err(error) => return Err(read_error("index statistics", error)),
    };
    let corrupt = |what: String| {
        crate::error::OmniError::internal(format!("index statistics of {index_name}: {what}"))
    };
    let value: serde_json::Value =
        serde_json::from_str(&statistics).map_err(|error| corrupt(error.to_string()))?;
    let partitions = value["num_partitions"]
        .as_u64()
        .or_else(|| value["indices"][0]["num_partitions"].as_u64());
    let Some(partitions) = partitions else {
        return Ok(None);
    };
    if partitions == 0 || partitions > crate::limits::IVF_PARTITIONS_READ_MAX {
        return Err(corrupt(format!("{partitions} partitions")));
    }
    // An IVF index of a kind the engine does not build (made outside it): not one
    // whose sizing it knows; searches still use it.
    let kind = value["index_type"].as_str().unwrap_or_default();
    let Some(quantisation) = Quantisation::of_lance_name(kind) else {
        return Ok(None);
    };
    Ok(Some(BuiltVectorIndex {
        quantisation,
        partitions: partitions as usize,
    }))
}

/// How many times `k` candidates a search of a quantised index re-ranks by exact
/// distance by default: its distances are approximate, and the re-ranked candidates
/// hold the true nearest far more often than the approximate top `k` does. `None` for
/// an uncompressed index, whose distances are exact.
pub fn default_refine(quantisation: Quantisation) -> Option<u32> {
    match quantisation {
        Quantisation::Flat => None,
        Quantisation::Sq => Some(SQ_REFINE),
        Quantisation::Pq => Some(PQ_REFINE),
    }
}

/// The default re-ranking factor of an IVF_SQ index (measured: `cargo xtask bench
/// --retrieval`, docs/performance.md).
const SQ_REFINE: u32 = 4;

/// The default re-ranking factor of an IVF_PQ index, whose distances are coarser.
const PQ_REFINE: u32 = 10;

/// The fewest IVF partitions a vector search probes by default on an index of
/// `partitions`: `NPROBES_SHARE` of them, at least `NPROBES_MIN` (all when there are
/// fewer). Lance probes more until it has `k` hits.
pub fn default_nprobes(partitions: usize) -> usize {
    use crate::limits::{NPROBES_MIN, NPROBES_SHARE};
    let share = (partitions as f64 * NPROBES_SHARE).ceil() as usize;
    share.max(NPROBES_MIN).min(partitions.max(1))
}

/// The parameters each segment of the built full-text index `index_name` of `table`
/// was built with, as its details record them (read as untrusted: a segment whose
/// details are missing or do not decode is `None`). Empty when no such index is built.
async fn built_full_text_segments(
    table: &Dataset,
    index_name: &str,
) -> Result<Vec<Option<InvertedIndexParams>>> {
    use prost::Message;
    Ok(table
        .load_indices()
        .await
        .map_err(|error| read_error("list indexes", error))?
        .iter()
        .filter(|index| index.name == index_name)
        .map(|segment| {
            let details = segment.index_details.as_ref()?;
            let details =
                lance_index::pbold::InvertedIndexDetails::decode(details.value.as_slice()).ok()?;
            InvertedIndexParams::try_from(&details).ok()
        })
        .collect())
}

/// Whether the built full-text index `index_name` of `table` keeps word positions (a
/// phrase query needs them): `None` when no such index is built. An index any of whose
/// segments keeps none, or whose details do not decode, keeps none.
pub async fn full_text_positions(table: &Dataset, index_name: &str) -> Result<Option<bool>> {
    let segments = built_full_text_segments(table, index_name).await?;
    if segments.is_empty() {
        return Ok(None);
    }
    Ok(Some(segments.iter().all(|segment| {
        segment
            .as_ref()
            .is_some_and(InvertedIndexParams::has_positions)
    })))
}

/// The parameters (tokenizer, positions) the built full-text index `index_name` of
/// `table` was built with: those of its first segment whose details decode; `None`
/// when it is not built or no segment's do.
pub async fn built_full_text_params(
    table: &Dataset,
    index_name: &str,
) -> Result<Option<InvertedIndexParams>> {
    Ok(built_full_text_segments(table, index_name)
        .await?
        .into_iter()
        .flatten()
        .next())
}

/// Whether `table` holds a built index named `index_name`.
pub async fn is_built(table: &Dataset, index_name: &str) -> Result<bool> {
    Ok(table
        .load_indices()
        .await
        .map_err(|error| crate::error::OmniError::from_lance("list indexes", error))?
        .iter()
        .any(|index| index.name == index_name))
}
