//! The keys of a table, kept by a warm handle so that checking a new row's key costs no
//! request, and so that a write of a few keys, or a `get` at the head, knows which
//! fragments hold them.
//!
//! Each key is kept with its row address (fragment and offset), and each fragment with
//! what it was when read: its files and the rows marked deleted in it. Bringing the
//! cache to a newer version of the table reads only what it lacks:
//! - a fragment added since has its keys read;
//! - a fragment that only lost rows since (the same files, a newer deletion file: what a
//!   delete or an update does to the fragments it touches) has only its deletion file
//!   read, and the keys at the deleted offsets stop counting; one whose deleted rows are
//!   live again (an older state of the table, on another branch) is read again;
//! - a fragment that changed otherwise has its keys read again;
//! - a fragment that is gone (compacted, or all its rows deleted) takes its keys with it.
//!
//! So another writer's delete of one row costs the next write one small deletion file,
//! not the table's keys. After its own append the handle extends the cache with the
//! keys it wrote, so the next insert reads nothing.

use crate::limits::{CACHED_KEYS_PER_TABLE_MAX, DELETION_READS_IN_FLIGHT_MAX};
use crate::rows::{self, KeyMap, RowKey};
use futures::TryStreamExt;
use omnigraph_core::arrow_array::RecordBatch;
use omnigraph_core::fragments::{
    self, ROW_ADDRESS_COLUMN, same_files, split_row_address, stored_rows,
};
use omnigraph_core::lance::Dataset;
use omnigraph_core::lance::dataset::fragment::FileFragment;
use omnigraph_core::lance::table::format::Fragment;
use omnigraph_core::{OmniError, Result};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

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
    /// The offsets deleted in `now`, in order. Keys at them no longer count; a row
    /// deleted when the keys were read has no key here at all. A newer state of the
    /// fragment must keep every one of them deleted, or its keys are read again.
    deleted_now: Vec<u32>,
}

impl FragmentRead {
    fn holds(&self, address: u64) -> bool {
        let offset = address & OFFSET_UNKNOWN;
        offset == OFFSET_UNKNOWN || self.deleted_now.binary_search(&(offset as u32)).is_err()
    }
}

/// Whether the cache serves lookups of `type_def`'s key: a text or an integer, whose
/// rendering of a value and of a stored key is the same one-to-one text.
pub(crate) fn renders_alike(type_def: &omnigraph_core::schema::TypeDef) -> bool {
    use omnigraph_core::schema::PropertyType;
    matches!(
        type_def.key_type(),
        PropertyType::String | PropertyType::Int32 | PropertyType::Int64
    )
}

/// The keys of one table as of one version, each with the row that holds it.
#[derive(Debug, Default)]
pub(crate) struct TableKeys {
    /// The version every fragment and key describes; `None` while a refresh is under
    /// way (a refresh dropped at an await leaves each fragment and its keys consistent,
    /// but the cache no longer describes the version it held, nor yet the new one).
    version: Option<u64>,
    fragments: HashMap<u64, FragmentRead>,
    /// Key to row address (fragment << 32 | offset).
    keys: KeyMap<u64>,
    /// Whether the next refresh reads again the fragments whose keys were kept without
    /// their rows' places (a query asked for such a row).
    readdress: bool,
    /// The version of the table a refresh last failed to bring the cache to.
    failed_at: Option<u64>,
}

impl TableKeys {
    /// Brings the cache to `table` (reading only what it lacks) and returns whether it
    /// now holds every key of `table`. `false` when the table has too many keys. A
    /// failed read leaves the cache empty, never half brought up to date.
    pub(crate) async fn refresh(&mut self, table: &Arc<Dataset>, key_column: &str) -> Result<bool> {
        let refreshed = self.bring_to(table, key_column).await;
        if !matches!(refreshed, Ok(true)) {
            *self = TableKeys::default();
        }
        refreshed
    }

    async fn bring_to(&mut self, table: &Arc<Dataset>, key_column: &str) -> Result<bool> {
        use futures::StreamExt;
        let version = table.manifest().version;
        if self.version == Some(version) && !self.fragments.is_empty() {
            return Ok(true);
        }
        let current = fragments::by_id(&table.manifest().fragments);
        let mut stale: HashSet<u64> = HashSet::new();
        let mut lost_rows: Vec<Fragment> = Vec::new();
        for (id, known) in &self.fragments {
            match current.get(id) {
                Some(now) if **now == known.now && (known.addressed || !self.readdress) => {}
                Some(now) if known.addressed && same_files(&known.read, now) => {
                    lost_rows.push((*now).clone());
                }
                _ => {
                    stale.insert(*id);
                }
            }
        }
        // Fragments that only lost rows: their deletion files, read before anything
        // changes.
        let deletions: Vec<(u64, Vec<u32>)> = futures::stream::iter(lost_rows)
            .map(|fragment| async move {
                let id = fragment.id;
                deleted_offsets(table, &fragment)
                    .await
                    .map(|deleted| (id, deleted))
            })
            .buffer_unordered(DELETION_READS_IN_FLIGHT_MAX)
            .try_collect()
            .await?;
        let mut losses = Vec::with_capacity(deletions.len());
        for (id, deleted) in deletions {
            let known = &self.fragments[&id];
            if known
                .deleted_now
                .iter()
                .any(|offset| deleted.binary_search(offset).is_err())
            {
                // A row deleted before is live again (an older state of the table):
                // its key may be kept elsewhere or not at all, so read it again.
                stale.insert(id);
            } else {
                losses.push((id, deleted));
            }
        }
        // From here the cache describes no one version until the end: a refresh
        // dropped at the key read below (a query past its time) must not leave the old
        // version's number on fragments brought forward.
        self.version = None;
        if !stale.is_empty() {
            self.keys
                .retain(|_, address| !stale.contains(&split_row_address(*address).0));
            self.fragments.retain(|id, _| !stale.contains(id));
        }
        for (id, deleted) in losses {
            let known = self.fragments.get_mut(&id).ok_or_else(|| {
                OmniError::internal(format!(
                    "fragment {id}, which lost rows, left the key cache"
                ))
            })?;
            known.now = (*current[&id]).clone();
            known.deleted_now = deleted;
        }
        let missing: Vec<Fragment> = table
            .manifest()
            .fragments
            .iter()
            .filter(|fragment| !self.fragments.contains_key(&fragment.id))
            .cloned()
            .collect();
        let missing_rows: u64 = missing.iter().map(stored_rows).sum();
        if self.keys.len() as u64 + missing_rows > CACHED_KEYS_PER_TABLE_MAX as u64 {
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
            // Per fragment read, which of its rows the scan returned: the others were
            // deleted when it was read.
            let mut live: HashMap<u64, Vec<bool>> = missing
                .iter()
                .map(|fragment| {
                    (
                        fragment.id,
                        vec![false; fragment.physical_rows.unwrap_or(0)],
                    )
                })
                .collect();
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
                    let (fragment, offset) = split_row_address(address);
                    let seen = live
                        .get_mut(&fragment)
                        .and_then(|rows| rows.get_mut(offset as usize))
                        .ok_or_else(|| {
                            OmniError::internal(format!(
                                "a key scan returned row {offset} of fragment {fragment}, \
                                 which the fragments it read do not have"
                            ))
                        })?;
                    *seen = true;
                    self.keys.insert(
                        rows::render_array_key(batch.column(0).as_ref(), row),
                        address,
                    );
                }
            }
            for fragment in missing {
                let deleted_now = live[&fragment.id]
                    .iter()
                    .enumerate()
                    .filter(|(_, seen)| !**seen)
                    .map(|(offset, _)| offset as u32)
                    .collect();
                self.fragments.insert(
                    fragment.id,
                    FragmentRead {
                        read: fragment.clone(),
                        now: fragment,
                        addressed: true,
                        deleted_now,
                    },
                );
            }
        }
        self.version = Some(version);
        self.readdress = false;
        Ok(true)
    }

    /// The row address of `key`, when the table holds it.
    fn address_of(&self, key: &str) -> Option<u64> {
        let address = *self.keys.get(key)?;
        let read = self.fragments.get(&split_row_address(address).0)?;
        read.holds(address).then_some(address)
    }

    /// Where the table's row of `key` is: `Some(None)` when the table lacks it, `None`
    /// when the cache holds the key without its row's offset (a fragment this handle
    /// appended).
    pub(crate) fn row_of(&self, key: &str) -> Option<Option<u64>> {
        match self.address_of(key) {
            None => Some(None),
            Some(address) if address & OFFSET_UNKNOWN == OFFSET_UNKNOWN => None,
            Some(address) => Some(Some(address)),
        }
    }

    /// Makes the next refresh read again the fragments whose keys this handle kept
    /// without their rows' places (its own appends), so that a query can read those
    /// rows from the cache too. Until then the cache describes no version.
    pub(crate) fn readdress(&mut self) {
        if self.fragments.values().any(|fragment| !fragment.addressed) {
            self.readdress = true;
            self.version = None;
        }
    }

    /// Remembers that a refresh to `version` failed or found too many keys (after it
    /// left the cache cold).
    pub(crate) fn failed(&mut self, version: u64) {
        self.failed_at = Some(version);
    }

    /// The version of the table a refresh last could not bring the cache to.
    pub(crate) fn failed_at(&self) -> Option<u64> {
        self.failed_at
    }

    /// The version of the table the cache describes, when it holds one.
    pub(crate) fn version(&self) -> Option<u64> {
        self.version.filter(|_| self.is_warm())
    }

    /// Which of `keys` the table holds.
    pub(crate) fn existing(&self, keys: &[impl AsRef<str>]) -> Vec<RowKey> {
        keys.iter()
            .map(AsRef::as_ref)
            .filter(|key| self.address_of(key).is_some())
            .map(str::to_string)
            .collect()
    }

    /// How many keys bringing the cache to `table` would read: the rows of the
    /// fragments added since, of those changed otherwise than by losing rows (whose
    /// deletion files alone are read), and of those with fewer rows deleted than the
    /// cache knows (an older state of the table, whose rows live again).
    pub(crate) fn keys_to_read(&self, table: &Dataset) -> u64 {
        table
            .manifest()
            .fragments
            .iter()
            .filter(|now| match self.fragments.get(&now.id) {
                Some(known) if known.now == **now && (known.addressed || !self.readdress) => false,
                Some(known) if known.addressed && same_files(&known.read, now) => {
                    let deleted = now
                        .deletion_file
                        .as_ref()
                        .map_or(0, |file| file.num_deleted_rows.unwrap_or(0));
                    deleted < known.deleted_now.len()
                }
                _ => true,
            })
            .map(stored_rows)
            .sum()
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
            .map(|address| split_row_address(address).0)
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
        if self.version == Some(table.manifest().version) && !self.fragments.is_empty() {
            // Already brought to the tip (a read at the head while the append
            // published): it read the appended fragment's keys itself.
            return;
        }
        if self.version != Some(base_version) || self.fragments.is_empty() {
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
        self.fragments.insert(
            fragment.id,
            FragmentRead {
                read: (*fragment).clone(),
                now: (*fragment).clone(),
                addressed: false,
                deleted_now: Vec::new(),
            },
        );
        self.keys
            .extend(added.into_iter().map(|key| (key, address)));
        self.version = Some(table.manifest().version);
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
