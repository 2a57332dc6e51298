//! What this build handed Lance, for tests that check a budget reaches it: each
//! compaction's options and each full-text build's parameters, by table. Kept only in
//! builds with the `failpoints` feature (test builds); a production build records
//! nothing.

/// The budget-bound options one compaction handed Lance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactionSeen {
    /// `io_buffer_size`, in bytes.
    pub io_buffer_bytes: u64,
    /// `batch_size`, in rows.
    pub batch_rows: usize,
    /// `target_rows_per_fragment`.
    pub target_rows_per_fragment: usize,
}

/// The budget-bound parameters one full-text build handed Lance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FullTextSeen {
    /// `memory_limit_mb`.
    pub memory_mib: u64,
    /// `num_workers`.
    pub workers: usize,
}

#[cfg(feature = "failpoints")]
type Ledger<T> = parking_lot::Mutex<std::collections::HashMap<String, Vec<T>>>;

#[cfg(feature = "failpoints")]
static COMPACTIONS: std::sync::LazyLock<Ledger<CompactionSeen>> =
    std::sync::LazyLock::new(Default::default);
#[cfg(feature = "failpoints")]
static FULL_TEXT: std::sync::LazyLock<Ledger<FullTextSeen>> =
    std::sync::LazyLock::new(Default::default);

#[cfg(feature = "failpoints")]
use crate::limits::SEEN_PER_TABLE_MAX;

#[cfg(feature = "failpoints")]
fn note<T>(ledger: &Ledger<T>, table_uri: &str, seen: T) {
    let mut ledger = ledger.lock();
    let entries = ledger.entry(table_uri.to_string()).or_default();
    if entries.len() == SEEN_PER_TABLE_MAX {
        entries.remove(0);
    }
    entries.push(seen);
}

/// Notes a compaction of the table at `table_uri`.
#[cfg_attr(not(feature = "failpoints"), allow(unused_variables))]
pub(crate) fn note_compaction(table_uri: &str, seen: CompactionSeen) {
    #[cfg(feature = "failpoints")]
    note(&COMPACTIONS, table_uri, seen);
}

/// Notes a full-text build on the table at `table_uri`.
#[cfg_attr(not(feature = "failpoints"), allow(unused_variables))]
pub(crate) fn note_full_text(table_uri: &str, seen: FullTextSeen) {
    #[cfg(feature = "failpoints")]
    note(&FULL_TEXT, table_uri, seen);
}

/// The compactions of tables whose URI ends with `table_path` (`tables/<id>`).
#[cfg(feature = "failpoints")]
pub fn compactions_of(table_path: &str) -> Vec<CompactionSeen> {
    seen_of(&COMPACTIONS, table_path)
}

/// The full-text builds on tables whose URI ends with `table_path`.
#[cfg(feature = "failpoints")]
pub fn full_text_builds_of(table_path: &str) -> Vec<FullTextSeen> {
    seen_of(&FULL_TEXT, table_path)
}

#[cfg(feature = "failpoints")]
fn seen_of<T: Copy>(ledger: &Ledger<T>, table_path: &str) -> Vec<T> {
    ledger
        .lock()
        .iter()
        .filter(|(uri, _)| uri.trim_end_matches('/').ends_with(table_path))
        .flat_map(|(_, seen)| seen.iter().copied())
        .collect()
}
