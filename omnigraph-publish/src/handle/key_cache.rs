//! The keys of a table, kept by a warm handle so that checking a new row's key costs no
//! request, and so that a write of a few keys knows which fragments hold them.
//!
//! Each key is kept with its row address (fragment and offset), and each fragment with
//! what it was when read: its files and the rows marked deleted in it. Bringing the
//! cache to a newer version of the table reads only what it lacks:
//! - a fragment added since has its keys read;
//! - a fragment that only lost rows since (the same files, a newer deletion file: what a
//!   delete or an update does to the fragments it touches) has only its deletion file
//!   read, and the keys at the deleted offsets stop counting;
//! - a fragment that changed otherwise has its keys read again;
//! - a fragment that is gone (compacted, or all its rows deleted) takes its keys with it.
//!
//! So another writer's delete of one row costs the next write one small deletion file,
//! not the table's keys. After its own append the handle extends the cache with the
//! keys it wrote, so the next insert reads nothing.

use crate::rows::{self, KeyMap, RowKey};
use futures::TryStreamExt;
use omnigraph_core::arrow_array::RecordBatch;
use omnigraph_core::lance::Dataset;
use omnigraph_core::lance::dataset::fragment::FileFragment;
use omnigraph_core::lance::table::format::Fragment;
use omnigraph_core::{OmniError, Result};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The most keys cached per table; a larger table is checked through queries instead.
pub(crate) const CACHED_KEYS_PER_TABLE_MAX: usize = 5_000_000;

/// The column a scan adds for `with_row_address` (Lance's `ROW_ADDR`): the fragment
/// id in the upper 32 bits, the row's offset in the lower.
const ROW_ADDRESS_COLUMN: &str = "_rowaddr";

/// The offset a key whose row's place is not known has (its fragment was written by
/// this handle, not read): such a fragment is read again when it loses rows.
const OFFSET_UNKNOWN: u64 = u32::MAX as u64;

/// A fragment as the cache knows it.
#[derive(Debug)]
struct FragmentRead {
    /// The fragment's metadata when its keys were read.
    read: Fragment,
    /// Its metadata when last brought up to date.
    now: Fragment,
    /// Whether each key of it is kept with its offset (false for a fragment this
    /// handle appended, whose keys came without).
    addressed: bool,
    /// The offsets deleted when its keys were read, in order, once known (a row deleted
    /// then has no key here, so a newer state must keep it deleted).
    deleted_at_read: Option<Vec<u32>>,
    /// The offsets deleted in `now`, in order, once it differs from `read`: keys at them
    /// no longer count.
    deleted_now: Vec<u32>,
}

impl FragmentRead {
    fn new(fragment: Fragment, addressed: bool) -> FragmentRead {
        let deleted_at_read = fragment.deletion_file.is_none().then(Vec::new);
        FragmentRead {
            read: fragment.clone(),
            now: fragment,
            addressed,
            deleted_at_read,
            deleted_now: Vec::new(),
        }
    }

    fn holds(&self, address: u64) -> bool {
        let offset = address & OFFSET_UNKNOWN;
        offset == OFFSET_UNKNOWN || self.deleted_now.binary_search(&(offset as u32)).is_err()
    }
}

/// Whether `now` is `then` with at most a different deletion file.
fn only_deletions_differ(then: &Fragment, now: &Fragment) -> bool {
    then.id == now.id
        && then.files == now.files
        && then.overlays == now.overlays
        && then.physical_rows == now.physical_rows
        && then.row_id_meta == now.row_id_meta
}

/// The keys of one table as of one version, each with the row that holds it.
#[derive(Debug, Default)]
pub(crate) struct TableKeys {
    version: u64,
    fragments: HashMap<u64, FragmentRead>,
    /// Key to row address (fragment << 32 | offset).
    keys: KeyMap<u64>,
}

impl TableKeys {
    /// Brings the cache to `table` (reading only what it lacks) and returns whether it
    /// now holds every key of `table`. `false` when the table has too many keys.
    pub(crate) async fn refresh(&mut self, table: &Arc<Dataset>, key_column: &str) -> Result<bool> {
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
        // Fragments that only lost rows: their deletions, read before anything changes
        // so that a failed read leaves the cache as it was.
        let mut losses: Vec<(u64, Vec<u32>, Vec<u32>)> = Vec::new();
        let mut stale: HashSet<u64> = HashSet::new();
        for (id, known) in &self.fragments {
            let Some(now) = current.get(id) else {
                stale.insert(*id);
                continue;
            };
            if **now == known.now {
                continue;
            }
            if !known.addressed || !only_deletions_differ(&known.read, now) {
                stale.insert(*id);
                continue;
            }
            let at_read = match &known.deleted_at_read {
                Some(offsets) => offsets.clone(),
                None => deleted_offsets(table, &known.read).await?,
            };
            let deleted = deleted_offsets(table, now).await?;
            if at_read
                .iter()
                .any(|offset| deleted.binary_search(offset).is_err())
            {
                // A row deleted when the keys were read is live again (an older state
                // of the table): its key was never kept, so read the fragment again.
                stale.insert(*id);
                continue;
            }
            losses.push((*id, at_read, deleted));
        }
        if !stale.is_empty() {
            self.keys
                .retain(|_, address| !stale.contains(&(*address >> 32)));
            self.fragments.retain(|id, _| !stale.contains(id));
        }
        for (id, at_read, deleted) in losses {
            let known = self
                .fragments
                .get_mut(&id)
                .unwrap_or_else(|| unreachable!("a fragment that lost rows was just found"));
            known.now = (*current[&id]).clone();
            known.deleted_at_read = Some(at_read);
            known.deleted_now = deleted;
        }
        let missing: Vec<Fragment> = table
            .manifest()
            .fragments
            .iter()
            .filter(|fragment| !self.fragments.contains_key(&fragment.id))
            .cloned()
            .collect();
        let missing_rows: u64 = missing
            .iter()
            .map(|fragment| fragment.physical_rows.unwrap_or(0) as u64)
            .sum();
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
                    let address = addresses.value(row);
                    let fragment = address >> 32;
                    assert!(
                        current.contains_key(&fragment),
                        "a key read from fragment {fragment}, which the table does not have"
                    );
                    assert!(
                        address & OFFSET_UNKNOWN != OFFSET_UNKNOWN,
                        "a key read at an offset no fragment reaches"
                    );
                    self.keys.insert(
                        rows::render_array_key(batch.column(0).as_ref(), row),
                        address,
                    );
                }
            }
            for fragment in missing {
                self.fragments
                    .insert(fragment.id, FragmentRead::new(fragment, true));
            }
        }
        self.version = version;
        Ok(true)
    }

    /// The row address of `key`, when the table holds it.
    fn address_of(&self, key: &str) -> Option<u64> {
        let address = *self.keys.get(key)?;
        let read = self.fragments.get(&(address >> 32))?;
        read.holds(address).then_some(address)
    }

    /// Which of `keys` the table holds.
    pub(crate) fn existing(&self, keys: &[impl AsRef<str>]) -> Vec<RowKey> {
        keys.iter()
            .map(AsRef::as_ref)
            .filter(|key| self.address_of(key).is_some())
            .map(str::to_string)
            .collect()
    }

    /// Whether the cache holds a version of the table, so that bringing it to another
    /// reads only what changed since.
    pub(crate) fn is_warm(&self) -> bool {
        !self.fragments.is_empty()
    }

    /// The fragments that hold any of `keys`, each once, in order; keys the table lacks
    /// are in none.
    pub(crate) fn fragments_of(&self, keys: &[impl AsRef<str>]) -> Vec<u64> {
        let mut fragments: Vec<u64> = keys
            .iter()
            .filter_map(|key| self.address_of(key.as_ref()))
            .map(|address| address >> 32)
            .collect();
        fragments.sort_unstable();
        fragments.dedup();
        fragments
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
        let address = fragment.id << 32 | OFFSET_UNKNOWN;
        self.fragments
            .insert(fragment.id, FragmentRead::new((*fragment).clone(), false));
        self.keys
            .extend(added.into_iter().map(|key| (key, address)));
        self.version = table.manifest().version;
    }
}

/// The offsets marked deleted in `fragment` of `table`, in order.
async fn deleted_offsets(table: &Arc<Dataset>, fragment: &Fragment) -> Result<Vec<u32>> {
    if fragment.deletion_file.is_none() {
        return Ok(Vec::new());
    }
    let vector = FileFragment::new(table.clone(), fragment.clone())
        .get_deletion_vector()
        .await
        .map_err(|error| OmniError::from_lance("read a deletion file", error))?;
    let mut offsets: Vec<u32> = vector
        .map(|vector| vector.iter().collect())
        .unwrap_or_default();
    offsets.sort_unstable();
    Ok(offsets)
}
