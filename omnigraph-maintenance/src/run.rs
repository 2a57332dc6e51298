//! A maintenance run's record of how far it has gone, and the evidence of its failures.
//!
//! Evidence is classified from the record, not from where the error was raised:
//! - before any durable effect, an opaque failure keeps its own evidence
//!   (`BeforeEffect`);
//! - once a unit staged files (a detached commit, index files), it is `Unpublished`;
//! - once any unit published, it is `PartlyPublished` with the units that did;
//! - a failure from the publisher keeps the publisher's own evidence when it is
//!   stronger (an in-doubt publication stays `InDoubt`), since evidence only rises.
//!
//! Typed refusals keep their kind and shape; only their evidence can rise.

use omnigraph_core::{Evidence, OmniError};

/// What a run has done so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RunRecord {
    /// Whether any unit left durable, unpublished staging.
    staged: bool,
    /// The units (tables, by type) whose publication landed, in order.
    published_units: Vec<String>,
}

impl RunRecord {
    /// A unit staged files that it did not publish.
    pub(crate) fn note_staged(&mut self) {
        self.staged = true;
    }

    /// A unit's publication landed.
    pub(crate) fn note_published(&mut self, unit: &str) {
        self.published_units.push(unit.to_string());
    }

    /// What the run has left behind so far.
    pub(crate) fn evidence(&self) -> Evidence {
        if !self.published_units.is_empty() {
            Evidence::PartlyPublished {
                published_units: self.published_units.clone(),
            }
        } else if self.staged {
            Evidence::Unpublished
        } else {
            Evidence::BeforeEffect
        }
    }

    /// `error` with the run's evidence.
    pub(crate) fn classify(&self, error: OmniError) -> OmniError {
        error.with_evidence(self.evidence())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use omnigraph_core::ErrorKind;

    #[test]
    fn evidence_follows_the_record_and_never_hides_doubt() {
        let mut record = RunRecord::default();
        let opaque = || OmniError::internal("boom");
        assert_eq!(
            record.classify(opaque()).evidence(),
            &Evidence::BeforeEffect
        );
        record.note_staged();
        assert_eq!(record.classify(opaque()).evidence(), &Evidence::Unpublished);
        record.note_published("Person");
        let error = record.classify(opaque());
        assert_eq!(
            error.evidence(),
            &Evidence::PartlyPublished {
                published_units: vec!["Person".into()]
            }
        );
        assert_eq!(error.kind(), ErrorKind::Internal, "the kind is kept");
        let doubt = OmniError::PublishInDoubt {
            commit_id: "c".into(),
            evidence: Evidence::InDoubt,
        };
        assert_eq!(record.classify(doubt).evidence(), &Evidence::InDoubt);
    }
}
