//! The adjacency artifact's build: optimize runs it after an edge table's unit that
//! published or had nothing to do. The scan runs on the runtime while one thread per
//! endpoint column interns its keys; the artifact is written with put-if-absent under
//! the table's folder (`omnigraph_publish::adjacency` has the format). Best effort: a
//! failure is reported in optimize's report and traversals read the edge table.

use crate::limits::ADJACENCY_COLUMNS_QUEUED_MAX;
use futures::TryStreamExt;
use omnigraph_core::arrow_array::cast::AsArray;
use omnigraph_core::arrow_array::{Array, RecordBatch};
use omnigraph_core::arrow_schema::DataType;
use omnigraph_core::keys::{self, RowKey};
use omnigraph_core::lance::Dataset;
use omnigraph_core::schema::{EDGE_DST_COLUMN, EDGE_SRC_COLUMN};
use omnigraph_core::storage::PutOutcome;
use omnigraph_core::{OmniError, Result};
use omnigraph_publish::adjacency::{Adjacency, from_pairs};
use omnigraph_publish::limits::{
    ADJACENCY_BYTES_MAX, ADJACENCY_EDGES_MAX, ADJACENCY_KEY_BYTES_MAX,
};
use omnigraph_publish::{BranchWriter, TablePin, layout};
use std::sync::Arc;
use std::time::Instant;

/// Endpoint keys to dense ids, in the order first seen, each interned once: a text key
/// by its text (no rendering per row), any other by its rendered form. The keys sit in
/// one buffer and each index entry holds its key's hash and place there, so a lookup
/// touches the key's bytes only on a hash match and growing the index never re-hashes.
#[derive(Default)]
struct Interner {
    hasher: foldhash::fast::RandomState,
    /// Per distinct key: its hash, id, and its tagged bytes' start and length in `raw`.
    index: hashbrown::HashTable<(u64, u32, u32, usize)>,
    /// Each id's key as interned: a tag (text or rendered), then its bytes.
    raw: Vec<u8>,
    rendered: Vec<RowKey>,
}

const TEXT_KEY: u8 = 0;
const RENDERED_KEY: u8 = 1;

impl Interner {
    /// Appends the id of each row of `column` to `ids`.
    fn intern_column(
        &mut self,
        column: &dyn Array,
        ids: &mut Vec<u32>,
    ) -> std::result::Result<(), String> {
        if column.null_count() > 0 {
            let row = (0..column.len()).find(|row| column.is_null(*row));
            return Err(format!(
                "an edge has no {} at row {}",
                column.data_type(),
                row.unwrap_or_default()
            ));
        }
        if let DataType::Utf8 = column.data_type() {
            for text in column.as_string::<i32>().iter().flatten() {
                ids.push(self.intern(TEXT_KEY, text.as_bytes(), || keys::render_text_key(text))?);
            }
            return Ok(());
        }
        for row in 0..column.len() {
            let rendered = keys::render_array_key(column, row);
            ids.push(self.intern(RENDERED_KEY, rendered.as_bytes(), || rendered.clone())?);
        }
        Ok(())
    }

    fn intern(
        &mut self,
        tag: u8,
        bytes: &[u8],
        render: impl FnOnce() -> RowKey,
    ) -> std::result::Result<u32, String> {
        let hash = std::hash::BuildHasher::hash_one(&self.hasher, (tag, bytes));
        let raw = &self.raw;
        let same = |len: u32, start: usize| {
            let stored = &raw[start..start + len as usize];
            stored[0] == tag && &stored[1..] == bytes
        };
        if let Some((_, id, _, _)) = self
            .index
            .find(hash, |(h, _, len, start)| *h == hash && same(*len, *start))
        {
            return Ok(*id);
        }
        let rendered = render();
        if rendered.len() > ADJACENCY_KEY_BYTES_MAX {
            return Err(format!(
                "a key of {} bytes is longer than an artifact holds ({ADJACENCY_KEY_BYTES_MAX})",
                rendered.len()
            ));
        }
        let id = u32::try_from(self.rendered.len()).map_err(|_| "too many keys")?;
        // A key is at most ADJACENCY_KEY_BYTES_MAX rendered, and never longer raw.
        let len = u32::try_from(bytes.len() + 1).map_err(|_| "a key too long")?;
        let start = self.raw.len();
        self.rendered.push(rendered);
        self.raw.push(tag);
        self.raw.extend_from_slice(bytes);
        self.index
            .insert_unique(hash, (hash, id, len, start), |(h, _, _, _)| *h);
        Ok(id)
    }
}

/// One endpoint column's keys interned by a worker thread: the ids of its rows in scan
/// order, and each id's rendered key.
type InternedColumn = (Vec<u32>, Vec<RowKey>);

/// Interns the columns sent on `columns` on a blocking thread, until the sender is
/// dropped.
fn interning_worker(
    capacity: usize,
    mut columns: tokio::sync::mpsc::Receiver<Arc<dyn Array>>,
) -> tokio::task::JoinHandle<std::result::Result<InternedColumn, String>> {
    tokio::task::spawn_blocking(move || {
        let mut interner = Interner::default();
        let mut ids = Vec::with_capacity(capacity);
        while let Some(column) = columns.blocking_recv() {
            interner.intern_column(column.as_ref(), &mut ids)?;
        }
        Ok((ids, interner.rendered))
    })
}

/// Builds the artifact of `table`, the version `pin` names, from its `src` and `dst`
/// columns: the scan runs on the runtime while one thread per column interns its keys.
pub(crate) async fn build(table: &Dataset, pin: &TablePin) -> Result<Adjacency> {
    let failed = |message: String| {
        OmniError::internal(format!(
            "build the adjacency of {} version {}: {message}",
            pin.table_id, pin.version
        ))
    };
    let mut scanner = table.scan();
    scanner
        .project(&[EDGE_SRC_COLUMN, EDGE_DST_COLUMN])
        .map_err(|error| OmniError::from_lance("read edges", error))?;
    let mut stream = scanner
        .try_into_stream()
        .await
        .map_err(|error| OmniError::from_lance("read edges", error))?;
    let capacity = pin.row_count.min(ADJACENCY_EDGES_MAX) as usize;
    let (to_sources, sources) = tokio::sync::mpsc::channel(ADJACENCY_COLUMNS_QUEUED_MAX);
    let (to_destinations, destinations) = tokio::sync::mpsc::channel(ADJACENCY_COLUMNS_QUEUED_MAX);
    let sources = interning_worker(capacity, sources);
    let destinations = interning_worker(capacity, destinations);
    let mut read = 0u64;
    while let Some(batch) = stream
        .try_next()
        .await
        .map_err(|error| OmniError::from_lance("read edges", error))?
    {
        let batch: RecordBatch = batch;
        read += batch.num_rows() as u64;
        if read > ADJACENCY_EDGES_MAX {
            return Err(failed(format!("more than {ADJACENCY_EDGES_MAX} edges")));
        }
        // A worker that stopped on a bad key closed its queue; its error is below.
        if to_sources.send(batch.column(0).clone()).await.is_err()
            || to_destinations.send(batch.column(1).clone()).await.is_err()
        {
            break;
        }
    }
    drop((to_sources, to_destinations));
    let joined = |outcome: std::result::Result<_, tokio::task::JoinError>| {
        outcome.map_err(|error| failed(format!("an interning thread failed: {error}")))
    };
    let (sources, destinations) = tokio::join!(sources, destinations);
    let (mut sources, near_keys) = joined(sources)?.map_err(failed)?;
    let (mut destinations, far_keys) = joined(destinations)?.map_err(failed)?;
    if sources.len() as u64 != pin.row_count || destinations.len() as u64 != pin.row_count {
        return Err(failed(format!(
            "read {} edges; the pin says {}",
            sources.len(),
            pin.row_count
        )));
    }
    Ok(from_pairs(
        pin,
        [near_keys, far_keys],
        &mut sources,
        &mut destinations,
    ))
}

/// What became of an edge table's adjacency artifact. A build returns `Built`,
/// `Current` or `Skipped`; optimize records `Failed` and `Cancelled`
/// when a build does not finish. Never part of a unit's outcome: traversals read the
/// edge table when there is no artifact.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum AdjacencyOutcome {
    /// Built and written.
    Built {
        /// The edge table version it was built from.
        version: u64,
        /// Edges it holds.
        edges: u64,
        /// Distinct endpoint keys it holds.
        nodes: u64,
        /// Its size.
        bytes: u64,
        /// How long reading the table, building and writing took.
        millis: u64,
    },
    /// The version the head pins has one already.
    Current {
        /// The edge table version.
        version: u64,
    },
    /// Not built: the table has more edges, or the artifact more bytes, than an
    /// artifact holds.
    Skipped {
        /// The edge table version.
        version: u64,
        /// Why.
        reason: String,
    },
    /// Building or writing it failed. An artifact is one object, put whole.
    Failed {
        /// The error's stable code.
        code: String,
        /// The error's message.
        message: String,
    },
    /// A cancel came first: not built.
    Cancelled,
}

/// Builds the adjacency artifact of `edge_type` at the newest head the handle knows
/// (the branch head when it knows none), unless that
/// version has one, and writes it under the table's folder (put-if-absent: an
/// artifact never changes once written).
pub async fn build_adjacency(
    writer: &dyn BranchWriter,
    edge_type: &str,
) -> Result<AdjacencyOutcome> {
    let started = Instant::now();
    // The newest head the handle knows (after optimize's unit, the one it
    // published): a newer one only means a newer version to build next time.
    let head = writer.newest_known_head().await?;
    let catalog = writer.catalog_at(&head).await?;
    if catalog.require(edge_type)?.is_node() {
        return Err(OmniError::bad_input(
            omnigraph_core::InputLocation::in_source("adjacency").field("type"),
            format!("{edge_type} is a node type: only edge types have an adjacency"),
        ));
    }
    let pin = head.require_pin_of_type(edge_type)?.clone();
    let version = pin.version;
    let path = layout::adjacency_path(&pin.table_id, version);
    let root = writer.graph().root();
    // One that exists must pass a reader's checks to count: a damaged one is
    // replaced (put-if-absent could never), or traversals would pass it by forever.
    let damaged = match root.get_capped(&path, ADJACENCY_BYTES_MAX as usize).await {
        Ok(None) => false,
        Ok(Some(bytes)) => match Adjacency::decode(&bytes, &pin) {
            Ok(_) => return Ok(AdjacencyOutcome::Current { version }),
            Err(_) => true,
        },
        Err(error) if error.kind() == omnigraph_core::ErrorKind::Corrupt => true,
        Err(error) => return Err(error),
    };
    if pin.row_count > ADJACENCY_EDGES_MAX {
        return Ok(AdjacencyOutcome::Skipped {
            version,
            reason: format!(
                "{} edges are more than an artifact holds ({ADJACENCY_EDGES_MAX})",
                pin.row_count
            ),
        });
    }
    let table = writer.table_at(&head, &pin.table_id).await?;
    let adjacency = build(&table, &pin).await?;
    let size = adjacency.encoded_size() as u64;
    if size > ADJACENCY_BYTES_MAX {
        return Ok(AdjacencyOutcome::Skipped {
            version,
            reason: format!(
                "its {size} bytes are more than a reader accepts ({ADJACENCY_BYTES_MAX})"
            ),
        });
    }
    let bytes = bytes::Bytes::from(adjacency.encode());
    if damaged {
        root.put(&path, bytes).await?;
    } else {
        // Two builders of one version write the same bytes: either may land.
        match root.put_if_absent(&path, bytes).await? {
            PutOutcome::Created | PutOutcome::AlreadyExists => {}
        }
    }
    writer.artifact_written(&pin.table_id, version);
    Ok(AdjacencyOutcome::Built {
        version,
        edges: adjacency.edges(),
        nodes: adjacency.nodes(),
        bytes: size,
        millis: started.elapsed().as_millis() as u64,
    })
}
