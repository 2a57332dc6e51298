//! OmniGraph graph: the typed property graph on the publication protocol. The
//! [`Omnigraph`] handle on one branch, its writers (insert and load, update and delete,
//! schema apply, branches and merge) and its reads (get, scan, neighbours, nearest,
//! full-text search, multi-hop traversal), with a warm handle's key, endpoint and
//! adjacency caches. Everything it publishes goes through `omnigraph_publish`; every
//! Lance write through `omnigraph_core::adapter`. Maintenance (`omnigraph_maintenance`)
//! sits beside it, not above or below: it publishes through the handle as a
//! [`omnigraph_publish::BranchWriter`] and never sees the rest of it.
//!
//! **Supported API.** [`Omnigraph`] and the reports its calls return.
//!
//! ```
//! # #![recursion_limit = "256"] // a write awaits deep futures
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use omnigraph_graph::Omnigraph;
//! use omnigraph_publish::CommitRef;
//! let graph = Omnigraph::create("memory://tour", "node Person { id: String @key, age: Int32? }")
//!     .await
//!     .unwrap();
//! let rows = vec![serde_json::json!({"id": "ada", "age": 36}).as_object().unwrap().clone()];
//! graph.insert_json("Person", rows).await.unwrap();
//! let ada = graph.get("Person", &"ada".into(), &CommitRef::Head).await.unwrap();
//! assert_eq!(ada.unwrap()["age"], 36);
//! # });
//! ```
//!
//! - `omnigraph`: the handle users call: writers and reads on one branch.
//! - `rows`: JSON objects to validated Arrow rows of one type, and back.
//! - `ingest`: insert and load: validated batches, staged and published in one commit.
//! - `jsonl` and `columnar`: JSONL, CSV, Parquet and Arrow IPC input.
//! - `mutate`: update and delete, which plan again when the tables they read move;
//!   deletes cascade to incident edges.
//! - `replanning` and `reserving`: the loop update, delete, merge and schema apply
//!   share, and the reservation a starved writer takes.
//! - `schema_apply`: moving a graph to a new schema, refusing data loss unless forced.
//! - `branching` and `merge`: branches, and row merges by key.
//! - `reads`: neighbours, nearest vectors and full-text search.
//! - `traverse`: multi-hop traversal, one batched lookup per step.
//! - `adjacency`: the adjacency artifacts a handle reads and holds.
//! - `export`: a type's whole table at a commit, streamed in the type's columns.
//! - `indexes`: index coverage at a commit.
//! - `key_cache` and `endpoint_cache`: a warm handle's keys per table and edge
//!   endpoints per edge table.
//! - `spill`: a load's key sets, in memory up to a budget and spilled past it.

#![warn(missing_docs)]
// A write awaits deep futures (ingest -> staging -> publisher -> Lance); computing their
// layout exceeds the default query depth of 128.
#![recursion_limit = "256"]
#![warn(unreachable_pub)]
#![cfg_attr(
    not(feature = "internal-api"),
    deny(private_interfaces, private_bounds, unnameable_types)
)]
// Without `internal-api`, what only the crates above use is dead here.
#![cfg_attr(not(feature = "internal-api"), allow(dead_code, unreachable_pub))]

// The protocol modules this crate builds on, by their own paths (`crate::commit` is
// `omnigraph_publish::commit`): imported, never re-exported.
use omnigraph_publish::{
    branches, commit, graph, layout, publication, publisher, reservation, staging,
};

pub(crate) mod byte_channel;
pub(crate) mod conform;
pub(crate) mod hash_slots;
pub(crate) mod jsonl;
pub(crate) mod jsonl_rows;
pub mod limits;
pub(crate) mod read_ahead;

// Outside the supported API: public with `internal-api` (ARCHITECTURE.md).
#[cfg(feature = "internal-api")]
pub mod adjacency;
#[cfg(not(feature = "internal-api"))]
mod adjacency;
#[cfg(feature = "internal-api")]
pub mod branching;
#[cfg(not(feature = "internal-api"))]
mod branching;
#[cfg(feature = "internal-api")]
pub mod columnar;
#[cfg(not(feature = "internal-api"))]
mod columnar;
#[cfg(feature = "internal-api")]
pub mod endpoint_cache;
#[cfg(not(feature = "internal-api"))]
mod endpoint_cache;
#[cfg(feature = "internal-api")]
pub mod export;
#[cfg(not(feature = "internal-api"))]
mod export;
#[cfg(feature = "internal-api")]
pub mod indexes;
#[cfg(not(feature = "internal-api"))]
mod indexes;
#[cfg(feature = "internal-api")]
pub mod ingest;
#[cfg(not(feature = "internal-api"))]
mod ingest;
#[cfg(feature = "internal-api")]
pub mod key_cache;
#[cfg(not(feature = "internal-api"))]
mod key_cache;
#[cfg(feature = "internal-api")]
pub mod merge;
#[cfg(not(feature = "internal-api"))]
mod merge;
#[cfg(feature = "internal-api")]
pub mod mutate;
#[cfg(not(feature = "internal-api"))]
mod mutate;
#[cfg(feature = "internal-api")]
pub mod omnigraph;
#[cfg(not(feature = "internal-api"))]
mod omnigraph;
#[cfg(feature = "internal-api")]
pub mod reads;
#[cfg(not(feature = "internal-api"))]
mod reads;
#[cfg(feature = "internal-api")]
pub mod replanning;
#[cfg(not(feature = "internal-api"))]
mod replanning;
#[cfg(feature = "internal-api")]
pub mod reserving;
#[cfg(not(feature = "internal-api"))]
mod reserving;
#[cfg(feature = "internal-api")]
pub mod rows;
#[cfg(not(feature = "internal-api"))]
mod rows;
#[cfg(feature = "internal-api")]
pub mod schema_apply;
#[cfg(not(feature = "internal-api"))]
mod schema_apply;
#[cfg(feature = "internal-api")]
pub mod spill;
#[cfg(not(feature = "internal-api"))]
mod spill;
#[cfg(feature = "internal-api")]
pub mod traverse;
#[cfg(not(feature = "internal-api"))]
mod traverse;
mod writer;

pub use adjacency::AdjacencyStatus;
pub use columnar::InputFormat;
pub use export::{Export, ExportFormat, json_lines};
pub use indexes::{IndexCoverage, VectorIndexSizing};
pub use ingest::{IngestReport, LoadMode};
pub use merge::{MergeBudget, MergeReport, TableMerge, TableMergeAction};
pub use mutate::PreparedWrite;
pub use omnigraph::{LoadProgress, Omnigraph, ScanRequest, default_actor};
pub use reads::Direction;
pub use rows::batches_to_json;
pub use schema_apply::{SchemaApplyReport, SchemaChange};
pub use spill::LoadBudget;
pub use traverse::{Step, StepDirection, StepReport, StepVia, Traversal, TraversalPath};
