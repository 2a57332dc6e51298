//! The registry of failpoint names: the only place a name is spelled.
//!
//! Call sites write `failpoints::reach(failpoints::STAGE_BEFORE_MANIFEST).await?`; the
//! guard (`cargo xtask guards`) refuses a string literal naming a failpoint. The `fail`
//! crate's actions are compiled in only with the `failpoints` feature; without it they
//! are empty. A deterministic simulation also parks its tasks at these points, its named
//! windows ([`Windows`]), feature or not.
//!
//! The `fail` crate's registry is process-global, but tests run in parallel: a failpoint
//! armed for one test must not fire in another. So a failpoint fires only inside a
//! failpoint scope (a task-local set by `Armed::run`); everywhere else a failpoint is a
//! no-op. Tests arm through `arm`, which also holds the `fail` crate's scenario lock so
//! that tests arming failpoints run one at a time, and disarms everything on drop.
use crate::limits::PARKED_MAX;

/// A failpoint name from this registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Failpoint(&'static str);

impl Failpoint {
    /// The name the `fail` crate knows it by.
    pub const fn name(&self) -> &'static str {
        self.0
    }
}

/// In the adapter: a link's data (and index) files are written; its detached manifest
/// is not. Firing here leaves unpublished files and no version.
pub const STAGE_BEFORE_MANIFEST: Failpoint = Failpoint("adapter.stage.before_manifest");
/// In the adapter: a link's detached manifest is written; the caller has not seen it.
pub const STAGE_AFTER_MANIFEST: Failpoint = Failpoint("adapter.stage.after_manifest");
/// In the adapter: a table's directory is named but its first manifest is not written.
pub(crate) const CREATE_BEFORE_COMMIT: Failpoint = Failpoint("adapter.create.before_commit");

/// In graph creation: `_graph/FORMAT` is written; the genesis commit is not.
pub const CREATE_AFTER_FORMAT: Failpoint = Failpoint("graph.create.after_format");

/// In the publisher: a writer is about to publish (everything it publishes is staged or
/// chosen); it holds no gate yet, so other writers of the branch go on while it waits.
pub const PUBLISH_BEFORE_GATE: Failpoint = Failpoint("publish.before_gate");
/// In the publisher: the commit object is built; its put-if-absent is not sent.
pub const PUBLISH_BEFORE_COMMIT_PUT: Failpoint = Failpoint("publish.before_commit_put");
/// In the publisher: the commit object landed; the `HEAD` copy is not written.
pub const PUBLISH_AFTER_COMMIT_PUT: Failpoint = Failpoint("publish.after_commit_put");

/// In cleanup: a branch's history of the commits it reclaims is written; their objects
/// are not deleted.
pub const CLEANUP_AFTER_HISTORY: Failpoint = Failpoint("cleanup.after_history");

/// Every failpoint, for listings and for tests that sweep them all.
pub const ALL: &[Failpoint] = &[
    STAGE_BEFORE_MANIFEST,
    STAGE_AFTER_MANIFEST,
    CREATE_BEFORE_COMMIT,
    CREATE_AFTER_FORMAT,
    PUBLISH_BEFORE_GATE,
    PUBLISH_BEFORE_COMMIT_PUT,
    PUBLISH_AFTER_COMMIT_PUT,
    CLEANUP_AFTER_HISTORY,
];

/// The environment variable that arms failpoints in a whole process, for tests that
/// drive a child process (`omnigraph` itself): `name=action;name=action`, with names
/// from this registry and `fail` actions.
pub const ENV_VAR: &str = "OMNIGRAPH_FAILPOINTS";

/// Runs `future` with the failpoints that [`ENV_VAR`] names armed, in their scope; as
/// is when the variable is unset or the build has no failpoints. An unknown name or a
/// bad action panics: only tests set the variable.
pub async fn run_armed_from_env<F: std::future::Future>(future: F) -> F::Output {
    #[cfg(feature = "failpoints")]
    if let Ok(spec) = std::env::var(ENV_VAR) {
        let mut armed: Option<Armed> = None;
        for entry in spec.split(';').filter(|entry| !entry.trim().is_empty()) {
            let (name, action) = entry
                .split_once('=')
                .unwrap_or_else(|| panic!("{ENV_VAR}: {entry:?} is not name=action"));
            let point = ALL
                .iter()
                .find(|point| point.name() == name.trim())
                .unwrap_or_else(|| panic!("{ENV_VAR}: no failpoint {name:?}"));
            match &armed {
                Some(armed) => armed.also(*point, action.trim()),
                None => armed = Some(arm(*point, action.trim())),
            }
        }
        if let Some(armed) = armed {
            return armed.run(future).await;
        }
    }
    future.await
}

/// Fires a registered failpoint: returns the injected error when it is armed with
/// `return`, and nothing otherwise (always nothing without the `failpoints` feature).
#[cfg_attr(not(feature = "failpoints"), allow(unused_variables))]
fn check(point: Failpoint) -> crate::Result<()> {
    if in_scope() {
        #[cfg(feature = "failpoints")]
        note_reached(point);
        fail::fail_point!(point.name(), |_| {
            Err(crate::OmniError::storage(
                crate::StorageKind::Transient,
                format!("failpoint {}", point.name()),
                format!("injected at failpoint {}", point.name()).into(),
            ))
        });
    }
    Ok(())
}

/// Reaches `point` on the way through an operation: in a deterministic simulation whose
/// harness asked to park there, the task waits until the harness releases it or drops it
/// (a crash at that window; see [`Windows`]); then fires it if it is armed.
pub async fn reach(point: Failpoint) -> crate::Result<()> {
    if let Some(simulation) = crate::seams::current() {
        simulation.windows().pass(point).await;
    }
    check(point)
}

tokio::task_local! {
    static FAILPOINT_SCOPE: ();
}

/// The named windows of one deterministic simulation. The harness arms a failpoint;
/// the next simulated task to reach it parks there, and the harness sees it parked
/// ([`Windows::take_parked`]). It then lets other work run and later releases the task
/// ([`Windows::release`]), or drops its future: a crash at that window. Interleavings
/// in a simulation happen only here, so they replay from the seed.
#[derive(Debug, Default)]
pub struct Windows {
    state: parking_lot::Mutex<WindowState>,
}

#[derive(Debug, Default)]
struct WindowState {
    armed: Option<Failpoint>,
    next_ticket: u64,
    parked: std::collections::BTreeMap<u64, ParkedTask>,
    /// The ticket of the task that parked since the harness last looked.
    newly_parked: Option<u64>,
    /// The harness, waiting for the task it runs to finish or park.
    harness: Option<std::task::Waker>,
    /// Per failpoint, how often a simulated task passed it.
    reached: std::collections::BTreeMap<&'static str, u64>,
}

#[derive(Debug)]
struct ParkedTask {
    released: bool,
    waker: Option<std::task::Waker>,
}

/// One parked task's place; dropping it (with the task's future) forgets the task.
struct ParkTicket<'a> {
    windows: &'a Windows,
    ticket: u64,
}

impl Drop for ParkTicket<'_> {
    fn drop(&mut self) {
        let mut state = self.windows.state.lock();
        state.parked.remove(&self.ticket);
        // A task dropped before the harness looked is not parked any more.
        if state.newly_parked == Some(self.ticket) {
            state.newly_parked = None;
        }
    }
}

impl Windows {
    /// The next simulated task to reach `point` parks there.
    pub fn park_at(&self, point: Failpoint) {
        let mut state = self.state.lock();
        assert!(state.armed.is_none(), "one window is armed at a time");
        state.armed = Some(point);
    }

    /// Disarms the window, reached or not.
    pub fn disarm(&self) {
        self.state.lock().armed = None;
    }

    /// The ticket of the task that parked since the last call.
    pub fn take_parked(&self) -> Option<u64> {
        self.state.lock().newly_parked.take()
    }

    /// Wakes `waker` when a task parks. A harness that polls the task itself sees it
    /// parked when that poll returns; this covers a task of the simulation that the
    /// operation polls elsewhere (a task it spawns does not inherit the simulation, and
    /// neither parks nor counts).
    pub fn watch(&self, waker: &std::task::Waker) {
        self.state.lock().harness = Some(waker.clone());
    }

    /// Lets the task parked with `ticket` go on.
    pub fn release(&self, ticket: u64) {
        let mut state = self.state.lock();
        let parked = state
            .parked
            .get_mut(&ticket)
            .expect("only a parked task is released");
        parked.released = true;
        if let Some(waker) = parked.waker.take() {
            waker.wake();
        }
    }

    /// How many times each failpoint was passed in this simulation.
    pub fn reached(&self) -> std::collections::BTreeMap<&'static str, u64> {
        self.state.lock().reached.clone()
    }

    async fn pass(&self, point: Failpoint) {
        let ticket = {
            let mut state = self.state.lock();
            *state.reached.entry(point.name()).or_default() += 1;
            if state.armed != Some(point) {
                return;
            }
            assert!(state.parked.len() < PARKED_MAX, "parked tasks are bounded");
            state.armed = None;
            let ticket = state.next_ticket;
            state.next_ticket += 1;
            state.parked.insert(
                ticket,
                ParkedTask {
                    released: false,
                    waker: None,
                },
            );
            state.newly_parked = Some(ticket);
            if let Some(harness) = state.harness.take() {
                harness.wake();
            }
            ParkTicket {
                windows: self,
                ticket,
            }
        };
        std::future::poll_fn(|context| {
            let mut state = self.state.lock();
            let parked = state
                .parked
                .get_mut(&ticket.ticket)
                .expect("a parked task keeps its place until it goes on");
            if parked.released {
                std::task::Poll::Ready(())
            } else {
                parked.waker = Some(context.waker().clone());
                std::task::Poll::Pending
            }
        })
        .await;
    }
}

/// How many times each failpoint was reached inside a failpoint scope, armed or not:
/// the coverage ledger a suite checks so that no registered failpoint goes untested.
#[cfg(feature = "failpoints")]
static REACHED: std::sync::LazyLock<
    parking_lot::Mutex<std::collections::BTreeMap<&'static str, u64>>,
> = std::sync::LazyLock::new(Default::default);

#[cfg(feature = "failpoints")]
fn note_reached(point: Failpoint) {
    *REACHED.lock().entry(point.name()).or_default() += 1;
}

/// How many times `point` was reached inside a failpoint scope in this process.
#[cfg(feature = "failpoints")]
pub fn reached(point: Failpoint) -> u64 {
    REACHED.lock().get(point.name()).copied().unwrap_or(0)
}

fn in_scope() -> bool {
    cfg!(feature = "failpoints") && FAILPOINT_SCOPE.try_with(|_| ()).is_ok()
}

/// `future`, inside the failpoint scope when the caller is in one: for work that the
/// caller moves to another runtime (the scope is task-local and would not follow).
/// Whether the caller is in scope is decided when this is called, not when the result
/// is first polled.
pub fn carried<F: std::future::Future>(future: F) -> impl std::future::Future<Output = F::Output> {
    let scoped = in_scope();
    async move {
        if scoped {
            FAILPOINT_SCOPE.scope((), future).await
        } else {
            future.await
        }
    }
}

/// An armed failpoint scenario; dropping it disarms every failpoint.
#[cfg(feature = "failpoints")]
pub struct Armed {
    _scenario: fail::FailScenario<'static>,
}

/// Arms `point` with a `fail` action (`"return"`, `"1*return"`, `"panic"`, `"sleep(10)"`,
/// …) for as long as the returned guard lives. Serialises with every other armed test.
#[cfg(feature = "failpoints")]
pub fn arm(point: Failpoint, action: &str) -> Armed {
    let armed = Armed {
        _scenario: fail::FailScenario::setup(),
    };
    armed.also(point, action);
    armed
}

#[cfg(feature = "failpoints")]
impl Armed {
    /// Arms one more failpoint in this scenario.
    pub fn also(&self, point: Failpoint, action: &str) {
        fail::cfg(point.name(), action).unwrap_or_else(|error| {
            panic!("failpoint {} action {action:?}: {error}", point.name())
        });
    }

    /// Runs `future` inside the failpoint scope: only there do armed failpoints fire.
    pub async fn run<F: std::future::Future>(&self, future: F) -> F::Output {
        FAILPOINT_SCOPE.scope((), future).await
    }

    /// Runs `body` synchronously inside the failpoint scope.
    pub fn run_sync<R>(&self, body: impl FnOnce() -> R) -> R {
        FAILPOINT_SCOPE.sync_scope((), body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn names_are_unique_and_dotted() {
        let mut seen = HashSet::new();
        for point in ALL {
            assert!(seen.insert(point.name()), "duplicate {}", point.name());
            assert!(point.name().split('.').count() >= 2, "{}", point.name());
        }
    }

    #[cfg(feature = "failpoints")]
    #[test]
    fn an_armed_point_fires_and_disarms_on_drop() {
        let quiet = {
            let armed = arm(STAGE_BEFORE_MANIFEST, "return");
            let error = armed.run_sync(|| check(STAGE_BEFORE_MANIFEST)).unwrap_err();
            assert_eq!(
                error.kind(),
                crate::ErrorKind::Storage(crate::StorageKind::Transient)
            );
            assert!(armed.run_sync(|| check(STAGE_AFTER_MANIFEST)).is_ok());
            // Outside the scope an armed failpoint does not fire.
            assert!(check(STAGE_BEFORE_MANIFEST).is_ok());
            drop(armed);
            arm(STAGE_AFTER_MANIFEST, "off")
        };
        assert!(quiet.run_sync(|| check(STAGE_BEFORE_MANIFEST)).is_ok());
    }
}
