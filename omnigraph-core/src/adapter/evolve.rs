//! Schema evolution links: metadata-only, so no data file is rewritten.
//!
//! Adding an optional column is a Merge over the same fragments with the wider schema:
//! Lance reads a column with no data file as nulls. Dropping a column is a Project to
//! the narrower schema. Dropping an index is a CreateIndex that only removes.

use super::{LinkKind, LinkOrigin, StagedLink, commit_link, read_error};
use crate::error::Result;
use lance::Dataset;
use lance::dataset::transaction::{Operation, TransactionBuilder};
use lance::index::DatasetIndexExt;
use std::sync::Arc;

/// Stages new nullable columns that every existing row reads as null.
pub async fn stage_add_null_columns(
    base: &Arc<Dataset>,
    fields: Vec<arrow_schema::Field>,
    origin: &LinkOrigin,
) -> Result<StagedLink> {
    let added = arrow_schema::Schema::new(fields);
    let mut schema = base
        .schema()
        .merge(&added)
        .map_err(|error| read_error("widen the table schema", error))?;
    schema
        .try_set_field_id(Some(base.manifest().max_field_id()))
        .map_err(|error| read_error("assign field ids", error))?;
    let operation = Operation::Merge {
        fragments: base.manifest().fragments.as_ref().clone(),
        schema,
        preserves_nullability: true,
    };
    let transaction = TransactionBuilder::new(super::version_of(base), operation).build();
    commit_link(base, transaction, origin, LinkKind::Evolve, 0).await
}

/// Stages the removal of `columns` from the table's schema.
pub async fn stage_drop_columns(
    base: &Arc<Dataset>,
    columns: &[String],
    origin: &LinkOrigin,
) -> Result<StagedLink> {
    let remaining: Vec<String> = base
        .schema()
        .fields
        .iter()
        .map(|field| field.name.clone())
        .filter(|name| !columns.contains(name))
        .collect();
    let schema = base
        .schema()
        .project(&remaining)
        .map_err(|error| read_error("narrow the table schema", error))?;
    // A drop changes no column's nullability.
    let operation = Operation::Project {
        schema,
        preserves_nullability: true,
    };
    let transaction = TransactionBuilder::new(super::version_of(base), operation).build();
    commit_link(base, transaction, origin, LinkKind::Evolve, 0).await
}

/// Stages a change of nullability for `columns`: `nullable = false` makes them
/// required (the caller has checked that no row holds a null), `true` optional.
pub async fn stage_set_nullability(
    base: &Arc<Dataset>,
    columns: &[String],
    nullable: bool,
    origin: &LinkOrigin,
) -> Result<StagedLink> {
    let mut schema = base.schema().clone();
    for field in schema.fields.iter_mut() {
        if columns.contains(&field.name) {
            field.nullable = nullable;
        }
    }
    let operation = Operation::Project {
        schema,
        preserves_nullability: false,
    };
    let transaction = TransactionBuilder::new(super::version_of(base), operation).build();
    commit_link(base, transaction, origin, LinkKind::Evolve, 0).await
}

/// Stages the removal of the index named `name`; `None` when the table has none.
pub async fn stage_drop_index(
    base: &Arc<Dataset>,
    name: &str,
    origin: &LinkOrigin,
) -> Result<Option<StagedLink>> {
    let removed_indices: Vec<_> = base
        .load_indices()
        .await
        .map_err(|error| read_error("list indexes", error))?
        .iter()
        .filter(|index| index.name == name)
        .cloned()
        .collect();
    if removed_indices.is_empty() {
        return Ok(None);
    }
    let operation = Operation::CreateIndex {
        new_indices: Vec::new(),
        removed_indices,
    };
    let transaction = TransactionBuilder::new(super::version_of(base), operation).build();
    commit_link(base, transaction, origin, LinkKind::CreateIndex, 0)
        .await
        .map(Some)
}
