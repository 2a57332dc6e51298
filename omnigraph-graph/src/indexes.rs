//! Index coverage: for every declared index at a commit, whether it is built and how
//! many rows it does not cover yet (`status` reports it). The builds themselves are
//! maintenance's (`omnigraph_maintenance::indexes`).

use crate::graph::CommitRef;
use crate::omnigraph::Omnigraph;
use omnigraph_core::lance::index::DatasetIndexExt;
use omnigraph_core::{OmniError, Result};

/// One declared index at one commit.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct IndexCoverage {
    /// The type.
    pub type_name: String,
    /// The index name.
    pub index: String,
    /// Whether an index of that name exists at the pinned version.
    pub built: bool,
    /// Rows the index does not cover (appended or rewritten after the build); all rows
    /// when it is not built.
    pub uncovered_rows: u64,
    /// A built vector index: how it was sized.
    pub vector: Option<VectorIndexSizing>,
}

/// How a built vector index was sized, and how a search probes it by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct VectorIndexSizing {
    /// How its partitions hold vectors (`flat`, `sq`, `pq`).
    pub quantisation: omnigraph_core::adapter::Quantisation,
    /// Its IVF partitions.
    pub partitions: usize,
    /// The fewest partitions a search probes when it names none.
    pub nprobes_default: usize,
    /// How many times `k` candidates a search re-ranks by exact distance when it names
    /// no `refine` (none for an uncompressed index).
    pub refine_default: Option<u32>,
}

impl Omnigraph {
    /// For every table and declared index at `at`: built or not, and rows uncovered.
    pub async fn index_coverage(&self, at: &CommitRef) -> Result<Vec<IndexCoverage>> {
        let commit = self.graph().commit(self.branch(), at).await?;
        let catalog = self.catalog_at(&commit).await?;
        let mut report = Vec::new();
        for type_def in catalog.types() {
            let pin = commit.require_pin_of_type(type_def.name())?;
            let table = self.table_at(&commit, &pin.table_id).await?;
            let built = table
                .load_indices()
                .await
                .map_err(|error| OmniError::from_lance("list indexes", error))?;
            for declared in type_def.declared_indexes() {
                let index = built.iter().find(|index| index.name == declared.name);
                let uncovered_rows = match index {
                    None => pin.row_count,
                    Some(index) => {
                        let covered = index
                            .effective_fragment_bitmap(table.fragment_bitmap())
                            .unwrap_or_default();
                        table
                            .manifest()
                            .fragments
                            .iter()
                            .filter(|fragment| !covered.contains(fragment.id as u32))
                            .map(live_rows)
                            .sum()
                    }
                };
                let vector = match (index, declared.kind) {
                    (Some(_), omnigraph_core::schema::IndexKind::Vector) => {
                        omnigraph_core::adapter::built_vector_index(&table, &declared.name)
                            .await?
                            .map(|built| VectorIndexSizing {
                                quantisation: built.quantisation,
                                partitions: built.partitions,
                                nprobes_default: omnigraph_core::adapter::default_nprobes(
                                    built.partitions,
                                ),
                                refine_default: omnigraph_core::adapter::default_refine(
                                    built.quantisation,
                                ),
                            })
                    }
                    _ => None,
                };
                report.push(IndexCoverage {
                    type_name: type_def.name().to_string(),
                    index: declared.name.clone(),
                    built: index.is_some(),
                    uncovered_rows,
                    vector,
                });
            }
        }
        Ok(report)
    }
}
fn live_rows(fragment: &omnigraph_core::lance::table::format::Fragment) -> u64 {
    let physical = fragment.physical_rows.unwrap_or(0) as u64;
    let deleted = fragment
        .deletion_file
        .as_ref()
        .and_then(|file| file.num_deleted_rows)
        .unwrap_or(0) as u64;
    physical.saturating_sub(deleted)
}
