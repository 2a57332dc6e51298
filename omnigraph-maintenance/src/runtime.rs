//! The maintenance runtime: Lance spawns compaction decoding and index-build work on
//! whichever runtime polls it, so a host's request handlers would compete with it. Each
//! maintenance link's Lance work is polled here instead, on two workers of its own.
//!
//! The caller's failpoint scope follows the work; request counting and fault injection
//! are per root and see it anyway. Dropping the caller's future aborts the work. Under
//! the deterministic simulation seam the work stays on the caller's runtime.

use omnigraph_core::{OmniError, Result, failpoints, seams};
use omnigraph_publish::LinkRunner;
use std::sync::{Arc, LazyLock};

/// The maintenance runtime's worker threads.
pub const MAINTENANCE_WORKERS: usize = 2;
/// The name of every maintenance worker thread.
pub const MAINTENANCE_THREAD_NAME: &str = "omnigraph-maintenance";

static RUNTIME: LazyLock<std::result::Result<tokio::runtime::Runtime, String>> =
    LazyLock::new(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(MAINTENANCE_WORKERS)
            .thread_name(MAINTENANCE_THREAD_NAME)
            .enable_all()
            .build()
            .map_err(|error| error.to_string())
    });

/// Runs `work` on the maintenance runtime and waits for it.
pub(crate) fn on_maintenance_runtime<T: Send + 'static>(
    work: impl std::future::Future<Output = Result<T>> + Send + 'static,
) -> impl std::future::Future<Output = Result<T>> {
    // Decided in the caller's task: the simulation and failpoint scopes are its own.
    let simulated = seams::in_simulation();
    let work = failpoints::carried(work);
    async move {
        if simulated {
            return work.await;
        }
        run_there(work).await
    }
}

async fn run_there<T: Send + 'static>(
    work: impl std::future::Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    let runtime = RUNTIME
        .as_ref()
        .map_err(|error| OmniError::internal(format!("the maintenance runtime: {error}")))?;
    let task = runtime.spawn(work);
    let abort = AbortOnDrop(task.abort_handle());
    let joined = task.await;
    drop(abort);
    match joined {
        Ok(result) => result,
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Err(error) => Err(OmniError::internal(format!(
            "maintenance work stopped: {error}"
        ))),
    }
}

/// The runner that puts a staging's links on the maintenance runtime.
pub(crate) fn link_runner() -> LinkRunner {
    Arc::new(|work| Box::pin(on_maintenance_runtime(work)))
}

/// Aborts the task when the caller's future is dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
