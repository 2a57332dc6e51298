//! What cleanup has reclaimed, and the grace period that protects work in flight
//! (`docs/format.md` §7.5 and §8.1). Cleanup records both in one small object, `_graph/cleanup.json`:
//!
//! - the oldest commit it retains on each branch, so a reader that asks for an older one
//!   gets [`OmniError::CommitReclaimed`] instead of a raw Lance error;
//! - the grace period it runs with, so a writer whose staging has grown older than half
//!   of it never publishes files that cleanup may be removing.
//!
//! Staging younger than half the smallest grace ([`GRACE_MIN`]) is safe under any
//! policy, so an ordinary write never reads the object: it costs no request.

use crate::layout;
use omnigraph_core::storage::StorageRoot;
use omnigraph_core::{Evidence, OmniError, Result, seams};
use std::collections::BTreeMap;
use std::time::Duration;

/// The cleanup state object.
pub const CLEANUP_STATE: &str = "_graph/cleanup.json";
/// The largest cleanup state a reader accepts, in bytes.
pub(crate) const CLEANUP_STATE_BYTES_MAX: usize = 1 << 20;
/// The most branches the state names.
pub const CLEANUP_STATE_BRANCHES_MAX: usize = 4_096;
/// The grace period when none is given: a commit or file younger than it is kept.
pub const GRACE_DEFAULT: Duration = Duration::from_secs(24 * 60 * 60);
/// The smallest grace period cleanup accepts (a floor for tests).
pub const GRACE_MIN: Duration = Duration::from_secs(60);
/// The state's format version.
const CLEANUP_STATE_FORMAT: u32 = 1;

/// What cleanup last recorded.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CleanupState {
    /// The format version (1).
    pub format: u32,
    /// The grace period of the last run that recorded, in microseconds.
    pub grace_micros: i64,
    /// Per branch, the oldest commit whose table versions are retained.
    pub oldest_retained: BTreeMap<String, u64>,
    /// When it was recorded (microseconds since the epoch).
    pub recorded_at: i64,
}

impl CleanupState {
    /// A state recording one run.
    pub fn new(grace: Duration, oldest_retained: BTreeMap<String, u64>) -> CleanupState {
        CleanupState {
            format: CLEANUP_STATE_FORMAT,
            grace_micros: micros_of(grace),
            oldest_retained,
            recorded_at: seams::now_micros(),
        }
    }

    /// The grace period recorded.
    pub fn grace(&self) -> Duration {
        Duration::from_micros(u64::try_from(self.grace_micros).unwrap_or(0))
    }

    fn validate(&self) -> std::result::Result<(), String> {
        if self.format != CLEANUP_STATE_FORMAT {
            return Err(format!("unknown cleanup state format {}", self.format));
        }
        if self.grace_micros < micros_of(GRACE_MIN) {
            return Err(format!(
                "grace period of {} µs is below the floor of {} s",
                self.grace_micros,
                GRACE_MIN.as_secs()
            ));
        }
        if self.oldest_retained.len() > CLEANUP_STATE_BRANCHES_MAX {
            return Err(format!(
                "{} branches; the limit is {CLEANUP_STATE_BRANCHES_MAX}",
                self.oldest_retained.len()
            ));
        }
        for branch in self.oldest_retained.keys() {
            layout::check_branch(branch)
                .map_err(|_| format!("branch {branch:?} is not a valid branch name"))?;
        }
        Ok(())
    }
}

/// Microseconds of a duration, saturating.
pub fn micros_of(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

/// Reads the cleanup state; `None` when cleanup never ran.
pub async fn read_state(root: &StorageRoot) -> Result<Option<CleanupState>> {
    let Some(bytes) = root
        .get_capped(CLEANUP_STATE, CLEANUP_STATE_BYTES_MAX)
        .await?
    else {
        return Ok(None);
    };
    let state: CleanupState = serde_json::from_slice(&bytes).map_err(|error| {
        OmniError::corrupt(CLEANUP_STATE, format!("not a cleanup state: {error}"))
    })?;
    state
        .validate()
        .map_err(|message| OmniError::corrupt(CLEANUP_STATE, message))?;
    Ok(Some(state))
}

/// Records a run's state. The oldest retained commit of a branch never moves back: a
/// slower run that read an older head cannot make reclaimed commits look readable.
pub async fn record_state(root: &StorageRoot, mut state: CleanupState) -> Result<CleanupState> {
    if let Some(previous) = read_state(root).await? {
        for (branch, seq) in previous.oldest_retained {
            let entry = state.oldest_retained.entry(branch).or_insert(seq);
            *entry = (*entry).max(seq);
        }
    }
    state
        .validate()
        .map_err(|message| OmniError::internal(format!("refusing to record: {message}")))?;
    let bytes = serde_json::to_vec(&state)
        .map_err(|error| OmniError::internal(format!("encode cleanup state: {error}")))?;
    root.put(CLEANUP_STATE, bytes.into()).await?;
    Ok(state)
}

/// Refuses a commit that cleanup has reclaimed: `seq` is older than the oldest commit
/// cleanup retains on `branch`.
pub(crate) async fn check_readable(root: &StorageRoot, branch: &str, seq: u64) -> Result<()> {
    let Some(state) = read_state(root).await? else {
        return Ok(());
    };
    match state.oldest_retained.get(branch) {
        Some(&oldest_retained) if seq < oldest_retained => Err(OmniError::CommitReclaimed {
            branch: branch.to_string(),
            seq,
            oldest_retained,
            evidence: Evidence::BeforeEffect,
        }),
        _ => Ok(()),
    }
}

/// Refuses to publish (or re-commit) staging that began at `started_micros` once it is
/// older than half the grace period cleanup runs with: its files may be removed.
pub(crate) async fn check_staging_age(root: &StorageRoot, started_micros: i64) -> Result<()> {
    let age = seams::now_micros().saturating_sub(started_micros);
    if age <= micros_of(GRACE_MIN) / 2 {
        return Ok(());
    }
    let grace = read_state(root)
        .await?
        .map_or(GRACE_DEFAULT, |state| state.grace());
    let limit = micros_of(grace) / 2;
    if age > limit {
        return Err(OmniError::StagingExpired {
            age_secs: u64::try_from(age / 1_000_000).unwrap_or(0),
            limit_secs: u64::try_from(limit / 1_000_000).unwrap_or(0),
            evidence: Evidence::Unpublished,
        });
    }
    Ok(())
}
