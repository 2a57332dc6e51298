//! The maintenance handle: every maintenance writer on one branch writer, run through
//! the root's lane, within a budget, cancellable, with evidence classified from the
//! run's record.

use crate::budget::MaintenanceBudget;
use crate::cleanup::{self, CleanupOptions, CleanupReport};
use crate::indexes::{self, IndexBuildProgress, IndexBuildReport, PreparedIndexBuild};
use crate::lane::{self, CancelToken, Lane, MaintenanceActivity, cancelled};
use crate::optimize::{OptimizeReport, run_units};
use crate::progress::{self, MaintenanceProgress, ProgressItems, ProgressSink, ProgressStage};
use crate::repair::RepairReport;
use crate::run::RunRecord;
use omnigraph_core::{Evidence, Result};
use omnigraph_publish::BranchWriter;
use std::sync::Arc;

/// Maintenance through one branch writer (a graph handle, or a plain
/// [`omnigraph_publish::writer::Branch`]).
#[derive(Clone)]
pub struct Maintenance<'a> {
    graph: &'a dyn BranchWriter,
    budget: MaintenanceBudget,
    /// Whether Lance's work stays on the caller's runtime (for comparisons only).
    on_callers_runtime: bool,
    /// Where runs report how far they have gone.
    progress: Option<ProgressSink>,
}

impl std::fmt::Debug for Maintenance<'_> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Maintenance")
            .field("budget", &self.budget)
            .field("on_callers_runtime", &self.on_callers_runtime)
            .field("progress", &self.progress.is_some())
            .finish_non_exhaustive()
    }
}

impl<'a> Maintenance<'a> {
    /// Maintenance on `graph` with the default budget.
    pub fn of(graph: &'a dyn BranchWriter) -> Maintenance<'a> {
        Maintenance {
            graph,
            budget: MaintenanceBudget::default(),
            on_callers_runtime: false,
            progress: None,
        }
    }

    /// The same, reporting each run's progress to `sink`: each stage of each run with
    /// its items done and to do ([`MaintenanceProgress`](crate::MaintenanceProgress)).
    pub fn with_progress(mut self, sink: ProgressSink) -> Maintenance<'a> {
        self.progress = Some(sink);
        self
    }

    /// The same, within `budget`.
    pub fn with_maintenance_budget(mut self, budget: MaintenanceBudget) -> Maintenance<'a> {
        self.budget = budget;
        self
    }

    /// The same, with Lance's work polled on the caller's runtime, as it was before the
    /// maintenance runtime existed. For measurements that compare the two; a host
    /// should not use it.
    pub fn with_lance_work_on_callers_runtime(mut self) -> Maintenance<'a> {
        self.on_callers_runtime = true;
        self
    }

    fn runner(&self) -> Option<omnigraph_publish::LinkRunner> {
        (!self.on_callers_runtime).then(crate::runtime::link_runner)
    }

    /// The budget runs use.
    pub fn budget(&self) -> &MaintenanceBudget {
        &self.budget
    }

    fn lane(&self) -> Arc<Lane> {
        lane::lane_of(&self.graph.graph().root().canonical())
    }

    /// What holds the root's lane now, from any handle on the root in this process.
    pub(crate) fn in_progress(&self) -> Option<MaintenanceActivity> {
        self.lane().in_progress()
    }

    /// Cancels the run holding the root's lane and every run waiting for it; a run
    /// that arrives later is not cancelled.
    pub fn cancel(&self) {
        self.lane().cancel();
    }

    /// Optimizes every table: one unit per table (a staged compaction, index folds and
    /// deferred builds, published by exact CAS on the pin it was planned from), up to
    /// the budget's unit concurrency at once, each ending with a typed outcome.
    pub async fn optimize(&self) -> Result<OptimizeReport> {
        let admitted = self.lane().admit("optimize").await?;
        let mut record = RunRecord::default();
        let runner = self.runner();
        let ran = run_units(
            self.graph,
            &self.budget,
            runner.as_ref(),
            admitted.token(),
            &mut record,
            self.progress.as_ref(),
        )
        .await;
        ran.map_err(|error| record.classify(error))
    }

    /// Builds every declared index the tables lack, in one commit. A cancel drops the
    /// builds where they stand; once the publication starts it finishes.
    pub async fn build_indexes(&self) -> Result<IndexBuildReport> {
        let admitted = self.lane().admit("build_indexes").await?;
        self.publish_built(admitted.token(), self.prepare_build_indexes())
            .await
    }

    /// Rebuilds one built index whole under its name, in one commit: a full-text index,
    /// which optimize does not fold, then covers every row; a vector index keeps its
    /// partition count. A cancel drops the build where it stands; once the publication
    /// starts it finishes.
    pub async fn rebuild_index(
        &self,
        type_name: &str,
        index_name: &str,
    ) -> Result<IndexBuildReport> {
        let admitted = self.lane().admit("rebuild_index").await?;
        let report = |done| {
            let progress = index_progress("rebuild_index", done, 1, done, 1);
            progress::report(self.progress.as_ref(), progress);
        };
        report(0);
        let prepared = indexes::prepare_rebuild_index_with(
            self.graph,
            type_name,
            index_name,
            self.staging_setup(),
        );
        let published = self.publish_built(admitted.token(), prepared).await?;
        report(1);
        Ok(published)
    }

    /// Previews cleanup: what a run with `options` would delete. Nothing is recorded
    /// or deleted; it still takes the lane, so it sees no run of its own in progress.
    pub async fn preview_cleanup(&self, options: &CleanupOptions) -> Result<CleanupReport> {
        let admitted = self.lane().admit("cleanup_preview").await?;
        cleanup::preview(
            self.graph.graph().root(),
            options,
            admitted.token(),
            self.progress.as_ref(),
        )
        .await
    }

    /// Runs cleanup with `options`: it records the run, traces what every retained
    /// commit needs, and deletes the rest that is older than the grace
    /// ([`CleanupReport`](crate::CleanupReport) says what went).
    pub async fn cleanup(&self, options: &CleanupOptions) -> Result<CleanupReport> {
        let admitted = self.lane().admit("cleanup").await?;
        cleanup::run(
            self.graph.graph().root(),
            options,
            self.graph.actor(),
            admitted.token(),
            self.progress.as_ref(),
        )
        .await
    }

    /// The repair report (read-only; it does not take the lane).
    pub async fn repair_report(&self) -> Result<RepairReport> {
        crate::repair::report(self.graph.graph().root()).await
    }
}

impl Maintenance<'_> {
    /// How an index build's staging runs: on the maintenance runtime, within the
    /// full-text budget.
    fn staging_setup(&self) -> impl FnOnce(&mut omnigraph_publish::Staging) + use<> {
        let runner = self.runner();
        let full_text = self.budget.full_text;
        move |staging: &mut omnigraph_publish::Staging| {
            if let Some(runner) = runner {
                staging.run_links_with(runner);
            }
            staging.use_full_text_budget(full_text);
        }
    }

    /// Publishes the index builds `prepare` stages, unless a cancel comes first: it
    /// drops them where they stand (their files are unreachable staging); once the
    /// publication starts it finishes.
    async fn publish_built(
        &self,
        token: &CancelToken,
        prepare: impl std::future::Future<Output = Result<PreparedIndexBuild>>,
    ) -> Result<IndexBuildReport> {
        let prepared = tokio::select! {
            prepared = prepare => prepared?,
            () = token.cancelled() => return Err(cancelled(Evidence::Unpublished)),
        };
        if token.is_cancelled() {
            return Err(cancelled(prepared.evidence()));
        }
        prepared.publish(self.graph).await
    }

    async fn prepare_build_indexes(&self) -> Result<PreparedIndexBuild> {
        let sink = self.progress.clone();
        indexes::prepare_build_indexes_with(
            self.graph,
            self.staging_setup(),
            move |built: &IndexBuildProgress| {
                let progress = index_progress(
                    "build_indexes",
                    built.tables_done,
                    built.tables_total,
                    built.indexes_done,
                    built.indexes_total,
                );
                progress::report(sink.as_ref(), progress)
            },
        )
        .await
    }
}

/// Where an index run stands: `done` of `total` indexes, over `tables_done` of
/// `tables_total` tables.
fn index_progress(
    operation: &'static str,
    tables_done: u64,
    tables_total: u64,
    done: u64,
    total: u64,
) -> MaintenanceProgress {
    MaintenanceProgress {
        operation,
        stage: ProgressStage::Working,
        tables_done,
        tables_total,
        done,
        total,
        items: ProgressItems::Indexes,
    }
}

/// Maintenance calls on a branch writer: a graph handle (`omnigraph_graph::Omnigraph`)
/// or a plain [`omnigraph_publish::writer::Branch`].
pub trait MaintenanceExt {
    /// Maintenance on this handle with the default budget.
    fn maintenance(&self) -> Maintenance<'_>;
    /// What holds this root's maintenance lane now.
    fn maintenance_in_progress(&self) -> Option<MaintenanceActivity>;
    /// Cancels the run holding this root's lane and every run waiting for it.
    fn cancel_maintenance(&self);
}

impl<W: BranchWriter> MaintenanceExt for W {
    fn maintenance(&self) -> Maintenance<'_> {
        Maintenance::of(self)
    }

    fn maintenance_in_progress(&self) -> Option<MaintenanceActivity> {
        Maintenance::of(self).in_progress()
    }

    fn cancel_maintenance(&self) {
        Maintenance::of(self).cancel();
    }
}
