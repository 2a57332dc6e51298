//! Writes, each run to its end in a task of its own, and idempotent when the client
//! gives an `Idempotency-Key`: a key that already landed returns the commit that
//! answered it, across restarts, because the key is recorded in that commit.
//!
//! A keyed write takes its key's lock (so two requests with one key never both
//! write), brings the branch's index of keys up to the head (reading only the commits
//! it has not indexed yet; after a start, the newest
//! [`IDEMPOTENCY_WINDOW_COMMITS_MAX`] at most, the named retention), and writes only
//! when the key is not there. The lock and the write live in the task, not in the
//! request: a client that hangs up and retries waits for its first attempt to end.

use crate::auth::Admitted;
use crate::group::{Groups, Waiting};
use crate::limits::{
    IDEMPOTENCY_BRANCHES_KEPT_MAX, IDEMPOTENCY_KEYS_KEPT_MAX, IDEMPOTENCY_WINDOW_COMMITS_MAX,
};
use futures::future::BoxFuture;
use omnigraph_core::{ErrorKind, Evidence, OmniError, Result};
use omnigraph_graph::Omnigraph;
use omnigraph_publish::request::WriteRequest;
use omnigraph_publish::{CommitRef, GraphCommit};
use serde_json::{Map, Value};
use sha2::Digest;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use tokio::sync::{Mutex, RwLock};

/// The key a request gives (at most one), with its fingerprint.
fn keyed(request: &WriteRequest) -> Option<Keyed> {
    assert!(
        request.idempotency_keys.len() <= 1,
        "a request gives at most one key"
    );
    let key = request.idempotency_keys.first()?;
    let fingerprint = request
        .idempotency_fingerprints
        .first()
        .expect("a served request's key comes with its fingerprint");
    Some(Keyed {
        key: key.clone(),
        fingerprint: fingerprint.clone(),
    })
}

/// What a write gave.
pub(crate) enum Written<T> {
    /// It ran.
    Fresh(T),
    /// Its key had landed already: the commit that answered it.
    Replayed(Box<GraphCommit>),
    /// Its key had landed already on the branch, for a request other than this one
    /// (another route or body): refused, before any effect.
    Reused { seq: u64 },
}

/// An idempotency key, with the fingerprint of the request that gave it.
#[derive(Clone, Debug)]
pub(crate) struct Keyed {
    pub(crate) key: String,
    pub(crate) fingerprint: String,
}

/// How this build fingerprints a request, recorded before each fingerprint: a
/// fingerprint recorded under another scheme (a later build's way, say) cannot be
/// compared, and its key replays as a key without one does.
pub(crate) const FINGERPRINT_SCHEME: &str = "og1-sha256:";

/// The fingerprint of a request: SHA-256 over its route's name and what makes it the
/// write it is, as the route read it, defaults filled in (an absent branch is `main`, an
/// absent `force` false): its settings and rows as canonical JSON (object keys sorted,
/// so keys in another order or other spacing are the same request; numbers as
/// written), a load's bytes as sent. Each part is length-prefixed, so no two splits of
/// the same bytes collide.
pub(crate) struct Fingerprint(sha2::Sha256);

impl Fingerprint {
    /// A fingerprint of a request to `route`, its parts still to add.
    pub(crate) fn of_route(route: &str) -> Fingerprint {
        let mut fingerprint = Fingerprint(sha2::Sha256::new());
        fingerprint.part(route.as_bytes());
        fingerprint
    }

    /// The fingerprint of a request to `route` whose settings are `settings` and whose
    /// rows (or other payload) are `payload`, each as canonical JSON.
    pub(crate) fn of_json<S, P>(route: &str, settings: &S, payload: &P) -> Fingerprint
    where
        S: serde::Serialize + ?Sized,
        P: serde::Serialize + ?Sized,
    {
        let mut fingerprint = Fingerprint::of_route(route);
        fingerprint.json(settings);
        fingerprint.json(payload);
        fingerprint
    }

    /// Adds one whole part.
    pub(crate) fn part(&mut self, bytes: &[u8]) {
        self.0.update((bytes.len() as u64).to_be_bytes());
        self.0.update(bytes);
    }

    /// Adds `value` as canonical JSON (object keys sorted: `serde_json`'s map is ordered
    /// by key in this build, which the test of this module checks).
    pub(crate) fn json<T: serde::Serialize + ?Sized>(&mut self, value: &T) {
        let bytes = serde_json::to_vec(value).expect("a request's parts encode as JSON");
        self.part(&bytes);
    }

    /// Adds a part streamed in pieces: its length comes after it.
    pub(crate) fn streamed(&mut self) -> StreamedPart<'_> {
        StreamedPart {
            fingerprint: self,
            length: 0,
        }
    }

    /// The fingerprint as a commit records it: [`FINGERPRINT_SCHEME`], then the hash in
    /// lowercase hex.
    pub(crate) fn finish(self) -> String {
        use std::fmt::Write;
        self.0
            .finalize()
            .iter()
            .fold(String::from(FINGERPRINT_SCHEME), |mut recorded, byte| {
                let _ = write!(recorded, "{byte:02x}");
                recorded
            })
    }
}

/// A part of a fingerprint added as it arrives (a load's body).
pub(crate) struct StreamedPart<'a> {
    fingerprint: &'a mut Fingerprint,
    length: u64,
}

impl StreamedPart<'_> {
    pub(crate) fn update(&mut self, bytes: &[u8]) {
        self.fingerprint.0.update(bytes);
        self.length += bytes.len() as u64;
    }
}

impl Drop for StreamedPart<'_> {
    fn drop(&mut self) {
        self.fingerprint.0.update(self.length.to_be_bytes());
    }
}

/// `request` with the fingerprint of the request its key came with; `fingerprint` is
/// computed only when it has a key.
pub(crate) fn fingerprinted(
    mut request: WriteRequest,
    fingerprint: impl FnOnce() -> Fingerprint,
) -> WriteRequest {
    if !request.idempotency_keys.is_empty() {
        request.idempotency_fingerprints = vec![fingerprint().finish()];
    }
    request
}

/// Where a key landed, and the fingerprint of the request it came with (none in a
/// commit written before fingerprints).
#[derive(Clone)]
struct Landed {
    seq: u64,
    fingerprint: Option<String>,
}

/// What a keyed write finds of its key.
pub(crate) enum Found {
    /// Not landed (or not within what the server remembers).
    Nothing,
    /// Landed for this very request (or for one whose fingerprint is not known).
    Replay(u64),
    /// Landed for another request.
    Reused(u64),
}

/// The commit of a write that returns one.
pub(crate) fn the_commit(commit: &GraphCommit) -> Option<&GraphCommit> {
    Some(commit)
}

/// The keys of one branch, indexed up to a seq.
#[derive(Default)]
pub(crate) struct BranchKeys {
    /// Every commit up to this seq has been read for its key.
    through_seq: Option<u64>,
    /// Where each key landed.
    by_key: HashMap<String, Landed>,
    /// Keys in the order they were indexed, for eviction past the bound.
    order: VecDeque<String>,
}

impl BranchKeys {
    fn remember(&mut self, key: &str, fingerprint: Option<&str>, commit: &GraphCommit) {
        let landed = Landed {
            seq: commit.seq,
            fingerprint: fingerprint.map(str::to_owned),
        };
        if self.by_key.insert(key.to_owned(), landed).is_none() {
            self.order.push_back(key.to_owned());
        }
        while self.order.len() > IDEMPOTENCY_KEYS_KEPT_MAX {
            if let Some(oldest) = self.order.pop_front() {
                self.by_key.remove(&oldest);
            }
        }
    }

    /// Where `key` landed, when indexed, and whether for the request `fingerprint`
    /// names.
    pub(crate) fn find(&self, keyed: &Keyed) -> Found {
        match self.by_key.get(&keyed.key) {
            None => Found::Nothing,
            Some(Landed {
                seq,
                fingerprint: Some(landed),
            }) if *landed != keyed.fingerprint => Found::Reused(*seq),
            Some(landed) => Found::Replay(landed.seq),
        }
    }

    /// Remembers the keys `commit` records, with their fingerprints when it has them.
    fn remember_all(&mut self, commit: &GraphCommit) {
        let fingerprints = &commit.idempotency_fingerprints;
        for (at, key) in commit.idempotency_keys.iter().enumerate() {
            // None, or one per key (checked when the commit was read); one of another
            // scheme is as good as none.
            let comparable = fingerprints
                .get(at)
                .map(String::as_str)
                .filter(|fingerprint| fingerprint.starts_with(FINGERPRINT_SCHEME));
            self.remember(key, comparable, commit);
        }
    }

    /// Reads the commits after the indexed ones, up to the head, for their keys.
    pub(crate) async fn catch_up(&mut self, handle: &Omnigraph) -> Result<()> {
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
            self.remember_all(&commit);
        }
        self.remember_all(&head);
        self.through_seq = Some(head.seq);
        Ok(())
    }
}

/// One write's hold on its idempotency key (see [`Writes::hold_key`]).
struct KeyHeld {
    writes: Arc<Writes>,
    key: HeldKey,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for KeyHeld {
    fn drop(&mut self) {
        // Released first: the map's entry is then the only other holder of the lock
        // unless a write waits for it (each waiter holds a clone, taken under the map's
        // lock, as this check is).
        drop(self.guard.take());
        let mut held = self.writes.keys_held.lock();
        if held
            .get(&self.key)
            .is_some_and(|lock| Arc::strong_count(lock) == 1)
        {
            held.remove(&self.key);
        }
    }
}

/// A served graph's name and one of its branches.
type GraphBranch = (String, String);

/// An idempotency key on a graph's branch.
type HeldKey = (String, String, String);

/// The writes of one server.
pub(crate) struct Writes {
    /// A lock per idempotency key (of its graph and branch: a key means something on
    /// its branch only) a write in flight holds or waits for.
    keys_held: parking_lot::Mutex<HashMap<HeldKey, Arc<Mutex<()>>>>,
    branches: parking_lot::Mutex<HashMap<GraphBranch, Arc<Mutex<BranchKeys>>>>,
    /// Held shared by every write in flight; shutdown takes it whole to wait for them.
    in_flight: Arc<RwLock<()>>,
    /// Inserts waiting for their group's next round (`crate::group`).
    pub(crate) groups: Groups,
}

impl Writes {
    pub(crate) fn new() -> Writes {
        Writes {
            keys_held: parking_lot::Mutex::new(HashMap::new()),
            branches: parking_lot::Mutex::new(HashMap::new()),
            in_flight: Arc::new(RwLock::new(())),
            groups: Groups::default(),
        }
    }

    /// Holds `key` for one write: a write with another key never waits here, one with
    /// the same key waits until this one ends. The key's lock goes when nobody holds or
    /// waits for it, so the locks are as many as the keyed writes in flight.
    async fn hold_key(self: &Arc<Self>, graph: &str, branch: &str, key: &str) -> KeyHeld {
        let held_key = (graph.to_owned(), branch.to_owned(), key.to_owned());
        let lock = self
            .keys_held
            .lock()
            .entry(held_key.clone())
            .or_default()
            .clone();
        // Built before the wait: a wait that ends early still lets the key's lock go.
        let mut held = KeyHeld {
            writes: self.clone(),
            key: held_key,
            guard: None,
        };
        held.guard = Some(lock.lock_owned().await);
        held
    }

    pub(crate) fn keys_of(&self, graph: &str, branch: &str) -> Arc<Mutex<BranchKeys>> {
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

    /// Runs `work` in a task of its own, holding the token's slot and the shutdown's
    /// count until it ends, not until its client hangs up.
    async fn to_its_end<T: Send + 'static>(
        &self,
        slot: Admitted,
        work: impl std::future::Future<Output = T> + Send + 'static,
    ) -> std::result::Result<T, tokio::task::JoinError> {
        let in_flight = self.in_flight.clone().read_owned().await;
        tokio::spawn(async move {
            let _in_flight = in_flight;
            let _slot = slot;
            work.await
        })
        .await
    }

    /// Notes that `keys` landed in `commit` on `handle`'s branch.
    pub(crate) async fn remember(
        &self,
        graph: &str,
        handle: &Omnigraph,
        keys: &[Keyed],
        commit: &GraphCommit,
    ) {
        if keys.is_empty() {
            return;
        }
        let branch = self.keys_of(graph, handle.branch());
        let mut branch = branch.lock().await;
        for keyed in keys {
            branch.remember(&keyed.key, Some(&keyed.fingerprint), commit);
        }
    }

    /// Inserts `rows` of `type_name` on `handle` serving `request` (its actor and at
    /// most one key), to its end, whatever becomes of the request that asked for it:
    /// in the next round of its group (`crate::group`), with the inserts of its actor
    /// on its branch that wait beside it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn insert(
        self: &Arc<Self>,
        graph: &str,
        handle: Arc<Omnigraph>,
        request: WriteRequest,
        slot: Admitted,
        type_name: String,
        rows: Vec<Map<String, Value>>,
    ) -> std::result::Result<Written<GraphCommit>, Arc<OmniError>> {
        let writes = self.clone();
        let graph = graph.to_owned();
        self.to_its_end(slot, async move {
            let key = keyed(&request);
            // Held until answered: a retry with the key waits for this one to end.
            let _held = match &key {
                Some(keyed) => Some(writes.hold_key(&graph, handle.branch(), &keyed.key).await),
                None => None,
            };
            let (answer, answered) = tokio::sync::oneshot::channel();
            let waiting = Waiting {
                handle,
                type_name,
                rows,
                key,
                answer,
            };
            writes.groups.join(&writes, &graph, request.actor, waiting);
            // A round that panicked may have published first: in doubt.
            answered.await.unwrap_or_else(|_| {
                Err(Arc::new(
                    OmniError::internal("an insert's round ended without answering it")
                        .with_evidence(Evidence::InDoubt),
                ))
            })
        })
        .await
        .unwrap_or_else(|error| {
            Err(Arc::new(
                OmniError::internal(format!("the insert's task failed: {error}"))
                    .with_evidence(Evidence::InDoubt),
            ))
        })
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
        self.to_its_end(slot, async move {
            let Some(key) = keyed(&request) else {
                return request.serve(write(handle)).await.map(Written::Fresh);
            };
            let _held = writes.hold_key(&graph, handle.branch(), &key.key).await;
            let keys = writes.keys_of(&graph, handle.branch());
            {
                let mut keys = keys.lock().await;
                keys.catch_up(&handle).await?;
                match keys.find(&key) {
                    Found::Nothing => {}
                    Found::Reused(seq) => return Ok(Written::Reused { seq }),
                    Found::Replay(seq) => {
                        let commit = handle
                            .graph()
                            .commit(handle.branch(), &CommitRef::Seq(seq))
                            .await?;
                        return Ok(Written::Replayed(Box::new(commit)));
                    }
                }
            }
            let written = request.serve(write(handle)).await?;
            if let Some(commit) = commit_of(&written) {
                keys.lock()
                    .await
                    .remember(&key.key, Some(&key.fingerprint), commit);
            }
            Ok(Written::Fresh(written))
        })
        .await
        .map_err(|error| {
            // It may have published before it failed: in doubt.
            OmniError::internal(format!("the write's task failed: {error}"))
                .with_evidence(Evidence::InDoubt)
        })?
    }

    /// Waits for every write in flight to end.
    pub(crate) async fn drained(&self) {
        let _all = self.in_flight.write().await;
    }
}

#[cfg(test)]
mod tests {
    use super::Fingerprint;

    fn of(route: &str, body: &str) -> String {
        let mut fingerprint = Fingerprint::of_route(route);
        let value: serde_json::Value = serde_json::from_str(body).unwrap();
        fingerprint.json(&value);
        fingerprint.finish()
    }

    #[test]
    fn a_fingerprint_is_of_the_json_not_of_its_spelling() {
        let a = of(
            "insert",
            r#"{"type": "P", "rows": [{"id": 1, "name": "x"}]}"#,
        );
        let b = of("insert", r#"{ "rows":[ {"name":"x","id":1} ],"type":"P" }"#);
        assert_eq!(a, b, "keys in another order, other spacing");
        let hex = a.strip_prefix(super::FINGERPRINT_SCHEME).unwrap();
        assert_eq!(hex.len(), 64);
        assert!(
            hex.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_ne!(
            a,
            of(
                "insert",
                r#"{"type": "P", "rows": [{"id": 2, "name": "x"}]}"#
            )
        );
        assert_ne!(
            a,
            of(
                "update",
                r#"{"type": "P", "rows": [{"id": 1, "name": "x"}]}"#
            )
        );
        // Rows in another order are another request.
        assert_ne!(
            of("insert", r#"{"rows": [{"id": 1}, {"id": 2}]}"#),
            of("insert", r#"{"rows": [{"id": 2}, {"id": 1}]}"#)
        );
    }

    #[test]
    fn parts_are_told_apart_where_they_split() {
        let split = |first: &[u8], second: &[u8]| {
            let mut fingerprint = Fingerprint::of_route("load");
            fingerprint.part(first);
            {
                let mut streamed = fingerprint.streamed();
                streamed.update(&second[..second.len() / 2]);
                streamed.update(&second[second.len() / 2..]);
            }
            fingerprint.finish()
        };
        assert_ne!(split(b"ab", b"cd"), split(b"a", b"bcd"));
        assert_eq!(split(b"ab", b"cd"), split(b"ab", b"cd"));
        // Streamed in other pieces, the same bytes are the same part.
        let mut whole = Fingerprint::of_route("load");
        whole.part(b"ab");
        whole.streamed().update(b"cd");
        assert_eq!(whole.finish(), split(b"ab", b"cd"));
    }
}
