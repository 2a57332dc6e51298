//! The adjacency artifact (`docs/format.md` §6.4): the edges of one version of an edge
//! table as two compressed sparse rows, by source and by destination, over dense
//! positions of the endpoint keys those edges name. Optimize builds it after an edge
//! table's unit ([`Omnigraph::build_adjacency`]); a traversal step uses it only when it
//! was built from the very version the commit it reads pins, and otherwise reads the
//! edge table, with the same result. It is never part of correctness: an artifact that
//! is missing, unreadable or fails its checks is passed by, and the step says why.
//!
//! It is keyed by the edge table's version alone. A step's result depends on the edge
//! table only: every writer checks an edge's endpoints and a node delete deletes its
//! edges in the same commit, so an edge never names a missing node, and a node with no
//! edge reaches nothing either way. Writes to the node tables leave it current.

use crate::commit::{GraphCommit, TablePin};
use crate::graph::CommitRef;
use crate::layout;
use crate::omnigraph::Omnigraph;
use crate::rows::{self, RowKey};
use futures::TryStreamExt;
use omnigraph_core::arrow_array::cast::AsArray;
use omnigraph_core::arrow_array::{Array, RecordBatch};
use omnigraph_core::arrow_schema::DataType;
use omnigraph_core::lance::Dataset;
use omnigraph_core::schema::{EDGE_DST_COLUMN, EDGE_SRC_COLUMN};
use omnigraph_core::storage::PutOutcome;
use omnigraph_core::{OmniError, Result};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The artifact format this build writes and reads.
pub const ADJACENCY_FORMAT: u32 = 1;
/// The most edges one artifact holds. Building holds about 32 bytes per edge, and per
/// distinct endpoint key about 80 bytes plus three copies of its rendered text, beside
/// the artifact's own bytes; a larger table is skipped (said in optimize's report) and
/// read through its index.
pub const ADJACENCY_EDGES_MAX: u64 = 50_000_000;
/// The largest artifact a reader accepts, in bytes (checked from the GET's size before
/// the body is read); a builder skips one that would be larger.
pub const ADJACENCY_BYTES_MAX: u64 = 4 << 30;
/// The longest endpoint key an artifact holds, in bytes, as rendered.
pub const ADJACENCY_KEY_BYTES_MAX: usize = 64 << 10;
/// The artifacts a handle keeps in memory (one version per table: a newer one read
/// replaces it).
pub(crate) const ADJACENCY_CACHED_MAX: usize = 8;
/// The memory the artifacts a handle keeps may take, in bytes; past it the least
/// recently used go.
pub(crate) const ADJACENCY_CACHED_BYTES_MAX: u64 = 2 << 30;
/// How long a handle trusts that a version has no usable artifact (none, or one that
/// failed its checks) before it looks again: an optimize may build or replace it.
pub(crate) const ADJACENCY_MISS_RECHECK: Duration = Duration::from_secs(5);
/// The misses a handle remembers.
const ADJACENCY_MISSES_MAX: usize = 64;

const MAGIC: [u8; 8] = *b"OGADJ\0\0\0";
/// Magic, format, table id length, version, edges, nodes, key bytes.
const HEADER_BYTES: usize = 8 + 4 + 4 + 8 + 8 + 8 + 8;
const CHECKSUM_BYTES: usize = 4;

/// One direction's edges: the far positions of position `p`'s edges are
/// `ends[offsets[p]..offsets[p + 1]]`, in the edge table's scan order.
#[derive(Debug, PartialEq, Eq)]
struct Csr {
    offsets: Vec<u64>,
    ends: Vec<u32>,
}

impl Csr {
    /// The rows of `pairs` (near, far) over `nodes` positions, by a counting sort that
    /// keeps each near position's edges in the order given.
    fn of(nodes: usize, near: &[u32], far: &[u32]) -> Csr {
        assert_eq!(near.len(), far.len(), "one far end per near end");
        let mut offsets = vec![0u64; nodes + 1];
        for &position in near {
            offsets[position as usize + 1] += 1;
        }
        for index in 0..nodes {
            offsets[index + 1] += offsets[index];
        }
        let mut next: Vec<u64> = offsets[..nodes].to_vec();
        let mut ends = vec![0u32; near.len()];
        for (&from, &to) in near.iter().zip(far) {
            let slot = &mut next[from as usize];
            ends[*slot as usize] = to;
            *slot += 1;
        }
        Csr { offsets, ends }
    }

    fn ends_of(&self, position: u32) -> &[u32] {
        let position = position as usize;
        &self.ends[self.offsets[position] as usize..self.offsets[position + 1] as usize]
    }
}

/// Which of an artifact's two rows a step reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdjacencyWay {
    /// From sources to destinations.
    Out,
    /// From destinations to sources.
    In,
}

/// The adjacency of one version of one edge table, checked.
#[derive(Debug, PartialEq, Eq)]
pub struct Adjacency {
    table_id: String,
    version: u64,
    /// Position `p`'s rendered key is `keys[key_offsets[p]..key_offsets[p + 1]]`; keys
    /// are sorted and distinct, each on character boundaries.
    key_offsets: Vec<u64>,
    keys: String,
    out: Csr,
    into: Csr,
}

impl Adjacency {
    /// The edge table it was built from.
    pub fn table_id(&self) -> &str {
        &self.table_id
    }

    /// The version of the edge table it was built from.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Edges it holds.
    pub fn edges(&self) -> u64 {
        self.out.ends.len() as u64
    }

    /// Distinct endpoint keys it holds.
    pub fn nodes(&self) -> u64 {
        (self.key_offsets.len() - 1) as u64
    }

    /// The memory it takes, in bytes.
    fn memory_bytes(&self) -> u64 {
        (self.keys.len() + 8 * 3 * self.key_offsets.len() + 8 * self.out.ends.len()) as u64
    }

    fn key(&self, position: u32) -> &str {
        let position = position as usize;
        &self.keys[self.key_offsets[position] as usize..self.key_offsets[position + 1] as usize]
    }

    fn position(&self, key: &str) -> Option<u32> {
        let (mut low, mut high) = (0usize, self.key_offsets.len() - 1);
        while low < high {
            let middle = low + (high - low) / 2;
            match self.key(middle as u32).cmp(key) {
                std::cmp::Ordering::Less => low = middle + 1,
                std::cmp::Ordering::Greater => high = middle,
                std::cmp::Ordering::Equal => return Some(middle as u32),
            }
        }
        None
    }

    /// The rendered keys at the far end of `key`'s edges `way`, one per edge, in the
    /// edge table's order; none when no edge names `key` at that end.
    pub fn far_keys<'a>(&'a self, key: &str, way: AdjacencyWay) -> impl Iterator<Item = &'a str> {
        let rows = match way {
            AdjacencyWay::Out => &self.out,
            AdjacencyWay::In => &self.into,
        };
        let ends = self
            .position(key)
            .map_or(&[][..], |position| rows.ends_of(position));
        ends.iter().map(|&position| self.key(position))
    }

    /// The artifact's bytes (`docs/format.md` §6.4).
    pub fn encode(&self) -> Vec<u8> {
        let nodes = self.key_offsets.len() - 1;
        let edges = self.out.ends.len();
        let size = self.encoded_size();
        let mut bytes = Vec::with_capacity(size);
        bytes.extend_from_slice(&MAGIC);
        bytes.extend_from_slice(&ADJACENCY_FORMAT.to_le_bytes());
        bytes.extend_from_slice(&(self.table_id.len() as u32).to_le_bytes());
        for number in [
            self.version,
            edges as u64,
            nodes as u64,
            self.keys.len() as u64,
        ] {
            bytes.extend_from_slice(&number.to_le_bytes());
        }
        bytes.extend_from_slice(self.table_id.as_bytes());
        let words = |bytes: &mut Vec<u8>, words: &[u64]| {
            for word in words {
                bytes.extend_from_slice(&word.to_le_bytes());
            }
        };
        let ends = |bytes: &mut Vec<u8>, ends: &[u32]| {
            for end in ends {
                bytes.extend_from_slice(&end.to_le_bytes());
            }
        };
        words(&mut bytes, &self.key_offsets);
        bytes.extend_from_slice(self.keys.as_bytes());
        words(&mut bytes, &self.out.offsets);
        ends(&mut bytes, &self.out.ends);
        words(&mut bytes, &self.into.offsets);
        ends(&mut bytes, &self.into.ends);
        let checksum = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&checksum.to_le_bytes());
        assert_eq!(
            bytes.len(),
            size,
            "an artifact is as long as its header says"
        );
        bytes
    }

    /// The size of its bytes.
    pub fn encoded_size(&self) -> usize {
        encoded_size(
            self.table_id.len(),
            self.key_offsets.len() - 1,
            self.keys.len(),
            self.out.ends.len(),
        )
    }

    /// Reads an artifact back, checking every part before it is used: the checksum,
    /// that it was built from `pin` (table, version and row count), sizes that add up
    /// to the object's, offsets that rise within bounds, positions below the node
    /// count, and keys that are sorted, distinct JSON keys on character boundaries. The
    /// error says what failed.
    pub fn decode(bytes: &[u8], pin: &TablePin) -> std::result::Result<Adjacency, String> {
        if bytes.len() < HEADER_BYTES + CHECKSUM_BYTES {
            return Err(format!("{} bytes is shorter than a header", bytes.len()));
        }
        let (body, checksum) = bytes.split_at(bytes.len() - CHECKSUM_BYTES);
        let stored = u32::from_le_bytes(checksum.try_into().map_err(|_| "no checksum")?);
        if crc32fast::hash(body) != stored {
            return Err("the checksum does not match the bytes".into());
        }
        let mut reader = Reader { bytes: body, at: 0 };
        if reader.take(8)? != MAGIC {
            return Err("not an adjacency artifact (bad magic)".into());
        }
        let format = reader.u32()?;
        if format != ADJACENCY_FORMAT {
            return Err(format!(
                "format {format}; this build reads format {ADJACENCY_FORMAT}"
            ));
        }
        let id_len = reader.u32()? as usize;
        let version = reader.u64()?;
        let edges = reader.u64()?;
        let nodes = reader.u64()?;
        let key_bytes = reader.u64()?;
        if edges != pin.row_count || edges > ADJACENCY_EDGES_MAX {
            return Err(format!(
                "{edges} edges; the pinned version has {} rows",
                pin.row_count
            ));
        }
        // Every node is some edge's end.
        if nodes > 2 * edges || (edges > 0 && nodes == 0) {
            return Err(format!("{nodes} nodes cannot hold {edges} edges"));
        }
        if id_len > 64 || key_bytes > ADJACENCY_BYTES_MAX {
            return Err("a header size is out of bounds".into());
        }
        let (nodes, edges) = (nodes as usize, edges as usize);
        let key_bytes = usize::try_from(key_bytes).map_err(|_| "too many key bytes")?;
        if body.len() != encoded_size(id_len, nodes, key_bytes, edges) - CHECKSUM_BYTES {
            return Err(format!(
                "{} bytes; the header describes {}",
                bytes.len(),
                encoded_size(id_len, nodes, key_bytes, edges)
            ));
        }
        let table_id = std::str::from_utf8(reader.take(id_len)?)
            .map_err(|_| "the table id is not UTF-8")?
            .to_string();
        if table_id != pin.table_id || version != pin.version {
            return Err(format!(
                "built from {table_id} version {version}, not {} version {}",
                pin.table_id, pin.version
            ));
        }
        let key_offsets = reader.words(nodes + 1)?;
        let keys = std::str::from_utf8(reader.take(key_bytes)?)
            .map_err(|_| "the keys are not UTF-8")?
            .to_string();
        rising(&key_offsets, key_bytes as u64, "key")?;
        let out = reader.csr(nodes, edges)?;
        let into = reader.csr(nodes, edges)?;
        let adjacency = Adjacency {
            table_id,
            version,
            key_offsets,
            keys,
            out,
            into,
        };
        let mut previous: Option<&str> = None;
        for position in 0..nodes {
            let (start, end) = (
                adjacency.key_offsets[position] as usize,
                adjacency.key_offsets[position + 1] as usize,
            );
            if !adjacency.keys.is_char_boundary(start) || !adjacency.keys.is_char_boundary(end) {
                return Err(format!("key {position} splits a character"));
            }
            let key = adjacency.key(position as u32);
            if previous.is_some_and(|previous| previous >= key) {
                return Err(format!("key {position} is out of order"));
            }
            // Exactly as the engine renders a key: a reader compares keys by this text.
            let rendered = match serde_json::from_str::<Value>(key) {
                Ok(value @ (Value::String(_) | Value::Number(_))) => rows::render_key(&value),
                _ => String::new(),
            };
            if rendered != key {
                return Err(format!("key {position} is not a rendered key"));
            }
            previous = Some(key);
        }
        Ok(adjacency)
    }
}

fn encoded_size(id_len: usize, nodes: usize, key_bytes: usize, edges: usize) -> usize {
    HEADER_BYTES + id_len + 3 * 8 * (nodes + 1) + key_bytes + 2 * 4 * edges + CHECKSUM_BYTES
}

/// Offsets start at 0, never fall, and end at `end`.
fn rising(offsets: &[u64], end: u64, what: &str) -> std::result::Result<(), String> {
    let ordered = offsets.first() == Some(&0)
        && offsets.last() == Some(&end)
        && offsets.windows(2).all(|pair| pair[0] <= pair[1]);
    if ordered {
        Ok(())
    } else {
        Err(format!("the {what} offsets do not rise from 0 to {end}"))
    }
}

/// A cursor over an artifact's bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, count: usize) -> std::result::Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(count)
            .filter(|end| *end <= self.bytes.len())
            .ok_or("the artifact ends early")?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn u32(&mut self) -> std::result::Result<u32, String> {
        let bytes = self.take(4)?;
        Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    fn u64(&mut self) -> std::result::Result<u64, String> {
        let mut word = [0u8; 8];
        word.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(word))
    }

    fn words(&mut self, count: usize) -> std::result::Result<Vec<u64>, String> {
        let bytes = self.take(count.checked_mul(8).ok_or("too many offsets")?)?;
        Ok(bytes
            .chunks_exact(8)
            .map(|word| {
                let mut array = [0u8; 8];
                array.copy_from_slice(word);
                u64::from_le_bytes(array)
            })
            .collect())
    }

    fn csr(&mut self, nodes: usize, edges: usize) -> std::result::Result<Csr, String> {
        let offsets = self.words(nodes + 1)?;
        rising(&offsets, edges as u64, "edge")?;
        let bytes = self.take(edges.checked_mul(4).ok_or("too many edges")?)?;
        let ends: Vec<u32> = bytes
            .chunks_exact(4)
            .map(|end| u32::from_le_bytes([end[0], end[1], end[2], end[3]]))
            .collect();
        if ends.iter().any(|end| *end as usize >= nodes) {
            return Err("an edge names a position past the keys".into());
        }
        Ok(Csr { offsets, ends })
    }
}

/// Endpoint keys to dense ids, in the order first seen, each interned once: a text key
/// by its text (no rendering per row), any other by its rendered form. The keys sit in
/// one buffer and each index entry holds its key's hash and place there, so a lookup
/// touches the key's bytes only on a hash match and growing the index never re-hashes.
#[derive(Default)]
struct Interner {
    hasher: foldhash::fast::RandomState,
    /// Per distinct key: its hash, id, and its tagged bytes' start and length in `raw`.
    index: hashbrown::HashTable<(u64, u32, u32, usize)>,
    /// Each id's key as interned: a tag (text or rendered), then its bytes.
    raw: Vec<u8>,
    rendered: Vec<RowKey>,
}

const TEXT_KEY: u8 = 0;
const RENDERED_KEY: u8 = 1;

impl Interner {
    /// Appends the id of each row of `column` to `ids`.
    fn intern_column(
        &mut self,
        column: &dyn Array,
        ids: &mut Vec<u32>,
    ) -> std::result::Result<(), String> {
        if column.null_count() > 0 {
            let row = (0..column.len()).find(|row| column.is_null(*row));
            return Err(format!(
                "an edge has no {} at row {}",
                column.data_type(),
                row.unwrap_or_default()
            ));
        }
        if let DataType::Utf8 = column.data_type() {
            for text in column.as_string::<i32>().iter().flatten() {
                ids.push(self.intern(TEXT_KEY, text.as_bytes(), || rows::render_text_key(text))?);
            }
            return Ok(());
        }
        for row in 0..column.len() {
            let rendered = rows::render_array_key(column, row);
            ids.push(self.intern(RENDERED_KEY, rendered.as_bytes(), || rendered.clone())?);
        }
        Ok(())
    }

    fn intern(
        &mut self,
        tag: u8,
        bytes: &[u8],
        render: impl FnOnce() -> RowKey,
    ) -> std::result::Result<u32, String> {
        let hash = std::hash::BuildHasher::hash_one(&self.hasher, (tag, bytes));
        let raw = &self.raw;
        let same = |len: u32, start: usize| {
            let stored = &raw[start..start + len as usize];
            stored[0] == tag && &stored[1..] == bytes
        };
        if let Some((_, id, _, _)) = self
            .index
            .find(hash, |(h, _, len, start)| *h == hash && same(*len, *start))
        {
            return Ok(*id);
        }
        let rendered = render();
        if rendered.len() > ADJACENCY_KEY_BYTES_MAX {
            return Err(format!(
                "a key of {} bytes is longer than an artifact holds ({ADJACENCY_KEY_BYTES_MAX})",
                rendered.len()
            ));
        }
        let id = u32::try_from(self.rendered.len()).map_err(|_| "too many keys")?;
        // A key is at most ADJACENCY_KEY_BYTES_MAX rendered, and never longer raw.
        let len = u32::try_from(bytes.len() + 1).map_err(|_| "a key too long")?;
        let start = self.raw.len();
        self.rendered.push(rendered);
        self.raw.push(tag);
        self.raw.extend_from_slice(bytes);
        self.index
            .insert_unique(hash, (hash, id, len, start), |(h, _, _, _)| *h);
        Ok(id)
    }
}

/// The endpoint columns queued for one interning worker while the scan reads ahead.
const ADJACENCY_COLUMNS_QUEUED_MAX: usize = 4;

/// One endpoint column's keys interned by a worker thread: the ids of its rows in scan
/// order, and each id's rendered key.
type InternedColumn = (Vec<u32>, Vec<RowKey>);

/// Interns the columns sent on `columns` on a blocking thread, until the sender is
/// dropped.
fn interning_worker(
    capacity: usize,
    mut columns: tokio::sync::mpsc::Receiver<Arc<dyn Array>>,
) -> tokio::task::JoinHandle<std::result::Result<InternedColumn, String>> {
    tokio::task::spawn_blocking(move || {
        let mut interner = Interner::default();
        let mut ids = Vec::with_capacity(capacity);
        while let Some(column) = columns.blocking_recv() {
            interner.intern_column(column.as_ref(), &mut ids)?;
        }
        Ok((ids, interner.rendered))
    })
}

/// Builds the artifact of `table`, the version `pin` names, from its `src` and `dst`
/// columns: the scan runs on the runtime while one thread per column interns its keys.
pub(crate) async fn build(table: &Dataset, pin: &TablePin) -> Result<Adjacency> {
    let failed = |message: String| {
        OmniError::internal(format!(
            "build the adjacency of {} version {}: {message}",
            pin.table_id, pin.version
        ))
    };
    let mut scanner = table.scan();
    scanner
        .project(&[EDGE_SRC_COLUMN, EDGE_DST_COLUMN])
        .map_err(|error| OmniError::from_lance("read edges", error))?;
    let mut stream = scanner
        .try_into_stream()
        .await
        .map_err(|error| OmniError::from_lance("read edges", error))?;
    let capacity = pin.row_count.min(ADJACENCY_EDGES_MAX) as usize;
    let (to_sources, sources) = tokio::sync::mpsc::channel(ADJACENCY_COLUMNS_QUEUED_MAX);
    let (to_destinations, destinations) = tokio::sync::mpsc::channel(ADJACENCY_COLUMNS_QUEUED_MAX);
    let sources = interning_worker(capacity, sources);
    let destinations = interning_worker(capacity, destinations);
    let mut read = 0u64;
    while let Some(batch) = stream
        .try_next()
        .await
        .map_err(|error| OmniError::from_lance("read edges", error))?
    {
        let batch: RecordBatch = batch;
        read += batch.num_rows() as u64;
        if read > ADJACENCY_EDGES_MAX {
            return Err(failed(format!("more than {ADJACENCY_EDGES_MAX} edges")));
        }
        // A worker that stopped on a bad key closed its queue; its error is below.
        if to_sources.send(batch.column(0).clone()).await.is_err()
            || to_destinations.send(batch.column(1).clone()).await.is_err()
        {
            break;
        }
    }
    drop((to_sources, to_destinations));
    let joined = |outcome: std::result::Result<_, tokio::task::JoinError>| {
        outcome.map_err(|error| failed(format!("an interning thread failed: {error}")))
    };
    let (sources, destinations) = tokio::join!(sources, destinations);
    let (mut sources, near_keys) = joined(sources)?.map_err(failed)?;
    let (mut destinations, far_keys) = joined(destinations)?.map_err(failed)?;
    if sources.len() as u64 != pin.row_count || destinations.len() as u64 != pin.row_count {
        return Err(failed(format!(
            "read {} edges; the pin says {}",
            sources.len(),
            pin.row_count
        )));
    }
    Ok(from_pairs(
        pin,
        [near_keys, far_keys],
        &mut sources,
        &mut destinations,
    ))
}

/// The first eight bytes of a rendered key, zero-padded: rendered keys hold no zero
/// byte, so these order keys as their text does wherever they differ.
fn key_prefix(key: &str) -> u64 {
    let mut prefix = [0u8; 8];
    let head = &key.as_bytes()[..key.len().min(8)];
    prefix[..head.len()].copy_from_slice(head);
    u64::from_be_bytes(prefix)
}

/// The artifact of edges `sources[i] -> destinations[i]`, where source ids name keys of
/// `rendered[0]` and destination ids keys of `rendered[1]` (each list distinct, the two
/// overlapping): ids become positions in key order.
fn from_pairs(
    pin: &TablePin,
    rendered: [Vec<RowKey>; 2],
    sources: &mut [u32],
    destinations: &mut [u32],
) -> Adjacency {
    let key = |(side, id): (u8, u32)| rendered[side as usize][id as usize].as_str();
    let mut order: Vec<(u64, u8, u32)> = Vec::with_capacity(rendered[0].len() + rendered[1].len());
    for (side, keys) in rendered.iter().enumerate() {
        order.extend(
            (0..keys.len() as u32).map(|id| (key_prefix(&keys[id as usize]), side as u8, id)),
        );
    }
    order.sort_unstable_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| key((a.1, a.2)).cmp(key((b.1, b.2))))
    });
    let mut ranks = [vec![0u32; rendered[0].len()], vec![0u32; rendered[1].len()]];
    let mut key_offsets = Vec::with_capacity(rendered[0].len() + 1);
    let mut keys = String::with_capacity(rendered[0].iter().map(String::len).sum());
    key_offsets.push(0u64);
    let mut last: Option<&str> = None;
    for (_, side, id) in &order {
        let this = key((*side, *id));
        if last != Some(this) {
            keys.push_str(this);
            key_offsets.push(keys.len() as u64);
            last = Some(this);
        }
        ranks[*side as usize][*id as usize] = (key_offsets.len() - 2) as u32;
    }
    let nodes = key_offsets.len() - 1;
    let remap = |ids: &mut [u32], rank: &[u32]| {
        for id in ids.iter_mut() {
            *id = rank[*id as usize];
        }
    };
    let [near_rank, far_rank] = &ranks;
    std::thread::scope(|scope| {
        scope.spawn(|| remap(sources, near_rank));
        remap(destinations, far_rank);
    });
    let (sources, destinations) = (&*sources, &*destinations);
    let (out, into) = std::thread::scope(|scope| {
        let out = scope.spawn(|| Csr::of(nodes, sources, destinations));
        let into = Csr::of(nodes, destinations, sources);
        (out.join().expect("a counting sort does not panic"), into)
    });
    Adjacency {
        table_id: pin.table_id.clone(),
        version: pin.version,
        key_offsets,
        keys,
        out,
        into,
    }
}

/// What became of an edge table's adjacency artifact. [`Omnigraph::build_adjacency`]
/// returns `Built`, `Current` or `Skipped`; optimize records `Failed` and `Cancelled`
/// when a build does not finish. Never part of a unit's outcome: traversals read the
/// edge table when there is no artifact.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum AdjacencyOutcome {
    /// Built and written.
    Built {
        /// The edge table version it was built from.
        version: u64,
        /// Edges it holds.
        edges: u64,
        /// Distinct endpoint keys it holds.
        nodes: u64,
        /// Its size.
        bytes: u64,
        /// How long reading the table, building and writing took.
        millis: u64,
    },
    /// The version the head pins has one already.
    Current {
        /// The edge table version.
        version: u64,
    },
    /// Not built: the table has more edges, or the artifact more bytes, than an
    /// artifact holds.
    Skipped {
        /// The edge table version.
        version: u64,
        /// Why.
        reason: String,
    },
    /// Building or writing it failed. An artifact is one object, put whole.
    Failed {
        /// The error's stable code.
        code: String,
        /// The error's message.
        message: String,
    },
    /// A cancel came first: not built.
    Cancelled,
}

/// An edge type's artifacts, as `status` reports them.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct AdjacencyStatus {
    /// The edge type.
    pub edge_type: String,
    /// Its table.
    pub table_id: String,
    /// The version the commit pins.
    pub version: u64,
    /// Whether an artifact built from that version exists: traversals at the commit
    /// use it. Writes to the edge type since the last optimize make it stale.
    pub current: bool,
    /// Artifacts in the table's folder (older ones wait for cleanup).
    pub artifacts: usize,
    /// Their bytes.
    pub bytes: u64,
}

/// The artifacts a handle holds, and the versions it found none usable for (and why).
/// Loads are one at a time, so two traversals never read one artifact twice.
#[derive(Debug, Default)]
pub(crate) struct AdjacencyCache {
    state: parking_lot::Mutex<CacheState>,
    loading: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct CacheState {
    /// Newest use last.
    held: Vec<Arc<Adjacency>>,
    missed: Vec<Missed>,
}

#[derive(Debug)]
struct Missed {
    table_id: String,
    version: u64,
    at: Instant,
    why: String,
}

impl CacheState {
    /// The held artifact of `(table_id, version)`, or why there is none to use when the
    /// handle looked lately.
    fn find(
        &mut self,
        table_id: &str,
        version: u64,
    ) -> Option<std::result::Result<Arc<Adjacency>, String>> {
        if let Some(index) = self
            .held
            .iter()
            .position(|held| held.table_id == table_id && held.version == version)
        {
            let held = self.held.remove(index);
            self.held.push(held.clone());
            return Some(Ok(held));
        }
        self.missed
            .retain(|missed| missed.at.elapsed() < ADJACENCY_MISS_RECHECK);
        self.missed
            .iter()
            .find(|missed| missed.table_id == table_id && missed.version == version)
            .map(|missed| Err(missed.why.clone()))
    }

    fn hold(&mut self, adjacency: Arc<Adjacency>) {
        self.held.retain(|held| held.table_id != adjacency.table_id);
        self.held.push(adjacency);
        while self.held.len() > ADJACENCY_CACHED_MAX
            || self
                .held
                .iter()
                .map(|held| held.memory_bytes())
                .sum::<u64>()
                > ADJACENCY_CACHED_BYTES_MAX
        {
            self.held.remove(0);
        }
    }

    fn miss(&mut self, table_id: &str, version: u64, why: String) {
        if self.missed.len() >= ADJACENCY_MISSES_MAX {
            self.missed.remove(0);
        }
        self.missed.push(Missed {
            table_id: table_id.to_string(),
            version,
            at: Instant::now(),
            why,
        });
    }

    fn forget(&mut self, table_id: &str, version: u64) {
        self.missed
            .retain(|missed| missed.table_id != table_id || missed.version != version);
    }
}

impl Omnigraph {
    /// Builds the adjacency artifact of `edge_type` at the newest head the handle knows
    /// (the branch head when it knows none), unless that
    /// version has one, and writes it under the table's folder (put-if-absent: an
    /// artifact never changes once written).
    pub async fn build_adjacency(&self, edge_type: &str) -> Result<AdjacencyOutcome> {
        let started = Instant::now();
        // The newest head the handle knows (after optimize's unit, the one it
        // published): a newer one only means a newer version to build next time.
        let head = self.base().await?;
        let catalog = self.catalog_at(&head).await?;
        if catalog.require(edge_type)?.is_node() {
            return Err(OmniError::bad_input(
                omnigraph_core::InputLocation::in_source("adjacency").field("type"),
                format!("{edge_type} is a node type: only edge types have an adjacency"),
            ));
        }
        let pin = head.require_pin_of_type(edge_type)?.clone();
        let version = pin.version;
        let path = layout::adjacency_path(&pin.table_id, version);
        let root = self.graph().root();
        // One that exists must pass a reader's checks to count: a damaged one is
        // replaced (put-if-absent could never), or traversals would pass it by forever.
        let damaged = match root.get_capped(&path, ADJACENCY_BYTES_MAX as usize).await {
            Ok(None) => false,
            Ok(Some(bytes)) => match Adjacency::decode(&bytes, &pin) {
                Ok(_) => return Ok(AdjacencyOutcome::Current { version }),
                Err(_) => true,
            },
            Err(error) if error.kind() == omnigraph_core::ErrorKind::Corrupt => true,
            Err(error) => return Err(error),
        };
        if pin.row_count > ADJACENCY_EDGES_MAX {
            return Ok(AdjacencyOutcome::Skipped {
                version,
                reason: format!(
                    "{} edges are more than an artifact holds ({ADJACENCY_EDGES_MAX})",
                    pin.row_count
                ),
            });
        }
        let table = self.table_at(&head, &pin.table_id).await?;
        let adjacency = build(&table, &pin).await?;
        let size = adjacency.encoded_size() as u64;
        if size > ADJACENCY_BYTES_MAX {
            return Ok(AdjacencyOutcome::Skipped {
                version,
                reason: format!(
                    "its {size} bytes are more than a reader accepts ({ADJACENCY_BYTES_MAX})"
                ),
            });
        }
        let bytes = bytes::Bytes::from(adjacency.encode());
        if damaged {
            root.put(&path, bytes).await?;
        } else {
            // Two builders of one version write the same bytes: either may land.
            match root.put_if_absent(&path, bytes).await? {
                PutOutcome::Created | PutOutcome::AlreadyExists => {}
            }
        }
        self.adjacency_cache()
            .state
            .lock()
            .forget(&pin.table_id, version);
        Ok(AdjacencyOutcome::Built {
            version,
            edges: adjacency.edges(),
            nodes: adjacency.nodes(),
            bytes: size,
            millis: started.elapsed().as_millis() as u64,
        })
    }

    /// Each edge type's artifacts at `at`: whether the version it pins has one (one
    /// LIST per edge type).
    pub async fn adjacency_status(&self, at: &CommitRef) -> Result<Vec<AdjacencyStatus>> {
        let commit = self.graph().commit(self.branch(), at).await?;
        let mut status = Vec::new();
        for pin in commit
            .pins
            .iter()
            .filter(|pin| pin.kind == crate::commit::TableKind::Edge)
        {
            // The table id is checked when a commit is read; its stored path is not used.
            let folder = format!(
                "{}/{}",
                layout::table_path(&pin.table_id),
                omnigraph_core::adapter::ADJACENCY_FOLDER
            );
            let listed = self.graph().root().list_with_meta(&folder).await?;
            let current_path = layout::adjacency_path(&pin.table_id, pin.version);
            status.push(AdjacencyStatus {
                edge_type: pin.type_name.clone(),
                table_id: pin.table_id.clone(),
                version: pin.version,
                current: listed.iter().any(|object| object.path == current_path),
                artifacts: listed.len(),
                bytes: listed.iter().map(|object| object.size).sum(),
            });
        }
        Ok(status)
    }

    /// The artifact of `edge_type` built from the version `commit` pins, or why there
    /// is none to use: none was built, or the one found failed its checks (it is then
    /// passed by, never trusted).
    pub(crate) async fn adjacency_at(
        &self,
        commit: &GraphCommit,
        edge_type: &str,
    ) -> std::result::Result<Arc<Adjacency>, String> {
        let pin = commit
            .require_pin_of_type(edge_type)
            .map_err(|error| error.to_string())?;
        let (table_id, version) = (pin.table_id.as_str(), pin.version);
        let cache = self.adjacency_cache();
        if let Some(found) = cache.state.lock().find(table_id, version) {
            return found;
        }
        let _loading = cache.loading.lock().await;
        // Another traversal may have loaded it while this one waited.
        if let Some(found) = cache.state.lock().find(table_id, version) {
            return found;
        }
        let path = layout::adjacency_path(table_id, version);
        let read = self
            .graph()
            .root()
            .get_capped(&path, ADJACENCY_BYTES_MAX as usize)
            .await;
        let loaded = match read {
            Ok(Some(bytes)) => Adjacency::decode(&bytes, pin)
                .map(Arc::new)
                .map_err(|why| format!("{path}: {why}")),
            Ok(None) => Err(format!("no artifact of version {version}")),
            Err(error) => Err(format!("{path}: {error}")),
        };
        let mut state = cache.state.lock();
        match &loaded {
            Ok(adjacency) => state.hold(adjacency.clone()),
            Err(why) => state.miss(table_id, version, why.clone()),
        }
        loaded
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commit::TableKind;

    fn pin(rows: u64) -> TablePin {
        TablePin {
            table_id: "t01".into(),
            type_name: "Knows".into(),
            kind: TableKind::Edge,
            path: "tables/t01".into(),
            version: (1 << 63) + 5,
            row_count: rows,
        }
    }

    /// p1 -> p2, p1 -> p3, p2 -> p1 (rendered keys), each column's ids in first-seen
    /// order, as two interning threads give them.
    fn small() -> Adjacency {
        let near = vec!["\"p1\"".to_string(), "\"p2\"".into()];
        let far = vec!["\"p2\"".to_string(), "\"p3\"".into(), "\"p1\"".into()];
        let (mut sources, mut destinations) = (vec![0, 0, 1], vec![0, 1, 2]);
        from_pairs(&pin(3), [near, far], &mut sources, &mut destinations)
    }

    #[test]
    fn keys_that_share_a_long_prefix_take_their_text_order() {
        // Keys alike in their first eight rendered bytes, and of every length around it.
        let near: Vec<String> = ["\"abcdefghi\"", "\"abcdefg\"", "\"abcdefgh\"", "\"b\""]
            .map(String::from)
            .to_vec();
        let far: Vec<String> = ["\"abcdefgh\"", "\"abcdefgha\"", "\"a\""]
            .map(String::from)
            .to_vec();
        let (mut sources, mut destinations) = (vec![0, 1, 2, 3], vec![0, 1, 2, 0]);
        let adjacency = from_pairs(&pin(4), [near, far], &mut sources, &mut destinations);
        let mut expected = vec![
            "\"a\"",
            "\"abcdefg\"",
            "\"abcdefgh\"",
            "\"abcdefgha\"",
            "\"abcdefghi\"",
            "\"b\"",
        ];
        expected.sort();
        let keys: Vec<&str> = (0..adjacency.nodes() as u32)
            .map(|position| adjacency.key(position))
            .collect();
        assert_eq!(keys, expected, "each key once, in text order");
        let far = |key: &str| {
            adjacency
                .far_keys(key, AdjacencyWay::Out)
                .collect::<Vec<_>>()
        };
        assert_eq!(far("\"abcdefgh\""), ["\"a\""]);
        assert_eq!(far("\"b\""), ["\"abcdefgh\""]);
        assert_eq!(far("\"abcdefghi\""), ["\"abcdefgh\""]);
        let into = |key: &str| {
            adjacency
                .far_keys(key, AdjacencyWay::In)
                .collect::<Vec<_>>()
        };
        assert_eq!(into("\"abcdefgh\""), ["\"abcdefghi\"", "\"b\""]);
    }

    #[test]
    fn far_keys_follow_each_way_in_edge_order() {
        let adjacency = small();
        let far = |key: &str, way| adjacency.far_keys(key, way).collect::<Vec<_>>();
        assert_eq!(far("\"p1\"", AdjacencyWay::Out), ["\"p2\"", "\"p3\""]);
        assert_eq!(far("\"p1\"", AdjacencyWay::In), ["\"p2\""]);
        assert_eq!(far("\"p3\"", AdjacencyWay::Out), Vec::<&str>::new());
        assert_eq!(far("\"p3\"", AdjacencyWay::In), ["\"p1\""]);
        assert_eq!(far("\"p9\"", AdjacencyWay::Out), Vec::<&str>::new());
        assert_eq!((adjacency.nodes(), adjacency.edges()), (3, 3));
    }

    #[test]
    fn an_artifact_reads_back_and_every_damage_is_refused() {
        let adjacency = small();
        let bytes = adjacency.encode();
        assert_eq!(Adjacency::decode(&bytes, &pin(3)).unwrap(), adjacency);
        // Another version, table or row count: not this pin's artifact.
        let mut other = pin(3);
        other.version += 1;
        assert!(
            Adjacency::decode(&bytes, &other)
                .unwrap_err()
                .contains("built from")
        );
        assert!(
            Adjacency::decode(&bytes, &pin(4))
                .unwrap_err()
                .contains("rows")
        );
        // Any flipped byte fails the checksum; a cut artifact is too short.
        for at in [0, 9, HEADER_BYTES + 2, bytes.len() / 2, bytes.len() - 1] {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x40;
            assert!(Adjacency::decode(&damaged, &pin(3)).is_err(), "byte {at}");
        }
        assert!(Adjacency::decode(&bytes[..bytes.len() - 9], &pin(3)).is_err());
        assert!(Adjacency::decode(&[], &pin(3)).is_err());
    }

    /// Each artifact below is sealed with a fresh checksum: what a writer that knew the
    /// format but not its rules would leave.
    #[test]
    fn a_sealed_artifact_that_breaks_the_rules_is_refused() {
        let mut unsorted = small();
        unsorted.keys = "\"p2\"\"p1\"\"p3\"".into();
        let error = Adjacency::decode(&unsorted.encode(), &pin(3)).unwrap_err();
        assert!(error.contains("out of order"), "{error}");
        let mut far = small();
        far.out.ends[0] = 7;
        let error = Adjacency::decode(&far.encode(), &pin(3)).unwrap_err();
        assert!(error.contains("past the keys"), "{error}");
        let mut falling = small();
        falling.into.offsets[1] = 3;
        let error = Adjacency::decode(&falling.encode(), &pin(3)).unwrap_err();
        assert!(error.contains("do not rise"), "{error}");
        let mut not_json = small();
        not_json.keys = "\"p1\"\"p2\"p3__".into();
        let error = Adjacency::decode(&not_json.encode(), &pin(3)).unwrap_err();
        assert!(error.contains("not a rendered key"), "{error}");
        // A number the engine renders otherwise (1.0), never compared as written.
        let mut unrendered = small();
        unrendered.keys = "\"p1\"\"p2\"1.00".into();
        let error = Adjacency::decode(&unrendered.encode(), &pin(3)).unwrap_err();
        assert!(error.contains("not a rendered key"), "{error}");
    }
}
