//! Every limit of this crate in one place, each named `*_MAX`, with the relations
//! between them checked when the crate compiles.

// check.rs
/// The longest query text accepted, in bytes.
pub const QUERY_BYTES_MAX: usize = 256 << 10;

/// The most hops a variable-length pattern may take (`-[:T*1..N]->`): every hop is a
/// join over an edge table, and an unbounded one has no cost a plan can bound.
pub const VAR_LENGTH_HOPS_MAX: u64 = 8;

/// The most tokens (words, names, literals, operators) a query holds: the parser's
/// work grows faster than the count, so the count is bounded before it runs.
pub const QUERY_TOKENS_MAX: usize = 8_192;

/// The most node and relationship patterns in one query, subqueries included: each
/// holds the types it may be (up to every type of the schema), and each is a join.
pub const PATTERN_ELEMENTS_MAX: usize = 256;

/// The deepest nesting a query may have: brackets and runs of prefix operators
/// (counted on its tokens, before the parser recurses on them), and expressions and
/// subqueries (the checker recurses once per level).
pub const NESTING_MAX: usize = 128;

// plan/
/// The most columns one `WITH` or `RETURN` projects.
pub const QUERY_COLUMNS_MAX: usize = 1_024;

// exec/expand.rs
/// The rows an expansion emits in one batch before it hands the batch on (a batch
/// holds every edge of the row that crossed it, so it may hold a degree more).
pub const EXPAND_BATCH_ROWS_MAX: usize = 8_192;

/// The most adjacency artifacts whose keys, parsed and indexed for expansion, the
/// process keeps (the first parsed go first; an entry whose artifact no handle holds
/// any more goes at the next parse).
pub const EXPAND_RESOLVED_CACHED_MAX: usize = 16;

/// The most bytes of text keys an expansion reads from one artifact: what one Arrow
/// text column holds (32-bit offsets). A larger artifact's hops join the edge table.
pub const EXPAND_TEXT_KEY_BYTES_MAX: usize = i32::MAX as usize;

// exec/joined_scan.rs
/// The most distinct keys a hop joining an edge table looks up in the table's `src` or
/// `dst` index: a hop from more nodes reads every edge. Past a few thousand keys, a
/// lookup takes about as many scattered reads as there are edges in a page.
pub const EXPAND_LOOKUP_KEYS_MAX: usize = 1_024;

/// The bytes a node table's joined scan estimates for one text or binary value when it
/// tells DataFusion the size of its table (which side of the join is held, and whether
/// whole, depends on it): Lance 14's estimate for its own scans.
pub const VARIABLE_VALUE_BYTES_ESTIMATE: usize = 64;

// run.rs
/// The memory a query's operators may hold at once when the caller names no budget:
/// past it a sort or an aggregate spills to disk and a join fails with a typed error.
pub const QUERY_MEMORY_BYTES_DEFAULT: usize = 1 << 30;

/// The most parameters one query is given.
pub const QUERY_PARAMETERS_MAX: usize = 1_024;

// Relations
const _: () = assert!(VAR_LENGTH_HOPS_MAX >= 1);
const _: () = assert!(NESTING_MAX >= 16, "room for ordinary expressions");

/// Prepared plans the process keeps for queries run again (`run.rs`): each is one
/// query text at one commit, and holds its tables' datasets.
pub const PLANS_CACHED_MAX: usize = 128;

/// The most candidates a retrieval leg restricted by a pattern ranks: their keys are
/// Lance's prefilter, held in memory as one list.
pub const LEG_CANDIDATES_MAX: usize = 100_000;

/// The most hits a retrieval leg or fusion returns (`k`).
pub const LEG_K_MAX: usize = 10_000;

/// The most hits a leg reads from Lance to see every hit tied with its `k`-th (so
/// the cut among ties is by key): `k` doubled until the ties end, at most this.
pub const LEG_FETCH_MAX: usize = 4 * LEG_K_MAX;

/// The most edits a text leg's fuzzy match allows (Lance's fuzzy matching).
pub const FUZZINESS_MAX: i64 = 2;

/// The most words between two consecutive words of a phrase (`{slop: n}`): Lance
/// checks positions within this window for every candidate row.
pub const PHRASE_SLOP_MAX: i64 = 16;

// exec/prefix.rs
/// The most words a text leg's prefix stands for (Lance's own bound on a fuzzy
/// match's expansions): those held by the most rows.
pub const PREFIX_EXPANSIONS_MAX: usize = 50;

/// The most rows a prefix reads the words of (the whole column, or the leg's
/// candidates): past it the leg fails and asks for candidates.
pub const PREFIX_ROWS_READ_MAX: usize = 10_000_000;

/// The fewest characters a prefix has: a shorter one stands for too much of the column.
pub const PREFIX_CHARS_MIN: usize = 2;

/// The most distinct words beginning with a prefix counted while the column is read;
/// past it only the words already met are counted.
pub const PREFIX_WORDS_COUNTED_MAX: usize = 100_000;

/// The most legs one fusion combines.
pub const FUSION_LEGS_MAX: usize = 16;
