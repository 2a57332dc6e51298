//! The keys of a table, kept by a warm handle so that checking a new row's key costs no
//! request.
//!
//! Each key is kept with the fragment it was read from, and each fragment with its
//! state when read (rows and deletion file). Bringing the cache to a newer version of
//! the table reads only the fragments whose state it lacks: those added since, and
//! those another writer deleted rows from (a delete or an update marks rows deleted in
//! the fragments it touched and leaves the others alone). A fragment that is gone
//! (compacted, or all its rows deleted) takes its keys with it. So a delete of one row
//! costs the next insert one fragment's keys, not the table's. After its own append
//! the handle extends the cache with the keys it wrote, so the next insert reads
//! nothing.

use crate::rows::{self, KeyMap, RowKey};
use futures::TryStreamExt;
use omnigraph_core::arrow_array::RecordBatch;
use omnigraph_core::lance::Dataset;
use omnigraph_core::lance::table::format::Fragment;
use omnigraph_core::{OmniError, Result};
use std::collections::{HashMap, HashSet};

/// The most keys cached per table; a larger table is checked through queries instead.
pub(crate) const CACHED_KEYS_PER_TABLE_MAX: usize = 5_000_000;

/// The column a scan adds for `with_row_address` (Lance's `ROW_ADDR`): the fragment
/// id in the upper 32 bits, the row's offset in the lower.
const ROW_ADDRESS_COLUMN: &str = "_rowaddr";

/// What a fragment looked like when its keys were read.
type FragmentState = (u64, Option<(u64, u64)>);

fn state_of(fragment: &Fragment) -> FragmentState {
    let deletion = fragment
        .deletion_file
        .as_ref()
        .map(|file| (file.read_version, file.id));
    (fragment.physical_rows.unwrap_or(0) as u64, deletion)
}

/// The keys of one table as of one version, each with the fragment that holds it.
#[derive(Debug, Default)]
pub(crate) struct TableKeys {
    version: u64,
    fragments: HashMap<u64, FragmentState>,
    keys: KeyMap<u64>,
}

impl TableKeys {
    /// Brings the cache to `table` (reading only the fragments whose state it lacks) and
    /// returns whether it now holds every key of `table`. `false` when the table has
    /// too many keys.
    pub(crate) async fn refresh(&mut self, table: &Dataset, key_column: &str) -> Result<bool> {
        let version = table.manifest().version;
        if self.version == version && !self.fragments.is_empty() {
            return Ok(true);
        }
        let current: HashMap<u64, &Fragment> = table
            .manifest()
            .fragments
            .iter()
            .map(|fragment| (fragment.id, fragment))
            .collect();
        // Fragments gone or changed since they were read: their keys go, and the changed
        // ones are read again below.
        let stale: HashSet<u64> = self
            .fragments
            .iter()
            .filter(|(id, state)| {
                current
                    .get(*id)
                    .is_none_or(|fragment| state_of(fragment) != **state)
            })
            .map(|(id, _)| *id)
            .collect();
        if !stale.is_empty() {
            self.keys.retain(|_, fragment| !stale.contains(fragment));
            self.fragments.retain(|id, _| !stale.contains(id));
        }
        let missing: Vec<Fragment> = table
            .manifest()
            .fragments
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
            scanner.with_row_address();
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
                let addresses = batch
                    .column_by_name(ROW_ADDRESS_COLUMN)
                    .and_then(|column| {
                        column
                            .as_any()
                            .downcast_ref::<omnigraph_core::arrow_array::UInt64Array>()
                    })
                    .ok_or_else(|| OmniError::internal("a key scan returned no row addresses"))?;
                for row in 0..batch.num_rows() {
                    let fragment = addresses.value(row) >> 32;
                    assert!(
                        current.contains_key(&fragment),
                        "a key read from fragment {fragment}, which the table does not have"
                    );
                    self.keys.insert(
                        rows::render_array_key(batch.column(0).as_ref(), row),
                        fragment,
                    );
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
    pub(crate) fn existing(&self, keys: &[impl AsRef<str>]) -> Vec<RowKey> {
        keys.iter()
            .map(AsRef::as_ref)
            .filter(|key| self.keys.contains_key(*key))
            .map(str::to_string)
            .collect()
    }

    /// After an append of `added` keys that moved the table from the cached version to
    /// `table`: when the append made one fragment, take it as read with those keys.
    /// Anything else leaves what the append wrote to the next refresh, or drops the
    /// cache when it no longer describes the version before the append.
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
        let new: Vec<&Fragment> = table
            .manifest()
            .fragments
            .iter()
            .filter(|fragment| !self.fragments.contains_key(&fragment.id))
            .collect();
        let [fragment] = new.as_slice() else {
            return;
        };
        self.fragments.insert(fragment.id, state_of(fragment));
        self.keys
            .extend(added.into_iter().map(|key| (key, fragment.id)));
        self.version = table.manifest().version;
    }
}
