//! The one commit loop's bound and backoff. Every writer (insert and load, update and
//! delete, merge, schema apply) counts its commit PUTs in one [`CommitAttempts`], shared
//! by the publisher's moves onto newer heads and the writer's own plans again, so one
//! write makes at most [`COMMIT_PUTS_MAX`] of them however it loses, and then fails
//! with `contention_exhausted`. A writer that loses a race waits [`lost_race_wait`]
//! before it reads the new head: the one backoff, growing with the races the
//! publication has lost so far.

use crate::limits::{COMMIT_PUTS_MAX, LOST_RACE_BACKOFF_MAX, LOST_RACE_BACKOFF_MIN};
use omnigraph_core::{Evidence, OmniError, Result, seams};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The commit PUTs one write has made; shared by every publication the write makes
/// (a clone counts into the same figures).
#[derive(Clone, Debug, Default)]
pub struct CommitAttempts {
    counts: Arc<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    puts: AtomicU32,
    /// The PUTs made when the current try began.
    puts_at_try: AtomicU32,
}

impl CommitAttempts {
    /// A write's attempts, none made yet.
    pub fn new() -> CommitAttempts {
        CommitAttempts::default()
    }

    /// Commit PUTs made so far.
    pub fn puts(&self) -> u32 {
        self.counts.puts.load(Ordering::Relaxed)
    }

    /// Takes one commit PUT; past [`COMMIT_PUTS_MAX`] the write gives up with
    /// `contention_exhausted` and `evidence`.
    pub fn take_put(&self, evidence: &Evidence) -> Result<()> {
        let puts = self.counts.puts.fetch_add(1, Ordering::Relaxed) + 1;
        if puts > COMMIT_PUTS_MAX {
            self.counts.puts.store(COMMIT_PUTS_MAX, Ordering::Relaxed);
            return Err(self.exhausted(evidence.clone()));
        }
        Ok(())
    }

    /// A writer tries again after losing (plans again, or follows the tables that
    /// moved): a try that lost without a PUT of its own (its read set moved while it
    /// waited for a reservation) counts as one, so tries end too. Past the bound the
    /// write gives up with `contention_exhausted` and `evidence`.
    pub fn try_again(&self, evidence: &Evidence) -> Result<()> {
        let puts = self.puts();
        if self.counts.puts_at_try.load(Ordering::Relaxed) == puts {
            self.take_put(evidence)?;
        } else if puts >= COMMIT_PUTS_MAX {
            return Err(self.exhausted(evidence.clone()));
        }
        self.counts
            .puts_at_try
            .store(self.puts(), Ordering::Relaxed);
        Ok(())
    }

    /// The error of a write that used up its attempts.
    pub fn exhausted(&self, evidence: Evidence) -> OmniError {
        OmniError::ContentionExhausted {
            attempts: self.puts(),
            evidence,
        }
    }
}

/// Waits [`lost_race_wait`] after the `lost`-th race one publication lost (`commit_id`
/// the losing candidate's), outside a deterministic simulation (whose schedule is the
/// harness's). The window grows within a publication only: a write that starts a
/// publication again (a new plan, a re-commit) waits as little as a writer that just
/// arrived, so the most starved writer is not the one made to wait longest.
pub async fn back_off(lost: u32, commit_id: &str) {
    if !seams::in_simulation() {
        tokio::time::sleep(lost_race_wait(lost, commit_id)).await;
    }
}

/// How long a writer waits after losing its `lost`-th race (counting from 0): a
/// jittered while that doubles from [`LOST_RACE_BACKOFF_MIN`] up to
/// [`LOST_RACE_BACKOFF_MAX`]. Writers that lost together then follow one after another
/// rather than all racing for the next slot at once, which on a loaded machine wastes
/// the CPU the winner needs (each lost race costs a head read and, for a writer whose
/// table moved, a follow). The jitter comes from the losing candidate's id, so it
/// needs no random source.
pub fn lost_race_wait(lost: u32, commit_id: &str) -> Duration {
    let window = LOST_RACE_BACKOFF_MIN
        .saturating_mul(1 << lost.min(5))
        .min(LOST_RACE_BACKOFF_MAX);
    // FNV-1a over the id: its random tail spreads the writers over the window.
    let hash = commit_id
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        });
    let micros = u64::try_from(window.as_micros()).unwrap_or(u64::MAX).max(1);
    Duration::from_micros(hash % micros)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_makes_at_most_the_bound_of_puts_over_every_plan() {
        let attempts = CommitAttempts::new();
        let shared = attempts.clone();
        for _ in 0..COMMIT_PUTS_MAX / 2 {
            attempts.take_put(&Evidence::BeforeEffect).unwrap();
        }
        shared.try_again(&Evidence::Unpublished).unwrap();
        for _ in COMMIT_PUTS_MAX / 2..COMMIT_PUTS_MAX {
            shared.take_put(&Evidence::Unpublished).unwrap();
        }
        assert_eq!(
            attempts.puts(),
            COMMIT_PUTS_MAX,
            "a clone counts into the same figures"
        );
        let error = attempts.take_put(&Evidence::Unpublished).unwrap_err();
        match error {
            OmniError::ContentionExhausted { attempts, evidence } => {
                assert_eq!(
                    (attempts, evidence),
                    (COMMIT_PUTS_MAX, Evidence::Unpublished)
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_try_that_lost_without_a_put_counts_as_one() {
        let attempts = CommitAttempts::new();
        attempts.take_put(&Evidence::BeforeEffect).unwrap();
        // The first plan made a PUT: planning again takes none.
        attempts.try_again(&Evidence::BeforeEffect).unwrap();
        assert_eq!(attempts.puts(), 1);
        // The second lost while it waited, with no PUT: it counts as one.
        attempts.try_again(&Evidence::BeforeEffect).unwrap();
        assert_eq!(attempts.puts(), 2);
        // So plans that never PUT end too.
        let mut plans = 0;
        while attempts.try_again(&Evidence::BeforeEffect).is_ok() {
            plans += 1;
            assert!(plans <= COMMIT_PUTS_MAX, "plans end");
        }
        assert_eq!(attempts.puts(), COMMIT_PUTS_MAX);
    }

    #[test]
    fn a_lost_race_waits_a_spread_bounded_while_that_grows() {
        let ids: Vec<String> = (0..64).map(|_| seams::new_id()).collect();
        for lost in [0, 1, 3, 40] {
            let waits: std::collections::BTreeSet<Duration> =
                ids.iter().map(|id| lost_race_wait(lost, id)).collect();
            assert!(
                waits.len() > 32,
                "writers spread over the window: {waits:?}"
            );
            assert!(waits.iter().all(|wait| *wait < LOST_RACE_BACKOFF_MAX));
            let window = Duration::from_millis(4 << lost.min(2));
            assert!(
                waits.iter().all(|wait| *wait < window),
                "race {lost}: {waits:?}"
            );
        }
        let longest = |lost| ids.iter().map(|id| lost_race_wait(lost, id)).max();
        assert!(longest(0) < longest(2), "the window grows");
    }
}
