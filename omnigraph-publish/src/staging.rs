//! Detached staging chains: per table, links staged on the table's pinned version
//! (through the adapter), then the chain tips of every touched table published in one
//! commit. A multi-table change is all visible or not at all: until the commit lands,
//! every link is unreachable staging.

use crate::commit::{CommitOperation, GraphCommit, TablePin};
use crate::publication::{Change, Publication, ReadSet, Requirements};
use crate::publisher;
use futures::future::BoxFuture;
use omnigraph_core::adapter::{self, LinkOrigin, StagedLink};
use omnigraph_core::storage::StorageRoot;
use omnigraph_core::{ErrorKind, Evidence, OmniError, Result, StorageKind, seams};
use std::collections::BTreeMap;
use std::sync::Arc;

/// One table's chain: its pin at the base and the links staged on it.
#[derive(Debug)]
pub struct TableChain {
    pin: TablePin,
    tip: Arc<omnigraph_core::lance::Dataset>,
    links: Vec<StagedLink>,
}

impl TableChain {
    /// The pin the chain started from.
    pub fn base_pin(&self) -> &TablePin {
        &self.pin
    }

    /// The table at the chain's tip (the base version while no link is staged).
    pub fn tip(&self) -> &Arc<omnigraph_core::lance::Dataset> {
        &self.tip
    }

    /// The links staged so far, oldest first.
    pub fn links(&self) -> &[StagedLink] {
        &self.links
    }
}

/// Runs the Lance work of one link. Maintenance hands its links to its own runtime, so
/// that compaction decoding and index builds do not compete with a host's tasks.
pub type LinkRunner = Arc<
    dyn Fn(
            BoxFuture<'static, Result<Option<StagedLink>>>,
        ) -> BoxFuture<'static, Result<Option<StagedLink>>>
        + Send
        + Sync,
>;

/// Staging on one captured head.
pub struct Staging {
    root: Arc<StorageRoot>,
    base: GraphCommit,
    chains: BTreeMap<String, TableChain>,
    /// Tables created for new types (schema apply): durable, unreachable until published.
    created: Vec<TablePin>,
    /// Whether any link was ever staged here, including links that a rebase took out:
    /// their files stay until cleanup reclaims them.
    wrote: bool,
    /// Where links' Lance work runs; the caller's task when `None`.
    runner: Option<LinkRunner>,
    /// What a full-text build may use.
    full_text: adapter::FullTextBudget,
    /// When staging began: no staged file is older.
    started: seams::Since,
}

/// The task writing a streamed append's data files; dropping it stops the write.
#[derive(Debug)]
pub struct AppendWrite {
    task: tokio::task::JoinHandle<Result<adapter::WrittenAppend>>,
}

impl AppendWrite {
    /// What the write wrote, once its stream ended; its failure otherwise.
    pub async fn finish(mut self) -> Result<adapter::WrittenAppend> {
        match (&mut self.task).await {
            Ok(written) => written.map_err(|error| error.with_evidence(Evidence::Unpublished)),
            Err(join) => Err(OmniError::internal(format!(
                "the task writing an append stopped: {join}"
            ))
            .with_evidence(Evidence::Unpublished)),
        }
    }
}

impl Drop for AppendWrite {
    fn drop(&mut self) {
        // No-op once the task finished. Otherwise the write stops at its next await; the
        // files it finished stay unpublished, as after a crash, for cleanup.
        self.task.abort();
    }
}

impl std::fmt::Debug for Staging {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Staging")
            .field("base", &self.base.seq)
            .field("chains", &self.chains.keys().collect::<Vec<_>>())
            .field("created", &self.created.len())
            .field("wrote", &self.wrote)
            .field("runner", &self.runner.is_some())
            .finish()
    }
}

impl Staging {
    /// Starts staging on `base` (the head the writer captured).
    pub fn new(root: Arc<StorageRoot>, base: GraphCommit) -> Staging {
        Staging {
            root,
            base,
            chains: BTreeMap::new(),
            created: Vec::new(),
            wrote: false,
            runner: None,
            full_text: adapter::FullTextBudget::default(),
            started: seams::Since::now(),
        }
    }

    /// Builds every later full-text index within `budget`.
    pub fn use_full_text_budget(&mut self, budget: adapter::FullTextBudget) {
        self.full_text = budget;
    }

    /// Runs every later link's Lance work through `runner`.
    pub fn run_links_with(&mut self, runner: LinkRunner) {
        self.runner = Some(runner);
    }

    /// The captured head.
    pub fn base(&self) -> &GraphCommit {
        &self.base
    }

    /// Whether a chain for `table_id` has been started.
    pub fn has_chain(&self, table_id: &str) -> bool {
        self.chains.contains_key(table_id)
    }

    /// The ids of the tables with a chain, in order.
    pub fn chain_ids(&self) -> Vec<String> {
        self.chains.keys().cloned().collect()
    }

    /// The links staged on `table_id` (none if it has no chain).
    pub fn links_of(&self, table_id: &str) -> &[StagedLink] {
        self.chains
            .get(table_id)
            .map_or(&[], |chain| chain.links.as_slice())
    }

    /// Whether any link was staged or table created (so a failure leaves unpublished
    /// files).
    pub fn has_staged(&self) -> bool {
        !self.created.is_empty() || self.chains.values().any(|chain| !chain.links.is_empty())
    }

    /// What a failure now leaves behind: the one place a writer's evidence comes from.
    pub fn evidence(&self) -> Evidence {
        if self.wrote || self.has_staged() {
            Evidence::Unpublished
        } else {
            Evidence::BeforeEffect
        }
    }

    /// Creates the empty table of a new type, published with the chains' tips.
    pub async fn create_table(&mut self, type_def: &omnigraph_core::schema::TypeDef) -> Result<()> {
        let pin = crate::graph::create_type_table(&self.root, type_def)
            .await
            .map_err(|error| error.with_evidence(Evidence::Unpublished))?;
        self.created.push(pin);
        Ok(())
    }

    /// Moves staging onto `head` (same schema, a newer head of the same branch).
    /// Chains whose table is still pinned at their base version stay as they are; the
    /// chains of tables that moved are taken out and returned with their links, to be
    /// staged again on the new pins.
    pub fn rebase(&mut self, head: GraphCommit) -> Result<Vec<(String, Vec<StagedLink>)>> {
        if !self.created.is_empty() {
            return Err(OmniError::internal(
                "a writer that creates tables is strict and never rebases",
            ));
        }
        let mut moved = Vec::new();
        let ids: Vec<String> = self.chains.keys().cloned().collect();
        for table_id in ids {
            let head_version = head.require_pin(&table_id)?.version;
            let chain = self.chains.get(&table_id).expect("listed above");
            if head_version != chain.pin.version {
                let chain = self.chains.remove(&table_id).expect("listed above");
                moved.push((table_id, chain.links));
            }
        }
        self.base = head;
        Ok(moved)
    }

    /// Starts the chain of `table_id` from an already open handle on its pinned version
    /// (a warm handle's cache), so staging does not open the table again.
    pub fn seed(
        &mut self,
        table_id: &str,
        table: Arc<omnigraph_core::lance::Dataset>,
    ) -> Result<()> {
        let pin = self.base.require_pin(table_id)?.clone();
        if adapter::version_of(&table) != pin.version {
            return Err(OmniError::internal(format!(
                "seeding table {table_id} at version {} but the base pins {}",
                adapter::version_of(&table),
                pin.version
            )));
        }
        self.chains
            .entry(table_id.to_string())
            .or_insert(TableChain {
                pin,
                tip: table,
                links: Vec::new(),
            });
        Ok(())
    }

    /// The chain of `table_id`, opening the table at its pin on first use.
    pub async fn chain(&mut self, table_id: &str) -> Result<&mut TableChain> {
        if !self.chains.contains_key(table_id) {
            let pin = self.base.require_pin(table_id)?.clone();
            let tip = open_pinned(&self.root, &self.base, &pin).await?;
            self.chains.insert(
                table_id.to_string(),
                TableChain {
                    pin,
                    tip,
                    links: Vec::new(),
                },
            );
        }
        Ok(self.chains.get_mut(table_id).expect("inserted above"))
    }

    /// Stages a link on the tip of `table_id`'s chain. `stage` receives the tip and the
    /// origin to record; a failure after earlier links is `Unpublished`.
    pub async fn stage<F, Fut>(&mut self, table_id: &str, stage: F) -> Result<&StagedLink>
    where
        F: FnOnce(Arc<omnigraph_core::lance::Dataset>, LinkOrigin) -> Fut,
        Fut: std::future::Future<Output = Result<StagedLink>> + Send + 'static,
    {
        let always = move |tip, origin| {
            let link = stage(tip, origin);
            async move { link.await.map(Some) }
        };
        self.stage_optional(table_id, always)
            .await?
            .ok_or_else(|| OmniError::internal("a staged link vanished from its chain"))
    }

    /// `StagingExpired` when this staging is too old for the grace the branch head
    /// records: a link built on a version of it found something missing, and a cleanup
    /// (which records its grace before it deletes) may have reclaimed it while its
    /// writer waited. `None` otherwise, or when the head cannot be read: then the
    /// missing object is reported as it is.
    async fn expired_at_the_head(&self) -> Option<OmniError> {
        let log = crate::log::CommitLog::new(self.root.clone(), &self.base.branch).ok()?;
        let head = log.head().await.ok()?;
        self.check_age_on(&head).err()
    }

    /// Refuses to re-commit or build on this staging once it is older than half the
    /// grace period `head` records: its files may be removed (`StagingExpired`,
    /// `Unpublished`).
    pub fn check_age_on(&self, head: &GraphCommit) -> Result<()> {
        crate::retention::check_staging_age(head, &self.started)
            .map_err(|error| error.with_evidence(Evidence::Unpublished))
    }

    /// Like [`Staging::stage`] for a link that may have nothing to do (`Ok(None)`):
    /// then nothing is staged and the chain is unchanged.
    pub async fn stage_optional<F, Fut>(
        &mut self,
        table_id: &str,
        stage: F,
    ) -> Result<Option<&StagedLink>>
    where
        F: FnOnce(Arc<omnigraph_core::lance::Dataset>, LinkOrigin) -> Fut,
        Fut: std::future::Future<Output = Result<Option<StagedLink>>> + Send + 'static,
    {
        let staged_before = self.wrote || self.has_staged();
        let (tip, base_version, tip_is_staged) = {
            let chain = self.chain(table_id).await?;
            (
                chain.tip.clone(),
                chain.pin.version,
                !chain.links.is_empty(),
            )
        };
        let origin = LinkOrigin {
            branch: self.base.branch.clone(),
            base_seq: self.base.seq,
            base_version,
        };
        let expected = origin.clone();
        let work = stage(tip, origin);
        let staged = match &self.runner {
            Some(runner) => runner(Box::pin(work)).await,
            None => work.await,
        };
        let link = match staged {
            Ok(link) => link,
            Err(error) => {
                if tip_is_staged
                    && error.kind() == ErrorKind::Storage(StorageKind::NotFound)
                    && let Some(expired) = self.expired_at_the_head().await
                {
                    return Err(expired);
                }
                return Err(if staged_before {
                    error.with_evidence(Evidence::Unpublished)
                } else {
                    error
                });
            }
        };
        let Some(link) = link else {
            return Ok(None);
        };
        // A link records its chain's origin, for whoever reads the table.
        let recorded = |name: &str| {
            link.transaction
                .transaction_properties
                .as_ref()
                .and_then(|properties| properties.get(name).cloned())
        };
        assert!(adapter::is_detached(link.version), "a link is detached");
        assert_eq!(
            recorded(adapter::PROP_BASE_VERSION),
            Some(expected.base_version.to_string()),
            "a link records its chain's base pin"
        );
        assert_eq!(recorded(adapter::PROP_BRANCH), Some(expected.branch));
        self.wrote = true;
        let chain = self.chains.get_mut(table_id).expect("opened above");
        chain.tip = link.dataset.clone();
        chain.links.push(link);
        Ok(chain.links.last())
    }

    /// Stages an append of `batches` to `table_id`.
    pub async fn stage_append(
        &mut self,
        table_id: &str,
        batches: Vec<omnigraph_core::arrow_array::RecordBatch>,
    ) -> Result<&StagedLink> {
        self.stage(table_id, |tip, origin| async move {
            adapter::stage_append(&tip, batches, &origin).await
        })
        .await
    }

    /// Starts writing the data files of an append to `table_id` from `batches` as they
    /// arrive, on a task of its own, so the caller checks its next rows while Lance
    /// writes the earlier ones (`batches` with the rows' `schema`). From here on a
    /// failure is `Unpublished`: files may exist.
    /// Once the stream ends, [`AppendWrite::finish`] gives what it wrote, to stage with
    /// [`Staging::stage_written_append`]; dropping it stops the write.
    pub async fn start_append_stream(
        &mut self,
        table_id: &str,
        schema: omnigraph_core::arrow_schema::SchemaRef,
        batches: impl futures::Stream<Item = omnigraph_core::arrow_array::RecordBatch> + Send + 'static,
    ) -> Result<AppendWrite> {
        assert!(
            !seams::in_simulation(),
            "a simulated writer stays on its own task: it stages appends in one call"
        );
        let tip = self.chain(table_id).await?.tip.clone();
        self.wrote = true;
        let task = tokio::spawn(adapter::write_append_stream(tip, schema, batches));
        Ok(AppendWrite { task })
    }

    /// Stages the files of a streamed append on the tip they were written on.
    pub async fn stage_written_append(
        &mut self,
        table_id: &str,
        written: adapter::WrittenAppend,
    ) -> Result<&StagedLink> {
        self.stage(table_id, |tip, origin| async move {
            adapter::commit_written_append(&tip, written, &origin).await
        })
        .await
    }

    /// Stages the deletion of the rows of `table_id` where `predicate` holds.
    pub async fn stage_delete(&mut self, table_id: &str, predicate: &str) -> Result<&StagedLink> {
        let predicate = predicate.to_string();
        self.stage(table_id, |tip, origin| async move {
            adapter::stage_delete(&tip, &predicate, &origin).await
        })
        .await
    }

    /// Stages the deletion of the rows of `fragments` (of the chain's tip) of `table_id`
    /// where `predicate` holds, when any does; no other fragment may hold such a row.
    pub async fn stage_delete_in(
        &mut self,
        table_id: &str,
        fragments: Vec<u64>,
        predicate: &str,
    ) -> Result<Option<&StagedLink>> {
        let predicate = predicate.to_string();
        self.stage_optional(table_id, |tip, origin| async move {
            adapter::stage_delete_in(&tip, &fragments, &predicate, &origin).await
        })
        .await
    }

    /// Stages a build of a declared index that the table lacks.
    pub async fn stage_index(
        &mut self,
        table_id: &str,
        declared: &omnigraph_core::schema::DeclaredIndex,
        kind: adapter::IndexBuildKind,
    ) -> Result<&StagedLink> {
        self.stage_index_build(table_id, declared, kind, false)
            .await
    }

    /// Stages a rebuild of a declared index under its name: the index of that name at
    /// the tip is listed as removed, so the name keeps pointing at exactly one index.
    pub async fn stage_index_rebuild(
        &mut self,
        table_id: &str,
        declared: &omnigraph_core::schema::DeclaredIndex,
        kind: adapter::IndexBuildKind,
    ) -> Result<&StagedLink> {
        self.stage_index_build(table_id, declared, kind, true).await
    }

    async fn stage_index_build(
        &mut self,
        table_id: &str,
        declared: &omnigraph_core::schema::DeclaredIndex,
        kind: adapter::IndexBuildKind,
        replace: bool,
    ) -> Result<&StagedLink> {
        let build = adapter::IndexBuild {
            column: declared.column.clone(),
            name: declared.name.clone(),
            kind,
            replace,
        };
        let full_text = self.full_text;
        self.stage(table_id, |tip, origin| async move {
            adapter::stage_index_within(&tip, &build, &full_text, &origin).await
        })
        .await
    }

    /// The new pins: every chain with links, at its tip, and every created table.
    pub async fn tip_pins(&self) -> Result<Vec<TablePin>> {
        let mut pins = self.created.clone();
        for chain in self.chains.values().filter(|chain| !chain.links.is_empty()) {
            let row_count = chain.tip.count_rows(None).await.map_err(|error| {
                OmniError::from_lance("count rows at the chain tip", error)
                    .with_evidence(Evidence::Unpublished)
            })? as u64;
            pins.push(TablePin {
                version: adapter::version_of(&chain.tip),
                row_count,
                ..chain.pin.clone()
            });
        }
        Ok(pins)
    }

    /// What a commit of this staging asserts: `read_set`, and when staging began, if
    /// it staged anything.
    pub fn requirements(&self, read_set: ReadSet) -> Requirements {
        Requirements {
            staged_since: self.has_staged().then_some(self.started),
            ..Requirements::reading(read_set)
        }
    }

    /// When staging began: staged files are never older.
    pub fn started(&self) -> seams::Since {
        self.started
    }

    /// The publication of every chain's tip (and every created table) in one commit,
    /// asserting `requires`.
    pub async fn publication(
        &self,
        requires: Requirements,
        operation: CommitOperation,
        actor: &str,
    ) -> Result<Publication> {
        Ok(Publication::new(
            self.base.clone(),
            requires,
            Change::tables(self.tip_pins().await?),
            operation,
            actor,
        ))
    }

    /// Publishes every chain's tip in one commit.
    pub async fn publish(
        &self,
        read_set: ReadSet,
        operation: CommitOperation,
        actor: &str,
    ) -> Result<GraphCommit> {
        let requires = self.requirements(read_set);
        let publication = self.publication(requires, operation, actor).await?;
        publisher::publish(&self.root, &publication).await
    }

    /// The read set of a pin-based writer: the base pins of every table it staged on.
    pub fn planned_pins(&self) -> ReadSet {
        ReadSet::staged(self.base_pins())
    }

    /// `(table_id, base version)` of every table with a chain.
    pub fn base_pins(&self) -> Vec<(String, u64)> {
        self.chains
            .values()
            .map(|chain| (chain.pin.table_id.clone(), chain.pin.version))
            .collect()
    }
}

/// Opens a table at the version `commit` pins, from the folder its validated id names.
/// A pinned version that is missing or unreadable is corrupt state naming the commit,
/// the table and the version; a passing or configuration failure of the store keeps
/// its own kind, so a throttled read is retried, not reported as corruption.
pub async fn open_pinned(
    root: &Arc<StorageRoot>,
    commit: &GraphCommit,
    pin: &TablePin,
) -> Result<Arc<omnigraph_core::lance::Dataset>> {
    let path = crate::layout::table_path(&pin.table_id);
    let opened = adapter::open_table_at(root, &path, pin.version).await;
    if let Err(error) = &opened
        && error.kind() == ErrorKind::Storage(StorageKind::NotFound)
    {
        // Cleanup may have reclaimed the commit after the reader checked it, or the
        // reader checked a stale `HEAD` copy: the log's head decides.
        crate::retention::refuse_reclaimed_by_the_head(root, &commit.branch, commit.seq).await?;
    }
    opened.map_err(|error| match error.kind() {
        ErrorKind::Storage(StorageKind::NotFound | StorageKind::Permanent) => OmniError::corrupt(
            format!(
                "{path} (commit {} of branch {}, table {} of type {})",
                commit.seq, commit.branch, pin.table_id, pin.type_name
            ),
            format!(
                "the pinned version {} cannot be opened: {error}",
                pin.version
            ),
        ),
        _ => error,
    })
}
