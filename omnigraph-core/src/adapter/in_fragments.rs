//! Deletes and updates confined to named fragments of a table: the rows are found by one
//! scan of those fragments alone, and marked deleted there by row address. Lance's own
//! delete and merge read every fragment no index covers; a write whose rows are known to
//! lie in a few fragments (a warm handle knows where each key is) reads only those. The
//! links have the very shape Lance's delete and update give them, so a re-commit or a
//! carry-over treats them alike.

use super::stage::{cast_to, classify_predicate_error, update_projection};
use super::{LinkKind, LinkOrigin, StagedLink, commit_link, read_error, staged, write_error};
use crate::error::{OmniError, Result};
use crate::fragments::{ROW_ADDRESS_COLUMN, by_id, split_row_address};
use crate::limits::DELETION_WRITES_IN_FLIGHT_MAX;
use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use arrow_array::{Array, RecordBatch};
use futures::TryStreamExt;
use lance::Dataset;
use lance::dataset::fragment::FileFragment;
use lance::dataset::transaction::{Operation, Transaction, UpdateMode};
use lance::dataset::{InsertBuilder, WriteMode, WriteParams};
use lance::table::format::{Fragment, RowIdMeta};
use lance_table::rowids::{RowIdSequence, write_row_ids};
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::sync::Arc;

/// The column a scan adds for `with_row_id`: the row's stable id.
const ROW_ID: &str = "_rowid";

/// Stages the deletion of the rows of `fragments` (ids of `base`'s fragments) where
/// `predicate` holds, as one detached Delete. The caller knows no other fragment holds
/// such a row. `None` (nothing staged) when no row matches.
pub async fn stage_delete_in(
    base: &Arc<Dataset>,
    fragments: &[u64],
    predicate: &str,
    origin: &LinkOrigin,
) -> Result<Option<StagedLink>> {
    let within = fragments_of(base, fragments)?;
    if within.is_empty() {
        return Ok(None);
    }
    let mut scanner = base.scan();
    scanner.with_fragments(within.clone());
    scanner.with_row_address();
    scanner
        .project(&[ROW_ADDRESS_COLUMN])
        .map_err(|error| read_error("plan a delete", error))?;
    scanner
        .filter(predicate)
        .map_err(|error| classify_predicate_error(predicate, "delete", error))?;
    let batches: Vec<RecordBatch> = scanner
        .try_into_stream()
        .await
        .map_err(|error| classify_predicate_error(predicate, "delete", error))?
        .try_collect()
        .await
        .map_err(|error| classify_predicate_error(predicate, "delete", error))?;
    let doomed = addresses(&batches, &within)?;
    if doomed.is_empty() {
        return Ok(None);
    }
    let rows = doomed.values().map(|offsets| offsets.len() as u64).sum();
    let (updated_fragments, deleted_fragment_ids) = mark_deleted(base, &within, doomed).await?;
    let operation = Operation::Delete {
        updated_fragments,
        deleted_fragment_ids,
        predicate: predicate.to_string(),
    };
    let transaction = Transaction::new(super::version_of(base), operation, None);
    commit_link(base, transaction, origin, LinkKind::Delete, rows)
        .await
        .map(Some)
}

/// Stages an update confined to `fragments` (ids of `base`'s fragments): the rows there
/// where `predicate` holds get `assignments` (`(column, SQL expression)`) and keep their
/// key and stable row id. As Lance's own update does, the new rows go to new fragments
/// and the old ones are marked deleted; an index on columns the update leaves alone
/// keeps covering them. `None` (nothing staged) when no row matches.
pub async fn stage_update_in(
    base: &Arc<Dataset>,
    fragments: &[u64],
    key: &str,
    predicate: &str,
    assignments: &[(String, String)],
    origin: &LinkOrigin,
) -> Result<Option<StagedLink>> {
    let projection = update_projection(base, key, assignments)?;
    let within = fragments_of(base, fragments)?;
    if within.is_empty() {
        return Ok(None);
    }
    if !base.manifest().uses_stable_row_ids()
        || lance::dataset::rowids::inline_row_lineage_max_bytes(base)
            .map_err(|error| read_error("read the table's lineage setting", error))?
            .is_some()
    {
        return Err(OmniError::internal(format!(
            "{} does not keep stable row ids inline, which an update in place needs",
            base.uri()
        )));
    }
    let mut scanner = base.scan();
    scanner.with_fragments(within.clone());
    scanner
        .filter(predicate)
        .map_err(|error| classify_predicate_error(predicate, "update", error))?;
    scanner
        .project_with_transform(&projection)
        .map_err(|error| classify_predicate_error(predicate, "update assignment", error))?;
    scanner.with_row_id();
    scanner.with_row_address();
    let scanned = scanner
        .try_into_batch()
        .await
        .map_err(|error| classify_predicate_error(predicate, "update", error))?;
    if scanned.num_rows() == 0 {
        return Ok(None);
    }
    let doomed = addresses(std::slice::from_ref(&scanned), &within)?;
    let row_ids = u64_column(&scanned, ROW_ID)?;
    let row_ids: Vec<u64> = row_ids.values().to_vec();
    let target: arrow_schema::SchemaRef = Arc::new(arrow_schema::Schema::from(base.schema()));
    let columns = target
        .fields()
        .iter()
        .map(|field| {
            scanned.schema().index_of(field.name()).map_err(|error| {
                OmniError::internal(format!("the updated rows lack a column: {error}"))
            })
        })
        .collect::<Result<Vec<usize>>>()?;
    let values = scanned
        .project(&columns)
        .map_err(|error| OmniError::internal(format!("updated rows lost a column: {error}")))?;
    let updated = cast_to(&values, &target)?;
    let rows = updated.num_rows() as u64;
    let params = WriteParams {
        mode: WriteMode::Append,
        ..Default::default()
    };
    let written = InsertBuilder::new(base.clone())
        .with_params(&params)
        .execute_uncommitted(vec![updated])
        .await
        .map_err(|error| write_error("write updated rows", error))?;
    // The data files exist from here on: a failure leaves them unpublished.
    let Operation::Append {
        fragments: mut new_fragments,
    } = written.operation
    else {
        return Err(staged(OmniError::internal(
            "writing rows gave no appended fragments",
        )));
    };
    carry_row_ids(&mut new_fragments, &row_ids).map_err(staged)?;
    let (updated_fragments, removed_fragment_ids) =
        mark_deleted(base, &within, doomed).await.map_err(staged)?;
    let operation = Operation::Update {
        removed_fragment_ids,
        updated_fragments,
        new_fragments,
        fields_modified: Vec::new(),
        compacted_sstables: Vec::new(),
        fields_for_preserving_frag_bitmap: assigned_field_ids(base, assignments),
        update_mode: Some(UpdateMode::RewriteRows),
        inserted_rows_filter: None,
        updated_fragment_offsets: None,
    };
    let transaction = Transaction::new(super::version_of(base), operation, None);
    commit_link(base, transaction, origin, LinkKind::Update, rows)
        .await
        .map(Some)
}

/// Gives each of `written` (new fragments, in the order their rows were written) the
/// stable ids its rows had, from `row_ids` (in the same order).
fn carry_row_ids(written: &mut [Fragment], row_ids: &[u64]) -> Result<()> {
    let mut next = 0usize;
    for fragment in written {
        let count = fragment.physical_rows.ok_or_else(|| {
            OmniError::internal("a written fragment does not say how many rows it holds")
        })?;
        let ids = row_ids.get(next..next + count).ok_or_else(|| {
            OmniError::internal("the written fragments hold more rows than were updated")
        })?;
        fragment.row_id_meta = Some(RowIdMeta::Inline(
            write_row_ids(&RowIdSequence::from(ids)).into(),
        ));
        next += count;
    }
    if next != row_ids.len() {
        return Err(OmniError::internal(format!(
            "{} rows were updated, but the written fragments hold {next}",
            row_ids.len()
        )));
    }
    Ok(())
}

/// The fragments of `base` with the given ids; an id `base` lacks is the caller's bug.
fn fragments_of(base: &Dataset, ids: &[u64]) -> Result<Vec<Fragment>> {
    let stored = by_id(&base.manifest().fragments);
    ids.iter()
        .map(|id| {
            stored
                .get(id)
                .map(|fragment| (*fragment).clone())
                .ok_or_else(|| {
                    OmniError::internal(format!(
                        "{} version {} has no fragment {id}",
                        base.uri(),
                        super::version_of(base)
                    ))
                })
        })
        .collect()
}

fn u64_column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a arrow_array::UInt64Array> {
    batch
        .column_by_name(name)
        .and_then(|column| column.as_primitive_opt::<UInt64Type>())
        .filter(|column| column.null_count() == 0)
        .ok_or_else(|| OmniError::internal(format!("a scan returned no {name} column")))
}

/// The row offsets in `batches`' row addresses, per fragment; every one must lie in
/// `within`, the fragments the scan was confined to.
fn addresses(batches: &[RecordBatch], within: &[Fragment]) -> Result<BTreeMap<u64, Vec<u32>>> {
    let rows: HashMap<u64, Option<usize>> = within
        .iter()
        .map(|fragment| (fragment.id, fragment.physical_rows))
        .collect();
    let mut doomed: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
    for batch in batches {
        for address in u64_column(batch, ROW_ADDRESS_COLUMN)?.values() {
            let (fragment, offset) = split_row_address(*address);
            let Some(stored) = rows.get(&fragment) else {
                return Err(OmniError::internal(format!(
                    "a scan of fragments {:?} returned a row of fragment {fragment}",
                    rows.keys().collect::<Vec<_>>()
                )));
            };
            if stored.is_some_and(|stored| offset as usize >= stored) {
                return Err(OmniError::internal(format!(
                    "a scan returned row {offset} of fragment {fragment}, past its end"
                )));
            }
            doomed.entry(fragment).or_default().push(offset);
        }
    }
    Ok(doomed)
}

/// Marks `doomed` rows deleted in their fragments (new deletion files): the fragments
/// that keep rows, and the ids of those left with none.
async fn mark_deleted(
    base: &Arc<Dataset>,
    within: &[Fragment],
    doomed: BTreeMap<u64, Vec<u32>>,
) -> Result<(Vec<Fragment>, Vec<u64>)> {
    use futures::StreamExt;
    let stored = by_id(within);
    let mut marks = Vec::with_capacity(doomed.len());
    for (id, offsets) in doomed {
        let fragment = stored
            .get(&id)
            .map(|fragment| (*fragment).clone())
            .ok_or_else(|| OmniError::internal(format!("no fragment {id} to delete rows in")))?;
        marks.push((FileFragment::new(base.clone(), fragment), offsets));
    }
    let marked: Vec<(u64, Option<Fragment>)> = futures::stream::iter(marks)
        .map(|(fragment, offsets)| async move {
            let id = fragment.id() as u64;
            fragment
                .extend_deletions(offsets)
                .await
                .map(|marked| (id, marked.map(|marked| marked.metadata().clone())))
                .map_err(|error| write_error("mark rows deleted", error))
        })
        .buffer_unordered(DELETION_WRITES_IN_FLIGHT_MAX)
        .try_collect()
        .await?;
    let mut updated = Vec::new();
    let mut removed = Vec::new();
    for (id, marked) in marked {
        match marked {
            Some(marked) => updated.push(marked),
            None => removed.push(id),
        }
    }
    // In fragment order, as Lance's own delete gives them.
    updated.sort_by_key(|fragment| fragment.id);
    removed.sort_unstable();
    Ok((updated, removed))
}

/// The field ids an update of `assignments` rewrites, with their children: an index on
/// any of them must not be taken to cover the rewritten rows.
fn assigned_field_ids(base: &Dataset, assignments: &[(String, String)]) -> Vec<u32> {
    let mut ids = Vec::new();
    let mut pending: Vec<&lance::datatypes::Field> = assignments
        .iter()
        .filter_map(|(column, _)| base.schema().field(column))
        .collect();
    // A field tree is finite and each field is visited once.
    while let Some(field) = pending.pop() {
        if let Ok(id) = u32::try_from(field.id) {
            ids.push(id);
        }
        pending.extend(field.children.iter());
    }
    ids
}
