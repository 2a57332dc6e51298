//! Loads from columnar files: CSV, Parquet and Arrow IPC, one type per file, read by arrow's own
//! readers in bounded batches and staged as Arrow ([`crate::rows::rows_from_batch`]),
//! never through JSON. JSONL stays in [`crate::handle::jsonl`].

use crate::ingest::{Ingest, IngestReport, LoadMode};
use crate::omnigraph::{LoadProgress, Omnigraph};
use omnigraph_core::arrow_array::RecordBatch;
use omnigraph_core::arrow_schema::{Field, Schema};
use omnigraph_core::schema::TypeDef;
use omnigraph_core::{InputLocation, OmniError, Result};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Rows per batch read from a columnar file (the ingest batch size).
pub(crate) const COLUMNAR_BATCH_ROWS: usize = crate::ingest::INGEST_BATCH_ROWS;
/// The longest CSV header line read, in bytes.
pub(crate) const CSV_HEADER_BYTES_MAX: usize = 64 << 10;
/// Batches a file's reader decodes ahead of the checks, on its own thread.
const READ_AHEAD_BATCHES_MAX: usize = 2;

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
        let file =
            std::fs::File::open(path).map_err(|error| bad(format!("cannot open: {error}")))?;
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
                Box::new(reader.map(|batch| batch.map_err(|error| error.to_string())))
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
                Box::new(reader.map(|batch| batch.map_err(|error| error.to_string())))
            }
            InputFormat::Jsonl => {
                return Err(bad("a JSONL file is loaded with Omnigraph::load".into()));
            }
        };
        let mut rows = 0u64;
        let batches = ReadAhead::start(batches)?.inspect(|batch| {
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
        });
        let mut ingest = Ingest::start(self, mode).await?;
        if let Some(rows) = expected_rows {
            ingest.expect_rows(type_name, rows);
        }
        ingest.push_batches(type_name, &name, batches).await?;
        ingest.finish("load").await
    }
}

/// A file's reader: its batches, or what went wrong reading them.
type Batches = Box<dyn Iterator<Item = std::result::Result<RecordBatch, String>> + Send>;

/// A file's batches decoded on a thread of their own, at most
/// [`READ_AHEAD_BATCHES_MAX`] ahead: decoding then runs beside the checks of the batches
/// before, on a core the checks leave free. Dropped early (a load that failed), the
/// thread stops at its next batch and is joined. A deterministic simulation reads on
/// the caller's thread instead. Progress by bytes read (CSV, Arrow IPC) counts what the
/// reader has read, up to that many batches ahead of the rows checked.
enum ReadAhead {
    Threaded {
        batches: Option<std::sync::mpsc::Receiver<std::result::Result<RecordBatch, String>>>,
        reader: Option<std::thread::JoinHandle<()>>,
    },
    Inline(Batches),
}

impl ReadAhead {
    fn start(batches: Batches) -> Result<ReadAhead> {
        if omnigraph_core::seams::in_simulation() {
            return Ok(ReadAhead::Inline(batches));
        }
        let (sender, receiver) = std::sync::mpsc::sync_channel(READ_AHEAD_BATCHES_MAX);
        let reader = std::thread::Builder::new()
            .name("omnigraph-read".into())
            .spawn(move || {
                for batch in batches {
                    let failed = batch.is_err();
                    // A receiver gone is a load that stopped: so does its reader.
                    if sender.send(batch).is_err() || failed {
                        return;
                    }
                }
            })
            .map_err(|error| {
                OmniError::internal(format!("cannot start a reader thread: {error}"))
            })?;
        Ok(ReadAhead::Threaded {
            batches: Some(receiver),
            reader: Some(reader),
        })
    }
}

impl Iterator for ReadAhead {
    type Item = std::result::Result<RecordBatch, String>;

    fn next(&mut self) -> Option<Self::Item> {
        let (batches, reader) = match self {
            ReadAhead::Inline(batches) => return batches.next(),
            ReadAhead::Threaded { batches, reader } => (batches, reader),
        };
        // The file is read synchronously, as the readers themselves read it; a closed
        // channel is the end of the file, or of a reader that failed and said so.
        match batches.as_ref()?.recv() {
            Ok(batch) => Some(batch),
            Err(std::sync::mpsc::RecvError) => match reader.take()?.join() {
                Ok(()) => None,
                // A reader's panic is a defect, not bad input: it goes on as a panic.
                Err(panic) => std::panic::resume_unwind(panic),
            },
        }
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        if let ReadAhead::Threaded { batches, reader } = self {
            // Closing the channel first stops a reader blocked on a full one.
            drop(batches.take());
            if let Some(reader) = reader.take() {
                // Its panic, if any, already failed the load or comes after its end.
                let _ = reader.join();
            }
        }
    }
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
    reader
        .rewind()
        .map_err(|error| bad(format!("cannot read: {error}")))?;
    // The header is read again with the rows: count it once.
    reader.get_ref().read.store(0, Ordering::Relaxed);
    let csv = arrow::csv::ReaderBuilder::new(Arc::new(Schema::new(fields)))
        .with_header(true)
        .with_batch_size(COLUMNAR_BATCH_ROWS)
        .build(reader)
        .map_err(|error| bad(format!("cannot read as CSV: {error}")))?;
    Ok(Box::new(csv.map(move |batch| {
        let batch = batch.map_err(|error| error.to_string())?;
        empty_fields_as_text(batch, &empty_is_text)
    })))
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

    #[test]
    fn a_read_ahead_gives_the_batches_in_order_and_ends_at_the_first_error() {
        let given: Batches = Box::new(
            (0..5)
                .map(|value| Ok(batch(value)))
                .chain([Err("truncated".to_string())])
                .chain((5..8).map(|value| Ok(batch(value)))),
        );
        let read: Vec<_> = ReadAhead::start(given).expect("start").collect();
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
            read[5].as_ref().err().map(String::as_str),
            Some("truncated")
        );
    }

    #[test]
    fn a_read_ahead_dropped_early_stops_its_reader_within_its_bound() {
        let produced = Arc::new(AtomicU64::new(0));
        let counted = produced.clone();
        // A file without end: only the bound and the drop stop its reader.
        let endless: Batches = Box::new((0..).map(move |value| {
            counted.fetch_add(1, Ordering::SeqCst);
            Ok(batch(value))
        }));
        let mut read = ReadAhead::start(endless).expect("start");
        assert_eq!(read.next().expect("a batch").expect("read"), batch(0));
        // Dropping joins the reader: this returns only once it stopped, and the file's
        // iterator (holding the other count) is gone with it.
        drop(read);
        assert_eq!(Arc::strong_count(&produced), 1, "the reader ended");
        let decoded = produced.load(Ordering::SeqCst);
        // One taken, the channel's bound queued, one held by a blocked send, and one
        // decoded before the send that found the channel closed.
        assert!(
            decoded <= 1 + READ_AHEAD_BATCHES_MAX as u64 + 2,
            "{decoded} batches decoded"
        );
    }
}
