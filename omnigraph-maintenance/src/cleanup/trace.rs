//! The collector's roots from the commit logs: every branch's head, the commits the
//! policy retains, and the versions that commits published.

use super::{CleanupPolicy, REQUEST_FAN_OUT};
use futures::{StreamExt, TryStreamExt};
use omnigraph_core::storage::StorageRoot;
use omnigraph_core::{OmniError, Result};
use omnigraph_publish::retention::{self, micros_of};
use omnigraph_publish::{CommitLog, GraphCommit, TablePin};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// What the logs say, at one moment.
#[derive(Clone, Debug, Default)]
pub(crate) struct Trace {
    /// Each branch's head seq.
    pub(crate) heads: BTreeMap<String, u64>,
    /// Per branch, the oldest retained commit.
    pub(crate) oldest_retained: BTreeMap<String, u64>,
    /// Table id → versions pinned by a retained commit of any branch.
    pub(crate) retained: HashMap<String, HashSet<u64>>,
    /// Table id → versions pinned by any commit read (retained or not).
    pub(crate) published: HashMap<String, HashSet<u64>>,
    /// Table id → type name, from the newest head that pins it.
    pub(crate) type_names: HashMap<String, String>,
    /// Per branch, the oldest commit below its oldest retained one whose object a root
    /// was read from (a head of a life that ended within the grace period, a merge
    /// base): the commit objects cleanup may reclaim end below it.
    pub(crate) read_below: BTreeMap<String, u64>,
}

impl Trace {
    /// Records `head` as the branch's head.
    fn note_head(&mut self, branch: &str, head: &GraphCommit) {
        self.heads.insert(branch.to_string(), head.seq);
    }

    /// Notes that a commit read pins `pin`.
    fn publish(&mut self, pin: &TablePin) {
        self.published
            .entry(pin.table_id.clone())
            .or_default()
            .insert(pin.version);
    }

    /// Notes that a retained commit pins `pin`; whether its version was not retained
    /// yet.
    fn retain(&mut self, pin: &TablePin) -> bool {
        self.retained
            .entry(pin.table_id.clone())
            .or_default()
            .insert(pin.version)
    }

    /// Names `pin`'s table by its type, unless a newer head named it already.
    fn name(&mut self, pin: &TablePin) {
        self.type_names
            .entry(pin.table_id.clone())
            .or_insert_with(|| pin.type_name.clone());
    }

    /// Notes that a root was read from commit `seq` of `branch`.
    fn read_commit(&mut self, branch: &str, seq: u64) {
        let oldest = self.read_below.entry(branch.to_string()).or_insert(seq);
        *oldest = (*oldest).min(seq);
    }

    /// Whether a retained commit pins `table_id` at any version.
    pub(crate) fn is_retained_table(&self, table_id: &str) -> bool {
        self.retained.contains_key(table_id)
    }
}

/// Commits `from` to `head` of `branch`, `head` included as already read.
async fn commits_from(
    root: &Arc<StorageRoot>,
    branch: &str,
    from: u64,
    head: &GraphCommit,
) -> Result<Vec<GraphCommit>> {
    let mut commits = read_commits(root, branch, from..head.seq).await?;
    commits.push(head.clone());
    Ok(commits)
}

/// The commits `seqs` of `branch`, in order, [`REQUEST_FAN_OUT`] reads at a time; a
/// missing one is `not_found`.
pub(super) async fn read_commits(
    root: &Arc<StorageRoot>,
    branch: &str,
    seqs: std::ops::Range<u64>,
) -> Result<Vec<GraphCommit>> {
    let log = CommitLog::new(root.clone(), branch)?;
    futures::stream::iter(seqs)
        .map(|seq| {
            let log = log.clone();
            async move { log.require(seq).await }
        })
        .buffered(REQUEST_FAN_OUT)
        .try_collect()
        .await
}

/// Each branch's head seq (one head read per branch).
pub(crate) async fn heads(
    root: &Arc<StorageRoot>,
    branches: &[String],
) -> Result<BTreeMap<String, GraphCommit>> {
    futures::stream::iter(branches.iter().cloned())
        .map(|branch| {
            let root = root.clone();
            async move {
                // A folder with no commit is a creation in flight (or one that never
                // landed): no root yet. A retrace lists the branches again.
                let head = CommitLog::new(root, &branch)?.newest().await?;
                Ok::<_, OmniError>(head.map(|head| (branch, head)))
            }
        })
        .buffer_unordered(REQUEST_FAN_OUT)
        .try_filter_map(|head| async move { Ok(head) })
        .try_collect()
        .await
}

/// What a trace keeps below the oldest commit each log keeps readable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Below {
    /// The heads of lives that ended within the grace period: cleanup's roots.
    HeadsOfEndedLives,
    /// Nothing: what the logs say is readable (repair's report).
    Nothing,
}

/// Traces every branch for cleanup: reads the commits from the oldest one its head
/// records retained (genesis when cleanup never ran) to the head, decides which the
/// policy retains, and adds the heads of lives that ended within the grace period.
pub(crate) async fn trace(
    root: &Arc<StorageRoot>,
    heads: &BTreeMap<String, GraphCommit>,
    policy: &CleanupPolicy,
    grace: Duration,
    now_micros: i64,
) -> Result<Trace> {
    trace_below(
        root,
        heads,
        policy,
        grace,
        now_micros,
        Below::HeadsOfEndedLives,
    )
    .await
}

/// Traces what the logs keep readable: every commit from the oldest one each head
/// records retained to the head (for the repair report, which checks that each is
/// whole).
pub(crate) async fn trace_readable(
    root: &Arc<StorageRoot>,
    heads: &BTreeMap<String, GraphCommit>,
    now_micros: i64,
) -> Result<Trace> {
    let everything = CleanupPolicy::keep_commits(u64::MAX)?;
    let grace = omnigraph_publish::limits::GRACE_MIN;
    trace_below(root, heads, &everything, grace, now_micros, Below::Nothing).await
}

async fn trace_below(
    root: &Arc<StorageRoot>,
    heads: &BTreeMap<String, GraphCommit>,
    policy: &CleanupPolicy,
    grace: Duration,
    now_micros: i64,
    below: Below,
) -> Result<Trace> {
    let mut trace = Trace::default();
    let grace_cutoff = now_micros.saturating_sub(micros_of(grace));
    for (branch, head) in heads {
        // A validated commit never retains from past itself.
        let from = retention::oldest_retained(head);
        assert!(from <= head.seq, "a commit retains from at most itself");
        let commits = commits_from(root, branch, from, head).await?;
        let oldest = oldest_retained(&commits, policy, grace, now_micros);
        if below == Below::HeadsOfEndedLives {
            add_heads_of_ended_lives(root, &mut trace, branch, &commits[0], grace_cutoff).await?;
        }
        trace.note_head(branch, head);
        trace.oldest_retained.insert(branch.clone(), oldest);
        for pin in &head.pins {
            trace
                .type_names
                .insert(pin.table_id.clone(), pin.type_name.clone());
        }
        for commit in &commits {
            for pin in &commit.pins {
                trace.publish(pin);
                if commit.seq >= oldest {
                    trace.retain(pin);
                    trace.name(pin);
                }
            }
        }
    }
    // Merge bases are roots too: each live branch's fork point and the commits merged
    // into it, whatever their own branch's retention says, so a merge can always read
    // the base it merges from.
    for head in heads.values() {
        add_merge_bases(root, &mut trace, head, heads).await?;
    }
    Ok(trace)
}

/// Retains the pins of the commits `head` may merge from as its base: its fork point
/// and the commits merged into its life (none for a deleted branch); returns the
/// versions it retained first. A base on a branch whose life ended (deleted, or
/// created again) is no base any more, and keeps nothing.
async fn add_merge_bases(
    root: &Arc<StorageRoot>,
    trace: &mut Trace,
    head: &GraphCommit,
    heads: &BTreeMap<String, GraphCommit>,
) -> Result<HashSet<(String, u64)>> {
    let mut newly_retained = HashSet::new();
    if head.deleted {
        return Ok(newly_retained);
    }
    let bases = head
        .fork
        .iter()
        .map(|fork| (fork.branch.as_str(), fork.seq))
        .chain(
            head.merged_from
                .iter()
                .map(|merged| (merged.branch.as_str(), merged.seq)),
        );
    for (branch, seq) in bases {
        let Some(live) = heads.get(branch) else {
            continue;
        };
        let Some(base) = CommitLog::new(root.clone(), branch)?.read(seq).await? else {
            continue;
        };
        if !live.continues_life_of(&base) {
            continue;
        }
        trace.read_commit(branch, seq);
        for pin in &base.pins {
            trace.publish(pin);
            if trace.retain(pin) {
                newly_retained.insert((pin.table_id.clone(), pin.version));
            }
            trace.name(pin);
        }
    }
    Ok(newly_retained)
}

/// Retains the pins of every commit below `first` (the oldest commit the branch's log
/// keeps readable) that was its branch's head at or after `cutoff`: the last heads of
/// lives that ended within the grace period (a deletion, maybe followed by a new life,
/// records everything before it reclaimed at once). A merge or a branch creation that
/// read such a head may still publish its pins for `FOREIGN_PINS_AGE_MAX`; readers of
/// the log are refused them all the same. Nothing is read when `first` itself was
/// created before `cutoff`: every commit below it was superseded earlier still.
async fn add_heads_of_ended_lives(
    root: &Arc<StorageRoot>,
    trace: &mut Trace,
    branch: &str,
    first: &GraphCommit,
    cutoff: i64,
) -> Result<()> {
    let log = CommitLog::new(root.clone(), branch)?;
    let mut successor_created_at = first.created_at;
    // Bounded by `first.seq`: one step a commit, down to genesis at most.
    for seq in (0..first.seq).rev() {
        if successor_created_at < cutoff {
            break;
        }
        // A commit gone from the log (reclaimed with its files) holds nothing to keep.
        let Some(commit) = log.read(seq).await? else {
            break;
        };
        assert_eq!(commit.seq, seq, "a validated commit is at its own seq");
        trace.read_commit(branch, seq);
        for pin in &commit.pins {
            trace.publish(pin);
            trace.retain(pin);
            trace.name(pin);
        }
        successor_created_at = commit.created_at;
    }
    Ok(())
}

/// The oldest commit of a branch that stays readable: every commit that was the head
/// within the grace period or within `older_than` (its successor is younger than it),
/// the newest `keep` commits, and the head; everything from the oldest of those on is
/// retained. A head is aged by the commit that superseded it, not by its own creation:
/// a reader that opened a head idle for longer than the grace period can finish its
/// read after the next write and a cleanup.
fn oldest_retained(
    commits: &[GraphCommit],
    policy: &CleanupPolicy,
    grace: Duration,
    now_micros: i64,
) -> u64 {
    let head = commits.last().expect("a traced log holds its head");
    let young_since = |age: Duration| {
        let cutoff = now_micros.saturating_sub(micros_of(age));
        commits
            .windows(2)
            .find(|pair| pair[1].created_at >= cutoff)
            .map_or(head.seq, |pair| pair[0].seq)
    };
    let mut oldest = young_since(grace);
    if let Some(keep) = policy.keep_commits {
        // The newest `keep` commits that changed the graph: cleanup's own records pin
        // what their parents pin, and never push history out.
        let mut counted = 0u64;
        let mut from = head.seq;
        for (at, commit) in commits.iter().enumerate().rev() {
            from = commit.seq;
            let unchanged = at > 0 && retention::changes_nothing(commit, &commits[at - 1]);
            counted += u64::from(!unchanged);
            if counted >= keep {
                break;
            }
        }
        oldest = oldest.min(from);
    }
    if let Some(older_than) = policy.older_than {
        oldest = oldest.min(young_since(older_than));
    }
    oldest.max(commits.first().map_or(0, |commit| commit.seq))
}

/// Adds the commits each branch gained since `trace` was made (up to `heads`) to its
/// roots; returns the `(table id, version)` pins that were not retained before.
pub(crate) async fn extend(
    root: &Arc<StorageRoot>,
    trace: &mut Trace,
    heads: &BTreeMap<String, GraphCommit>,
) -> Result<HashSet<(String, u64)>> {
    let mut newly_pinned = HashSet::new();
    for (branch, head) in heads {
        // A branch created since the trace is a root from its oldest retained commit.
        let from = match trace.heads.get(branch) {
            Some(&traced) if head.seq <= traced => continue,
            Some(&traced) => traced + 1,
            None => {
                let oldest = retention::oldest_retained(head);
                trace.oldest_retained.insert(branch.clone(), oldest);
                oldest
            }
        };
        for commit in &commits_from(root, branch, from, head).await? {
            for pin in &commit.pins {
                trace.publish(pin);
                if trace.retain(pin) {
                    newly_pinned.insert((pin.table_id.clone(), pin.version));
                }
            }
        }
        trace.note_head(branch, head);
        // A merge or a branch created since names bases of its own.
        newly_pinned.extend(add_merge_bases(root, trace, head, heads).await?);
    }
    Ok(newly_pinned)
}
