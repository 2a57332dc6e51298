//! A whole table of one type at a commit, as a stream of record batches in the type's
//! columns: what an export reads. Only the batches in flight and a bounded read-ahead
//! are held (`EXPORT_BATCH_ROWS_MAX`, `EXPORT_READ_AHEAD_BYTES_MAX`), so a table of any
//! size streams in bounded memory.

use crate::graph::CommitRef;
use crate::limits::{EXPORT_BATCH_ROWS_MAX, EXPORT_READ_AHEAD_BYTES_MAX};
use crate::omnigraph::Omnigraph;
use futures::stream::{BoxStream, StreamExt};
use omnigraph_core::arrow_array::RecordBatch;
use omnigraph_core::arrow_schema::SchemaRef;
use omnigraph_core::{OmniError, Result};

/// The rows of one type at one commit, as they stream.
pub struct Export {
    type_name: String,
    rows: u64,
    seq: u64,
    commit_id: String,
    schema: SchemaRef,
    stream: BoxStream<'static, Result<RecordBatch>>,
}

impl std::fmt::Debug for Export {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Export")
            .field("type_name", &self.type_name)
            .field("seq", &self.seq)
            .field("commit_id", &self.commit_id)
            .finish_non_exhaustive()
    }
}

impl Export {
    /// The type whose rows these are.
    pub fn type_name(&self) -> &str {
        &self.type_name
    }

    /// How many rows the stream holds (as the commit's pin records them, before a row
    /// is read): a reader that got fewer was cut off.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The seq of the commit read.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The id of the commit read.
    pub fn commit_id(&self) -> &str {
        &self.commit_id
    }

    /// The type's columns, as the schema at the commit declares them: every batch has
    /// exactly these.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// The next batch, or `None` after the last.
    pub async fn next(&mut self) -> Option<Result<RecordBatch>> {
        self.stream.next().await
    }

    /// The batches as a stream, for a caller that forwards them.
    pub fn into_stream(self) -> BoxStream<'static, Result<RecordBatch>> {
        self.stream
    }
}

impl Omnigraph {
    /// Every row of `type_name` at `at` (the branch's head or one of its commits), in
    /// the type's columns as the schema at that commit has them. A table whose columns
    /// read back differ from the schema's is an internal error, never rows in another
    /// shape.
    pub async fn export(&self, type_name: &str, at: &CommitRef) -> Result<Export> {
        let commit = self.graph().commit(self.branch(), at).await?;
        let catalog = self.catalog_at(&commit).await?;
        let schema = catalog.require(type_name)?.arrow_schema();
        let table = self.table_of_type(&commit, type_name).await?;
        let columns: Vec<String> = schema
            .fields()
            .iter()
            .map(|field| field.name().clone())
            .collect();
        // The commit records the rows its pin holds: no read of the table's metadata.
        let rows = commit.require_pin_of_type(type_name)?.row_count;
        let mut scanner = table.scan();
        scanner
            .project(&columns)
            .map_err(|error| OmniError::from_lance("export", error))?;
        scanner
            .batch_size(EXPORT_BATCH_ROWS_MAX)
            .io_buffer_size(EXPORT_READ_AHEAD_BYTES_MAX);
        let batches = scanner
            .try_into_stream()
            .await
            .map_err(|error| OmniError::from_lance("export", error))?;
        let expected = schema.clone();
        let uri = table.uri().to_owned();
        let stream = batches
            .map(move |batch| {
                let batch = batch.map_err(|error| OmniError::from_lance("export", error))?;
                in_schema(&expected, batch, &uri)
            })
            .boxed();
        Ok(Export {
            type_name: type_name.to_owned(),
            rows,
            seq: commit.seq,
            commit_id: commit.commit_id.clone(),
            schema,
            stream,
        })
    }
}

/// `batch` as a batch of `schema`: the same column names and types, in order, and no
/// null in a column the schema says holds none.
fn in_schema(schema: &SchemaRef, batch: RecordBatch, uri: &str) -> Result<RecordBatch> {
    let read = batch.schema();
    let same = read.fields().len() == schema.fields().len()
        && read
            .fields()
            .iter()
            .zip(schema.fields())
            .all(|(read, declared)| {
                read.name() == declared.name() && read.data_type() == declared.data_type()
            });
    if !same {
        return Err(OmniError::internal(format!(
            "the table {uri} read back columns {read:?}, not the schema's {schema:?}"
        )));
    }
    RecordBatch::try_new(schema.clone(), batch.columns().to_vec()).map_err(|error| {
        OmniError::internal(format!(
            "the table {uri} read back rows its schema does not allow: {error}"
        ))
    })
}
