//! Every limit of this crate in one place: sizes, counts and waits that bound a
//! loop, a queue, a read or a write, each named `*_MAX` (or `*_MIN`), with the
//! relations between them checked when the crate compiles. The module that uses a
//! limit imports it from here; its doc says why the figure is what it is.

// adjacency.rs
/// The artifacts a handle keeps in memory (one version per table: a newer one read
/// replaces it).
pub(crate) const ADJACENCY_CACHED_MAX: usize = 8;

/// The memory the artifacts a handle keeps may take, in bytes; past it the least
/// recently used go.
pub(crate) const ADJACENCY_CACHED_BYTES_MAX: u64 = 2 << 30;

/// The misses a handle remembers.
pub(crate) const ADJACENCY_MISSES_MAX: usize = 64;

// columnar.rs
/// The longest CSV header line read, in bytes.
pub(crate) const CSV_HEADER_BYTES_MAX: usize = 64 << 10;

// endpoint_cache.rs
/// The most edges whose endpoints are cached per table; a larger table is read whole.
pub(crate) const CACHED_EDGES_PER_TABLE_MAX: u64 = 5_000_000;

// hash_slots.rs
/// The fewest slots a table has.
pub(crate) const SLOTS_MIN: usize = 16;

/// The bytes of table one key may take at most: a table of n keys has fewer than
/// 8/3·n slots (a power of two at most three quarters full) of 8 bytes.
pub(crate) const BYTES_PER_KEY_MAX: usize = 22;

/// The most entries a table numbers: the low half of a slot holds the number plus one.
pub(crate) const ENTRIES_MAX: usize = u32::MAX as usize - 1;

// ingest.rs
/// Input bytes of one type buffered before they are validated and staged: with long
/// rows, a batch is staged before it reaches [`INGEST_BATCH_ROWS_MAX`].
pub const INGEST_BATCH_BYTES_MAX: usize = 64 << 20;

/// The longest JSONL line accepted, in bytes.
pub const JSONL_LINE_BYTES_MAX: usize = 1 << 20;
/// Rows of one batch an export reads (the unit it hands on and a server encodes).
pub const EXPORT_BATCH_ROWS_MAX: usize = 4_096;
/// Bytes of reads an export's scan keeps queued ahead of the batch it hands on
/// (Lance's own default is 2 GiB).
pub const EXPORT_READ_AHEAD_BYTES_MAX: u64 = 64 << 20;

/// The most a warm handle keeps of a JSONL input it cannot read twice (a pipe, a FIFO),
/// by default: a load refused on a stale head runs again on the branch head from these
/// bytes; a longer input's refusal is final (see [`crate::spill::LoadBudget`]).
pub const INPUT_SPOOL_BYTES_MAX: usize = 64 << 20;

/// Checked rows of one table gathered (Arrow bytes) before they are staged as one
/// append: one Lance write, one fragment, per this much. Outside a simulation, an
/// append this large is streamed long before (`APPEND_STREAM_START_BYTES`).
pub const APPEND_GATHER_BYTES_MAX: usize = 64 << 20;

/// Checked batches waiting for a streamed append's writer, at most: with
/// [`APPEND_STREAM_BYTES_MAX`], how far the checks may run ahead of Lance.
pub const APPEND_STREAM_BATCHES_MAX: usize = 128;

/// Arrow bytes of checked batches waiting for a streamed append's writer, at most:
/// room for the rows checked while Lance encodes a burst of pages, so the checks and
/// the writer run side by side.
pub const APPEND_STREAM_BYTES_MAX: usize = 32 << 20;

/// The most keys one append adds to the handle's key cache after it publishes; a larger
/// one leaves the cache to read its fragments when next needed.
pub(crate) const KEY_CACHE_EXTEND_KEYS_MAX: usize = 65_536;

/// A merge keeps up to this many bytes of its rows (their Arrow buffers) in memory so
/// that it can merge them again on a newer head when another writer moved a table
/// first; a larger merge that loses the race fails with `ReadSetChanged` (nothing
/// published) and is rerun by the caller.
pub const MERGE_RETAINED_BYTES_MAX: usize = 64 << 20;

/// Rows of one type validated and staged together.
pub const INGEST_BATCH_ROWS_MAX: usize = 8_192;

/// The most integer node keys a load keeps, of all node types together, as numbers
/// known to be nodes (given by the call, or held by the table): an edge whose endpoint
/// is among them is checked by one probe of a set of numbers, where the rendered key
/// took three dependent reads of memory. About 18 MiB when full (27 MiB while its
/// table doubles), beside the load budget; past it, an endpoint not among them is
/// looked up by its rendered key alone.
pub(crate) const ENDPOINT_NUMBERS_KEPT_MAX: usize = 1 << 20;

/// Keys looked up in the table per query while a call's keys or pending endpoints are
/// read back in order: what one step holds, whatever the size of the call.
pub(crate) const KEY_RECHECK_KEYS_MAX: usize = 65_536;

// jsonl.rs
/// Lines a splitter hands over at once.
pub(crate) const CHUNK_LINES_MAX: usize = 8_192;

/// Bytes of lines after which a splitter hands a chunk over: it adds no line to a chunk
/// this full, so a chunk holds at most this plus one line.
pub(crate) const CHUNK_BYTES_MAX: usize = 1 << 20;

// jsonl_rows.rs
/// Items reserved for an array before it is read (its length is not trusted).
pub(crate) const ITEMS_PREALLOCATED_MAX: usize = 4_096;

// key_cache.rs
/// The most keys cached per table; a larger table is checked through queries instead.
pub(crate) const CACHED_KEYS_PER_TABLE_MAX: usize = 5_000_000;

/// How many deletion files one refresh reads at once.
pub(crate) const DELETION_READS_IN_FLIGHT_MAX: usize = 16;

// merge.rs
/// Rows of each of the three versions one pass of a row merge holds in memory, by
/// default (in Arrow's row format, with their batches): a larger table is merged in
/// more passes, each over the keys of one hash partition.
pub const MERGE_PASS_ROWS_MAX: u64 = 1_000_000;

/// Passes a row merge makes over its table at most, by default; a table too large for
/// them fails before any effect.
pub const MERGE_PASSES_MAX: u64 = 16;

/// Rows a merge holds as its result, by default, over all its tables: rows taken from
/// the source, keys to delete, conflicts and keys one side loses. A merge that changes
/// more fails before any effect.
pub const MERGE_CHANGED_ROWS_MAX: u64 = 1_000_000;

/// Keys one staged delete of a row merge names.
pub(crate) const MERGE_KEYS_PER_DELETE_MAX: usize = 10_000;

// replanning.rs
/// The most plans one update, delete, merge or schema apply makes when what it read
/// keeps moving; then `contention_exhausted`. A plan is work (a merge's passes over its
/// rows, a schema apply's new tables), not only a commit PUT: its PUTs count in the
/// write's one bound, `omnigraph_publish::limits::COMMIT_PUTS_MAX`, and its plans here.
pub const REPLANS_MAX: u32 = 8;

// mutate.rs
/// How many times one prepared write follows rows added to the tables it read before
/// it gives up, so that an update or delete plans again (and, once starved, reserves
/// its tables) rather than chase a table that keeps moving. Its PUTs count in the
/// write's one bound ([`omnigraph_publish::limits::COMMIT_PUTS_MAX`]).
pub const FOLLOWS_MAX: u32 = 4;

/// Above this many rows, a table whose keys a handle does not hold yet is read whole by
/// an update or delete rather than having its keys read first: for one write, reading
/// every key of a large indexed table costs more than the write.
pub(crate) const POINT_WRITE_COLD_ROWS_MAX: u64 = 65_536;

// omnigraph.rs
/// The most keys a `get` reads to bring a handle's key cache to the head before it
/// reads only the fragment that holds its key; a cache further behind is left to the
/// next write, and the `get` scans.
pub(crate) const GET_KEYS_TO_READ_MAX: u64 = 65_536;

/// Keys looked up per existence query.
pub(crate) const KEY_LOOKUP_KEYS_MAX: usize = 1_000;

// read_ahead.rs
/// Items a reader produces ahead of its consumer.
pub(crate) const READ_AHEAD_ITEMS_MAX: usize = 2;

// reads.rs
/// The most rows a graph read returns.
pub const READ_LIMIT_MAX: usize = 10_000;

/// The largest k of a nearest or text query.
pub const K_MAX: usize = 1_000;

// rows.rs
/// The longest part of a string a message quotes, in bytes.
pub(crate) const QUOTED_BYTES_MAX: usize = 40;

// spill.rs
/// The memory one key set of a load holds before it spills a sorted run to disk.
pub const KEY_SET_MEMORY_BYTES_MAX: usize = 64 << 20;

/// Runs one key set may spill; past them the load fails and publishes nothing. With
/// the default budget that is about 350 million short keys (16 GiB of keys in memory's
/// accounting, some 48 bytes each). It also bounds the files one merge holds open: a
/// check merges at most two sets at once, well within a process's usual 1,024 files.
pub const SPILL_RUNS_MAX: usize = 256;

// traverse.rs
/// The most steps one traversal takes.
pub const TRAVERSE_STEPS_MAX: usize = 8;

/// The most start keys one traversal takes.
pub const TRAVERSE_STARTS_MAX: usize = READ_LIMIT_MAX;

/// The most edges one step reads: a step that would read more fails, naming it, before
/// it holds them (narrow it with a filter or a smaller limit on the step before).
pub const TRAVERSE_EDGES_PER_STEP_MAX: usize = 1_000_000;

// reserving.rs
/// How many times an insert or load loses its slot to a change of the tables it read
/// before it reserves them. Each reservation is a commit that costs every other writer
/// of those tables its slot and a wait, so only a starved write takes one: with 4
/// processes on the local S3 server, reserving after 2 losses put a reservation in
/// half the commits and cut the commit rate; after 6, about one in twenty.
pub const LOSSES_BEFORE_RESERVING_MAX: u32 = 6;

/// How many attempts of an update or delete lose (each after following its tables up
/// to `crate::limits::FOLLOWS_MAX` times) before it reserves them for the next.
pub const ATTEMPTS_BEFORE_RESERVING_MAX: u32 = 3;

// Relations
/// A batch holds at least one line of the longest kind, and so does a spooled input.
const _: () = assert!(JSONL_LINE_BYTES_MAX <= INGEST_BATCH_BYTES_MAX);
const _: () = assert!(JSONL_LINE_BYTES_MAX <= INPUT_SPOOL_BYTES_MAX);
/// A streamed append's queue never holds more than a gathered append would.
const _: () = assert!(APPEND_STREAM_BYTES_MAX <= APPEND_GATHER_BYTES_MAX);
/// What a write adds to a key cache, reads cold, or reads to bring a `get` up to date
/// is less than what the cache holds.
const _: () = assert!(KEY_CACHE_EXTEND_KEYS_MAX <= CACHED_KEYS_PER_TABLE_MAX);
const _: () = assert!(POINT_WRITE_COLD_ROWS_MAX as usize <= CACHED_KEYS_PER_TABLE_MAX);
const _: () = assert!(GET_KEYS_TO_READ_MAX as usize <= CACHED_KEYS_PER_TABLE_MAX);
/// A merge's passes cover the most rows it changes.
const _: () = assert!(MERGE_PASS_ROWS_MAX * MERGE_PASSES_MAX >= MERGE_CHANGED_ROWS_MAX);
/// A load's key set ids fit 32 bits with one to spare.
const _: () = assert!(ENTRIES_MAX < u32::MAX as usize);
