//! How far a maintenance run has gone, reported as it goes: an embedder shows it, and
//! the CLI draws a bar from it. A report is a snapshot; the sink is called from the
//! run's own task, so it must be quick (a bar update, a channel send).

use std::sync::Arc;

/// Which part of a run the figures count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProgressStage {
    /// Reading what each table needs (cleanup's trace and per-table plans, an index
    /// build's look at which indexes are missing).
    Planning,
    /// Doing it: optimize's units, index builds, cleanup's deletions.
    Working,
}

/// What `done` and `total` count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProgressItems {
    /// Table rows (optimize: the rows of the tables whose unit has ended).
    Rows,
    /// Objects (cleanup: manifests and files deleted).
    Files,
    /// Indexes (build-indexes: indexes staged).
    Indexes,
    /// Tables (cleanup's planning).
    Tables,
}

/// A snapshot of a run's progress.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MaintenanceProgress {
    /// The run's operation, as the lane names it (`optimize`, `cleanup`, ...).
    pub operation: &'static str,
    /// The part of the run.
    pub stage: ProgressStage,
    /// Tables this stage has finished.
    pub tables_done: u64,
    /// Tables this stage works on.
    pub tables_total: u64,
    /// Items done, in `items`.
    pub done: u64,
    /// Items this stage will do, in `items`.
    pub total: u64,
    /// What `done` and `total` count.
    pub items: ProgressItems,
}

impl MaintenanceProgress {
    /// Whether the figures hold together: nothing done beyond its total.
    pub fn is_consistent(&self) -> bool {
        self.tables_done <= self.tables_total && self.done <= self.total
    }
}

/// Where a run reports its progress.
pub type ProgressSink = Arc<dyn Fn(&MaintenanceProgress) + Send + Sync>;

/// Reports to an optional sink, asserting the figures hold together first.
pub(crate) fn report(sink: Option<&ProgressSink>, progress: MaintenanceProgress) {
    debug_assert!(progress.is_consistent(), "{progress:?}");
    if let Some(sink) = sink {
        sink(&progress);
    }
}
