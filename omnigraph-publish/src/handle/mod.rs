//! The graph on the protocol: the [`omnigraph::Omnigraph`] handle, its writers
//! (ingest, mutate, schema apply, the index writer) and reads.

pub mod adjacency;
pub mod branching;
pub(crate) mod byte_channel;
pub mod columnar;
pub(crate) mod conform;
pub mod endpoint_cache;
pub(crate) mod hash_slots;
pub mod indexes;
pub mod ingest;
pub(crate) mod jsonl;
pub(crate) mod jsonl_rows;
pub mod key_cache;
pub mod merge;
pub mod mutate;
pub mod omnigraph;
pub(crate) mod read_ahead;
pub mod reads;
pub mod replanning;
pub mod reserving;
pub mod rows;
pub mod schema_apply;
pub mod spill;
pub mod traverse;
