//! Maintenance behind routes: a run started by a request goes on in a task of its own
//! (a client that hangs up does not stop it), reports its progress, and can be
//! cancelled. A request for an operation already running on a graph, on the same branch
//! with the same options, joins that run instead of queueing a second one behind it on
//! the root's lane.

use crate::error::engine_document;
use crate::limits::FINISHED_RUNS_KEPT_MAX;
use futures::FutureExt;
use omnigraph_core::{OmniError, Result};
use omnigraph_graph::Omnigraph;
use omnigraph_maintenance::{
    CleanupOptions, MaintenanceBudget, MaintenanceExt, MaintenanceProgress, ProgressSink,
};
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::watch;

/// What a run does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Operation {
    Optimize,
    /// Cleanup that deletes.
    Cleanup,
    /// Cleanup that only reports what it would delete.
    CleanupPreview,
}

impl Operation {
    fn name(self) -> &'static str {
        match self {
            Operation::Optimize => "optimize",
            Operation::Cleanup => "cleanup",
            Operation::CleanupPreview => "cleanup_preview",
        }
    }
}

/// How a run ended.
#[derive(Clone, Debug)]
pub(crate) enum Outcome {
    /// Its report, and the exit status of its worst unit.
    Finished { report: Value, exit_code: i32 },
    /// Its error: the HTTP status and the error document.
    Failed { status: u16, error: Value },
}

/// One run.
pub(crate) struct Run {
    pub(crate) id: String,
    graph: String,
    branch: String,
    operation: Operation,
    cleanup: Option<CleanupOptions>,
    started_at: i64,
    handle: Arc<Omnigraph>,
    progress: Mutex<Option<MaintenanceProgress>>,
    /// Set by a cancel: a run not yet admitted to the root's lane (which a lane cancel
    /// cannot reach) cancels the lane itself at its first report, or never starts.
    cancelled: AtomicBool,
    outcome: watch::Sender<Option<Outcome>>,
}

impl Run {
    /// The run as JSON: what it is, its state, its progress, and its report or error.
    pub(crate) fn json(&self) -> Value {
        let outcome = self.outcome.borrow().clone();
        let mut document = json!({
            "id": self.id,
            "graph": self.graph,
            "branch": self.branch,
            "operation": self.operation.name(),
            "started_at": self.started_at,
            "progress": *self.progress.lock(),
        });
        match outcome {
            None => document["state"] = json!("running"),
            Some(Outcome::Finished { report, exit_code }) => {
                document["state"] = json!("finished");
                document["report"] = report;
                document["exit_code"] = json!(exit_code);
            }
            Some(Outcome::Failed { error, .. }) => {
                document["state"] = json!("failed");
                document["error"] = error;
            }
        }
        document
    }

    /// The graph it runs on.
    pub(crate) fn graph(&self) -> &str {
        &self.graph
    }

    fn is_running(&self) -> bool {
        self.outcome.borrow().is_none()
    }

    /// Waits for the run to end.
    pub(crate) async fn finished(&self) -> Outcome {
        let mut receiver = self.outcome.subscribe();
        loop {
            if let Some(outcome) = receiver.borrow_and_update().clone() {
                return outcome;
            }
            // The sender lives in `self`; it cannot close while this borrow holds.
            if receiver.changed().await.is_err() {
                return Outcome::Failed {
                    status: 500,
                    error: engine_document(&OmniError::internal("the run's task ended")),
                };
            }
        }
    }

    /// Cancels the run: the root's lane cancels the run holding it and every run
    /// waiting for it, at their next cancel point.
    pub(crate) fn cancel(&self) {
        if self.is_running() {
            self.cancelled.store(true, Ordering::SeqCst);
            self.handle.cancel_maintenance();
        }
    }
}

/// What a start request asks for.
pub(crate) struct Start {
    pub(crate) graph: String,
    pub(crate) branch: String,
    pub(crate) operation: Operation,
    pub(crate) cleanup: Option<CleanupOptions>,
}

/// The runs of one server.
pub(crate) struct Runs {
    budget: MaintenanceBudget,
    runs: Mutex<Vec<Arc<Run>>>,
}

impl Runs {
    pub(crate) fn new(budget: MaintenanceBudget) -> Runs {
        Runs {
            budget,
            runs: Mutex::new(Vec::new()),
        }
    }

    /// Starts a run on `handle`, or returns the run of the same operation already
    /// going on the graph (`true`: joined).
    pub(crate) fn start(&self, start: Start, handle: Arc<Omnigraph>) -> (Arc<Run>, bool) {
        let mut runs = self.runs.lock();
        if let Some(running) = runs.iter().find(|run| {
            run.graph == start.graph
                && run.branch == start.branch
                && run.operation == start.operation
                && run.cleanup == start.cleanup
                && run.is_running()
        }) {
            return (running.clone(), true);
        }
        let (outcome, _) = watch::channel(None);
        let run = Arc::new(Run {
            id: format!("run_{}", omnigraph_core::seams::new_id().to_lowercase()),
            graph: start.graph,
            branch: start.branch,
            operation: start.operation,
            cleanup: start.cleanup,
            started_at: omnigraph_core::seams::now_micros(),
            handle,
            progress: Mutex::new(None),
            cancelled: AtomicBool::new(false),
            outcome,
        });
        // Finished runs beyond the bound go, oldest first; running ones always stay.
        while runs.iter().filter(|run| !run.is_running()).count() >= FINISHED_RUNS_KEPT_MAX {
            let Some(oldest) = runs.iter().position(|run| !run.is_running()) else {
                break;
            };
            runs.remove(oldest);
        }
        runs.push(run.clone());
        drop(runs);
        let task = run.clone();
        let budget = self.budget;
        tokio::spawn(async move {
            // A run that panics still ends, as an internal failure: its waiters and a
            // shutdown never wait on it forever.
            let executed = AssertUnwindSafe(execute(&task, budget, start.cleanup))
                .catch_unwind()
                .await
                .unwrap_or_else(|_| Err(OmniError::internal("the maintenance run panicked")));
            let outcome = match executed {
                Ok((report, exit_code)) => Outcome::Finished { report, exit_code },
                Err(error) => Outcome::Failed {
                    status: error.code().http_status,
                    error: engine_document(&error),
                },
            };
            task.outcome.send_replace(Some(outcome));
        });
        (run, false)
    }

    /// The run with `id` on `graph`.
    pub(crate) fn find(&self, graph: &str, id: &str) -> Result<Arc<Run>> {
        self.runs
            .lock()
            .iter()
            .find(|run| run.graph == graph && run.id == id)
            .cloned()
            .ok_or_else(|| {
                OmniError::not_found(format!("maintenance run {id:?} of graph {graph:?}"))
            })
    }

    /// Every run still going.
    pub(crate) fn running(&self) -> Vec<Arc<Run>> {
        self.runs
            .lock()
            .iter()
            .filter(|run| run.is_running())
            .cloned()
            .collect()
    }
}

/// Runs the operation, its progress kept on the run.
async fn execute(
    run: &Arc<Run>,
    budget: MaintenanceBudget,
    cleanup: Option<CleanupOptions>,
) -> Result<(Value, i32)> {
    if run.cancelled.load(Ordering::SeqCst) {
        return Err(OmniError::MaintenanceCancelled {
            evidence: omnigraph_core::Evidence::BeforeEffect,
        });
    }
    let watcher = run.clone();
    let sink: ProgressSink = Arc::new(move |progress: &MaintenanceProgress| {
        *watcher.progress.lock() = Some(progress.clone());
        // Cancelled before the lane admitted it: the lane holds it now.
        if watcher.cancelled.load(Ordering::SeqCst) {
            watcher.handle.cancel_maintenance();
        }
    });
    let maintenance = run
        .handle
        .maintenance()
        .with_maintenance_budget(budget)
        .with_progress(sink);
    let options = cleanup.unwrap_or_else(|| CleanupOptions::new(Default::default()));
    match run.operation {
        Operation::Optimize => {
            let report = maintenance.optimize().await?;
            Ok((to_json(&report), report.exit_code()))
        }
        Operation::Cleanup => {
            let report = maintenance.cleanup(&options).await?;
            Ok((to_json(&report), report.exit_code()))
        }
        Operation::CleanupPreview => {
            let report = maintenance.preview_cleanup(&options).await?;
            Ok((to_json(&report), report.exit_code()))
        }
    }
}

fn to_json(report: &impl serde::Serialize) -> Value {
    serde_json::to_value(report).unwrap_or(Value::Null)
}
