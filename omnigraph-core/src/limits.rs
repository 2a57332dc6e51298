//! Every limit of this crate in one place: sizes, counts and waits that bound a
//! loop, a queue, a read or a write, each named `*_MAX` (or `*_MIN`), with the
//! relations between them checked when the crate compiles. The module that uses a
//! limit imports it from here; its doc says why the figure is what it is.

// adapter/in_fragments.rs
/// How many deletion files one write writes at once.
pub(crate) const DELETION_WRITES_IN_FLIGHT_MAX: usize = 16;

// adapter/index.rs
/// k-means iterations for a PQ codebook.
pub(crate) const PQ_ITERATIONS_MAX: usize = 50;

/// The most IVF partitions a built index may report before its statistics are refused
/// as corrupt (a build chooses at most a few thousand).
pub(crate) const IVF_PARTITIONS_READ_MAX: u64 = 1 << 20;

/// The most built vector indexes whose sizing a process keeps (a full cache is
/// emptied).
pub(crate) const VECTOR_SIZINGS_CACHED_MAX: usize = 1_024;

/// The share of an index's partitions a vector search probes by default.
pub(crate) const NPROBES_SHARE: f64 = 0.05;

/// The fewest partitions a vector search probes by default.
pub(crate) const NPROBES_MIN: usize = 16;

// adapter/observed.rs
/// Records a test build keeps per table at most (the newest stay).
#[cfg(feature = "failpoints")]
pub(crate) const SEEN_PER_TABLE_MAX: usize = 64;

// error.rs
/// The conflicts a merge message names per type; the error holds them all.
pub const MERGE_CONFLICTS_SHOWN_MAX: usize = 10;

// failpoints.rs
/// How many tasks one simulation holds parked at once, at most.
pub const PARKED_MAX: usize = 64;

// schema.rs
/// The largest schema source accepted, in bytes.
pub const SCHEMA_BYTES_MAX: usize = 1 << 20;

/// The most types (node and edge) in one schema.
pub const TYPES_MAX: usize = 1024;

/// The most properties on one type.
pub(crate) const PROPERTIES_MAX: usize = 512;

/// The longest type or property name, in bytes.
pub const NAME_LEN_MAX: usize = 64;

/// The largest vector dimension.
pub(crate) const VECTOR_DIMENSION_MAX: u32 = 16_384;

// seams.rs
/// The largest clock factor accepted.
pub(crate) const CLOCK_SCALE_FACTOR_MAX: i64 = 1_000;

// storage/local_links.rs
/// Links one walk reports at most: enough to name the problem.
pub(crate) const LINKS_REPORTED_MAX: usize = 16;

/// Folders one walk reads at most: a tree larger than a graph's tables ever are is
/// refused (its links unknown), not walked for ever.
pub(crate) const WALK_FOLDERS_MAX: usize = 100_000;

// storage/options.rs
/// The most storage options one root takes.
pub const STORAGE_OPTIONS_MAX: usize = 64;

/// The longest storage option value accepted, in bytes.
pub const STORAGE_OPTION_LEN_MAX: usize = 4096;

// storage/root.rs
/// The longest root URI accepted.
pub const ROOT_URI_LEN_MAX: usize = 4096;

/// Lance index cache per root session (bytes). Explicit: Lance's default is 6 GiB.
pub(crate) const INDEX_CACHE_BYTES_MAX: usize = 256 << 20;

/// Lance metadata cache per root session (bytes).
pub(crate) const METADATA_CACHE_BYTES_MAX: usize = 64 << 20;

// storage/wrapper.rs
/// The most bytes a local folder's store is handed as one piece of a write: it writes
/// each piece with one `write_all`, and Linux sizes the page-cache folios a buffered
/// write allocates by the write's length (ext4 with large folios). On a VM whose free
/// memory goes back to the host, a large folio can take tens of milliseconds to
/// allocate: on this project's 2-core 6.18 VM, 15 MiB written in 5 MiB calls (the part
/// Lance hands a multipart upload) took 110-310 ms, and in 2 MiB, 1 MiB, 512 KiB and
/// 256 KiB calls each grew as slow once the page cache had grown by some hundred MiB;
/// in 128 KiB calls it stayed at 4-6 ms. The price is one syscall per 128 KiB instead
/// of one per part.
pub(crate) const LOCAL_WRITE_BYTES_MAX: usize = 128 << 10;

/// The longest read of a local file the wrapper makes on the caller's thread. A local
/// GET comes back from object_store as an open file that it then reads on tokio's
/// blocking pool: a second trip between threads, after the one that opened the file,
/// for a read that the page cache answers in microseconds. A served point read makes
/// one or two such reads; in `omnigraph-bench --serve` at 32 clients on 2 cores, the
/// threads' switches and wake-ups were a quarter of the server's CPU
/// (`docs/performance.md`). The bound is per read: a longer read stays on the blocking
/// pool, and a worker waits on the disk for at most this much at a time (a scan of
/// narrow columns makes many such reads, each in its turn).
pub(crate) const LOCAL_INLINE_READ_BYTES_MAX: u64 = 256 << 10;

/// The most local files a root keeps open after a short read, for the next short read
/// of the same object (`storage/local_reads.rs`); the oldest is closed first. A served
/// read's working set is a few files per table (its data, its index's pages); each
/// kept file is one descriptor.
pub(crate) const LOCAL_OPEN_FILES_KEPT_MAX: usize = 64;

/// How long a local file is kept open (microseconds, clock seam), from its open. A file
/// another process deletes is not used once deleted (its path is checked on every read),
/// but its space is held until it is closed: at the next GET through the root after
/// this age, when newer files push it out, or when the root is dropped.
pub(crate) const LOCAL_OPEN_FILE_AGE_MICROS_MAX: i64 = 10_000_000;

/// The most manifest tails the wrapper keeps: one per table open in flight; the oldest
/// is dropped first (its open then reads the block from the store, as before).
pub(crate) const MANIFEST_TAILS_MAX: usize = 32;

/// How long a kept tail answers a read (microseconds, clock seam). Lance reads right
/// after its HEAD; a tail that waited longer (a HEAD no read followed) is dropped, so
/// it never stands in for an object deleted since by another process.
pub(crate) const MANIFEST_TAIL_AGE_MICROS_MAX: i64 = 1_000_000;

// Relations
/// A schema at its limits fits its source: every type named at the longest name.
const _: () = assert!(TYPES_MAX * NAME_LEN_MAX <= SCHEMA_BYTES_MAX);
/// A manifest's tail, the read of every table open, is read in place: one Lance block
/// (`LANCE_BLOCK_BYTES` in storage/root.rs, 64 KiB).
const _: () = assert!(LOCAL_INLINE_READ_BYTES_MAX >= 64 << 10);
/// A local write in pieces still makes progress, and a manifest's tail fits one.
const _: () = assert!(LOCAL_WRITE_BYTES_MAX >= 4 << 10);
