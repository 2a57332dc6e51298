//! What one commit asserts about the head it lands on ([`Requirements`]) and what it
//! changes there ([`Change`]), put together in one [`Publication`] and checked in one
//! place, [`Publication::new`]: a combination the publisher could not honour (a table
//! change that read nothing, a merge record on a pin-based write, foreign pins on a
//! write that is not a merge) is refused before anything is written. The publisher
//! (`crate::publisher`) checks the requirements before each PUT and the read set again
//! after each lost race; [`crate::publisher`] turns the change into the next commit.

use crate::commit::{CommitOperation, GraphCommit, MergedFrom, Retention, TablePin};
use crate::reservation::Reservation;
use omnigraph_core::seams;

/// What a writer read, and so what must not have changed when it publishes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadSet {
    /// The whole branch head (merge, schema apply).
    Strict,
    /// Pins, as `(table_id, version)`; tables in neither list may move.
    Pins {
        /// The pins of the tables the writer staged on.
        staged: Vec<(String, u64)>,
        /// The pins of the tables the writer only read to validate its write (the
        /// node tables behind endpoint checks): a conflict there is re-checked.
        checked: Vec<(String, u64)>,
    },
    /// Nothing: the publication changes no table (cleanup's retention record), so it
    /// follows any head.
    Nothing,
}

impl ReadSet {
    /// The read set of a writer that read only the tables it staged on.
    pub fn staged(pins: Vec<(String, u64)>) -> ReadSet {
        ReadSet::Pins {
            staged: pins,
            checked: Vec::new(),
        }
    }
}

/// What a commit asserts about the head it lands on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirements {
    /// What must not have changed since the base.
    pub read_set: ReadSet,
    /// When the writer began staging the files the commit pins (`None`: it staged
    /// nothing). A failure is then `Unpublished`, not `BeforeEffect`, and staging
    /// older than half the grace period its head records never publishes.
    pub staged_since: Option<seams::Since>,
    /// When the writer last saw, at a branch's head, the pins it publishes without
    /// staging them (a merge's source): cleanup keeps the pins of a commit that was a
    /// head within its grace period, so such pins are published within
    /// [`crate::limits::FOREIGN_PINS_AGE_MAX`] of that.
    pub foreign_pins_read: Option<seams::Since>,
    /// The reservation this writer holds (its holder id): it does not wait for it, and
    /// the commit releases it.
    pub holding: Option<String>,
}

impl Requirements {
    /// A writer that read `read_set`, staged nothing, and holds no reservation.
    pub fn reading(read_set: ReadSet) -> Requirements {
        Requirements {
            read_set,
            staged_since: None,
            foreign_pins_read: None,
            holding: None,
        }
    }

    /// The same, holding the reservation `holder` (when it holds one).
    pub fn holding(mut self, holder: Option<String>) -> Requirements {
        self.holding = holder;
        self
    }
}

/// What a commit changes on its base.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Tables: their new pins (a new table id adds a table), the tables dropped, and
    /// the schema put in force (`None` keeps the base's).
    Tables {
        /// New pins.
        pins: Vec<TablePin>,
        /// Table ids the commit drops.
        dropped: Vec<String>,
        /// The schema hash put in force.
        schema: Option<String>,
    },
    /// A merge: tables as [`Change::Tables`] changes them, and the record of the
    /// branches merged into this one (the base's, with the merged commit in its
    /// branch's place). It lands on the very base it was computed from.
    Merge {
        /// New pins.
        pins: Vec<TablePin>,
        /// Table ids the commit drops.
        dropped: Vec<String>,
        /// The schema hash put in force.
        schema: Option<String>,
        /// The branches merged into this one.
        merged_from: Vec<MergedFrom>,
    },
    /// Cleanup's record for the branch. It never shortens the grace period the base
    /// records, unless `lowers_grace` (an operator's explicit `cleanup --lower-grace`).
    Retention {
        /// The record.
        record: Retention,
        /// Whether it may shorten the recorded grace period.
        lowers_grace: bool,
    },
    /// A reservation of tables (a writer that keeps losing its slot); no table changes.
    /// It waits for others' reservations of those tables, as a change to them does,
    /// and is dropped when room is short.
    Reserve(Reservation),
    /// A record in the log that changes nothing else (the release of the reservation
    /// the requirements hold).
    Nothing,
    /// The branch's deletion: the commit pins nothing and retains only itself.
    DeleteBranch,
}

impl Change {
    /// New pins for `pins`' tables, nothing dropped, the schema kept.
    pub fn tables(pins: Vec<TablePin>) -> Change {
        Change::Tables {
            pins,
            dropped: Vec::new(),
            schema: None,
        }
    }

    /// The retention record a commit of this change on `base` carries: the one it
    /// records, after the base's ([`Retention::after`], or
    /// [`Retention::lowering_grace_after`] when it lowers the grace), or else the
    /// base's, carried forward.
    pub fn retention_on(&self, base: &GraphCommit) -> Option<Retention> {
        match *self {
            Change::Retention {
                record,
                lowers_grace: true,
            } => Some(record.lowering_grace_after(base.retention)),
            Change::Retention {
                record,
                lowers_grace: false,
            } => Some(record.after(base.retention)),
            _ => base.retention,
        }
    }

    /// The new pins, the dropped tables and the schema a table change makes.
    pub(crate) fn of_tables(&self) -> Option<(&[TablePin], &[String], Option<&str>)> {
        match self {
            Change::Tables {
                pins,
                dropped,
                schema,
            }
            | Change::Merge {
                pins,
                dropped,
                schema,
                ..
            } => Some((pins, dropped, schema.as_deref())),
            _ => None,
        }
    }
}

/// One publication request: a base, what the commit asserts about the head it lands
/// on, and what it changes there.
#[derive(Clone, Debug)]
pub struct Publication {
    base: GraphCommit,
    requires: Requirements,
    change: Change,
    operation: CommitOperation,
    actor: String,
    idempotency_keys: Vec<String>,
    idempotency_fingerprints: Vec<String>,
}

/// A publication's parts, borrowed together: what the publisher reads in one call.
pub(crate) struct Parts<'a> {
    pub(crate) base: &'a GraphCommit,
    pub(crate) requires: &'a Requirements,
    pub(crate) change: &'a Change,
    pub(crate) operation: &'a CommitOperation,
    pub(crate) actor: &'a str,
    pub(crate) idempotency_keys: &'a [String],
    pub(crate) idempotency_fingerprints: &'a [String],
}

impl Publication {
    /// A publication on `base` by `actor`. Every rule that ties its parts together is
    /// checked here, once:
    /// - a change to tables reads something (pins or the whole head);
    /// - a merge, and a change of the schema, read the whole head;
    /// - only a merge publishes pins it read on another branch;
    /// - a record that changes no table (retention, a reservation, a release, a
    ///   branch deletion) reads nothing and staged nothing;
    /// - a table is pinned at most once, and never both pinned and dropped.
    ///
    /// A publication that breaks one is a defect of its writer: it panics.
    pub fn new(
        base: GraphCommit,
        requires: Requirements,
        change: Change,
        operation: CommitOperation,
        actor: &str,
    ) -> Publication {
        let strict = requires.read_set == ReadSet::Strict;
        match &change {
            Change::Tables { schema, .. } => {
                assert!(
                    requires.read_set != ReadSet::Nothing,
                    "a change to tables reads what it changes"
                );
                assert!(
                    schema.is_none() || strict,
                    "a change of the schema reads the whole head"
                );
                assert!(
                    requires.foreign_pins_read.is_none(),
                    "only a merge publishes pins read on another branch"
                );
            }
            Change::Merge { .. } => assert!(strict, "a merge reads the whole head"),
            Change::Retention { .. } | Change::Reserve(_) | Change::Nothing => {
                assert_eq!(
                    (
                        &requires.read_set,
                        &requires.staged_since,
                        &requires.foreign_pins_read
                    ),
                    (&ReadSet::Nothing, &None, &None),
                    "a record that changes no table reads and stages nothing"
                );
            }
            Change::DeleteBranch => {
                assert_eq!(
                    (
                        &requires.read_set,
                        &requires.staged_since,
                        &requires.foreign_pins_read
                    ),
                    (&ReadSet::Nothing, &None, &None),
                    "a branch deletion follows any head and stages nothing"
                );
            }
        }
        if let Some((pins, dropped, _)) = change.of_tables() {
            let mut ids: Vec<&str> = pins.iter().map(|pin| pin.table_id.as_str()).collect();
            ids.sort_unstable();
            let pinned = ids.len();
            ids.dedup();
            assert_eq!(ids.len(), pinned, "a table is pinned once per commit");
            assert!(
                dropped
                    .iter()
                    .all(|table| ids.binary_search(&table.as_str()).is_err()),
                "a table is never both pinned and dropped"
            );
        }
        Publication {
            base,
            requires,
            change,
            operation,
            actor: actor.to_string(),
            idempotency_keys: Vec::new(),
            idempotency_fingerprints: Vec::new(),
        }
    }

    /// A record on `base` that changes no table and staged nothing: cleanup's retention
    /// record, a reservation, a release, a branch deletion.
    pub fn record(
        base: GraphCommit,
        change: Change,
        holding: Option<String>,
        operation: CommitOperation,
        actor: &str,
    ) -> Publication {
        let requires = Requirements::reading(ReadSet::Nothing).holding(holding);
        Publication::new(base, requires, change, operation, actor)
    }

    /// Its parts, borrowed together (built only by [`Publication::new`], which checks
    /// them; never changed after).
    pub(crate) fn parts(&self) -> Parts<'_> {
        Parts {
            base: &self.base,
            requires: &self.requires,
            change: &self.change,
            operation: &self.operation,
            actor: &self.actor,
            idempotency_keys: &self.idempotency_keys,
            idempotency_fingerprints: &self.idempotency_fingerprints,
        }
    }

    /// The same publication serving `request`: its actor, when it names one, and its
    /// idempotency keys with their requests' fingerprints.
    /// Refuses a request a commit could not record (`WriteRequest::check`), before its
    /// commit.
    pub(crate) fn serving(
        &self,
        request: &crate::request::WriteRequest,
    ) -> omnigraph_core::Result<Publication> {
        request.check()?;
        let mut publication = self.clone();
        if let Some(actor) = &request.actor {
            publication.actor.clone_from(actor);
        }
        publication
            .idempotency_keys
            .clone_from(&request.idempotency_keys);
        publication
            .idempotency_fingerprints
            .clone_from(&request.idempotency_fingerprints);
        Ok(publication)
    }

    /// The head the writer captured.
    pub fn base(&self) -> &GraphCommit {
        &self.base
    }

    /// What the commit asserts about the head it lands on.
    pub fn requires(&self) -> &Requirements {
        &self.requires
    }

    /// What the commit changes.
    pub fn change(&self) -> &Change {
        &self.change
    }

    /// What the commit did.
    pub fn operation(&self) -> &CommitOperation {
        &self.operation
    }

    /// Who publishes.
    pub fn actor(&self) -> &str {
        &self.actor
    }

    /// Whether staged files exist: a failure is then `Unpublished`, not `BeforeEffect`.
    pub fn staged(&self) -> bool {
        self.requires.staged_since.is_some()
    }

    /// What a failure of this publication before its commit landed leaves
    /// ([`Publication::staged`]).
    pub fn failure_evidence(&self) -> omnigraph_core::Evidence {
        match self.staged() {
            true => omnigraph_core::Evidence::Unpublished,
            false => omnigraph_core::Evidence::BeforeEffect,
        }
    }

    /// The retention record the commit on `base` carries ([`Change::retention_on`]).
    pub fn retention_on(&self, base: &GraphCommit) -> Option<Retention> {
        self.change.retention_on(base)
    }

    /// The tables the commit changes or reserves: the ones another writer's
    /// reservation holds it off. None for a strict writer (schema apply, merge): the
    /// holder's commit would change the head it read, so waiting for it could only end
    /// in `read_set_changed`; it races as before.
    pub(crate) fn claimed_tables(&self) -> Vec<&str> {
        if self.requires.read_set == ReadSet::Strict {
            return Vec::new();
        }
        match &self.change {
            Change::Reserve(reservation) => reservation.tables.iter().map(String::as_str).collect(),
            change => match change.of_tables() {
                Some((pins, dropped, _)) => pins
                    .iter()
                    .map(|pin| pin.table_id.as_str())
                    .chain(dropped.iter().map(String::as_str))
                    .collect(),
                None => Vec::new(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commit::{TableKind, test_commit};

    fn operation() -> CommitOperation {
        CommitOperation {
            kind: "test".into(),
            summary: String::new(),
        }
    }

    fn pin(table_id: &str) -> TablePin {
        TablePin {
            table_id: table_id.into(),
            type_name: "Person".into(),
            kind: TableKind::Node,
            path: format!("tables/{table_id}"),
            version: (1 << 63) + 1,
            row_count: 1,
        }
    }

    fn new(read_set: ReadSet, change: Change) -> Publication {
        requiring(Requirements::reading(read_set), change)
    }

    fn requiring(requires: Requirements, change: Change) -> Publication {
        let base = test_commit("main", 3);
        Publication::new(base, requires, change, operation(), "test")
    }

    #[test]
    fn a_publication_that_keeps_the_rules_is_built() {
        let pins = ReadSet::staged(vec![("t1".into(), 5)]);
        let write = new(pins, Change::tables(vec![pin("t1"), pin("t2")]));
        assert_eq!(write.claimed_tables(), ["t1", "t2"]);
        assert!(!write.staged());
        let strict = new(
            ReadSet::Strict,
            Change::Merge {
                pins: vec![pin("t1")],
                dropped: vec!["t3".into()],
                schema: None,
                merged_from: Vec::new(),
            },
        );
        assert!(strict.claimed_tables().is_empty(), "a strict writer races");
        let record = Publication::record(
            test_commit("main", 3),
            Change::Nothing,
            Some("holder".into()),
            operation(),
            "test",
        );
        assert_eq!(record.requires().holding.as_deref(), Some("holder"));
    }

    #[test]
    #[should_panic(expected = "a change to tables reads what it changes")]
    fn a_table_change_that_read_nothing_is_refused() {
        new(ReadSet::Nothing, Change::tables(vec![pin("t1")]));
    }

    #[test]
    #[should_panic(expected = "a merge reads the whole head")]
    fn a_merge_on_pins_is_refused() {
        let change = Change::Merge {
            pins: Vec::new(),
            dropped: Vec::new(),
            schema: None,
            merged_from: Vec::new(),
        };
        new(ReadSet::staged(Vec::new()), change);
    }

    #[test]
    #[should_panic(expected = "a change of the schema reads the whole head")]
    fn a_schema_change_on_pins_is_refused() {
        let change = Change::Tables {
            pins: Vec::new(),
            dropped: Vec::new(),
            schema: Some("0".repeat(64)),
        };
        new(ReadSet::staged(Vec::new()), change);
    }

    #[test]
    #[should_panic(expected = "a record that changes no table reads and stages nothing")]
    fn a_record_that_reads_the_head_is_refused() {
        new(ReadSet::Strict, Change::Nothing);
    }

    #[test]
    #[should_panic(expected = "only a merge publishes pins read on another branch")]
    fn foreign_pins_outside_a_merge_are_refused() {
        let requires = Requirements {
            foreign_pins_read: Some(seams::Since::now()),
            ..Requirements::reading(ReadSet::Strict)
        };
        requiring(requires, Change::tables(vec![pin("t1")]));
    }

    #[test]
    #[should_panic(expected = "a table is pinned once per commit")]
    fn a_table_pinned_twice_is_refused() {
        new(ReadSet::Strict, Change::tables(vec![pin("t1"), pin("t1")]));
    }

    #[test]
    #[should_panic(expected = "a table is never both pinned and dropped")]
    fn a_table_pinned_and_dropped_is_refused() {
        let change = Change::Tables {
            pins: vec![pin("t1")],
            dropped: vec!["t1".into()],
            schema: None,
        };
        new(ReadSet::Strict, change);
    }
}
