//! A write's table reservation (`docs/format.md` §7.7): a write that keeps losing its
//! slot reserves the tables it read before it stages again, holds them until its
//! commit lands (which releases them), and releases them itself when it gives up.
//!
//! The reservation belongs to the write, never to the handle: other tasks on the same
//! handle neither skip it nor release it. Reserving and releasing are best effort: each
//! is a commit that changes no table, so a failure of either costs the write nothing but
//! fairness, and neither changes the evidence of the write's own outcome.

use crate::commit::{CommitOperation, GraphCommit};
use crate::omnigraph::Omnigraph;
use crate::publication::{Change, Publication};
use crate::reservation::Reservation;
use omnigraph_core::{ErrorKind, OmniError, seams};
use omnigraph_publish::CommitAttempts;
use omnigraph_publish::limits::RESERVED_TABLES_MAX;

/// The operation kind of a commit that reserves tables.
pub const RESERVE_OPERATION: &str = "reserve";
/// The operation kind of a commit that releases a reservation its write gave up.
pub const RELEASE_OPERATION: &str = "release";

impl Omnigraph {
    /// The reservation a write holds for its next try: `held`, while the head this
    /// handle knows still carries it; else a new one of `tables` (`None` when none
    /// could be taken). A waiter that waited `held` out dropped it from the log, so the
    /// write reserves again rather than believe it holds what no one respects.
    pub(crate) async fn keep_reserved(
        &self,
        held: Option<String>,
        tables: Vec<String>,
    ) -> Option<String> {
        let head = self.base().await.ok()?;
        if let Some(holder) = held
            && head.reservations.iter().any(|reservation| {
                reservation.holder == holder && reservation.holds_at(seams::now_micros())
            })
        {
            return Some(holder);
        }
        self.reserve(head, tables).await
    }

    /// Publishes, on `base`, a commit that reserves `tables`; returns its holder id
    /// when the reservation is in the commit that landed. One that another writer's
    /// reservation holds off waits for it, as a write does; one the log has no room
    /// for is not taken.
    async fn reserve(&self, base: GraphCommit, mut tables: Vec<String>) -> Option<String> {
        tables.sort();
        tables.dedup();
        if tables.is_empty() || tables.len() > RESERVED_TABLES_MAX {
            return None;
        }
        let summary = tables
            .iter()
            .filter_map(|id| base.pin(id).map(|pin| pin.type_name.as_str()))
            .collect::<Vec<_>>()
            .join(", ");
        let reservation = Reservation::new(tables);
        let holder = reservation.holder.clone();
        let publication = Publication::record(
            base,
            Change::Reserve(reservation),
            None,
            CommitOperation {
                kind: RESERVE_OPERATION.into(),
                summary,
            },
            self.actor(),
        );
        let commit = self.publish_record(&publication).await?;
        commit
            .reservations
            .iter()
            .any(|reservation| reservation.holder == holder)
            .then_some(holder)
    }

    /// Publishes a commit that changes no table and notes the newest head it saw; a
    /// failure is left to the lease.
    async fn publish_record(&self, publication: &Publication) -> Option<GraphCommit> {
        let mut seen = None;
        // A record of its own: a release still lands after the write used up its
        // attempts.
        let published = Box::pin(crate::publisher::publish_seeing(
            self.graph().root(),
            publication,
            &CommitAttempts::new(),
            &mut seen,
        ))
        .await;
        if let Some(head) = published.as_ref().ok().or(seen.as_ref()) {
            self.note_head(head);
        }
        published.ok()
    }

    /// A write that held `held` gave up with `error`: it releases the reservation, so
    /// no one waits out the lease for nothing. Not after a publication in doubt: if
    /// that one landed it released the reservation, and a release on top would bury
    /// the commit the caller is told to look for.
    pub(crate) async fn release_after(&self, held: Option<String>, error: &OmniError) {
        if error.kind() != ErrorKind::PublishInDoubt {
            self.release(held).await;
        }
    }

    /// Releases `held`, the reservation of a write that publishes nothing, while the
    /// head this handle knows still carries it.
    pub(crate) async fn release(&self, held: Option<String>) {
        let Some(holder) = held else {
            return;
        };
        let Ok(base) = self.base().await else {
            return;
        };
        if !base.reservations.iter().any(|r| r.holder == holder) {
            return;
        }
        let publication = Publication::record(
            base,
            Change::Nothing,
            Some(holder),
            CommitOperation {
                kind: RELEASE_OPERATION.into(),
                summary: String::new(),
            },
            self.actor(),
        );
        self.publish_record(&publication).await;
    }
}
