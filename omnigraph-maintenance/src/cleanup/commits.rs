//! Reclaiming commit objects (`docs/format.md` §8.4): metadata stops growing with the
//! number of writes. Per branch, the commits below its *floor* are reclaimed: the floor
//! is the oldest commit the branch retains (its record's `oldest_retained`), lowered to
//! any older commit a root was read from (a head of a life that ended within the grace
//! period, a merge base of a live branch). A run writes the history of the commits from
//! the old floor to the new one first (`omnigraph log` reads it), then deletes their
//! objects, and any leftover below the floor a crashed run left. `main`'s genesis object
//! stays: it marks the root as holding a graph.

use super::trace::Trace;
use super::{CleanupTableError, table_error};
use crate::lane::CancelToken;
use crate::limits::DELETES_IN_FLIGHT_MAX;
use omnigraph_core::storage::StorageRoot;
use omnigraph_core::{Result, failpoints};
use omnigraph_publish::GraphCommit;
use omnigraph_publish::history::{self, History, HistoryEntry};
use omnigraph_publish::log::CommitLog;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What a run did to one branch's log.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LogCleanup {
    /// The branch.
    pub branch: String,
    /// Every commit below this is reclaimed (its history kept).
    pub floor: u64,
    /// Commits whose history this run wrote.
    pub history_written: u64,
    /// Commit objects this run deleted (leftovers of an earlier run included).
    pub commits_removed: u64,
    /// Why the log was not reclaimed completely.
    pub error: Option<CleanupTableError>,
}

/// Reclaims the commit objects of every branch in `heads` below its floor, as `trace`
/// (the run's final trace, after its fenced record) says; a cancel stops before the
/// next history write or deletion. One branch's failure is its row's error.
pub(crate) async fn reclaim(
    root: &Arc<StorageRoot>,
    heads: &BTreeMap<String, GraphCommit>,
    trace: &Trace,
    token: &CancelToken,
) -> Vec<LogCleanup> {
    reclaim_below(root, heads, Some(trace), token).await
}

/// Deletes only the leftovers below each branch's recorded floor (a run that stopped
/// between a history write and its deletions): for a run whose floors stay, which
/// published no fence.
pub(crate) async fn delete_leftovers(
    root: &Arc<StorageRoot>,
    heads: &BTreeMap<String, GraphCommit>,
    token: &CancelToken,
) -> Vec<LogCleanup> {
    reclaim_below(root, heads, None, token).await
}

/// With `trace`, floors move to where it says; without, they stay where the history
/// puts them.
async fn reclaim_below(
    root: &Arc<StorageRoot>,
    heads: &BTreeMap<String, GraphCommit>,
    trace: Option<&Trace>,
    token: &CancelToken,
) -> Vec<LogCleanup> {
    let mut logs = Vec::with_capacity(heads.len());
    for (branch, head) in heads {
        if token.is_cancelled() {
            break;
        }
        let mut row = LogCleanup {
            branch: branch.clone(),
            ..LogCleanup::default()
        };
        if let Err(error) = reclaim_branch(root, branch, head, trace, token, &mut row).await {
            row.error = Some(table_error(&error));
        }
        logs.push(row);
    }
    logs
}

/// Whether any branch's floor would move (one LIST of each branch's history): a run
/// that reclaims commits publishes its record and traces the heads again first, as one
/// that deletes table files does, so a branch created from a commit meanwhile keeps it.
pub(crate) async fn floors_move(
    root: &Arc<StorageRoot>,
    heads: &BTreeMap<String, GraphCommit>,
    trace: &Trace,
) -> bool {
    for (branch, head) in heads {
        // A history that cannot be read counts as moving: the run fences, and the
        // branch's reclaim reports the failure in its own row.
        let moves = History::read(root, branch)
            .await
            .is_ok_and(|history| floor_of(branch, head, trace) <= history.floor());
        if !moves {
            return true;
        }
    }
    false
}

/// The floor `branch` may move to: its oldest retained commit, below any commit a root
/// was read from, never past its head.
fn floor_of(branch: &str, head: &GraphCommit, trace: &Trace) -> u64 {
    let retained = trace
        .oldest_retained
        .get(branch)
        .copied()
        .unwrap_or_else(|| omnigraph_publish::retention::oldest_retained(head));
    let read = trace.read_below.get(branch).copied().unwrap_or(u64::MAX);
    retained.min(read).min(head.seq)
}

async fn reclaim_branch(
    root: &Arc<StorageRoot>,
    branch: &str,
    head: &GraphCommit,
    trace: Option<&Trace>,
    token: &CancelToken,
    row: &mut LogCleanup,
) -> Result<()> {
    let history = History::read(root, branch).await?;
    let target = trace.map_or(history.floor(), |trace| floor_of(branch, head, trace));
    row.floor = history.floor().max(target);
    let log = CommitLog::new(root.clone(), branch)?;
    if target > history.floor() {
        // Before the floor moves: a run stopped from here on leaves leftovers below it.
        log.lift_head_hint(target, head).await?;
        let entries = reclaimed_entries(root, branch, history.floor(), target).await?;
        if token.is_cancelled() {
            return Ok(());
        }
        let written = entries.len() as u64;
        history::extend(root, &history, entries).await?;
        row.history_written = written;
    } else {
        // Chunks a run that stopped wrote again longer and did not delete yet.
        history::drop_covered(root, &history).await?;
    }
    failpoints::reach(failpoints::CLEANUP_AFTER_HISTORY).await?;
    // Every commit object below the floor goes, whoever wrote it: reclaimed commits,
    // leftovers of a run that stopped here, a writer's that landed below the floor.
    let floor = row.floor;
    let below = log.objects_below(floor).await?;
    if below.is_empty() {
        return Ok(());
    }
    if trace.is_none() {
        // Leftovers of a run that stopped: its lift of `HEAD` may have been undone by
        // a writer's copy that landed late.
        log.lift_head_hint(floor, head).await?;
    }
    // Oldest first, a batch at a time: a run stopped here leaves the newest of them,
    // each (but within the last batch) with its successors, so a reader that follows a
    // lagging hint to one walks on up to the head.
    for batch in below.chunks(DELETES_IN_FLIGHT_MAX) {
        if token.is_cancelled() {
            break;
        }
        let deleted = futures::future::join_all(batch.iter().map(|(seq, path)| async move {
            assert!(*seq < floor, "only commits below the floor are deleted");
            root.delete(path).await
        }))
        .await;
        for outcome in deleted {
            outcome?;
            row.commits_removed += 1;
        }
    }
    Ok(())
}

/// The history of commits `from..to` of `branch`, read from their objects (the history
/// checks that each follows the one before when it is written).
async fn reclaimed_entries(
    root: &Arc<StorageRoot>,
    branch: &str,
    from: u64,
    to: u64,
) -> Result<Vec<HistoryEntry>> {
    let commits = super::trace::read_commits(root, branch, from..to).await?;
    Ok(commits.iter().map(HistoryEntry::of).collect())
}
