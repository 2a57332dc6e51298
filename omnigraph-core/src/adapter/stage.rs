//! Data links: append, delete, merge-insert, update, and re-committing them on a newer
//! base.

use super::{LinkKind, LinkOrigin, StagedLink, commit_link, read_error, staged, write_error};
use crate::error::{InputLocation, OmniError, Result};
use crate::fragments::same_files;
use arrow_array::RecordBatch;
use lance::Dataset;
use lance::dataset::fragment::FileFragment;
use lance::dataset::transaction::Operation;
use lance::dataset::{
    DeleteBuilder, InsertBuilder, MergeInsertBuilder, WhenMatched, WhenNotMatched, WriteMode,
    WriteParams,
};
use lance::table::format::Fragment;
use std::sync::Arc;

/// Stages new rows on `base` as one detached Append.
pub async fn stage_append(
    base: &Arc<Dataset>,
    batches: Vec<RecordBatch>,
    origin: &LinkOrigin,
) -> Result<StagedLink> {
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let params = WriteParams {
        mode: WriteMode::Append,
        ..Default::default()
    };
    let transaction = InsertBuilder::new(base.clone())
        .with_params(&params)
        .execute_uncommitted(batches)
        .await
        .map_err(|error| write_error("write appended rows", error))?;
    commit_link(base, transaction, origin, LinkKind::Append, rows as u64).await
}

/// The data files of an append, written from a stream of batches and not yet
/// committed: [`commit_written_append`] stages them as one detached Append on the
/// version they were written on.
#[derive(Debug)]
pub struct WrittenAppend {
    transaction: lance::dataset::transaction::Transaction,
    rows: u64,
}

/// Writes the data files of an append on `base` from `batches` as they arrive (Lance
/// cuts files as it does for one call), without committing anything: the caller checks
/// its rows while Lance encodes and writes the earlier ones.
pub async fn write_append_stream(
    base: Arc<Dataset>,
    schema: arrow_schema::SchemaRef,
    batches: impl futures::Stream<Item = RecordBatch> + Send + 'static,
) -> Result<WrittenAppend> {
    use futures::StreamExt;
    let rows = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = rows.clone();
    let batches = batches.map(move |batch| {
        counted.fetch_add(
            batch.num_rows() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        Ok::<_, datafusion::error::DataFusionError>(batch)
    });
    let stream: datafusion::physical_plan::SendableRecordBatchStream =
        Box::pin(datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(schema, batches));
    let params = WriteParams {
        mode: WriteMode::Append,
        ..Default::default()
    };
    let transaction = InsertBuilder::new(base)
        .with_params(&params)
        .execute_uncommitted_stream(stream)
        .await
        .map_err(|error| write_error("write appended rows", error))?;
    Ok(WrittenAppend {
        transaction,
        rows: rows.load(std::sync::atomic::Ordering::Relaxed),
    })
}

/// Stages the files of `written` on `base`, the version they were written on, as one
/// detached Append.
pub async fn commit_written_append(
    base: &Arc<Dataset>,
    written: WrittenAppend,
    origin: &LinkOrigin,
) -> Result<StagedLink> {
    if !matches!(written.transaction.operation, Operation::Append { .. }) {
        return Err(OmniError::internal(
            "a written append holds another operation",
        ));
    }
    if written.transaction.read_version != super::version_of(base) {
        return Err(OmniError::internal(format!(
            "an append written on version {} is committed on version {}",
            written.transaction.read_version,
            super::version_of(base)
        )));
    }
    commit_link(
        base,
        written.transaction,
        origin,
        LinkKind::Append,
        written.rows,
    )
    .await
}

/// Re-commits a staged append on a newer base: the same data files, with fragment ids
/// and stable row ids renumbered from the new base (Lance renumbers an Append cleanly).
/// Anything but an append is refused: other operations carry ids of their base.
pub async fn recommit_append(
    staged_link: &StagedLink,
    new_base: &Arc<Dataset>,
    origin: &LinkOrigin,
) -> Result<StagedLink> {
    let mut transaction = staged_link.transaction.clone();
    let Operation::Append { fragments } = &mut transaction.operation else {
        return Err(OmniError::internal(format!(
            "only an append can be re-committed on a new base, not a {}",
            staged_link.kind.name()
        )));
    };
    // Id 0 means "assign at commit": the new base assigns fresh fragment and row ids.
    for fragment in fragments.iter_mut() {
        fragment.id = 0;
        fragment.row_id_meta = None;
    }
    transaction.read_version = super::version_of(new_base);
    transaction.uuid = uuid::Uuid::new_v4().to_string();
    commit_link(
        new_base,
        transaction,
        origin,
        LinkKind::Append,
        staged_link.rows_affected,
    )
    .await
}

/// The ids of the existing fragments a staged append, delete or update changes (an
/// append changes none); `None` for any other link, which is never re-committed.
pub fn fragments_changed_by(staged_link: &StagedLink) -> Option<Vec<u64>> {
    // By the link's kind, not only its operation: a merge load is an Update too, and
    // its inserted rows need key checks a re-commit does not make.
    if !matches!(
        staged_link.kind,
        LinkKind::Append | LinkKind::Delete | LinkKind::Update
    ) {
        return None;
    }
    match &staged_link.transaction.operation {
        Operation::Append { .. } => Some(Vec::new()),
        Operation::Delete {
            updated_fragments,
            deleted_fragment_ids: removed,
            ..
        }
        | Operation::Update {
            updated_fragments,
            removed_fragment_ids: removed,
            ..
        } => Some(
            updated_fragments
                .iter()
                .map(|fragment| fragment.id)
                .chain(removed.iter().copied())
                .collect(),
        ),
        _ => None,
    }
}

/// Re-commits a staged append, delete or update on `new_base`, a newer version of its
/// table in which every fragment the link changes ([`fragments_changed_by`]) is still
/// the same fragment (after [`carry_over_deletions`] where other rows of it were
/// deleted since). The caller has checked that no row the newer base added matches
/// the link's predicate, so the link changes the same rows there; fragments it does not
/// name keep the newer base's state. Rows it moved keep their stable row ids, and their
/// new fragments take ids from the new base.
pub async fn recommit_on_newer_base(
    staged_link: &StagedLink,
    new_base: &Arc<Dataset>,
    origin: &LinkOrigin,
) -> Result<StagedLink> {
    if fragments_changed_by(staged_link).is_none() {
        return Err(OmniError::internal(format!(
            "a {} link is not re-committed on a newer base",
            staged_link.kind.name()
        )));
    }
    let mut transaction = staged_link.transaction.clone();
    match &mut transaction.operation {
        Operation::Delete { .. } => {}
        Operation::Update { new_fragments, .. } => {
            // Id 0 means "assign at commit", as for an append.
            for fragment in new_fragments.iter_mut() {
                fragment.id = 0;
            }
        }
        Operation::Append { .. } => return recommit_append(staged_link, new_base, origin).await,
        _ => {
            return Err(OmniError::internal(format!(
                "a {} link is not re-committed on a newer base",
                staged_link.kind.name()
            )));
        }
    }
    transaction.read_version = super::version_of(new_base);
    transaction.uuid = uuid::Uuid::new_v4().to_string();
    commit_link(
        new_base,
        transaction,
        origin,
        staged_link.kind,
        staged_link.rows_affected,
    )
    .await
}

/// Carries a staged delete or update over a newer base on which other writers marked
/// other rows deleted in fragments the link changes, so that it can be re-committed
/// there ([`recommit_on_newer_base`]). Deletions are the only change two writers can
/// make to one fragment at once: an update marks its old rows deleted, and so does a
/// delete. Per fragment the link changes that differs between `old_base` (the base it
/// was staged on) and `new_base`:
/// - it must hold the same rows (same files, same row count), and every row deleted in
///   it on `old_base` must still be deleted;
/// - the rows the link deletes there must all still be live: if another writer deleted
///   one (or moved it by an update), the two changed the same row, and the link cannot
///   follow;
/// - the fragment on `new_base` gets the link's deletions added to its own, in a new
///   deletion file; a fragment left with no row is removed.
///
/// Returns the link with those fragments in its transaction, for
/// [`recommit_on_newer_base`] only, or `None` when it cannot follow. A fragment the
/// link removes whole must be the same on both bases. The new deletion files are
/// unpublished staging until the re-commit publishes.
pub async fn carry_over_deletions(
    staged_link: &StagedLink,
    old_base: &Arc<Dataset>,
    new_base: &Arc<Dataset>,
) -> Result<Option<StagedLink>> {
    let mut transaction = staged_link.transaction.clone();
    let (updated, removed) = match &mut transaction.operation {
        Operation::Delete {
            updated_fragments,
            deleted_fragment_ids,
            ..
        } => (updated_fragments, deleted_fragment_ids),
        Operation::Update {
            updated_fragments,
            removed_fragment_ids,
            ..
        } if staged_link.kind == LinkKind::Update => (updated_fragments, removed_fragment_ids),
        _ => return Ok(None),
    };
    let fragment_of = |table: &Dataset, id: u64| {
        table
            .manifest()
            .fragments
            .iter()
            .find(|fragment| fragment.id == id)
            .cloned()
    };
    for id in removed.iter() {
        let was = fragment_of(old_base, *id);
        if was.is_none() || was != fragment_of(new_base, *id) {
            return Ok(None);
        }
    }
    let deletions = |table: &Arc<Dataset>, fragment: Fragment| {
        let fragment = FileFragment::new(table.clone(), fragment);
        async move {
            fragment
                .get_deletion_vector()
                .await
                .map(|found| {
                    found
                        .map(|vector| vector.as_ref().clone())
                        .unwrap_or_default()
                })
                .map_err(|error| read_error("read a deletion file", error))
        }
    };
    // Every fragment is judged before any file is written, so a link that cannot follow
    // leaves nothing behind.
    let mut to_mark: Vec<(usize, Fragment, Vec<u32>)> = Vec::new();
    for (at, ours) in updated.iter().enumerate() {
        let (Some(was), Some(now)) = (
            fragment_of(old_base, ours.id),
            fragment_of(new_base, ours.id),
        ) else {
            return Ok(None);
        };
        if was == now {
            continue;
        }
        if !same_files(&was, &now) || !same_files(&was, ours) {
            return Ok(None);
        }
        let before = deletions(old_base, was).await?;
        // The link's own deletion file lies in the same table, so the newer base reads it.
        let mine = deletions(new_base, ours.clone()).await?;
        let theirs = deletions(new_base, now.clone()).await?;
        if before
            .iter()
            .any(|row| !theirs.contains(row) || !mine.contains(row))
        {
            return Err(OmniError::internal(format!(
                "fragment {} of {}: a newer version or a staged link lost a row deletion",
                ours.id,
                new_base.uri()
            )));
        }
        let rows: Vec<u32> = mine.iter().filter(|row| !before.contains(*row)).collect();
        if rows.iter().any(|row| theirs.contains(*row)) {
            return Ok(None);
        }
        to_mark.push((at, now, rows));
    }
    let mut emptied = Vec::new();
    for (at, now, rows) in to_mark {
        let marked = FileFragment::new(new_base.clone(), now)
            .extend_deletions(rows)
            .await
            .map_err(|error| write_error("carry deletions over to a newer base", error))?;
        match marked {
            Some(marked) => updated[at] = marked.metadata().clone(),
            None => emptied.push(updated[at].id),
        }
    }
    updated.retain(|fragment| !emptied.contains(&fragment.id));
    removed.extend(emptied);
    Ok(Some(StagedLink {
        transaction,
        ..staged_link.clone()
    }))
}

/// Stages the deletion of the rows of `base` where `predicate` (SQL) holds. Deleting
/// nothing still stages a link, so a caller's chain stays uniform; callers that want no
/// version for a no-op check `rows_affected`.
pub async fn stage_delete(
    base: &Arc<Dataset>,
    predicate: &str,
    origin: &LinkOrigin,
) -> Result<StagedLink> {
    let uncommitted = DeleteBuilder::new(base.clone(), predicate)
        .execute_uncommitted()
        .await
        .map_err(|error| classify_predicate_error(predicate, "delete", error))?;
    commit_link(
        base,
        uncommitted.transaction,
        origin,
        LinkKind::Delete,
        uncommitted.num_deleted_rows,
    )
    .await
}

/// Stages an upsert by `key`: rows whose key exists replace the old row, others are
/// inserted.
pub async fn stage_merge_insert(
    base: &Arc<Dataset>,
    key: &str,
    batches: Vec<RecordBatch>,
    origin: &LinkOrigin,
) -> Result<StagedLink> {
    merge_by_key(
        base,
        key,
        batches,
        WhenNotMatched::InsertAll,
        LinkKind::MergeInsert,
        origin,
    )
    .await
}

/// Stages an update: the rows of `base` where `predicate` holds get `assignments`
/// (`(column, SQL expression)`), and keep their key. Lance 14's `UpdateBuilder` has no
/// uncommitted form, so the new rows are computed by a scan and staged as a merge on the
/// key that never inserts. `None` (nothing staged) when no row matches.
pub async fn stage_update(
    base: &Arc<Dataset>,
    key: &str,
    predicate: &str,
    assignments: &[(String, String)],
    origin: &LinkOrigin,
) -> Result<Option<StagedLink>> {
    let projection = update_projection(base, key, assignments)?;
    let mut scanner = base.scan();
    scanner
        .filter(predicate)
        .map_err(|error| classify_predicate_error(predicate, "update", error))?;
    scanner
        .project_with_transform(&projection)
        .map_err(|error| classify_predicate_error(predicate, "update assignment", error))?;
    let updated = scanner
        .try_into_batch()
        .await
        .map_err(|error| classify_predicate_error(predicate, "update", error))?;
    // The projection's types follow the expressions; cast back to the table's schema so
    // an assignment like `age = 41` (an Int64 literal) fits an Int32 column.
    let target: arrow_schema::SchemaRef = Arc::new(arrow_schema::Schema::from(base.schema()));
    let updated = cast_to(&updated, &target)?;
    if updated.num_rows() == 0 {
        return Ok(None);
    }
    merge_by_key(
        base,
        key,
        vec![updated],
        WhenNotMatched::DoNothing,
        LinkKind::Update,
        origin,
    )
    .await
    .map(Some)
}

/// The scan projection of an update: every column of `base`, as its assignment's
/// expression or as it is. The key cannot be assigned, nor a column `base` lacks.
pub(super) fn update_projection(
    base: &Dataset,
    key: &str,
    assignments: &[(String, String)],
) -> Result<Vec<(String, String)>> {
    if assignments.iter().any(|(column, _)| column == key) {
        return Err(OmniError::bad_input(
            InputLocation::in_source("update").field(key),
            format!("{key} is the key; an update cannot change it"),
        ));
    }
    let schema = base.schema();
    for (column, _) in assignments {
        if schema.field(column).is_none() {
            return Err(OmniError::bad_input(
                InputLocation::in_source("update").field(column),
                format!("no column {column}"),
            ));
        }
    }
    Ok(schema
        .fields
        .iter()
        .map(|field| {
            let expression = assignments
                .iter()
                .find(|(column, _)| column == &field.name)
                .map(|(_, expression)| expression.clone())
                .unwrap_or_else(|| quote_identifier(&field.name));
            (field.name.clone(), expression)
        })
        .collect())
}

async fn merge_by_key(
    base: &Arc<Dataset>,
    key: &str,
    batches: Vec<RecordBatch>,
    when_not_matched: WhenNotMatched,
    kind: LinkKind,
    origin: &LinkOrigin,
) -> Result<StagedLink> {
    let mut builder = MergeInsertBuilder::try_new(base.clone(), vec![key.to_string()])
        .map_err(|error| read_error(format!("merge on {key}"), error))?;
    builder
        .when_matched(WhenMatched::UpdateAll)
        .when_not_matched(when_not_matched);
    let job = builder
        .try_build()
        .map_err(|error| read_error(format!("merge on {key}"), error))?;
    let uncommitted = job
        .execute_uncommitted_batches(batches)
        .await
        .map_err(|error| write_error(format!("merge on {key}"), error))?;
    let rows = uncommitted.stats.num_inserted_rows + uncommitted.stats.num_updated_rows;
    commit_link(base, uncommitted.transaction, origin, kind, rows).await
}

pub(super) fn cast_to(
    batch: &RecordBatch,
    target: &arrow_schema::SchemaRef,
) -> Result<RecordBatch> {
    let columns = target
        .fields()
        .iter()
        .zip(batch.columns())
        .map(|(field, column)| {
            arrow::compute::cast(column, field.data_type()).map_err(|error| {
                OmniError::bad_input(
                    InputLocation::in_source("update").field(field.name().clone()),
                    format!("the new value does not fit {}: {error}", field.data_type()),
                )
            })
        })
        .collect::<Result<Vec<_>>>()?;
    RecordBatch::try_new(target.clone(), columns)
        .map_err(|error| OmniError::internal(format!("updated rows do not fit the table: {error}")))
}

/// A bad predicate or expression is the caller's input; anything else is storage.
pub(super) fn classify_predicate_error(
    predicate: &str,
    what: &str,
    error: lance::Error,
) -> OmniError {
    match &error {
        lance::Error::InvalidInput { .. }
        | lance::Error::Schema { .. }
        | lance::Error::FieldNotFound { .. } => OmniError::bad_input(
            InputLocation::in_source(format!("{what} predicate")),
            format!("{predicate:?}: {error}"),
        ),
        _ => staged(OmniError::from_lance(
            format!("{what} where {predicate}"),
            error,
        )),
    }
}

fn quote_identifier(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}
