//! Creating a table and opening it at an exact version.

use super::{LinkOrigin, PROP_BASE_SEQ, PROP_BASE_VERSION, PROP_BRANCH, read_error};
use crate::error::{OmniError, Result};
use crate::failpoints;
use crate::storage::StorageRoot;
use arrow_array::{RecordBatch, RecordBatchIterator};
use arrow_schema::SchemaRef;
use lance::Dataset;
use lance::dataset::builder::DatasetBuilder;
use lance::dataset::{WriteMode, WriteParams};
use std::sync::Arc;

/// Creates an empty table at `relative` (e.g. `tables/<id>`) in `root`, with the
/// type's Arrow schema, stable row ids, V2 manifest paths and no auto-cleanup. This is
/// the table's whole linear history: version 1.
pub async fn create_table(
    root: &StorageRoot,
    relative: &str,
    schema: SchemaRef,
) -> Result<Arc<Dataset>> {
    let dataset = create_table_at_uri(&root.lance_uri(relative), schema, Some(root)).await?;
    Ok(Arc::new(dataset))
}

/// Creates an empty dataset at `uri` with the engine's table settings; within `root`'s
/// store parameters and session when given.
pub(super) async fn create_table_at_uri(
    uri: &str,
    schema: SchemaRef,
    root: Option<&StorageRoot>,
) -> Result<Dataset> {
    let params = WriteParams {
        mode: WriteMode::Create,
        enable_stable_row_ids: true,
        enable_v2_manifest_paths: true,
        auto_cleanup: None,
        skip_auto_cleanup: true,
        store_params: root.map(|root| root.store_params().clone()),
        session: root.map(StorageRoot::session),
        ..Default::default()
    };
    failpoints::reach(failpoints::CREATE_BEFORE_COMMIT).await?;
    let empty = RecordBatchIterator::new(Vec::<std::result::Result<RecordBatch, _>>::new(), schema);
    Dataset::write(empty, uri, Some(params))
        .await
        .map_err(|error| {
            OmniError::from_lance(format!("create table {uri}"), error)
                .with_evidence(crate::Evidence::Unpublished)
        })
}

/// Opens the table at `relative` at exactly `version` (linear or detached).
pub async fn open_table_at(
    root: &StorageRoot,
    relative: &str,
    version: u64,
) -> Result<Arc<Dataset>> {
    let dataset = DatasetBuilder::from_uri(root.lance_uri(relative).as_str())
        .with_session(root.session())
        .with_store_params(root.store_params().clone())
        .with_version(version)
        .load()
        .await
        .map_err(|error| {
            read_error(format!("open table {relative} at version {version}"), error)
        })?;
    // Lance refuses a manifest that holds another version than the one asked for
    // (`a_manifest_holding_another_version_is_refused`); checked here too, as every
    // pinned read relies on it and a Lance upgrade could drop its check.
    let opened = super::version_of(&dataset);
    if opened != version {
        return Err(crate::OmniError::corrupt(
            relative,
            format!("the manifest of version {version} holds version {opened}"),
        ));
    }
    Ok(Arc::new(dataset))
}

/// The origin a staged version recorded, or `None` for a version the engine did not
/// stage (the creation, or a foreign commit).
pub async fn read_link_origin(dataset: &Dataset) -> Result<Option<LinkOrigin>> {
    let transaction = dataset
        .read_transaction()
        .await
        .map_err(|error| read_error("read transaction", error))?;
    let Some(properties) = transaction.and_then(|txn| txn.transaction_properties) else {
        return Ok(None);
    };
    let field = |name: &str| properties.get(name).cloned();
    let (Some(branch), Some(base_seq), Some(base_version)) = (
        field(PROP_BRANCH),
        field(PROP_BASE_SEQ),
        field(PROP_BASE_VERSION),
    ) else {
        return Ok(None);
    };
    let number = |name: &str, text: &str| {
        text.parse::<u64>().map_err(|_| {
            OmniError::corrupt(
                format!("transaction of version {}", dataset.manifest().version),
                format!("property {name} is {text:?}, not a number"),
            )
        })
    };
    Ok(Some(LinkOrigin {
        branch,
        base_seq: number(PROP_BASE_SEQ, &base_seq)?,
        base_version: number(PROP_BASE_VERSION, &base_version)?,
    }))
}
