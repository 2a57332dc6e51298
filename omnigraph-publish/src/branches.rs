//! Branches (`docs/format.md` §5.1). A branch is a commit log under
//! `_graph/branches/<name>/`. Creating one publishes the first commit of its log: the
//! pins of the commit it is created from, and that commit as its fork point. No table
//! data is copied: pins are versions that any number of commits may share. Deleting one
//! publishes a last commit that pins nothing; cleanup then reclaims what only the
//! branch kept. A deleted name may be created again: the new life's first commit
//! follows the deletion in the same log.

use crate::commit::{CommitOperation, ForkPoint, GraphCommit, Retention};
use crate::graph::{CommitRef, Graph};
use crate::layout;
use crate::limits::{BRANCHES_MAX, HEAD_READS_IN_FLIGHT_MAX};
use crate::publication::{Change, Publication};
use crate::publisher::{self, Decided};
use crate::retention;
use futures::{StreamExt, TryStreamExt};
use omnigraph_core::storage::StorageRoot;
use omnigraph_core::{Evidence, InputLocation, OmniError, Result, failpoints, seams};
use std::sync::Arc;

/// The operation kind of a branch's first commit.
pub const CREATE_OPERATION: &str = "create_branch";
/// The operation kind of the commit that deletes a branch.
pub const DELETE_OPERATION: &str = "delete_branch";

/// One live branch, as [`list_branches`] reports it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BranchInfo {
    /// The branch.
    pub name: String,
    /// Its head's seq.
    pub head_seq: u64,
    /// Its head's id.
    pub head_commit_id: String,
    /// When its head was published (microseconds since the epoch).
    pub head_created_at: i64,
    /// Where its life began; `None` for a branch that began at genesis (`main`).
    pub fork: Option<ForkPoint>,
    /// When its life began (microseconds since the epoch): its first commit's time.
    pub created_at: i64,
}

/// The names of the branch folders under `_graph/branches/`, each checked: a name
/// becomes part of a path. One LIST with a delimiter.
pub async fn branch_names(root: &StorageRoot) -> Result<Vec<String>> {
    let names = root.list_folders(layout::BRANCHES_DIR).await?;
    if names.len() > BRANCHES_MAX {
        return Err(OmniError::corrupt(
            layout::BRANCHES_DIR,
            format!("{} branches; the limit is {BRANCHES_MAX}", names.len()),
        ));
    }
    for name in &names {
        layout::check_branch(name).map_err(|_| {
            OmniError::corrupt(
                format!("{}/{name}", layout::BRANCHES_DIR),
                "a folder that is not a valid branch name",
            )
        })?;
    }
    assert!(names.len() <= BRANCHES_MAX);
    Ok(names)
}

/// Creates branch `name` from the commit `at` names on `from`, as `actor`. Refused
/// with `BranchExists` when `name` is live, before any effect. The new branch's first
/// commit is published with put-if-absent, so of two creators of one name exactly one
/// wins. If cleanup reclaimed the source commit meanwhile (it was not yet a root of the
/// new branch when cleanup traced), the new branch is deleted again and the call fails
/// with `CommitReclaimed`.
pub async fn create_branch(
    graph: &Graph,
    name: &str,
    from: &str,
    at: &CommitRef,
    actor: &str,
) -> Result<GraphCommit> {
    layout::check_branch(name)?;
    if name == from {
        return Err(OmniError::bad_input(
            InputLocation::in_source("branch").field(name),
            format!("branch {name} cannot be created from itself"),
        ));
    }
    // Taken before the source is read: a head is protected from then on.
    let read = seams::Since::now();
    let source = graph.commit(from, at).await?;
    let log = graph.log(name)?;
    // Where the new life goes: after the newest commit `HEAD` leads to, or, once a put
    // landed below the floor (a leftover taken for the newest), the newest a listing
    // finds, which ignores what lies below the floor.
    let mut previous = log.newest().await?;
    let mut left = Evidence::BeforeEffect;
    let mut listed = false;
    let first = loop {
        if let Some(previous) = &previous
            && !previous.deleted
        {
            return Err(OmniError::BranchExists {
                branch: name.to_string(),
                evidence: left,
            });
        }
        let seq = previous.as_ref().map_or(0, |deleted| deleted.seq + 1);
        let created_at = seams::now_micros();
        let first = GraphCommit {
            seq,
            commit_id: seams::new_id(),
            parent_commit_id: previous.as_ref().map(|deleted| deleted.commit_id.clone()),
            branch: name.to_string(),
            created_at,
            actor: actor.to_string(),
            operation: CommitOperation {
                kind: CREATE_OPERATION.to_string(),
                summary: format!("from {from} at commit {}", source.seq),
            },
            schema: source.schema.clone(),
            pins: source.pins.clone(),
            // Writers on the branch learn the grace period from its head; a new life
            // retains nothing of the one before.
            retention: match (source.retention, seq) {
                (None, 0) => None,
                (recorded, _) => Some(Retention {
                    grace_micros: recorded
                        .map_or(retention::micros_of(retention::GRACE_DEFAULT), |recorded| {
                            recorded.grace_micros
                        }),
                    oldest_retained: seq,
                }),
            },
            fork: Some(ForkPoint {
                branch: from.to_string(),
                seq: source.seq,
                commit_id: source.commit_id.clone(),
                created_at,
            }),
            deleted: false,
            merged_from: Vec::new(),
            // A new life holds no table of the branch it came from.
            reservations: Vec::new(),
            idempotency_keys: Vec::new(),
            idempotency_fingerprints: Vec::new(),
        };
        first.validate().map_err(|message| {
            OmniError::internal(format!("refusing to create branch {name}: {message}"))
        })?;
        let path = layout::commit_path(name, seq);
        let bytes = first.to_bytes()?;
        // The publisher's windows: creation has written nothing before its commit PUT.
        failpoints::reach(failpoints::PUBLISH_BEFORE_COMMIT_PUT)
            .await
            .map_err(|error| error.with_evidence(left.clone()))?;
        match publisher::put_and_decide(graph.root(), &log, &path, &first, bytes).await? {
            Decided::Ours => {}
            Decided::Theirs { .. } => {
                return Err(OmniError::BranchExists {
                    branch: name.to_string(),
                    evidence: left,
                });
            }
        }
        let landed_below_the_floor = match &previous {
            Some(previous) => {
                publisher::landed_below_the_floor(&log, previous.created_at, &first).await?
            }
            None => false,
        };
        if !landed_below_the_floor {
            break first;
        }
        // The put found the slot free where no reader looks: no commit (a leftover for
        // cleanup), and nothing published.
        left = Evidence::Unpublished;
        if listed {
            return Err(OmniError::corrupt(
                layout::commit_path(name, first.seq),
                "the newest commit a listing found is below the floor",
            ));
        }
        previous = log.newest_by_listing().await?;
        listed = true;
    };
    if *at != CommitRef::Head || retention::check_foreign_pins_age(&read).is_err() {
        // Cleanup lists branches again before it deletes anything, so a branch it
        // missed was created after its record: the source's head then says whether the
        // fork's tables may be gone. (A source read as its branch's head, and published
        // within `FOREIGN_PINS_AGE_MAX` of that read, needs no check: cleanup keeps the
        // pins of every commit that was a head within its grace, deleted branches'
        // too.) What cannot be checked counts as refused: the new branch goes again.
        let checked = match graph.log(from)?.newest().await {
            Ok(Some(head)) if !head.continues_life_of(&source) => {
                Err(source_gone(from, name, &source, &head))
            }
            Ok(Some(head)) => retention::refuse_reclaimed(&head, source.seq),
            Ok(None) => Err(OmniError::not_found(format!("branch {from}"))),
            Err(unread) => Err(unread),
        };
        if let Err(refused) = checked {
            return Err(match delete_on(graph.root(), &first, actor).await {
                Ok(_) => refused.with_evidence(Evidence::Unpublished),
                // The branch is live, and what it pins may be going: say so.
                Err(undeleted) => OmniError::internal(format!(
                    "branch {name} was created from commit {} of {from}, which could not be \
                     checked ({refused}), and could not be deleted again ({undeleted}): delete it",
                    source.seq
                ))
                .with_evidence(Evidence::PartlyPublished {
                    published_units: vec![format!("branch:{name}")],
                }),
            });
        }
    }
    // `HEAD` is only a best-effort copy: skipping it fails nothing.
    if failpoints::reach(failpoints::PUBLISH_AFTER_COMMIT_PUT)
        .await
        .is_ok()
    {
        log.write_head_copy(&first).await;
    }
    Ok(first)
}

/// The typed error of a branch created from commit `source` of `from`, whose life
/// ended meanwhile (`head` deleted it, maybe created it again): its older commits are
/// reclaimed to readers at once.
fn source_gone(from: &str, name: &str, source: &GraphCommit, head: &GraphCommit) -> OmniError {
    OmniError::not_found(format!(
        "commit {} of branch {from}, which was deleted (commit {}) while branch {name} was \
         created from it",
        source.seq, head.seq
    ))
}

/// Deletes branch `name` as `actor`: publishes its last commit on whatever its head is.
/// `main` is never deleted. Writers on it fail from then on with `NotFound`; cleanup
/// reclaims the files only it kept.
pub async fn delete_branch(graph: &Graph, name: &str, actor: &str) -> Result<GraphCommit> {
    layout::check_branch(name)?;
    if name == layout::MAIN_BRANCH {
        return Err(OmniError::bad_input(
            InputLocation::in_source("branch").field(name),
            "the main branch is never deleted",
        ));
    }
    let head = graph.commit(name, &CommitRef::Head).await?;
    delete_on(graph.root(), &head, actor).await
}

async fn delete_on(
    root: &Arc<StorageRoot>,
    head: &GraphCommit,
    actor: &str,
) -> Result<GraphCommit> {
    // A delete follows any head: whatever was published, the branch goes.
    let publication = Publication::record(
        head.clone(),
        Change::DeleteBranch,
        None,
        CommitOperation {
            kind: DELETE_OPERATION.to_string(),
            summary: format!("deleted at commit {}", head.seq),
        },
        actor,
    );
    publisher::publish(root, &publication).await
}

/// The live branches, by name: each one's head, fork point and age. One LIST, then
/// each branch's head (and `main`'s genesis, for its age).
pub async fn list_branches(graph: &Graph) -> Result<Vec<BranchInfo>> {
    let names = branch_names(graph.root()).await?;
    let listed: Vec<Option<BranchInfo>> = futures::stream::iter(names)
        .map(|name| async move {
            let log = graph.log(&name)?;
            let Some(head) = log.newest().await? else {
                // A folder with no commit yet: a creation in flight, or one that
                // never landed.
                return Ok(None);
            };
            if head.deleted {
                return Ok(None);
            }
            let created_at = match &head.fork {
                Some(fork) => fork.created_at,
                // A life from genesis: its first commit is seq 0, kept in every log.
                None => log.require(0).await?.created_at,
            };
            Ok::<_, OmniError>(Some(BranchInfo {
                name,
                head_seq: head.seq,
                head_commit_id: head.commit_id.clone(),
                head_created_at: head.created_at,
                fork: head.fork.clone(),
                created_at,
            }))
        })
        .buffered(HEAD_READS_IN_FLIGHT_MAX)
        .try_collect()
        .await?;
    Ok(listed.into_iter().flatten().collect())
}
