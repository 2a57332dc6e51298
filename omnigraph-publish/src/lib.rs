//! OmniGraph publication: atomic multi-table publication over Lance.
//!
//! Two halves, in two folders. [`protocol`] is the format and the publication protocol
//! (layout, commit, log, publisher, gate, staging, retention, graph): a downstream
//! crate that wants only atomic multi-table publication over Lance uses it alone.
//! [`handle`] is the graph built on it: the [`Omnigraph`] handle, its writers and
//! reads. The protocol never imports the handle half (`cargo xtask guards` checks).
//!
//! **Supported API.** For publication only: [`Graph`] (create, open, snapshots),
//! [`Staging`] and [`publish`] with a [`Publication`] and its [`ReadSet`], and the
//! [`GraphCommit`] they produce. For a whole graph: [`Omnigraph`] and the reports its
//! calls return. Everything else public is reachable for tests and tools, not promised.
//!
//! - [`omnigraph`]: the handle users call: writers and reads on one branch.
//! - [`indexes`]: the index writer (declared indexes, trainability) and coverage.
//! - [`reads`]: neighbours, nearest vectors and full-text search.
//! - [`traverse`]: multi-hop traversal, one batched lookup per step.
//! - [`adjacency`]: the adjacency artifact optimize builds and traversals read.
//! - [`key_cache`]: a warm handle's keys per table, each with its row, so key checks cost
//!   no request, and a write by key or a `get` at the head reads only the fragments
//!   that hold its keys.
//! - [`endpoint_cache`]: a warm handle's edge endpoints per edge table, so a node delete
//!   reads only the edge fragments that can hold its edges.
//! - [`ingest`]: insert and load: validated batches, staged and published in one commit.
//! - [`mutate`]: update and delete, which plan again when the tables they read move;
//!   deletes cascade to incident edges.
//! - [`schema_apply`]: moving a graph to a new schema, refusing data loss unless forced.
//! - [`rows`]: JSON objects to validated Arrow rows of one type.
//! - [`graph`]: create and open a graph; snapshots and time travel.
//! - [`commit`]: the immutable graph commit and its table pins.
//! - [`log`]: a branch's commit log, head discovery at constant cost, history pages.
//! - [`publisher`]: the exact compare-and-swap that makes staged versions visible.
//! - [`staging`]: detached staging chains per table, published in one commit.
//! - [`gate`]: one publisher per (root, branch) in a process.
//! - [`layout`]: where every object lives under the root.

#![warn(missing_docs)]
// A write awaits deep futures (ingest -> staging -> publisher -> Lance); computing their
// layout exceeds the default query depth of 128.
#![recursion_limit = "256"]
#![warn(unreachable_pub)]

pub mod handle;
pub mod protocol;

// Every module keeps its path at the crate root (`omnigraph_publish::layout`, ...).
pub use columnar::InputFormat;
pub use handle::{
    adjacency, branching, columnar, endpoint_cache, indexes, ingest, key_cache, merge, mutate,
    omnigraph, reads, replanning, reserving, rows, schema_apply, spill, traverse,
};
pub use protocol::{
    branches, commit, gate, graph, history, layout, log, publisher, reservation, retention, staging,
};

pub use adjacency::{AdjacencyOutcome, AdjacencyStatus};
pub use branches::BranchInfo;
pub use commit::{CommitOperation, ForkPoint, GraphCommit, MergedFrom, TableKind, TablePin};
pub use graph::{CommitRef, FormatDoc, Graph, Snapshot};
pub use indexes::{
    IndexBuildProgress, IndexBuildReport, IndexCoverage, PendingIndex, PreparedIndexBuild,
};
pub use ingest::{IngestReport, LoadMode};
pub use log::CommitLog;
pub use merge::{MergeBudget, MergeReport, TableMerge, TableMergeAction};
pub use mutate::PreparedWrite;
pub use omnigraph::{LoadProgress, Omnigraph, ScanRequest, default_actor};
pub use publisher::{Publication, ReadSet, publish};
pub use reads::Direction;
pub use schema_apply::{SchemaApplyReport, SchemaChange};
pub use spill::LoadBudget;
pub use staging::{LinkRunner, Staging, TableChain};
pub use traverse::{Step, StepDirection, StepReport, StepVia, Traversal, TraversalPath};
