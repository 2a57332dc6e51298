//! The maintenance lane: one per storage root in a process, shared by every handle on
//! that root (it is keyed by the root's canonical URI). It admits one maintenance run
//! at a time, in arrival order; a waiting run waits without polling.
//!
//! The lane is process-local, derived state. Between processes the exact CAS on the
//! commit log stays the only fence: two processes' optimize runs can still race on a
//! table, and the one that loses gets the typed read-set conflict on that unit.
//!
//! Cancellation is by epoch. A run remembers the lane's epoch when it arrives;
//! `cancel` advances the epoch, which cancels the run holding the lane and every run
//! waiting for it, and never a run that arrives later.

use omnigraph_core::{Evidence, OmniError, Result, seams};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard, watch};

/// What holds a lane.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MaintenanceActivity {
    /// The operation (`optimize`, `build_indexes`, …).
    pub operation: String,
    /// When it was admitted, in microseconds since the epoch (from the clock seam).
    pub started_at: i64,
}

/// One root's lane.
#[derive(Debug)]
pub(crate) struct Lane {
    admission: Arc<AsyncMutex<()>>,
    running: Mutex<Option<MaintenanceActivity>>,
    epoch: watch::Sender<u64>,
}

type LaneMap = HashMap<String, Arc<Lane>>;

static LANES: LazyLock<Mutex<LaneMap>> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// The lane of the root whose canonical URI is `root_key`.
pub(crate) fn lane_of(root_key: &str) -> Arc<Lane> {
    LANES
        .lock()
        .entry(root_key.to_string())
        .or_insert_with(|| {
            Arc::new(Lane {
                admission: Arc::new(AsyncMutex::new(())),
                running: Mutex::new(None),
                epoch: watch::Sender::new(0),
            })
        })
        .clone()
}

impl Lane {
    /// Waits for the lane (in arrival order) and holds it for `operation`. A cancel
    /// while waiting ends the wait with `MaintenanceCancelled` (nothing was done).
    pub(crate) async fn admit(self: &Arc<Self>, operation: &str) -> Result<Admitted> {
        let arrival = *self.epoch.borrow();
        let token = CancelToken {
            epoch: self.epoch.subscribe(),
            arrival,
        };
        let guard = tokio::select! {
            guard = self.admission.clone().lock_owned() => guard,
            () = token.cancelled() => return Err(cancelled(Evidence::BeforeEffect)),
        };
        if token.is_cancelled() {
            return Err(cancelled(Evidence::BeforeEffect));
        }
        *self.running.lock() = Some(MaintenanceActivity {
            operation: operation.to_string(),
            started_at: seams::now_micros(),
        });
        Ok(Admitted {
            lane: self.clone(),
            _guard: guard,
            token,
        })
    }

    /// Cancels the run holding the lane and every run waiting for it.
    pub(crate) fn cancel(&self) {
        self.epoch.send_modify(|epoch| *epoch += 1);
    }

    /// What holds the lane now, if anything.
    pub(crate) fn in_progress(&self) -> Option<MaintenanceActivity> {
        self.running.lock().clone()
    }
}

/// `MaintenanceCancelled` with `evidence`.
pub(crate) fn cancelled(evidence: Evidence) -> OmniError {
    OmniError::MaintenanceCancelled { evidence }
}

/// Whether the run that arrived at one epoch has been cancelled since.
#[derive(Clone, Debug)]
pub(crate) struct CancelToken {
    epoch: watch::Receiver<u64>,
    arrival: u64,
}

impl CancelToken {
    /// Whether a cancel came after this run arrived.
    pub(crate) fn is_cancelled(&self) -> bool {
        *self.epoch.borrow() > self.arrival
    }

    /// Resolves once a cancel comes after this run arrived (never, otherwise).
    pub(crate) async fn cancelled(&self) {
        let mut epoch = self.epoch.clone();
        loop {
            if *epoch.borrow_and_update() > self.arrival {
                return;
            }
            if epoch.changed().await.is_err() {
                // The lane lives in a static registry; its sender is never dropped.
                std::future::pending::<()>().await;
            }
        }
    }
}

/// A run holding its lane; dropping it lets the next run in.
#[derive(Debug)]
pub(crate) struct Admitted {
    lane: Arc<Lane>,
    _guard: OwnedMutexGuard<()>,
    token: CancelToken,
}

impl Admitted {
    /// The run's cancellation.
    pub(crate) fn token(&self) -> &CancelToken {
        &self.token
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        *self.lane.running.lock() = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn one_run_at_a_time_in_arrival_order_and_cancel_spares_later_runs() {
        let lane = lane_of("memory://lane-unit-test");
        let first = lane.admit("optimize").await.unwrap();
        assert_eq!(lane.in_progress().unwrap().operation, "optimize");
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiting = Vec::new();
        for index in 0..3 {
            let (lane, order) = (lane.clone(), order.clone());
            waiting.push(tokio::spawn(async move {
                let admitted = lane.admit("build_indexes").await;
                order.lock().push(index);
                admitted.map(|_| ())
            }));
            // Arrival order is the order of the calls.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(order.lock().is_empty(), "they wait");
        drop(first);
        for handle in waiting {
            handle.await.unwrap().unwrap();
        }
        assert_eq!(*order.lock(), vec![0, 1, 2]);
        assert_eq!(lane.in_progress(), None);

        // A cancel ends the holder's run and every waiting run, not a later one.
        let holder = lane.admit("optimize").await.unwrap();
        let waiter = {
            let lane = lane.clone();
            tokio::spawn(async move { lane.admit("optimize").await.map(|_| ()) })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        lane.cancel();
        assert!(holder.token().is_cancelled());
        let error = waiter.await.unwrap().unwrap_err();
        assert_eq!(
            error.kind(),
            omnigraph_core::ErrorKind::MaintenanceCancelled
        );
        drop(holder);
        let later = lane.admit("optimize").await.unwrap();
        assert!(
            !later.token().is_cancelled(),
            "a later run is not cancelled"
        );
    }
}
