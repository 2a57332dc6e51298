//! The keys of a table, kept by a warm handle so that checking a new row's key costs no
//! request.
//!
//! The cache is valid for a table version when every fragment it read is still there
//! with the same deletion state: then only fragments added since (by other writers)
//! are read. A fragment removed or rewritten, or a new deletion file (compaction,
//! delete, update, merge), makes it read the table again. After its own append the
//! handle extends the cache with the keys it wrote, so the next insert reads nothing.

use crate::rows::{self, RowKey};
use futures::TryStreamExt;
use omnigraph_core::arrow_array::RecordBatch;
use omnigraph_core::lance::Dataset;
use omnigraph_core::lance::table::format::Fragment;
use omnigraph_core::{OmniError, Result};
use std::collections::{HashMap, HashSet};

/// The most keys cached per table; a larger table is checked through queries instead.
pub(crate) const CACHED_KEYS_PER_TABLE_MAX: usize = 5_000_000;

/// What a fragment looked like when its keys were read.
type FragmentState = (u64, Option<(u64, u64)>);

fn state_of(fragment: &Fragment) -> FragmentState {
    let deletion = fragment
        .deletion_file
        .as_ref()
        .map(|file| (file.read_version, file.id));
    (fragment.physical_rows.unwrap_or(0) as u64, deletion)
}

/// The keys of one table as of one version.
#[derive(Debug, Default)]
pub(crate) struct TableKeys {
    version: u64,
    fragments: HashMap<u64, FragmentState>,
    keys: HashSet<RowKey>,
}

impl TableKeys {
    /// Brings the cache to `table` (reading only what it lacks) and returns whether
    /// it now holds every key of `table`. `false` when the table has too many keys.
    pub(crate) async fn refresh(&mut self, table: &Dataset, key_column: &str) -> Result<bool> {
        let version = table.manifest().version;
        if self.version == version && !self.fragments.is_empty() {
            return Ok(true);
        }
        let current = &table.manifest().fragments;
        let still_valid = self.fragments.iter().all(|(id, state)| {
            current
                .iter()
                .any(|fragment| fragment.id == *id && state_of(fragment) == *state)
        });
        if !still_valid {
            self.fragments.clear();
            self.keys.clear();
        }
        let missing: Vec<Fragment> = current
            .iter()
            .filter(|fragment| !self.fragments.contains_key(&fragment.id))
            .cloned()
            .collect();
        let missing_rows: u64 = missing.iter().map(|fragment| state_of(fragment).0).sum();
        if self.keys.len() as u64 + missing_rows > CACHED_KEYS_PER_TABLE_MAX as u64 {
            *self = TableKeys::default();
            return Ok(false);
        }
        if !missing.is_empty() {
            let mut scanner = table.scan();
            scanner.with_fragments(missing.clone());
            scanner
                .project(&[key_column])
                .map_err(|error| OmniError::from_lance("read keys", error))?;
            let batches: Vec<RecordBatch> = scanner
                .try_into_stream()
                .await
                .map_err(|error| OmniError::from_lance("read keys", error))?
                .try_collect()
                .await
                .map_err(|error| OmniError::from_lance("read keys", error))?;
            for batch in &batches {
                for row in 0..batch.num_rows() {
                    self.keys
                        .insert(rows::render_array_key(batch.column(0).as_ref(), row));
                }
            }
            for fragment in &missing {
                self.fragments.insert(fragment.id, state_of(fragment));
            }
        }
        self.version = version;
        Ok(true)
    }

    /// Which of `keys` the table holds.
    pub(crate) fn existing(&self, keys: &[RowKey]) -> Vec<RowKey> {
        keys.iter()
            .filter(|key| self.keys.contains(*key))
            .cloned()
            .collect()
    }

    /// After an append of `added` keys that moved the table from the cached version to
    /// `table`: take the new fragments as read. Anything else drops the cache.
    pub(crate) fn extend(
        &mut self,
        base_version: u64,
        table: &Dataset,
        added: impl IntoIterator<Item = RowKey>,
    ) {
        if self.version != base_version || self.fragments.is_empty() {
            *self = TableKeys::default();
            return;
        }
        for fragment in table.manifest().fragments.iter() {
            self.fragments
                .entry(fragment.id)
                .or_insert_with(|| state_of(fragment));
        }
        self.keys.extend(added);
        self.version = table.manifest().version;
    }
}
