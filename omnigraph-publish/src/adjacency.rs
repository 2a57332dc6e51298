//! The adjacency artifact's format (`docs/format.md` §6.4): the edges of one version of
//! an edge table as two compressed sparse rows, by source and by destination, over
//! dense positions of the endpoint keys those edges name. Maintenance builds it
//! (`omnigraph_maintenance::adjacency`) and the graph's traversals read it
//! (`omnigraph_graph::adjacency`); both take the format from here, the lowest crate
//! both use. An artifact is never part of correctness: one that is missing, unreadable
//! or fails the checks of [`Adjacency::decode`] is passed by.
//!
//! It is keyed by the edge table's version alone. A step's result depends on the edge
//! table only: every writer checks an edge's endpoints and a node delete deletes its
//! edges in the same commit, so an edge never names a missing node, and a node with no
//! edge reaches nothing either way. Writes to the node tables leave it current.

use crate::commit::TablePin;
use crate::limits::{ADJACENCY_BYTES_MAX, ADJACENCY_EDGES_MAX};
use omnigraph_core::keys::{self, RowKey};
use serde_json::Value;

/// The artifact format this build writes and reads.
pub const ADJACENCY_FORMAT: u32 = 1;
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
    pub fn memory_bytes(&self) -> u64 {
        (self.keys.len() + 8 * 3 * self.key_offsets.len() + 8 * self.out.ends.len()) as u64
    }

    /// The rendered key at `position` (below [`Adjacency::nodes`]).
    pub fn key(&self, position: u32) -> &str {
        let position = position as usize;
        &self.keys[self.key_offsets[position] as usize..self.key_offsets[position + 1] as usize]
    }

    /// The position of the rendered key `key`, when an edge names it.
    pub fn position(&self, key: &str) -> Option<u32> {
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

    /// The positions at the far end of the edges `way` of the key at `position` (below
    /// [`Adjacency::nodes`]), one per edge, in the edge table's order.
    pub fn far_positions(&self, position: u32, way: AdjacencyWay) -> &[u32] {
        match way {
            AdjacencyWay::Out => self.out.ends_of(position),
            AdjacencyWay::In => self.into.ends_of(position),
        }
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

    /// Every key it holds with the number of its edges `way` (none for some), in key
    /// order: a path count reads degrees instead of following each edge.
    pub fn degrees(&self, way: AdjacencyWay) -> impl Iterator<Item = (&str, u64)> {
        let rows = match way {
            AdjacencyWay::Out => &self.out,
            AdjacencyWay::In => &self.into,
        };
        (0..self.key_offsets.len() - 1).map(move |position| {
            let edges = rows.offsets[position + 1] - rows.offsets[position];
            (self.key(position as u32), edges)
        })
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
                Ok(value @ (Value::String(_) | Value::Number(_))) => keys::render_key(&value),
                _ => String::new(),
            };
            if rendered != key {
                return Err(format!("key {position} is not a rendered key"));
            }
            previous = Some(key);
        }
        // The artifact is the pinned table's, as checked: a reader trusts its offsets.
        assert!(adjacency.table_id() == pin.table_id && adjacency.version() == pin.version);
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
pub fn from_pairs(
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
