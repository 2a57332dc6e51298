//! Update and delete: pin-based writers. Their read set is every table they read: an
//! update its own table; a delete its own table and, for a node type, every edge table
//! incident to it (read for the cascade, whether or not it had edges to delete). A
//! commit of other tables in between does not stop them (they publish on the new head);
//! a move of a table they read does: `ReadSetChanged { member: "pin:<table>" }`, nothing
//! published. [`Omnigraph::update`] and [`Omnigraph::delete`] then plan again on the
//! new head, up to [`WRITE_ATTEMPTS_MAX`] times; a prepared write does not. Deleting
//! nodes deletes their incident edges in the same commit. An update changes neither a
//! key nor an edge's endpoints.

use crate::commit::{CommitOperation, GraphCommit};
use crate::omnigraph::{Omnigraph, input_or_storage};
use crate::publisher::ReadSet;
use crate::rows::{self, RowKey};
use crate::staging::Staging;
use omnigraph_core::adapter;
use omnigraph_core::schema::{DeclKind, PropertyType, TypeDef};
use omnigraph_core::{Evidence, InputLocation, OmniError, Result};
use serde_json::Value;

/// How many times [`Omnigraph::update`] and [`Omnigraph::delete`] plan their write
/// when the tables they read keep moving; then `ContentionExhausted`.
pub const WRITE_ATTEMPTS_MAX: u32 = 8;

/// An update or delete staged on a captured head, ready to publish.
#[derive(Debug)]
pub struct PreparedWrite {
    staging: Staging,
    /// The pins of every table the write read, at the base.
    read: Vec<(String, u64)>,
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
    /// tables may have). Returns `None` when the write changes nothing (and so
    /// publishes nothing).
    pub async fn publish(self, handle: &Omnigraph) -> Result<Option<GraphCommit>> {
        if !self.staging.has_staged() {
            return Ok(None);
        }
        let commit = handle
            .publish_staged(&self.staging, ReadSet::staged(self.read), self.operation)
            .await?;
        Ok(Some(commit))
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
        self.replanning(|| async {
            self.prepare_update(type_name, predicate, assignments)
                .await?
                .publish(self)
                .await
        })
        .await
    }

    /// Runs `write` (plan and publish) until no table it read moved under it, at most
    /// [`WRITE_ATTEMPTS_MAX`] times. Each lost attempt leaves unpublished staging, so
    /// once one has, a later failure says so even if its own attempt staged nothing.
    async fn replanning<F: std::future::Future<Output = Result<Option<GraphCommit>>>>(
        &self,
        write: impl Fn() -> F,
    ) -> Result<Option<GraphCommit>> {
        let mut left = Evidence::BeforeEffect;
        for attempt in 1..=WRITE_ATTEMPTS_MAX {
            match write().await {
                Err(lost @ OmniError::ReadSetChanged { .. }) => {
                    if lost.evidence() != &Evidence::BeforeEffect {
                        left = Evidence::Unpublished;
                    }
                    if attempt == WRITE_ATTEMPTS_MAX {
                        return Err(OmniError::ContentionExhausted {
                            attempts: attempt,
                            evidence: left,
                        });
                    }
                }
                Err(error) => return Err(error.with_evidence(left)),
                done => return done,
            }
        }
        unreachable!("the last attempt returns")
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
        let mut staging = Staging::new(self.graph().root().clone(), base.clone());
        staging.seed(&pin.table_id, self.table_at(&base, &pin.table_id).await?)?;
        let matching = count_where(staging.chain(&pin.table_id).await?.tip(), predicate).await?;
        if matching > 0 {
            let key = type_def.key_column().to_string();
            let predicate = predicate.to_string();
            staging
                .stage(&pin.table_id, |tip, origin| async move {
                    adapter::stage_update(&tip, &key, &predicate, &expressions, &origin).await
                })
                .await?;
        }
        Ok(PreparedWrite {
            staging,
            read: vec![(pin.table_id.clone(), pin.version)],
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
        self.replanning(|| async {
            self.prepare_delete(type_name, predicate)
                .await?
                .publish(self)
                .await
        })
        .await
    }

    /// Stages a delete on the current head, cascading to incident edges.
    pub async fn prepare_delete(&self, type_name: &str, predicate: &str) -> Result<PreparedWrite> {
        let base = self.head().await?;
        let catalog = self.catalog_at(&base).await?;
        let type_def = catalog.require(type_name)?;
        omnigraph_core::filter::check_on_type(type_def, predicate, "delete")?;
        let mut staging = Staging::new(self.graph().root().clone(), base.clone());
        let staged = self
            .stage_delete_cascade(&mut staging, &base, &catalog, type_def, predicate)
            .await;
        let (deleted_keys, rows) =
            staged.map_err(|error| error.with_evidence(staging.evidence()))?;
        Ok(PreparedWrite {
            staging,
            read: delete_read_set(&base, &catalog, type_def)?,
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
    /// incident edges; returns the deleted keys and the rows deleted in all.
    async fn stage_delete_cascade(
        &self,
        staging: &mut Staging,
        base: &GraphCommit,
        catalog: &omnigraph_core::schema::Catalog,
        type_def: &TypeDef,
        predicate: &str,
    ) -> Result<(Vec<RowKey>, u64)> {
        let type_name = type_def.name();
        let pin = base.require_pin_of_type(type_name)?.clone();
        staging.seed(&pin.table_id, self.table_at(base, &pin.table_id).await?)?;
        let deleted_keys = keys_where(
            staging.chain(&pin.table_id).await?.tip(),
            type_def,
            predicate,
        )
        .await?;
        let mut rows = 0u64;
        if !deleted_keys.is_empty() {
            rows += staging
                .stage_delete(&pin.table_id, predicate)
                .await?
                .rows_affected;
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
                // The table's manifest, not the commit's `row_count`, says whether
                // there can be edges to cascade to.
                let edges = self.table_at(base, &edge_pin.table_id).await?;
                if edges.manifest().fragments.is_empty() {
                    continue;
                }
                if !staging.has_chain(&edge_pin.table_id) {
                    staging.seed(&edge_pin.table_id, edges)?;
                }
                for chunk in deleted_keys.chunks(crate::omnigraph::KEY_LOOKUP_CHUNK) {
                    let literals: Vec<String> = chunk
                        .iter()
                        .map(|key| rows::key_literal(key, type_def.key_type()))
                        .collect();
                    let list = literals.join(", ");
                    let edge_predicate = roles
                        .iter()
                        .map(|role| format!("`{role}` IN ({list})"))
                        .collect::<Vec<_>>()
                        .join(" OR ");
                    let tip = staging.chain(&edge_pin.table_id).await?.tip().clone();
                    if count_where(&tip, &edge_predicate).await? > 0 {
                        rows += staging
                            .stage_delete(&edge_pin.table_id, &edge_predicate)
                            .await?
                            .rows_affected;
                    }
                }
            }
        }
        Ok((deleted_keys, rows))
    }
}

/// Where a caller's predicate is named in errors.
fn predicate_location(predicate: &str) -> InputLocation {
    InputLocation::in_source("predicate").field(predicate)
}

/// Rows of `table` where `predicate` holds; a bad predicate is `BadInput`, a failed
/// storage request keeps its kind.
async fn count_where(table: &omnigraph_core::lance::Dataset, predicate: &str) -> Result<u64> {
    table
        .count_rows(Some(predicate.to_string()))
        .await
        .map(|count| count as u64)
        .map_err(|error| input_or_storage(predicate_location(predicate), "count rows", error))
}

/// The keys (rendered) of the rows of `table` where `predicate` holds.
async fn keys_where(
    table: &omnigraph_core::lance::Dataset,
    type_def: &TypeDef,
    predicate: &str,
) -> Result<Vec<RowKey>> {
    use futures::TryStreamExt;
    let bad = |error: omnigraph_core::lance::Error| {
        input_or_storage(predicate_location(predicate), "scan keys", error)
    };
    let mut scanner = table.scan();
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

/// The SQL literal that sets `property` to `value`, checked against the schema.
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
