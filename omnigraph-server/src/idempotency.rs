//! Writes, each run to its end in a task of its own, and idempotent when the client
//! gives an `Idempotency-Key`: a key that already landed returns the commit that
//! answered it, across restarts, because the key is recorded in that commit.
//!
//! A keyed write takes its key's stripe lock (so two requests with one key never both
//! write), brings the branch's index of keys up to the head (reading only the commits
//! it has not indexed yet; after a start, the newest
//! [`IDEMPOTENCY_WINDOW_COMMITS_MAX`] at most, the named retention), and writes only
//! when the key is not there. The lock and the write live in the task, not in the
//! request: a client that hangs up and retries waits for its first attempt to end.

use crate::auth::Admitted;
use crate::limits::{
    IDEMPOTENCY_BRANCHES_KEPT_MAX, IDEMPOTENCY_KEYS_KEPT_MAX, IDEMPOTENCY_WINDOW_COMMITS_MAX,
    KEY_STRIPES_MAX,
};
use futures::future::BoxFuture;
use omnigraph_core::{ErrorKind, OmniError, Result};
use omnigraph_graph::Omnigraph;
use omnigraph_publish::request::WriteRequest;
use omnigraph_publish::{CommitRef, GraphCommit};
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::sync::Arc;
use tokio::sync::{Mutex, RwLock};

/// What a write gave.
pub(crate) enum Written<T> {
    /// It ran.
    Fresh(T),
    /// Its key had landed already: the commit that answered it.
    Replayed(Box<GraphCommit>),
}

/// The commit of a write that returns one.
pub(crate) fn the_commit(commit: &GraphCommit) -> Option<&GraphCommit> {
    Some(commit)
}

/// The keys of one branch, indexed up to a seq.
#[derive(Default)]
struct BranchKeys {
    /// Every commit up to this seq has been read for its key.
    through_seq: Option<u64>,
    /// The seq of the commit each key landed in.
    by_key: HashMap<String, u64>,
    /// Keys in the order they were indexed, for eviction past the bound.
    order: VecDeque<String>,
}

impl BranchKeys {
    fn remember(&mut self, key: &str, commit: &GraphCommit) {
        if self.by_key.insert(key.to_owned(), commit.seq).is_none() {
            self.order.push_back(key.to_owned());
        }
        while self.order.len() > IDEMPOTENCY_KEYS_KEPT_MAX {
            if let Some(oldest) = self.order.pop_front() {
                self.by_key.remove(&oldest);
            }
        }
    }

    /// Reads the commits after the indexed ones, up to the head, for their keys.
    async fn catch_up(&mut self, handle: &Omnigraph) -> Result<()> {
        let head = handle.head().await?;
        let window_start = head
            .seq
            .saturating_sub(IDEMPOTENCY_WINDOW_COMMITS_MAX as u64 - 1);
        let from = match self.through_seq {
            Some(through) if through >= head.seq => return Ok(()),
            Some(through) => (through + 1).max(window_start),
            None => window_start,
        };
        for seq in from..head.seq {
            let commit = match handle
                .graph()
                .commit(handle.branch(), &CommitRef::Seq(seq))
                .await
            {
                Ok(commit) => commit,
                // Reclaimed by cleanup: its key went with it.
                Err(error) if error.kind() == ErrorKind::CommitReclaimed => continue,
                Err(error) => return Err(error),
            };
            if let Some(key) = &commit.idempotency_key {
                self.remember(key, &commit);
            }
        }
        if let Some(key) = &head.idempotency_key {
            self.remember(key, &head);
        }
        self.through_seq = Some(head.seq);
        Ok(())
    }
}

/// A served graph's name and one of its branches.
type GraphBranch = (String, String);

/// The writes of one server.
pub(crate) struct Writes {
    stripes: Vec<Arc<Mutex<()>>>,
    hasher: std::collections::hash_map::RandomState,
    branches: parking_lot::Mutex<HashMap<GraphBranch, Arc<Mutex<BranchKeys>>>>,
    /// Held shared by every write in flight; shutdown takes it whole to wait for them.
    in_flight: Arc<RwLock<()>>,
}

impl Writes {
    pub(crate) fn new() -> Writes {
        Writes {
            stripes: (0..KEY_STRIPES_MAX)
                .map(|_| Arc::new(Mutex::new(())))
                .collect(),
            hasher: Default::default(),
            branches: parking_lot::Mutex::new(HashMap::new()),
            in_flight: Arc::new(RwLock::new(())),
        }
    }

    fn stripe(&self, key: &str) -> Arc<Mutex<()>> {
        let slot = self.hasher.hash_one(key) % self.stripes.len() as u64;
        self.stripes[slot as usize].clone()
    }

    fn keys_of(&self, graph: &str, branch: &str) -> Arc<Mutex<BranchKeys>> {
        let mut branches = self.branches.lock();
        let name = (graph.to_owned(), branch.to_owned());
        if !branches.contains_key(&name) && branches.len() >= IDEMPOTENCY_BRANCHES_KEPT_MAX {
            // Any branch's index may go: the next keyed write there reads its window
            // again.
            if let Some(evicted) = branches.keys().next().cloned() {
                branches.remove(&evicted);
            }
        }
        branches.entry(name).or_default().clone()
    }

    /// Forgets a deleted branch's keys: a new life of the name starts with none.
    pub(crate) fn forget(&self, graph: &str, branch: &str) {
        self.branches
            .lock()
            .remove(&(graph.to_owned(), branch.to_owned()));
    }

    /// Runs `write` on `handle` serving `request`, to its end, whatever becomes of the
    /// request that asked for it; with a key that landed already, returns its commit
    /// instead. `commit_of` says which commit a write's result published.
    pub(crate) async fn run<T: Send + 'static>(
        self: &Arc<Self>,
        graph: &str,
        handle: Arc<Omnigraph>,
        request: WriteRequest,
        slot: Admitted,
        commit_of: fn(&T) -> Option<&GraphCommit>,
        write: impl FnOnce(Arc<Omnigraph>) -> BoxFuture<'static, Result<T>> + Send + 'static,
    ) -> Result<Written<T>> {
        let writes = self.clone();
        let graph = graph.to_owned();
        let in_flight = self.in_flight.clone().read_owned().await;
        tokio::spawn(async move {
            // The token's slot and the shutdown's count are held until the write ends,
            // not until its client hangs up.
            let _in_flight = in_flight;
            let _slot = slot;
            let Some(key) = request.idempotency_key.clone() else {
                return request.serve(write(handle)).await.map(Written::Fresh);
            };
            let _stripe = writes.stripe(&key).lock_owned().await;
            let keys = writes.keys_of(&graph, handle.branch());
            {
                let mut keys = keys.lock().await;
                keys.catch_up(&handle).await?;
                if let Some(seq) = keys.by_key.get(&key) {
                    let commit = handle
                        .graph()
                        .commit(handle.branch(), &CommitRef::Seq(*seq))
                        .await?;
                    return Ok(Written::Replayed(Box::new(commit)));
                }
            }
            let written = request.serve(write(handle)).await?;
            if let Some(commit) = commit_of(&written) {
                keys.lock().await.remember(&key, commit);
            }
            Ok(Written::Fresh(written))
        })
        .await
        .map_err(|error| OmniError::internal(format!("the write's task failed: {error}")))?
    }

    /// Waits for every write in flight to end.
    pub(crate) async fn drained(&self) {
        let _all = self.in_flight.write().await;
    }
}
