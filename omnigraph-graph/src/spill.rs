//! The keys a load keeps, within a memory budget whatever the size of its input.
//!
//! A load must find a key given twice, and an edge whose endpoint is neither in the call
//! nor in the table, which means keeping every key it has seen. A `SpillKeys` keeps
//! them compactly: the bytes of all keys in one buffer, a hash table of positions into
//! it, and each key's row. Past its budget it writes its keys, sorted, as one run to a
//! file in the spill directory and starts again empty. A repeat within memory is found
//! as the key arrives; repeats across runs, and membership of keys that spilled, are
//! found by merging the sorted runs once the input is read. Run files are removed when
//! the set is dropped.

use super::hash_slots::HashSlots;
use crate::limits::{KEY_SET_MEMORY_BYTES_MAX, SPILL_RUNS_MAX};
use omnigraph_core::{OmniError, Result, StorageKind};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::hash::BuildHasher;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// The read buffer of each run while runs are merged.
const RUN_READ_BUFFER_BYTES: usize = 64 << 10;
/// Bytes of one record after its key: source, tag, line, row.
const RECORD_TAIL_BYTES: usize = 24;

/// Where a load keeps its keys: the memory budget of each key set and the directory of
/// its spilled runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadBudget {
    /// The memory one key set holds before it spills (see [`KEY_SET_MEMORY_BYTES_MAX`]).
    pub key_set_memory_bytes_max: usize,
    /// The directory of spilled runs; the system's temporary directory by default.
    pub spill_dir: PathBuf,
    /// What a warm handle keeps of a JSONL input it cannot read twice (see
    /// [`crate::limits::INPUT_SPOOL_BYTES_MAX`]).
    pub input_spool_bytes_max: usize,
}

impl Default for LoadBudget {
    fn default() -> LoadBudget {
        LoadBudget {
            key_set_memory_bytes_max: KEY_SET_MEMORY_BYTES_MAX,
            spill_dir: std::env::temp_dir(),
            input_spool_bytes_max: crate::limits::INPUT_SPOOL_BYTES_MAX,
        }
    }
}

/// The row that gave a key: the caller's indexes into its own name table, an opaque tag,
/// and the line and row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RowRef {
    /// Index of the source's name.
    pub(crate) source: u32,
    /// The caller's: for an endpoint, its edge type and role.
    pub(crate) tag: u32,
    /// One-based line, 0 for none.
    line: u64,
    /// Zero-based position in the call.
    pub(crate) row: u64,
}

impl RowRef {
    pub(crate) fn new(source: u32, tag: u32, line: Option<u64>, row: u64) -> RowRef {
        assert!(line != Some(0), "lines are counted from one");
        RowRef {
            source,
            tag,
            line: line.unwrap_or(0),
            row,
        }
    }

    pub(crate) fn line(&self) -> Option<u64> {
        (self.line != 0).then_some(self.line)
    }

    fn write_tail(&self, out: &mut impl Write) -> std::io::Result<()> {
        out.write_all(&self.source.to_le_bytes())?;
        out.write_all(&self.tag.to_le_bytes())?;
        out.write_all(&self.line.to_le_bytes())?;
        out.write_all(&self.row.to_le_bytes())
    }

    fn read_tail(tail: &[u8; RECORD_TAIL_BYTES]) -> RowRef {
        let u32_at = |at: usize| u32::from_le_bytes(tail[at..at + 4].try_into().unwrap_or([0; 4]));
        let u64_at = |at: usize| u64::from_le_bytes(tail[at..at + 8].try_into().unwrap_or([0; 8]));
        RowRef {
            source: u32_at(0),
            tag: u32_at(4),
            line: u64_at(8),
            row: u64_at(16),
        }
    }
}

/// One key in memory: where its bytes are in the buffer, and its row.
#[derive(Clone, Copy)]
struct Entry {
    start: u32,
    len: u32,
    at: RowRef,
}

/// One sorted run on disk.
struct Run {
    file: tempfile::TempPath,
    records: u64,
    /// The largest parts written: a record read back claiming more is corrupt.
    bounds: RecordBounds,
}

/// The largest key length, source and tag a run holds.
#[derive(Clone, Copy, Debug, Default)]
struct RecordBounds {
    key_bytes: u32,
    source: u32,
    tag: u32,
}

/// Keys with their rows, unique within memory, spilled in sorted runs past a budget.
pub(crate) struct SpillKeys {
    bytes: Vec<u8>,
    entries: Vec<Entry>,
    index: HashSlots,
    hasher: foldhash::fast::RandomState,
    /// The hashes of the batch [`SpillKeys::hash_batch`] was last given, under this
    /// set's own seed: kept here, a batch's hashes cannot reach another set.
    batch_hashes: Vec<u32>,
    runs: Vec<Run>,
    spilled: u64,
    budget: LoadBudget,
}

impl SpillKeys {
    pub(crate) fn new(budget: &LoadBudget) -> SpillKeys {
        SpillKeys {
            bytes: Vec::new(),
            entries: Vec::new(),
            index: HashSlots::default(),
            hasher: foldhash::fast::RandomState::default(),
            batch_hashes: Vec::new(),
            runs: Vec::new(),
            spilled: 0,
            budget: budget.clone(),
        }
    }

    /// Keys held, in memory and spilled.
    pub(crate) fn len(&self) -> u64 {
        self.spilled + self.entries.len() as u64
    }

    /// Whether some keys are only on disk: then [`SpillKeys::held_in_memory`] can miss a
    /// key the set holds.
    pub(crate) fn has_spilled(&self) -> bool {
        !self.runs.is_empty()
    }

    fn key_of(&self, entry: &Entry) -> &[u8] {
        &self.bytes[entry.start as usize..(entry.start + entry.len) as usize]
    }

    /// 32 bits of the hash of `key`.
    fn hash_of(&self, key: &[u8]) -> u32 {
        // The high half: foldhash mixes its last multiply into it.
        (self.hasher.hash_one(key) >> 32) as u32
    }

    fn find(&self, key: &[u8], hash: u32) -> Option<u32> {
        self.index.find(hash, |entry| {
            self.key_of(&self.entries[entry as usize]) == key
        })
    }

    /// Whether `key` is among the keys in memory.
    pub(crate) fn held_in_memory(&self, key: &str) -> bool {
        let key = key.as_bytes();
        self.find(key, self.hash_of(key)).is_some()
    }

    /// Adds `key` given by `at`; when memory already holds it, returns the row that gave
    /// it first and keeps that one. Spills a run when memory is over its budget.
    pub(crate) fn insert(&mut self, key: &str, at: RowRef) -> Result<Option<RowRef>> {
        let hash = self.hash_of(key.as_bytes());
        self.insert_with_hash(key, hash, at)
    }

    /// Hashes a batch's `keys` for [`SpillKeys::insert_from_batch`], and reads the
    /// table where each goes, so the inserts that follow find it near instead of
    /// waiting on memory one key after another.
    pub(crate) fn hash_batch<'k>(&mut self, keys: impl Iterator<Item = &'k str>) {
        let mut hashes = std::mem::take(&mut self.batch_hashes);
        hashes.clear();
        hashes.extend(keys.map(|key| self.hash_of(key.as_bytes())));
        std::hint::black_box(self.index.touch(&hashes));
        self.batch_hashes = hashes;
    }

    /// [`SpillKeys::insert`] of `key`, the `at`-th of the batch last given to
    /// [`SpillKeys::hash_batch`].
    pub(crate) fn insert_from_batch(
        &mut self,
        key: &str,
        at: usize,
        row: RowRef,
    ) -> Result<Option<RowRef>> {
        self.insert_with_hash(key, self.batch_hashes[at], row)
    }

    fn insert_with_hash(&mut self, key: &str, hash: u32, row: RowRef) -> Result<Option<RowRef>> {
        let key = key.as_bytes();
        debug_assert_eq!(hash, self.hash_of(key), "a hash of another key");
        let len =
            u32::try_from(key.len()).map_err(|_| OmniError::internal("a key of 4 GiB or more"))?;
        if u32::try_from(self.bytes.len() + key.len()).is_err()
            || self.entries.len() > crate::limits::ENTRIES_MAX
        {
            // Positions and entry numbers are 32-bit: a budget near 4 GiB spills before
            // they overflow.
            self.spill()?;
        }
        let start = u32::try_from(self.bytes.len())
            .map_err(|_| OmniError::internal("a key buffer past 4 GiB after a spill"))?;
        let entry = u32::try_from(self.entries.len())
            .map_err(|_| OmniError::internal("a key set past its entry numbers after a spill"))?;
        let (entries, bytes) = (&self.entries, &self.bytes);
        // One probe finds the key or the slot it goes in.
        let held = self.index.find_or_insert(hash, entry, |held| {
            let held = &entries[held as usize];
            &bytes[held.start as usize..(held.start + held.len) as usize] == key
        });
        if let Some(held) = held {
            return Ok(Some(self.entries[held as usize].at));
        }
        self.bytes.extend_from_slice(key);
        self.entries.push(Entry {
            start,
            len,
            at: row,
        });
        debug_assert_eq!(self.index.len(), self.entries.len(), "one slot per entry");
        if self.memory_bytes() > self.budget.key_set_memory_bytes_max {
            self.spill()?;
        }
        Ok(None)
    }

    /// Makes room in an empty set for `keys` keys of about `key_bytes_each` bytes, as
    /// far as the budget allows: a load that knows its rows grows the set once, instead
    /// of doubling it and rehashing every slot along the way.
    pub(crate) fn reserve(&mut self, keys: usize, key_bytes_each: usize) {
        assert!(self.entries.is_empty(), "room is made before the first key");
        // A table made for n keys takes at most BYTES_PER_KEY_MAX bytes a key, past its
        // least size of 16 slots.
        let per_key =
            std::mem::size_of::<Entry>() + crate::limits::BYTES_PER_KEY_MAX + key_bytes_each;
        let keys = keys.min(self.budget.key_set_memory_bytes_max / per_key);
        self.entries.reserve_exact(keys);
        self.bytes.reserve_exact(keys * key_bytes_each);
        self.index = HashSlots::with_keys(keys);
        if self.memory_bytes() > self.budget.key_set_memory_bytes_max {
            // A small table's least size can pass a tiny budget: grow as keys come.
            self.bytes = Vec::new();
            self.entries = Vec::new();
            self.index = HashSlots::default();
        }
    }

    /// The memory held: buffers by capacity, and the table's slots.
    fn memory_bytes(&self) -> usize {
        self.bytes.capacity()
            + self.entries.capacity() * std::mem::size_of::<Entry>()
            + self.index.memory_bytes()
    }

    /// The entries in memory, in key order.
    fn sorted_entries(&self) -> Vec<Entry> {
        let mut sorted = self.entries.clone();
        sorted.sort_unstable_by(|a, b| self.key_of(a).cmp(self.key_of(b)));
        sorted
    }

    /// Writes the keys in memory as one sorted run and empties memory.
    fn spill(&mut self) -> Result<()> {
        if self.entries.is_empty() {
            return Ok(());
        }
        if self.runs.len() >= SPILL_RUNS_MAX {
            return Err(OmniError::bad_input(
                omnigraph_core::InputLocation::default(),
                format!(
                    "this load gives more keys than {SPILL_RUNS_MAX} spilled runs of {} bytes hold ({} keys so far): load it in parts, or give it a larger budget",
                    self.budget.key_set_memory_bytes_max,
                    self.len()
                ),
            ));
        }
        let dir = &self.budget.spill_dir;
        let file = tempfile::Builder::new()
            .prefix("omnigraph-keys-")
            .tempfile_in(dir)
            .map_err(|error| spill_error(dir, error))?;
        let (file, path) = file.into_parts();
        let mut out = BufWriter::new(file);
        let mut bounds = RecordBounds::default();
        let sorted = self.sorted_entries();
        let written: std::io::Result<()> = (|| {
            for entry in &sorted {
                bounds.key_bytes = bounds.key_bytes.max(entry.len);
                bounds.source = bounds.source.max(entry.at.source);
                bounds.tag = bounds.tag.max(entry.at.tag);
                out.write_all(&entry.len.to_le_bytes())?;
                out.write_all(self.key_of(entry))?;
                entry.at.write_tail(&mut out)?;
            }
            out.flush()
        })();
        written.map_err(|error| spill_error(dir, error))?;
        self.runs.push(Run {
            file: path,
            records: sorted.len() as u64,
            bounds,
        });
        self.spilled += sorted.len() as u64;
        self.bytes = Vec::new();
        self.entries = Vec::new();
        self.index = HashSlots::default();
        Ok(())
    }

    /// Every key with its row, in key order; a key held by several runs comes once per
    /// run, in row order.
    pub(crate) fn sorted(&self) -> Result<Sorted<'_>> {
        let mut cursors = Vec::with_capacity(self.runs.len() + 1);
        for run in &self.runs {
            let file =
                std::fs::File::open(&run.file).map_err(|error| spill_error(&run.file, error))?;
            cursors.push(Cursor::Run {
                reader: BufReader::with_capacity(RUN_READ_BUFFER_BYTES, file),
                left: run.records,
                bounds: run.bounds,
                path: run.file.to_path_buf(),
            });
        }
        cursors.push(Cursor::Memory {
            entries: self.sorted_entries().into_iter(),
        });
        let mut sorted = Sorted {
            set: self,
            previous: None,
            rows: vec![RowRef::new(0, 0, None, 0); cursors.len()],
            cursors,
            heap: BinaryHeap::new(),
        };
        for cursor in 0..sorted.cursors.len() {
            sorted.advance(cursor)?;
        }
        Ok(sorted)
    }

    /// Every distinct key with its earliest row, in key order, in chunks of at most
    /// `chunk_max`: what a check reads back to look keys up in bounded batches.
    pub(crate) fn distinct_chunks(&self, chunk_max: usize) -> Result<DistinctChunks<'_>> {
        assert!(chunk_max > 0, "a chunk holds a key");
        Ok(DistinctChunks {
            sorted: self.sorted()?,
            previous: None,
            chunk_max,
        })
    }

    /// The first repeated key in row order: of each key given more than once, its second
    /// row, and of those the earliest.
    pub(crate) fn first_repeat(&self) -> Result<Option<(String, RowRef)>> {
        if !self.has_spilled() {
            // Memory never holds a key twice.
            return Ok(None);
        }
        let mut first: Option<(String, RowRef)> = None;
        let mut previous: Option<String> = None;
        for item in self.sorted()? {
            let (key, at) = item?;
            if previous.as_deref() == Some(key.as_str()) {
                if first.as_ref().is_none_or(|(_, held)| at.row < held.row) {
                    first = Some((key.clone(), at));
                }
            } else {
                previous = Some(key);
            }
        }
        Ok(first)
    }

    /// The keys, when none spilled (then they are all in memory).
    pub(crate) fn into_keys(self) -> Option<Vec<String>> {
        if self.has_spilled() {
            return None;
        }
        Some(
            self.entries
                .iter()
                .map(|entry| String::from_utf8_lossy(self.key_of(entry)).into_owned())
                .collect(),
        )
    }
}

/// A set's distinct keys in key order, in chunks ([`SpillKeys::distinct_chunks`]).
pub(crate) struct DistinctChunks<'a> {
    sorted: Sorted<'a>,
    previous: Option<String>,
    chunk_max: usize,
}

impl Iterator for DistinctChunks<'_> {
    type Item = Result<Vec<(String, RowRef)>>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut chunk = Vec::new();
        while chunk.len() < self.chunk_max {
            let Some(record) = self.sorted.next() else {
                break;
            };
            let (key, at) = match record {
                Ok(record) => record,
                Err(error) => return Some(Err(error)),
            };
            // A key in several runs comes once per run, its earliest row first.
            if self.previous.as_ref() == Some(&key) {
                continue;
            }
            self.previous = Some(key.clone());
            chunk.push((key, at));
        }
        (!chunk.is_empty()).then_some(Ok(chunk))
    }
}

/// A source of sorted records: a run on disk or the entries in memory.
enum Cursor {
    Run {
        reader: BufReader<std::fs::File>,
        left: u64,
        bounds: RecordBounds,
        path: PathBuf,
    },
    Memory {
        entries: std::vec::IntoIter<Entry>,
    },
}

/// The merge of a set's runs and memory, in key order.
pub(crate) struct Sorted<'a> {
    set: &'a SpillKeys,
    cursors: Vec<Cursor>,
    /// The next record of each cursor that has one, by key, row and cursor.
    heap: BinaryHeap<Reverse<(Vec<u8>, u64, usize)>>,
    /// Per cursor, the row of its record in the heap.
    rows: Vec<RowRef>,
    /// The last record given, by key and row: each comes after it, or a run is corrupt
    /// (out of order, a merge would miss repeats).
    previous: Option<(Vec<u8>, u64)>,
}

impl Sorted<'_> {
    /// Reads the next record of `cursor` into the heap, if it has one.
    fn advance(&mut self, cursor: usize) -> Result<()> {
        let next = match &mut self.cursors[cursor] {
            Cursor::Memory { entries } => entries
                .next()
                .map(|entry| (self.set.key_of(&entry).to_vec(), entry.at)),
            Cursor::Run {
                reader,
                left,
                bounds,
                path,
            } => {
                if *left == 0 {
                    None
                } else {
                    *left -= 1;
                    Some(read_record(reader, *bounds).map_err(|error| spill_error(path, error))?)
                }
            }
        };
        if let Some((key, at)) = next {
            self.rows[cursor] = at;
            self.heap.push(Reverse((key, at.row, cursor)));
        }
        Ok(())
    }
}

impl Iterator for Sorted<'_> {
    type Item = Result<(String, RowRef)>;

    fn next(&mut self) -> Option<Self::Item> {
        let Reverse((key, row, cursor)) = self.heap.pop()?;
        let at = self.rows[cursor];
        if let Some((previous, previous_row)) = &self.previous
            && (key.as_slice(), row) < (previous.as_slice(), *previous_row)
        {
            return Some(Err(OmniError::Corrupt {
                object: "a load's spilled keys".into(),
                message: "a run's keys are out of order".into(),
                evidence: omnigraph_core::Evidence::BeforeEffect,
            }));
        }
        self.previous = Some((key.clone(), row));
        if let Err(error) = self.advance(cursor) {
            return Some(Err(error));
        }
        Some(
            String::from_utf8(key)
                .map(|key| (key, at))
                .map_err(|_| OmniError::internal("a spilled key is not UTF-8")),
        )
    }
}

/// One record of a run: key length, key, then the row; each part within the run's
/// `bounds`.
fn read_record(reader: &mut impl Read, bounds: RecordBounds) -> std::io::Result<(Vec<u8>, RowRef)> {
    let invalid = |message: String| std::io::Error::new(std::io::ErrorKind::InvalidData, message);
    let mut len = [0u8; 4];
    reader.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len);
    if len > bounds.key_bytes {
        return Err(invalid(format!(
            "a record claims a key of {len} bytes; the run's longest is {}",
            bounds.key_bytes
        )));
    }
    let mut key = vec![0u8; len as usize];
    reader.read_exact(&mut key)?;
    let mut tail = [0u8; RECORD_TAIL_BYTES];
    reader.read_exact(&mut tail)?;
    let at = RowRef::read_tail(&tail);
    if at.source > bounds.source || at.tag > bounds.tag {
        return Err(invalid(format!(
            "a record claims source {} and tag {}; the run's largest are {} and {}",
            at.source, at.tag, bounds.source, bounds.tag
        )));
    }
    Ok((key, at))
}

/// A failure to write or read a run under `path`, classified by its kind.
fn spill_error(path: &Path, error: std::io::Error) -> OmniError {
    let kind = match error.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied => {
            StorageKind::Configuration
        }
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::InvalidData => StorageKind::Permanent,
        _ => StorageKind::Unknown,
    };
    OmniError::storage(
        kind,
        format!("spill a load's keys to {}", path.display()),
        Box::new(error),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(dir: &Path) -> LoadBudget {
        LoadBudget {
            key_set_memory_bytes_max: 512,
            spill_dir: dir.to_path_buf(),
            ..LoadBudget::default()
        }
    }

    fn at(row: u64) -> RowRef {
        RowRef::new(0, 0, Some(row + 1), row)
    }

    #[test]
    fn room_made_for_the_rows_a_file_states_stays_within_the_budget() {
        let dir = tempfile::tempdir().expect("dir");
        let budget = LoadBudget {
            key_set_memory_bytes_max: 1 << 20,
            spill_dir: dir.path().to_path_buf(),
            ..LoadBudget::default()
        };
        // Room for what the file states: the keys arrive without the set growing.
        let mut keys = SpillKeys::new(&budget);
        keys.reserve(5_000, 8);
        let reserved = keys.memory_bytes();
        assert!(reserved <= budget.key_set_memory_bytes_max, "{reserved}");
        for row in 0..5_000u64 {
            assert_eq!(
                keys.insert(&format!("\"k{row:05}\""), at(row))
                    .expect("insert"),
                None
            );
        }
        assert_eq!(keys.memory_bytes(), reserved, "no key grew the set");
        assert!(!keys.has_spilled());
        assert_eq!(
            keys.insert("\"k00007\"", at(5_000)).expect("insert"),
            Some(at(7))
        );
        // A file that claims more rows than the budget holds gets room within the
        // budget, and its keys past that room spill as usual.
        let mut keys = SpillKeys::new(&budget);
        keys.reserve(usize::MAX / 2, 8);
        assert!(keys.memory_bytes() <= budget.key_set_memory_bytes_max);
        for row in 0..40_000u64 {
            assert_eq!(
                keys.insert(&format!("\"k{row:05}\""), at(row))
                    .expect("insert"),
                None
            );
        }
        assert!(keys.has_spilled(), "40,000 keys pass a 1 MiB budget");
        assert_eq!(keys.len(), 40_000);
        // A budget below a table's least size makes no room: the set grows as keys
        // come, and spills as usual.
        let mut keys = SpillKeys::new(&LoadBudget {
            key_set_memory_bytes_max: 100,
            spill_dir: dir.path().to_path_buf(),
            ..LoadBudget::default()
        });
        // Room for one key by the estimate, but a table's 16 slots alone take 128 bytes.
        keys.reserve(1, 8);
        assert_eq!(keys.memory_bytes(), 0, "no room made past the budget");
        assert_eq!(keys.insert("\"k\"", at(0)).expect("insert"), None);
        assert_eq!(keys.len(), 1);
    }

    #[test]
    fn a_hashed_batch_finds_its_repeats_within_it_and_in_the_set() {
        let dir = tempfile::tempdir().expect("dir");
        let mut keys = SpillKeys::new(&tiny(dir.path()));
        let batch = ["\"a\"", "\"b\"", "\"a\""];
        keys.hash_batch(batch.iter().copied());
        let kept: Vec<Option<RowRef>> = batch
            .iter()
            .enumerate()
            .map(|(row, key)| {
                keys.insert_from_batch(key, row, at(row as u64))
                    .expect("insert")
            })
            .collect();
        assert_eq!(kept, [None, None, Some(at(0))]);
        // The next batch's hashes replace these: "b" is found from the first batch.
        keys.hash_batch(["\"c\"", "\"b\""].into_iter());
        assert_eq!(
            keys.insert_from_batch("\"c\"", 0, at(3)).expect("insert"),
            None
        );
        assert_eq!(
            keys.insert_from_batch("\"b\"", 1, at(4)).expect("insert"),
            Some(at(1))
        );
        assert_eq!(keys.len(), 3);
    }

    #[test]
    fn a_repeat_across_runs_is_found_at_its_second_row() {
        let dir = tempfile::tempdir().expect("dir");
        let mut keys = SpillKeys::new(&tiny(dir.path()));
        for row in 0..2_000u64 {
            assert_eq!(
                keys.insert(&format!("\"k{row}\""), at(row))
                    .expect("insert"),
                None
            );
        }
        assert!(keys.has_spilled(), "a 512-byte budget spills 2,000 keys");
        assert_eq!(keys.first_repeat().expect("merge"), None);
        // k5 spilled long ago: memory does not see it, the merge does.
        assert!(!keys.held_in_memory("\"k5\""));
        assert_eq!(keys.insert("\"k5\"", at(2_000)).expect("insert"), None);
        assert_eq!(keys.insert("\"k7\"", at(2_001)).expect("insert"), None);
        let (key, row) = keys.first_repeat().expect("merge").expect("a repeat");
        assert_eq!(
            (key.as_str(), row.row, row.line()),
            ("\"k5\"", 2_000, Some(2_001))
        );
        // Every key comes back once, in key order, from runs and memory alike.
        let sorted: Vec<String> = keys
            .sorted()
            .expect("merge")
            .map(|item| item.expect("record").0)
            .collect();
        assert_eq!(sorted.len(), 2_002);
        assert!(sorted.windows(2).all(|pair| pair[0] <= pair[1]));
        assert_eq!(sorted.iter().filter(|key| *key == "\"k5\"").count(), 2);
        // Read back in chunks, each key comes once, with its first row.
        let chunks: Vec<Vec<(String, RowRef)>> = keys
            .distinct_chunks(500)
            .expect("merge")
            .map(|chunk| chunk.expect("records"))
            .collect();
        assert!(chunks.iter().all(|chunk| chunk.len() <= 500));
        let distinct: Vec<&(String, RowRef)> = chunks.iter().flatten().collect();
        assert_eq!(distinct.len(), 2_000);
        let k5 = distinct
            .iter()
            .find(|(key, _)| key == "\"k5\"")
            .expect("k5");
        assert_eq!(k5.1.row, 5, "the first row of a key given twice");
        assert_eq!(keys.len(), 2_002);
        let runs: Vec<PathBuf> = keys.runs.iter().map(|run| run.file.to_path_buf()).collect();
        assert!(runs.iter().all(|run| run.exists()));
        drop(keys);
        assert!(runs.iter().all(|run| !run.exists()), "runs go with the set");
    }

    #[test]
    fn a_set_past_its_runs_is_refused_naming_the_limit() {
        let dir = tempfile::tempdir().expect("dir");
        let mut keys = SpillKeys::new(&tiny(dir.path()));
        let refused = (0..1_000_000u64)
            .find_map(|row| keys.insert(&format!("\"k{row}\""), at(row)).err())
            .expect("a 512-byte budget runs out of runs");
        assert_eq!(keys.runs.len(), SPILL_RUNS_MAX);
        assert_eq!(
            refused.kind(),
            omnigraph_core::ErrorKind::BadInput,
            "{refused}"
        );
        assert!(
            refused.to_string().contains("256 spilled runs"),
            "{refused}"
        );
    }

    #[test]
    fn memory_refuses_a_repeat_as_it_arrives_and_keeps_the_first_row() {
        let dir = tempfile::tempdir().expect("dir");
        let mut keys = SpillKeys::new(&LoadBudget {
            spill_dir: dir.path().to_path_buf(),
            ..LoadBudget::default()
        });
        assert_eq!(keys.insert("\"a\"", at(0)).expect("insert"), None);
        assert_eq!(keys.insert("\"a\"", at(1)).expect("insert"), Some(at(0)));
        assert!(!keys.has_spilled());
        assert_eq!(keys.into_keys(), Some(vec!["\"a\"".to_string()]));
    }

    #[test]
    fn a_run_out_of_order_is_corrupt_not_a_missed_repeat() {
        let dir = tempfile::tempdir().expect("dir");
        let mut keys = SpillKeys::new(&tiny(dir.path()));
        for row in 0..100u64 {
            keys.insert(&format!("\"k{row:03}\""), at(row))
                .expect("insert");
        }
        assert!(keys.has_spilled());
        // The first run rewritten with its two records out of order.
        let mut records = Vec::new();
        for key in ["\"k002\"", "\"k001\""] {
            records.extend_from_slice(&(key.len() as u32).to_le_bytes());
            records.extend_from_slice(key.as_bytes());
            at(1).write_tail(&mut records).expect("tail");
        }
        std::fs::write(&keys.runs[0].file, records).expect("rewrite");
        keys.runs[0].records = 2;
        match keys.first_repeat() {
            Err(OmniError::Corrupt { message, .. }) => assert!(message.contains("out of order")),
            other => panic!("expected a corrupt run, got {other:?}"),
        }
    }

    #[test]
    fn a_run_whose_record_claims_more_than_was_written_is_refused() {
        let mut record = Vec::new();
        record.extend_from_slice(&9u32.to_le_bytes());
        record.extend_from_slice(b"123456789");
        record.extend_from_slice(&[0u8; RECORD_TAIL_BYTES]);
        let bounds = |key_bytes: u32, source: u32| RecordBounds {
            key_bytes,
            source,
            tag: 0,
        };
        assert!(read_record(&mut record.as_slice(), bounds(9, 0)).is_ok());
        let error =
            read_record(&mut record.as_slice(), bounds(4, 0)).expect_err("longer than the run's");
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidData);
        let error = read_record(&mut &record[..20], bounds(9, 0)).expect_err("truncated");
        assert_eq!(error.kind(), std::io::ErrorKind::UnexpectedEof);
        // A source past the largest the run wrote: a name the call never had.
        record[13] = 3;
        let error = read_record(&mut record.as_slice(), bounds(9, 2)).expect_err("source");
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidData);
        assert!(read_record(&mut record.as_slice(), bounds(9, 3)).is_ok());
    }
}
