//! OmniGraph maintenance: work that keeps a graph fast without changing what it holds.
//!
//! It depends on `omnigraph_publish` and `omnigraph_core` only: a run publishes
//! through a [`omnigraph_publish::BranchWriter`] (the graph handle is one), never the
//! graph crate.
//!
//! - [`Maintenance`] (and [`MaintenanceExt`] on a branch writer): every maintenance run
//!   goes through the root's lane, within a [`MaintenanceBudget`], can be cancelled,
//!   and classifies its failures' evidence from what it has done.
//! - `optimize`: per table, a staged compaction, index folds and deferred index
//!   builds, published by exact CAS on the pin the table was planned from.
//! - `indexes`: index builds: every declared index a table lacks, and the rebuild of
//!   one index whole.
//! - `adjacency`: the adjacency artifact's build.
//! - `lane`: one run at a time per root in a process, in arrival order.
//! - `budget`: the knobs, and `OMNIGRAPH_MAINTENANCE_CONCURRENCY`.
//! - `cleanup`: the tracing collector that reclaims what no retained commit needs.
//! - `repair`: the read-only report of drift, missing pins and dead staging.
//! - `progress`: what a run reports as it goes ([`Maintenance::with_progress`]).
//!
//! **Supported API.** [`MaintenanceExt`] on a branch writer (or [`Maintenance::of`]):
//! `optimize`, `build_indexes`, `cleanup`, `preview_cleanup`, `repair_report`,
//! `cancel_maintenance`, with [`MaintenanceBudget`] and [`CleanupOptions`], and the
//! reports they return.
//!
//! ```
//! # #![recursion_limit = "256"] // a write awaits deep futures
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use omnigraph_maintenance::MaintenanceExt;
//! use omnigraph_publish::{Graph, writer::Branch};
//! let catalog = omnigraph_core::schema::parse("people.pg", "node Person { id: String @key }")
//!     .unwrap();
//! let (graph, _) = Graph::create("memory://maintenance-tour", &catalog, "me").await.unwrap();
//! // Maintenance publishes through any branch writer: a graph handle, or this plain one.
//! let writer = Branch::new(graph, "main", "maintainer");
//! let optimized = writer.maintenance().optimize().await.unwrap();
//! assert_eq!(optimized.exit_code(), 0);
//! let repair = writer.maintenance().repair_report().await.unwrap();
//! assert_eq!(repair.exit_code(), 0);
//! # });
//! ```
#![warn(missing_docs)]
#![warn(unreachable_pub)]
#![cfg_attr(
    not(feature = "internal-api"),
    deny(private_interfaces, private_bounds, unnameable_types)
)]
// Without `internal-api`, what only the crates above use is dead here.
#![cfg_attr(not(feature = "internal-api"), allow(dead_code, unreachable_pub))]

mod lane;
pub mod limits;
mod maintenance;
mod run;

// Outside the supported API: public with `internal-api` (ARCHITECTURE.md).
#[cfg(feature = "internal-api")]
pub mod adjacency;
#[cfg(not(feature = "internal-api"))]
mod adjacency;
#[cfg(feature = "internal-api")]
pub mod budget;
#[cfg(not(feature = "internal-api"))]
mod budget;
#[cfg(feature = "internal-api")]
pub mod cleanup;
#[cfg(not(feature = "internal-api"))]
mod cleanup;
#[cfg(feature = "internal-api")]
pub mod indexes;
#[cfg(not(feature = "internal-api"))]
mod indexes;
#[cfg(feature = "internal-api")]
pub mod optimize;
#[cfg(not(feature = "internal-api"))]
mod optimize;
#[cfg(feature = "internal-api")]
pub mod progress;
#[cfg(not(feature = "internal-api"))]
mod progress;
#[cfg(feature = "internal-api")]
pub mod repair;
#[cfg(not(feature = "internal-api"))]
mod repair;
#[cfg(feature = "internal-api")]
pub mod runtime;
#[cfg(not(feature = "internal-api"))]
mod runtime;

pub use adjacency::AdjacencyOutcome;
pub use budget::MaintenanceBudget;
pub use cleanup::{
    CleanupOptions, CleanupPolicy, CleanupReport, CleanupSettings, CleanupTableError,
    CleanupTotals, LogCleanup, TableCleanup,
};
pub use indexes::{IndexBuildProgress, IndexBuildReport, PendingIndex, PreparedIndexBuild};
pub use lane::MaintenanceActivity;
pub use maintenance::{Maintenance, MaintenanceExt};
pub use optimize::{OptimizeReport, TableOptimize, UnitOutcome, optimize};
pub use progress::{MaintenanceProgress, ProgressItems, ProgressSink, ProgressStage};
pub use repair::{RepairReport, TableRepair, TableRepairStatus};
