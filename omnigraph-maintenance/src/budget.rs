//! The maintenance budget: the knobs that bound what a maintenance run may use.

use crate::limits::UNIT_CONCURRENCY_MAX;
use omnigraph_core::adapter::{CompactionBudget, FullTextBudget};
use omnigraph_core::{OmniError, Result, StorageKind};

/// The environment variable that sets [`MaintenanceBudget::unit_concurrency`].
pub(crate) const CONCURRENCY_VAR: &str = "OMNIGRAPH_MAINTENANCE_CONCURRENCY";
/// Units staged at once by default.
pub(crate) const UNIT_CONCURRENCY_DEFAULT: usize = 1;
/// Fan-out of request-bound work (planning reads, cleanup's sweep).
pub(crate) const REQUEST_FAN_OUT: usize = 8;

/// What a maintenance run may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaintenanceBudget {
    /// Units (tables) staged at once, in `1..=UNIT_CONCURRENCY_MAX`.
    pub unit_concurrency: usize,
    /// Each compaction's I/O buffer, scan batch and target fragment size.
    pub compaction: CompactionBudget,
    /// Each full-text build's memory and workers.
    pub full_text: FullTextBudget,
}

impl Default for MaintenanceBudget {
    fn default() -> Self {
        MaintenanceBudget {
            unit_concurrency: UNIT_CONCURRENCY_DEFAULT,
            compaction: CompactionBudget::default(),
            full_text: FullTextBudget::default(),
        }
    }
}

impl MaintenanceBudget {
    /// The default budget with the environment's settings applied. A value that is not
    /// a number is refused with a configuration error naming the variable; a number is
    /// clamped to `1..=UNIT_CONCURRENCY_MAX`.
    pub fn from_env() -> Result<MaintenanceBudget> {
        MaintenanceBudget::default().with_concurrency_text(std::env::var(CONCURRENCY_VAR).ok())
    }

    /// This budget with `unit_concurrency` clamped to `1..=UNIT_CONCURRENCY_MAX`.
    pub fn with_unit_concurrency(mut self, units: usize) -> MaintenanceBudget {
        self.unit_concurrency = units.clamp(1, UNIT_CONCURRENCY_MAX);
        self
    }

    fn with_concurrency_text(self, text: Option<String>) -> Result<MaintenanceBudget> {
        let Some(text) = text else {
            return Ok(self);
        };
        let units: usize = text.trim().parse().map_err(|_| {
            OmniError::storage(
                StorageKind::Configuration,
                format!("read {CONCURRENCY_VAR}"),
                format!("{CONCURRENCY_VAR}={text:?} is not a number of units (1 to {UNIT_CONCURRENCY_MAX})")
                    .into(),
            )
        })?;
        Ok(self.with_unit_concurrency(units))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrency_is_clamped_and_garbage_is_refused_naming_the_variable() {
        let budget = MaintenanceBudget::default();
        assert_eq!(budget.unit_concurrency, 1);
        assert_eq!(budget.compaction.io_buffer_bytes, 64 << 20);
        assert_eq!(budget.compaction.batch_rows, 8_192);
        let set = |text: &str| budget.with_concurrency_text(Some(text.to_string()));
        assert_eq!(set("2").unwrap().unit_concurrency, 2);
        assert_eq!(set("9").unwrap().unit_concurrency, 2);
        assert_eq!(set("0").unwrap().unit_concurrency, 1);
        assert_eq!(budget.with_concurrency_text(None).unwrap(), budget);
        let error = set("two").unwrap_err();
        assert_eq!(
            error.kind(),
            omnigraph_core::ErrorKind::Storage(StorageKind::Configuration)
        );
        assert!(error.to_string().contains(CONCURRENCY_VAR), "{error}");
    }
}
