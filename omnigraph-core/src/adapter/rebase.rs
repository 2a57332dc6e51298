//! Re-staging a maintenance chain (a compaction, then index builds) on a newer base of
//! the same table, so that optimize lands beside writers instead of losing every race.
//!
//! A Rewrite names the fragments it replaces, and those ids are only meaningful on the
//! base it was planned on. On a newer base each group is judged on its own:
//! - its fragments are there, unchanged: the group is kept with the same new files;
//! - otherwise the fragments still there are compacted again from the newer base, so
//!   rows deleted since (a delete or an update) stay deleted; a fragment that is gone
//!   lost all its rows to a delete, or another compaction holds its rows now;
//! - a group none of whose fragments is left, or that an index now covers only in part,
//!   is dropped.
//!
//! The new fragments take ids above the newer base's. An index build is re-committed
//! only when the newer base differs from the planned one by added fragments alone,
//! holds the same indexes, and every fragment the index covers is the same fragment
//! under the same id (so never after a re-staged compaction, whose fragments get new
//! ids). Otherwise the caller drops it, and the next run builds it.

use super::compact::{commit_rewrite, compaction_options};
use super::{
    CompactionBudget, LinkKind, LinkOrigin, StagedLink, commit_link, read_error, version_of,
    write_error,
};
use crate::error::{OmniError, Result};
use lance::Dataset;
use lance::dataset::optimize::{CompactionTask, TaskData};
use lance::dataset::transaction::{Operation, RewriteGroup};
use lance::index::DatasetIndexExt;
use lance::table::format::{Fragment, IndexMetadata};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// How a newer base differs from the base a chain was planned on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BaseDrift {
    /// Only fragments were added, and the indexes are the same: every staged link can be
    /// re-committed as it is.
    AddedFragmentsOnly,
    /// Rows were deleted or fragments replaced, or the indexes changed: a compaction is
    /// re-judged group by group and index builds are dropped.
    Changed,
}

/// Compares the base a chain was planned on with a newer base of the same table.
pub async fn base_drift(planned: &Dataset, newer: &Dataset) -> Result<BaseDrift> {
    let current: HashMap<u64, &Fragment> = newer
        .manifest()
        .fragments
        .iter()
        .map(|fragment| (fragment.id, fragment))
        .collect();
    let fragments_kept = planned
        .manifest()
        .fragments
        .iter()
        .all(|fragment| current.get(&fragment.id) == Some(&fragment));
    if !fragments_kept {
        return Ok(BaseDrift::Changed);
    }
    let planned_indexes = index_ids(planned).await?;
    let newer_indexes = index_ids(newer).await?;
    Ok(if planned_indexes == newer_indexes {
        BaseDrift::AddedFragmentsOnly
    } else {
        BaseDrift::Changed
    })
}

async fn index_ids(table: &Dataset) -> Result<BTreeSet<uuid::Uuid>> {
    Ok(table
        .load_indices()
        .await
        .map_err(|error| read_error("list indexes", error))?
        .iter()
        .map(|index| index.uuid)
        .collect())
}

/// Re-stages the staged compaction `link` on `tip`, a newer base of its table (see the
/// module doc). `None` when no group can follow.
pub async fn restage_compaction(
    link: &StagedLink,
    tip: &Arc<Dataset>,
    budget: &CompactionBudget,
    origin: &LinkOrigin,
) -> Result<Option<StagedLink>> {
    let Operation::Rewrite { groups, .. } = &link.transaction.operation else {
        return Err(OmniError::internal(format!(
            "only a compaction is re-staged as one, not a {}",
            link.kind.name()
        )));
    };
    let current: HashMap<u64, &Fragment> = tip
        .manifest()
        .fragments
        .iter()
        .map(|fragment| (fragment.id, fragment))
        .collect();
    let indexes = tip
        .load_indices()
        .await
        .map_err(|error| read_error("list indexes", error))?;
    let options = compaction_options(budget);
    let mut kept = Vec::with_capacity(groups.len());
    for group in groups {
        // A fragment that is gone lost all its rows to a delete, or was replaced by
        // another compaction, whose fragments hold its rows: either way only the
        // fragments still there are compacted.
        let now: Vec<Fragment> = group
            .old_fragments
            .iter()
            .filter_map(|fragment| current.get(&fragment.id).map(|now| (*now).clone()))
            .collect();
        // Nothing left to join: one fragment without deletions is already compact.
        if now.is_empty() || (now.len() == 1 && now[0].deletion_file.is_none()) {
            continue;
        }
        if !covered_alike(&indexes, &now) {
            continue;
        }
        if now == group.old_fragments {
            kept.push(group.clone());
            continue;
        }
        let task = CompactionTask {
            task: TaskData { fragments: now },
            read_version: version_of(tip),
            options: options.clone(),
        };
        let result = task
            .execute(tip)
            .await
            .map_err(|error| write_error("compact a group again on the new base", error))?;
        kept.push(RewriteGroup {
            old_fragments: result.original_fragments,
            new_fragments: result.new_fragments,
        });
    }
    if kept.is_empty() {
        return Ok(None);
    }
    commit_rewrite(tip, kept, origin).await.map(Some)
}

/// Whether every index covers all of `fragments` or none of them: Lance rewrites a
/// group only then.
fn covered_alike(indexes: &[IndexMetadata], fragments: &[Fragment]) -> bool {
    indexes.iter().all(|index| {
        let Some(bitmap) = &index.fragment_bitmap else {
            return true;
        };
        let covered = fragments
            .iter()
            .filter(|fragment| bitmap.contains(fragment.id as u32))
            .count();
        covered == 0 || covered == fragments.len()
    })
}

/// Re-commits the staged index build `link` on `tip`, a newer base that drifted by
/// [`BaseDrift::AddedFragmentsOnly`] (with the chain's earlier links re-staged on it).
/// `None` when a fragment the index covers is not the same fragment in `tip`: a
/// re-staged compaction gives its fragments new ids, and a BTree's files hold row
/// addresses (fragment id and offset), which no bitmap can renumber.
pub async fn recommit_index_build(
    link: &StagedLink,
    tip: &Arc<Dataset>,
    origin: &LinkOrigin,
) -> Result<Option<StagedLink>> {
    let mut transaction = link.transaction.clone();
    let Operation::CreateIndex { new_indices, .. } = &mut transaction.operation else {
        return Err(OmniError::internal(format!(
            "only an index build is re-committed as one, not a {}",
            link.kind.name()
        )));
    };
    let seen: HashMap<u64, &Fragment> = link
        .dataset
        .manifest()
        .fragments
        .iter()
        .map(|fragment| (fragment.id, fragment))
        .collect();
    let now: HashMap<u64, &Fragment> = tip
        .manifest()
        .fragments
        .iter()
        .map(|fragment| (fragment.id, fragment))
        .collect();
    for index in new_indices.iter_mut() {
        let Some(bitmap) = &mut index.fragment_bitmap else {
            continue;
        };
        // Only fragments the build saw count: a bitmap may name ids that no longer
        // exist, and such an id may be a fragment the newer base added, which the
        // index never read.
        let covered: Vec<u32> = bitmap
            .iter()
            .filter(|id| seen.contains_key(&u64::from(*id)))
            .collect();
        let same = covered
            .iter()
            .all(|id| now.get(&u64::from(*id)) == seen.get(&u64::from(*id)));
        if !same {
            return Ok(None);
        }
        bitmap.clear();
        bitmap.extend(covered);
    }
    transaction.read_version = version_of(tip);
    transaction.uuid = uuid::Uuid::new_v4().to_string();
    commit_link(
        tip,
        transaction,
        origin,
        LinkKind::CreateIndex,
        link.rows_affected,
    )
    .await
    .map(Some)
}
