//! Insert and load: rows of one or many types, validated in bounded batches, staged as
//! detached links and published in one commit.
//!
//! Every row is checked before publication: its shape against the schema, its key
//! against the call (given once) and, in append mode, against the snapshot; an edge's
//! endpoints against the snapshot and the nodes of the same call. The first bad row
//! fails the call and nothing is published. When another writer moved a table first,
//! an append re-commits its staged files on the new pins (Lance renumbers an Append
//! cleanly) and re-checks its keys, a bounded number of times.

use crate::commit::{CommitOperation, GraphCommit};
use crate::omnigraph::Omnigraph;
use crate::rows::{self, RowKey, RowSource, SourcedObject};
use crate::staging::Staging;
use omnigraph_core::adapter::{self, StagedLink};
use omnigraph_core::schema::{Catalog, DeclKind};
use omnigraph_core::{Evidence, OmniError, Result};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap, HashSet};

/// How many times a write re-commits its staged rows on a newer head before it gives up
/// with `ContentionExhausted`.
pub const MAX_INGEST_ATTEMPTS: u32 = 8;
/// Rows of one type validated and staged together.
pub const INGEST_BATCH_ROWS: usize = 8_192;
/// The longest JSONL line accepted, in bytes.
pub const MAX_JSONL_LINE_BYTES: usize = 1 << 20;
/// A merge keeps up to this many of its rows in memory so that it can merge them again
/// on a newer head when another writer moved a table first; a larger merge that loses
/// the race fails with `ReadSetChanged` (nothing published) and is rerun by the caller.
pub const MAX_MERGE_RETAINED_ROWS: usize = 1_000_000;

/// A merge keeps up to this many bytes of its rows (their Arrow buffers) in memory so
/// that it can merge them again on a newer head when another writer moved a table
/// first; a larger merge that loses the race fails with `ReadSetChanged` (nothing
/// published) and is rerun by the caller.
pub const MAX_MERGE_RETAINED_BYTES: usize = 64 << 20;

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

/// An edge endpoint to find among the nodes of the call or of the snapshot.
struct PendingEndpoint {
    source: RowSource,
    edge_type: String,
    role: &'static str,
    node_type: String,
    key: RowKey,
}

/// One ingest call in progress.
pub(crate) struct Ingest<'a> {
    handle: &'a Omnigraph,
    catalog: std::sync::Arc<Catalog>,
    base: GraphCommit,
    mode: LoadMode,
    staging: Staging,
    buffers: HashMap<String, Vec<SourcedObject>>,
    keys: HashMap<String, HashSet<RowKey>>,
    endpoints: Vec<PendingEndpoint>,
    rows: BTreeMap<String, u64>,
    /// Merge mode: `(table_id, key column, rows)` of every staged merge, while the total
    /// stays within [`MAX_MERGE_RETAINED_ROWS`]; `None` once it does not.
    merged: Option<Vec<(String, String, omnigraph_core::arrow_array::RecordBatch)>>,
}

impl<'a> Ingest<'a> {
    pub(crate) async fn start(handle: &'a Omnigraph, mode: LoadMode) -> Result<Ingest<'a>> {
        let base = handle.base().await?;
        let catalog = handle.catalog_at(&base).await?;
        let staging = Staging::new(handle.graph().root().clone(), base.clone());
        Ok(Ingest {
            handle,
            catalog,
            base,
            mode,
            staging,
            buffers: HashMap::new(),
            keys: HashMap::new(),
            endpoints: Vec::new(),
            rows: BTreeMap::new(),
            merged: Some(Vec::new()),
        })
    }

    /// Whether a failure now leaves staged files behind.
    fn evidence(&self) -> Evidence {
        if self.staging.has_staged() {
            Evidence::Unpublished
        } else {
            Evidence::BeforeEffect
        }
    }

    /// Adds one row of `type_name`; stages a batch when the type's buffer is full.
    pub(crate) async fn push(
        &mut self,
        type_name: &str,
        source: RowSource,
        object: Map<String, Value>,
    ) -> Result<()> {
        if self.catalog.get(type_name).is_none() {
            let location = source.location(type_name, Some(rows::TYPE_FIELD));
            return Err(OmniError::bad_input(
                location,
                format!("the schema has no type {type_name}"),
            )
            .with_evidence(self.evidence()));
        }
        let buffer = self.buffers.entry(type_name.to_string()).or_default();
        buffer.push((source, object));
        if buffer.len() >= INGEST_BATCH_ROWS {
            self.flush(type_name).await?;
        }
        Ok(())
    }

    /// Validates and stages the buffered rows of `type_name`.
    async fn flush(&mut self, type_name: &str) -> Result<()> {
        let Some(buffer) = self.buffers.remove(type_name) else {
            return Ok(());
        };
        if buffer.is_empty() {
            return Ok(());
        }
        let evidence = self.evidence();
        let catalog = self.catalog.clone();
        let type_def = catalog.require(type_name)?;
        let typed = rows::rows_from_json(type_def, &buffer)
            .map_err(|e| e.with_evidence(evidence.clone()))?;
        let seen = self.keys.entry(type_name.to_string()).or_default();
        for ((source, _), key) in buffer.iter().zip(&typed.keys) {
            if !seen.insert(key.clone()) {
                let location = source.location(type_name, Some(type_def.key_column()));
                return Err(OmniError::bad_input(
                    location,
                    format!("key {key} of {type_name} is given more than once"),
                )
                .with_evidence(evidence));
            }
        }
        if self.mode == LoadMode::Append {
            let existing = self
                .handle
                .existing_keys(&self.base, type_def, &typed.keys)
                .await?;
            if let Some(key) = existing.into_iter().next() {
                return Err(OmniError::KeyConflict {
                    type_name: type_name.to_string(),
                    key,
                    evidence,
                });
            }
        }
        if let DeclKind::Edge { from, to } = type_def.kind() {
            for ((source, _), (src, dst)) in buffer.iter().zip(&typed.endpoints) {
                for (role, node_type, key) in [("src", from, src), ("dst", to, dst)] {
                    self.endpoints.push(PendingEndpoint {
                        source: source.clone(),
                        edge_type: type_name.to_string(),
                        role,
                        node_type: node_type.clone(),
                        key: key.clone(),
                    });
                }
            }
        }
        let pin = self.base.require_pin_of_type(type_name)?.clone();
        if !self.staging.has_chain(&pin.table_id) {
            let table = self.handle.table_at(&self.base, &pin.table_id).await?;
            self.staging.seed(&pin.table_id, table)?;
        }
        let count = typed.keys.len() as u64;
        match self.mode {
            LoadMode::Append => {
                self.staging
                    .stage_append(&pin.table_id, vec![typed.batch])
                    .await?;
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

    /// Keeps a merged batch for a possible re-merge, within the retention cap.
    fn retain_merge(
        &mut self,
        table_id: &str,
        key: &str,
        batch: &omnigraph_core::arrow_array::RecordBatch,
    ) {
        let Some(merged) = self.merged.as_mut() else {
            return;
        };
        let retained: usize = merged.iter().map(|(_, _, batch)| batch.num_rows()).sum();
        if retained + batch.num_rows() > MAX_MERGE_RETAINED_ROWS {
            self.merged = None;
        } else {
            merged.push((table_id.to_string(), key.to_string(), batch.clone()));
        }
    }

    /// Every edge endpoint must be a node of the call or of `base`.
    async fn check_endpoints(&self, base: &GraphCommit) -> Result<()> {
        let mut missing: BTreeMap<&str, Vec<&PendingEndpoint>> = BTreeMap::new();
        for endpoint in &self.endpoints {
            let in_call = self
                .keys
                .get(&endpoint.node_type)
                .is_some_and(|keys| keys.contains(&endpoint.key));
            if !in_call {
                missing
                    .entry(endpoint.node_type.as_str())
                    .or_default()
                    .push(endpoint);
            }
        }
        for (node_type, endpoints) in missing {
            let node = self.catalog.require(node_type)?;
            let mut keys: Vec<RowKey> = endpoints
                .iter()
                .map(|endpoint| endpoint.key.clone())
                .collect();
            keys.sort();
            keys.dedup();
            let found: HashSet<RowKey> = self
                .handle
                .existing_keys(base, node, &keys)
                .await?
                .into_iter()
                .collect();
            if let Some(endpoint) = endpoints
                .iter()
                .find(|endpoint| !found.contains(&endpoint.key))
            {
                let location = endpoint
                    .source
                    .location(&endpoint.edge_type, Some(endpoint.role));
                return Err(OmniError::bad_input(
                    location,
                    format!(
                        "{} {} is not a {node_type} in commit {} nor in this call",
                        endpoint.role, endpoint.key, base.seq
                    ),
                )
                .with_evidence(self.evidence()));
            }
        }
        Ok(())
    }

    /// Stages what is buffered, checks the endpoints and publishes, re-committing on a
    /// newer head when another writer moved a table first.
    pub(crate) async fn finish(mut self, operation_kind: &str) -> Result<IngestReport> {
        let types: Vec<String> = self.buffers.keys().cloned().collect();
        for type_name in types {
            self.flush(&type_name).await?;
        }
        let base = self.base.clone();
        self.check_endpoints(&base).await?;
        if !self.staging.has_staged() {
            return Ok(IngestReport {
                commit: None,
                rows: self.rows,
            });
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
        let mut attempts = 1u32;
        loop {
            match self
                .staging
                .publish(
                    self.staging.planned_pins(),
                    operation.clone(),
                    self.handle.actor(),
                )
                .await
            {
                Ok(commit) => {
                    self.handle.remember(&commit, &self.staging).await?;
                    self.update_key_caches().await?;
                    return Ok(IngestReport {
                        commit: Some(commit),
                        rows: self.rows,
                    });
                }
                Err(OmniError::ReadSetChanged { member, .. })
                    if member.is_table()
                        && (self.mode == LoadMode::Append || self.merged.is_some()) =>
                {
                    if attempts >= MAX_INGEST_ATTEMPTS {
                        return Err(OmniError::ContentionExhausted {
                            attempts,
                            evidence: Evidence::Unpublished,
                        });
                    }
                    attempts += 1;
                    self.recommit_on_head().await?;
                }
                Err(other) => return Err(other),
            }
        }
    }

    /// After publication: appended keys join the handle's key caches; merged tables
    /// are read again next time.
    async fn update_key_caches(&mut self) -> Result<()> {
        for (type_name, keys) in &self.keys {
            let pin = self.base.require_pin_of_type(type_name)?;
            let Some(link) = self.staging.links_of(&pin.table_id).last() else {
                continue;
            };
            match self.mode {
                LoadMode::Append => {
                    self.handle
                        .note_appended(
                            &pin.table_id,
                            pin.version,
                            &link.dataset,
                            keys.iter().cloned(),
                        )
                        .await;
                }
                LoadMode::Merge => self.handle.forget_keys(&pin.table_id).await,
            }
        }
        Ok(())
    }

    /// Moves the staged rows onto the current head: appends are re-committed (same
    /// files, renumbered), merges are merged again from the retained rows; keys (in
    /// append mode) and endpoints are checked again.
    async fn recommit_on_head(&mut self) -> Result<()> {
        let unpublished = |error: OmniError| error.with_evidence(Evidence::Unpublished);
        let head = self.handle.head().await.map_err(unpublished)?;
        if head.schema != self.base.schema {
            return Err(OmniError::ReadSetChanged {
                member: omnigraph_core::ReadSetMember::Schema {
                    branch: head.branch.clone(),
                },
                expected: self.base.schema.clone(),
                actual: head.schema.clone(),
                evidence: Evidence::Unpublished,
            });
        }
        for (type_name, keys) in &self.keys {
            if self.mode == LoadMode::Merge {
                break;
            }
            let type_def = self.catalog.require(type_name)?;
            let keys: Vec<RowKey> = keys.iter().cloned().collect();
            let existing = self
                .handle
                .existing_keys(&head, type_def, &keys)
                .await
                .map_err(unpublished)?;
            if let Some(key) = existing.into_iter().next() {
                return Err(OmniError::KeyConflict {
                    type_name: type_name.clone(),
                    key,
                    evidence: Evidence::Unpublished,
                });
            }
        }
        self.check_endpoints(&head).await.map_err(unpublished)?;
        let mut staging = Staging::new(self.handle.graph().root().clone(), head.clone());
        if let Some(merged) = &self.merged
            && self.mode == LoadMode::Merge
        {
            for (table_id, key, batch) in merged.clone() {
                if !staging.has_chain(&table_id) {
                    let table = self
                        .handle
                        .table_at(&head, &table_id)
                        .await
                        .map_err(unpublished)?;
                    staging.seed(&table_id, table).map_err(unpublished)?;
                }
                staging
                    .stage(&table_id, |tip, origin| async move {
                        adapter::stage_merge_insert(&tip, &key, vec![batch], &origin).await
                    })
                    .await
                    .map_err(unpublished)?;
            }
            self.staging = staging;
            self.base = head;
            return Ok(());
        }
        let chains: Vec<(String, Vec<StagedLink>)> = self
            .staging
            .chain_ids()
            .into_iter()
            .map(|table_id| {
                let links = self.staging.links_of(&table_id).to_vec();
                (table_id, links)
            })
            .collect();
        for (table_id, links) in chains {
            staging
                .seed(
                    &table_id,
                    self.handle
                        .table_at(&head, &table_id)
                        .await
                        .map_err(unpublished)?,
                )
                .map_err(unpublished)?;
            for link in links {
                staging
                    .stage(&table_id, |tip, origin| async move {
                        adapter::recommit_append(&link, &tip, &origin).await
                    })
                    .await
                    .map_err(unpublished)?;
            }
        }
        self.staging = staging;
        self.base = head;
        Ok(())
    }
}
