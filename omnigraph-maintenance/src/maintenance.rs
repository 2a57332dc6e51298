//! The maintenance handle: every maintenance writer of one graph handle, run through
//! the root's lane, within a budget, cancellable, with evidence classified from the
//! run's record.

use crate::budget::MaintenanceBudget;
use crate::cleanup::{self, CleanupOptions, CleanupReport};
use crate::lane::{self, Lane, MaintenanceActivity, cancelled};
use crate::optimize::{OptimizeReport, run_units};
use crate::progress::{self, MaintenanceProgress, ProgressItems, ProgressSink, ProgressStage};
use crate::repair::RepairReport;
use crate::run::RunRecord;
use omnigraph_core::{Evidence, Result};
use omnigraph_publish::{IndexBuildReport, Omnigraph};
use std::sync::Arc;

/// Maintenance on one graph handle.
#[derive(Clone)]
pub struct Maintenance<'a> {
    graph: &'a Omnigraph,
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
    pub fn of(graph: &'a Omnigraph) -> Maintenance<'a> {
        Maintenance {
            graph,
            budget: MaintenanceBudget::default(),
            on_callers_runtime: false,
            progress: None,
        }
    }

    /// The same, reporting each run's progress to `sink` (see [`crate::progress`]).
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

    /// Optimizes every table (see [`crate::optimize`]): one unit per table, up to the
    /// budget's unit concurrency at once, each ending with a typed outcome.
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
        let token = admitted.token();
        let prepared = tokio::select! {
            prepared = self.prepare_build_indexes() => prepared?,
            // Builds in progress leave index files: unreachable staging.
            () = token.cancelled() => return Err(cancelled(Evidence::Unpublished)),
        };
        if token.is_cancelled() {
            return Err(cancelled(prepared.evidence()));
        }
        prepared.publish(self.graph).await
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
        let token = admitted.token();
        let tables_total = 1;
        self.report_index_progress("rebuild_index", 0, tables_total);
        let setup = self.staging_setup();
        let prepared = tokio::select! {
            prepared = self.graph.prepare_rebuild_index_with(type_name, index_name, setup) => prepared?,
            // A build in progress leaves index files: unreachable staging.
            () = token.cancelled() => return Err(cancelled(Evidence::Unpublished)),
        };
        if token.is_cancelled() {
            return Err(cancelled(prepared.evidence()));
        }
        let published = prepared.publish(self.graph).await?;
        self.report_index_progress("rebuild_index", 1, tables_total);
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

    /// Runs cleanup with `options` (see [`crate::cleanup`]).
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

    /// Reports an index run of one index per table as it goes.
    fn report_index_progress(&self, operation: &'static str, done: u64, total: u64) {
        progress::report(
            self.progress.as_ref(),
            MaintenanceProgress {
                operation,
                stage: ProgressStage::Working,
                tables_done: done,
                tables_total: total,
                done,
                total,
                items: ProgressItems::Indexes,
            },
        );
    }

    async fn prepare_build_indexes(&self) -> Result<omnigraph_publish::PreparedIndexBuild> {
        let sink = self.progress.clone();
        self.graph
            .prepare_build_indexes_with(
                self.staging_setup(),
                move |built: &omnigraph_publish::IndexBuildProgress| {
                    progress::report(
                        sink.as_ref(),
                        MaintenanceProgress {
                            operation: "build_indexes",
                            stage: ProgressStage::Working,
                            tables_done: built.tables_done,
                            tables_total: built.tables_total,
                            done: built.indexes_done,
                            total: built.indexes_total,
                            items: ProgressItems::Indexes,
                        },
                    )
                },
            )
            .await
    }
}

/// Maintenance calls on a graph handle.
pub trait MaintenanceExt {
    /// Maintenance on this handle with the default budget.
    fn maintenance(&self) -> Maintenance<'_>;
    /// What holds this root's maintenance lane now.
    fn maintenance_in_progress(&self) -> Option<MaintenanceActivity>;
    /// Cancels the run holding this root's lane and every run waiting for it.
    fn cancel_maintenance(&self);
}

impl MaintenanceExt for Omnigraph {
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
