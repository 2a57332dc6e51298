//! Schema apply: a strict writer that moves the graph to a new schema document.
//!
//! Types are added (a new table) or dropped (its pin removed); properties are added
//! (optional only, metadata-only: no data file is rewritten), dropped, or have their
//! nullability changed; declared indexes are added (built later by the index writer) or
//! dropped (removed from the table). A change that would lose data (dropping a type or
//! a property that holds rows, making a property required) is refused unless forced,
//! and the refusal names the change. Renames and type changes are refused: drop and
//! re-add instead.

use crate::commit::{CommitOperation, GraphCommit};
use crate::layout;
use crate::omnigraph::Omnigraph;
use crate::publication::{Change, Publication, ReadSet, Requirements};
use crate::staging::Staging;
use omnigraph_core::adapter;
use omnigraph_core::schema::{Catalog, TypeDef};
use omnigraph_core::{Evidence, OmniError, Result};
use omnigraph_publish::BranchWriter;
use omnigraph_publish::CommitAttempts;

/// One change between two schemas.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum SchemaChange {
    /// A new node or edge type (a new, empty table).
    AddType {
        /// The type.
        type_name: String,
    },
    /// A type removed with its table (data-losing when it holds rows).
    DropType {
        /// The type.
        type_name: String,
        /// Rows it held.
        rows: u64,
    },
    /// A new optional property; existing rows read it as null.
    AddProperty {
        /// The type.
        type_name: String,
        /// The property.
        property: String,
    },
    /// A property removed (data-losing when the type holds rows).
    DropProperty {
        /// The type.
        type_name: String,
        /// The property.
        property: String,
    },
    /// A property made required (refused unless forced; never with nulls present).
    RequireProperty {
        /// The type.
        type_name: String,
        /// The property.
        property: String,
    },
    /// A property made optional.
    RelaxProperty {
        /// The type.
        type_name: String,
        /// The property.
        property: String,
    },
    /// A newly declared index (built by the index writer).
    DeclareIndex {
        /// The type.
        type_name: String,
        /// The index name.
        index: String,
    },
    /// An index no longer declared (removed from the table if built).
    DropIndex {
        /// The type.
        type_name: String,
        /// The index name.
        index: String,
    },
}

impl SchemaChange {
    fn loses_data(&self, rows_of: impl Fn(&str) -> u64) -> bool {
        match self {
            SchemaChange::DropType { rows, .. } => *rows > 0,
            SchemaChange::DropProperty { type_name, .. } => rows_of(type_name) > 0,
            SchemaChange::RequireProperty { .. } => true,
            _ => false,
        }
    }
}

/// What a schema apply did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaApplyReport {
    /// The commit that put the new schema in force; `None` when nothing changed.
    pub commit: Option<GraphCommit>,
    /// The changes, in schema order.
    pub changes: Vec<SchemaChange>,
}

impl Omnigraph {
    /// Moves the graph to the schema in `schema_text`. See the module documentation. A
    /// writer that moved the head first makes the apply plan again on the new head,
    /// within the write's commit attempts
    /// ([`omnigraph_publish::limits::COMMIT_PUTS_MAX`]); one that keeps losing
    /// reserves every table of the branch for its next attempt (`docs/format.md` §7.7).
    pub async fn apply_schema(&self, schema_text: &str, force: bool) -> Result<SchemaApplyReport> {
        let next = omnigraph_core::schema::parse("schema", schema_text)?;
        let next = &next;
        self.replanning(
            crate::replanning::OnSchemaChange::Stop {
                applying: next.hash().to_string(),
            },
            || self.every_table(),
            |base, holding, attempts| async move {
                self.apply_schema_on(base, next, force, holding, &attempts)
                    .await
            },
        )
        .await
    }

    /// One attempt of [`Omnigraph::apply_schema`] on `base`, holding the reservation
    /// `holding`.
    async fn apply_schema_on(
        &self,
        base: GraphCommit,
        next: &Catalog,
        force: bool,
        holding: Option<String>,
        attempts: &CommitAttempts,
    ) -> Result<SchemaApplyReport> {
        let current = self.catalog_at(&base).await?;
        if next.hash() == current.hash() {
            return Ok(SchemaApplyReport {
                commit: None,
                changes: Vec::new(),
            });
        }
        let rows_of = |type_name: &str| base.pin_of_type(type_name).map_or(0, |pin| pin.row_count);
        let changes = diff(&current, next, &rows_of)?;
        if !force && let Some(change) = changes.iter().find(|change| change.loses_data(rows_of)) {
            return Err(refusal(
                change,
                "would lose data; apply with force to proceed",
            ));
        }
        let mut staging = self.staging_on(&base);
        // Evidence comes from one place: whatever the staging holds when a step fails.
        let staged = self
            .stage_schema_changes(&mut staging, &base, next, &changes)
            .await;
        let dropped_tables = staged.map_err(|error| error.with_evidence(staging.evidence()))?;
        let unpublished = |error: OmniError| error.with_evidence(Evidence::Unpublished);
        let summary = format!("{} changes", changes.len());
        // Staged even when no link was: a schema apply publishes only what it staged
        // on its base, however little.
        let requires = Requirements {
            staged_since: Some(staging.started()),
            ..Requirements::reading(ReadSet::Strict).holding(holding)
        };
        let change = Change::Tables {
            pins: staging.tip_pins().await.map_err(unpublished)?,
            dropped: dropped_tables,
            schema: Some(next.hash().to_string()),
        };
        let operation = CommitOperation {
            kind: "schema_apply".into(),
            summary,
        };
        let publication = Publication::new(
            staging.base().clone(),
            requires,
            change,
            operation,
            self.actor(),
        );
        let commit = self
            .publish_as_handle(&publication, &staging, attempts)
            .await?;
        Ok(SchemaApplyReport {
            commit: Some(commit),
            changes,
        })
    }

    /// Stages every change on `staging` and writes the new schema document; returns
    /// the tables the commit drops.
    async fn stage_schema_changes(
        &self,
        staging: &mut Staging,
        base: &GraphCommit,
        next: &Catalog,
        changes: &[SchemaChange],
    ) -> Result<Vec<String>> {
        let mut dropped_tables = Vec::new();
        for change in changes {
            match change {
                SchemaChange::AddType { type_name } => {
                    staging.create_table(next.require(type_name)?).await?;
                }
                SchemaChange::DropType { type_name, .. } => {
                    dropped_tables.push(base.require_pin_of_type(type_name)?.table_id.clone());
                }
                SchemaChange::AddProperty {
                    type_name,
                    property,
                } => {
                    let field = next
                        .require(type_name)?
                        .arrow_schema()
                        .field_with_name(property)
                        .map_err(|error| {
                            OmniError::internal(format!("{type_name}.{property}: {error}"))
                        })?
                        .clone();
                    let table_id = base.require_pin_of_type(type_name)?.table_id.clone();
                    staging
                        .stage(&table_id, |tip, origin| async move {
                            adapter::stage_add_null_columns(&tip, vec![field], &origin).await
                        })
                        .await?;
                }
                SchemaChange::DropProperty {
                    type_name,
                    property,
                } => {
                    let table_id = base.require_pin_of_type(type_name)?.table_id.clone();
                    let columns = vec![property.clone()];
                    staging
                        .stage(&table_id, |tip, origin| async move {
                            adapter::stage_drop_columns(&tip, &columns, &origin).await
                        })
                        .await?;
                }
                SchemaChange::RequireProperty {
                    type_name,
                    property,
                }
                | SchemaChange::RelaxProperty {
                    type_name,
                    property,
                } => {
                    let nullable = matches!(change, SchemaChange::RelaxProperty { .. });
                    let table_id = base.require_pin_of_type(type_name)?.table_id.clone();
                    if !nullable {
                        let tip = staging.chain(&table_id).await?.tip().clone();
                        let nulls = tip
                            .count_rows(Some(format!("`{property}` IS NULL")))
                            .await
                            .map_err(|error| OmniError::from_lance("count nulls", error))?;
                        if nulls > 0 {
                            return Err(refusal(
                                change,
                                &format!(
                                    "{nulls} rows hold null; even forced, a required property cannot be null"
                                ),
                            ));
                        }
                    }
                    let columns = vec![property.clone()];
                    staging
                        .stage(&table_id, |tip, origin| async move {
                            adapter::stage_set_nullability(&tip, &columns, nullable, &origin).await
                        })
                        .await?;
                }
                SchemaChange::DeclareIndex { .. } => {}
                SchemaChange::DropIndex { type_name, index } => {
                    let table_id = base.require_pin_of_type(type_name)?.table_id.clone();
                    let tip = staging.chain(&table_id).await?.tip().clone();
                    if omnigraph_core::adapter::is_built(&tip, index).await? {
                        let name = index.clone();
                        staging
                            .stage(&table_id, |tip, origin| async move {
                                adapter::stage_drop_index(&tip, &name, &origin)
                                    .await?
                                    .ok_or_else(|| {
                                        OmniError::internal("the index vanished while staging")
                                    })
                            })
                            .await?;
                    }
                }
            }
        }
        crate::graph::put_immutable(
            self.graph().root(),
            &layout::schema_path(next.hash()),
            next.document().to_string().into(),
        )
        .await
        .map_err(|error| error.with_evidence(Evidence::Unpublished))?;
        Ok(dropped_tables)
    }
}

fn refusal(change: &SchemaChange, why: &str) -> OmniError {
    let type_name = match change {
        SchemaChange::AddType { type_name }
        | SchemaChange::DropType { type_name, .. }
        | SchemaChange::AddProperty { type_name, .. }
        | SchemaChange::DropProperty { type_name, .. }
        | SchemaChange::RequireProperty { type_name, .. }
        | SchemaChange::RelaxProperty { type_name, .. }
        | SchemaChange::DeclareIndex { type_name, .. }
        | SchemaChange::DropIndex { type_name, .. } => type_name.clone(),
    };
    let described = serde_json::to_string(change).unwrap_or_default();
    OmniError::SchemaViolation {
        type_name,
        message: format!("the change {described} {why}"),
        evidence: Evidence::BeforeEffect,
    }
}

fn unsupported(type_name: &str, message: String) -> OmniError {
    OmniError::SchemaViolation {
        type_name: type_name.to_string(),
        message,
        evidence: Evidence::BeforeEffect,
    }
}

/// The changes from `current` to `next`; refuses what schema apply cannot do.
fn diff(
    current: &Catalog,
    next: &Catalog,
    rows_of: &dyn Fn(&str) -> u64,
) -> Result<Vec<SchemaChange>> {
    let mut changes = Vec::new();
    for old in current.types() {
        if next.get(old.name()).is_none() {
            changes.push(SchemaChange::DropType {
                type_name: old.name().to_string(),
                rows: rows_of(old.name()),
            });
        }
    }
    for new in next.types() {
        let Some(old) = current.get(new.name()) else {
            changes.push(SchemaChange::AddType {
                type_name: new.name().to_string(),
            });
            continue;
        };
        diff_type(old, new, &mut changes)?;
    }
    Ok(changes)
}

fn diff_type(old: &TypeDef, new: &TypeDef, changes: &mut Vec<SchemaChange>) -> Result<()> {
    let type_name = new.name().to_string();
    if old.kind() != new.kind() {
        return Err(unsupported(
            &type_name,
            format!("{type_name} changes kind or endpoints; drop the type and add it again"),
        ));
    }
    if old.key_column() != new.key_column() || old.key_type() != new.key_type() {
        return Err(unsupported(
            &type_name,
            format!("{type_name} changes its key; drop the type and add it again"),
        ));
    }
    for column in old.columns() {
        if !new.columns().iter().any(|c| c.name == column.name) {
            changes.push(SchemaChange::DropProperty {
                type_name: type_name.clone(),
                property: column.name.clone(),
            });
        }
    }
    for column in new.columns() {
        match old.columns().iter().find(|c| c.name == column.name) {
            None if column.nullable => changes.push(SchemaChange::AddProperty {
                type_name: type_name.clone(),
                property: column.name.clone(),
            }),
            None => {
                return Err(unsupported(
                    &type_name,
                    format!(
                        "new property {}.{} must be optional: existing rows have no value for it",
                        type_name, column.name
                    ),
                ));
            }
            Some(previous) if previous.data_type != column.data_type => {
                return Err(unsupported(
                    &type_name,
                    format!(
                        "{}.{} changes type from {} to {}; add a new property instead",
                        type_name,
                        column.name,
                        previous.data_type.to_pg(),
                        column.data_type.to_pg()
                    ),
                ));
            }
            Some(previous) if previous.nullable && !column.nullable => {
                changes.push(SchemaChange::RequireProperty {
                    type_name: type_name.clone(),
                    property: column.name.clone(),
                })
            }
            Some(previous) if !previous.nullable && column.nullable => {
                changes.push(SchemaChange::RelaxProperty {
                    type_name: type_name.clone(),
                    property: column.name.clone(),
                })
            }
            Some(_) => {}
        }
    }
    for index in new.declared_indexes() {
        if !old.declared_indexes().iter().any(|i| i.name == index.name) {
            changes.push(SchemaChange::DeclareIndex {
                type_name: type_name.clone(),
                index: index.name.clone(),
            });
        }
    }
    for index in old.declared_indexes() {
        if !new.declared_indexes().iter().any(|i| i.name == index.name) {
            changes.push(SchemaChange::DropIndex {
                type_name: type_name.clone(),
                index: index.name.clone(),
            });
        }
    }
    Ok(())
}
