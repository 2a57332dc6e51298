//! Loads from columnar files: CSV, Parquet and Arrow IPC, one type per file, read by arrow's own
//! readers in bounded batches and staged as Arrow ([`crate::rows::rows_from_batch`]),
//! never through JSON. JSONL stays in `crate::jsonl`.

use crate::ingest::{Ingest, IngestReport, LoadMode};
use crate::limits::CSV_HEADER_BYTES_MAX;
use crate::omnigraph::{LoadProgress, Omnigraph};
use crate::read_ahead::ReadAhead;
use omnigraph_core::arrow_array::RecordBatch;
use omnigraph_core::arrow_schema::{Field, Schema};
use omnigraph_core::schema::TypeDef;
use omnigraph_core::{InputLocation, OmniError, Result};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Rows per batch read from a columnar file (the ingest batch size).
pub(crate) const COLUMNAR_BATCH_ROWS: usize = crate::limits::INGEST_BATCH_ROWS_MAX;

/// The format of a file to load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputFormat {
    /// JSON lines, each with its `type`.
    Jsonl,
    /// CSV with a header line, one type per file.
    Csv,
    /// An Arrow IPC file, one type per file.
    ArrowIpc,
    /// A Parquet file, one type per file.
    Parquet,
}

impl InputFormat {
    /// The format a file's extension names: `.csv`, `.parquet`, `.arrow`/`.ipc`/
    /// `.feather`, else JSONL.
    pub fn of_path(path: &Path) -> InputFormat {
        let extension = path
            .extension()
            .and_then(|extension| extension.to_str())
            .map(str::to_ascii_lowercase);
        match extension.as_deref() {
            Some("csv") => InputFormat::Csv,
            Some("parquet") => InputFormat::Parquet,
            Some("arrow" | "ipc" | "feather") => InputFormat::ArrowIpc,
            _ => InputFormat::Jsonl,
        }
    }
}

impl Omnigraph {
    /// Loads a CSV, Parquet or Arrow IPC file of rows of `type_name`, in one commit. Columns are
    /// the type's properties by name, in any order; a missing nullable one is null. A
    /// bad value or row fails the load, naming the file and the row, and publishes
    /// nothing.
    pub async fn load_columnar(
        &self,
        path: &Path,
        format: InputFormat,
        type_name: &str,
        mode: LoadMode,
    ) -> Result<IngestReport> {
        self.load_columnar_with_progress(path, format, type_name, mode, |_| {})
            .await
    }

    /// [`Omnigraph::load_columnar`], calling `progress` after each batch read: the
    /// bytes of the file read so far (CSV and Arrow IPC as read; Parquet by the row
    /// groups whose rows have been read) and the rows.
    pub async fn load_columnar_with_progress(
        &self,
        path: &Path,
        format: InputFormat,
        type_name: &str,
        mode: LoadMode,
        mut progress: impl FnMut(&LoadProgress),
    ) -> Result<IngestReport> {
        let name = path.display().to_string();
        let bad = |message: String| {
            OmniError::bad_input(
                InputLocation::in_source(&name).type_name(type_name),
                message,
            )
        };
        let base = self.head().await?;
        let catalog = self.catalog_at(&base).await?;
        let type_def = catalog.require(type_name)?.clone();
        let file = crate::read_ahead::open_input(path)
            .await
            .map_err(|error| bad(format!("cannot open: {error}")))?;
        let total_bytes = file
            .metadata()
            .ok()
            .filter(std::fs::Metadata::is_file)
            .map(|meta| meta.len());
        let read = Arc::new(AtomicU64::new(0));
        // Parquet: the compressed size and rows of each row group, in file order.
        let mut row_groups: Vec<(u64, u64)> = Vec::new();
        let mut expected_rows = None;
        let batches: Batches = match format {
            InputFormat::Csv => csv_batches(&type_def, Counted::new(file, read.clone()), &bad)?,
            InputFormat::ArrowIpc => {
                let reader =
                    arrow::ipc::reader::FileReader::try_new(Counted::new(file, read.clone()), None)
                        .map_err(|error| bad(format!("not an Arrow IPC file: {error}")))?;
                Box::new(reader.map(|batch| batch.map_err(ReadFailure::of)))
            }
            InputFormat::Parquet => {
                let builder =
                    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                        .map_err(|error| bad(format!("not a Parquet file: {error}")))?;
                row_groups = builder
                    .metadata()
                    .row_groups()
                    .iter()
                    .map(|group| {
                        (
                            u64::try_from(group.compressed_size()).unwrap_or(0),
                            u64::try_from(group.num_rows()).unwrap_or(0),
                        )
                    })
                    .collect();
                expected_rows = u64::try_from(builder.metadata().file_metadata().num_rows()).ok();
                let reader = builder
                    .with_batch_size(COLUMNAR_BATCH_ROWS)
                    .build()
                    .map_err(|error| bad(format!("cannot read the Parquet file: {error}")))?;
                Box::new(reader.map(|batch| batch.map_err(ReadFailure::of)))
            }
            InputFormat::Jsonl => {
                return Err(bad("a JSONL file is loaded with Omnigraph::load".into()));
            }
        };
        let mut rows = 0u64;
        // Decoded on a thread of its own, beside the checks of the batches before.
        let batches = ReadAhead::start(until_failed(batches))?;
        let mut ingest = Ingest::start(self, mode).await?;
        if let Some(rows) = expected_rows {
            ingest.expect_rows(type_name, rows);
        }
        let pushed = ingest
            .push_batches(type_name, &name, batches, |batch| {
                if let Ok(batch) = batch {
                    rows += batch.num_rows() as u64;
                }
                let bytes_read = if row_groups.is_empty() {
                    read.load(Ordering::Relaxed)
                } else {
                    parquet_bytes_read(&row_groups, rows)
                };
                progress(&LoadProgress {
                    bytes_read,
                    total_bytes,
                    rows,
                });
            })
            .await;
        let loaded = match pushed {
            Ok(()) => ingest.finish("load").await,
            Err(error) => Err(error),
        };
        match (loaded, format) {
            (Err(error), InputFormat::Csv) => Err(at_csv_line(error, path)),
            (loaded, _) => loaded,
        }
    }
}

/// A file's reader: its batches, or what went wrong reading them.
type Batches = Box<dyn Iterator<Item = std::result::Result<RecordBatch, ReadFailure>> + Send>;

/// `error` naming the line of the CSV file at `path` where the row it names starts, as
/// a text editor numbers lines (the header is line 1), in place of the row.
fn at_csv_line(mut error: OmniError, path: &Path) -> OmniError {
    let location = match &mut error {
        OmniError::BadInput { location, .. } => Some(location.as_mut()),
        OmniError::KeyConflict { location, .. } => location.as_deref_mut(),
        _ => None,
    };
    if let Some(location) = location
        && location.line.is_none()
        && let Some(row) = location.row
        && let Some(line) = csv_line_of_row(path, row)
    {
        location.line = Some(line);
        location.row = None;
    }
    error
}

/// `batches` up to and with the first error: a reader that failed is not asked again.
fn until_failed(batches: Batches) -> Batches {
    let mut failed = false;
    Box::new(batches.map_while(move |batch| {
        if failed {
            return None;
        }
        failed = batch.is_err();
        Some(batch)
    }))
}

/// The bytes of the row groups whose rows are all read, given each group's compressed
/// size and rows in file order.
fn parquet_bytes_read(row_groups: &[(u64, u64)], rows_read: u64) -> u64 {
    let mut rows_left = rows_read;
    let mut bytes = 0;
    for (group_bytes, group_rows) in row_groups {
        if rows_left < *group_rows {
            break;
        }
        rows_left -= group_rows;
        bytes += group_bytes;
    }
    bytes
}

/// A file that counts the bytes read from it.
struct Counted {
    file: std::fs::File,
    read: Arc<AtomicU64>,
}

impl Counted {
    fn new(file: std::fs::File, read: Arc<AtomicU64>) -> Counted {
        Counted { file, read }
    }
}

impl std::io::Read for Counted {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let count = self.file.read(buf)?;
        self.read.fetch_add(count as u64, Ordering::Relaxed);
        Ok(count)
    }
}

impl std::io::Seek for Counted {
    fn seek(&mut self, position: std::io::SeekFrom) -> std::io::Result<u64> {
        self.file.seek(position)
    }
}

/// A CSV reader whose schema is the type's properties in the file's header order.
fn csv_batches(
    type_def: &TypeDef,
    file: Counted,
    bad: &dyn Fn(String) -> OmniError,
) -> Result<Batches> {
    use std::io::{BufRead, Read, Seek};
    let mut reader = std::io::BufReader::new(file);
    let mut header = String::new();
    reader
        .by_ref()
        .take(CSV_HEADER_BYTES_MAX as u64)
        .read_line(&mut header)
        .map_err(|error| bad(format!("cannot read the header: {error}")))?;
    if !header.ends_with('\n') && header.len() >= CSV_HEADER_BYTES_MAX {
        return Err(bad(format!(
            "the header line is longer than {CSV_HEADER_BYTES_MAX} bytes"
        )));
    }
    let table = type_def.arrow_schema();
    let mut fields: Vec<Field> = Vec::new();
    // Columns (by position in the header) whose empty field is the empty string: the
    // required String properties other than the key. Arrow's reader makes every empty
    // field null, and such a property cannot be null, so the field can only mean "".
    // An optional property's empty field stays null, and a key is never empty.
    let mut empty_is_text: Vec<usize> = Vec::new();
    // A spreadsheet's UTF-8 export starts with a byte order mark.
    let header = header.trim_start_matches('\u{feff}');
    for name in header.trim_end_matches(['\r', '\n']).split(',') {
        let name = name.trim().trim_matches('"');
        if fields.iter().any(|field| field.name() == name) {
            return Err(bad(format!("the header names {name:?} twice")));
        }
        let field = table.field_with_name(name).map_err(|_| {
            bad(format!(
                "the header names {name:?}, which is not a property of {}",
                type_def.name()
            ))
        })?;
        if !matches!(
            field.data_type(),
            arrow::datatypes::DataType::Utf8
                | arrow::datatypes::DataType::Boolean
                | arrow::datatypes::DataType::Int32
                | arrow::datatypes::DataType::Int64
                | arrow::datatypes::DataType::Float32
                | arrow::datatypes::DataType::Float64
                | arrow::datatypes::DataType::Timestamp(..)
        ) {
            return Err(bad(format!(
                "{name} is a {} and CSV cannot hold it: load it from JSONL or Arrow",
                field.data_type()
            )));
        }
        let required_text = type_def.properties().iter().any(|property| {
            property.name == name
                && !property.optional
                && !property.key
                && property.data_type == omnigraph_core::schema::PropertyType::String
        });
        if required_text {
            empty_is_text.push(fields.len());
        }
        // Nullable here: a missing required value is reported by the row checks,
        // naming its row.
        fields.push(field.as_ref().clone().with_nullable(true));
    }
    // Read as text, then parsed column by column: a value that does not parse is
    // refused naming its row and field (the load names its line), where arrow's own
    // parser named only the batch.
    let text_fields: Vec<Field> = fields
        .iter()
        .map(|field| Field::new(field.name(), arrow::datatypes::DataType::Utf8, true))
        .collect();
    let typed = Arc::new(Schema::new(fields));
    reader
        .rewind()
        .map_err(|error| bad(format!("cannot read: {error}")))?;
    // The header is read again with the rows: count it once.
    reader.get_ref().read.store(0, Ordering::Relaxed);
    let csv = arrow::csv::ReaderBuilder::new(Arc::new(Schema::new(text_fields)))
        .with_header(true)
        .with_batch_size(COLUMNAR_BATCH_ROWS)
        .build(reader)
        .map_err(|error| bad(format!("cannot read as CSV: {error}")))?;
    Ok(Box::new(csv.map(move |batch| {
        let batch = batch.map_err(ReadFailure::of)?;
        let batch = empty_fields_as_text(batch, &empty_is_text).map_err(ReadFailure::from)?;
        parsed(&batch, &typed)
    })))
}

/// A CSV batch of text, parsed into `typed` column by column.
fn parsed(
    batch: &RecordBatch,
    typed: &Arc<Schema>,
) -> std::result::Result<RecordBatch, ReadFailure> {
    let mut columns = Vec::with_capacity(batch.num_columns());
    for (text, field) in batch.columns().iter().zip(typed.fields()) {
        let column =
            crate::conform::parse_text(text, field.data_type()).map_err(
                |refused| match refused {
                    crate::conform::Refused::Value { row, message } => ReadFailure {
                        message,
                        at: Some((row, field.name().clone())),
                    },
                    crate::conform::Refused::Type(message) => ReadFailure { message, at: None },
                },
            )?;
        columns.push(column);
    }
    RecordBatch::try_new(typed.clone(), columns).map_err(ReadFailure::of)
}

/// Why a file's reader gave no batch: what went wrong, and (for a value that cannot be
/// held) its row in the batch and its field.
#[derive(Debug)]
pub(crate) struct ReadFailure {
    pub(crate) message: String,
    pub(crate) at: Option<(usize, String)>,
}

impl ReadFailure {
    fn of(error: impl std::fmt::Display) -> ReadFailure {
        ReadFailure {
            message: error.to_string(),
            at: None,
        }
    }
}

impl From<String> for ReadFailure {
    fn from(message: String) -> ReadFailure {
        ReadFailure { message, at: None }
    }
}

/// The 1-based line of the file where CSV row `row` (0-based, after the header)
/// starts: a quoted field may span lines, so rows and lines are counted apart. `None`
/// when the file cannot be read again or holds fewer rows.
fn csv_line_of_row(path: &Path, row: u64) -> Option<u64> {
    let file = std::fs::File::open(path).ok()?;
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(std::io::BufReader::new(file));
    let mut record = csv::ByteRecord::new();
    // The header is record 0: the row is record `row + 1`.
    for _ in 0..=row.saturating_add(1) {
        if !reader.read_byte_record(&mut record).ok()? {
            return None;
        }
    }
    record.position().map(csv::Position::line)
}

/// `batch` with the nulls of the `columns` (String columns) made empty strings.
fn empty_fields_as_text(
    batch: RecordBatch,
    columns: &[usize],
) -> std::result::Result<RecordBatch, String> {
    if columns
        .iter()
        .all(|column| batch.column(*column).null_count() == 0)
    {
        return Ok(batch);
    }
    let mut arrays = batch.columns().to_vec();
    for column in columns {
        let Some(text) = arrays[*column]
            .as_any()
            .downcast_ref::<omnigraph_core::arrow_array::StringArray>()
        else {
            return Err(format!("column {column} of a CSV batch is not text"));
        };
        let filled: omnigraph_core::arrow_array::StringArray =
            text.iter().map(|value| Some(value.unwrap_or(""))).collect();
        arrays[*column] = Arc::new(filled);
    }
    RecordBatch::try_new(batch.schema(), arrays).map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use omnigraph_core::arrow_array::Int32Array;

    fn batch(value: i32) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "n",
            arrow::datatypes::DataType::Int32,
            false,
        )]));
        RecordBatch::try_new(schema, vec![Arc::new(Int32Array::from(vec![value]))]).expect("batch")
    }

    #[tokio::test]
    async fn a_files_batches_are_read_ahead_in_order_up_to_the_first_error() {
        let given: Batches = Box::new(
            (0..5)
                .map(|value| Ok(batch(value)))
                .chain([Err(ReadFailure::from("truncated".to_string()))])
                .chain((5..8).map(|value| Ok(batch(value)))),
        );
        let mut ahead = ReadAhead::start(until_failed(given)).expect("start");
        let mut read = Vec::new();
        while let Some(batch) = ahead.next().await {
            read.push(batch);
        }
        assert_eq!(
            read.len(),
            6,
            "five batches and the error, nothing after it"
        );
        for (value, batch) in read.iter().take(5).enumerate() {
            assert_eq!(
                batch.as_ref().expect("batch"),
                &super::tests::batch(value as i32)
            );
        }
        assert_eq!(
            read[5]
                .as_ref()
                .err()
                .map(|failure| failure.message.as_str()),
            Some("truncated")
        );
    }
}
