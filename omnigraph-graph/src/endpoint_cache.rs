//! The endpoints of an edge table, kept by a warm handle so that deleting a node reads
//! only the edge fragments that can hold its edges, not every fragment.
//!
//! Per endpoint key (a `src` or a `dst`), the fragments holding an edge that names it.
//! The answer may name more fragments than hold such an edge still, never fewer: reading
//! one fragment more costs a read, missing one would leave an edge dangling. So every
//! row a fragment stores is read, deleted ones too, and the entries then hold for its
//! files whatever its deletions are now or later (or were, for a handle that moves to an
//! older state of the table). A fragment added since has its endpoints read; one that is
//! gone or rewritten is passed over by every lookup (and read again if rewritten). Once
//! the rows passed over outnumber the rows held, the cache starts again.

use crate::limits::CACHED_EDGES_PER_TABLE_MAX;
use crate::rows::{self, KeyMap};
use futures::TryStreamExt;
use omnigraph_core::arrow_array::RecordBatch;
use omnigraph_core::fragments::{
    self, ROW_ADDRESS_COLUMN, same_files, split_row_address, stored_rows,
};
use omnigraph_core::lance::Dataset;
use omnigraph_core::lance::table::format::Fragment;
use omnigraph_core::schema::{EDGE_DST_COLUMN, EDGE_SRC_COLUMN};
use omnigraph_core::{OmniError, Result};
use std::collections::HashMap;

/// The endpoints of one edge table, each with the fragments that named it when read.
#[derive(Debug, Default)]
pub(crate) struct EdgeEndpoints {
    /// Whether the cache describes a version of the table (an empty table included).
    warm: bool,
    version: u64,
    /// The fragments whose endpoints are in `endpoints`, as read.
    fragments: HashMap<u64, Fragment>,
    endpoints: KeyMap<Vec<u64>>,
    /// The rows of the fragments passed over since the cache started: their ids linger
    /// in `endpoints`. Once they outnumber the rows of the fragments it holds, it
    /// starts again.
    passed_over_rows: u64,
}

impl EdgeEndpoints {
    /// Whether the cache holds a version of the table, so that bringing it to another
    /// reads only what changed since.
    pub(crate) fn is_warm(&self) -> bool {
        self.warm
    }

    /// Brings the cache to `table` (reading the endpoints of only the fragments it
    /// lacks) and returns whether it now covers every edge of `table`. `false` when the
    /// table has too many edges. A failed read leaves the cache empty, never half
    /// brought up to date.
    pub(crate) async fn refresh(&mut self, table: &Dataset) -> Result<bool> {
        let refreshed = self.bring_to(table).await;
        if !matches!(refreshed, Ok(true)) {
            *self = EdgeEndpoints::default();
        }
        refreshed
    }

    async fn bring_to(&mut self, table: &Dataset) -> Result<bool> {
        let version = table.manifest().version;
        if self.warm && self.version == version {
            return Ok(true);
        }
        let current = fragments::by_id(&table.manifest().fragments);
        let edges: u64 = current.values().map(|fragment| stored_rows(fragment)).sum();
        if edges > CACHED_EDGES_PER_TABLE_MAX {
            return Ok(false);
        }
        let mut passed_over = 0;
        self.fragments.retain(|id, read| {
            let keep = current.get(id).is_some_and(|now| same_files(read, now));
            if !keep {
                passed_over += stored_rows(read);
            }
            keep
        });
        self.passed_over_rows += passed_over;
        let live: u64 = self.fragments.values().map(stored_rows).sum();
        if self.passed_over_rows > live {
            *self = EdgeEndpoints::default();
        }
        let missing: Vec<Fragment> = table
            .manifest()
            .fragments
            .iter()
            .filter(|fragment| !self.fragments.contains_key(&fragment.id))
            .cloned()
            .collect();
        if !missing.is_empty() {
            let failed = |error| OmniError::from_lance("read edge endpoints", error);
            let mut scanner = table.scan();
            scanner.with_fragments(missing.clone());
            // Every stored row, deleted ones too: what the cache holds for a fragment
            // then covers its files in any state of its deletions, an older one
            // included.
            scanner.with_row_id();
            scanner.with_row_address();
            scanner.include_deleted_rows();
            scanner
                .project(&[EDGE_SRC_COLUMN, EDGE_DST_COLUMN])
                .map_err(failed)?;
            let mut batches = scanner.try_into_stream().await.map_err(failed)?;
            while let Some(batch) = batches.try_next().await.map_err(failed)? {
                self.take_endpoints(&batch, &current)?;
            }
            for fragment in missing {
                self.fragments.insert(fragment.id, fragment);
            }
        }
        self.warm = true;
        self.version = version;
        Ok(true)
    }

    /// Records the endpoints of one batch of an endpoint scan of `current`'s fragments.
    fn take_endpoints(
        &mut self,
        batch: &RecordBatch,
        current: &HashMap<u64, &Fragment>,
    ) -> Result<()> {
        let column = |name: &str| {
            batch
                .column_by_name(name)
                .ok_or_else(|| OmniError::internal(format!("an endpoint scan returned no {name}")))
        };
        let addresses = column(ROW_ADDRESS_COLUMN)?;
        let addresses = addresses
            .as_any()
            .downcast_ref::<omnigraph_core::arrow_array::UInt64Array>()
            .ok_or_else(|| OmniError::internal("an endpoint scan's row addresses are not u64"))?;
        let (sources, targets) = (column(EDGE_SRC_COLUMN)?, column(EDGE_DST_COLUMN)?);
        for row in 0..batch.num_rows() {
            let (fragment, _) = split_row_address(addresses.value(row));
            if !current.contains_key(&fragment) {
                return Err(OmniError::internal(format!(
                    "an edge read from fragment {fragment}, which the table does not have"
                )));
            }
            for endpoints in [sources, targets] {
                let held = self
                    .endpoints
                    .entry(rows::render_array_key(endpoints.as_ref(), row))
                    .or_default();
                if held.last() != Some(&fragment) {
                    held.push(fragment);
                }
            }
        }
        Ok(())
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
