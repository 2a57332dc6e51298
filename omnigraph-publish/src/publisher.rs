//! The exact-CAS publisher (`docs/format.md` §7.3).
//!
//! A publication is a put-if-absent of `commits/<n+1>` built on the captured head `n`.
//! Whose commit is at `n+1` afterwards is always decided by reading it back and
//! comparing commit ids, never assumed: an S3 client retries a conditional PUT whose
//! first attempt landed and then sees 412, and a PUT that timed out may still land.
//! When another writer's commit took `n+1`, the writer's read set decides: a strict
//! writer fails; a pin-based writer fails only if a table it staged on or read to
//! validate moved, and otherwise publishes its pins on the new head. Only a publication
//! that cannot be decided after re-issuing the identical PUT is `PublishInDoubt`.

use crate::attempts::CommitAttempts;
use crate::commit::{self, CommitOperation, GraphCommit, Retention};
use crate::gate;
use crate::layout;
use crate::limits::{CONTENDER_AGE_MICROS_MAX, READ_BACK_ATTEMPTS_MAX};
use crate::log::CommitLog;
use crate::publication::{Change, Publication, ReadSet};
use crate::reservation;
use omnigraph_core::storage::{PutOutcome, StorageRoot};
use omnigraph_core::{
    ErrorKind, Evidence, OmniError, ReadSetMember, Result, StorageKind, failpoints, seams,
};
use std::sync::Arc;

/// Whose commit is at the path a publication wrote.
pub(crate) enum Decided {
    /// Ours: the publication landed.
    Ours,
    /// Another writer's: the publication did not land. The winner, as read back.
    Theirs { winner: Box<GraphCommit> },
}

/// Publishes `publication` on its base's branch in `root`.
pub async fn publish(root: &Arc<StorageRoot>, publication: &Publication) -> Result<GraphCommit> {
    publish_seeing(root, publication, &CommitAttempts::new(), &mut None).await
}

/// [`publish`] as one publication of a write that counts its commit PUTs in
/// `attempts` (the write's one bound, [`crate::limits::COMMIT_PUTS_MAX`]), noting in
/// `seen` the newest head it read after losing a race: a writer whose read set then
/// changed follows that head without reading it again.
pub async fn publish_seeing(
    root: &Arc<StorageRoot>,
    publication: &Publication,
    attempts: &CommitAttempts,
    seen: &mut Option<GraphCommit>,
) -> Result<GraphCommit> {
    // On the heap: every writer awaits the publisher deep inside its own future, and a
    // publication that waits for reservations holds more state across its awaits.
    Box::pin(publish_on_log(root, publication, attempts, seen)).await
}

async fn publish_on_log(
    root: &Arc<StorageRoot>,
    publication: &Publication,
    attempts: &CommitAttempts,
    seen: &mut Option<GraphCommit>,
) -> Result<GraphCommit> {
    let parts = publication.parts();
    let log = CommitLog::new(root.clone(), &parts.base.branch)?;
    let failure_evidence = publication.failure_evidence();
    let began = seams::now_micros();
    // A winner created while this write ran, or just before it began, comes from a
    // writer still writing: the wait spreads the two. One created earlier beat only a
    // stale cached head (a handle idle since), and waiting would help nobody.
    let racing_since = match &parts.requires.staged_since {
        Some(staged_since) => staged_since.wall_micros().min(began),
        None => began,
    }
    .saturating_sub(CONTENDER_AGE_MICROS_MAX);
    failpoints::reach(failpoints::PUBLISH_BEFORE_GATE)
        .await
        .map_err(|error| error.with_evidence(failure_evidence.clone()))?;
    let mut held = Some(gate::acquire(&root.canonical(), log.branch()).await);
    let mut base = parts.base.clone();
    let mut waits = Waits::default();
    // Races this publication lost: the backoff's window grows with them.
    let mut lost = 0u32;
    loop {
        if base.deleted {
            return Err(branch_deleted(&base).with_evidence(failure_evidence));
        }
        if let Some(head) =
            Box::pin(waits.hold_off(root, &log, &base, publication, seen, &mut held))
                .await
                .map_err(|e| e.with_evidence(failure_evidence.clone()))?
        {
            base = head;
            continue;
        }
        let candidate = next_commit(&base, publication, &waits.waited_out);
        assert!(
            candidate.seq == base.seq + 1
                && candidate.parent_commit_id.as_deref() == Some(base.commit_id.as_str()),
            "a commit follows its base"
        );
        let path = layout::commit_path(log.branch(), candidate.seq);
        // Never write what a reader would refuse.
        candidate.validate().map_err(|message| {
            OmniError::internal(format!(
                "refusing to publish commit {}: {message}",
                candidate.seq
            ))
            .with_evidence(failure_evidence.clone())
        })?;
        let bytes = candidate.to_bytes()?;
        if bytes.len() > crate::limits::COMMIT_BYTES_MAX {
            return Err(OmniError::internal(format!(
                "refusing to publish commit {}: {} bytes, more than a reader accepts ({})",
                candidate.seq,
                bytes.len(),
                crate::limits::COMMIT_BYTES_MAX
            ))
            .with_evidence(failure_evidence));
        }
        // The base is the head this commit follows: its record is the grace period in
        // force, whatever cleanup recorded before it.
        if let Some(staged_since) = &parts.requires.staged_since {
            crate::retention::check_staging_age(&base, staged_since)
                .map_err(|error| error.with_evidence(failure_evidence.clone()))?;
        }
        if let Some(read) = &parts.requires.foreign_pins_read {
            crate::retention::check_foreign_pins_age(read)
                .map_err(|error| error.with_evidence(failure_evidence.clone()))?;
        }
        attempts.take_put(&failure_evidence)?;
        failpoints::reach(failpoints::PUBLISH_BEFORE_COMMIT_PUT)
            .await
            .map_err(|error| error.with_evidence(failure_evidence.clone()))?;
        match put_and_decide(root, &log, &path, &candidate, bytes)
            .await
            .map_err(|error| error.with_evidence(failure_evidence.clone()))?
        {
            Decided::Ours if landed_below_the_floor(&log, base.created_at, &candidate).await? => {
                // The put landed where cleanup had reclaimed the commit that followed
                // the base: no reader looks there (it is a leftover the next cleanup
                // deletes). The writer goes on from the head, as after a lost race.
                let head = log
                    .head()
                    .await
                    .and_then(|head| adopt(&base, head, publication, seen))
                    .map_err(|e| e.with_evidence(failure_evidence.clone()))?;
                base = head;
            }
            Decided::Ours => {
                // Published. A failure from here on must not be reported as a failure
                // of the publication: HEAD is only a best-effort copy.
                if failpoints::reach(failpoints::PUBLISH_AFTER_COMMIT_PUT)
                    .await
                    .is_ok()
                {
                    log.write_head_copy(&candidate).await;
                }
                return Ok(candidate);
            }
            Decided::Theirs { winner } => {
                if winner.created_at >= racing_since {
                    // Not holding the gate: writers of this process never race each
                    // other, and one that waits must not hold the others up.
                    drop(held.take());
                    crate::attempts::back_off(lost, &candidate.commit_id).await;
                    held = Some(gate::acquire(&root.canonical(), log.branch()).await);
                }
                lost += 1;
                let head = Box::pin(follow(&log, &base, *winner, publication, seen))
                    .await
                    .map_err(|e| e.with_evidence(failure_evidence.clone()))?;
                base = head;
            }
        }
    }
}

/// A publication's waits for other writers' reservations (`docs/format.md` §7.7).
#[derive(Default)]
struct Waits {
    /// Holders it waited a whole lease for (their clocks may run ahead of its own).
    waited_out: Vec<String>,
    /// The holder it waits for, and since when.
    waiting: Option<(String, i64)>,
    /// Its reads of the log while waiting, up to `RESERVATION_POLLS_MAX`.
    polls: u32,
}

impl Waits {
    /// Waits while another writer's reservation on `base` holds a table `publication`
    /// changes or reserves, without holding the gate (`held`). `None`: nothing holds it
    /// off. Otherwise the head to try from: the newest after the log moved (its read
    /// set checked there), or `base` again once the reservation is waited out.
    async fn hold_off(
        &mut self,
        root: &StorageRoot,
        log: &CommitLog,
        base: &GraphCommit,
        publication: &Publication,
        seen: &mut Option<GraphCommit>,
        held: &mut Option<gate::GateGuard>,
    ) -> Result<Option<GraphCommit>> {
        let Some(holding) = reservation::blocking(
            base,
            &publication.claimed_tables(),
            publication.parts().requires.holding.as_deref(),
            &self.waited_out,
            seams::now_micros(),
        )
        .cloned() else {
            return Ok(None);
        };
        let since = match &self.waiting {
            Some((holder, since)) if *holder == holding.holder => *since,
            _ => seams::now_micros(),
        };
        self.waiting = Some((holding.holder.clone(), since));
        // Not holding the gate while it waits, as after a lost race.
        *held = None;
        let next = reservation::await_next(log, base, &holding, since, &mut self.polls).await;
        *held = Some(gate::acquire(&root.canonical(), log.branch()).await);
        match next? {
            // The lease ended, or the writer read the log as often as it may: it goes
            // on, and its commit drops the reservation.
            None => {
                self.waited_out.push(holding.holder);
                Ok(Some(base.clone()))
            }
            Some(next) => follow(log, base, next, publication, seen).await.map(Some),
        }
    }
}

/// Moves a publication on `base` past `next`, the commit that now follows it: finds the
/// head from it (it was just read) and checks the read set there. A deletion that took
/// the slot, maybe followed by a new life of the branch, ends the publication: nothing
/// staged on the old life publishes on the new one.
async fn follow(
    log: &CommitLog,
    base: &GraphCommit,
    next: GraphCommit,
    publication: &Publication,
    seen: &mut Option<GraphCommit>,
) -> Result<GraphCommit> {
    let head = if next_may_be_a_leftover(log, base, &next).await? {
        log.head().await?
    } else {
        log.newest_after(base, next).await?
    };
    adopt(base, head, publication, seen)
}

/// Whether `next`, found in the slot after `base`, lies below the branch's floor: a
/// leftover another writer on a reclaimed base put there, created a moment ago but no
/// commit, whose successors' slots are free too. Only a base older than
/// [`FLOOR_CHECK_AGE_MICROS`] can have a reclaimed slot after it (one LIST of the
/// branch's history); the commit after a young base is never below the floor.
async fn next_may_be_a_leftover(
    log: &CommitLog,
    base: &GraphCommit,
    next: &GraphCommit,
) -> Result<bool> {
    if above_any_floor(base.created_at) {
        return Ok(false);
    }
    log.below_the_floor(next.seq).await
}

/// Takes `head`, read after `base` lost its slot, as the publication's new base: notes
/// it in `seen` and checks the read set there. A head of another life of the branch
/// ends the publication.
fn adopt(
    base: &GraphCommit,
    head: GraphCommit,
    publication: &Publication,
    seen: &mut Option<GraphCommit>,
) -> Result<GraphCommit> {
    if !head.continues_life_of(base) {
        return Err(branch_deleted(&head));
    }
    *seen = Some(head.clone());
    check_read_set(base, &head, publication)?;
    Ok(head)
}

/// How old a base must be before a put on it may have landed below the branch's floor:
/// cleanup reclaims a commit only once the commit that followed it is older than its
/// grace period (at least a minute), so a base younger than half that is never below
/// the floor while the clocks involved (the base's writer's, its successors' writers',
/// cleanup's and this one's) agree to within about 15 s of each other. A leftover
/// below the floor is young but no base ([`next_may_be_a_leftover`]).
const FLOOR_CHECK_AGE_MICROS: i64 = crate::limits::GRACE_MIN.as_micros() as i64 / 2;

/// Whether a commit created at `created_at` is young enough never to be below its
/// branch's floor ([`FLOOR_CHECK_AGE_MICROS`]).
pub(crate) fn above_any_floor(created_at: i64) -> bool {
    seams::now_micros().saturating_sub(created_at) <= FLOOR_CHECK_AGE_MICROS
}

/// Whether `candidate`, whose put on `log` landed on a base created at
/// `base_created_at`, is below the branch's floor: the base was a head long ago,
/// cleanup reclaimed the commit after it, and the put found the slot free
/// (`docs/format.md` §8.4). Checked only for a base older than
/// [`FLOOR_CHECK_AGE_MICROS`] (one LIST of the branch's history); a young base costs
/// nothing. A check that fails leaves the put in doubt: published, or a leftover below
/// the floor.
pub(crate) async fn landed_below_the_floor(
    log: &CommitLog,
    base_created_at: i64,
    candidate: &GraphCommit,
) -> Result<bool> {
    if above_any_floor(base_created_at) {
        return Ok(false);
    }
    log.below_the_floor(candidate.seq)
        .await
        .map_err(|_| OmniError::PublishInDoubt {
            commit_id: candidate.commit_id.clone(),
            evidence: Evidence::InDoubt,
        })
}

/// Puts `candidate` at `path` if absent and decides whose commit is there. A transport
/// error is resolved by reading back, then by re-issuing the identical PUT (the first
/// may still be in flight); what still cannot be decided is `PublishInDoubt`.
pub(crate) async fn put_and_decide(
    root: &StorageRoot,
    log: &CommitLog,
    path: &str,
    candidate: &GraphCommit,
    bytes: bytes::Bytes,
) -> Result<Decided> {
    let in_doubt = || OmniError::PublishInDoubt {
        commit_id: candidate.commit_id.clone(),
        evidence: Evidence::InDoubt,
    };
    let first = root.put_if_absent(path, bytes.clone()).await;
    let may_land_later = match &first {
        Ok(PutOutcome::Created) => return Ok(Decided::Ours),
        // The slot is taken, by this very commit (a retried conditional PUT whose first
        // attempt landed) or by another; a slot that reads back empty (a conflicting
        // PUT still in flight) is settled by re-issuing below.
        Ok(PutOutcome::AlreadyExists) => true,
        // A refusal (permissions, an unsupported request) cannot land later, but a
        // client's own retry of it may have landed first: read back before believing it.
        Err(error) => matches!(
            error.kind(),
            ErrorKind::Storage(StorageKind::Transient | StorageKind::Unknown)
        ),
    };
    match read_back(log, candidate).await? {
        ReadBack::Ours => return Ok(Decided::Ours),
        ReadBack::Theirs { winner } => return Ok(Decided::Theirs { winner }),
        ReadBack::Unreadable => return Err(in_doubt()),
        ReadBack::Absent => {}
    }
    if let Err(error) = first
        && !may_land_later
    {
        return Err(error);
    }
    match root.put_if_absent(path, bytes).await {
        Ok(PutOutcome::Created) => Ok(Decided::Ours),
        Ok(PutOutcome::AlreadyExists) | Err(_) => match read_back(log, candidate).await? {
            ReadBack::Ours => Ok(Decided::Ours),
            ReadBack::Theirs { winner } => Ok(Decided::Theirs { winner }),
            ReadBack::Absent | ReadBack::Unreadable => Err(in_doubt()),
        },
    }
}

/// The typed error of a write or read on a branch whose head deleted it.
pub(crate) fn branch_deleted(head: &GraphCommit) -> OmniError {
    if head.deleted {
        OmniError::not_found(format!(
            "branch {} (deleted by commit {})",
            head.branch, head.seq
        ))
    } else {
        OmniError::not_found(format!(
            "branch {} as the writer read it (deleted since, and created again up to commit {})",
            head.branch, head.seq
        ))
    }
}

/// The commit `publication` makes on `base`.
fn next_commit(
    base: &GraphCommit,
    publication: &Publication,
    waited_out: &[String],
) -> GraphCommit {
    let parts = publication.parts();
    assert!(!base.deleted, "nothing is published on a deleted branch");
    let created_at = seams::now_micros();
    let requires = parts.requires;
    let change = parts.change;
    let reserving = match change {
        Change::Reserve(reservation) => Some(reservation),
        _ => None,
    };
    let mut commit = GraphCommit {
        seq: base.seq + 1,
        commit_id: seams::new_id(),
        parent_commit_id: Some(base.commit_id.clone()),
        branch: base.branch.clone(),
        created_at,
        actor: parts.actor.to_string(),
        operation: CommitOperation {
            kind: parts.operation.kind.clone(),
            summary: commit::shortened_summary(&parts.operation.summary),
        },
        schema: base.schema.clone(),
        pins: base.pins.clone(),
        retention: publication.retention_on(base),
        fork: base.fork.clone(),
        deleted: false,
        merged_from: base.merged_from.clone(),
        reservations: reservation::carried(
            base,
            requires.holding.as_deref(),
            waited_out,
            reserving,
            created_at,
        ),
        idempotency_keys: parts.idempotency_keys.to_vec(),
        idempotency_fingerprints: parts.idempotency_fingerprints.to_vec(),
    };
    if let Some((pins, dropped, schema)) = change.of_tables() {
        commit.pins.retain(|pin| !dropped.contains(&pin.table_id));
        for update in pins {
            match commit
                .pins
                .iter_mut()
                .find(|pin| pin.table_id == update.table_id)
            {
                Some(pin) => *pin = update.clone(),
                None => commit.pins.push(update.clone()),
            }
        }
        if let Some(schema) = schema {
            commit.schema = schema.to_string();
        }
    }
    match change {
        Change::Merge { merged_from, .. } => commit.merged_from = merged_from.clone(),
        Change::DeleteBranch => {
            // The life ends: it pins nothing, and every earlier commit of it is
            // reclaimed at once (its tables are no longer this branch's to keep).
            commit.pins.clear();
            commit.merged_from.clear();
            commit.reservations.clear();
            commit.deleted = true;
            commit.retention = Some(Retention {
                grace_micros: base.retention.map_or(
                    crate::retention::micros_of(crate::retention::GRACE_DEFAULT),
                    |retention| retention.grace_micros,
                ),
                oldest_retained: commit.seq,
            });
        }
        _ => {}
    }
    commit
}

/// After losing `n+1` to another writer, may this publication move onto `head`?
fn check_read_set(base: &GraphCommit, head: &GraphCommit, publication: &Publication) -> Result<()> {
    let parts = publication.parts();
    let describe = |commit: &GraphCommit| format!("seq {} ({})", commit.seq, commit.commit_id);
    match &parts.requires.read_set {
        ReadSet::Nothing => Ok(()),
        // A head that changed no table and no schema (cleanup's record) changed nothing
        // a strict writer read.
        ReadSet::Strict if crate::retention::changes_nothing(head, base) => Ok(()),
        ReadSet::Strict => Err(OmniError::ReadSetChanged {
            member: ReadSetMember::GraphHead {
                branch: base.branch.clone(),
            },
            expected: describe(base),
            actual: describe(head),
            evidence: Evidence::BeforeEffect,
        }),
        ReadSet::Pins { staged, checked } => {
            if head.schema != base.schema {
                return Err(OmniError::ReadSetChanged {
                    member: ReadSetMember::Schema {
                        branch: base.branch.clone(),
                    },
                    expected: base.schema.clone(),
                    actual: head.schema.clone(),
                    evidence: Evidence::BeforeEffect,
                });
            }
            let members = staged
                .iter()
                .map(|(table_id, version)| {
                    let member = ReadSetMember::Pin {
                        table_id: table_id.clone(),
                    };
                    (member, table_id, version)
                })
                .chain(checked.iter().map(|(table_id, version)| {
                    let member = ReadSetMember::ReadPin {
                        table_id: table_id.clone(),
                    };
                    (member, table_id, version)
                }));
            for (member, table_id, version) in members {
                let actual = head.pin(table_id).map(|pin| pin.version);
                if actual != Some(*version) {
                    return Err(OmniError::ReadSetChanged {
                        member,
                        expected: version.to_string(),
                        actual: actual.map_or_else(|| "dropped".to_string(), |v| v.to_string()),
                        evidence: Evidence::BeforeEffect,
                    });
                }
            }
            Ok(())
        }
    }
}

enum ReadBack {
    Ours,
    Theirs { winner: Box<GraphCommit> },
    Absent,
    Unreadable,
}

/// Whose commit, if any, is at the candidate's path? A commit there that does not
/// validate is certainly not ours: corrupt state, not doubt.
async fn read_back(log: &CommitLog, candidate: &GraphCommit) -> Result<ReadBack> {
    for _ in 0..READ_BACK_ATTEMPTS_MAX {
        match log.read(candidate.seq).await {
            Ok(Some(found)) if found.commit_id == candidate.commit_id => return Ok(ReadBack::Ours),
            Ok(Some(theirs)) => {
                return Ok(ReadBack::Theirs {
                    winner: Box::new(theirs),
                });
            }
            Ok(None) => return Ok(ReadBack::Absent),
            Err(error @ OmniError::Corrupt { .. }) => return Err(error),
            Err(_) => continue,
        }
    }
    Ok(ReadBack::Unreadable)
}
