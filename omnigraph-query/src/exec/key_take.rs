//! A node's row read by its key from the place a warm handle's key cache holds for it:
//! Lance's take of one row address, without its filtered read or the key's index.

use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use omnigraph_core::lance::Dataset;
use omnigraph_core::lance::dataset::{ProjectionRequest, TakeBuilder};
use std::sync::Arc;

/// A key's row, with the columns of `schema`.
#[derive(Debug)]
pub(crate) struct KeyTakeExec {
    dataset: Arc<Dataset>,
    row: KeyRow,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
}

/// Where a key's row is, as the key cache says.
#[derive(Clone, Debug)]
pub(crate) enum KeyRow {
    /// The table lacks the key.
    Absent,
    /// The row at this address, read by Lance's take.
    At(u64),
    /// The row exists and its one column asked is the key: the key itself (one value of
    /// the column's type), read from nothing.
    KeyOnly(ArrayRef),
}

impl KeyTakeExec {
    pub(crate) fn new(dataset: Arc<Dataset>, row: KeyRow, schema: SchemaRef) -> Self {
        KeyTakeExec {
            dataset,
            row,
            properties: Arc::new(super::one_partition(schema.clone())),
            schema,
        }
    }
}

impl DisplayAs for KeyTakeExec {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match &self.row {
            KeyRow::Absent => write!(f, "KeyTakeExec: absent"),
            KeyRow::At(address) => write!(f, "KeyTakeExec: address={address}"),
            KeyRow::KeyOnly(_) => write!(f, "KeyTakeExec: the key alone"),
        }
    }
}

impl ExecutionPlan for KeyTakeExec {
    fn name(&self) -> &str {
        "KeyTakeExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        super::leaf_with_no_children(self, &children, "a key's take")
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "a key's take has one partition, not {partition}"
            )));
        }
        let (dataset, row, schema) = (self.dataset.clone(), self.row.clone(), self.schema.clone());
        let read = async move {
            match row {
                KeyRow::Absent => Ok(RecordBatch::new_empty(schema)),
                KeyRow::KeyOnly(key) => Ok(RecordBatch::try_new(schema, vec![key])?),
                KeyRow::At(address) => take_row(dataset, address, schema).await,
            }
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            futures::stream::once(read),
        )))
    }
}

/// The row at `address` of `dataset`, with the columns of `schema`.
async fn take_row(dataset: Arc<Dataset>, address: u64, schema: SchemaRef) -> Result<RecordBatch> {
    let lance = |error| DataFusionError::External(Box::new(error));
    let columns = schema.fields().iter().map(|field| field.name().clone());
    let projection = ProjectionRequest::from_columns(columns, dataset.schema())
        .into_projection_plan(dataset.clone())
        .map_err(lance)?;
    let batch = TakeBuilder::try_new_from_addresses(dataset, vec![address], Arc::new(projection))
        .map_err(lance)?
        .execute()
        .await
        .map_err(lance)?;
    // By name: Lance's columns come in the table's order.
    let mut columns = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let column = batch.column_by_name(field.name()).ok_or_else(|| {
            DataFusionError::Internal(format!("Lance's take gave no column {}", field.name()))
        })?;
        columns.push(column.clone());
    }
    let batch = RecordBatch::try_new(schema, columns)?;
    // One key is at most one row.
    assert!(
        batch.num_rows() <= 1,
        "a key's take gave {} rows",
        batch.num_rows()
    );
    Ok(batch)
}
