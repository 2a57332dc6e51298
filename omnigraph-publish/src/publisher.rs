//! The exact-CAS publisher (DESIGN §5, steps 3 to 6).
//!
//! A publication is a put-if-absent of `commits/<n+1>` built on the captured head `n`.
//! When another commit took `n+1` first, the writer's read set decides: a strict writer
//! fails; a pin-based writer fails only if a table it planned from moved, and otherwise
//! publishes its pins on the new head. A transport error on the PUT is resolved by
//! reading the commit back; only an unreadable read-back is `PublishInDoubt`.

use crate::commit::{CommitOperation, GraphCommit, TablePin};
use crate::gate;
use crate::layout;
use crate::log::CommitLog;
use omnigraph_core::storage::{PutOutcome, StorageRoot};
use omnigraph_core::{Evidence, OmniError, ReadSetMember, Result, failpoints, seams};
use std::sync::Arc;

/// How many times a pin-based publication moves onto a newer head before giving up.
pub const MAX_PUBLISH_REBASES: u32 = 32;

/// What a writer read, and so what must not have changed when it publishes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadSet {
    /// The whole branch head (update, delete, schema apply).
    Strict,
    /// The pins the writer planned from: `(table_id, version)`. Other tables may move.
    Pins(Vec<(String, u64)>),
}

/// One publication request.
#[derive(Clone, Debug)]
pub struct Publication {
    /// The head the writer captured.
    pub base: GraphCommit,
    /// What must not have changed.
    pub read_set: ReadSet,
    /// New pins for the tables the writer changed (a new table id adds a table).
    pub pins: Vec<TablePin>,
    /// Tables the commit drops (by id).
    pub dropped_tables: Vec<String>,
    /// The schema hash the commit puts in force; `None` keeps the base's.
    pub schema: Option<String>,
    /// What the commit did.
    pub operation: CommitOperation,
    /// Who publishes.
    pub actor: String,
    /// Whether staged files exist: a failure is then `Unpublished`, not `BeforeEffect`.
    pub staged: bool,
}

/// Publishes `publication` on its base's branch in `root`.
pub async fn publish(root: &Arc<StorageRoot>, publication: &Publication) -> Result<GraphCommit> {
    let log = CommitLog::new(root.clone(), &publication.base.branch)?;
    let failure_evidence = if publication.staged {
        Evidence::Unpublished
    } else {
        Evidence::BeforeEffect
    };
    let _gate = gate::acquire(&root.canonical(), log.branch()).await;
    let mut base = publication.base.clone();
    let mut rebases = 0u32;
    loop {
        let candidate = next_commit(&base, publication);
        let path = layout::commit_path(log.branch(), candidate.seq);
        let bytes = candidate.to_bytes()?;
        failpoints::check(failpoints::PUBLISH_BEFORE_COMMIT_PUT)
            .map_err(|error| error.with_evidence(failure_evidence.clone()))?;
        let outcome = match root.put_if_absent(&path, bytes).await {
            Ok(outcome) => outcome,
            Err(put_error) => match read_back(&log, &candidate).await {
                ReadBack::Ours => PutOutcome::Created,
                ReadBack::Theirs => PutOutcome::AlreadyExists,
                ReadBack::Absent => return Err(put_error.with_evidence(failure_evidence)),
                ReadBack::Unreadable => {
                    return Err(OmniError::PublishInDoubt {
                        commit_id: candidate.commit_id,
                        evidence: Evidence::InDoubt,
                    });
                }
            },
        };
        match outcome {
            PutOutcome::Created => {
                // Published. A failure from here on must not be reported as a failure
                // of the publication: HEAD is only a best-effort copy.
                if failpoints::check(failpoints::PUBLISH_AFTER_COMMIT_PUT).is_ok() {
                    log.write_head_copy(&candidate).await;
                }
                return Ok(candidate);
            }
            PutOutcome::AlreadyExists => {
                let head = log
                    .head()
                    .await
                    .map_err(|e| e.with_evidence(failure_evidence.clone()))?;
                check_read_set(&base, &head, publication)
                    .map_err(|e| e.with_evidence(failure_evidence.clone()))?;
                rebases += 1;
                if rebases > MAX_PUBLISH_REBASES {
                    return Err(OmniError::ContentionExhausted {
                        attempts: rebases,
                        evidence: failure_evidence,
                    });
                }
                base = head;
            }
        }
    }
}

/// The commit `publication` makes on `base`.
fn next_commit(base: &GraphCommit, publication: &Publication) -> GraphCommit {
    let mut pins: Vec<TablePin> = base
        .pins
        .iter()
        .filter(|pin| !publication.dropped_tables.contains(&pin.table_id))
        .cloned()
        .collect();
    for update in &publication.pins {
        match pins.iter_mut().find(|pin| pin.table_id == update.table_id) {
            Some(pin) => *pin = update.clone(),
            None => pins.push(update.clone()),
        }
    }
    GraphCommit {
        seq: base.seq + 1,
        commit_id: seams::new_id(),
        parent_commit_id: Some(base.commit_id.clone()),
        branch: base.branch.clone(),
        created_at: seams::now_micros(),
        actor: publication.actor.clone(),
        operation: publication.operation.clone(),
        schema: publication
            .schema
            .clone()
            .unwrap_or_else(|| base.schema.clone()),
        pins,
    }
}

/// After losing `n+1` to another writer, may this publication move onto `head`?
fn check_read_set(base: &GraphCommit, head: &GraphCommit, publication: &Publication) -> Result<()> {
    let describe = |commit: &GraphCommit| format!("seq {} ({})", commit.seq, commit.commit_id);
    match &publication.read_set {
        ReadSet::Strict => Err(OmniError::ReadSetChanged {
            member: ReadSetMember::GraphHead {
                branch: base.branch.clone(),
            },
            expected: describe(base),
            actual: describe(head),
            evidence: Evidence::BeforeEffect,
        }),
        ReadSet::Pins(planned) => {
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
            for (table_id, version) in planned {
                let actual = head.pin(table_id).map(|pin| pin.version);
                if actual != Some(*version) {
                    return Err(OmniError::ReadSetChanged {
                        member: ReadSetMember::Pin {
                            table_id: table_id.clone(),
                        },
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
    Theirs,
    Absent,
    Unreadable,
}

/// After a transport error on the commit PUT: whose commit, if any, is at its path?
async fn read_back(log: &CommitLog, candidate: &GraphCommit) -> ReadBack {
    match log.read(candidate.seq).await {
        Ok(Some(found)) if found.commit_id == candidate.commit_id => ReadBack::Ours,
        Ok(Some(_)) => ReadBack::Theirs,
        Ok(None) => ReadBack::Absent,
        Err(_) => ReadBack::Unreadable,
    }
}
