//! OmniGraph publication: the storage format and the publication protocol over Lance
//! (`docs/format.md`). No rows and no writers: a downstream crate that wants only atomic
//! multi-table publication over Lance takes this crate (and `omnigraph-core`) alone.
//!
//! **Supported API.** [`Graph`] (create, open, snapshots), [`Staging`] and [`publish`]
//! with a [`Publication`] and its [`ReadSet`], the [`GraphCommit`] they produce, the
//! [`CommitLog`], and the [`BranchWriter`] trait a writer on one branch implements.
//! The rest is public only with the `internal-api` feature, for the crates above and
//! the tests: not promised.
//!
//! - `layout`: where every object lives under the root.
//! - [`commit`]: the immutable graph commit and its table pins.
//! - [`log`]: a branch's commit log, head discovery at constant cost, history pages.
//! - [`publication`]: what a commit asserts about the head and what it changes, checked
//!   in one place.
//! - [`publisher`]: the exact compare-and-swap that makes staged versions visible.
//! - [`attempts`]: the one bound on a write's commit PUTs, and the one backoff.
//! - `gate`: one publisher per (root, branch) in a process.
//! - `reservation`: a short lease on tables, carried in the log.
//! - [`staging`]: detached staging chains per table, published in one commit.
//! - `retention`: cleanup's record, carried forward by every commit.
//! - `history`: the compact history of commits reclaimed below a branch's floor.
//! - [`branches`]: branch records and names.
//! - [`graph`]: create and open a graph; snapshots and time travel.
//! - [`writer`]: the [`BranchWriter`] trait: what maintenance needs of a writer on one
//!   branch.
//! - `adjacency`: the adjacency artifact's format, which optimize writes and
//!   traversals read.
//!
//! ```
//! # #![recursion_limit = "256"] // a write awaits deep futures
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use omnigraph_publish::{CommitRef, Graph};
//! let catalog = omnigraph_core::schema::parse("people.pg", "node Person { id: String @key }")
//!     .unwrap();
//! let (graph, genesis) = Graph::create("memory://publish-tour", &catalog, "me").await.unwrap();
//! // The head of `main` is the genesis commit: one table per type, each pinned at an
//! // exact version that readers open and nothing else.
//! let head = graph.commit("main", &CommitRef::Head).await.unwrap();
//! assert_eq!(head.commit_id, genesis.commit_id);
//! assert_eq!(head.pins.len(), 1);
//! # });
//! ```
#![warn(missing_docs)]
#![recursion_limit = "256"]
#![warn(unreachable_pub)]
#![cfg_attr(
    not(feature = "internal-api"),
    deny(private_interfaces, private_bounds, unnameable_types)
)]
// Without `internal-api`, what only the crates above use is dead here.
#![cfg_attr(not(feature = "internal-api"), allow(dead_code, unreachable_pub))]

pub mod attempts;
pub mod branches;
pub mod commit;
pub mod graph;
pub mod limits;
pub mod log;
pub mod publication;
pub mod publisher;
pub mod request;
pub mod staging;
pub mod writer;

// Not an API: how `Branch::head` shares its reads.
mod shared_reads;

// Outside the supported API: public with `internal-api` (ARCHITECTURE.md).
#[cfg(feature = "internal-api")]
pub mod adjacency;
#[cfg(not(feature = "internal-api"))]
mod adjacency;
#[cfg(feature = "internal-api")]
pub mod gate;
#[cfg(not(feature = "internal-api"))]
mod gate;
#[cfg(feature = "internal-api")]
pub mod history;
#[cfg(not(feature = "internal-api"))]
mod history;
#[cfg(feature = "internal-api")]
pub mod layout;
#[cfg(not(feature = "internal-api"))]
mod layout;
#[cfg(feature = "internal-api")]
pub mod reservation;
#[cfg(not(feature = "internal-api"))]
mod reservation;
#[cfg(feature = "internal-api")]
pub mod retention;
#[cfg(not(feature = "internal-api"))]
mod retention;

pub use attempts::CommitAttempts;
pub use branches::BranchInfo;
pub use commit::{CommitOperation, ForkPoint, GraphCommit, MergedFrom, TableKind, TablePin};
pub use graph::{CommitRef, FormatDoc, Graph, Snapshot};
pub use layout::{MAIN_BRANCH, check_branch};
pub use log::CommitLog;
pub use publication::{Change, Publication, ReadSet, Requirements};
pub use publisher::publish;
pub use reservation::Reservation;
pub use staging::{LinkRunner, Staging, TableChain};
pub use writer::{Branch, BranchWriter, WriteStart};
