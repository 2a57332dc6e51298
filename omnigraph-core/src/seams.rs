//! The clock and id seams: production reads the system clock and mints random ULIDs; a
//! test or a simulation installs a logical clock and a seeded id stream for one task, so
//! a run replays exactly from its seed.
//!
//! The seam is task-local (tokio), so simulated tasks and real ones can share a process
//! and a runtime without seeing each other's time.

use crate::limits::CLOCK_SCALE_FACTOR_MAX;
use parking_lot::Mutex;
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// A deterministic clock and id source for one simulated task tree.
#[derive(Debug)]
pub struct Simulation {
    now_micros: AtomicI64,
    tick_micros: i64,
    ids: Mutex<StdRng>,
    windows: crate::failpoints::Windows,
}

impl Simulation {
    /// A simulation whose clock starts at `start_micros` and advances by `tick_micros` on
    /// every read, and whose ids come from `seed`.
    pub fn new(seed: u64, start_micros: i64, tick_micros: i64) -> Arc<Simulation> {
        assert!(tick_micros >= 0, "a logical clock never runs backwards");
        Arc::new(Simulation {
            now_micros: AtomicI64::new(start_micros),
            tick_micros,
            ids: Mutex::new(StdRng::seed_from_u64(seed)),
            windows: crate::failpoints::Windows::default(),
        })
    }

    /// The failpoints where this simulation's tasks park when its harness asks.
    pub fn windows(&self) -> &crate::failpoints::Windows {
        &self.windows
    }

    /// Moves the clock forward by `micros` without a read.
    pub fn advance(&self, micros: i64) {
        assert!(micros >= 0, "a logical clock never runs backwards");
        self.now_micros.fetch_add(micros, Ordering::SeqCst);
    }

    fn read_clock(&self) -> i64 {
        self.now_micros
            .fetch_add(self.tick_micros, Ordering::SeqCst)
    }

    fn next_id(&self, at_micros: i64) -> ulid::Ulid {
        let random: u128 = self.ids.lock().random();
        ulid::Ulid::from_parts(millis(at_micros), random)
    }
}

tokio::task_local! {
    static SIMULATION: Arc<Simulation>;
}

/// Runs `future` with `simulation` as its clock and id source.
pub async fn simulate<F: Future>(simulation: Arc<Simulation>, future: F) -> F::Output {
    SIMULATION.scope(simulation, future).await
}

/// Runs `body` synchronously with `simulation` as its clock and id source.
pub fn simulate_sync<R>(simulation: Arc<Simulation>, body: impl FnOnce() -> R) -> R {
    SIMULATION.sync_scope(simulation, body)
}

/// The simulation the caller runs in, if any.
pub(crate) fn current() -> Option<Arc<Simulation>> {
    SIMULATION.try_with(Arc::clone).ok()
}

/// Whether the caller runs inside a deterministic simulation: work that would move to
/// another runtime stays on the caller's, so schedules stay deterministic.
pub fn in_simulation() -> bool {
    SIMULATION.try_with(|_| ()).is_ok()
}

/// The current time in microseconds since the Unix epoch.
pub fn now_micros() -> i64 {
    SIMULATION
        .try_with(|simulation| simulation.read_clock())
        .unwrap_or_else(|_| on_process_clock(system_micros()))
}

/// A time the store reported (an object's last-modified time, in system microseconds)
/// on the clock [`now_micros`] reads, so an age computed from the two is consistent.
pub(crate) fn stored_time_micros(system_micros: i64) -> i64 {
    on_process_clock(system_micros)
}

/// The test environment variable that speeds up every process's clock alike:
/// `ANCHOR_MICROS:FACTOR`, so time after the anchor runs FACTOR times faster. Processes
/// given the same value agree on every time, which lets a multi-process test meet a
/// one-minute grace period in seconds. Only builds with the `failpoints` feature (test
/// builds) read it.
pub const CLOCK_SCALE_ENV: &str = "OMNIGRAPH_TEST_CLOCK_SCALE";

// Read only in builds with test seams (the `failpoints` feature), like the failpoints:
// a production binary never runs on a scaled clock.
static CLOCK_SCALE: std::sync::LazyLock<Option<(i64, i64)>> = std::sync::LazyLock::new(|| {
    if !cfg!(feature = "failpoints") {
        return None;
    }
    let text = std::env::var(CLOCK_SCALE_ENV).ok()?;
    let parsed = parse_clock_scale(&text);
    assert!(
        parsed.is_some(),
        "{CLOCK_SCALE_ENV}={text:?} is not ANCHOR_MICROS:FACTOR with 1 <= FACTOR <= {CLOCK_SCALE_FACTOR_MAX}"
    );
    parsed
});

fn parse_clock_scale(text: &str) -> Option<(i64, i64)> {
    let (anchor, factor) = text.split_once(':')?;
    let (anchor, factor) = (anchor.parse().ok()?, factor.parse().ok()?);
    (1..=CLOCK_SCALE_FACTOR_MAX)
        .contains(&factor)
        .then_some((anchor, factor))
}

fn on_process_clock(system_micros: i64) -> i64 {
    match *CLOCK_SCALE {
        Some((anchor, factor)) => {
            anchor.saturating_add(system_micros.saturating_sub(anchor).saturating_mul(factor))
        }
        None => system_micros,
    }
}

/// A fresh unique id: a ULID (time-ordered, 26 characters of Crockford base32).
pub fn new_id() -> String {
    SIMULATION
        .try_with(|simulation| {
            let at = simulation.read_clock();
            simulation.next_id(at)
        })
        .unwrap_or_else(|_| ulid::Ulid::new())
        .to_string()
}

/// `count` fresh unique ids, as [`new_id`] makes them, as one column. Outside a
/// simulation the clock is read once: the ids are one new ULID and its successors,
/// unique as that ULID is (its 80 random bits), where a clock read and a random draw
/// per id were a tenth of a large edge load.
pub fn new_ids(count: usize) -> crate::arrow_array::StringArray {
    if in_simulation() {
        return (0..count).map(|_| Some(new_id())).collect();
    }
    let mut ids =
        crate::arrow_array::builder::StringBuilder::with_capacity(count, count * ulid::ULID_LEN);
    let mut text = [0u8; ulid::ULID_LEN];
    let mut id = ulid::Ulid::new();
    for _ in 0..count {
        ids.append_value(id.array_to_str(&mut text));
        // The random part's last value has no successor: start from a new one (not
        // `Ulid::default()`, which is the nil id).
        id = match id.increment() {
            Some(next) => next,
            None => ulid::Ulid::new(),
        };
    }
    ids.finish()
}

/// A moment to measure an age from: the clock seam's time, and outside a simulation the
/// process's monotonic clock too. An age is the larger of the two readings, so a step
/// back of the wall clock never makes work look younger than it is (a step forward may
/// make it look older, which only refuses it sooner).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Since {
    wall_micros: i64,
    monotonic: Option<std::time::Instant>,
}

impl Since {
    /// Now.
    pub fn now() -> Since {
        Since {
            wall_micros: now_micros(),
            monotonic: (!in_simulation()).then(std::time::Instant::now),
        }
    }

    /// The moment's time on the clock seam.
    pub fn wall_micros(&self) -> i64 {
        self.wall_micros
    }

    /// Microseconds since the moment: the larger of the clock seam's reading and, when
    /// known, the monotonic clock's (sped up as the clock seam is in tests).
    pub fn elapsed_micros(&self) -> i64 {
        let wall = now_micros().saturating_sub(self.wall_micros);
        let monotonic = self.monotonic.map_or(0, |started| {
            let elapsed = i64::try_from(started.elapsed().as_micros()).unwrap_or(i64::MAX);
            match *CLOCK_SCALE {
                Some((_, factor)) => elapsed.saturating_mul(factor),
                None => elapsed,
            }
        });
        wall.max(monotonic)
    }
}

fn system_micros() -> i64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since_epoch.as_micros()).unwrap_or(i64::MAX)
}

fn millis(micros: i64) -> u64 {
    u64::try_from(micros / 1000).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn production_ids_are_unique_ulids_and_time_is_now() {
        let a = new_id();
        let b = new_id();
        assert_ne!(a, b);
        assert_eq!(a.len(), 26);
        assert!(ulid::Ulid::from_string(&a).is_ok());
        assert!(now_micros() > 1_700_000_000_000_000);
    }

    #[test]
    fn a_column_of_ids_holds_distinct_ulids_and_replays_in_a_simulation() {
        use crate::arrow_array::Array;
        let ids = new_ids(10_000);
        assert_eq!(ids.len(), 10_000);
        assert_eq!(ids.null_count(), 0);
        let distinct: std::collections::HashSet<&str> = ids.iter().flatten().collect();
        assert_eq!(distinct.len(), 10_000);
        assert!(
            ids.iter()
                .flatten()
                .all(|id| ulid::Ulid::from_string(id).is_ok())
        );
        let run = |seed| {
            simulate_sync(Simulation::new(seed, 1_000_000, 10), || {
                let column = new_ids(3);
                column
                    .iter()
                    .flatten()
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
        };
        assert_eq!(run(7), run(7));
        assert_eq!(run(7).len(), 3);
    }

    #[test]
    fn a_seed_replays_the_same_ids_and_times() {
        let run = |seed| {
            simulate_sync(Simulation::new(seed, 1_000_000, 10), || {
                (0..3).map(|_| (now_micros(), new_id())).collect::<Vec<_>>()
            })
        };
        let first = run(7);
        assert_eq!(first, run(7));
        assert_ne!(first, run(8));
        assert_eq!(first[0].0, 1_000_000);
        // Each read ticks: clock reads by new_id count too.
        assert_eq!(first[1].0, 1_000_020);
    }

    #[test]
    fn an_age_never_shrinks_when_the_wall_clock_steps_back() {
        // A moment stamped an hour ahead of the clock seam (as after the wall clock
        // stepped back by an hour), but 30 ms ago on the monotonic clock.
        let started = std::time::Instant::now()
            .checked_sub(std::time::Duration::from_millis(30))
            .unwrap();
        let since = Since {
            wall_micros: now_micros() + 3_600_000_000,
            monotonic: Some(started),
        };
        assert!(
            since.elapsed_micros() >= 30_000,
            "{}",
            since.elapsed_micros()
        );
        // Without a monotonic reading (a simulation), the clock seam decides.
        let simulated = simulate_sync(Simulation::new(1, 5_000_000, 0), || {
            let since = Since::now();
            assert_eq!(since.monotonic, None);
            since
        });
        assert_eq!(simulated.wall_micros(), 5_000_000);
    }

    #[test]
    fn a_clock_scale_is_parsed_strictly() {
        assert_eq!(parse_clock_scale("100:20"), Some((100, 20)));
        for bad in ["", "100", "100:0", "x:2", "100:1001", "100:-2"] {
            assert_eq!(parse_clock_scale(bad), None, "{bad:?}");
        }
    }

    #[tokio::test]
    async fn simulation_is_task_local() {
        let simulation = Simulation::new(1, 5_000_000, 0);
        let inside = simulate(simulation.clone(), async { now_micros() }).await;
        assert_eq!(inside, 5_000_000);
        simulation.advance(3);
        assert_eq!(
            simulate(simulation, async { now_micros() }).await,
            5_000_003
        );
        // Outside the scope the system clock answers.
        assert!(now_micros() > 1_700_000_000_000_000);
    }
}
