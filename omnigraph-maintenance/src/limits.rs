//! Every limit of this crate in one place: sizes, counts and waits that bound a
//! loop, a queue, a read or a write, each named `*_MAX` (or `*_MIN`), with the
//! relations between them checked when the crate compiles. The module that uses a
//! limit imports it from here; its doc says why the figure is what it is.

// adjacency.rs
/// The endpoint columns queued for one interning worker while the scan reads ahead.
pub(crate) const ADJACENCY_COLUMNS_QUEUED_MAX: usize = 4;

// budget.rs
/// The most units (tables) a run stages at once: each holds a compaction's buffers.
pub(crate) const UNIT_CONCURRENCY_MAX: usize = 2;

// cleanup.rs
/// How many times a run traces heads that moved while it planned.
pub(crate) const RETRACE_MAX: usize = 4;

/// The most tables one run sweeps.
pub(crate) const TABLES_MAX: usize = 100_000;

// indexes.rs
/// Fewest non-null vectors an IVF index is trained on.
pub(crate) const VECTOR_TRAINING_ROWS_MIN: u64 = 256;

/// The most IVF partitions a build chooses: about √N for N vectors, so this many serve
/// up to about 16.7 million vectors at the aimed size.
pub(crate) const IVF_PARTITIONS_MAX: u64 = 4_096;

/// Raw vector bytes (vectors × dimension × 4) up to which an index keeps its vectors
/// uncompressed (IVF_FLAT: exact distances within the partitions probed). Past it the
/// partitions hold quantised vectors, a quarter of the bytes (SQ) or less (PQ), which a
/// search reads instead.
pub(crate) const FLAT_VECTOR_BYTES_MAX: u64 = 256 << 20;

/// The dimension from which a quantised index is PQ (one byte per
/// [`PQ_DIMENSIONS_PER_SUB_VECTOR`] dimensions) rather than SQ (one byte per dimension):
/// at 512 dimensions and more, SQ's bytes per vector are what IVF_FLAT's are at 128.
pub(crate) const PQ_DIMENSION_MIN: u32 = 512;

// optimize.rs
/// How many times one unit is staged again on a moved pin before it ends `pin_moved`.
/// A restage only carries deletions over (small files), but four writers committing
/// about 100 times a second moved the table again during most restages: at 3, the
/// busiest table's unit lost every run, its fragments piled up, and every update and
/// delete scanned more of them (`cargo xtask stress --procs 4`).
pub const RESTAGES_MAX: usize = 12;

// cleanup/mod.rs
/// Deletions in flight at once.
pub const DELETES_IN_FLIGHT_MAX: usize = 8;

// Relations
/// k-means never trains more centroids than it has rows: √N partitions are at most N
/// for every N a build trains on (`indexes::tests`).
const _: () = assert!(VECTOR_TRAINING_ROWS_MIN >= 1);
/// At least one unit runs, and a moved head is traced again at least once.
const _: () = assert!(UNIT_CONCURRENCY_MAX >= 1 && RETRACE_MAX >= 1);
/// A unit's restages publish within one write's commit attempts.
const _: () = assert!(RESTAGES_MAX as u32 <= omnigraph_publish::limits::COMMIT_PUTS_MAX);
