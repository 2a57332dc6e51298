//! The Lance adapter: the only module that calls Lance write APIs (`cargo xtask guards`
//! enforces it, and every public function here is listed in [`registry::ENTRY_POINTS`]).
//!
//! A table's linear history is its creation only. Every later version is a **detached**
//! link staged on an exact base version: nothing here moves a table's linear HEAD, and
//! nothing here publishes. Each link records its [`LinkOrigin`] (branch, base commit seq,
//! base version) in its Lance transaction properties, so a person or tool reading the
//! table can tell where a link came from (cleanup needs only its age).

mod baseline;
mod collect;
mod compact;
mod evolve;
mod in_fragments;
mod index;
pub mod observed;
mod rebase;
pub mod registry;
mod stage;
mod table;

pub use baseline::{
    baseline_append, baseline_compact_and_optimize_indices, baseline_create, baseline_index,
    baseline_write,
};
pub use collect::{
    ADJACENCY_FOLDER, ManifestName, SWEPT_FOLDERS, VersionReferences, delete_table_object,
    detached_manifest_object, manifest_name, version_references,
};
pub use compact::{
    COMPACTION_BATCH_ROWS_DEFAULT, COMPACTION_IO_BUFFER_BYTES_DEFAULT, CompactionBudget,
    TARGET_ROWS_PER_FRAGMENT_DEFAULT, compaction_options, stage_compaction,
};
pub use evolve::{
    stage_add_null_columns, stage_drop_columns, stage_drop_index, stage_set_nullability,
};
pub use in_fragments::{stage_delete_in, stage_update_in};
pub use index::{
    BuiltVectorIndex, FULL_TEXT_MEMORY_MIB, FULL_TEXT_WORKERS, FullTextBudget, IndexBuild,
    IndexBuildKind, Quantisation, built_full_text_params, built_partitions, built_vector_index,
    default_nprobes, default_refine, full_text_params, full_text_positions, is_built, stage_index,
    stage_index_within,
};
pub use rebase::{BaseDrift, base_drift, recommit_index_build, restage_compaction};
pub use stage::{
    WrittenAppend, carry_over_deletions, commit_written_append, fragments_changed_by,
    recommit_append, recommit_on_newer_base, stage_append, stage_delete, stage_merge_insert,
    stage_update, write_append_stream,
};
pub use table::{create_table, open_table_at, read_link_origin};

use crate::error::{OmniError, Result};
use crate::failpoints;
use lance::Dataset;
use lance::dataset::CommitBuilder;
use lance::dataset::transaction::Transaction;
use std::collections::HashMap;
use std::sync::Arc;

/// Transaction property: the branch a link was staged for.
pub const PROP_BRANCH: &str = "omnigraph.branch";
/// Transaction property: the graph commit seq the link's base was pinned by.
pub const PROP_BASE_SEQ: &str = "omnigraph.base_seq";
/// Transaction property: the table version the link was staged on.
pub const PROP_BASE_VERSION: &str = "omnigraph.base_version";
/// Transaction property: what kind of link it is.
pub const PROP_LINK_KIND: &str = "omnigraph.link";

/// Where a staged link comes from: recorded in its transaction properties.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkOrigin {
    /// The branch the link is staged for.
    pub branch: String,
    /// The seq of the graph commit the writer captured.
    pub base_seq: u64,
    /// The table version the chain started from (the pin at `base_seq`).
    pub base_version: u64,
}

/// The kind of a staged link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkKind {
    /// New rows.
    Append,
    /// Rows removed by predicate.
    Delete,
    /// Rows upserted by key.
    MergeInsert,
    /// Rows rewritten in place by key (an update).
    Update,
    /// Fragments rewritten by compaction.
    Rewrite,
    /// An index built, replaced or dropped.
    CreateIndex,
    /// The table's schema widened or narrowed (metadata only).
    Evolve,
}

impl LinkKind {
    /// The name recorded in the transaction properties.
    pub fn name(&self) -> &'static str {
        match self {
            LinkKind::Append => "append",
            LinkKind::Delete => "delete",
            LinkKind::MergeInsert => "merge_insert",
            LinkKind::Update => "update",
            LinkKind::Rewrite => "rewrite",
            LinkKind::CreateIndex => "create_index",
            LinkKind::Evolve => "evolve",
        }
    }
}

/// A staged, detached link: a readable version that nothing publishes yet.
#[derive(Clone, Debug)]
pub struct StagedLink {
    /// The table at the new detached version; stage the next link on it.
    pub dataset: Arc<Dataset>,
    /// The detached version number (≥ 2^63).
    pub version: u64,
    /// What the link did.
    pub kind: LinkKind,
    /// Rows the link added, removed or rewrote (per kind; 0 for an index build).
    pub rows_affected: u64,
    /// The transaction as committed, kept so an append can be re-committed on a new base.
    pub transaction: Transaction,
}

/// The version number of a dataset handle.
pub fn version_of(dataset: &Dataset) -> u64 {
    dataset.manifest().version
}

/// Whether a version number is a detached one.
pub fn is_detached(version: u64) -> bool {
    lance::table::format::is_detached_version(version)
}

/// Commits `transaction` as a detached version on top of `base` (whatever version `base`
/// has checked out), recording `origin`. The single place a detached manifest is written.
async fn commit_link(
    base: &Arc<Dataset>,
    mut transaction: Transaction,
    origin: &LinkOrigin,
    kind: LinkKind,
    rows_affected: u64,
) -> Result<StagedLink> {
    let mut properties: HashMap<String, String> = transaction
        .transaction_properties
        .as_deref()
        .cloned()
        .unwrap_or_default();
    properties.insert(PROP_BRANCH.into(), origin.branch.clone());
    properties.insert(PROP_BASE_SEQ.into(), origin.base_seq.to_string());
    properties.insert(PROP_BASE_VERSION.into(), origin.base_version.to_string());
    properties.insert(PROP_LINK_KIND.into(), kind.name().into());
    transaction.transaction_properties = Some(Arc::new(properties));
    // The link's data or index files exist from here on: every failure is Unpublished.
    failpoints::reach(failpoints::STAGE_BEFORE_MANIFEST)
        .await
        .map_err(staged)?;
    let committed = CommitBuilder::new(base.clone())
        .with_detached(true)
        .execute(transaction.clone())
        .await
        .map_err(|error| {
            staged(OmniError::from_lance(
                format!("commit detached {}", kind.name()),
                error,
            ))
        })?;
    let version = version_of(&committed);
    assert!(
        is_detached(version),
        "a staged link must be detached, got version {version}"
    );
    failpoints::reach(failpoints::STAGE_AFTER_MANIFEST)
        .await
        .map_err(staged)?;
    Ok(StagedLink {
        dataset: Arc::new(committed),
        version,
        kind,
        rows_affected,
        transaction,
    })
}

/// A failure once staging may have written files: they are durable and unreachable.
fn staged(error: OmniError) -> OmniError {
    error.with_evidence(crate::error::Evidence::Unpublished)
}

/// A Lance failure while writing a link's files.
fn write_error(operation: impl Into<String>, error: lance::Error) -> OmniError {
    staged(OmniError::from_lance(operation, error))
}

/// A Lance failure before anything was written (planning, validation, reads).
fn read_error(operation: impl Into<String>, error: lance::Error) -> OmniError {
    OmniError::from_lance(operation, error)
}
