//! Reading a branch's commit log: the head, a commit by seq or id, and pages of history.
//!
//! Head discovery costs the same at any depth: GET `HEAD` (a copy of the newest commit),
//! then probe `seq+1`, `seq+2`… until NotFound. Only when `HEAD` is missing or unreadable
//! is the commits folder listed.

use crate::commit::GraphCommit;
use crate::layout;
use omnigraph_core::storage::StorageRoot;
use omnigraph_core::{OmniError, Result};
use std::sync::Arc;

/// The most commits head discovery probes forward from `HEAD` before it lists the
/// commits folder instead: a `HEAD` that lags further is stale, not a hint.
pub const MAX_HEAD_PROBE: usize = 64;
/// The most commits `find` walks back from the head looking for a commit id; older
/// commits are named by seq.
pub const MAX_FIND_WALK: usize = 1_000;
/// The most commits one `log` call returns.
pub const MAX_LOG_PAGE: usize = 1_000;

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

    /// Commit `seq`, or `None` if it does not exist. One GET.
    pub async fn read(&self, seq: u64) -> Result<Option<GraphCommit>> {
        let path = layout::commit_path(&self.branch, seq);
        match self.root.get(&path).await? {
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

    /// The newest commit of the branch.
    pub async fn head(&self) -> Result<GraphCommit> {
        let mut newest = match self.head_copy().await? {
            Some(copy) => copy,
            None => self.head_by_listing().await?,
        };
        // HEAD is best effort and may lag: probe forward until NotFound.
        while let Some(next) = self.read(newest.seq + 1).await? {
            if next.parent_commit_id.as_deref() != Some(newest.commit_id.as_str()) {
                return Err(OmniError::corrupt(
                    layout::commit_path(&self.branch, next.seq),
                    format!(
                        "its parent is {:?}, but commit {} is {}",
                        next.parent_commit_id, newest.seq, newest.commit_id
                    ),
                ));
            }
            newest = next;
        }
        Ok(newest)
    }

    /// The commit `HEAD` copies, if `HEAD` exists and parses. Never authoritative.
    async fn head_copy(&self) -> Result<Option<GraphCommit>> {
        let path = layout::head_path(&self.branch);
        let Some(bytes) = self.root.get(&path).await? else {
            return Ok(None);
        };
        let Ok(copy) = serde_json::from_slice::<GraphCommit>(&bytes) else {
            return Ok(None);
        };
        Ok((copy.branch == self.branch).then_some(copy))
    }

    /// The head found by listing the commits folder: the fallback when `HEAD` is gone.
    async fn head_by_listing(&self) -> Result<GraphCommit> {
        let names = self.root.list(&layout::commits_dir(&self.branch)).await?;
        let mut seqs: Vec<u64> = names
            .iter()
            .filter_map(|name| layout::seq_of_commit_path(name))
            .collect();
        seqs.sort_unstable();
        let Some(&newest) = seqs.last() else {
            return Err(OmniError::not_found(format!(
                "branch {} (no commits under {})",
                self.branch,
                layout::commits_dir(&self.branch)
            )));
        };
        for (expected, found) in seqs.iter().enumerate() {
            if *found != expected as u64 {
                return Err(OmniError::corrupt(
                    layout::commit_path(&self.branch, expected as u64),
                    format!(
                        "the log of branch {} has a gap: commit {expected} is missing but {found} exists",
                        self.branch
                    ),
                ));
            }
        }
        self.read(newest).await?.ok_or_else(|| {
            OmniError::corrupt(
                layout::commit_path(&self.branch, newest),
                "listed but not readable",
            )
        })
    }

    /// Up to `limit` commits, newest first, starting below `before` (a seq) or at the
    /// head. A missing commit inside the range is a gap: a typed error naming it.
    pub async fn log(&self, limit: usize, before: Option<u64>) -> Result<Vec<GraphCommit>> {
        let limit = limit.min(MAX_LOG_PAGE);
        let mut commits = Vec::with_capacity(limit);
        let start = match before {
            Some(0) => return Ok(commits),
            Some(seq) => seq - 1,
            None => self.head().await?.seq,
        };
        let mut seq = start;
        while commits.len() < limit {
            let commit = self.read(seq).await?.ok_or_else(|| {
                OmniError::corrupt(
                    layout::commit_path(&self.branch, seq),
                    format!(
                        "the log of branch {} has a gap at commit {seq}",
                        self.branch
                    ),
                )
            })?;
            commits.push(commit);
            if seq == 0 {
                break;
            }
            seq -= 1;
        }
        Ok(commits)
    }

    /// The commit with `commit_id`, walking back from the head.
    pub async fn find(&self, commit_id: &str) -> Result<GraphCommit> {
        let head = self.head().await?;
        let mut current = head;
        loop {
            if current.commit_id == commit_id {
                return Ok(current);
            }
            if current.seq == 0 {
                return Err(OmniError::not_found(format!(
                    "commit {commit_id} on branch {}",
                    self.branch
                )));
            }
            current = self.read(current.seq - 1).await?.ok_or_else(|| {
                OmniError::corrupt(
                    layout::commit_path(&self.branch, current.seq - 1),
                    format!("the log of branch {} has a gap", self.branch),
                )
            })?;
        }
    }

    /// Writes the best-effort `HEAD` copy. Failures are ignored: `HEAD` is never
    /// authoritative, and a stale one only costs readers a probe.
    pub async fn write_head_copy(&self, commit: &GraphCommit) {
        if let Ok(bytes) = commit.to_bytes() {
            let _ = self.root.put(&layout::head_path(&self.branch), bytes).await;
        }
    }
}
