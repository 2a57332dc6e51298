//! Group commit: inserts into one branch by one actor that arrive while an earlier
//! round publishes wait, and the next round publishes them together, in one commit that
//! records each request's idempotency key.
//!
//! Inserts that race one commit each on one branch lose to each other: every loser
//! moves its staging onto the new head (its keys checked again, its appends committed
//! again) and tries once more, a store round trip or more per loss, so with a store
//! that answers in 17 ms eight writers took seconds each. Gathered, the requests that
//! waited share one round: one staging and one commit PUT.
//!
//! A round of one is the plain insert. A round of several refused for what a request
//! sent (a bad row, a key that exists, a type that does not) runs each request alone,
//! in arrival order, so one request's bad row refuses only that request (the others
//! then cost a commit each). Any other failure (the store, contention past its bound,
//! a failure that may have published), of the round or of a request run alone, is the
//! answer of every request not yet answered, with its evidence: each retries (with its
//! key, it finds the commit if it landed).

use crate::idempotency::{Found, Keyed, Writes, Written};
use crate::limits::{GROUP_GATHER_TIME, GROUP_INSERT_ROWS_MAX, GROUP_INSERTS_MAX};
use futures::FutureExt;
use omnigraph_core::{ErrorKind, Evidence, OmniError};
use omnigraph_graph::Omnigraph;
use omnigraph_publish::request::WriteRequest;
use omnigraph_publish::{CommitRef, GraphCommit};
use serde_json::{Map, Value};
use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use tokio::sync::oneshot;

/// What a gathered insert is answered with. The error is shared: one failure that may
/// have published answers every request of its round.
pub(crate) type Answer = std::result::Result<Written<GraphCommit>, Arc<OmniError>>;

/// The graph, the branch and the actor whose inserts one round gathers (a commit
/// records one actor).
type GroupName = (String, String, Option<String>);

/// One insert waiting for its round.
pub(crate) struct Waiting {
    pub(crate) handle: Arc<Omnigraph>,
    pub(crate) type_name: String,
    pub(crate) rows: Vec<Map<String, Value>>,
    /// Its idempotency key; the key's lock is held by its request's task, so no two
    /// waiting inserts share a key.
    pub(crate) key: Option<Keyed>,
    pub(crate) answer: oneshot::Sender<Answer>,
}

/// The request a round serves: its actor, and the keys of its inserts with their
/// fingerprints.
fn serving(actor: &Option<String>, keys: &[Keyed]) -> WriteRequest {
    WriteRequest {
        actor: actor.clone(),
        idempotency_keys: keys.iter().map(|keyed| keyed.key.clone()).collect(),
        idempotency_fingerprints: keys.iter().map(|keyed| keyed.fingerprint.clone()).collect(),
    }
}

/// Whether a round's failure may be one request's own doing: its rows, its keys, its
/// type. Nothing of the round is visible then, and each request runs alone.
fn refused_for_its_input(error: &OmniError) -> bool {
    matches!(
        error.kind(),
        ErrorKind::BadInput
            | ErrorKind::KeyConflict
            | ErrorKind::SchemaViolation
            | ErrorKind::NotFound
    ) && matches!(
        error.evidence(),
        Evidence::BeforeEffect | Evidence::Unpublished
    )
}

/// The inserts of one group waiting for their round, and whether a round publishes.
#[derive(Default)]
struct Queue {
    waiting: VecDeque<Waiting>,
    publishing: bool,
}

/// The groups of one server: a queue per group while it has inserts to publish.
#[derive(Default)]
pub(crate) struct Groups {
    queues: parking_lot::Mutex<HashMap<GroupName, Queue>>,
}

impl Groups {
    /// Queues `waiting` in its group; starts the group's publisher when none runs.
    pub(crate) fn join(
        &self,
        writes: &Arc<Writes>,
        graph: &str,
        actor: Option<String>,
        waiting: Waiting,
    ) {
        let name = (graph.to_owned(), waiting.handle.branch().to_owned(), actor);
        let start = {
            let mut queues = self.queues.lock();
            let queue = queues.entry(name.clone()).or_default();
            queue.waiting.push_back(waiting);
            !std::mem::replace(&mut queue.publishing, true)
        };
        if start {
            tokio::spawn(publish_rounds(writes.clone(), name));
        }
    }

    /// The next round of `name`: the oldest waiting insert and those after it while the
    /// round stays within [`GROUP_INSERTS_MAX`] inserts and [`GROUP_INSERT_ROWS_MAX`]
    /// rows. Empty when none waits: the publisher then ends, and the queue goes.
    fn next_round(&self, name: &GroupName) -> Vec<Waiting> {
        let mut queues = self.queues.lock();
        let Some(queue) = queues.get_mut(name) else {
            return Vec::new();
        };
        let mut round = Vec::new();
        let mut rows = 0;
        while let Some(next) = queue.waiting.front() {
            let fits = rows + next.rows.len() <= GROUP_INSERT_ROWS_MAX;
            if !round.is_empty() && (round.len() == GROUP_INSERTS_MAX || !fits) {
                break;
            }
            rows += next.rows.len();
            round.extend(queue.waiting.pop_front());
        }
        if round.is_empty() {
            queues.remove(name);
        }
        round
    }
}

/// Publishes `name`'s rounds until none waits. After a round that gathered several
/// inserts, the next waits [`GROUP_GATHER_TIME`] before it takes its inserts: the
/// clients just answered send their next insert within it, and join this round instead
/// of the one after (without it, clients that wait for their answers split into two
/// halves, each waiting for the other's round). A lone writer never waits.
async fn publish_rounds(writes: Arc<Writes>, name: GroupName) {
    let mut gathered = 0;
    loop {
        if gathered > 1 {
            tokio::time::sleep(GROUP_GATHER_TIME).await;
        }
        let round = writes.groups.next_round(&name);
        if round.is_empty() {
            return;
        }
        gathered = round.len();
        assert!(round.len() <= GROUP_INSERTS_MAX, "a round is bounded");
        // A round that panics drops its answers (its requests end `internal`); the
        // rounds after it still run, so no request waits for a publisher that is gone.
        let _ = AssertUnwindSafe(publish_round(&writes, &name, round))
            .catch_unwind()
            .await;
    }
}

/// Answers every insert of `round`: with the commit its key landed in, or after
/// publishing the rest together (or one by one, when together failed before any
/// effect).
async fn publish_round(writes: &Arc<Writes>, (graph, _, actor): &GroupName, round: Vec<Waiting>) {
    let handle = round[0].handle.clone();
    let fresh = replayed(writes, graph, &handle, round).await;
    // What the round left when it failed before any effect: each answer says so.
    let mut left = Evidence::BeforeEffect;
    if fresh.len() > 1 {
        let keys: Vec<Keyed> = fresh.iter().filter_map(|w| w.key.clone()).collect();
        let request = serving(actor, &keys);
        let parts = fresh
            .iter()
            .map(|w| (w.type_name.clone(), w.rows.clone()))
            .collect();
        match request.serve(handle.insert_json_parts(parts)).await {
            Ok(commit) => {
                // Answered first: a retry of a key waits for its answer, and finds the
                // commit in the log if it comes before the index has it.
                for waiting in fresh {
                    let _ = waiting.answer.send(Ok(Written::Fresh(commit.clone())));
                }
                writes.remember(graph, &handle, &keys, &commit).await;
                return;
            }
            // Nothing of it is visible: each runs alone, and answers for itself.
            Err(error) if refused_for_its_input(&error) => {
                left = error.evidence().clone();
            }
            Err(error) => {
                let error = Arc::new(error);
                for waiting in fresh {
                    let _ = waiting.answer.send(Err(error.clone()));
                }
                return;
            }
        }
    }
    let mut fresh = fresh.into_iter();
    while let Some(waiting) = fresh.next() {
        let keys: Vec<Keyed> = waiting.key.iter().cloned().collect();
        let request = serving(actor, &keys);
        let inserted = request
            .serve(handle.insert_json(&waiting.type_name, waiting.rows))
            .await;
        let error = match inserted {
            Ok(commit) => {
                let _ = waiting.answer.send(Ok(Written::Fresh(commit.clone())));
                writes.remember(graph, &handle, &keys, &commit).await;
                continue;
            }
            // The round's staging is still there, unpublished, until cleanup.
            Err(error) => Arc::new(match (&left, error.evidence()) {
                (Evidence::Unpublished, Evidence::BeforeEffect) => {
                    error.with_evidence(Evidence::Unpublished)
                }
                _ => error,
            }),
        };
        let _ = waiting.answer.send(Err(error.clone()));
        // Not this request's own doing (the store, contention): the rest would meet it
        // too, one after another; they are answered with it, untried.
        if !refused_for_its_input(&error) {
            for untried in fresh.by_ref() {
                let _ = untried.answer.send(Err(error.clone()));
            }
        }
    }
}

/// Answers the inserts of `round` whose key landed already (with that commit) or whose
/// key could not be looked up (with why); returns the rest.
async fn replayed(
    writes: &Arc<Writes>,
    graph: &str,
    handle: &Omnigraph,
    round: Vec<Waiting>,
) -> Vec<Waiting> {
    if round.iter().all(|waiting| waiting.key.is_none()) {
        return round;
    }
    let keys = writes.keys_of(graph, handle.branch());
    let mut keys = keys.lock().await;
    let caught_up = keys.catch_up(handle).await.map_err(Arc::new);
    let mut fresh = Vec::with_capacity(round.len());
    for waiting in round {
        let Some(key) = &waiting.key else {
            fresh.push(waiting);
            continue;
        };
        let landed = match &caught_up {
            Err(error) => Err(error.clone()),
            Ok(()) => Ok(keys.find(key)),
        };
        match landed {
            Ok(Found::Nothing) => fresh.push(waiting),
            Ok(Found::Reused(seq)) => {
                let _ = waiting.answer.send(Ok(Written::Reused { seq }));
            }
            Ok(Found::Replay(seq)) => {
                let commit = handle
                    .graph()
                    .commit(handle.branch(), &CommitRef::Seq(seq))
                    .await
                    .map(|commit| Written::Replayed(Box::new(commit)))
                    .map_err(Arc::new);
                let _ = waiting.answer.send(commit);
            }
            Err(error) => {
                let _ = waiting.answer.send(Err(error));
            }
        }
    }
    fresh
}
