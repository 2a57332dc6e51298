//! What a writer on one branch offers the layers that publish through it without being
//! it: maintenance stages compactions, index builds and artifacts, and publishes them
//! through a [`BranchWriter`], so it needs neither the graph handle nor its caches.
//! `omnigraph_graph::Omnigraph` implements it (a run then warms the handle that asked
//! for it); [`Branch`] is the plain writer for a crate that takes no graph handle.

use crate::attempts::CommitAttempts;
use crate::commit::{CommitOperation, GraphCommit};
use crate::graph::{CommitRef, Graph};
use crate::publication::{Publication, ReadSet};
use crate::publisher::publish_seeing;
use crate::shared_reads::SharedReads;
use crate::staging::{Staging, open_pinned};
use omnigraph_core::lance::Dataset;
use omnigraph_core::schema::Catalog;
use omnigraph_core::{ErrorKind, Result};
use parking_lot::Mutex;
use std::sync::Arc;

/// A writer on one branch of a graph: its head, the catalog and tables a commit pins,
/// and the exact-CAS publication of what it staged.
#[async_trait::async_trait]
pub trait BranchWriter: Send + Sync {
    /// The graph.
    fn graph(&self) -> &Graph;
    /// The branch it writes.
    fn branch(&self) -> &str;
    /// Who it publishes as.
    fn actor(&self) -> &str;
    /// Reads the branch head (and remembers it).
    async fn head(&self) -> Result<GraphCommit>;
    /// The newest head it knows: the last it read or published, or the branch head when
    /// it knows none.
    async fn newest_known_head(&self) -> Result<GraphCommit>;
    /// The catalog in force at `commit`.
    async fn catalog_at(&self, commit: &GraphCommit) -> Result<Arc<Catalog>>;
    /// The table `table_id` at the version `commit` pins.
    async fn table_at(&self, commit: &GraphCommit, table_id: &str) -> Result<Arc<Dataset>>;
    /// Publishes `staging` with `read_set` as one commit (the exact CAS of
    /// [`crate::publisher`]), its commit PUTs counted in `attempts` (the write's one
    /// bound); on success the writer remembers the new head, and after a lost race the
    /// head it read.
    async fn publish_staged_within(
        &self,
        staging: &Staging,
        read_set: ReadSet,
        operation: CommitOperation,
        attempts: &CommitAttempts,
    ) -> Result<GraphCommit>;
    /// [`BranchWriter::publish_staged_within`] as a write of its own.
    async fn publish_staged(
        &self,
        staging: &Staging,
        read_set: ReadSet,
        operation: CommitOperation,
    ) -> Result<GraphCommit> {
        self.publish_staged_within(staging, read_set, operation, &CommitAttempts::new())
            .await
    }
    /// An artifact of `table_id` at `version` was written: a writer that remembered
    /// finding none there looks again.
    fn artifact_written(&self, _table_id: &str, _version: u64) {}
    /// An empty staging area on `base`, in this writer's root.
    fn staging_on(&self, base: &GraphCommit) -> Staging {
        Staging::new(self.graph().root().clone(), base.clone())
    }
}

/// What a write starts from, read in one call: the newest head its writer knows, the
/// catalog in force there, and an empty staging area on that head.
#[derive(Debug)]
pub struct WriteStart {
    /// The head the write is planned on.
    pub base: GraphCommit,
    /// The catalog in force at `base`.
    pub catalog: Arc<Catalog>,
    /// Where the write stages its tables, on `base`.
    pub staging: Staging,
}

/// The plain [`BranchWriter`]: a branch of a graph, the newest head it read or
/// published, and the catalog it last read. It holds no table or key caches.
#[derive(Debug)]
pub struct Branch {
    graph: Graph,
    branch: String,
    actor: String,
    known_head: Mutex<Option<GraphCommit>>,
    catalog: Mutex<Option<Arc<Catalog>>>,
    /// Reads of the head, shared by the callers that ask at once.
    head_reads: SharedReads<GraphCommit>,
}

impl Branch {
    /// A writer on `branch` of `graph`, publishing as `actor`.
    pub fn new(graph: Graph, branch: &str, actor: &str) -> Branch {
        Branch {
            graph,
            branch: branch.to_string(),
            actor: actor.to_string(),
            known_head: Mutex::new(None),
            catalog: Mutex::new(None),
            head_reads: SharedReads::default(),
        }
    }

    /// The same, knowing `head` and the catalog in force there (a graph it just
    /// created), so its first write reads neither.
    pub fn knowing(self, head: GraphCommit, catalog: Arc<Catalog>) -> Branch {
        *self.known_head.lock() = Some(head);
        *self.catalog.lock() = Some(catalog);
        self
    }

    /// The newest head it knows, if any.
    pub fn known_head(&self) -> Option<GraphCommit> {
        self.known_head.lock().clone()
    }

    /// Remembers a head it published or read after losing a race, unless it already
    /// knows a newer one: tasks sharing the writer finish in any order.
    pub fn note_head(&self, head: &GraphCommit) {
        let mut known = self.known_head.lock();
        if known.as_ref().is_none_or(|newest| newest.seq < head.seq) {
            *known = Some(head.clone());
        }
    }

    /// What a write starts from ([`WriteStart`]).
    pub async fn begin(&self) -> Result<WriteStart> {
        let base = self.newest_known_head().await?;
        let catalog = self.catalog_at(&base).await?;
        let staging = self.staging_on(&base);
        Ok(WriteStart {
            base,
            catalog,
            staging,
        })
    }

    /// Forgets the head it knows: the next write reads the branch head first.
    pub fn forget_head(&self) {
        *self.known_head.lock() = None;
    }

    /// One read of the branch head, probing from the head it knows when it knows one.
    async fn read_head(&self) -> Result<GraphCommit> {
        let probed_from = self.known_head();
        let head = match &probed_from {
            Some(known) => self.graph.head_near(&self.branch, known).await?,
            None => self.graph.commit(&self.branch, &CommitRef::Head).await?,
        };
        // The log's head is the truth, even below the head it knew (a root restored from
        // a backup); but a head a task sharing the writer published meanwhile is newer
        // than this read, and stays.
        let mut known = self.known_head.lock();
        let unchanged =
            known.as_ref().map(|k| &k.commit_id) == probed_from.as_ref().map(|k| &k.commit_id);
        if unchanged || known.as_ref().is_none_or(|k| k.seq < head.seq) {
            *known = Some(head.clone());
        }
        Ok(head)
    }

    /// Publishes `publication` on this branch, its commit PUTs counted in `attempts`:
    /// on success it remembers the new head; on a read-set conflict the head the lost
    /// race read (or, when none was read, it forgets its head), so the next write
    /// starts from a head at least as new as the one that beat it, never the same
    /// stale one.
    pub async fn publish(
        &self,
        publication: &Publication,
        attempts: &CommitAttempts,
    ) -> Result<GraphCommit> {
        // A write serving a request records who it is for and the request's key.
        let serving = match crate::request::WriteRequest::current() {
            Some(request) => Some(
                publication
                    .serving(&request)
                    .map_err(|error| error.with_evidence(publication.failure_evidence()))?,
            ),
            None => None,
        };
        let publication = serving.as_ref().unwrap_or(publication);
        let mut seen = None;
        let published = publish_seeing(self.graph.root(), publication, attempts, &mut seen).await;
        match (&published, seen) {
            (Ok(commit), _) => self.note_head(commit),
            (Err(error), Some(head)) if error.kind() == ErrorKind::ReadSetChanged => {
                self.note_head(&head)
            }
            (Err(error), _)
                if matches!(
                    error.kind(),
                    ErrorKind::ReadSetChanged | ErrorKind::ContentionExhausted
                ) =>
            {
                self.forget_head()
            }
            _ => {}
        }
        published
    }
}

#[async_trait::async_trait]
impl BranchWriter for Branch {
    fn graph(&self) -> &Graph {
        &self.graph
    }

    fn branch(&self) -> &str {
        &self.branch
    }

    fn actor(&self) -> &str {
        &self.actor
    }

    /// Callers that ask at once share reads of the log (`shared_reads.rs`): each gets
    /// the head from a read that started after it asked.
    async fn head(&self) -> Result<GraphCommit> {
        self.head_reads.head(|| self.read_head()).await
    }

    async fn newest_known_head(&self) -> Result<GraphCommit> {
        let known = self.known_head.lock().clone();
        match known {
            Some(head) => Ok(head),
            None => self.head().await,
        }
    }

    async fn catalog_at(&self, commit: &GraphCommit) -> Result<Arc<Catalog>> {
        if let Some(catalog) = self.catalog.lock().clone()
            && catalog.hash() == commit.schema
        {
            return Ok(catalog);
        }
        let catalog = Arc::new(self.graph.catalog(commit).await?);
        assert_eq!(catalog.hash(), commit.schema);
        *self.catalog.lock() = Some(catalog.clone());
        Ok(catalog)
    }

    async fn table_at(&self, commit: &GraphCommit, table_id: &str) -> Result<Arc<Dataset>> {
        open_pinned(self.graph.root(), commit, commit.require_pin(table_id)?).await
    }

    async fn publish_staged_within(
        &self,
        staging: &Staging,
        read_set: ReadSet,
        operation: CommitOperation,
        attempts: &CommitAttempts,
    ) -> Result<GraphCommit> {
        let requires = staging.requirements(read_set);
        let publication = staging
            .publication(requires, operation, &self.actor)
            .await?;
        self.publish(&publication, attempts).await
    }
}
