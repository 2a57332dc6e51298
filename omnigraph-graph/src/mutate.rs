//! Update and delete: pin-based writers. Their read set is every table they read: an
//! update its own table; a delete its own table and, for a node type, every edge table
//! incident to it (read for the cascade, whether or not it had edges to delete). A
//! commit of other tables in between does not stop them (they publish on the new head);
//! nor does a move of a table they read that leaves the fragments they change as they
//! read them, or only marks other rows of them deleted, and adds no row matching the
//! write's guards (its predicate; for a node delete, edges to the deleted nodes): the
//! staged links are re-committed on the new pin ([`PreparedWrite::publish`]). Any other
//! move of a table they read stops them: `ReadSetChanged { member: "pin:<table>" }`,
//! nothing published.
//! [`Omnigraph::update`] and [`Omnigraph::delete`] then plan again on the new head,
//! within the write's commit attempts
//! ([`omnigraph_publish::limits::COMMIT_PUTS_MAX`]); a prepared write does not. Deleting
//! nodes deletes their incident edges in the same commit. An update changes neither a
//! key nor an edge's endpoints.

use crate::commit::{CommitOperation, GraphCommit};
use crate::limits::{FOLLOWS_MAX, POINT_WRITE_COLD_ROWS_MAX};
use crate::omnigraph::{Omnigraph, input_or_storage};
use crate::publication::ReadSet;
use crate::replanning::OnSchemaChange;
use crate::rows::{self, RowKey};
use crate::staging::Staging;
use omnigraph_core::adapter;
use omnigraph_core::lance::table::format::Fragment;
use omnigraph_core::schema::{DeclKind, PropertyType, TypeDef};
use omnigraph_core::{Evidence, InputLocation, OmniError, Result};
use omnigraph_publish::BranchWriter;
use omnigraph_publish::CommitAttempts;
use serde_json::Value;

/// An update or delete staged on a captured head, ready to publish.
#[derive(Debug)]
pub struct PreparedWrite {
    staging: Staging,
    /// The pins of every table the write read, at the base.
    read: Vec<(String, u64)>,
    /// Per table read, the predicates whose rows the write changes there: a table that
    /// only gained rows outside them can be followed (see [`PreparedWrite::publish`]).
    guards: Vec<(String, String)>,
    operation: CommitOperation,
    rows: u64,
}

impl PreparedWrite {
    /// The head the write was staged on.
    pub fn base(&self) -> &GraphCommit {
        self.staging.base()
    }

    /// Rows the write changes (updated, or deleted including cascaded edges).
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Publishes the write if no table it read has moved since it was captured (other
    /// tables may have). A table that moved without changing the rows the write
    /// changes, and without gaining a row its guards match (an insert or load of other
    /// keys, an update or delete of other rows, even in the same fragments, a
    /// compaction of other fragments), does not stop it: its links are re-committed on
    /// the new pin, where they change the same rows, and it publishes there, up to
    /// [`FOLLOWS_MAX`] times. Deletions are carried over only for a table the write
    /// staged one link on (a node delete of many keys stages several on an edge
    /// table). Any other move is `ReadSetChanged`, nothing published. Returns `None`
    /// when the write changes nothing (and so publishes nothing).
    pub async fn publish(self, handle: &Omnigraph) -> Result<Option<GraphCommit>> {
        self.publish_within(handle, None, &CommitAttempts::new())
            .await
    }

    /// [`PreparedWrite::publish`] by a write that holds the reservation `holding`, its
    /// commit PUTs counted in the write's `attempts`.
    pub(crate) async fn publish_within(
        mut self,
        handle: &Omnigraph,
        holding: Option<&str>,
        attempts: &CommitAttempts,
    ) -> Result<Option<GraphCommit>> {
        if !self.staging.has_staged() {
            return Ok(None);
        }
        let mut follows = 0;
        loop {
            let read_set = ReadSet::staged(self.read.clone());
            let operation = self.operation.clone();
            match handle
                .publish_staged_holding(&self.staging, read_set, operation, holding, attempts)
                .await
            {
                Ok(commit) => return Ok(Some(commit)),
                Err(lost @ OmniError::ReadSetChanged { .. }) if follows < FOLLOWS_MAX => {
                    follows += 1;
                    let followed = self
                        .follow_moved_tables(handle)
                        .await
                        .map_err(|error| error.with_evidence(Evidence::Unpublished))?;
                    if !followed {
                        return Err(lost);
                    }
                    // Followed: one more try of the write's (its plan, on losing, is
                    // charged by the replanning loop instead).
                    attempts.try_again(&Evidence::Unpublished)?;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Moves the write onto the current head when, in every table it read that moved
    /// there, the fragments it changes are the very fragments it read, or differ only
    /// in other rows marked deleted, and no fragment the table gained holds a row
    /// matching a guard. Rows the write changes all lie in the fragments it changes, so
    /// another writer's change to them shows there as a deletion of the same row
    /// ([`adapter::carry_over_deletions`]); a row that came to match since lies in a
    /// gained fragment. Returns whether it moved; when not, nothing was published
    /// (deletions carried over for a table are unpublished staging).
    async fn follow_moved_tables(&mut self, handle: &Omnigraph) -> Result<bool> {
        // The head the lost race read, or a fresh one.
        let head = handle.base().await?;
        let base = self.staging.base().clone();
        if head.schema != base.schema || head.branch != base.branch {
            return Ok(false);
        }
        let mut read = Vec::with_capacity(self.read.len());
        // Per table whose changed fragments lost other rows since: its one link, with
        // those deletions carried over.
        let mut carried: Vec<(String, adapter::StagedLink)> = Vec::new();
        for (table_id, version) in &self.read {
            let now = head.require_pin(table_id)?.version;
            if now != *version {
                let before = handle.table_at(&base, table_id).await?;
                let after = handle.table_at(&head, table_id).await?;
                // The fragments the write changes must be the very fragments it read,
                // or have lost other rows since; the others may have changed in any way.
                let mut changed = Vec::new();
                for link in self.staging.links_of(table_id) {
                    match adapter::fragments_changed_by(link) {
                        Some(ids) => changed.extend(ids),
                        None => return Ok(false),
                    }
                }
                let same = |id: &u64| {
                    let of = |table: &omnigraph_core::lance::Dataset| {
                        table
                            .manifest()
                            .fragments
                            .iter()
                            .find(|fragment| fragment.id == *id)
                            .cloned()
                    };
                    let was = of(&before);
                    was.is_some() && was == of(&after)
                };
                let drifted = !changed.iter().all(same);
                let added: Vec<Fragment> = after
                    .manifest()
                    .fragments
                    .iter()
                    .filter(|fragment| {
                        !before
                            .manifest()
                            .fragments
                            .iter()
                            .any(|old| old.id == fragment.id)
                    })
                    .cloned()
                    .collect();
                for (guarded, predicate) in &self.guards {
                    if guarded == table_id && count_where_in(&after, &added, predicate).await? > 0 {
                        return Ok(false);
                    }
                }
                if drifted {
                    let [link] = self.staging.links_of(table_id) else {
                        return Ok(false);
                    };
                    // Carrying over reads the staged files: never once cleanup may
                    // reclaim them.
                    self.staging.check_age_on(&head)?;
                    match adapter::carry_over_deletions(link, &before, &after).await? {
                        Some(link) => carried.push((table_id.clone(), link)),
                        None => return Ok(false),
                    }
                }
            }
            read.push((table_id.clone(), now));
        }
        // Re-committing reuses the staged files: never once cleanup may reclaim them.
        self.staging.check_age_on(&head)?;
        for (table_id, mut links) in self.staging.rebase(head.clone())? {
            if let Some(at) = carried.iter().position(|(id, _)| *id == table_id) {
                links = vec![carried.swap_remove(at).1];
            }
            let table = handle.table_at(&head, &table_id).await?;
            self.staging.seed(&table_id, table)?;
            for link in links {
                self.staging
                    .stage(&table_id, |tip, origin| async move {
                        adapter::recommit_on_newer_base(&link, &tip, &origin).await
                    })
                    .await?;
            }
        }
        assert!(
            carried.is_empty(),
            "a table whose deletions were carried over did not move"
        );
        self.read = read;
        Ok(true)
    }
}

impl Omnigraph {
    /// Sets properties on the rows of `type_name` where `predicate` (SQL) holds, and
    /// publishes. See [`Omnigraph::prepare_update`].
    pub async fn update(
        &self,
        type_name: &str,
        predicate: &str,
        assignments: &[(String, Value)],
    ) -> Result<Option<GraphCommit>> {
        let tables = || async {
            let base = self.base().await?;
            Ok(vec![base.require_pin_of_type(type_name)?.table_id.clone()])
        };
        self.replanning(
            OnSchemaChange::PlanAgain,
            tables,
            |base, holding, attempts| async move {
                self.prepare_update_on(base, type_name, predicate, assignments)
                    .await?
                    .publish_within(self, holding.as_deref(), &attempts)
                    .await
            },
        )
        .await
    }

    /// Stages an update on the current head: each `(property, value)` is checked
    /// against the schema (the key cannot change; a required property cannot be null).
    pub async fn prepare_update(
        &self,
        type_name: &str,
        predicate: &str,
        assignments: &[(String, Value)],
    ) -> Result<PreparedWrite> {
        let base = self.head().await?;
        self.prepare_update_on(base, type_name, predicate, assignments)
            .await
    }

    /// [`Omnigraph::prepare_update`] on `base`.
    async fn prepare_update_on(
        &self,
        base: GraphCommit,
        type_name: &str,
        predicate: &str,
        assignments: &[(String, Value)],
    ) -> Result<PreparedWrite> {
        let catalog = self.catalog_at(&base).await?;
        let type_def = catalog.require(type_name)?;
        omnigraph_core::filter::check_on_type(type_def, predicate, "update")?;
        if assignments.is_empty() {
            return Err(OmniError::bad_input(
                InputLocation::in_source("update").type_name(type_name),
                "no property to set",
            ));
        }
        let mut expressions = Vec::with_capacity(assignments.len());
        for (property, value) in assignments {
            expressions.push((
                property.clone(),
                assignment_literal(type_def, property, value)?,
            ));
        }
        let pin = base.require_pin_of_type(type_name)?.clone();
        let mut staging = self.staging_on(&base);
        let table = self.table_at(&base, &pin.table_id).await?;
        let within = self
            .fragments_pinned_by(&pin.table_id, &table, type_def, predicate)
            .await?;
        staging.seed(&pin.table_id, table)?;
        // One scan: the update reads the matching rows and stages nothing when none does.
        let key = type_def.key_column().to_string();
        let matched = predicate.to_string();
        let matching = staging
            .stage_optional(&pin.table_id, |tip, origin| async move {
                match within {
                    Some(fragments) => {
                        adapter::stage_update_in(
                            &tip,
                            &fragments,
                            &key,
                            &matched,
                            &expressions,
                            &origin,
                        )
                        .await
                    }
                    None => {
                        adapter::stage_update(&tip, &key, &matched, &expressions, &origin).await
                    }
                }
            })
            .await?
            .map_or(0, |link| link.rows_affected);
        Ok(PreparedWrite {
            staging,
            read: vec![(pin.table_id.clone(), pin.version)],
            guards: vec![(pin.table_id.clone(), predicate.to_string())],
            operation: CommitOperation {
                kind: "update".into(),
                summary: format!("{matching} {type_name} where {predicate}"),
            },
            rows: matching,
        })
    }

    /// Deletes the rows of `type_name` where `predicate` holds, with the edges incident
    /// to deleted nodes, in one commit. See [`Omnigraph::prepare_delete`].
    pub async fn delete(&self, type_name: &str, predicate: &str) -> Result<Option<GraphCommit>> {
        let tables = || async {
            let base = self.base().await?;
            let catalog = self.catalog_at(&base).await?;
            let read = delete_read_set(&base, &catalog, catalog.require(type_name)?)?;
            Ok(read.into_iter().map(|(table_id, _)| table_id).collect())
        };
        self.replanning(
            OnSchemaChange::PlanAgain,
            tables,
            |base, holding, attempts| async move {
                self.prepare_delete_on(base, type_name, predicate)
                    .await?
                    .publish_within(self, holding.as_deref(), &attempts)
                    .await
            },
        )
        .await
    }

    /// Stages a delete on the current head, cascading to incident edges.
    pub async fn prepare_delete(&self, type_name: &str, predicate: &str) -> Result<PreparedWrite> {
        let base = self.head().await?;
        self.prepare_delete_on(base, type_name, predicate).await
    }

    /// [`Omnigraph::prepare_delete`] on `base`.
    async fn prepare_delete_on(
        &self,
        base: GraphCommit,
        type_name: &str,
        predicate: &str,
    ) -> Result<PreparedWrite> {
        let catalog = self.catalog_at(&base).await?;
        let type_def = catalog.require(type_name)?;
        omnigraph_core::filter::check_on_type(type_def, predicate, "delete")?;
        let mut staging = self.staging_on(&base);
        let staged = self
            .stage_delete_cascade(&mut staging, &base, &catalog, type_def, predicate)
            .await;
        let (deleted_keys, rows, guards) =
            staged.map_err(|error| error.with_evidence(staging.evidence()))?;
        Ok(PreparedWrite {
            staging,
            read: delete_read_set(&base, &catalog, type_def)?,
            guards,
            operation: CommitOperation {
                kind: "delete".into(),
                summary: format!(
                    "{} {type_name} where {predicate} ({rows} rows in all)",
                    deleted_keys.len()
                ),
            },
            rows,
        })
    }

    /// Stages the delete of the rows of `type_def` where `predicate` holds and of their
    /// incident edges; returns the deleted keys, the rows deleted in all, and the
    /// guards: the predicate on the node table, and on each incident edge table the
    /// edges of the deleted nodes (also where there were none to delete: a new one
    /// would dangle).
    async fn stage_delete_cascade(
        &self,
        staging: &mut Staging,
        base: &GraphCommit,
        catalog: &omnigraph_core::schema::Catalog,
        type_def: &TypeDef,
        predicate: &str,
    ) -> Result<(Vec<RowKey>, u64, Vec<(String, String)>)> {
        let type_name = type_def.name();
        let pin = base.require_pin_of_type(type_name)?.clone();
        let mut guards = vec![(pin.table_id.clone(), predicate.to_string())];
        let table = self.table_at(base, &pin.table_id).await?;
        let within = self
            .fragments_pinned_by(&pin.table_id, &table, type_def, predicate)
            .await?;
        staging.seed(&pin.table_id, table)?;
        let deleted_keys = keys_where(
            staging.chain(&pin.table_id).await?.tip(),
            within.as_deref(),
            type_def,
            predicate,
        )
        .await?;
        let mut rows = 0u64;
        if !deleted_keys.is_empty() {
            rows += match within {
                Some(fragments) => staging
                    .stage_delete_in(&pin.table_id, fragments, predicate)
                    .await?
                    .map_or(0, |link| link.rows_affected),
                None => {
                    staging
                        .stage_delete(&pin.table_id, predicate)
                        .await?
                        .rows_affected
                }
            };
        }
        if type_def.is_node() && !deleted_keys.is_empty() {
            for edge in catalog.types() {
                let DeclKind::Edge { from, to } = edge.kind() else {
                    continue;
                };
                let mut roles = Vec::new();
                if from == type_name {
                    roles.push("src");
                }
                if to == type_name {
                    roles.push("dst");
                }
                if roles.is_empty() {
                    continue;
                }
                let edge_pin = base.require_pin_of_type(edge.name())?.clone();
                let edge_predicates: Vec<String> = deleted_keys
                    .chunks(crate::limits::KEY_LOOKUP_KEYS_MAX)
                    .map(|chunk| {
                        let literals: Vec<String> = chunk
                            .iter()
                            .map(|key| rows::key_literal(key, type_def.key_type()))
                            .collect();
                        let list = literals.join(", ");
                        roles
                            .iter()
                            .map(|role| format!("`{role}` IN ({list})"))
                            .collect::<Vec<_>>()
                            .join(" OR ")
                    })
                    .collect();
                guards.extend(
                    edge_predicates
                        .iter()
                        .map(|edge_predicate| (edge_pin.table_id.clone(), edge_predicate.clone())),
                );
                // The table's manifest, not the commit's `row_count`, says whether
                // there can be edges to cascade to.
                let edges = self.table_at(base, &edge_pin.table_id).await?;
                if edges.manifest().fragments.is_empty() {
                    continue;
                }
                let naming = self
                    .edge_fragments_naming(&edge_pin.table_id, &edges, &deleted_keys)
                    .await?;
                if !staging.has_chain(&edge_pin.table_id) {
                    staging.seed(&edge_pin.table_id, edges)?;
                }
                // One scan per chunk finds the edges and stages their deletion, or
                // stages nothing when there are none.
                for edge_predicate in &edge_predicates {
                    // An earlier chunk may have emptied (and so removed) a fragment.
                    let within: Vec<u64> = staging
                        .chain(&edge_pin.table_id)
                        .await?
                        .tip()
                        .manifest()
                        .fragments
                        .iter()
                        .map(|fragment| fragment.id)
                        .filter(|id| {
                            naming
                                .as_ref()
                                .is_none_or(|naming| naming.binary_search(id).is_ok())
                        })
                        .collect();
                    if let Some(link) = staging
                        .stage_delete_in(&edge_pin.table_id, within, edge_predicate)
                        .await?
                    {
                        rows += link.rows_affected;
                    }
                }
            }
        }
        Ok((deleted_keys, rows, guards))
    }
}

/// The rows `table`'s fragments store, deleted ones included.
fn stored_rows_of(table: &omnigraph_core::lance::Dataset) -> u64 {
    table
        .manifest()
        .fragments
        .iter()
        .map(omnigraph_core::fragments::stored_rows)
        .sum()
}

impl Omnigraph {
    /// The fragments of `table` (the version of `table_id` a write reads) that hold every
    /// row `predicate` can match on `type_def`, when the predicate pins the key
    /// ([`omnigraph_core::filter::keys_pinned`]) and this handle knows where each key
    /// lies: its key cache is warm, or the table is small enough to read its keys now.
    /// `None` when every fragment must be read. A key the table lacks lies in no
    /// fragment, so a write of only such keys reads none.
    async fn fragments_pinned_by(
        &self,
        table_id: &str,
        table: &std::sync::Arc<omnigraph_core::lance::Dataset>,
        type_def: &TypeDef,
        predicate: &str,
    ) -> Result<Option<Vec<u64>>> {
        use omnigraph_core::filter::KeyLiteral;
        let key_column = type_def.key_column();
        let Some(literals) =
            omnigraph_core::filter::keys_pinned(predicate, &type_def.arrow_schema(), key_column)
        else {
            return Ok(None);
        };
        let mut keys = Vec::with_capacity(literals.len());
        for literal in literals {
            // Rendered as the key cache renders a key read from the table.
            let key = match (type_def.key_type(), literal) {
                (PropertyType::String, KeyLiteral::Text(text)) => rows::render_text_key(&text),
                (PropertyType::Int32, KeyLiteral::Integer(number))
                    if i32::try_from(number).is_ok() =>
                {
                    number.to_string()
                }
                (PropertyType::Int64, KeyLiteral::Integer(number)) => number.to_string(),
                _ => return Ok(None),
            };
            keys.push(key);
        }
        let cache = self.key_cache(table_id);
        let mut cache = cache.lock().await;
        if !cache.is_warm() && stored_rows_of(table) > POINT_WRITE_COLD_ROWS_MAX {
            return Ok(None);
        }
        if !cache.refresh(table, key_column).await? {
            return Ok(None);
        }
        Ok(Some(cache.fragments_of(&keys)))
    }

    /// The fragments of the edge table `edges` (`table_id`) that may hold an edge
    /// naming one of `keys` (rendered node keys), when this handle knows its endpoints:
    /// its endpoint cache is warm, or the table is small enough to read them now.
    /// `None` when every fragment must be read.
    async fn edge_fragments_naming(
        &self,
        table_id: &str,
        edges: &omnigraph_core::lance::Dataset,
        keys: &[RowKey],
    ) -> Result<Option<Vec<u64>>> {
        let cache = self.endpoint_cache(table_id);
        let mut cache = cache.lock().await;
        if !cache.is_warm() && stored_rows_of(edges) > POINT_WRITE_COLD_ROWS_MAX {
            return Ok(None);
        }
        if !cache.refresh(edges).await? {
            return Ok(None);
        }
        Ok(Some(cache.fragments_naming(keys)))
    }
}

/// Where a caller's predicate is named in errors.
fn predicate_location(predicate: &str) -> InputLocation {
    InputLocation::in_source("predicate").field(predicate)
}

/// Rows of `fragments` (of `table`) where `predicate` holds.
async fn count_where_in(
    table: &omnigraph_core::lance::Dataset,
    fragments: &[Fragment],
    predicate: &str,
) -> Result<u64> {
    if fragments.is_empty() {
        return Ok(0);
    }
    let bad = |error: omnigraph_core::lance::Error| {
        input_or_storage(predicate_location(predicate), "count rows", error)
    };
    let mut scanner = table.scan();
    scanner.with_fragments(fragments.to_vec());
    scanner.filter(predicate).map_err(bad)?;
    scanner.count_rows().await.map_err(bad)
}

/// The keys (rendered) of the rows of `table` where `predicate` holds, read from
/// `within` (ids of fragments of `table`, which the caller knows hold every such row)
/// or from every fragment.
async fn keys_where(
    table: &omnigraph_core::lance::Dataset,
    within: Option<&[u64]>,
    type_def: &TypeDef,
    predicate: &str,
) -> Result<Vec<RowKey>> {
    use futures::TryStreamExt;
    let bad = |error: omnigraph_core::lance::Error| {
        input_or_storage(predicate_location(predicate), "scan keys", error)
    };
    let mut scanner = table.scan();
    if let Some(within) = within {
        let fragments = omnigraph_core::fragments::with_ids(&table.manifest().fragments, within)
            .ok_or_else(|| {
                OmniError::internal(format!(
                    "{} lacks some of the fragments {within:?}",
                    table.uri()
                ))
            })?;
        if fragments.is_empty() {
            return Ok(Vec::new());
        }
        scanner.with_fragments(fragments);
    }
    scanner.filter(predicate).map_err(bad)?;
    scanner.project(&[type_def.key_column()]).map_err(bad)?;
    let batches: Vec<omnigraph_core::arrow_array::RecordBatch> = scanner
        .try_into_stream()
        .await
        .map_err(bad)?
        .try_collect()
        .await
        .map_err(|error| OmniError::from_lance("scan keys", error))?;
    let mut keys = Vec::new();
    for batch in &batches {
        for row in 0..batch.num_rows() {
            keys.push(rows::render_key(&crate::rows::json_value(
                batch.column(0).as_ref(),
                row,
            )));
        }
    }
    Ok(keys)
}

/// The tables a delete of `type_def` reads: its own, and for a node type every edge
/// table incident to it. A concurrent edge insert to a node being deleted moves one of
/// them, so the delete cannot publish over it and leave the edge dangling.
fn delete_read_set(
    base: &GraphCommit,
    catalog: &omnigraph_core::schema::Catalog,
    type_def: &TypeDef,
) -> Result<Vec<(String, u64)>> {
    let pin_of = |type_name: &str| {
        base.require_pin_of_type(type_name)
            .map(|pin| (pin.table_id.clone(), pin.version))
    };
    let mut read = vec![pin_of(type_def.name())?];
    if type_def.is_node() {
        for edge in catalog.types() {
            if let DeclKind::Edge { from, to } = edge.kind()
                && (from == type_def.name() || to == type_def.name())
            {
                read.push(pin_of(edge.name())?);
            }
        }
    }
    Ok(read)
}

/// The SQL literal that sets `property` to `value`, checked against the schema.
fn assignment_literal(type_def: &TypeDef, property: &str, value: &Value) -> Result<String> {
    let type_name = type_def.name();
    let bad = |message: String| {
        OmniError::bad_input(
            InputLocation::in_source("update")
                .type_name(type_name)
                .field(property),
            message,
        )
    };
    let column = type_def
        .columns()
        .iter()
        .find(|column| column.name == property)
        .ok_or_else(|| bad(format!("{type_name} has no property {property}")))?;
    if property == type_def.key_column() {
        return Err(bad(format!(
            "{property} is the key of {type_name}; an update cannot change it"
        )));
    }
    // An endpoint is checked against the node tables when an edge is written; an
    // update reads no node table, so it could point an edge at a missing node.
    let is_endpoint = [
        omnigraph_core::schema::EDGE_SRC_COLUMN,
        omnigraph_core::schema::EDGE_DST_COLUMN,
    ]
    .contains(&property);
    if !type_def.is_node() && is_endpoint {
        return Err(bad(format!(
            "{property} is an endpoint of {type_name}; an update cannot change it \
             (delete the edge and insert a new one)"
        )));
    }
    if value.is_null() {
        return if column.nullable {
            Ok("NULL".into())
        } else {
            Err(bad(format!(
                "{property} is required and cannot be set to null"
            )))
        };
    }
    let mismatch = |expected: &str| bad(format!("expected {expected}, found {value}"));
    match column.data_type {
        PropertyType::String => value
            .as_str()
            .map(|text| format!("'{}'", text.replace('\'', "''")))
            .ok_or_else(|| mismatch("a string")),
        PropertyType::Bool => value
            .as_bool()
            .map(|flag| flag.to_string())
            .ok_or_else(|| mismatch("a boolean")),
        PropertyType::Int32 => value
            .as_i64()
            .filter(|number| i32::try_from(*number).is_ok())
            .map(|number| number.to_string())
            .ok_or_else(|| mismatch("an Int32")),
        PropertyType::Int64 | PropertyType::Timestamp => value
            .as_i64()
            .map(|number| number.to_string())
            .ok_or_else(|| mismatch("an integer")),
        PropertyType::Float32 | PropertyType::Float64 => value
            .as_f64()
            .filter(|number| number.is_finite())
            .map(|number| format!("{number:?}"))
            .ok_or_else(|| mismatch("a number")),
        PropertyType::Vector(_) => Err(bad(format!(
            "{property} is a vector; update sets scalar properties (load in merge mode replaces vectors)"
        ))),
    }
}
