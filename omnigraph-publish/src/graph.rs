//! Creating and opening a graph: the format object, the schema document, one table per
//! type, and the genesis commit; snapshots and time travel on an open graph.

use crate::commit::{CommitOperation, GraphCommit, TableKind, TablePin};
use crate::layout;
use crate::log::CommitLog;
use crate::publisher::{self, Decided};
use crate::staging::open_pinned;
use omnigraph_core::adapter;
use omnigraph_core::schema::{Catalog, TypeDef};
use omnigraph_core::storage::{PutOutcome, StorageRoot};
use omnigraph_core::{Evidence, OmniError, Result, failpoints, seams};
use std::sync::Arc;

/// The format this build writes and reads.
pub(crate) const FORMAT_VERSION: u32 = 1;
/// The name in every format object.
pub(crate) const FORMAT_NAME: &str = "omnigraph";

/// The content of `_graph/FORMAT`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FormatDoc {
    /// Always `FORMAT_NAME`.
    pub format: String,
    /// The layout version.
    pub format_version: u32,
    /// A unique id for the graph.
    pub graph_id: String,
    /// When it was created (microseconds since the epoch).
    pub created_at: i64,
}

/// Which commit of a branch to read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommitRef {
    /// The newest commit.
    Head,
    /// The commit with this seq.
    Seq(u64),
    /// The commit with this id.
    Id(String),
}

impl CommitRef {
    /// Parses `--at` text: digits are a seq, anything else a commit id.
    pub fn parse(text: &str) -> CommitRef {
        match text.parse::<u64>() {
            Ok(seq) => CommitRef::Seq(seq),
            Err(_) => CommitRef::Id(text.to_string()),
        }
    }
}

/// An open graph.
#[derive(Clone, Debug)]
pub struct Graph {
    root: Arc<StorageRoot>,
    format: FormatDoc,
}

impl Graph {
    /// Creates a graph at `uri` with `catalog`: one empty table per type, and genesis
    /// (seq 0) on `main`. A root that already holds a graph is refused with
    /// `AlreadyInitialized` and nothing is changed. Creation is restartable: a create
    /// that stopped after writing `_graph/FORMAT` but before genesis is finished by the
    /// next one, and a lost or duplicated acknowledgement is resolved by reading back.
    pub async fn create(uri: &str, catalog: &Catalog, actor: &str) -> Result<(Graph, GraphCommit)> {
        Graph::create_in_root(StorageRoot::open(uri).await?, catalog, actor).await
    }

    /// Creates a graph in an already open root (see [`Graph::create`]).
    pub async fn create_in_root(
        root: Arc<StorageRoot>,
        catalog: &Catalog,
        actor: &str,
    ) -> Result<(Graph, GraphCommit)> {
        let log = CommitLog::new(root.clone(), layout::MAIN_BRANCH)?;
        let existing_format = read_format(&root).await?;
        if log.read(0).await?.is_some() {
            return Err(OmniError::AlreadyInitialized {
                root: root.canonical(),
                evidence: Evidence::BeforeEffect,
            });
        }
        let unpublished = |error: OmniError| error.with_evidence(Evidence::Unpublished);
        let schema_bytes = bytes::Bytes::from(catalog.document().to_string());
        put_immutable(&root, &layout::schema_path(catalog.hash()), schema_bytes)
            .await
            .map_err(unpublished)?;
        let mut pins = Vec::new();
        for type_def in catalog.types() {
            pins.push(
                create_type_table(&root, type_def)
                    .await
                    .map_err(unpublished)?,
            );
        }
        let format = match existing_format {
            // An unfinished create left the format object: finish under it.
            Some(format) => format,
            None => write_format(&root).await.map_err(unpublished)?,
        };
        failpoints::reach(failpoints::CREATE_AFTER_FORMAT)
            .await
            .map_err(unpublished)?;
        let genesis = GraphCommit {
            seq: 0,
            commit_id: seams::new_id(),
            parent_commit_id: None,
            branch: layout::MAIN_BRANCH.to_string(),
            created_at: seams::now_micros(),
            actor: actor.to_string(),
            operation: CommitOperation {
                kind: "init".into(),
                summary: format!("{} types", catalog.types().len()),
            },
            schema: catalog.hash().to_string(),
            pins,
            retention: None,
            fork: None,
            deleted: false,
            merged_from: Vec::new(),
            reservations: Vec::new(),
            idempotency_keys: Vec::new(),
            idempotency_fingerprints: Vec::new(),
        };
        genesis.validate().map_err(|message| {
            OmniError::internal(format!("refusing to write genesis: {message}"))
                .with_evidence(Evidence::Unpublished)
        })?;
        let path = layout::commit_path(layout::MAIN_BRANCH, 0);
        match publisher::put_and_decide(&root, &log, &path, &genesis, genesis.to_bytes()?)
            .await
            .map_err(unpublished)?
        {
            Decided::Ours => {}
            Decided::Theirs { .. } => {
                // Another create finished first; the tables made here are unreachable.
                return Err(OmniError::AlreadyInitialized {
                    root: root.canonical(),
                    evidence: Evidence::Unpublished,
                });
            }
        }
        log.write_head_copy(&genesis).await;
        Ok((Graph { root, format }, genesis))
    }

    /// Opens the graph at `uri`; refuses a root without a graph and an unknown format.
    pub async fn open(uri: &str) -> Result<Graph> {
        let root = StorageRoot::open(uri).await?;
        Graph::open_root(root).await
    }

    /// Opens the graph in an already open root.
    pub async fn open_root(root: Arc<StorageRoot>) -> Result<Graph> {
        let Some(format) = read_format(&root).await? else {
            return Err(OmniError::not_found(format!(
                "graph at {} (no {})",
                root.canonical(),
                layout::FORMAT
            )));
        };
        Ok(Graph { root, format })
    }

    /// The storage root.
    pub fn root(&self) -> &Arc<StorageRoot> {
        &self.root
    }

    /// The format object.
    pub fn format(&self) -> &FormatDoc {
        &self.format
    }

    /// The commit log of `branch`.
    pub fn log(&self, branch: &str) -> Result<CommitLog> {
        CommitLog::new(self.root.clone(), branch)
    }

    /// The commit `at` names on `branch`; `NotFound` for the commit that deleted it.
    pub async fn commit(&self, branch: &str, at: &CommitRef) -> Result<GraphCommit> {
        let log = self.log(branch)?;
        let commit = match at {
            CommitRef::Head => log.head().await?,
            CommitRef::Seq(seq) => {
                crate::retention::refuse_reclaimed_by_head_copy(&self.root, branch, *seq).await?;
                match log.read(*seq).await? {
                    Some(commit) => commit,
                    // Gone: reclaimed since the copy was written (the head says so), or
                    // never there.
                    None => {
                        crate::retention::refuse_reclaimed_by_the_head(&self.root, branch, *seq)
                            .await?;
                        return Err(OmniError::not_found(format!(
                            "commit {seq} on branch {branch}"
                        )));
                    }
                }
            }
            CommitRef::Id(id) => {
                // The walk read the head itself: no copy needed.
                let (commit, head) = log.find_from_head(id).await?;
                crate::retention::refuse_reclaimed(&head, commit.seq)?;
                commit
            }
        };
        Graph::live(branch, commit)
    }

    /// The head of `branch`, for a handle that knows `known`, a head it read or
    /// published: what [`Graph::commit`] at the head gives. While `known` is young
    /// enough never to be below the branch's floor, the log is probed from its seq
    /// ([`CommitLog::head_near`]: one GET and one round trip fewer). An older one may be
    /// a commit cleanup reclaimed, or genesis, whose successors are deleted and which
    /// would pass for the head (`docs/format.md` §8.4): the head is read as a fresh
    /// handle reads it.
    pub async fn head_near(&self, branch: &str, known: &GraphCommit) -> Result<GraphCommit> {
        let log = self.log(branch)?;
        let commit = match crate::publisher::above_any_floor(known.created_at) {
            true => log.head_near(known.seq).await?,
            false => log.head().await?,
        };
        Graph::live(branch, commit)
    }

    /// `commit`, read from `branch`'s log, unless it is the record of the branch's
    /// deletion.
    fn live(branch: &str, commit: GraphCommit) -> Result<GraphCommit> {
        if commit.deleted {
            return Err(crate::publisher::branch_deleted(&commit));
        }
        assert!(commit.branch == branch && !commit.deleted);
        Ok(commit)
    }

    /// A snapshot: one commit and the tables it pins.
    pub async fn snapshot(&self, branch: &str, at: &CommitRef) -> Result<Snapshot> {
        Ok(Snapshot {
            root: self.root.clone(),
            commit: self.commit(branch, at).await?,
        })
    }

    /// A snapshot of a commit already read (no request).
    pub fn snapshot_of(&self, commit: GraphCommit) -> Snapshot {
        Snapshot {
            root: self.root.clone(),
            commit,
        }
    }

    /// The schema document a commit names.
    pub async fn catalog(&self, commit: &GraphCommit) -> Result<Catalog> {
        let path = layout::schema_path(&commit.schema);
        let bytes = self
            .root
            .get_capped(&path, crate::limits::SCHEMA_DOCUMENT_BYTES_MAX)
            .await?
            .ok_or_else(|| {
                OmniError::corrupt(
                    &path,
                    format!("commit {} names a schema that is missing", commit.seq),
                )
            })?;
        // Content-addressed: a document whose bytes do not hash to its name is not the
        // schema the commit names, whatever it says.
        let address = Catalog::document_hash(&bytes);
        if address != commit.schema {
            return Err(OmniError::corrupt(
                &path,
                format!(
                    "the document's bytes hash to {address}, not to the address {} that commit {} names",
                    commit.schema, commit.seq
                ),
            ));
        }
        let text = std::str::from_utf8(&bytes)
            .map_err(|_| OmniError::corrupt(&path, "the schema document is not UTF-8"))?;
        let catalog = Catalog::from_document(&path, text)?;
        // The engine's own rendering must be the same bytes: a non-canonical document
        // would give the handle a schema hash other than the commit's.
        if catalog.hash() != commit.schema {
            return Err(OmniError::corrupt(
                &path,
                format!(
                    "the document hashes to {}, not to the address {} that commit {} names",
                    catalog.hash(),
                    commit.schema,
                    commit.seq
                ),
            ));
        }
        assert_eq!(
            catalog.hash(),
            commit.schema,
            "the catalog is the one its commit names"
        );
        Ok(catalog)
    }
}

/// The format object, validated; `None` when the root has none.
async fn read_format(root: &StorageRoot) -> Result<Option<FormatDoc>> {
    let Some(bytes) = root
        .get_capped(layout::FORMAT, crate::limits::FORMAT_BYTES_MAX)
        .await?
    else {
        return Ok(None);
    };
    let format: FormatDoc = serde_json::from_slice(&bytes).map_err(|error| {
        OmniError::corrupt(layout::FORMAT, format!("not a format object: {error}"))
    })?;
    if format.format != FORMAT_NAME || format.format_version != FORMAT_VERSION {
        return Err(OmniError::corrupt(
            layout::FORMAT,
            format!(
                "format {:?} version {} is not supported (this build reads {FORMAT_NAME} version {FORMAT_VERSION})",
                format.format, format.format_version
            ),
        ));
    }
    assert!(format.format == FORMAT_NAME && format.format_version == FORMAT_VERSION);
    Ok(Some(format))
}

/// Writes a new format object, or returns the one already there (this create's own
/// after a lost acknowledgement, or a concurrent create's): genesis decides the race.
async fn write_format(root: &StorageRoot) -> Result<FormatDoc> {
    let format = FormatDoc {
        format: FORMAT_NAME.to_string(),
        format_version: FORMAT_VERSION,
        graph_id: seams::new_id(),
        created_at: seams::now_micros(),
    };
    let bytes = serde_json::to_vec(&format)
        .map_err(|error| OmniError::internal(format!("encode format: {error}")))?;
    let written = root.put_if_absent(layout::FORMAT, bytes.into()).await;
    if let Ok(PutOutcome::Created) = written {
        return Ok(format);
    }
    match (read_format(root).await?, written) {
        (Some(found), _) => Ok(found),
        (None, Err(error)) => Err(error),
        (None, Ok(_)) => Err(OmniError::corrupt(
            layout::FORMAT,
            "put-if-absent found the format object but it cannot be read back",
        )),
    }
}

/// Writes a content-addressed object once: an object already there with the same
/// bytes (this call's own after a lost acknowledgement) is success.
pub async fn put_immutable(root: &StorageRoot, path: &str, bytes: bytes::Bytes) -> Result<()> {
    let written = root.put_if_absent(path, bytes.clone()).await;
    if let Ok(PutOutcome::Created) = written {
        return Ok(());
    }
    match (root.get_capped(path, bytes.len()).await, written) {
        (Ok(Some(found)), _) if found == bytes => Ok(()),
        (Ok(Some(_)), _) | (Err(OmniError::Corrupt { .. }), _) => Err(OmniError::corrupt(
            path,
            "a content-addressed object holds other bytes than its name says",
        )),
        (_, Err(error)) => Err(error),
        (Err(error), Ok(_)) => Err(error),
        (Ok(None), Ok(_)) => Err(OmniError::corrupt(
            path,
            "put-if-absent found the object but it cannot be read back",
        )),
    }
}

/// Creates the empty table of a new type under a minted id, and its pin.
pub(crate) async fn create_type_table(root: &StorageRoot, type_def: &TypeDef) -> Result<TablePin> {
    let table_id = format!("t{}", seams::new_id().to_ascii_lowercase());
    let path = layout::table_path(&table_id);
    let table = adapter::create_table(root, &path, type_def.arrow_schema()).await?;
    Ok(TablePin {
        table_id,
        type_name: type_def.name().to_string(),
        kind: if type_def.is_node() {
            TableKind::Node
        } else {
            TableKind::Edge
        },
        path,
        version: adapter::version_of(&table),
        row_count: 0,
    })
}

/// One commit, read as a consistent view of every table.
#[derive(Clone, Debug)]
pub struct Snapshot {
    root: Arc<StorageRoot>,
    commit: GraphCommit,
}

impl Snapshot {
    /// The commit.
    pub fn commit(&self) -> &GraphCommit {
        &self.commit
    }

    /// The table holding `type_name`, at the pinned version.
    pub async fn table(&self, type_name: &str) -> Result<Arc<omnigraph_core::lance::Dataset>> {
        let pin = self.commit.pin_of_type(type_name).ok_or_else(|| {
            OmniError::not_found(format!("type {type_name} in commit {}", self.commit.seq))
        })?;
        open_pinned(&self.root, &self.commit, pin).await
    }
}
