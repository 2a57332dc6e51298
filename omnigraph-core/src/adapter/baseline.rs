//! Lance's own linear path, for benchmarks only: a plain Lance dataset written by
//! linear appends, indexed on main, and compacted with `compact_files` then
//! `optimize_indices`. It is what `cargo xtask bench` compares optimize against; it is
//! never used on a graph's tables (it moves the linear lineage).

use super::read_error;
use super::table::create_table_at_uri;
use crate::error::{OmniError, Result};
use arrow_array::{RecordBatch, RecordBatchIterator};
use arrow_schema::SchemaRef;
use lance::Dataset;
use lance::dataset::optimize::{CompactionOptions, compact_files};
use lance::dataset::{WriteMode, WriteParams};
use lance::index::DatasetIndexExt;
use lance::index::vector::VectorIndexParams;
use lance_index::IndexType;
use lance_index::optimize::OptimizeOptions;
use lance_index::scalar::ScalarIndexParams;
use lance_linalg::distance::MetricType;

/// Creates a plain Lance dataset at a local `path` (stable row ids, V2 manifests).
pub async fn baseline_create(path: &str, schema: SchemaRef) -> Result<Dataset> {
    create_table_at_uri(path, schema, None).await
}

/// Writes `batches` as a new plain Lance dataset at a local `path` in one call
/// (`Dataset::write`, stable row ids): what a user of Lance alone does with rows
/// already in Arrow, and what loads are measured against.
pub async fn baseline_write(
    path: &str,
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
) -> Result<Dataset> {
    let params = WriteParams {
        mode: WriteMode::Create,
        enable_stable_row_ids: true,
        enable_v2_manifest_paths: true,
        ..Default::default()
    };
    let reader = RecordBatchIterator::new(batches.into_iter().map(Ok), schema);
    Dataset::write(reader, path, Some(params))
        .await
        .map_err(|error| read_error("baseline write", error))
}

/// Appends on the linear lineage (a new main version).
pub async fn baseline_append(dataset: &mut Dataset, batch: RecordBatch) -> Result<()> {
    let schema = batch.schema();
    let params = WriteParams {
        mode: WriteMode::Append,
        ..Default::default()
    };
    dataset
        .append(
            RecordBatchIterator::new(vec![Ok(batch)], schema),
            Some(params),
        )
        .await
        .map_err(|error| read_error("baseline append", error))
}

/// Builds a BTree on `key` and an IVF_FLAT with `partitions` on `vector`, on main.
pub async fn baseline_index(
    dataset: &mut Dataset,
    key: &str,
    vector: &str,
    partitions: usize,
) -> Result<()> {
    dataset
        .create_index_builder(&[key], IndexType::BTree, &ScalarIndexParams::default())
        .name(format!("{key}_btree"))
        .await
        .map_err(|error| read_error("baseline btree", error))?;
    let params = VectorIndexParams::ivf_flat(partitions, MetricType::L2);
    dataset
        .create_index_builder(&[vector], IndexType::Vector, &params)
        .name(format!("{vector}_vector"))
        .await
        .map_err(|error| read_error("baseline ivf", error))?;
    Ok(())
}

/// Lance's own maintenance: `compact_files`, then `optimize_indices`.
pub async fn baseline_compact_and_optimize_indices(
    dataset: &mut Dataset,
    io_buffer_bytes: u64,
) -> Result<()> {
    #[allow(deprecated)]
    let options = CompactionOptions {
        io_buffer_size: Some(io_buffer_bytes),
        num_threads: Some(1),
        ..Default::default()
    };
    compact_files(dataset, options, None)
        .await
        .map_err(|error| read_error("baseline compact_files", error))?;
    dataset
        .optimize_indices(&OptimizeOptions::default())
        .await
        .map_err(|error| OmniError::from_lance("baseline optimize_indices", error))
}
