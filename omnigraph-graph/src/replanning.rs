//! Writes that plan again when what they read moved: update and delete (pin-based on
//! the tables they read), merge and schema apply (strict on the whole head). Each
//! attempt plans on a head, stages and publishes; one that lost its slot to a change of
//! what it read plans again on the head the loss read, within the write's one bound on
//! commit PUTs ([`omnigraph_publish::limits::COMMIT_PUTS_MAX`], shared with the
//! publisher's moves onto newer heads), and a starved one reserves its tables for the
//! next attempt (`docs/format.md` §7.7).

use crate::commit::GraphCommit;
use crate::limits::{ATTEMPTS_BEFORE_RESERVING_MAX, REPLANS_MAX};
use crate::merge::MergeReport;
use crate::omnigraph::Omnigraph;
use crate::schema_apply::SchemaApplyReport;
use omnigraph_core::{Evidence, OmniError, ReadSetMember, Result};
use omnigraph_publish::CommitAttempts;

/// What one attempt of a replanned write returns: whether it published a commit.
pub(crate) trait Attempted {
    /// Whether the attempt published (its commit released any reservation it held).
    fn published(&self) -> bool;
}

impl Attempted for Option<GraphCommit> {
    fn published(&self) -> bool {
        self.is_some()
    }
}

impl Attempted for MergeReport {
    fn published(&self) -> bool {
        self.commit.is_some()
    }
}

impl Attempted for SchemaApplyReport {
    fn published(&self) -> bool {
        self.commit.is_some()
    }
}

/// What a replanned write does when another writer changed the schema since its first
/// attempt read the head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum OnSchemaChange {
    /// Plan again on the new schema (update, delete, merge: what they change is
    /// checked against it anew).
    PlanAgain,
    /// Stop with `read_set_changed` on the schema: a schema apply planned again would
    /// silently undo the other writer's schema (the caller decides). Unless the schema
    /// in force is the one `applying` (its hash): the apply then plans again and finds
    /// nothing to do.
    Stop {
        /// The hash of the schema the write applies.
        applying: String,
    },
}

/// Whether losing over `member` is contention that a reservation can end: a table the
/// write read moved, or (for a strict writer) the head did. A schema change is not: the
/// write plans again on the new schema.
fn reservable(member: &ReadSetMember) -> bool {
    member.is_table() || matches!(member, ReadSetMember::GraphHead { .. })
}

impl Omnigraph {
    /// Runs `write` (plan and publish) until what it read did not move under it, at
    /// most [`REPLANS_MAX`] plans and within the write's commit attempts (handed to
    /// every attempt, which publishes with them); a schema another writer applied meanwhile
    /// stops it when `on_schema_change` says so. Each lost attempt may leave unpublished
    /// staging, so once one has, a later failure says so even if its own attempt staged
    /// nothing. From the [`ATTEMPTS_BEFORE_RESERVING_MAX`]-th attempt lost to a move of what it
    /// read, it reserves `tables` for the next (`docs/format.md` §7.7): `write` is given
    /// the reservation it holds, and its commit releases it.
    ///
    /// `write` plans on the head it is given: the first attempt reads the log for it;
    /// a later one takes the head its lost attempt read (the handle's), without reading
    /// the log again. Planning on a head that moved since is safe: the publication's
    /// exact put on the next slot decides, as for any write.
    pub(crate) async fn replanning<T, R, F>(
        &self,
        on_schema_change: OnSchemaChange,
        tables: impl Fn() -> T,
        write: impl Fn(GraphCommit, Option<String>, CommitAttempts) -> F,
    ) -> Result<R>
    where
        T: std::future::Future<Output = Result<Vec<String>>>,
        R: Attempted,
        F: std::future::Future<Output = Result<R>>,
    {
        let mut left = Evidence::BeforeEffect;
        let mut holding: Option<String> = None;
        let mut first_schema: Option<String> = None;
        let attempts = CommitAttempts::new();
        for attempt in 1..=REPLANS_MAX {
            // On the heap, as the plan and its publication below: each holds much
            // across its awaits, and every caller's future would carry it on its stack.
            let base = if attempt == 1 {
                Box::pin(self.head()).await
            } else {
                Box::pin(self.base()).await
            };
            let base = match base {
                Ok(base) => base,
                Err(error) => {
                    let error = error.with_evidence(left);
                    Box::pin(self.release_after(holding, &error)).await;
                    return Err(error);
                }
            };
            let first = first_schema.get_or_insert_with(|| base.schema.clone());
            let stops = match &on_schema_change {
                OnSchemaChange::Stop { applying } => {
                    *first != base.schema && *applying != base.schema
                }
                OnSchemaChange::PlanAgain => false,
            };
            if stops {
                let moved = OmniError::ReadSetChanged {
                    member: ReadSetMember::Schema {
                        branch: base.branch.clone(),
                    },
                    expected: first.clone(),
                    actual: base.schema.clone(),
                    evidence: left,
                };
                Box::pin(self.release_after(holding, &moved)).await;
                return Err(moved);
            }
            let written = Box::pin(write(base, holding.clone(), attempts.clone())).await;
            match written {
                Err(lost @ OmniError::ReadSetChanged { .. }) => {
                    if lost.evidence() != &Evidence::BeforeEffect {
                        left = Evidence::Unpublished;
                    }
                    let tried = match attempt < REPLANS_MAX {
                        true => attempts.try_again(&left),
                        false => Err(attempts.exhausted(left.clone())),
                    };
                    if let Err(exhausted) = tried {
                        Box::pin(self.release_after(holding, &exhausted)).await;
                        return Err(exhausted);
                    }
                    if let OmniError::ReadSetChanged { member, .. } = &lost
                        && attempt >= ATTEMPTS_BEFORE_RESERVING_MAX
                        && reservable(member)
                        && let Ok(tables) = Box::pin(tables()).await
                    {
                        holding = Box::pin(self.keep_reserved(holding, tables)).await;
                    }
                }
                Err(error) => {
                    let error = error.with_evidence(left);
                    Box::pin(self.release_after(holding, &error)).await;
                    return Err(error);
                }
                Ok(outcome) => {
                    // Nothing to change: nothing is published, and nothing stays held.
                    if !outcome.published() {
                        Box::pin(self.release(holding)).await;
                    }
                    return Ok(outcome);
                }
            }
        }
        unreachable!("the last plan returns")
    }

    /// Every table of the head the handle knows: what a strict writer (merge, schema
    /// apply) reserves once it starved, since any commit that changes a table stops it.
    pub(crate) async fn every_table(&self) -> Result<Vec<String>> {
        let base = self.base().await?;
        Ok(base.pins.iter().map(|pin| pin.table_id.clone()).collect())
    }
}
