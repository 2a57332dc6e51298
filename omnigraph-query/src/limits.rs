//! Every limit of this crate in one place, each named `*_MAX`, with the relations
//! between them checked when the crate compiles.

// check.rs
/// The longest query text accepted, in bytes.
pub const QUERY_BYTES_MAX: usize = 256 << 10;

/// The most hops a variable-length pattern may take (`-[:T*1..N]->`): every hop is a
/// join over an edge table, and an unbounded one has no cost a plan can bound.
pub const VAR_LENGTH_HOPS_MAX: u64 = 8;

/// The deepest expression or subquery nesting checked: the checker recurses once per
/// level.
pub const NESTING_MAX: usize = 128;

// Relations
const _: () = assert!(VAR_LENGTH_HOPS_MAX >= 1);
const _: () = assert!(NESTING_MAX >= 16, "room for ordinary expressions");
