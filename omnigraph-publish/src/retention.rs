//! What cleanup has reclaimed, and the grace period that protects work in flight
//! (`docs/format.md` §7.5 and §8.1). Cleanup records both in the branch's log, as the
//! [`Retention`] of a commit it publishes; every later commit carries it forward:
//!
//! - the oldest commit it retains, so a reader that asks for an older one gets
//!   [`OmniError::CommitReclaimed`] instead of a raw Lance error;
//! - the grace period it runs with, so a writer whose staging has grown older than half
//!   of it never publishes files that cleanup may be removing. A writer checks the
//!   record of the very head its commit follows, so it costs no request, and a writer
//!   that lost `n+1` to cleanup's commit learns the new grace before it tries again.

use crate::commit::{GraphCommit, Retention};
use crate::limits::FOREIGN_PINS_AGE_MAX;
use crate::log::CommitLog;
use omnigraph_core::storage::StorageRoot;
use omnigraph_core::{Evidence, OmniError, Result, seams};
use std::sync::Arc;
use std::time::Duration;

/// The grace period when none is given: a commit or file younger than it is kept.
pub const GRACE_DEFAULT: Duration = Duration::from_secs(24 * 60 * 60);

/// The operation kind of cleanup's commits: they pin what their parent pins and
/// change only the record.
pub const RECORD_OPERATION: &str = "cleanup";

/// Whether `commit` changed nothing of the graph on `parent`: the same tables at the
/// same versions under the same schema, as cleanup's records (two runs may record the
/// same). Cleanup's policy counts commits that changed the graph, so its own records
/// never push history out.
pub fn changes_nothing(commit: &GraphCommit, parent: &GraphCommit) -> bool {
    commit.schema == parent.schema
        && commit.pins.len() == parent.pins.len()
        && commit.pins.iter().all(|pin| {
            parent
                .pin(&pin.table_id)
                .is_some_and(|before| before.version == pin.version)
        })
}

/// Microseconds of a duration, saturating.
pub fn micros_of(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

/// The record cleanup would publish: its grace period and the oldest commit it retains.
pub fn record(grace: Duration, oldest_retained: u64) -> Retention {
    Retention {
        grace_micros: micros_of(grace),
        oldest_retained,
    }
}

/// The oldest commit `head`'s branch retains (genesis when cleanup never ran).
pub fn oldest_retained(head: &GraphCommit) -> u64 {
    head.retention
        .map_or(0, |retention| retention.oldest_retained)
}

/// Refuses commit `seq` when `head` (a commit of the same branch) records it reclaimed.
pub(crate) fn refuse_reclaimed(head: &GraphCommit, seq: u64) -> Result<()> {
    let oldest_retained = oldest_retained(head);
    if seq < oldest_retained {
        return Err(OmniError::CommitReclaimed {
            branch: head.branch.clone(),
            seq,
            oldest_retained,
            evidence: Evidence::BeforeEffect,
        });
    }
    Ok(())
}

/// Refuses a commit that cleanup has reclaimed, as the branch's `HEAD` copy records
/// it: one GET, the cost of a time-travel read. A stale or missing copy can only miss a
/// record, never invent one; a reader whose pinned version is then missing asks the
/// log's head ([`refuse_reclaimed_by_the_head`]).
pub(crate) async fn refuse_reclaimed_by_head_copy(
    root: &Arc<StorageRoot>,
    branch: &str,
    seq: u64,
) -> Result<()> {
    match CommitLog::new(root.clone(), branch)?.head_copy().await? {
        Some(head) => refuse_reclaimed(&head, seq),
        None => Ok(()),
    }
}

/// Refuses a commit that cleanup has reclaimed, as the branch's head records it.
pub(crate) async fn refuse_reclaimed_by_the_head(
    root: &Arc<StorageRoot>,
    branch: &str,
    seq: u64,
) -> Result<()> {
    let head = CommitLog::new(root.clone(), branch)?.head().await?;
    refuse_reclaimed(&head, seq)
}

/// Refuses to publish pins read at `read` from a head once that is longer ago than
/// [`FOREIGN_PINS_AGE_MAX`]: cleanup may have reclaimed them (`StagingExpired`, with
/// the caller's evidence).
pub(crate) fn check_foreign_pins_age(read: &seams::Since) -> Result<()> {
    refuse_older_than(read, micros_of(FOREIGN_PINS_AGE_MAX))
}

/// Refuses to publish (or re-commit) staging that began at `started` on `base` once it
/// is older than half the grace period `base` records (24 h when cleanup never ran):
/// its files may be removed.
pub(crate) fn check_staging_age(base: &GraphCommit, started: &seams::Since) -> Result<()> {
    let grace = base
        .retention
        .map_or(micros_of(GRACE_DEFAULT), |retention| retention.grace_micros);
    refuse_older_than(started, grace / 2)
}

/// `StagingExpired` once `since` is more than `limit_micros` ago, measured on the
/// monotonic clock too: a wall clock that stepped back never lets old work through.
/// The caller's evidence joins it: staging left is `Unpublished`; a writer that staged
/// nothing leaves nothing.
fn refuse_older_than(since: &seams::Since, limit_micros: i64) -> Result<()> {
    let age = since.elapsed_micros();
    if age > limit_micros {
        return Err(OmniError::StagingExpired {
            age_secs: u64::try_from(age / 1_000_000).unwrap_or(0),
            limit_secs: u64::try_from(limit_micros / 1_000_000).unwrap_or(0),
            evidence: Evidence::BeforeEffect,
        });
    }
    Ok(())
}
