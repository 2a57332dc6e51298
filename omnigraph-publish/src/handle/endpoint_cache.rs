//! The endpoints of an edge table, kept by a warm handle so that deleting a node reads
//! only the edge fragments that can hold its edges, not every fragment.
//!
//! Per endpoint key (a `src` or a `dst`), the fragments holding an edge that names it.
//! The answer may name more fragments than hold such an edge still (an edge deleted
//! since, a fragment rewritten since), never fewer: reading one fragment more costs a
//! read, missing one would leave an edge dangling. So a fragment that only lost rows
//! keeps its entries, a fragment added since has its endpoints read, and a fragment that
//! is gone or rewritten is passed over by every lookup (and its endpoints read again if
//! it is rewritten). Once the fragments passed over outnumber the live ones, the cache
//! starts again.

use crate::rows::{self, KeyMap};
use futures::TryStreamExt;
use omnigraph_core::arrow_array::RecordBatch;
use omnigraph_core::lance::Dataset;
use omnigraph_core::lance::table::format::Fragment;
use omnigraph_core::schema::{EDGE_DST_COLUMN, EDGE_SRC_COLUMN};
use omnigraph_core::{OmniError, Result};
use std::collections::HashMap;

/// The most edges whose endpoints are cached per table; a larger table is read whole.
pub(crate) const CACHED_EDGES_PER_TABLE_MAX: u64 = 5_000_000;

/// Whether `now` is `then` with at most more rows marked deleted: its endpoints as read
/// still cover it.
fn same_files(then: &Fragment, now: &Fragment) -> bool {
    then.id == now.id
        && then.files == now.files
        && then.overlays == now.overlays
        && then.physical_rows == now.physical_rows
}

/// The endpoints of one edge table, each with the fragments that named it when read.
#[derive(Debug, Default)]
pub(crate) struct EdgeEndpoints {
    /// Whether the cache describes a version of the table (an empty table included).
    warm: bool,
    version: u64,
    /// The fragments whose endpoints are in `endpoints`, as read.
    fragments: HashMap<u64, Fragment>,
    endpoints: KeyMap<Vec<u64>>,
    /// Fragments passed over since the cache started: their ids linger in `endpoints`.
    passed_over: usize,
}

impl EdgeEndpoints {
    /// Whether the cache holds a version of the table, so that bringing it to another
    /// reads only what changed since.
    pub(crate) fn is_warm(&self) -> bool {
        self.warm
    }

    /// Brings the cache to `table` (reading the endpoints of only the fragments it
    /// lacks) and returns whether it now covers every edge of `table`. `false` when the
    /// table has too many edges.
    pub(crate) async fn refresh(&mut self, table: &Dataset) -> Result<bool> {
        let version = table.manifest().version;
        if self.warm && self.version == version {
            return Ok(true);
        }
        let current: HashMap<u64, &Fragment> = table
            .manifest()
            .fragments
            .iter()
            .map(|fragment| (fragment.id, fragment))
            .collect();
        let before = self.fragments.len();
        self.fragments
            .retain(|id, read| current.get(id).is_some_and(|now| same_files(read, now)));
        self.passed_over += before - self.fragments.len();
        if self.passed_over > self.fragments.len() {
            *self = EdgeEndpoints::default();
        }
        let missing: Vec<Fragment> = table
            .manifest()
            .fragments
            .iter()
            .filter(|fragment| !self.fragments.contains_key(&fragment.id))
            .cloned()
            .collect();
        let edges: u64 = current
            .values()
            .map(|fragment| fragment.physical_rows.unwrap_or(0) as u64)
            .sum();
        if edges > CACHED_EDGES_PER_TABLE_MAX {
            *self = EdgeEndpoints::default();
            return Ok(false);
        }
        if !missing.is_empty() {
            let mut scanner = table.scan();
            scanner.with_fragments(missing.clone());
            scanner.with_row_address();
            scanner
                .project(&[EDGE_SRC_COLUMN, EDGE_DST_COLUMN])
                .map_err(|error| OmniError::from_lance("read edge endpoints", error))?;
            let batches: Vec<RecordBatch> = scanner
                .try_into_stream()
                .await
                .map_err(|error| OmniError::from_lance("read edge endpoints", error))?
                .try_collect()
                .await
                .map_err(|error| OmniError::from_lance("read edge endpoints", error))?;
            for batch in &batches {
                let addresses = batch
                    .column_by_name("_rowaddr")
                    .and_then(|column| {
                        column
                            .as_any()
                            .downcast_ref::<omnigraph_core::arrow_array::UInt64Array>()
                    })
                    .ok_or_else(|| {
                        OmniError::internal("an endpoint scan returned no row addresses")
                    })?;
                for row in 0..batch.num_rows() {
                    let fragment = addresses.value(row) >> 32;
                    assert!(
                        current.contains_key(&fragment),
                        "an edge read from fragment {fragment}, which the table does not have"
                    );
                    for column in [batch.column(0), batch.column(1)] {
                        let held = self
                            .endpoints
                            .entry(rows::render_array_key(column.as_ref(), row))
                            .or_default();
                        if held.last() != Some(&fragment) {
                            held.push(fragment);
                        }
                    }
                }
            }
            for fragment in missing {
                self.fragments.insert(fragment.id, fragment);
            }
        }
        self.warm = true;
        self.version = version;
        Ok(true)
    }

    /// The fragments that may hold an edge naming any of `keys` (rendered as a key
    /// column renders them), each once, in order.
    pub(crate) fn fragments_naming(&self, keys: &[impl AsRef<str>]) -> Vec<u64> {
        let mut fragments: Vec<u64> = keys
            .iter()
            .filter_map(|key| self.endpoints.get(key.as_ref()))
            .flatten()
            .copied()
            .filter(|fragment| self.fragments.contains_key(fragment))
            .collect();
        fragments.sort_unstable();
        fragments.dedup();
        fragments
    }
}
