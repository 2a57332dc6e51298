//! Reading a branch's commit log: the head, a commit by seq or id, and pages of history.
//!
//! Head discovery costs the same at any depth. `HEAD` (a best-effort copy of the newest
//! commit) is only a hint for a seq `s`: head discovery never uses its content (a reader
//! of an old commit reads its retention record, which can only lag). Commits `s`, `s+1`
//! and `s+2` are read together; the head is the last commit before the first missing
//! one, and a commit found after a missing one is a gap, reported as corruption so that
//! no writer ever publishes into it. The commits folder is listed only when `HEAD` is
//! missing, unreadable, points past the log, or lags by more than [`HEAD_PROBE_MAX`].

use crate::commit::{CommitOperation, GraphCommit};
use crate::history::{History, HistoryEntry};
use crate::layout;
use crate::limits::{FIND_WALK_MAX, HEAD_PROBE_MAX, LOG_PAGE_MAX};
use omnigraph_core::storage::StorageRoot;
use omnigraph_core::{InputLocation, OmniError, Result};
use std::sync::Arc;

/// One entry of a branch's log: a commit, or what the history keeps of a reclaimed one.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LogEntry {
    /// Its seq.
    pub seq: u64,
    /// Its commit id.
    pub commit_id: String,
    /// Its parent's id (`None` for genesis).
    pub parent_commit_id: Option<String>,
    /// When it was published (microseconds since the epoch).
    pub created_at: i64,
    /// Who published it.
    pub actor: String,
    /// What it did.
    pub operation: CommitOperation,
    /// Whether cleanup reclaimed it: only its history is left (its summary may be cut).
    pub reclaimed: bool,
}

impl LogEntry {
    /// What the log shows of `commit`.
    pub fn of_commit(commit: &GraphCommit) -> LogEntry {
        LogEntry {
            seq: commit.seq,
            commit_id: commit.commit_id.clone(),
            parent_commit_id: commit.parent_commit_id.clone(),
            created_at: commit.created_at,
            actor: commit.actor.clone(),
            operation: commit.operation.clone(),
            reclaimed: false,
        }
    }

    fn of_history(entry: &HistoryEntry) -> LogEntry {
        LogEntry {
            seq: entry.seq,
            commit_id: entry.commit_id.clone(),
            parent_commit_id: entry.parent_commit_id.clone(),
            created_at: entry.created_at,
            actor: entry.actor.clone(),
            operation: entry.operation.clone(),
            reclaimed: true,
        }
    }
}

/// Whether a probe forward from `seq` stays within the seq space.
fn probe_fits(seq: u64) -> bool {
    seq.checked_add(HEAD_PROBE_MAX as u64 + 2).is_some()
}

/// The commit log of one branch.
#[derive(Clone, Debug)]
pub struct CommitLog {
    root: Arc<StorageRoot>,
    branch: String,
}

impl CommitLog {
    /// The log of `branch` in `root`.
    pub fn new(root: Arc<StorageRoot>, branch: &str) -> Result<CommitLog> {
        layout::check_branch(branch)?;
        Ok(CommitLog {
            root,
            branch: branch.to_string(),
        })
    }

    /// The branch.
    pub fn branch(&self) -> &str {
        &self.branch
    }

    /// Commit `seq`, or `None` if it does not exist. One GET, size-capped, and the
    /// commit is validated before it is returned.
    pub async fn read(&self, seq: u64) -> Result<Option<GraphCommit>> {
        let path = layout::commit_path(&self.branch, seq);
        match self
            .root
            .get_capped(&path, crate::limits::COMMIT_BYTES_MAX)
            .await?
        {
            Some(bytes) => GraphCommit::parse(&path, &bytes, &self.branch, seq).map(Some),
            None => Ok(None),
        }
    }

    /// Commit `seq`, or a typed `NotFound`.
    pub async fn require(&self, seq: u64) -> Result<GraphCommit> {
        self.read(seq)
            .await?
            .ok_or_else(|| OmniError::not_found(format!("commit {seq} on branch {}", self.branch)))
    }

    /// The newest commit of the branch. Fresh `HEAD`: four GETs in two round trips.
    pub async fn head(&self) -> Result<GraphCommit> {
        self.newest().await?.ok_or_else(|| self.no_commits())
    }

    /// The error of a branch whose log has no commit.
    fn no_commits(&self) -> OmniError {
        OmniError::not_found(format!(
            "branch {} (no commits under {})",
            self.branch,
            layout::commits_dir(&self.branch)
        ))
    }

    /// The newest commit of the branch, or `None` when it has none (a name no branch
    /// has had), at the cost of [`CommitLog::head`].
    pub async fn newest(&self) -> Result<Option<GraphCommit>> {
        let hint = self.head_hint().await?;
        self.newest_hinted(hint).await
    }

    /// The head of the branch, probing from `seq`, the seq of a head this process
    /// read or published before, instead of the one `HEAD` names: one GET and one round
    /// trip fewer than [`CommitLog::head`]. Like `HEAD`'s, `seq` is a hint: the log
    /// decides (it may have moved on, or be a log restored from a backup that ends
    /// before `seq`). The caller knows that commit `seq` is not below the branch's
    /// floor, where a leftover whose successors are deleted would pass for the head
    /// ([`crate::Graph::head_near`]).
    pub async fn head_near(&self, seq: u64) -> Result<GraphCommit> {
        self.newest_hinted(Some(seq))
            .await?
            .ok_or_else(|| self.no_commits())
    }

    /// The newest commit of the branch, probing from the seq `HEAD` named.
    async fn newest_hinted(&self, hint: Option<u64>) -> Result<Option<GraphCommit>> {
        // A hint at the very end of the seq space cannot be probed past: no hint.
        let Some(hint) = hint.filter(|seq| probe_fits(*seq)) else {
            return self.newest_by_listing().await;
        };
        let (at, next, after) =
            tokio::try_join!(self.read(hint), self.read(hint + 1), self.read(hint + 2))?;
        let Some(newest) = at else {
            // HEAD points past the log: it is not a hint.
            return self.newest_by_listing().await;
        };
        self.newest_from(newest, next, after).await
    }

    /// The newest commit of the branch after a writer built on `base` lost its slot to
    /// `winner`, the commit it read back there. Checks that `winner` follows `base`, as
    /// a walk through both would. Reads the two commits after `winner` together: a
    /// loser is seldom more than one commit behind, so it mostly knows the head then,
    /// after two GETs in one round trip (one GET and one round trip less than reading
    /// `HEAD` first). Only when both exist does it read `HEAD`, and it goes on from
    /// there if `HEAD` names a later commit. Never reads `winner` again, nor walks from
    /// a `HEAD` that lags it (its writer copies it after the commit lands).
    pub(crate) async fn newest_after(
        &self,
        base: &GraphCommit,
        winner: GraphCommit,
    ) -> Result<GraphCommit> {
        assert!(
            base.branch == self.branch
                && winner.branch == self.branch
                && winner.seq == base.seq + 1,
            "a winner is the commit after its loser's base, on this branch"
        );
        self.check_follows(&winner, base)?;
        let newest = if probe_fits(winner.seq) {
            let (next, after) =
                tokio::try_join!(self.read(winner.seq + 1), self.read(winner.seq + 2))?;
            // Two commits past the winner: `HEAD` may name one further on.
            let hint_past = match &after {
                Some(_) => self.head_hint().await?.filter(|seq| *seq > winner.seq + 2),
                None => None,
            };
            match hint_past {
                Some(hint) => self.newest_hinted(Some(hint)).await?,
                None => self.newest_from(winner, next, after).await?,
            }
        } else {
            self.newest_hinted(self.head_hint().await?).await?
        };
        // The listing finds nothing only if the log went away after the winner was read.
        newest.ok_or_else(|| {
            OmniError::corrupt(
                layout::commits_dir(&self.branch),
                format!(
                    "commit {} was just read, but the listing found no commit",
                    base.seq + 1
                ),
            )
        })
    }

    /// Walks forward from `newest`, given the two commits after it as read together,
    /// checking each commit's parent; lists the commits folder past [`HEAD_PROBE_MAX`].
    async fn newest_from(
        &self,
        mut newest: GraphCommit,
        mut next: Option<GraphCommit>,
        mut after: Option<GraphCommit>,
    ) -> Result<Option<GraphCommit>> {
        for _ in 0..HEAD_PROBE_MAX {
            let commit = match next {
                Some(commit) => commit,
                None => {
                    let Some(beyond) = &after else {
                        return Ok(Some(newest));
                    };
                    // The reads ran together: another writer may have published both
                    // between them. Commit n+2 exists only after n+1 did, so reading
                    // n+1 again now tells a race from a gap.
                    match self.read(newest.seq + 1).await? {
                        Some(commit) => commit,
                        // A commit below the floor is a leftover of cleanup (its
                        // successors may be deleted already): the listing knows the
                        // floor.
                        None if self.below_the_floor(newest.seq + 1).await? => {
                            return self.newest_by_listing().await;
                        }
                        None => return Err(self.gap(newest.seq + 1, beyond.seq)),
                    }
                }
            };
            self.check_follows(&commit, &newest)?;
            assert_eq!(
                commit.seq,
                newest.seq + 1,
                "a read commit is the one asked for"
            );
            newest = commit;
            next = after;
            after = self.read(newest.seq + 2).await?;
        }
        // HEAD lags too far to be worth probing from.
        self.newest_by_listing().await
    }

    /// Refuses `commit`, the commit after `parent` in the log, unless it names `parent`
    /// as its parent.
    fn check_follows(&self, commit: &GraphCommit, parent: &GraphCommit) -> Result<()> {
        if commit.parent_commit_id.as_deref() == Some(parent.commit_id.as_str()) {
            return Ok(());
        }
        Err(OmniError::corrupt(
            layout::commit_path(&self.branch, commit.seq),
            format!(
                "its parent is {:?}, but commit {} is {}",
                commit.parent_commit_id, parent.seq, parent.commit_id
            ),
        ))
    }

    /// The corruption of a log where commit `missing` is gone but `found` exists.
    fn gap(&self, missing: u64, found: u64) -> OmniError {
        OmniError::corrupt(
            layout::commit_path(&self.branch, missing),
            format!(
                "the log of branch {} has a gap: commit {missing} is missing but {found} exists; \
                 nothing is published until it is restored",
                self.branch
            ),
        )
    }

    /// The commit `HEAD` copies, if it exists and is a valid commit of this branch.
    /// Never authoritative: it may lag the log.
    pub(crate) async fn head_copy(&self) -> Result<Option<GraphCommit>> {
        let Some(bytes) = self.head_bytes().await? else {
            return Ok(None);
        };
        let Some(seq) = self.hinted_seq(&bytes) else {
            return Ok(None);
        };
        let path = layout::head_path(&self.branch);
        Ok(GraphCommit::parse(&path, &bytes, &self.branch, seq).ok())
    }

    /// The seq `HEAD` names, if `HEAD` exists and parses. Never authoritative.
    async fn head_hint(&self) -> Result<Option<u64>> {
        Ok(self
            .head_bytes()
            .await?
            .and_then(|bytes| self.hinted_seq(&bytes)))
    }

    /// The bytes of `HEAD`; `None` when it is missing or oversized (no hint: the log
    /// decides).
    async fn head_bytes(&self) -> Result<Option<bytes::Bytes>> {
        self.root
            .get_capped(
                &layout::head_path(&self.branch),
                crate::limits::COMMIT_BYTES_MAX,
            )
            .await
            .or_else(|error| match error {
                OmniError::Corrupt { .. } => Ok(None),
                other => Err(other),
            })
    }

    /// The seq a `HEAD` of this branch names, if it is JSON with a `seq` and this
    /// branch.
    fn hinted_seq(&self, bytes: &[u8]) -> Option<u64> {
        #[derive(serde::Deserialize)]
        struct Hint {
            seq: u64,
            branch: String,
        }
        let hint = serde_json::from_slice::<Hint>(bytes).ok()?;
        (hint.branch == self.branch).then_some(hint.seq)
    }

    /// The commit objects of the branch below `floor`, as seq and path, oldest first:
    /// what cleanup deletes once the history holds them (one LIST). `main`'s genesis
    /// is never among them: it marks the root as holding a graph.
    pub async fn objects_below(&self, floor: u64) -> Result<Vec<(u64, String)>> {
        let mut below: Vec<(u64, String)> = self
            .root
            .list(&layout::commits_dir(&self.branch))
            .await?
            .into_iter()
            .filter_map(|path| {
                let seq = layout::seq_of_commit_path(&self.branch, &path)?;
                let genesis = self.branch == layout::MAIN_BRANCH && seq == 0;
                (seq < floor && !genesis).then_some((seq, path))
            })
            .collect();
        below.sort_unstable();
        // Each listed path is exactly the branch's commit below the floor: cleanup
        // deletes them.
        assert!(below.iter().all(|(seq, path)| *seq < floor
            && *path == layout::commit_path(&self.branch, *seq)
            && (self.branch != layout::MAIN_BRANCH || *seq > 0)));
        Ok(below)
    }

    /// Whether `seq` is below the branch's floor: cleanup reclaimed it and wrote its
    /// history (one LIST of the history folder).
    pub(crate) async fn below_the_floor(&self, seq: u64) -> Result<bool> {
        Ok(seq < History::read(&self.root, &self.branch).await?.floor())
    }

    /// The newest commit found by listing the commits folder: the fallback when `HEAD`
    /// is gone; `None` when there is none. The commits from the floor (0 until cleanup
    /// reclaimed commits, `docs/format.md` §8.4) to the newest must all be there; a
    /// commit below the floor is a leftover, ignored.
    pub(crate) async fn newest_by_listing(&self) -> Result<Option<GraphCommit>> {
        let names = self.root.list(&layout::commits_dir(&self.branch)).await?;
        let mut seqs: Vec<u64> = names
            .iter()
            .filter_map(|name| layout::seq_of_commit_path(&self.branch, name))
            .collect();
        seqs.sort_unstable();
        let Some(&newest) = seqs.last() else {
            return Ok(None);
        };
        // Listed after the commits: a deletion the listing saw is covered by a history
        // chunk written before it.
        let contiguous_from_genesis = seqs.iter().enumerate().all(|(at, seq)| *seq == at as u64);
        let floor = if contiguous_from_genesis {
            0
        } else {
            History::read(&self.root, &self.branch).await?.floor()
        };
        if newest < floor {
            return Err(OmniError::corrupt(
                layout::commits_dir(&self.branch),
                format!(
                    "the history reclaims every commit below {floor}, but the newest commit is {newest}"
                ),
            ));
        }
        seqs.retain(|seq| *seq >= floor);
        for (at, found) in seqs.iter().enumerate() {
            let expected = floor + at as u64;
            // A listing is not atomic: a commit missing from it is a gap only if it
            // is still missing when read.
            if *found != expected && self.read(expected).await?.is_none() {
                return Err(self.gap(expected, *found));
            }
            if *found != expected {
                break;
            }
        }
        self.read(newest).await?.map(Some).ok_or_else(|| {
            OmniError::corrupt(
                layout::commit_path(&self.branch, newest),
                "listed but not readable",
            )
        })
    }

    /// Up to `limit` commits, newest first, starting below `before` (a seq) or at the
    /// head. A cursor past the head is bad input; a missing commit inside the range is a
    /// gap: a typed error naming it.
    pub async fn log(&self, limit: usize, before: Option<u64>) -> Result<Vec<GraphCommit>> {
        Ok(self.walk(limit, before).await?.0)
    }

    /// [`CommitLog::log`], and the history as the walk last listed it (`None` when it
    /// read nothing).
    async fn walk(
        &self,
        limit: usize,
        before: Option<u64>,
    ) -> Result<(Vec<GraphCommit>, Option<History>)> {
        let limit = limit.min(LOG_PAGE_MAX);
        let mut commits = Vec::with_capacity(limit);
        let start = match before {
            Some(0) => return Ok((commits, None)),
            Some(seq) => seq - 1,
            None => self.head().await?.seq,
        };
        // Read once: a commit object below the floor is a leftover (or one a writer
        // landed where no reader looks, `docs/format.md` §8.4), never the log.
        let history = History::read(&self.root, &self.branch).await?;
        let floor = history.floor();
        if before.is_none() && start < floor {
            return Err(OmniError::corrupt(
                layout::history_dir(&self.branch),
                format!("the history reclaims every commit below {floor}, but the head is {start}"),
            ));
        }
        let mut seq = start;
        while commits.len() < limit {
            if seq < floor {
                return Ok((commits, Some(history)));
            }
            let Some(commit) = self.read(seq).await? else {
                // Below the floor the log goes on in the history ([`CommitLog::page`]).
                let fresh = History::read(&self.root, &self.branch).await?;
                if seq < fresh.floor() {
                    return Ok((commits, Some(fresh)));
                }
                if seq == start
                    && let Some(cursor) = before
                {
                    let head = self.head().await?;
                    if cursor > head.seq + 1 {
                        return Err(OmniError::bad_input(
                            InputLocation::in_source("log").field("before"),
                            format!(
                                "the cursor {cursor} is past the head of branch {} (seq {}); the newest page starts at --before {}",
                                self.branch,
                                head.seq,
                                head.seq + 1
                            ),
                        ));
                    }
                }
                return Err(OmniError::corrupt(
                    layout::commit_path(&self.branch, seq),
                    format!(
                        "the log of branch {} has a gap at commit {seq}",
                        self.branch
                    ),
                ));
            };
            if let Some(newer) = commits.last()
                && newer.parent_commit_id.as_deref() != Some(commit.commit_id.as_str())
            {
                // A floor that moved since it was read: this is a writer's put that
                // landed below it, and the log goes on in the history.
                let fresh = History::read(&self.root, &self.branch).await?;
                if seq < fresh.floor() {
                    return Ok((commits, Some(fresh)));
                }
                return Err(OmniError::corrupt(
                    layout::commit_path(&self.branch, newer.seq),
                    format!("its parent is not commit {seq} of the log",),
                ));
            }
            commits.push(commit);
            if seq == 0 {
                break;
            }
            seq -= 1;
        }
        // Newest first, each the parent of the one before: as checked above.
        assert!(commits.windows(2).all(|pair| {
            pair[0].seq == pair[1].seq + 1
                && pair[0].parent_commit_id.as_deref() == Some(pair[1].commit_id.as_str())
        }));
        Ok((commits, Some(history)))
    }

    /// Up to `limit` entries of the log, newest first, starting below `before` (a seq)
    /// or at the head: the commits from the floor up, then the history of the reclaimed
    /// ones (`docs/format.md` §8.4), each on the one before.
    pub async fn entries(&self, limit: usize, before: Option<u64>) -> Result<Vec<LogEntry>> {
        let (commits, reclaimed) = self.page(limit, before).await?;
        Ok(commits
            .iter()
            .map(LogEntry::of_commit)
            .chain(reclaimed)
            .collect())
    }

    /// [`CommitLog::entries`] with the commits whole: the commits from the floor up,
    /// and the entries of the reclaimed ones below them, up to `limit` in all.
    pub async fn page(
        &self,
        limit: usize,
        before: Option<u64>,
    ) -> Result<(Vec<GraphCommit>, Vec<LogEntry>)> {
        let limit = limit.min(LOG_PAGE_MAX);
        let (commits, history) = self.walk(limit, before).await?;
        let next = match (commits.last(), before) {
            (Some(oldest), _) => oldest.seq,
            (None, Some(cursor)) => cursor,
            (None, None) => return Ok((commits, Vec::new())),
        };
        let Some(history) = history.filter(|_| commits.len() < limit && next > 0) else {
            return Ok((commits, Vec::new()));
        };
        let to = next.min(history.floor());
        let from = to.saturating_sub((limit - commits.len()) as u64);
        let reclaimed = history.entries(&self.root, from, to).await?;
        if let (Some(older), Some(newer)) = (reclaimed.last(), commits.last())
            && newer.parent_commit_id.as_deref() != Some(older.commit_id.as_str())
        {
            return Err(OmniError::corrupt(
                layout::history_dir(&self.branch),
                format!(
                    "commit {} does not follow reclaimed commit {}",
                    newer.seq, older.seq
                ),
            ));
        }
        let reclaimed = reclaimed.iter().rev().map(LogEntry::of_history).collect();
        Ok((commits, reclaimed))
    }

    /// The commit with `commit_id`, walking back from the head at most
    /// [`FIND_WALK_MAX`] commits; an older commit is named by its seq.
    pub async fn find(&self, commit_id: &str) -> Result<GraphCommit> {
        self.find_from_head(commit_id)
            .await
            .map(|(found, _head)| found)
    }

    /// The commit with `commit_id`, and the head the walk started from.
    pub(crate) async fn find_from_head(
        &self,
        commit_id: &str,
    ) -> Result<(GraphCommit, GraphCommit)> {
        let head = self.head().await?;
        let mut current = head.clone();
        for _ in 0..FIND_WALK_MAX {
            if current.commit_id == commit_id {
                return Ok((current, head));
            }
            if current.seq == 0 {
                return Err(OmniError::not_found(format!(
                    "commit {commit_id} on branch {}",
                    self.branch
                )));
            }
            let older = match self.read(current.seq - 1).await? {
                Some(commit) => Ok(commit),
                None => History::read(&self.root, &self.branch).await.map(Err)?,
            };
            current = match older {
                Ok(commit) => commit,
                // Reclaimed: the history names it, if it is there at all.
                Err(history) if current.seq - 1 < history.floor() => {
                    return match history.find(&self.root, commit_id).await? {
                        Some(found) => Err(OmniError::CommitReclaimed {
                            branch: self.branch.clone(),
                            seq: found.seq,
                            oldest_retained: crate::retention::oldest_retained(&head),
                            evidence: omnigraph_core::Evidence::BeforeEffect,
                        }),
                        None => Err(OmniError::not_found(format!(
                            "commit {commit_id} on branch {}",
                            self.branch
                        ))),
                    };
                }
                Err(_) => {
                    return Err(OmniError::corrupt(
                        layout::commit_path(&self.branch, current.seq - 1),
                        format!("the log of branch {} has a gap", self.branch),
                    ));
                }
            };
        }
        Err(OmniError::not_found(format!(
            "commit {commit_id} among the newest {FIND_WALK_MAX} commits of branch {} (name an older commit by its seq)",
            self.branch
        )))
    }

    /// Makes `HEAD` name `head` when it names a commit below `floor`: cleanup does so
    /// before it writes the history that moves the floor there. A reader follows the
    /// hint to the commit object at its seq and probes past it; were that object a
    /// leftover of a run stopped before its deletions, with its successors deleted, the
    /// reader would take it for the head. One GET, and a PUT when the hint is stale.
    pub async fn lift_head_hint(&self, floor: u64, head: &GraphCommit) -> Result<()> {
        assert_eq!(head.branch, self.branch, "a head of this branch");
        if head.seq < floor {
            // The floor comes from the history's chunk names, read from storage.
            return Err(OmniError::corrupt(
                layout::history_dir(&self.branch),
                format!(
                    "the history's floor {floor} is above the head (seq {})",
                    head.seq
                ),
            ));
        }
        if self.head_hint().await?.is_some_and(|seq| seq < floor) {
            self.root
                .put(&layout::head_path(&self.branch), head.to_bytes()?)
                .await?;
        }
        Ok(())
    }

    /// Writes the best-effort `HEAD` copy. Failures are ignored: `HEAD` is never
    /// authoritative, and a stale one only costs readers a probe.
    pub(crate) async fn write_head_copy(&self, commit: &GraphCommit) {
        if let Ok(bytes) = commit.to_bytes() {
            let _ = self.root.put(&layout::head_path(&self.branch), bytes).await;
        }
    }
}
