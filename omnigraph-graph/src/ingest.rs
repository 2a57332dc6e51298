//! Insert and load: rows of one or many types, validated in bounded batches, staged as
//! detached links and published in one commit.
//!
//! Every row is checked before publication: its shape against the schema, its key
//! against the call (given once) and, in append mode, against the snapshot; an edge's
//! endpoints against the snapshot and the nodes of the same call. The first bad row
//! fails the call and nothing is published. When another writer moved a table first,
//! an append re-commits its staged files on the new pins (Lance renumbers an Append
//! cleanly) and re-checks its keys, a bounded number of times.
//!
//! The read set is every table the call read to validate its rows: the tables it
//! staged on, and the node tables behind its edge-endpoint checks. When any of them
//! moved, the checks run again on the new head before anything is published, so an
//! edge never lands after its endpoint was deleted. Evidence comes from one place: a
//! failure is `Unpublished` exactly when the call's staging holds links.

use crate::byte_channel;
use crate::columnar::ReadFailure;
use crate::commit::{CommitOperation, GraphCommit};
use crate::jsonl_rows::LineRows;
use crate::limits::{
    APPEND_GATHER_BYTES_MAX, APPEND_STREAM_BATCHES_MAX, APPEND_STREAM_BYTES_MAX,
    ENDPOINT_NUMBERS_KEPT_MAX, INGEST_BATCH_BYTES_MAX, INGEST_BATCH_ROWS_MAX,
    KEY_CACHE_EXTEND_KEYS_MAX, KEY_RECHECK_KEYS_MAX, LOSSES_BEFORE_RESERVING_MAX,
    MERGE_RETAINED_BYTES_MAX,
};
use crate::omnigraph::Omnigraph;
use crate::publication::ReadSet;
use crate::read_ahead::ReadAhead;
use crate::rows::{
    self, BatchSources, EndNumbers, KeyColumn, KeySet, RowKey, RowSource, SourcedObject, TypedRows,
};
use crate::spill::{RowRef, SpillKeys};
use crate::staging::{AppendWrite, Staging};
use futures::StreamExt;
use omnigraph_core::adapter::{self, StagedLink};
use omnigraph_core::arrow_array::RecordBatch;
use omnigraph_core::schema::{
    Catalog, DeclKind, EDGE_DST_COLUMN, EDGE_ID_COLUMN, EDGE_SRC_COLUMN, TypeDef,
};
use omnigraph_core::{Evidence, OmniError, ReadSetMember, Result, seams};
use omnigraph_publish::CommitAttempts;
use omnigraph_publish::writer::WriteStart;
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write;

/// The read buffer of a JSONL file, read on the thread that splits it into lines: few
/// system calls per line.
pub const JSONL_READ_BUFFER_BYTES: usize = 1 << 20;
/// Checked rows of one table gathered (Arrow bytes) before they go to Lance as a
/// stream written beside the checks of the rows that follow. A smaller load is written
/// in one call once every row is checked, so a bad row in it writes nothing.
pub const APPEND_STREAM_START_BYTES: usize = 8 << 20;

/// How loaded rows meet existing rows with the same key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadMode {
    /// Every key must be new: an existing key is a `KeyConflict`.
    Append,
    /// Upsert by `@key`: existing rows are replaced, new ones inserted.
    Merge,
}

/// What a load or insert did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IngestReport {
    /// The commit that made the rows visible; `None` when there were no rows.
    pub commit: Option<GraphCommit>,
    /// Rows written per type.
    pub rows: BTreeMap<String, u64>,
}

/// The roles of an edge's endpoints, by the bit a pending endpoint's tag keeps.
const ROLES: [&str; 2] = ["src", "dst"];

/// One ingest call in progress.
pub(crate) struct Ingest<'a> {
    handle: &'a Omnigraph,
    catalog: std::sync::Arc<Catalog>,
    base: GraphCommit,
    mode: LoadMode,
    staging: Staging,
    buffers: HashMap<String, Vec<SourcedObject>>,
    /// Per type, JSONL rows decoded straight into Arrow builders; found by name for
    /// every line, so hashed fast.
    lines: foldhash::HashMap<String, LineRows>,
    /// Types some of whose rows got minted ids, which `keys` does not hold.
    minted: HashSet<String>,
    /// Per table, checked batches waiting to be staged as one append, and their bytes.
    appends: BTreeMap<String, (Vec<RecordBatch>, usize)>,
    /// Per table, an append whose checked rows go to Lance as they come: the write, and
    /// the channel to it. In this order, so that a call dropped on a failure stops the
    /// write before closing the channel, which would tell it the rows ended.
    streams: BTreeMap<String, (AppendWrite, byte_channel::Sender<RecordBatch>)>,
    /// Input bytes held in each type's buffer.
    buffered_bytes: HashMap<String, usize>,
    /// Per type, the keys the call gave, within the handle's load budget.
    keys: HashMap<String, SpillKeys>,
    /// Per type, the rows its input says it holds (a Parquet file's metadata, a JSONL
    /// file's size against its first lines), which its key set makes room for at once.
    expected_rows: HashMap<String, u64>,
    /// Per node type, the keys that edges of the call point at and that were neither
    /// in the call nor in the base's table when the edges were staged: found among the
    /// call's nodes, or in the table, once every row is read. Each keeps its first edge
    /// row, tagged with its edge type and role.
    pending: BTreeMap<String, SpillKeys>,
    /// The node tables read to check endpoints: `table_id` to the version read.
    checked: BTreeMap<String, u64>,
    /// Per node type, the keys that edges of this call point at and that the base's
    /// table held when the edges were staged: checked again on a new head. Each keeps
    /// its first edge row, tagged as in `pending`; one per distinct node key, within the
    /// load budget.
    referenced: BTreeMap<String, SpillKeys>,
    /// Per node type with an integer key, numbers known to be its keys: in the call's
    /// key set or in `referenced`. A cache of those sets, up to
    /// [`ENDPOINT_NUMBERS_KEPT_MAX`] numbers in all (`numbers_kept`).
    node_numbers: HashMap<String, foldhash::HashSet<i64>>,
    numbers_kept: usize,
    /// Sources and edge type names that [`RowRef`]s point at.
    names: Vec<String>,
    rows: BTreeMap<String, u64>,
    /// Merge mode: `(table_id, key column, rows)` of every staged merge, while their
    /// Arrow bytes stay within [`MERGE_RETAINED_BYTES_MAX`]; `None` once they do not.
    merged: Option<Vec<(String, String, RecordBatch)>>,
    /// The Arrow bytes held in `merged`.
    merged_bytes: usize,
}

impl<'a> Ingest<'a> {
    pub(crate) async fn start(handle: &'a Omnigraph, mode: LoadMode) -> Result<Ingest<'a>> {
        let WriteStart {
            base,
            catalog,
            staging,
        } = handle.begin().await?;
        Ok(Ingest {
            handle,
            catalog,
            base,
            mode,
            staging,
            buffers: HashMap::new(),
            lines: foldhash::HashMap::default(),
            appends: BTreeMap::new(),
            streams: BTreeMap::new(),
            minted: HashSet::new(),
            buffered_bytes: HashMap::new(),
            keys: HashMap::new(),
            expected_rows: HashMap::new(),
            pending: BTreeMap::new(),
            checked: BTreeMap::new(),
            referenced: BTreeMap::new(),
            node_numbers: HashMap::new(),
            numbers_kept: 0,
            names: Vec::new(),
            rows: BTreeMap::new(),
            merged: Some(Vec::new()),
            merged_bytes: 0,
        })
    }

    /// `error` with the evidence of what this call has staged: the one place an
    /// ingest failure's evidence is raised. The call's checks may have run against
    /// the handle's cached head, which other writers may have moved past (a node
    /// inserted, a key deleted, a type added): the handle forgets it, so a retry checks
    /// against the branch head.
    pub(crate) fn failed(&self, error: OmniError) -> OmniError {
        self.handle.forget_head();
        self.earlier_spilled_repeat(error)
            .with_evidence(self.staging.evidence())
    }

    /// `error` at a row of the input, unless a key given twice that only the spilled
    /// runs show comes at an earlier row: of the call's bad rows, the first is reported.
    fn earlier_spilled_repeat(&self, error: OmniError) -> OmniError {
        let location = match &error {
            OmniError::BadInput { location, .. } => Some(&**location),
            OmniError::KeyConflict { location, .. } => location.as_deref(),
            _ => None,
        };
        // A JSONL row is its line less one; a row of a call or a columnar file is given.
        let Some(row) = location.and_then(|at| at.line.map(|line| line - 1).or(at.row)) else {
            return error;
        };
        if !self.keys.values().any(SpillKeys::has_spilled) {
            return error;
        }
        match self.first_spilled_repeat() {
            Ok(Some((type_name, key, at))) if at.row < row => match self.catalog.require(type_name)
            {
                Ok(type_def) => given_twice(type_def, &self.source_of(at), &key),
                Err(_) => error,
            },
            // A run that cannot be read leaves the error found as it is.
            _ => error,
        }
    }

    /// Notes that the input holds `rows` rows of `type_name`, as its metadata says (or,
    /// for JSONL, as its size and first lines suggest): the call's key set for the type
    /// makes room for them, within its budget, when the first arrive. A hint only; the
    /// rows that come are what is checked.
    pub(crate) fn expect_rows(&mut self, type_name: &str, rows: u64) {
        self.expected_rows.insert(type_name.to_string(), rows);
    }

    /// Adds one row of `type_name`, read from `input_bytes` of input (0 when the row did
    /// not come from a file); stages a batch when the type's buffer is full, by rows or
    /// by bytes.
    pub(crate) async fn push(
        &mut self,
        type_name: &str,
        source: RowSource,
        object: Map<String, Value>,
        input_bytes: usize,
    ) -> Result<()> {
        let pushed = self.push_row(type_name, source, object, input_bytes).await;
        pushed.map_err(|error| self.failed(error))
    }

    async fn push_row(
        &mut self,
        type_name: &str,
        source: RowSource,
        object: Map<String, Value>,
        input_bytes: usize,
    ) -> Result<()> {
        let type_def = type_named(&self.catalog, type_name, &source)?;
        let mut object = object;
        if matches!(type_def.kind(), DeclKind::Edge { .. })
            && object
                .get(EDGE_ID_COLUMN)
                .is_none_or(serde_json::Value::is_null)
        {
            match self.mode {
                // Most edge data has no id of its own: mint one.
                LoadMode::Append => {
                    object.insert(EDGE_ID_COLUMN.into(), Value::String(seams::new_id()));
                }
                LoadMode::Merge => {
                    return Err(OmniError::bad_input(
                        source.location(type_name, Some(EDGE_ID_COLUMN)),
                        format!(
                            "a merge load matches {type_name} edges by their {EDGE_ID_COLUMN}, and this one has none: give it one, or load it with --mode append (which mints ids)"
                        ),
                    ));
                }
            }
        }
        let buffer = self.buffers.entry(type_name.to_string()).or_default();
        buffer.push((source, object));
        let rows = buffer.len();
        let bytes = self
            .buffered_bytes
            .entry(type_name.to_string())
            .or_default();
        *bytes += input_bytes;
        if rows >= INGEST_BATCH_ROWS_MAX || *bytes >= INGEST_BATCH_BYTES_MAX {
            self.flush(type_name).await?;
        }
        Ok(())
    }

    /// Decodes one JSONL line of `type_name` (the type it names) into the type's
    /// builders; stages a batch when they are full, by rows or by bytes.
    pub(crate) async fn push_line(
        &mut self,
        type_name: &str,
        source: RowSource,
        line: &[u8],
    ) -> Result<()> {
        let pushed = self.push_line_row(type_name, source, line).await;
        pushed.map_err(|error| self.failed(error))
    }

    async fn push_line_row(
        &mut self,
        type_name: &str,
        source: RowSource,
        line: &[u8],
    ) -> Result<()> {
        if !self.lines.contains_key(type_name) {
            // The type's buffer is made once: most lines find it by name alone.
            let type_def = type_named(&self.catalog, type_name, &source)?;
            let buffer = LineRows::new(type_def, self.mode, INGEST_BATCH_ROWS_MAX);
            self.lines.insert(type_name.to_string(), buffer);
        }
        let buffer = self
            .lines
            .get_mut(type_name)
            .ok_or_else(|| OmniError::internal("a type's line buffer vanished"))?;
        buffer.push_line(line, source)?;
        buffer.bytes += line.len();
        if buffer.len() >= INGEST_BATCH_ROWS_MAX || buffer.bytes >= INGEST_BATCH_BYTES_MAX {
            self.flush_lines(type_name).await?;
        }
        Ok(())
    }

    /// Stages the decoded JSONL rows of `type_name`.
    async fn flush_lines(&mut self, type_name: &str) -> Result<()> {
        let Some(buffer) = self.lines.remove(type_name) else {
            return Ok(());
        };
        if buffer.len() == 0 {
            return Ok(());
        }
        let catalog = self.catalog.clone();
        let type_def = catalog.require(type_name)?;
        let (sources, typed) = buffer.finish()?;
        self.stage_rows(type_def, &BatchSources::Each(sources), typed)
            .await
    }

    /// Validates and stages the buffered rows of `type_name`.
    async fn flush(&mut self, type_name: &str) -> Result<()> {
        self.buffered_bytes.remove(type_name);
        let Some(buffer) = self.buffers.remove(type_name) else {
            return Ok(());
        };
        if buffer.is_empty() {
            return Ok(());
        }
        let catalog = self.catalog.clone();
        let type_def = catalog.require(type_name)?;
        let typed = rows::rows_from_json(type_def, &buffer)?;
        let sources = buffer.into_iter().map(|(source, _)| source).collect();
        self.stage_rows(type_def, &BatchSources::Each(sources), typed)
            .await
    }

    /// Adds Arrow rows of `type_name` (rows `first_row`.. of the call), checked column
    /// by column and staged as they are: never converted to JSON.
    pub(crate) async fn push_batch(
        &mut self,
        type_name: &str,
        source: &str,
        batch: &RecordBatch,
        first_row: u64,
    ) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let missing_ids = match self.mode {
            LoadMode::Append => rows::MissingEdgeIds::Mint,
            LoadMode::Merge => rows::MissingEdgeIds::Refuse,
        };
        let pushed = async {
            let catalog = self.catalog.clone();
            let type_def = catalog.require(type_name)?;
            let typed = rows::rows_from_batch(type_def, batch, source, first_row, missing_ids)?;
            let sources = BatchSources::Span {
                source: source.into(),
                first_row,
                rows: batch.num_rows(),
            };
            self.stage_rows(type_def, &sources, typed).await
        }
        .await;
        pushed.map_err(|error| self.failed(error))
    }

    /// Adds the Arrow rows `batches` yields (`read` sees each as it comes), gathered into
    /// batches of at most [`INGEST_BATCH_ROWS_MAX`] rows (consecutive batches of one schema
    /// are joined, larger ones cut), so many small input batches stage as few links. A batch the input
    /// cannot give is bad input naming `source` and the row where reading stopped.
    pub(crate) async fn push_batches(
        &mut self,
        type_name: &str,
        source: &str,
        mut batches: ReadAhead<std::result::Result<RecordBatch, ReadFailure>>,
        mut read: impl FnMut(&std::result::Result<RecordBatch, ReadFailure>),
    ) -> Result<()> {
        let mut pending: Vec<RecordBatch> = Vec::new();
        let mut pending_rows = 0usize;
        let mut first_row = 0u64;
        while let Some(batch) = batches.next().await {
            read(&batch);
            let batch = batch.map_err(|failure| {
                let here = first_row + pending_rows as u64;
                let (location, message) = match failure.at {
                    // A value the reader could not hold: its row and field.
                    Some((row, field)) => (
                        rows::RowSource {
                            source: source.into(),
                            line: None,
                            row: here + row as u64,
                        }
                        .location(type_name, Some(&field)),
                        failure.message,
                    ),
                    None => (
                        rows::RowSource {
                            source: source.into(),
                            line: None,
                            row: here,
                        }
                        .location(type_name, None),
                        format!("cannot read the rows from here on: {}", failure.message),
                    ),
                };
                self.failed(OmniError::bad_input(location, message))
            })?;
            let mut offset = 0;
            while offset < batch.num_rows() {
                let room = INGEST_BATCH_ROWS_MAX - pending_rows;
                let piece = batch.slice(offset, room.min(batch.num_rows() - offset));
                offset += piece.num_rows();
                if pending
                    .first()
                    .is_some_and(|first| first.schema() != piece.schema())
                {
                    first_row += self
                        .push_pending(type_name, source, &mut pending, first_row)
                        .await?;
                    pending_rows = 0;
                }
                pending_rows += piece.num_rows();
                pending.push(piece);
                if pending_rows >= INGEST_BATCH_ROWS_MAX {
                    first_row += self
                        .push_pending(type_name, source, &mut pending, first_row)
                        .await?;
                    pending_rows = 0;
                }
            }
        }
        self.push_pending(type_name, source, &mut pending, first_row)
            .await?;
        Ok(())
    }

    /// Joins and pushes the pending batches; returns the rows pushed.
    async fn push_pending(
        &mut self,
        type_name: &str,
        source: &str,
        pending: &mut Vec<RecordBatch>,
        first_row: u64,
    ) -> Result<u64> {
        let Some(first) = pending.first() else {
            return Ok(0);
        };
        let joined = arrow::compute::concat_batches(&first.schema(), pending.iter())
            .map_err(|error| self.failed(OmniError::internal(format!("join batches: {error}"))))?;
        pending.clear();
        self.push_batch(type_name, source, &joined, first_row)
            .await?;
        Ok(joined.num_rows() as u64)
    }

    /// Checks keys (within the call and, for an append, against the table) and
    /// endpoints of validated rows, and stages them.
    async fn stage_rows(
        &mut self,
        type_def: &TypeDef,
        sources: &BatchSources,
        typed: TypedRows,
    ) -> Result<()> {
        let type_name = type_def.name();
        let count = typed.keys.len() as u64;
        // The first row whose key the table holds, refused below unless an earlier row
        // repeats a key of the call: of the two key checks, the first bad row is the one
        // reported (a batch's own repeats and shape errors are refused before this).
        let mut conflict = match self.mode {
            LoadMode::Append if !typed.keys_minted => {
                first_existing_key(self.handle, &self.base, type_def, &typed.keys)
                    .await?
                    .map(|first| (first, key_conflict(type_def, &typed.keys, sources, first)))
            }
            _ => None,
        };
        if typed.keys_minted {
            // New ids: nothing to check them against, and the key cache cannot take
            // keys the call does not keep.
            self.minted.insert(type_name.to_string());
        } else {
            // The call keeps its keys: for the next batches, and for the handle's key
            // cache once published.
            let mut seen = match self.keys.remove(type_name) {
                Some(seen) => seen,
                None => {
                    let mut seen = SpillKeys::new(self.handle.load_budget());
                    if let Some(rows) = self.expected_rows.get(type_name)
                        && !typed.keys.is_empty()
                    {
                        let rows = usize::try_from(*rows).unwrap_or(usize::MAX);
                        seen.reserve(rows, typed.keys.text_bytes().div_ceil(typed.keys.len()));
                    }
                    seen
                }
            };
            let kept = self.keep_keys(type_def, &mut seen, sources, &typed.keys, &mut conflict);
            self.keys.insert(type_name.to_string(), seen);
            kept?;
        }
        if let Some((_, conflict)) = conflict {
            // Not reached: `keep_keys` refuses it at its row. Never published either way.
            return Err(conflict);
        }
        if let DeclKind::Edge { from, to } = type_def.kind() {
            self.resolve_endpoints(
                type_name,
                (from, to),
                sources,
                (&typed.endpoints, &typed.batch),
            )
            .await?;
        }
        let pin = self.base.require_pin_of_type(type_name)?.clone();
        if !self.staging.has_chain(&pin.table_id) {
            let table = self.handle.table_at(&self.base, &pin.table_id).await?;
            self.staging.seed(&pin.table_id, table)?;
        }
        match self.mode {
            LoadMode::Append if self.streams.contains_key(&pin.table_id) => {
                self.send_to_stream(&pin.table_id, typed.batch).await?;
            }
            LoadMode::Append => {
                // Checked batches are gathered and staged as one append: each Lance
                // write has a fixed cost. Past APPEND_STREAM_START_BYTES the rest
                // streams to one write running beside the checks. A simulated writer
                // stays on its own task and stages one append per
                // APPEND_GATHER_BYTES_MAX instead.
                let gathered = self.appends.entry(pin.table_id.clone()).or_default();
                gathered.1 += batch_bytes(&typed.batch);
                gathered.0.push(typed.batch);
                if !seams::in_simulation() && gathered.1 >= APPEND_STREAM_START_BYTES {
                    self.start_stream(&pin.table_id).await?;
                } else if gathered.1 >= APPEND_GATHER_BYTES_MAX {
                    self.stage_gathered(&pin.table_id).await?;
                }
            }
            LoadMode::Merge => {
                let key = type_def.key_column().to_string();
                let batch = typed.batch;
                self.retain_merge(&pin.table_id, &key, &batch);
                self.staging
                    .stage(&pin.table_id, |tip, origin| async move {
                        adapter::stage_merge_insert(&tip, &key, vec![batch], &origin).await
                    })
                    .await?;
            }
        }
        *self.rows.entry(type_name.to_string()).or_default() += count;
        Ok(())
    }

    /// Adds the keys of a batch to `seen`, the call's keys of `type_def`; refuses the
    /// first key given twice, or the `conflict` (a key the table holds, at its position
    /// in the batch) when it comes first.
    fn keep_keys(
        &mut self,
        type_def: &TypeDef,
        seen: &mut SpillKeys,
        sources: &BatchSources,
        keys: &KeyColumn,
        conflict: &mut Option<(usize, OmniError)>,
    ) -> Result<()> {
        assert_eq!(sources.len(), keys.len(), "one source per key");
        seen.hash_batch(keys.iter());
        // The rows of a batch share their source: its name is found once.
        let mut named: Option<(std::sync::Arc<str>, u32)> = None;
        for (at, key) in keys.iter().enumerate() {
            let (line, row) = sources.line_and_row(at);
            if let Some((_, error)) = conflict.take_if(|(first, _)| *first == at) {
                return Err(self.earliest_repeat(type_def, seen, row, error)?);
            }
            let source = sources.name(at);
            let name = match &named {
                Some((shared, name)) if std::sync::Arc::ptr_eq(shared, source) => *name,
                _ => {
                    let name = self.name_index(source);
                    named = Some((source.clone(), name));
                    name
                }
            };
            if seen
                .insert_from_batch(key, at, RowRef::new(name, 0, line, row))?
                .is_some()
            {
                let error = given_twice(type_def, &sources.get(at), key);
                return Err(self.earliest_repeat(type_def, seen, row, error)?);
            }
        }
        Ok(())
    }

    /// `error`, found at `row`, unless a key that spilled repeats at an earlier row: of
    /// the call's bad rows, the first is the one reported.
    fn earliest_repeat(
        &self,
        type_def: &TypeDef,
        seen: &SpillKeys,
        row: u64,
        error: OmniError,
    ) -> Result<OmniError> {
        Ok(match seen.first_repeat()? {
            Some((key, at)) if at.row < row => given_twice(type_def, &self.source_of(at), &key),
            _ => error,
        })
    }

    /// The source of a row the call kept a reference to.
    fn source_of(&self, at: RowRef) -> RowSource {
        RowSource {
            source: self.names[at.source as usize].as_str().into(),
            line: at.line(),
            row: at.row,
        }
    }

    /// The first key given twice that only the spilled runs show, of any type.
    fn refuse_spilled_repeats(&self) -> Result<()> {
        match self.first_spilled_repeat()? {
            Some((type_name, key, at)) => {
                let type_def = self.catalog.require(type_name)?;
                Err(given_twice(type_def, &self.source_of(at), &key))
            }
            None => Ok(()),
        }
    }

    /// The earliest key given twice, of any type: its type, the key and its second row.
    fn first_spilled_repeat(&self) -> Result<Option<(&str, String, RowRef)>> {
        let mut first = Earliest::default();
        for (type_name, seen) in &self.keys {
            if let Some((key, at)) = seen.first_repeat()? {
                first.offer(type_name.as_str(), key, at);
            }
        }
        Ok(first.0)
    }

    /// Starts the streamed append of `table_id` with its gathered batches.
    async fn start_stream(&mut self, table_id: &str) -> Result<()> {
        let (batches, _) = self.appends.remove(table_id).unwrap_or_default();
        let Some(schema) = batches.first().map(RecordBatch::schema) else {
            return Ok(());
        };
        let (sender, receiver) =
            byte_channel::channel(APPEND_STREAM_BATCHES_MAX, APPEND_STREAM_BYTES_MAX);
        let arriving = futures::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|batch| (batch, receiver))
        });
        let rows = futures::stream::iter(batches).chain(arriving);
        let write = self
            .staging
            .start_append_stream(table_id, schema, rows)
            .await?;
        self.streams.insert(table_id.to_string(), (write, sender));
        Ok(())
    }

    /// Sends checked rows to the streamed append of `table_id`; waits while its writer
    /// is [`APPEND_STREAM_BATCHES_MAX`] batches or [`APPEND_STREAM_BYTES_MAX`] bytes
    /// behind.
    async fn send_to_stream(&mut self, table_id: &str, batch: RecordBatch) -> Result<()> {
        let (_, sender) = self
            .streams
            .get(table_id)
            .ok_or_else(|| OmniError::internal("rows sent to an append that is not streaming"))?;
        let bytes = batch_bytes(&batch);
        if sender.send(batch, bytes).await.is_ok() {
            return Ok(());
        }
        // The writer stopped before its rows ended: its failure says why.
        let (write, _) = self
            .streams
            .remove(table_id)
            .ok_or_else(|| OmniError::internal("a streamed append vanished"))?;
        write.finish().await?;
        Err(OmniError::internal(
            "an append's writer stopped before its rows ended",
        ))
    }

    /// Ends every streamed append and stages what each wrote.
    async fn stage_streams(&mut self) -> Result<()> {
        for (table_id, (write, sender)) in std::mem::take(&mut self.streams) {
            // Closing the channel ends the stream.
            drop(sender);
            let written = write.finish().await?;
            self.staging
                .stage_written_append(&table_id, written)
                .await?;
        }
        Ok(())
    }

    /// Stages the gathered checked batches of `table_id` as one append.
    async fn stage_gathered(&mut self, table_id: &str) -> Result<()> {
        let Some((batches, _)) = self.appends.remove(table_id) else {
            return Ok(());
        };
        if batches.is_empty() {
            return Ok(());
        }
        self.staging.stage_append(table_id, batches).await?;
        Ok(())
    }

    /// Keeps a merged batch for a possible re-merge, within the retention cap.
    fn retain_merge(&mut self, table_id: &str, key: &str, batch: &RecordBatch) {
        let Some(merged) = self.merged.as_mut() else {
            return;
        };
        let bytes = batch_bytes(batch);
        if self.merged_bytes.saturating_add(bytes) > MERGE_RETAINED_BYTES_MAX {
            self.merged = None;
            self.merged_bytes = 0;
        } else {
            self.merged_bytes += bytes;
            merged.push((table_id.to_string(), key.to_string(), batch.clone()));
        }
    }

    /// Every edge endpoint must be a node of the call or of `base`. The node tables
    /// read for it join the read set at their `base` versions.
    /// Resolves the endpoints of a batch of edges as it is staged: against the nodes of
    /// the call so far, then in one lookup per node type against the base's table. Keys
    /// found in the table are kept once each (to check again on a new head); the rest
    /// wait for the end of the call, when every node of the call is known. `batch` is
    /// the edges' rows: integer endpoints are looked up by their numbers first.
    async fn resolve_endpoints(
        &mut self,
        edge_type: &str,
        (from, to): (&String, &String),
        sources: &BatchSources,
        (endpoints, batch): (&[KeyColumn; 2], &RecordBatch),
    ) -> Result<()> {
        assert_eq!(batch.num_rows(), sources.len(), "one row per edge");
        let numbers = [EDGE_SRC_COLUMN, EDGE_DST_COLUMN].map(|name| {
            batch
                .column_by_name(name)
                .and_then(|column| EndNumbers::of(column.as_ref()))
        });
        for (role, rendered) in endpoints.iter().enumerate() {
            // Integer ends come unrendered (`rows_from_batch`), text ends rendered.
            assert!(
                rendered.len() == sources.len() || (rendered.is_empty() && numbers[role].is_some()),
                "one {} per edge",
                ROLES[role]
            );
        }
        // Each end's node type's known numbers, taken out while the sets are read (an
        // edge type from a type to itself shares one).
        let mut known_numbers: Vec<(String, foldhash::HashSet<i64>)> = Vec::new();
        let mut number_set = [0usize; 2];
        for (role, node_type) in [from, to].into_iter().enumerate() {
            if numbers[role].is_none() {
                continue;
            }
            number_set[role] = match known_numbers.iter().position(|(t, _)| t == node_type) {
                Some(at) => at,
                None => {
                    let set = self.node_numbers.remove(node_type).unwrap_or_default();
                    known_numbers.push((node_type.clone(), set));
                    known_numbers.len() - 1
                }
            };
        }
        // Per node type: the edge's position in the batch, the endpoint's role (an index
        // into ROLES) and its key.
        let mut unresolved: BTreeMap<&str, Vec<Unresolved<'_>>> = BTreeMap::new();
        {
            // Each node type's sets, found once per batch rather than per endpoint.
            let sets = |node_type: &str| (self.keys.get(node_type), self.referenced.get(node_type));
            let ends = [(0u32, from, sets(from)), (1u32, to, sets(to))];
            // Per role, the previous row's key (or number) when it was found: edges are
            // often grouped by an end (a node's edges together), and comparing with the
            // row before costs less than a lookup in a set larger than the caches.
            let mut text_before: [Option<&str>; 2] = [None, None];
            let mut number_before: [Option<i64>; 2] = [None, None];
            // An integer key as `render_array_key` renders it: its number's digits.
            let mut rendered = String::new();
            for at in 0..sources.len() {
                for (role, node_type, (in_call, known)) in &ends {
                    let role_at = *role as usize;
                    let held = |key: &str| {
                        // A key that spilled is missed here and found when the call ends.
                        in_call.is_some_and(|keys| keys.held_in_memory(key))
                            || known.is_some_and(|keys| keys.held_in_memory(key))
                    };
                    let missed = match &numbers[role_at] {
                        Some(column) => {
                            let number = column.get(at);
                            let set = &mut known_numbers[number_set[role_at]].1;
                            let found = number_before[role_at] == Some(number)
                                || set.contains(&number)
                                || {
                                    // Rendered only when the number is not known
                                    // (a JSONL call's ends come rendered), into one
                                    // buffer: a string is made only for a key missed.
                                    let key = if endpoints[role_at].is_empty() {
                                        rendered.clear();
                                        write!(rendered, "{number}")
                                            .expect("writing to a String does not fail");
                                        rendered.as_str()
                                    } else {
                                        endpoints[role_at].get(at)
                                    };
                                    let found = held(key);
                                    if !found {
                                        let key = if endpoints[role_at].is_empty() {
                                            Cow::Owned(key.to_string())
                                        } else {
                                            Cow::Borrowed(endpoints[role_at].get(at))
                                        };
                                        unresolved
                                            .entry(node_type.as_str())
                                            .or_default()
                                            .push((at, *role, key));
                                    } else {
                                        keep_number(set, number, &mut self.numbers_kept);
                                    }
                                    found
                                };
                            number_before[role_at] = found.then_some(number);
                            None
                        }
                        None => {
                            let key = endpoints[role_at].get(at);
                            let found = text_before[role_at] == Some(key) || held(key);
                            text_before[role_at] = found.then_some(key);
                            (!found).then_some(key)
                        }
                    };
                    if let Some(key) = missed {
                        unresolved.entry(node_type.as_str()).or_default().push((
                            at,
                            *role,
                            Cow::Borrowed(key),
                        ));
                    }
                }
            }
        }
        let edge_type_name = self.name_index(edge_type);
        for (node_type, wanted) in unresolved {
            let node = self.catalog.require(node_type)?.clone();
            let pin = self.base.require_pin_of_type(node_type)?;
            self.checked.insert(pin.table_id.clone(), pin.version);
            // Each key once, by hashing: sorting them compared strings 16k log 16k times
            // per batch.
            let distinct: foldhash::HashSet<&str> =
                wanted.iter().map(|(_, _, key)| key.as_ref()).collect();
            let keys: Vec<&str> = distinct.into_iter().collect();
            let found: KeySet = self
                .handle
                .existing_keys(&self.base, &node, &keys)
                .await?
                .into_iter()
                .collect();
            for (at, role, key) in wanted {
                let source_name = self.name_index(sources.name(at));
                let (line, row) = sources.line_and_row(at);
                let tag = edge_type_name << 1 | role;
                let first = RowRef::new(source_name, tag, line, row);
                let budget = self.handle.load_budget();
                let held = found.contains(key.as_ref());
                let kept = if held {
                    if let Some(numbers) = &numbers[role as usize] {
                        let set = &mut known_numbers[number_set[role as usize]].1;
                        keep_number(set, numbers.get(at), &mut self.numbers_kept);
                    }
                    &mut self.referenced
                } else {
                    &mut self.pending
                };
                // A key already kept keeps its first edge row.
                kept.entry(node_type.to_string())
                    .or_insert_with(|| SpillKeys::new(budget))
                    .insert(&key, first)?;
            }
        }
        self.node_numbers.extend(known_numbers);
        Ok(())
    }

    /// The index of `name` in [`Ingest::names`], added if new (a call has few).
    fn name_index(&mut self, name: &str) -> u32 {
        let at = match self.names.iter().position(|known| known == name) {
            Some(at) => at,
            None => {
                self.names.push(name.to_string());
                self.names.len() - 1
            }
        };
        u32::try_from(at).expect("a call names fewer than 2^32 sources and types")
    }

    /// Checks every endpoint of the call at `base`: those still waiting against the
    /// call's nodes and the table; and, when `base` is not the call's own base (a move
    /// onto a new head), the node keys found in the table as the edges were staged,
    /// which another writer may have deleted since.
    async fn check_endpoints(&mut self, base: &GraphCommit) -> Result<()> {
        let moved = base.commit_id != self.base.commit_id;
        // On a new head, the node tables read are the ones read now.
        let mut checked = if moved {
            BTreeMap::new()
        } else {
            std::mem::take(&mut self.checked)
        };
        if moved {
            self.refuse_missing(&self.referenced, base, &mut checked)
                .await?;
        }
        self.refuse_missing(&self.pending, base, &mut checked)
            .await?;
        self.checked = checked;
        Ok(())
    }

    /// Refuses the earliest edge row among `sets` (per node type, node keys that edges
    /// point at, each with its first edge row) whose node the call does not give and
    /// the table at `base` does not hold. Each distinct key is read back once, in key
    /// order, and looked up in bounded chunks; the node tables read join `checked`.
    async fn refuse_missing(
        &self,
        sets: &BTreeMap<String, SpillKeys>,
        base: &GraphCommit,
        checked: &mut BTreeMap<String, u64>,
    ) -> Result<()> {
        let mut first = Earliest::default();
        for (node_type, wanted) in sets {
            let node = self.catalog.require(node_type)?;
            let in_call = self.keys.get(node_type);
            // The call's own keys that spilled, read once beside `wanted`: both go in
            // key order.
            let mut spilled = match in_call {
                Some(keys) if keys.has_spilled() => Some(keys.sorted()?.peekable()),
                _ => None,
            };
            for chunk in wanted.distinct_chunks(KEY_RECHECK_KEYS_MAX)? {
                let mut not_given = Vec::new();
                for (key, at) in chunk? {
                    let given = match (&mut spilled, in_call) {
                        (Some(call_keys), _) => advance_to(call_keys, &key)?,
                        (None, Some(call_keys)) => call_keys.held_in_memory(&key),
                        (None, None) => false,
                    };
                    if !given {
                        not_given.push((key, at));
                    }
                }
                if not_given.is_empty() {
                    continue;
                }
                let pin = base.require_pin_of_type(node_type)?;
                checked.insert(pin.table_id.clone(), pin.version);
                let held = self.held_at(base, node, &not_given).await?;
                for (key, at) in not_given {
                    if !held.contains(&key) {
                        first.offer(node_type.as_str(), key, at);
                    }
                }
            }
        }
        match first.0 {
            Some((node_type, key, at)) => Err(self.dangling_at(at, &key, node_type, base)),
            None => Ok(()),
        }
    }

    /// Which keys of `chunk` the table of `type_def` holds at `at`.
    async fn held_at(
        &self,
        at: &GraphCommit,
        type_def: &TypeDef,
        chunk: &[(RowKey, RowRef)],
    ) -> Result<KeySet> {
        let keys: Vec<RowKey> = chunk.iter().map(|(key, _)| key.clone()).collect();
        let held = self.handle.existing_keys(at, type_def, &keys).await?;
        Ok(held.into_iter().collect())
    }

    /// The refusal of the edge row `at` (tagged with its edge type and role), whose
    /// endpoint `key` is not a `node_type` at `base` nor in the call.
    fn dangling_at(&self, at: RowRef, key: &str, node_type: &str, base: &GraphCommit) -> OmniError {
        let edge_type = &self.names[(at.tag >> 1) as usize];
        let role = ROLES[(at.tag & 1) as usize];
        dangling(&self.source_of(at), edge_type, role, key, node_type, base)
    }

    /// Every table in the read set: staged on or checked.
    fn read_tables(&self) -> Vec<String> {
        let staged = self.staging.base_pins().into_iter().map(|(id, _)| id);
        staged.chain(self.checked.keys().cloned()).collect()
    }

    /// What must not have changed at publication: the base pins of the tables staged
    /// on, and those of the node tables read only to check endpoints.
    fn read_set(&self) -> ReadSet {
        let staged = self.staging.base_pins();
        let checked = self
            .checked
            .iter()
            .filter(|(table_id, _)| !self.staging.has_chain(table_id))
            .map(|(table_id, version)| (table_id.clone(), *version))
            .collect();
        ReadSet::Pins { staged, checked }
    }

    /// Stages what is buffered, checks the endpoints and publishes, re-checking and
    /// re-committing on a newer head when another writer moved a table it read.
    pub(crate) async fn finish(mut self, operation_kind: &str) -> Result<IngestReport> {
        let published = self.publish(operation_kind).await;
        let commit = published.map_err(|error| self.failed(error))?;
        Ok(IngestReport {
            commit,
            rows: self.rows,
        })
    }

    async fn publish(&mut self, operation_kind: &str) -> Result<Option<GraphCommit>> {
        let types: Vec<String> = self.buffers.keys().cloned().collect();
        for type_name in types {
            self.flush(&type_name).await?;
        }
        let types: Vec<String> = self.lines.keys().cloned().collect();
        for type_name in types {
            self.flush_lines(&type_name).await?;
        }
        // Endpoints before the gathered rows are written: a dangling edge in a call
        // that fits the gathering writes nothing.
        self.refuse_spilled_repeats()?;
        let base = self.base.clone();
        self.check_endpoints(&base).await?;
        self.stage_streams().await?;
        let tables: Vec<String> = self.appends.keys().cloned().collect();
        for table_id in tables {
            self.stage_gathered(&table_id).await?;
        }
        if !self.staging.has_staged() {
            return Ok(None);
        }
        let summary = self
            .rows
            .iter()
            .map(|(type_name, count)| format!("{count} {type_name}"))
            .collect::<Vec<_>>()
            .join(", ");
        let operation = CommitOperation {
            kind: operation_kind.to_string(),
            summary,
        };
        // The call's one bound on commit PUTs, and how many of its re-commits lost.
        let attempts = CommitAttempts::new();
        let mut losses = 0u32;
        // The reservation this call holds once it kept losing (`docs/format.md` §7.7).
        let mut holding: Option<String> = None;
        loop {
            match self
                .handle
                .publish_staged_holding(
                    &self.staging,
                    self.read_set(),
                    operation.clone(),
                    holding.as_deref(),
                    &attempts,
                )
                .await
            {
                Ok(commit) => {
                    // Nothing fallible runs once the commit landed.
                    self.update_key_caches().await;
                    return Ok(Some(commit));
                }
                Err(OmniError::ReadSetChanged { member, .. }) if member.is_table() => {
                    losses += 1;
                    if let Err(exhausted) = attempts.try_again(&Evidence::Unpublished) {
                        Box::pin(self.handle.release_after(holding, &exhausted)).await;
                        return Err(exhausted);
                    }
                    // Lost again: every table it read is held for this call before it
                    // stages again, so the short writers beside it stop taking every
                    // slot (a node table too, when node writers are what moves).
                    if losses >= LOSSES_BEFORE_RESERVING_MAX {
                        let tables = self.read_tables();
                        holding = Box::pin(self.handle.keep_reserved(holding, tables)).await;
                    }
                    if let Err(error) = self.move_onto_head().await {
                        Box::pin(self.handle.release_after(holding, &error)).await;
                        return Err(error);
                    }
                }
                Err(other) => {
                    Box::pin(self.handle.release_after(holding, &other)).await;
                    return Err(other);
                }
            }
        }
    }

    /// After publication: appended keys join the handle's key caches; merged tables
    /// are read again next time.
    async fn update_key_caches(&mut self) {
        for type_name in &self.minted {
            if let Some(pin) = self.base.pin_of_type(type_name) {
                self.handle.forget_keys(&pin.table_id).await;
            }
        }
        // The call is done with its keys: they move into the caches, not copied.
        for (type_name, keys) in std::mem::take(&mut self.keys) {
            if self.minted.contains(&type_name) {
                continue;
            }
            let Some(pin) = self.base.pin_of_type(&type_name) else {
                continue;
            };
            let Some(link) = self.staging.links_of(&pin.table_id).last() else {
                continue;
            };
            match self.mode {
                // A bulk append leaves the cache as it was: the next check reads only
                // the fragments the call added, in one columnar scan, if it ever comes.
                LoadMode::Append if keys.len() > KEY_CACHE_EXTEND_KEYS_MAX as u64 => {}
                LoadMode::Append => {
                    if let Some(keys) = keys.into_keys() {
                        self.handle
                            .note_appended(&pin.table_id, pin.version, &link.dataset, keys)
                            .await;
                    }
                }
                LoadMode::Merge => self.handle.forget_keys(&pin.table_id).await,
            }
        }
    }

    /// Moves the call onto the current head: keys (in append mode) and endpoints are
    /// checked again there; chains of tables that did not move stay as staged; on
    /// tables that moved, appends are re-committed (same files, renumbered) and merges
    /// merged again from the retained rows.
    async fn move_onto_head(&mut self) -> Result<()> {
        // The head the lost race read, or a fresh one.
        let head = self.handle.base().await?;
        if head.schema != self.base.schema {
            return Err(OmniError::ReadSetChanged {
                member: ReadSetMember::Schema {
                    branch: head.branch.clone(),
                },
                expected: self.base.schema.clone(),
                actual: head.schema.clone(),
                evidence: Evidence::BeforeEffect,
            });
        }
        if self.mode == LoadMode::Append {
            self.refuse_keys_at(&head).await?;
        }
        self.check_endpoints(&head).await?;
        // Re-committing reuses the staged files: never once cleanup may reclaim them.
        self.staging.check_age_on(&head)?;
        let moved = self.staging.rebase(head.clone())?;
        for (table_id, links) in moved {
            let table = self.handle.table_at(&head, &table_id).await?;
            self.staging.seed(&table_id, table)?;
            match self.mode {
                LoadMode::Append => self.recommit_appends(&table_id, links).await?,
                LoadMode::Merge => self.merge_again(&table_id, &head).await?,
            }
        }
        self.base = head;
        Ok(())
    }

    /// Refuses the call's earliest row whose key the table holds at `head` (another
    /// writer added it since the call's checks), reading the call's keys back in bounded
    /// chunks.
    async fn refuse_keys_at(&self, head: &GraphCommit) -> Result<()> {
        let mut first = Earliest::default();
        for (type_name, keys) in &self.keys {
            let type_def = self.catalog.require(type_name)?;
            for chunk in keys.distinct_chunks(KEY_RECHECK_KEYS_MAX)? {
                let chunk = chunk?;
                let held = self.held_at(head, type_def, &chunk).await?;
                for (key, at) in chunk {
                    if held.contains(&key) {
                        first.offer(type_def, key, at);
                    }
                }
            }
        }
        match first.0 {
            Some((type_def, key, at)) => Err(OmniError::KeyConflict {
                type_name: type_def.name().to_string(),
                location: Some(Box::new(
                    self.source_of(at)
                        .location(type_def.name(), Some(type_def.key_column())),
                )),
                key,
                evidence: Evidence::BeforeEffect,
            }),
            None => Ok(()),
        }
    }

    /// The append path of a move onto the head: each staged append is re-committed on
    /// the table's new tip (the same files, renumbered).
    async fn recommit_appends(&mut self, table_id: &str, links: Vec<StagedLink>) -> Result<()> {
        for link in links {
            self.staging
                .stage(table_id, |tip, origin| async move {
                    adapter::recommit_append(&link, &tip, &origin).await
                })
                .await?;
        }
        Ok(())
    }

    /// The merge path of a move onto the head: the retained rows are merged again on the
    /// table's new tip; a merge too large to have kept its rows is the caller's to rerun.
    async fn merge_again(&mut self, table_id: &str, head: &GraphCommit) -> Result<()> {
        let Some(merged) = &self.merged else {
            return Err(OmniError::ReadSetChanged {
                expected: self.base.require_pin(table_id)?.version.to_string(),
                actual: head.require_pin(table_id)?.version.to_string(),
                member: ReadSetMember::Pin {
                    table_id: table_id.to_string(),
                },
                evidence: Evidence::BeforeEffect,
            });
        };
        let retained: Vec<_> = merged
            .iter()
            .filter(|(merged_table, _, _)| merged_table.as_str() == table_id)
            .cloned()
            .collect();
        for (_, key, batch) in retained {
            self.staging
                .stage(table_id, |tip, origin| async move {
                    adapter::stage_merge_insert(&tip, &key, vec![batch], &origin).await
                })
                .await?;
        }
        Ok(())
    }
}

/// Of the bad rows offered, the earliest in the call, with what it is about and its key.
struct Earliest<T>(Option<(T, RowKey, RowRef)>);

impl<T> Default for Earliest<T> {
    fn default() -> Earliest<T> {
        Earliest(None)
    }
}

impl<T> Earliest<T> {
    /// Keeps `at` when no row offered before comes earlier.
    fn offer(&mut self, what: T, key: RowKey, at: RowRef) {
        if self.0.as_ref().is_none_or(|(_, _, held)| at.row < held.row) {
            self.0 = Some((what, key, at));
        }
    }
}

/// Moves `sorted` (a call's keys in key order) past the keys before `key`; whether it
/// holds `key`.
fn advance_to(
    sorted: &mut std::iter::Peekable<crate::spill::Sorted<'_>>,
    key: &str,
) -> Result<bool> {
    loop {
        match sorted.peek() {
            None => return Ok(false),
            Some(Ok((held, _))) => match held.as_str().cmp(key) {
                std::cmp::Ordering::Less => {}
                std::cmp::Ordering::Equal => return Ok(true),
                std::cmp::Ordering::Greater => return Ok(false),
            },
            Some(Err(_)) => {}
        }
        // A key before `key`, or the error, which comes out here.
        if let Some(Err(error)) = sorted.next() {
            return Err(error);
        }
    }
}

/// The refusal of a row `source` whose `key` of `type_def` the call gave before.
fn given_twice(type_def: &TypeDef, source: &RowSource, key: &str) -> OmniError {
    let type_name = type_def.name();
    OmniError::bad_input(
        source.location(type_name, Some(type_def.key_column())),
        format!("key {key} of {type_name} is given more than once"),
    )
}

/// The refusal of an edge row (from `source`) whose `role` endpoint `key` is not a
/// `node_type` at `base` nor in the call.
fn dangling(
    source: &RowSource,
    edge_type: &str,
    role: &str,
    key: &str,
    node_type: &str,
    base: &GraphCommit,
) -> OmniError {
    OmniError::bad_input(
        source.location(edge_type, Some(role)),
        format!(
            "{role} {key} is not a {node_type} in commit {} nor in this call",
            base.seq
        ),
    )
}

/// The position in `keys` of the first key the table of `type_def` holds at `at`.
async fn first_existing_key(
    handle: &Omnigraph,
    at: &GraphCommit,
    type_def: &omnigraph_core::schema::TypeDef,
    keys: &KeyColumn,
) -> Result<Option<usize>> {
    let listed: Vec<&str> = keys.iter().collect();
    let existing: KeySet = handle
        .existing_keys(at, type_def, &listed)
        .await?
        .into_iter()
        .collect();
    if existing.is_empty() {
        return Ok(None);
    }
    Ok(keys.iter().position(|key| existing.contains(key)))
}

/// The refusal of `keys[first]`, which the table already holds, at its row.
fn key_conflict(
    type_def: &omnigraph_core::schema::TypeDef,
    keys: &KeyColumn,
    sources: &BatchSources,
    first: usize,
) -> OmniError {
    assert_eq!(sources.len(), keys.len(), "one source per key");
    OmniError::KeyConflict {
        type_name: type_def.name().to_string(),
        key: keys.get(first).to_string(),
        location: Some(Box::new(
            sources
                .get(first)
                .location(type_def.name(), Some(type_def.key_column())),
        )),
        evidence: Evidence::BeforeEffect,
    }
}

/// An endpoint not found as a batch is staged: the edge's position in the batch, the
/// endpoint's role (an index into `ROLES`) and its key.
type Unresolved<'a> = (usize, u32, Cow<'a, str>);

/// Adds `number` to a node type's known numbers, while the call keeps fewer than their
/// bound (`kept`: the numbers of every node type).
fn keep_number(numbers: &mut foldhash::HashSet<i64>, number: i64, kept: &mut usize) {
    if *kept < ENDPOINT_NUMBERS_KEPT_MAX && numbers.insert(number) {
        *kept += 1;
    }
}

/// The bytes of a batch's Arrow buffers (the slices it uses, not their capacity).
fn batch_bytes(batch: &RecordBatch) -> usize {
    batch
        .columns()
        .iter()
        .map(|column| {
            column
                .to_data()
                .get_slice_memory_size()
                .unwrap_or(usize::MAX)
        })
        .fold(0, usize::saturating_add)
}

/// The type `type_name` that a row (`source`) names; bad input naming the row when the
/// schema has none.
fn type_named<'a>(
    catalog: &'a Catalog,
    type_name: &str,
    source: &RowSource,
) -> Result<&'a TypeDef> {
    catalog.get(type_name).ok_or_else(|| {
        OmniError::bad_input(
            source.location(type_name, Some(rows::TYPE_FIELD)),
            format!("the schema has no type {type_name}"),
        )
    })
}
