//! A whole table of one type at a commit, as a stream of record batches in the type's
//! columns: what an export reads. Only the batches in flight and a bounded read-ahead
//! are held (`EXPORT_BATCH_ROWS_MAX`, `EXPORT_READ_AHEAD_BYTES_MAX`), so a table of any
//! size streams in bounded memory. An export is written in a format `load` reads back:
//! JSON lines in the load format, an Arrow IPC file or a Parquet file.

use crate::graph::CommitRef;
use crate::limits::{EXPORT_BATCH_ROWS_MAX, EXPORT_READ_AHEAD_BYTES_MAX};
use crate::omnigraph::Omnigraph;
use futures::stream::{BoxStream, StreamExt};
use omnigraph_core::arrow_array::RecordBatch;
use omnigraph_core::arrow_schema::SchemaRef;
use omnigraph_core::{OmniError, Result};
use serde_json::{Map, Value};
use std::io::Write;

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

/// A format an export is written in; `load` reads each back as it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportFormat {
    /// JSON lines in the load format: one `{"type": T, ...}` per row.
    JsonLines,
    /// An Arrow IPC file in the type's columns.
    ArrowFile,
    /// A Parquet file in the type's columns.
    Parquet,
}

/// The rows of `batch`, of type `type_name`, as JSON lines in the load format: one
/// `{"type": T, ...}` object per row, each ended by a newline.
pub fn json_lines(type_name: &str, batch: &RecordBatch) -> Result<Vec<u8>> {
    let type_name = Value::String(type_name.to_owned());
    let mut bytes = Vec::new();
    for row in crate::rows::batches_to_json(std::slice::from_ref(batch)) {
        let mut line = Map::with_capacity(row.len() + 1);
        line.insert("type".to_owned(), type_name.clone());
        line.extend(row);
        serde_json::to_writer(&mut bytes, &line)
            .map_err(|error| OmniError::internal(error.to_string()))?;
        bytes.push(b'\n');
    }
    Ok(bytes)
}

impl Export {
    /// Writes every row to `out` in `format`, telling `progress` the rows written after
    /// each batch; gives `out` back with the rows written. A stream that ends with
    /// other than [`Export::rows`] rows is an internal error, never a short file
    /// reported whole. What `out` holds after a failure is partial: write to a
    /// temporary place and move it into place after success.
    pub async fn write_to<W: Write + Send>(
        mut self,
        format: ExportFormat,
        out: W,
        mut progress: impl FnMut(u64),
    ) -> Result<(W, u64)> {
        let mut sink = Sink::new(format, out, &self.schema)?;
        let mut written: u64 = 0;
        while let Some(batch) = self.stream.next().await {
            let batch = batch?;
            sink.write(&self.type_name, &batch)?;
            written += batch.num_rows() as u64;
            progress(written);
        }
        if written != self.rows {
            return Err(OmniError::internal(format!(
                "the export of {} at commit {} read {written} rows, but the commit pins {}",
                self.type_name, self.seq, self.rows
            )));
        }
        Ok((sink.finish()?, written))
    }
}

/// Where written rows go, in one format.
enum Sink<W: Write + Send> {
    JsonLines(W),
    ArrowFile(arrow::ipc::writer::FileWriter<W>),
    Parquet(parquet::arrow::ArrowWriter<W>),
}

impl<W: Write + Send> Sink<W> {
    fn new(format: ExportFormat, out: W, schema: &SchemaRef) -> Result<Sink<W>> {
        Ok(match format {
            ExportFormat::JsonLines => Sink::JsonLines(out),
            ExportFormat::ArrowFile => Sink::ArrowFile(
                arrow::ipc::writer::FileWriter::try_new(out, schema).map_err(arrow_failed)?,
            ),
            ExportFormat::Parquet => Sink::Parquet(
                parquet::arrow::ArrowWriter::try_new(out, schema.clone(), None)
                    .map_err(parquet_failed)?,
            ),
        })
    }

    fn write(&mut self, type_name: &str, batch: &RecordBatch) -> Result<()> {
        match self {
            Sink::JsonLines(out) => out
                .write_all(&json_lines(type_name, batch)?)
                .map_err(|error| OmniError::from_io("write an export", error)),
            Sink::ArrowFile(writer) => writer.write(batch).map_err(arrow_failed),
            Sink::Parquet(writer) => writer.write(batch).map_err(parquet_failed),
        }
    }

    /// Ends the format (the Arrow file's footer, Parquet's metadata) and flushes.
    fn finish(self) -> Result<W> {
        let mut out = match self {
            Sink::JsonLines(out) => out,
            Sink::ArrowFile(mut writer) => {
                writer.finish().map_err(arrow_failed)?;
                writer.into_inner().map_err(arrow_failed)?
            }
            Sink::Parquet(writer) => writer.into_inner().map_err(parquet_failed)?,
        };
        out.flush()
            .map_err(|error| OmniError::from_io("write an export", error))?;
        Ok(out)
    }
}

/// An Arrow writer's failure: its I/O classified, the rest internal.
fn arrow_failed(error: arrow::error::ArrowError) -> OmniError {
    match error {
        arrow::error::ArrowError::IoError(_, error) => OmniError::from_io("write an export", error),
        other => OmniError::internal(format!("write an export as Arrow: {other}")),
    }
}

/// A Parquet writer's failure: its I/O classified, the rest internal.
fn parquet_failed(error: parquet::errors::ParquetError) -> OmniError {
    match error {
        parquet::errors::ParquetError::External(source) => {
            match source.downcast::<std::io::Error>() {
                Ok(error) => OmniError::from_io("write an export", *error),
                Err(source) => OmniError::internal(format!("write an export as Parquet: {source}")),
            }
        }
        other => OmniError::internal(format!("write an export as Parquet: {other}")),
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
