//! Re-staging a maintenance chain (a compaction, then index builds) on a newer base of
//! the same table, so that optimize lands beside writers instead of losing every race.
//!
//! A Rewrite names the fragments it replaces, and those ids are only meaningful on the
//! base it was planned on. On a newer base each group is judged on its own:
//! - its fragments are there, unchanged: the group is kept with the same new files;
//! - its fragments only lost rows since (a delete or an update marked them deleted, or
//!   removed a fragment whose rows were all deleted): the group keeps its new files,
//!   and the rows lost since are marked deleted in them (see below);
//! - otherwise the fragments still there are compacted again from the newer base, so
//!   rows deleted since stay deleted; a fragment that is gone lost all its rows to a
//!   delete, or another compaction holds its rows now;
//! - a group none of whose fragments is left, or that an index now covers only in part,
//!   is dropped.
//!
//! Carrying deletions over is what lets a compaction land beside writers that delete
//! and update all the time: compacting again would rewrite the group's rows on every
//! attempt and lose every race. A compaction writes the live rows of its fragments in
//! order (Lance scans them in order), so the row at offset `k` of the group's `i`-th
//! fragment is at position (live rows of the fragments before it) + (live rows before
//! `k`) of the concatenated new fragments. A fragment that is gone counts as all its
//! rows deleted: either a delete took them all, or another compaction holds them now.
//!
//! The new fragments take ids above the newer base's. An index build is re-committed
//! only when every fragment of the planned base is still there with the same files
//! (rows added or deleted since, which the index either does not cover or Lance masks
//! at query time), the indexes are the same, and every fragment the index covers is
//! the same fragment under the same id (so never after a re-staged compaction, whose
//! fragments get new ids). Otherwise the caller drops it, and the next run builds it.

use super::compact::{commit_numbered_rewrite, compaction_options, number_new_fragments};
use super::{
    CompactionBudget, LinkKind, LinkOrigin, StagedLink, commit_link, read_error, version_of,
    write_error,
};
use crate::error::{OmniError, Result};
use crate::fragments::{by_id, same_files};
use lance::Dataset;
use lance::dataset::fragment::FileFragment;
use lance::dataset::optimize::{CompactionTask, TaskData};
use lance::dataset::transaction::{Operation, RewriteGroup};
use lance::index::DatasetIndexExt;
use lance::table::format::{Fragment, IndexMetadata};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// How a newer base differs from the base a chain was planned on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BaseDrift {
    /// Every planned fragment is still there with the same files (rows may have been
    /// added in new fragments, or marked deleted), and the indexes are the same: an
    /// index build can be re-committed as it is.
    FilesKept,
    /// Fragments were replaced or removed, or the indexes changed: a compaction is
    /// re-judged group by group and index builds are dropped.
    Changed,
}

/// Compares the base a chain was planned on with a newer base of the same table.
pub async fn base_drift(planned: &Dataset, newer: &Dataset) -> Result<BaseDrift> {
    let current = by_id(&newer.manifest().fragments);
    let fragments_kept = planned.manifest().fragments.iter().all(|fragment| {
        current
            .get(&fragment.id)
            .is_some_and(|now| same_files(fragment, now))
    });
    if !fragments_kept {
        return Ok(BaseDrift::Changed);
    }
    let planned_indexes = index_ids(planned).await?;
    let newer_indexes = index_ids(newer).await?;
    Ok(if planned_indexes == newer_indexes {
        BaseDrift::FilesKept
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
    let current = by_id(&tip.manifest().fragments);
    let indexes = tip
        .load_indices()
        .await
        .map_err(|error| read_error("list indexes", error))?;
    let options = compaction_options(budget);
    super::compact::note_options(tip, &options);
    let mut kept = Vec::with_capacity(groups.len());
    // Per kept group, the rows of each new fragment to mark deleted (empty for a group
    // compacted again, whose new fragments hold only live rows).
    let mut marks: Vec<Vec<Vec<u32>>> = Vec::with_capacity(groups.len());
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
        if let Some(deleted) = deleted_since(&link.dataset, tip, group, &current).await? {
            marks.push(deleted);
            kept.push(RewriteGroup {
                old_fragments: now,
                new_fragments: group.new_fragments.clone(),
            });
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
        marks.push(vec![Vec::new(); result.new_fragments.len()]);
        kept.push(RewriteGroup {
            old_fragments: result.original_fragments,
            new_fragments: result.new_fragments,
        });
    }
    if kept.is_empty() {
        return Ok(None);
    }
    // A deletion file is named by its fragment's id, and the new fragments get new ids:
    // each marked fragment gets a deletion file of its own under its new id.
    for fragment in kept
        .iter_mut()
        .flat_map(|group| group.new_fragments.iter_mut())
    {
        fragment.deletion_file = None;
    }
    number_new_fragments(tip, &mut kept);
    for (group, marks) in kept.iter_mut().zip(marks) {
        assert_eq!(
            group.new_fragments.len(),
            marks.len(),
            "marks per new fragment"
        );
        let mut remaining = Vec::with_capacity(group.new_fragments.len());
        for (fragment, rows) in group.new_fragments.drain(..).zip(marks) {
            if rows.is_empty() {
                remaining.push(fragment);
                continue;
            }
            // `None`: every row of the fragment was deleted since, so it is not kept.
            let marked = FileFragment::new(tip.clone(), fragment)
                .extend_deletions(rows)
                .await
                .map_err(|error| write_error("mark rows deleted since in a compaction", error))?;
            remaining.extend(marked.map(|marked| marked.metadata().clone()));
        }
        group.new_fragments = remaining;
    }
    commit_numbered_rewrite(tip, kept, origin).await.map(Some)
}

/// When every fragment of `group` that `tip` still has holds the same files as the
/// group's old fragments (rows only deleted since), the rows of each of the group's new
/// fragments that must be marked deleted on `tip`: those marked already, and those
/// deleted since. `None` when something else changed, so the group is compacted again.
///
/// The group's live old rows and live new rows correspond one to one, in order: a
/// compaction writes the live rows of its fragments in order, and each re-stage marks
/// in the new fragments exactly the rows it finds deleted in the old ones. `compacted`
/// is the staged compaction's table, whose root resolves the group's deletion files.
async fn deleted_since(
    compacted: &Arc<Dataset>,
    tip: &Arc<Dataset>,
    group: &RewriteGroup,
    current: &HashMap<u64, &Fragment>,
) -> Result<Option<Vec<Vec<u32>>>> {
    let unchanged_files = group.old_fragments.iter().all(|then| {
        current
            .get(&then.id)
            .is_none_or(|now| same_files(then, now))
    });
    if !unchanged_files {
        return Ok(None);
    }
    let deletions = |table: &Arc<Dataset>, fragment: &Fragment| {
        let fragment = FileFragment::new(table.clone(), fragment.clone());
        async move {
            fragment
                .get_deletion_vector()
                .await
                .map_err(|error| read_error("read a deletion file", error))
        }
    };
    // Ordinals, among the group's live old rows, of the rows deleted since.
    let mut deleted_ordinals = Vec::new();
    let mut live_old = 0u64;
    for then in &group.old_fragments {
        let Some(rows) = then.physical_rows else {
            return Ok(None);
        };
        // The same deletion file: no row deleted since, and its count says how many
        // rows are live, so nothing is read.
        if let Some(now) = current.get(&then.id)
            && now.deletion_file == then.deletion_file
        {
            let deleted = match &then.deletion_file {
                None => Some(0),
                Some(file) => file.num_deleted_rows,
            };
            if let Some(deleted) = deleted {
                let Some(live) = (rows as u64).checked_sub(deleted as u64) else {
                    return Ok(None);
                };
                live_old += live;
                continue;
            }
        }
        let before = deletions(compacted, then).await?;
        let now = match current.get(&then.id) {
            Some(now) => Some(deletions(tip, now).await?),
            None => None,
        };
        for offset in 0..u32::try_from(rows).unwrap_or(u32::MAX) {
            let was_deleted = before
                .as_ref()
                .is_some_and(|vector| vector.contains(offset));
            let is_deleted = match &now {
                Some(vector) => vector
                    .as_ref()
                    .is_some_and(|vector| vector.contains(offset)),
                // Gone: deleted, or held by another compaction now.
                None => true,
            };
            if was_deleted {
                // Deletions are never undone; a row back means another history.
                if !is_deleted {
                    return Ok(None);
                }
                continue;
            }
            if is_deleted {
                deleted_ordinals.push(live_old);
            }
            live_old += 1;
        }
    }
    let mut marks = Vec::with_capacity(group.new_fragments.len());
    let mut ordinals = deleted_ordinals.into_iter().peekable();
    let mut live_new = 0u64;
    for fragment in &group.new_fragments {
        let Some(rows) = fragment.physical_rows else {
            return Ok(None);
        };
        let marked = match fragment.deletion_file {
            Some(_) => deletions(compacted, fragment).await?,
            None => None,
        };
        let mut rows_to_mark = Vec::new();
        for offset in 0..u32::try_from(rows).unwrap_or(u32::MAX) {
            if marked
                .as_ref()
                .is_some_and(|vector| vector.contains(offset))
            {
                rows_to_mark.push(offset);
                continue;
            }
            if ordinals.next_if_eq(&live_new).is_some() {
                rows_to_mark.push(offset);
            }
            live_new += 1;
        }
        marks.push(rows_to_mark);
    }
    if live_new != live_old {
        // The new fragments do not hold exactly the live old rows: compact again.
        return Ok(None);
    }
    assert!(
        ordinals.next().is_none(),
        "every row deleted since is marked"
    );
    Ok(Some(marks))
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
/// [`BaseDrift::FilesKept`] (with the chain's earlier links re-staged on it). Rows
/// deleted since in covered fragments stay in the index, as after any delete: Lance
/// masks them at query time. `None` when a fragment the index covers is not the same
/// fragment in `tip`: a re-staged compaction gives its fragments new ids, and a BTree's
/// files hold row addresses (fragment id and offset), which no bitmap can renumber.
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
    let seen = by_id(&link.dataset.manifest().fragments);
    let now = by_id(&tip.manifest().fragments);
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
        let same =
            covered.iter().all(
                |id| match (now.get(&u64::from(*id)), seen.get(&u64::from(*id))) {
                    (Some(now), Some(seen)) => same_files(seen, now),
                    _ => false,
                },
            );
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
