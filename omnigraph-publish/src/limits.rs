//! Every limit of this crate in one place: sizes, counts and waits that bound a
//! loop, a queue, a read or a write, each named `*_MAX` (or `*_MIN`), with the
//! relations between them checked when the crate compiles. The module that uses a
//! limit imports it from here; its doc says why the figure is what it is.

use std::time::Duration;

// adjacency.rs
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

// attempts.rs
/// The most commit PUTs one write makes, over every plan and every move onto a newer
/// head. Under 8 writers on one root, a load of two tables lost 8 races in a row about
/// once in 6 loads; 64 leaves room for that many losses several times over.
pub const COMMIT_PUTS_MAX: u32 = 64;

/// The longest a writer waits after a lost race before it reads the new head.
pub const LOST_RACE_BACKOFF_MAX: Duration = Duration::from_millis(16);

/// The first window of the backoff, doubled per race lost up to
/// [`LOST_RACE_BACKOFF_MAX`].
pub const LOST_RACE_BACKOFF_MIN: Duration = Duration::from_millis(4);

// shared_reads.rs
/// The most reads of the head a caller waits on before it reads alone: the one in
/// flight when it asked (which cannot answer it), then the next (which answers it unless
/// its caller went away). So a caller's wait is bounded whatever other callers do.
pub(crate) const HEAD_READ_WAITS_MAX: usize = 2;

// branches.rs
/// The most branches a root holds: listing reads each one's head.
pub const BRANCHES_MAX: usize = 4_096;

/// Branch heads read at once when listing.
pub(crate) const HEAD_READS_IN_FLIGHT_MAX: usize = 8;

// commit.rs
/// The longest commit id (and parent id) a commit may hold; ids from the id seam are
/// 26-character ULIDs.
pub(crate) const COMMIT_ID_LEN_MAX: usize = 64;

/// The longest actor a commit may name, in bytes.
pub(crate) const ACTOR_LEN_MAX: usize = 1_024;
/// The longest idempotency key a commit may record, in bytes.
pub const IDEMPOTENCY_KEY_BYTES_MAX: usize = 256;
/// The most idempotency keys one commit may record: a host that publishes several
/// requests' writes in one commit (group commit) records each request's key.
pub const IDEMPOTENCY_KEYS_PER_COMMIT_MAX: usize = 64;

/// The longest fingerprint a commit records beside a key: the server writes SHA-256 in
/// hex (64 bytes); room for a later build's longer one.
pub const IDEMPOTENCY_FINGERPRINT_BYTES_MAX: usize = 128;

/// The longest operation summary a writer publishes, in bytes: writers quote their input
/// in it (an update's predicate), so the publisher shortens it (`shortened_summary`).
/// Readers accept any summary within the commit's size limit, as earlier builds wrote.
pub const SUMMARY_LEN_MAX: usize = 1_024;

/// The longest operation kind, in bytes.
pub(crate) const OPERATION_KIND_LEN_MAX: usize = 64;

/// The largest pin in JSON, in bytes: its ids, names and path at their limits, two
/// 20-digit numbers and the field names.
pub(crate) const PIN_JSON_BYTES_MAX: usize =
    3 * TABLE_ID_LEN_MAX + omnigraph_core::limits::NAME_LEN_MAX + 2 * 20 + 256;

/// The most branches a commit remembers merging from.
pub const MERGED_FROM_MAX: usize = 64;

// history.rs
/// The most commits one history chunk holds; a longer reclaimed range is written in
/// several.
pub const HISTORY_CHUNK_COMMITS_MAX: u64 = 10_000;

/// The most characters of an operation's summary the history keeps.
pub const HISTORY_SUMMARY_CHARS_MAX: usize = 80;

/// The largest chunk a reader accepts, compressed, in bytes.
pub const HISTORY_CHUNK_BYTES_MAX: usize = 4 << 20;

/// The largest chunk a reader decompresses, in bytes: a chunk's lines at their longest.
pub(crate) const HISTORY_LINES_BYTES_MAX: usize = 16 << 20;

/// The most chunks a branch's history folder may hold.
pub const HISTORY_CHUNKS_MAX: usize = 100_000;

/// How many times a reader lists the history again when a chunk it listed is gone (a
/// cleanup wrote a longer one that covers it, then deleted it).
pub(crate) const HISTORY_RELISTS_MAX: usize = 4;

/// How old a chunk must be before a chunk it covers is deleted: a listing is not
/// atomic (a folder walk, pages of a LIST), and one that missed the new chunk (begun
/// before it was written) must not also miss the one it replaces, or it would see the
/// floor fall. No listing runs for this long.
pub const HISTORY_COVER_AGE_MIN: Duration = GRACE_MIN;

// layout.rs
/// The largest branch name, in bytes.
pub(crate) const BRANCH_LEN_MAX: usize = 64;

/// The largest commit object a reader accepts, in bytes. A commit holds one pin per
/// type, so even [`omnigraph_core::limits::TYPES_MAX`] pins stay far below it.
pub const COMMIT_BYTES_MAX: usize = 4 << 20;

/// The largest format object a reader accepts, in bytes.
pub(crate) const FORMAT_BYTES_MAX: usize = 64 << 10;

/// The largest schema document a reader accepts, in bytes: the largest schema source
/// with room for its JSON framing.
pub(crate) const SCHEMA_DOCUMENT_BYTES_MAX: usize = 4 * omnigraph_core::limits::SCHEMA_BYTES_MAX;

/// The longest table id, in bytes (minted ids are `t` and a 26-character ULID).
pub(crate) const TABLE_ID_LEN_MAX: usize = 64;

// log.rs
/// The most commits head discovery probes forward from `HEAD` before it lists the
/// commits folder instead: a `HEAD` that lags further is stale, not a hint.
pub const HEAD_PROBE_MAX: usize = 64;

/// The most commits `find` walks back from the head looking for a commit id; older
/// commits are named by seq.
pub const FIND_WALK_MAX: usize = 1_000;

/// The most commits one `log` call returns.
pub const LOG_PAGE_MAX: usize = 1_000;

// publisher.rs
/// How many times a read-back is tried before the outcome is called unreadable: the
/// failure that hit the PUT often hits the GET right after it.
pub(crate) const READ_BACK_ATTEMPTS_MAX: u32 = 3;

/// How recently before a write began a commit that beat it counts as another writer's
/// that is still writing (see [`crate::attempts::lost_race_wait`]).
pub(crate) const CONTENDER_AGE_MICROS_MAX: i64 = 1_000_000;

// reservation.rs
/// The most reservations one commit carries.
pub const RESERVATIONS_MAX: usize = 16;

/// The most tables the reservations of one commit name in all; a write of more tables
/// never reserves.
pub const RESERVED_TABLES_MAX: usize = 64;

/// The most times one publication reads the log while it waits for reserved tables.
pub(crate) const RESERVATION_POLLS_MAX: u32 = 256;

/// The longest wait between two reads of the log while a publication waits.
pub(crate) const RESERVATION_POLL_MAX: Duration = Duration::from_millis(25);

// retention.rs
/// The smallest grace period cleanup accepts (a floor for tests).
pub const GRACE_MIN: Duration = Duration::from_secs(60);

/// The longest a writer may take from reading a branch's head to publishing the pins
/// it read there without staging them (a merge's source, a new branch's first commit):
/// cleanup keeps the pins of every commit that was a head within its grace period,
/// never less than [`GRACE_MIN`], whatever grace a branch records, so half of that
/// leaves room for the clocks' skew.
pub const FOREIGN_PINS_AGE_MAX: Duration = Duration::from_secs(GRACE_MIN.as_secs() / 2);

// Relations
// A chunk's lines at their longest (ids, actor, kind and a summary, with JSON framing)
// fit what a reader decompresses.
const _: () = assert!(HISTORY_CHUNK_COMMITS_MAX as usize * 1_024 <= HISTORY_LINES_BYTES_MAX);
// A commit at every limit (every type pinned, the longest actor, ids and operation)
// still fits what a reader accepts, so a valid commit is never refused as too large.
const _: () = assert!(
    omnigraph_core::limits::TYPES_MAX * PIN_JSON_BYTES_MAX
        + ACTOR_LEN_MAX
        + IDEMPOTENCY_KEYS_PER_COMMIT_MAX
            * (IDEMPOTENCY_KEY_BYTES_MAX + 4 + IDEMPOTENCY_FINGERPRINT_BYTES_MAX + 4)
        + 2 * COMMIT_ID_LEN_MAX
        + OPERATION_KIND_LEN_MAX
        + SUMMARY_LEN_MAX
        + RESERVATIONS_MAX * (COMMIT_ID_LEN_MAX + 64)
        + RESERVED_TABLES_MAX * (TABLE_ID_LEN_MAX + 4)
        + 64 * 1024
        < COMMIT_BYTES_MAX
);
const _: () = assert!(SCHEMA_DOCUMENT_BYTES_MAX > omnigraph_core::limits::SCHEMA_BYTES_MAX);
// A table id is part of a path inside a table pin; the root URI bounds the rest.
const _: () = assert!(TABLE_ID_LEN_MAX + BRANCH_LEN_MAX < omnigraph_core::limits::ROOT_URI_LEN_MAX);
const _: () = assert!(COMMIT_PUTS_MAX >= 16, "room for a load's usual losses");
const _: () = assert!(LOST_RACE_BACKOFF_MIN.as_micros() <= LOST_RACE_BACKOFF_MAX.as_micros());
/// Foreign pins are published within half the shortest grace, so cleanup still keeps
/// them.
const _: () = assert!(2 * FOREIGN_PINS_AGE_MAX.as_secs() <= GRACE_MIN.as_secs());
/// A chunk's compressed bytes are bounded below its lines' bytes.
const _: () = assert!(HISTORY_CHUNK_BYTES_MAX <= HISTORY_LINES_BYTES_MAX);
