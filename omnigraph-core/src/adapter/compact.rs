//! A compaction staged as one detached Rewrite.
//!
//! Lance's own `commit_compaction` first commits a ReserveFragments on the linear
//! lineage to claim fragment ids; a detached Rewrite must not touch the lineage, so the
//! new fragments take ids above the base's `max_fragment_id` here instead. With the ids
//! assigned explicitly, row-id-domain indexes (vector, full-text) follow the rewrite; a
//! BTree (address domain) loses the rewritten fragments and must be rebuilt by the
//! caller (the index fold).

use super::{LinkKind, LinkOrigin, StagedLink, commit_link, read_error, write_error};
use crate::error::Result;
use lance::Dataset;
use lance::dataset::optimize::{CompactionOptions, plan_compaction};
use lance::dataset::transaction::{Operation, RewriteGroup, TransactionBuilder};
use std::sync::Arc;

/// Compaction's default I/O buffer per task (bytes): Lance's default is 2 GiB.
pub const COMPACTION_IO_BUFFER_BYTES_DEFAULT: u64 = 64 << 20;
/// Compaction's default scan batch size (rows).
pub const COMPACTION_BATCH_ROWS_DEFAULT: usize = 8_192;
/// Compaction's default target fragment size (rows), Lance's own default.
pub const TARGET_ROWS_PER_FRAGMENT_DEFAULT: usize = 1_048_576;

/// The memory knobs of one compaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactionBudget {
    /// Bytes of I/O buffer per task.
    pub io_buffer_bytes: u64,
    /// Rows per scan batch.
    pub batch_rows: usize,
    /// Target rows per output fragment.
    pub target_rows_per_fragment: usize,
}

impl Default for CompactionBudget {
    fn default() -> Self {
        CompactionBudget {
            io_buffer_bytes: COMPACTION_IO_BUFFER_BYTES_DEFAULT,
            batch_rows: COMPACTION_BATCH_ROWS_DEFAULT,
            target_rows_per_fragment: TARGET_ROWS_PER_FRAGMENT_DEFAULT,
        }
    }
}

/// The options every compaction in this build hands Lance: the budget's buffer, batch
/// and fragment size, and one thread per task.
pub fn compaction_options(budget: &CompactionBudget) -> CompactionOptions {
    #[allow(deprecated)] // CompactionOptions has deprecated fields; defaults fill them.
    CompactionOptions {
        target_rows_per_fragment: budget.target_rows_per_fragment,
        io_buffer_size: Some(budget.io_buffer_bytes),
        batch_size: Some(budget.batch_rows),
        num_threads: Some(1),
        ..Default::default()
    }
}

/// Notes the budget-bound options a compaction of `base` hands Lance (test builds).
pub(crate) fn note_options(base: &Dataset, options: &CompactionOptions) {
    super::observed::note_compaction(
        base.uri(),
        super::observed::CompactionSeen {
            io_buffer_bytes: options.io_buffer_size.unwrap_or(0),
            batch_rows: options.batch_size.unwrap_or(0),
            target_rows_per_fragment: options.target_rows_per_fragment,
        },
    );
}

/// Plans compaction on `base` and, when there is work, executes the tasks one at a time
/// and stages one detached Rewrite. Returns `None` when the plan is empty.
pub async fn stage_compaction(
    base: &Arc<Dataset>,
    budget: &CompactionBudget,
    origin: &LinkOrigin,
) -> Result<Option<StagedLink>> {
    let options = compaction_options(budget);
    note_options(base, &options);
    let plan = plan_compaction(base, &options)
        .await
        .map_err(|error| read_error("plan compaction", error))?;
    if plan.tasks.is_empty() {
        return Ok(None);
    }
    let mut groups = Vec::new();
    for task in plan.compaction_tasks() {
        let result = task
            .execute(base)
            .await
            .map_err(|error| write_error("execute compaction task", error))?;
        groups.push(RewriteGroup {
            old_fragments: result.original_fragments,
            new_fragments: result.new_fragments,
        });
    }
    commit_rewrite(base, groups, origin).await.map(Some)
}

/// Commits `groups` as one detached Rewrite on `base`: the new fragments are numbered
/// above `base`'s `max_fragment_id` (no ReserveFragments on the lineage), in order.
pub(super) async fn commit_rewrite(
    base: &Arc<Dataset>,
    mut groups: Vec<RewriteGroup>,
    origin: &LinkOrigin,
) -> Result<StagedLink> {
    number_new_fragments(base, &mut groups);
    commit_numbered_rewrite(base, groups, origin).await
}

/// Numbers the new fragments of `groups` above `base`'s `max_fragment_id`, in order.
pub(super) fn number_new_fragments(base: &Dataset, groups: &mut [RewriteGroup]) {
    let first_id = base.manifest().max_fragment_id().map_or(0, |max| max + 1);
    let new_fragments = groups
        .iter_mut()
        .flat_map(|group| group.new_fragments.iter_mut());
    for (id, fragment) in (first_id..).zip(new_fragments) {
        fragment.id = id;
    }
}

/// Commits `groups`, whose new fragments [`number_new_fragments`] numbered on `base`,
/// as one detached Rewrite on `base`.
pub(super) async fn commit_numbered_rewrite(
    base: &Arc<Dataset>,
    groups: Vec<RewriteGroup>,
    origin: &LinkOrigin,
) -> Result<StagedLink> {
    let max_before = base.manifest().max_fragment_id();
    let rows_rewritten = groups
        .iter()
        .flat_map(|group| group.new_fragments.iter())
        .map(|fragment| {
            assert!(
                max_before.is_none_or(|max| fragment.id > max),
                "a rewrite's new fragment {} is numbered above the base's {max_before:?}",
                fragment.id
            );
            fragment.physical_rows.unwrap_or(0) as u64
        })
        .sum();
    let transaction = TransactionBuilder::new(
        super::version_of(base),
        Operation::Rewrite {
            groups,
            rewritten_indices: Vec::new(),
            frag_reuse_index: None,
        },
    )
    .build();
    commit_link(base, transaction, origin, LinkKind::Rewrite, rows_rewritten).await
}
