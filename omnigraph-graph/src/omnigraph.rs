//! The `Omnigraph` handle: the writers and reads a user calls, each on the publication
//! protocol. This first part has `insert` and the reads that check it (`get`, `scan`);
//! load, update, delete and schema apply build on the same pieces.

use crate::adjacency::AdjacencyCache;
use crate::commit::GraphCommit;
use crate::endpoint_cache::EdgeEndpoints;
use crate::graph::{CommitRef, Graph};
use crate::ingest::{Ingest, IngestReport, LoadMode};
use crate::key_cache::{self, TableKeys};
use crate::layout;
use crate::limits::{GET_KEYS_TO_READ_MAX, KEY_LOOKUP_KEYS_MAX};
use crate::merge::MergeBudget;
use crate::read_ahead::FileIdentity;
use crate::rows::{self, RowSource, batches_to_json, json_value};
use crate::spill::LoadBudget;
use crate::staging::{Staging, open_pinned};
use futures::TryStreamExt;
use omnigraph_core::adapter;
use omnigraph_core::arrow_array::RecordBatch;
use omnigraph_core::lance::Dataset;
use omnigraph_core::lance::table::format::Fragment;
use omnigraph_core::schema::{Catalog, TypeDef};
use omnigraph_core::storage::StorageRoot;
use omnigraph_core::{
    ErrorKind, Evidence, InputLocation, OmniError, ReadSetMember, Result, StorageKind,
};
use omnigraph_publish::BranchWriter;
use omnigraph_publish::CommitAttempts;
use omnigraph_publish::writer::{Branch, WriteStart};
use parking_lot::Mutex;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// The most rows a `scan` returns when no limit is given.
pub(crate) const SCAN_LIMIT_DEFAULT: usize = 10_000;

/// A handle on one branch of a graph.
#[derive(Debug)]
pub struct Omnigraph {
    /// The branch it writes, the newest head it has seen (writers start from it and
    /// the CAS catches a stale one, so a warm handle does not read the head before a
    /// write) and the catalog it last read.
    writer: Branch,
    /// The newest open handle per table id: a pinned version opens once per handle.
    tables: Mutex<HashMap<String, Arc<Dataset>>>,
    /// The keys of each table this handle has checked keys against, each behind its
    /// own lock: filling one table's cache never blocks key checks on another.
    key_caches: Mutex<HashMap<String, Arc<tokio::sync::Mutex<TableKeys>>>>,
    /// The endpoints of each edge table a node delete of this handle cascaded to, each
    /// behind its own lock.
    endpoint_caches: Mutex<HashMap<String, Arc<tokio::sync::Mutex<EdgeEndpoints>>>>,
    /// The memory each key set of a load holds, and where it spills past that.
    load_budget: LoadBudget,
    /// What one merge may hold in memory.
    merge_budget: MergeBudget,
    /// The adjacency artifacts this handle read, and versions it found none for.
    adjacency: AdjacencyCache,
    /// Whether traversals may use adjacency artifacts (see [`Omnigraph::without_adjacency`]).
    adjacency_reads: bool,
    /// Whether a query may read a key's row from the place the key cache holds.
    key_rows: bool,
}

/// What to read from one type.
#[derive(Clone, Debug, Default)]
pub struct ScanRequest {
    /// A SQL filter over the type's columns.
    pub filter: Option<String>,
    /// The columns to return; all when empty.
    pub columns: Vec<String>,
    /// The most rows to return (`SCAN_LIMIT_DEFAULT` when `None`).
    pub limit: Option<usize>,
}

impl Omnigraph {
    /// Creates a graph at `uri` with the schema in `schema_text` (`.pg` source).
    pub async fn create(uri: &str, schema_text: &str) -> Result<Omnigraph> {
        Omnigraph::create_as(uri, schema_text, &default_actor()).await
    }

    /// Creates a graph as `actor`: the handle publishes as it, and genesis names it.
    pub async fn create_as(uri: &str, schema_text: &str, actor: &str) -> Result<Omnigraph> {
        Omnigraph::create_in_root(StorageRoot::open(uri).await?, schema_text, actor).await
    }

    /// Creates a graph as `actor` in a root already open (with its storage options).
    pub async fn create_in_root(
        root: Arc<StorageRoot>,
        schema_text: &str,
        actor: &str,
    ) -> Result<Omnigraph> {
        let catalog = omnigraph_core::schema::parse("schema", schema_text)?;
        let (graph, genesis) = Graph::create_in_root(root, &catalog, actor).await?;
        let mut handle = Omnigraph::on(graph, layout::MAIN_BRANCH)?;
        handle.writer = Branch::new(handle.graph().clone(), layout::MAIN_BRANCH, actor)
            .knowing(genesis, Arc::new(catalog));
        Ok(handle)
    }

    /// Opens the graph at `uri` on `main`.
    pub async fn open(uri: &str) -> Result<Omnigraph> {
        Omnigraph::on(Graph::open(uri).await?, layout::MAIN_BRANCH)
    }

    /// Opens the graph in a root already open (with its storage options) on `main`.
    pub async fn open_root(root: Arc<StorageRoot>) -> Result<Omnigraph> {
        Omnigraph::on(Graph::open_root(root).await?, layout::MAIN_BRANCH)
    }

    fn on(graph: Graph, branch: &str) -> Result<Omnigraph> {
        layout::check_branch(branch)?;
        Ok(Omnigraph {
            writer: Branch::new(graph, branch, &default_actor()),
            tables: Mutex::new(HashMap::new()),
            key_caches: Mutex::new(HashMap::new()),
            endpoint_caches: Mutex::new(HashMap::new()),
            load_budget: LoadBudget::default(),
            merge_budget: MergeBudget::default(),
            adjacency: AdjacencyCache::default(),
            adjacency_reads: true,
            key_rows: true,
        })
    }

    /// This handle on branch `branch` (its name checked): every read and write goes to
    /// that branch's log from then on. A branch that does not exist is `NotFound` at the
    /// first read or write.
    pub fn with_branch(mut self, branch: &str) -> Result<Omnigraph> {
        layout::check_branch(branch)?;
        // The head and the schema are the branch's own.
        self.writer = Branch::new(self.graph().clone(), branch, self.actor());
        Ok(self)
    }

    /// This handle with traversals that never use adjacency artifacts: every step reads
    /// its edge table (through its index when built). For comparisons and benchmarks;
    /// the results are the same.
    pub fn without_adjacency(mut self) -> Omnigraph {
        self.adjacency_reads = false;
        self
    }

    /// This handle with queries that read a node by its key through the key's index
    /// only, never from the place its key cache holds, and that never fill the cache
    /// for that. For comparisons and benchmarks; the results are the same.
    pub fn without_key_rows(mut self) -> Omnigraph {
        self.key_rows = false;
        self
    }

    /// Whether traversals may use adjacency artifacts.
    pub fn reads_adjacency(&self) -> bool {
        self.adjacency_reads
    }

    pub(crate) fn adjacency_cache(&self) -> &AdjacencyCache {
        &self.adjacency
    }

    /// This handle with loads that keep `budget` for each of their key sets (the keys
    /// given, and the endpoints still to find) and spill sorted runs of keys past it.
    pub fn with_load_budget(mut self, budget: LoadBudget) -> Omnigraph {
        self.load_budget = budget;
        self
    }

    /// The memory budget of a load's key sets, and its spill directory.
    pub fn load_budget(&self) -> &LoadBudget {
        &self.load_budget
    }

    /// This handle with merges that hold at most what `budget` allows; a limit of 0 is
    /// `bad_input`.
    pub fn with_merge_budget(mut self, budget: MergeBudget) -> Result<Omnigraph> {
        budget.check()?;
        self.merge_budget = budget;
        Ok(self)
    }

    /// What one merge may hold in memory.
    pub(crate) fn merge_budget(&self) -> MergeBudget {
        self.merge_budget
    }

    /// The graph underneath (log, snapshots, root).
    pub fn graph(&self) -> &Graph {
        self.writer.graph()
    }

    /// Reads the branch head (and remembers it). A fresh read of the log is the truth,
    /// even when the handle knew a higher seq (a root restored from a backup): writing
    /// on from that would leave a gap.
    pub async fn head(&self) -> Result<GraphCommit> {
        self.writer.head().await
    }

    /// Remembers a head this handle published or read after losing a race, unless it
    /// already knows a newer one ([`Branch::note_head`]).
    pub(crate) fn note_head(&self, head: &GraphCommit) {
        self.writer.note_head(head);
    }

    /// The newest head the handle knows, or the branch head when it knows none.
    pub(crate) async fn base(&self) -> Result<GraphCommit> {
        self.writer.newest_known_head().await
    }

    /// What a write starts from: the newest head the handle knows, its catalog and a
    /// staging area on it.
    pub(crate) async fn begin(&self) -> Result<WriteStart> {
        self.writer.begin().await
    }

    /// The catalog in force at `commit`.
    pub async fn catalog_at(&self, commit: &GraphCommit) -> Result<Arc<Catalog>> {
        self.writer.catalog_at(commit).await
    }

    /// Inserts JSON objects as rows of `type_name`. Every row is checked first; a bad
    /// one fails the call with nothing published. Rows whose key exists already are a
    /// `KeyConflict`; an edge whose endpoint node does not exist is `BadInput`.
    pub async fn insert_json(
        &self,
        type_name: &str,
        objects: Vec<Map<String, Value>>,
    ) -> Result<GraphCommit> {
        // On the heap: an ingest's future is large, and callers await it deep inside
        // their own.
        Box::pin(self.insert_json_parts(vec![(type_name.to_owned(), objects)])).await
    }

    /// Runs an ingest `call`. A refusal made, before anything was published, on the head
    /// this handle last saw is not final when the branch head has moved past it since: another
    /// writer may have inserted the node an edge names or deleted the key a row reuses
    /// (`bad_input`, `key_conflict`), cleanup may have reclaimed that head's versions
    /// (`commit_reclaimed`, `storage_not_found`), and a schema apply may have changed
    /// the schema the call checked its rows against (`read_set_changed` on the schema,
    /// which no re-commit can follow). The call then runs once more, on the
    /// branch head. Any other failure, or a head that did not move, is final; so is the
    /// second run's outcome.
    async fn refused_only_at_the_head<T, F>(&self, call: impl FnMut() -> F) -> Result<T>
    where
        F: std::future::Future<Output = Result<T>>,
    {
        self.refused_only_at_the_head_if(call, || true).await
    }

    /// [`Omnigraph::refused_only_at_the_head`] for a call whose input may not be there
    /// twice: it runs again only when `rerunnable` says so, else the first refusal is
    /// final.
    async fn refused_only_at_the_head_if<T, F>(
        &self,
        mut call: impl FnMut() -> F,
        rerunnable: impl FnOnce() -> bool,
    ) -> Result<T>
    where
        F: std::future::Future<Output = Result<T>>,
    {
        let seen = self.writer.known_head();
        let first = call().await;
        let (Err(error), Some(seen)) = (&first, seen) else {
            return first;
        };
        let stale_view = matches!(
            error.kind(),
            ErrorKind::BadInput
                | ErrorKind::KeyConflict
                | ErrorKind::CommitReclaimed
                | ErrorKind::Storage(StorageKind::NotFound)
        ) || matches!(
            error,
            OmniError::ReadSetChanged {
                member: ReadSetMember::Schema { .. },
                ..
            }
        );
        // Nothing published: the first run left nothing, or staging cleanup reclaims.
        let left = error.evidence().clone();
        if !stale_view
            || !matches!(left, Evidence::BeforeEffect | Evidence::Unpublished)
            || !rerunnable()
        {
            return first;
        }
        // The first refusal stands when the head cannot be read, or did not move.
        match self.head().await {
            Ok(head) if head.commit_id != seen.commit_id => {
                call()
                    .await
                    .map_err(|error| match (&left, error.evidence()) {
                        // What the first run staged is still there.
                        (Evidence::Unpublished, Evidence::BeforeEffect) => {
                            error.with_evidence(Evidence::Unpublished)
                        }
                        _ => error,
                    })
            }
            _ => first,
        }
    }

    /// Inserts JSON objects of several types in one commit: each part is a type and its
    /// rows, checked as [`Omnigraph::insert_json`] checks them (a bad row names its row
    /// within its part). A host that gathers concurrent inserts publishes them this way
    /// in one commit instead of racing one commit each.
    pub async fn insert_json_parts(
        &self,
        parts: Vec<(String, Vec<Map<String, Value>>)>,
    ) -> Result<GraphCommit> {
        // A cold handle reads the branch head itself: it never runs a call twice, so
        // its rows are not copied.
        if self.writer.known_head().is_none() {
            return self.insert_parts_once(parts).await;
        }
        self.refused_only_at_the_head(|| self.insert_parts_once(parts.clone()))
            .await
    }

    async fn insert_parts_once(
        &self,
        parts: Vec<(String, Vec<Map<String, Value>>)>,
    ) -> Result<GraphCommit> {
        let mut ingest = Ingest::start(self, LoadMode::Append).await?;
        for (type_name, objects) in parts {
            for (row, object) in objects.into_iter().enumerate() {
                let source = RowSource {
                    source: "insert".into(),
                    line: None,
                    row: row as u64,
                };
                ingest.push(&type_name, source, object, 0).await?;
            }
        }
        let report = ingest.finish("insert").await?;
        report.commit.ok_or_else(|| {
            OmniError::bad_input(
                InputLocation::in_source("insert"),
                "there are no rows to insert",
            )
        })
    }

    /// Inserts Arrow record batches as rows of `type_name`, in one commit. Each batch's
    /// columns must be columns of the type with the same Arrow types; the rows then go
    /// through the same checks as [`Omnigraph::insert_json`] (keys, required values,
    /// edge endpoints; an edge without an id gets a minted one), column by column. They
    /// are staged as given, never converted to JSON: a float NaN is kept.
    pub async fn insert_batches(
        &self,
        type_name: &str,
        batches: &[RecordBatch],
    ) -> Result<GraphCommit> {
        self.refused_only_at_the_head(|| self.insert_batches_once(type_name, batches))
            .await
    }

    async fn insert_batches_once(
        &self,
        type_name: &str,
        batches: &[RecordBatch],
    ) -> Result<GraphCommit> {
        let mut ingest = Ingest::start(self, LoadMode::Append).await?;
        // Owned, as a read-ahead's input is; a batch's clone shares its buffers.
        let given: Vec<RecordBatch> = batches.to_vec();
        let given = crate::read_ahead::ReadAhead::inline(Box::new(given.into_iter().map(Ok)));
        ingest
            .push_batches(type_name, "batch", given, |_| {})
            .await?;
        let report = ingest.finish("insert").await?;
        report.commit.ok_or_else(|| {
            OmniError::bad_input(
                InputLocation::in_source("batch").type_name(type_name),
                "there are no rows to insert",
            )
        })
    }

    /// Loads a JSONL file: one object per line, each with a `type` field naming its
    /// node or edge type (an edge's `src` and `dst` are its endpoints' keys). Rows are
    /// validated and staged in bounded batches and published in one commit; a bad line
    /// fails the load, naming the file, line, type and field, and publishes nothing.
    pub async fn load(&self, path: &std::path::Path, mode: LoadMode) -> Result<IngestReport> {
        self.load_with_progress(path, mode, |_| {}).await
    }

    /// [`Omnigraph::load`], calling `progress` as the input is read (about every MiB,
    /// and once at the end), so an embedder can show how far the load is.
    pub async fn load_with_progress(
        &self,
        path: &std::path::Path,
        mode: LoadMode,
        mut progress: impl FnMut(&LoadProgress),
    ) -> Result<IngestReport> {
        let name = path.display().to_string();
        let cannot_open = |error: std::io::Error| {
            OmniError::bad_input(
                InputLocation::in_source(&name),
                format!("cannot open: {error}"),
            )
        };
        let file = crate::read_ahead::open_input(path)
            .await
            .map_err(cannot_open)?;
        let meta = file.metadata().ok().filter(std::fs::Metadata::is_file);
        // A pipe or FIFO has no size to show progress against.
        let total_bytes = meta.as_ref().map(std::fs::Metadata::len);
        // A run on the branch head after a refusal on a stale one (see
        // `refused_only_at_the_head`) reads the same input again: a file from its path
        // while it is the same, unchanged file; anything else (a pipe, a FIFO) from
        // what the first run kept of it, when it read it whole within the budget. A
        // cold handle never runs twice and keeps nothing.
        let identity = meta.as_ref().map(FileIdentity::of);
        let warm = self.writer.known_head().is_some();
        let spool = (warm && identity.is_none()).then(|| {
            Arc::new(crate::jsonl::Spool::new(
                self.load_budget.input_spool_bytes_max,
            ))
        });
        let rerunnable = || match (&identity, &spool) {
            (Some(identity), _) => std::fs::metadata(path)
                .is_ok_and(|now| now.is_file() && FileIdentity::of(&now) == *identity),
            (None, Some(spool)) => spool.is_whole(),
            (None, None) => false,
        };
        let mut first = Some(file);
        let progress = Mutex::new(&mut progress);
        self.refused_only_at_the_head_if(
            || {
                let (input, keep): (std::io::Result<Box<dyn std::io::Read + Send>>, _) =
                    match (first.take(), &spool) {
                        (Some(file), _) => (Ok(Box::new(file)), spool.clone()),
                        (None, Some(spool)) => match spool.replay() {
                            Some(kept) => (Ok(Box::new(kept)), None),
                            None => (Err(std::io::Error::other("the input was not kept")), None),
                        },
                        (None, None) => (
                            std::fs::File::open(path)
                                .map(|file| Box::new(file) as Box<dyn std::io::Read + Send>),
                            None,
                        ),
                    };
                // A second run reports from the start of the input again.
                self.load_once(
                    &name,
                    input.map_err(cannot_open),
                    total_bytes,
                    keep,
                    mode,
                    |read: &LoadProgress| (*progress.lock())(read),
                )
            },
            rerunnable,
        )
        .await
    }

    /// One run of a JSONL load of `input` (named `name`, of `total_bytes` when known),
    /// keeping what it reads in `spool` when given.
    async fn load_once(
        &self,
        name: &str,
        input: Result<Box<dyn std::io::Read + Send>>,
        total_bytes: Option<u64>,
        spool: Option<Arc<crate::jsonl::Spool>>,
        mode: LoadMode,
        mut progress: impl FnMut(&LoadProgress),
    ) -> Result<IngestReport> {
        let input = input?;
        let mut ingest = Ingest::start(self, mode).await?;
        let read = crate::jsonl::push_jsonl(
            &mut ingest,
            name,
            input,
            total_bytes,
            spool,
            |bytes_read, rows| {
                progress(&LoadProgress {
                    bytes_read,
                    total_bytes,
                    rows,
                })
            },
        )
        .await;
        match read {
            Ok(()) => ingest.finish("load").await,
            Err(error) => Err(ingest.failed(error)),
        }
    }

    /// Which of `keys` (rendered JSON) exist in the table of `type_def` at `base`.
    pub(crate) async fn existing_keys(
        &self,
        base: &GraphCommit,
        type_def: &TypeDef,
        keys: &[impl AsRef<str>],
    ) -> Result<Vec<String>> {
        let (key_column, key_type) = (type_def.key_column(), type_def.key_type());
        let pin = base.require_pin_of_type(type_def.name())?;
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        // The table's own manifest says whether it is empty, not the commit's
        // `row_count`: a stored number is not trusted to skip a check.
        let table = self.table_at(base, &pin.table_id).await?;
        if table.manifest().fragments.is_empty() {
            return Ok(Vec::new());
        }
        {
            let cache = self.key_cache(&pin.table_id);
            let mut cache = cache.lock().await;
            if cache.refresh(&table, key_column).await? {
                return Ok(cache.existing(keys));
            }
        }
        let mut found = Vec::new();
        for chunk in keys.chunks(KEY_LOOKUP_KEYS_MAX) {
            let filter = rows::key_in_filter(key_column, chunk.iter().map(AsRef::as_ref), key_type);
            let batches = scan_table(
                &table,
                &ScanRequest {
                    filter: Some(filter),
                    columns: vec![key_column.to_string()],
                    limit: Some(chunk.len()),
                },
            )
            .await?;
            for batch in &batches {
                for index in 0..batch.num_rows() {
                    found.push(rows::render_key(&json_value(
                        batch.column(0).as_ref(),
                        index,
                    )));
                }
            }
        }
        Ok(found)
    }

    /// The key cache of `table_id`; the handle-wide lock is held only to find it.
    pub(crate) fn key_cache(&self, table_id: &str) -> Arc<tokio::sync::Mutex<TableKeys>> {
        self.key_caches
            .lock()
            .entry(table_id.to_string())
            .or_default()
            .clone()
    }

    /// The endpoint cache of the edge table `table_id`.
    pub(crate) fn endpoint_cache(&self, table_id: &str) -> Arc<tokio::sync::Mutex<EdgeEndpoints>> {
        self.endpoint_caches
            .lock()
            .entry(table_id.to_string())
            .or_default()
            .clone()
    }

    /// After this handle appended `keys` to `table_id` (from `base_version` to `tip`),
    /// its key cache takes them without reading the table again.
    pub(crate) async fn note_appended(
        &self,
        table_id: &str,
        base_version: u64,
        tip: &Dataset,
        keys: impl IntoIterator<Item = String>,
    ) {
        let cache = self.key_caches.lock().get(table_id).cloned();
        if let Some(cache) = cache {
            cache.lock().await.extend(base_version, tip, keys);
        }
    }

    /// Forgets the cached keys of `table_id` (after a write that may have removed keys).
    pub(crate) async fn forget_keys(&self, table_id: &str) {
        self.key_caches.lock().remove(table_id);
    }

    /// The branch this handle reads and writes.
    pub fn branch(&self) -> &str {
        self.writer.branch()
    }

    /// Who this handle publishes as.
    pub fn actor(&self) -> &str {
        self.writer.actor()
    }

    /// Publishes `staging` as this handle: on success the handle remembers the new head
    /// and tips; on a read-set conflict it remembers the head the lost race read (or,
    /// when none was read, forgets its cached head), so the next write or follow starts
    /// from a head at least as new as the one that beat it, never the same stale one.
    pub async fn publish_staged(
        &self,
        staging: &Staging,
        read_set: crate::publication::ReadSet,
        operation: crate::commit::CommitOperation,
    ) -> Result<GraphCommit> {
        let attempts = CommitAttempts::new();
        self.publish_staged_holding(staging, read_set, operation, None, &attempts)
            .await
    }

    /// [`Omnigraph::publish_staged`] by a write that holds the reservation `holding`
    /// (`docs/format.md` §7.7): it does not wait for it, and its commit releases it.
    /// Its commit PUTs count in the write's `attempts`.
    pub(crate) async fn publish_staged_holding(
        &self,
        staging: &Staging,
        read_set: crate::publication::ReadSet,
        operation: crate::commit::CommitOperation,
        holding: Option<&str>,
        attempts: &CommitAttempts,
    ) -> Result<GraphCommit> {
        let requires = staging
            .requirements(read_set)
            .holding(holding.map(str::to_string));
        let publication = staging
            .publication(requires, operation, self.actor())
            .await?;
        self.publish_as_handle(&publication, staging, attempts)
            .await
    }

    /// Publishes `publication` (staged in `staging`) as this handle: the branch
    /// writer follows the head ([`Branch::publish`]), and the handle keeps the tables
    /// it staged; see [`Omnigraph::publish_staged`].
    pub(crate) async fn publish_as_handle(
        &self,
        publication: &crate::publication::Publication,
        staging: &Staging,
        attempts: &CommitAttempts,
    ) -> Result<GraphCommit> {
        let commit = self.writer.publish(publication, attempts).await?;
        self.keep_staged_tables(staging);
        Ok(commit)
    }

    /// After a publication: the chain tips as the open tables of their new pins, so the
    /// next write on this handle reads none of them again.
    fn keep_staged_tables(&self, staging: &Staging) {
        for table_id in staging.chain_ids() {
            if let Some(link) = staging.links_of(&table_id).last() {
                self.tables.lock().insert(table_id, link.dataset.clone());
            }
        }
    }

    /// Forgets the cached head: the next write reads the branch head first.
    pub(crate) fn forget_head(&self) {
        self.writer.forget_head();
    }

    /// The table `table_id` at the version `commit` pins, from the handle's cache when
    /// it holds that version.
    pub(crate) async fn table_at(
        &self,
        commit: &GraphCommit,
        table_id: &str,
    ) -> Result<Arc<Dataset>> {
        let pin = commit.require_pin(table_id)?;
        if let Some(table) = self.tables.lock().get(table_id)
            && adapter::version_of(table) == pin.version
        {
            return Ok(table.clone());
        }
        let table = open_pinned(self.graph().root(), commit, pin).await?;
        self.tables
            .lock()
            .insert(table_id.to_string(), table.clone());
        Ok(table)
    }

    /// The table holding `type_name` at the version `commit` pins (from the cache): the
    /// exact version a read at `commit` must see, never a moving table. Outside the
    /// supported API (it hands out Lance's `Dataset`): the query crate reads through it.
    #[cfg(feature = "internal-api")]
    pub async fn pinned_table(
        &self,
        commit: &GraphCommit,
        type_name: &str,
    ) -> Result<Arc<Dataset>> {
        self.table_of_type(commit, type_name).await
    }

    /// Where the row of `key` (rendered as the key cache renders it) is in `table`, the
    /// version of `type_name` that `commit` pins: `Some(None)` when `table` lacks it.
    /// `None` when this handle's key cache cannot say at once, and the caller reads
    /// through the key's index: the cache is in use (by a write, or by a refresh), it
    /// describes another version of the table, it holds the key without its row's
    /// place (a fragment this handle appended), the key is not text or an integer, or
    /// the table has more rows than the cache holds keys. A read never waits for the
    /// cache nor reads for it: when `commit` is at least the newest head this handle
    /// knows, a task of its own brings the cache to `table` (reading the fragments it
    /// lacks, and those whose places it lacks), holding it until done. A read at an
    /// older commit never moves it: the writes the cache serves start from the head.
    /// Outside the supported API (it takes Lance's `Dataset`): the query crate reads a
    /// key's row through it.
    #[cfg(feature = "internal-api")]
    pub async fn key_row(
        &self,
        commit: &GraphCommit,
        type_name: &str,
        table: &Arc<Dataset>,
        key: &str,
    ) -> Result<Option<Option<u64>>> {
        if !self.key_rows {
            return Ok(None);
        }
        let catalog = self.catalog_at(commit).await?;
        let type_def = catalog.require(type_name)?;
        if !type_def.is_node() || !key_cache::renders_alike(type_def) {
            return Ok(None);
        }
        if table.manifest().fragments.is_empty() {
            return Ok(Some(None));
        }
        let pin = commit.require_pin_of_type(type_name)?;
        let Ok(mut cache) = self.key_cache(&pin.table_id).try_lock_owned() else {
            return Ok(None);
        };
        let version = table.manifest().version;
        let at_version = cache.version() == Some(version);
        if at_version && let Some(row) = cache.row_of(key) {
            return Ok(Some(row));
        }
        // The head a query at the head just read; an older commit leaves the cache as
        // it is, and so does a version whose refresh failed or found more keys than a
        // cache holds (until the table changes).
        let at_head = self
            .writer
            .known_head()
            .is_some_and(|head| commit.seq >= head.seq);
        if !at_head || cache.failed_at() == Some(version) {
            return Ok(None);
        }
        if at_version {
            // The key is kept without its place: the refresh reads its fragment again.
            cache.readdress();
        }
        let (table, key_column) = (table.clone(), type_def.key_column().to_owned());
        // Dropped with the runtime. A refresh that fails, or finds more keys than a
        // cache holds, leaves it cold, remembering the version.
        drop(tokio::spawn(async move {
            if !matches!(cache.refresh(&table, &key_column).await, Ok(true)) {
                cache.failed(version);
            }
        }));
        Ok(None)
    }

    /// The table holding `type_name` at the version `commit` pins (from the cache).
    pub(crate) async fn table_of_type(
        &self,
        commit: &GraphCommit,
        type_name: &str,
    ) -> Result<Arc<Dataset>> {
        self.table_at(commit, &commit.require_pin_of_type(type_name)?.table_id)
            .await
    }

    /// The row of `type_name` whose key is `key`, as JSON, at `at`. At the head, a
    /// handle that holds the table's keys already (a warm writer's) reads only the
    /// fragment that holds the key, and nothing when the table lacks it; otherwise every
    /// fragment no index covers is read. A head newer than the one the handle knew is
    /// remembered, so its next write builds on it.
    pub async fn get(
        &self,
        type_name: &str,
        key: &Value,
        at: &CommitRef,
    ) -> Result<Option<Map<String, Value>>> {
        let commit = self.graph().commit(self.branch(), at).await?;
        let catalog = self.catalog_at(&commit).await?;
        let type_def = catalog.require(type_name)?;
        let filter = format!(
            "`{}` = {}",
            type_def.key_column(),
            rows::key_filter_literal(type_def, key)?
        );
        let table_id = &commit.require_pin_of_type(type_name)?.table_id;
        let table = self.table_at(&commit, table_id).await?;
        let request = ScanRequest {
            filter: Some(filter),
            columns: Vec::new(),
            limit: Some(1),
        };
        let within = match at {
            CommitRef::Head => {
                // A fresher head than the handle knew: its next write stages on it (and
                // on the keys this read brings up to date) instead of losing the slot.
                self.note_head(&commit);
                self.warm_fragments_of_key(table_id, &table, type_def, key)
                    .await?
            }
            _ => None,
        };
        let found = match within {
            Some(fragments) if fragments.is_empty() => return Ok(None),
            Some(fragments) => scan_fragments(&table, fragments, &request).await?,
            None => scan_table(&table, &request).await?,
        };
        Ok(batches_to_json(&found).into_iter().next())
    }

    /// The fragments of `table` (the version of `table_id` a read opened) that hold
    /// `key`, a valid key of `type_def`, when this handle holds the table's keys already
    /// and brings them to `table` reading at most [`GET_KEYS_TO_READ_MAX`] keys: none
    /// when the table lacks it. `None` otherwise, or when the table has too many keys
    /// to hold.
    async fn warm_fragments_of_key(
        &self,
        table_id: &str,
        table: &Arc<Dataset>,
        type_def: &TypeDef,
        key: &Value,
    ) -> Result<Option<Vec<Fragment>>> {
        if !key_cache::renders_alike(type_def) {
            return Ok(None);
        }
        // A cache in use (a write's, or a task a query started) is not waited for: the
        // `get` scans.
        let Ok(mut cache) = self.key_cache(table_id).try_lock_owned() else {
            return Ok(None);
        };
        // A cache far behind (after a compaction, say) is left to the next write: the
        // scan may find the key through an index at less cost.
        if !cache.is_warm() || cache.keys_to_read(table) > GET_KEYS_TO_READ_MAX {
            return Ok(None);
        }
        if !cache.refresh(table, type_def.key_column()).await? {
            return Ok(None);
        }
        // Rendered as the cache renders the keys it reads from the table.
        let ids = cache.fragments_of(&[rows::render_key(key)]);
        // The cache was just brought to this very version of the table.
        omnigraph_core::fragments::with_ids(&table.manifest().fragments, &ids)
            .map(Some)
            .ok_or_else(|| {
                OmniError::internal(format!(
                    "the key cache of {} names fragments {ids:?} it lacks",
                    table.uri()
                ))
            })
    }

    /// How many rows of `type_name` at `at` `filter` holds for (all rows without one).
    pub async fn count(
        &self,
        type_name: &str,
        filter: Option<&str>,
        at: &CommitRef,
    ) -> Result<u64> {
        let commit = self.graph().commit(self.branch(), at).await?;
        if let Some(filter) = filter {
            let catalog = self.catalog_at(&commit).await?;
            omnigraph_core::filter::check_on_type(catalog.require(type_name)?, filter, "count")?;
        }
        let table = self.table_of_type(&commit, type_name).await?;
        let counted = table.count_rows(filter.map(str::to_string)).await;
        counted.map(|count| count as u64).map_err(|error| {
            input_or_storage(
                InputLocation::in_source("count").field("filter"),
                "count rows",
                error,
            )
        })
    }

    /// Rows of `type_name` at `at`, filtered, projected and limited.
    pub async fn scan(
        &self,
        type_name: &str,
        request: &ScanRequest,
        at: &CommitRef,
    ) -> Result<Vec<RecordBatch>> {
        let commit = self.graph().commit(self.branch(), at).await?;
        if let Some(filter) = &request.filter {
            // Checked against the type's own columns first: the error then names the
            // user's filter and properties, never Lance's internals.
            let catalog = self.catalog_at(&commit).await?;
            omnigraph_core::filter::check_on_type(catalog.require(type_name)?, filter, "scan")?;
        }
        let table = self.table_of_type(&commit, type_name).await?;
        scan_table(&table, request).await
    }
}

async fn scan_table(
    table: &omnigraph_core::lance::Dataset,
    request: &ScanRequest,
) -> Result<Vec<RecordBatch>> {
    scan_with(table.scan(), request).await
}

/// [`scan_table`] over `fragments` of `table` only.
async fn scan_fragments(
    table: &omnigraph_core::lance::Dataset,
    fragments: Vec<Fragment>,
    request: &ScanRequest,
) -> Result<Vec<RecordBatch>> {
    let mut scanner = table.scan();
    scanner.with_fragments(fragments);
    scan_with(scanner, request).await
}

async fn scan_with(
    mut scanner: omnigraph_core::lance::dataset::scanner::Scanner,
    request: &ScanRequest,
) -> Result<Vec<RecordBatch>> {
    let at = |what: &str| InputLocation::in_source("scan").field(what);
    if let Some(filter) = &request.filter {
        scanner
            .filter(filter)
            .map_err(|error| input_or_storage(at("filter"), "scan", error))?;
    }
    if !request.columns.is_empty() {
        scanner
            .project(&request.columns)
            .map_err(|error| input_or_storage(at("columns"), "scan", error))?;
    }
    let limit = request.limit.unwrap_or(SCAN_LIMIT_DEFAULT) as i64;
    scanner
        .limit(Some(limit), None)
        .map_err(|error| input_or_storage(at("limit"), "scan", error))?;
    let stream = scanner
        .try_into_stream()
        .await
        .map_err(|error| input_or_storage(at("filter"), "scan", error))?;
    stream
        .try_collect()
        .await
        .map_err(|error| OmniError::from_lance("scan", error))
}

/// A Lance failure while taking the caller's filter or columns: a storage request
/// that failed keeps its storage kind (a throttled GET is transient, not bad input);
/// anything else is the input's fault.
pub(crate) fn input_or_storage(
    location: InputLocation,
    operation: &str,
    error: omnigraph_core::lance::Error,
) -> OmniError {
    match omnigraph_core::classify::lance_storage_cause(&error) {
        Some(kind) => OmniError::storage(kind, operation, Box::new(error)),
        None => OmniError::bad_input(location, error.to_string()),
    }
}

/// How far a load is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadProgress {
    /// Input bytes read so far.
    pub bytes_read: u64,
    /// The input's size, when the file system says.
    pub total_bytes: Option<u64>,
    /// Rows read so far.
    pub rows: u64,
}

/// Who a handle's commits name when not told: `OMNIGRAPH_ACTOR`, else the user, else
/// `omnigraph`.
pub fn default_actor() -> String {
    std::env::var("OMNIGRAPH_ACTOR")
        .or_else(|_| std::env::var("USER"))
        .unwrap_or_else(|_| "omnigraph".into())
}
