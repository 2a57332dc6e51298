//! OmniGraph maintenance: work that keeps a graph fast without changing what it holds.
//!
//! - [`optimize`]: per table, a staged compaction, index folds and deferred index
//!   builds, published by exact CAS on the pin the table was planned from.
//!
//! The lane, budget and cancellation of runs arrive with the maintenance-lane work; the
//! unit loop here (`plan_unit`, then `publish_unit`) is shaped to be wrapped by them.

#![warn(missing_docs)]

pub mod optimize;

pub use optimize::{OptimizeReport, TableOptimize, optimize};
