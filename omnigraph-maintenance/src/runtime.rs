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
pub(crate) const MAINTENANCE_WORKERS: usize = 2;
/// The name of every maintenance worker thread.
pub const MAINTENANCE_THREAD_NAME: &str = "omnigraph-maintenance";
/// The OS niceness of the maintenance threads (a host's threads run at 0): when the
/// cores are busy, the scheduler runs a host's request handlers first. On Linux it is
/// per thread, and a thread a maintenance thread starts (Lance's CPU pool, when a
/// maintenance link is the first to use it) inherits it.
pub(crate) const MAINTENANCE_THREAD_NICE: i32 = 10;

static RUNTIME: LazyLock<std::result::Result<tokio::runtime::Runtime, String>> =
    LazyLock::new(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(MAINTENANCE_WORKERS)
            .thread_name(MAINTENANCE_THREAD_NAME)
            .on_thread_start(lower_priority)
            .enable_all()
            .build()
            .map_err(|error| error.to_string())
    });

/// Lowers the calling thread's priority to [`MAINTENANCE_THREAD_NICE`]; where the OS
/// cannot, the thread keeps its priority (only the latency isolation is lost).
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: setpriority reads only its integer arguments. On Linux, PRIO_PROCESS with
    // who = 0 names the calling thread alone.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, MAINTENANCE_THREAD_NICE);
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn maintenance_threads_run_below_the_callers() {
        let niceness = |_: ()| {
            // SAFETY: getpriority reads only its integer arguments (who = 0: this thread).
            unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
        };
        let caller = niceness(());
        let there = on_maintenance_runtime(async move { Ok(niceness(())) })
            .await
            .unwrap();
        assert_eq!(there, MAINTENANCE_THREAD_NICE.max(caller));
        assert_eq!(niceness(()), caller, "the caller's thread is untouched");
    }
}
