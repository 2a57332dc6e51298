//! `MATCH` and `OPTIONAL MATCH`: a node pattern is a scan of its type's table (a union
//! when it may be of several types), a relationship a join with its edge table's
//! `src`/`dst`, a variable-length one a union over its hop counts. Walk semantics, as
//! Kuzu: a pattern may pass an edge twice.
//!
//! Referential integrity lets a node that nothing reads go unscanned: every edge's
//! endpoints exist at the commit it was published in (checked at write; deletes cascade),
//! so the edge's `src` or `dst` is the node.

use super::{Context, Entity, NodeColumns, Planner, RelationshipColumns, Rows, column};
use crate::exec::expand::{Expand, ExpandWay, KeyType};
use crate::exec::joined_scan::JoinedTable;
use crate::exec::parameter_scan::{KeyColumn, ParameterScan};
use crate::limits::EXPAND_LOOKUP_KEYS_MAX;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Column, JoinType, ScalarValue, TableReference};
use datafusion::datasource::{TableProvider, provider_as_source};
use datafusion::logical_expr::{Expr, Extension, LogicalPlan, LogicalPlanBuilder, lit};
use omnigraph_core::lance::Dataset;
use omnigraph_core::lance::datafusion::LanceTableProvider;
use omnigraph_core::schema::{DeclKind, PropertyType, TypeDef};
use omnigraph_core::{OmniError, Result};
use omnigraph_publish::adjacency::AdjacencyWay;
use open_cypher::Span;
use open_cypher::ast::{
    Expr as CypherExpr, ExprKind, LabelExpression, LabelExpressionKind, MatchClause, NodePattern,
    PathFactorKind, Pattern, RelationshipDirection, RelationshipPattern,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The ends of an edge relation: the columns a hop joins on.
pub(crate) struct Ends {
    pub(crate) from: String,
    pub(crate) from_label: Option<String>,
    pub(crate) from_types: BTreeSet<String>,
    pub(crate) to: String,
    pub(crate) to_label: Option<String>,
    pub(crate) to_types: BTreeSet<String>,
}

/// One way an edge type is walked: forward (`src` to `dst`) or backward.
pub(crate) struct Orientation<'d> {
    def: &'d TypeDef,
    from_type: String,
    to_type: String,
    backward: bool,
    /// The backward way of an undirected pattern over an edge type between nodes of
    /// one type: it meets a loop once, so this way skips the loops the forward way
    /// met. A pattern written backward (`<-[]-`) keeps them.
    skip_loops: bool,
}

impl<'a> Planner<'a> {
    pub(crate) fn match_clause(&mut self, clause: &MatchClause, rows: Rows) -> Result<Rows> {
        if !clause.optional {
            let matched = self.pattern(&clause.pattern, rows)?;
            return match &clause.where_clause {
                Some(predicate) => self.filter(predicate, matched),
                None => Ok(matched),
            };
        }
        // OPTIONAL MATCH: match from the distinct values the rows' variables hold, and
        // join the matches back to every row on what identifies them (a row without a
        // match keeps nulls).
        let span = clause.pattern.span;
        let (outer, identity) = self.outer(&rows, span)?;
        let mut matched = self.pattern(&clause.pattern, outer)?;
        if let Some(predicate) = &clause.where_clause {
            matched = self.filter(predicate, matched)?;
        }
        let aliases: Vec<String> = identity.iter().map(|_| self.fresh("outer")).collect();
        let mut items: Vec<Expr> = identity
            .iter()
            .zip(&aliases)
            .map(|(name, alias)| column(name).alias(alias))
            .collect();
        let mut env = rows.env.clone();
        let mut seen: Vec<String> = Vec::new();
        for (name, entity) in &matched.env {
            if rows.env.contains_key(name) {
                continue;
            }
            for name in entity.columns() {
                if !seen.contains(&name) {
                    items.push(column(&name));
                    seen.push(name);
                }
            }
            env.insert(name.clone(), entity.clone());
        }
        let right = self.df(
            span,
            LogicalPlanBuilder::from(matched.plan)
                .project(items)
                .and_then(LogicalPlanBuilder::build),
        )?;
        let plan = self.join_back(rows.plan, right, &identity, &aliases, span)?;
        Ok(Rows {
            plan,
            env,
            unit: false,
        })
    }

    /// The distinct values `rows`' variables hold (a subquery or optional match runs
    /// once per distinct outer row), and the columns that identify them: a node's key
    /// and label, a relationship's id and type, a value itself.
    pub(crate) fn outer(&mut self, rows: &Rows, span: Span) -> Result<(Rows, Vec<String>)> {
        let identity = super::identity_columns(&rows.env);
        if identity.is_empty() {
            // Nothing to correlate on: the pattern matches once, from the start row,
            // and every row gets its matches.
            let unit = Rows {
                plan: self.internal(LogicalPlanBuilder::empty(true).build())?,
                env: rows.env.clone(),
                unit: true,
            };
            return Ok((unit, identity));
        }
        let carried = self.passthrough(rows);
        let plan = LogicalPlanBuilder::from(rows.plan.clone())
            .project(carried)
            .and_then(LogicalPlanBuilder::distinct)
            .and_then(LogicalPlanBuilder::build);
        let outer = Rows {
            plan: self.df(span, plan)?,
            env: rows.env.clone(),
            unit: false,
        };
        Ok((outer, identity))
    }

    /// `rows` left-joined to `right` where each identity column equals its alias in
    /// `right` (null equal to null: a node an optional match left null is still itself).
    pub(crate) fn join_back(
        &mut self,
        rows: LogicalPlan,
        right: LogicalPlan,
        identity: &[String],
        aliases: &[String],
        span: Span,
    ) -> Result<LogicalPlan> {
        let joined = if identity.is_empty() {
            LogicalPlanBuilder::from(rows).join_on(right, JoinType::Left, [lit(true)])
        } else {
            LogicalPlanBuilder::from(rows).join_detailed(
                right,
                JoinType::Left,
                (
                    identity.iter().map(Column::from_name).collect::<Vec<_>>(),
                    aliases.iter().map(Column::from_name).collect::<Vec<_>>(),
                ),
                None,
                datafusion::common::NullEquality::NullEqualsNull,
            )
        };
        self.df(span, joined.and_then(LogicalPlanBuilder::build))
    }

    /// Matches every part of `pattern` on `rows`.
    pub(crate) fn pattern(&mut self, pattern: &Pattern, mut rows: Rows) -> Result<Rows> {
        for part in &pattern.parts {
            let written = &part.kind.path.kind.factors;
            // A path whose last node is bound and whose first is not is walked from the
            // bound end: the same matches (a path read backward is the same path),
            // from the rows so far instead of a scan of the first node's type.
            let reversed = walked_backward(written, &rows.env).then(|| backward(written));
            let factors = reversed.as_deref().unwrap_or(written);
            let lone = factors.len() == 1;
            // The node before the relationship being matched: bound, or not yet read
            // (its key comes from the edge).
            let mut left: Option<(String, Option<NodeColumns>)> = None;
            let mut pending: Option<(&RelationshipPattern, Span)> = None;
            for factor in factors {
                match &factor.kind {
                    PathFactorKind::Node(node) => {
                        let name = node_name(node, factor.span);
                        match (pending.take(), left.take()) {
                            (Some((relationship, span)), Some((left_name, unread))) => {
                                rows = self.hop(
                                    relationship,
                                    span,
                                    (&left_name, unread),
                                    (&name, node, factor.span),
                                    rows,
                                )?;
                            }
                            _ => {
                                let read = lone
                                    || rows.env.contains_key(&name)
                                    || node.properties.is_some()
                                    || self.is_read(&name)
                                    || next_is_variable_length(factors, factor.span);
                                if read {
                                    rows = self.bind_node(&name, node, factor.span, rows)?;
                                    left = Some((name, None));
                                    continue;
                                }
                                let types = self.node_types(node);
                                left = Some((
                                    name,
                                    Some(NodeColumns {
                                        types,
                                        key: String::new(),
                                        label: None,
                                        properties: None,
                                    }),
                                ));
                                continue;
                            }
                        }
                        left = Some((name, None));
                    }
                    PathFactorKind::Relationship(relationship) => {
                        pending = Some((relationship, factor.span));
                    }
                    _ => return Err(self.unsupported(factor.span, "this pattern")),
                }
            }
        }
        Ok(rows)
    }

    /// The node types a node pattern names (every node type without a label).
    pub(crate) fn node_types(&self, node: &NodePattern) -> Vec<String> {
        let mut types: Vec<String> = match &node.labels {
            Some(labels) => label_names(labels),
            None => self
                .catalog
                .types()
                .iter()
                .filter(|def| def.is_node())
                .map(|def| def.name().to_string())
                .collect(),
        };
        types.sort_unstable();
        types
    }

    /// Binds a node pattern that starts a path: the variable it reuses, or a scan of its
    /// types joined to the rows (a cross join: nothing links it to them yet).
    fn bind_node(
        &mut self,
        name: &str,
        node: &NodePattern,
        span: Span,
        rows: Rows,
    ) -> Result<Rows> {
        if let Some(Entity::Node(bound)) = rows.env.get(name).cloned() {
            let rows = self.keep_types(&bound, &self.node_types(node), rows, span)?;
            return self.node_properties(name, node, rows);
        }
        let types = self.node_types(node);
        let (scan, columns) = self.scan_nodes(&types, name, span)?;
        let mut rows = if rows.unit {
            Rows {
                plan: scan,
                env: rows.env,
                unit: false,
            }
        } else {
            let joined = LogicalPlanBuilder::from(rows.plan)
                .cross_join(scan)
                .and_then(LogicalPlanBuilder::build);
            Rows {
                plan: self.df(span, joined)?,
                env: rows.env,
                unit: false,
            }
        };
        rows.env
            .insert(name.to_string(), Entity::Node(columns.clone()));
        let mut rows = self.node_properties(name, node, rows)?;
        if let (Some(map), [only]) = (&node.properties, types.as_slice()) {
            self.fix_key(map, only, &columns.key, &mut rows)?;
        }
        Ok(rows)
    }

    /// Notes that the key column `key` of a node of `node_type` holds one constant when
    /// the property map `map` sets its key property to a value that reads no variable.
    fn fix_key(
        &mut self,
        map: &CypherExpr,
        node_type: &str,
        key: &str,
        rows: &mut Rows,
    ) -> Result<()> {
        let (ExprKind::Map(entries), Some(def)) = (&map.kind, self.catalog.get(node_type)) else {
            return Ok(());
        };
        if self.text_keys {
            return Ok(());
        }
        for entry in entries {
            let constant = super::count::variables(&entry.value).is_some_and(|v| v.is_empty());
            if entry.key.kind.text == def.key_column() && constant {
                let value = self.expression(&entry.value, rows, Context::Row)?;
                self.fixed_keys.insert(key.to_string(), value);
            }
        }
        Ok(())
    }

    /// Keeps the rows where the bound node `bound` is of one of `types`.
    fn keep_types(
        &mut self,
        bound: &NodeColumns,
        types: &[String],
        mut rows: Rows,
        span: Span,
    ) -> Result<Rows> {
        if bound.types.iter().all(|t| types.contains(t)) {
            return Ok(rows);
        }
        let Some(label) = &bound.label else {
            // One type, not among them: no row.
            let none = LogicalPlanBuilder::from(rows.plan)
                .filter(lit(false))
                .and_then(LogicalPlanBuilder::build);
            rows.plan = self.df(span, none)?;
            return Ok(rows);
        };
        let kept = LogicalPlanBuilder::from(rows.plan)
            .filter(column(label).in_list(types.iter().map(|t| lit(t.as_str())).collect(), false))
            .and_then(LogicalPlanBuilder::build);
        rows.plan = self.df(span, kept)?;
        Ok(rows)
    }

    /// The filters of a node pattern's property map (`{name: 'Ada'}`).
    pub(crate) fn node_properties(
        &mut self,
        name: &str,
        node: &NodePattern,
        rows: Rows,
    ) -> Result<Rows> {
        let Some(map) = &node.properties else {
            return Ok(rows);
        };
        let Some(Entity::Node(columns)) = rows.env.get(name).cloned() else {
            unreachable!("a node pattern's variable is bound before its properties are read");
        };
        let properties = columns.properties.clone().unwrap_or_default();
        self.property_filters(map, &properties, rows)
    }

    fn property_filters(
        &mut self,
        map: &CypherExpr,
        properties: &BTreeMap<String, String>,
        mut rows: Rows,
    ) -> Result<Rows> {
        let ExprKind::Map(entries) = &map.kind else {
            return Err(self.unsupported(map.span, "a property map that is not a literal map"));
        };
        for entry in entries {
            let value = self.expression(&entry.value, &mut rows, Context::Row)?;
            let condition = match properties.get(&entry.key.kind.text) {
                Some(property) => column(property).eq(value),
                // A property none of its types has: null, which equals nothing.
                None => lit(false),
            };
            let kept = LogicalPlanBuilder::from(rows.plan)
                .filter(condition)
                .and_then(LogicalPlanBuilder::build);
            rows.plan = self.df(entry.span, kept)?;
        }
        Ok(rows)
    }

    /// The key property every one of `types` has, when they name it alike.
    fn shared_key_property(&self, types: &[String]) -> Option<String> {
        let mut names = types
            .iter()
            .map(|t| self.catalog.get(t).map(|def| def.key_column().to_string()));
        let first = names.next()??;
        names
            .all(|name| name.as_deref() == Some(first.as_str()))
            .then_some(first)
    }

    /// A scan of the nodes of `types`: their key, label (several types) and properties.
    pub(crate) fn scan_nodes(
        &mut self,
        types: &[String],
        name: &str,
        span: Span,
    ) -> Result<(LogicalPlan, NodeColumns)> {
        self.scan_nodes_through(types, name, span, Self::scan)
    }

    /// A scan of the nodes of `types` a hop reached, which the hop joins on their key:
    /// when the nodes reached are few, it looks their keys up in the key's index instead
    /// of reading the table (`JoinedTable`).
    pub(crate) fn scan_reached_nodes(
        &mut self,
        types: &[String],
        name: &str,
        span: Span,
    ) -> Result<(LogicalPlan, NodeColumns)> {
        self.scan_nodes_through(types, name, span, Self::scan_reached)
    }

    fn scan_nodes_through(
        &mut self,
        types: &[String],
        name: &str,
        span: Span,
        scan_of: fn(&mut Self, &TypeDef, Span) -> Result<(LogicalPlanBuilder, TableReference)>,
    ) -> Result<(LogicalPlan, NodeColumns)> {
        let defs: Vec<&TypeDef> = types.iter().filter_map(|t| self.catalog.get(t)).collect();
        assert_eq!(
            defs.len(),
            types.len(),
            "the checker named only schema types"
        );
        let key = self.fresh(&format!("{name}_key"));
        let label = (defs.len() > 1).then(|| self.fresh(&format!("{name}_label")));
        let properties = self.property_columns(&defs, name, false);
        let mut branches = Vec::with_capacity(defs.len());
        for def in &defs {
            let (scan, table) = scan_of(self, def, span)?;
            let mut items = vec![
                self.key_expr(&table, def.key_column(), def.key_type())
                    .alias(&key),
            ];
            if let Some(label) = &label {
                items.push(lit(def.name()).alias(label));
            }
            items.extend(self.property_items(def, &table, &properties));
            branches.push(self.df(
                span,
                scan.project(items).and_then(LogicalPlanBuilder::build),
            )?);
        }
        let Some(plan) = self.union_all(branches)? else {
            return Err(OmniError::internal("a node pattern of no type was scanned"));
        };
        let columns = NodeColumns {
            types: types.to_vec(),
            key,
            label,
            properties: Some(properties.into_iter().map(|(p, (c, _))| (p, c)).collect()),
        };
        Ok((plan, columns))
    }

    /// A fresh column per property any of `defs` has, with the arrow type a union of
    /// them holds (text when the types disagree).
    fn property_columns(
        &mut self,
        defs: &[&TypeDef],
        name: &str,
        edge: bool,
    ) -> BTreeMap<String, (String, DataType)> {
        let mut columns: BTreeMap<String, (String, DataType)> = BTreeMap::new();
        for def in defs {
            for property in def.columns() {
                let data_type = property.data_type.arrow_type();
                match columns.get_mut(&property.name) {
                    Some((_, known)) if *known != data_type => *known = DataType::Utf8,
                    Some(_) => {}
                    None => {
                        let fresh = self.fresh(&format!("{name}_{}", property.name));
                        columns.insert(property.name.clone(), (fresh, data_type));
                    }
                }
            }
        }
        if edge {
            // An edge's endpoints are keys: text when the graph's key types differ.
            for end in ["src", "dst"] {
                if let Some((_, data_type)) = columns.get_mut(end)
                    && self.text_keys
                {
                    *data_type = DataType::Utf8;
                }
            }
        }
        columns
    }

    fn property_items(
        &self,
        def: &TypeDef,
        table: &TableReference,
        columns: &BTreeMap<String, (String, DataType)>,
    ) -> Vec<Expr> {
        let mut items = Vec::new();
        for (property, (fresh, data_type)) in columns {
            let value = match def.columns().iter().find(|c| &c.name == property) {
                Some(declared) if declared.data_type.arrow_type() == *data_type => {
                    Expr::Column(Column::new(Some(table.clone()), property))
                }
                Some(_) => Expr::Column(Column::new(Some(table.clone()), property)).cast_to_text(),
                None => lit(ScalarValue::try_from(data_type).unwrap_or(ScalarValue::Null)),
            };
            items.push(value.alias(fresh));
        }
        items
    }

    /// A key column as the plan compares keys: as it is, or as text.
    fn key_expr(&self, table: &TableReference, name: &str, data_type: PropertyType) -> Expr {
        let value = Expr::Column(Column::new(Some(table.clone()), name));
        if self.text_keys && data_type != PropertyType::String {
            value.cast_to_text()
        } else {
            value
        }
    }

    /// The rows of every branch (the same columns in each), or `None` for no branch.
    fn union_all(&self, branches: Vec<LogicalPlan>) -> Result<Option<LogicalPlan>> {
        let mut branches = branches.into_iter();
        let Some(first) = branches.next() else {
            return Ok(None);
        };
        let mut union = LogicalPlanBuilder::from(first);
        for branch in branches {
            union = self.internal(union.union(branch))?;
        }
        self.internal(union.build()).map(Some)
    }

    /// A scan of `def`'s table at the commit's pinned version.
    fn scan(&mut self, def: &TypeDef, span: Span) -> Result<(LogicalPlanBuilder, TableReference)> {
        let dataset = self.dataset(def, span)?;
        let provider = LanceTableProvider::new_with_ordering(dataset.clone(), false, false, false);
        // Its filters on a parameter are planned when a run has the value, so the
        // physical plan serves every value (`exec/parameter_scan.rs`).
        let key = def.is_node().then(|| KeyColumn {
            type_name: def.name().to_owned(),
            column: def.key_column().to_owned(),
        });
        let provider = ParameterScan::new(Arc::new(provider), dataset, key);
        self.scan_of(def, Arc::new(provider), span)
    }

    /// A scan of the edge table of `def` that a hop joins: it looks the join's keys up
    /// in the table's index on the end it meets when they are few (`JoinedTable`).
    fn scan_edges(
        &mut self,
        def: &TypeDef,
        span: Span,
    ) -> Result<(LogicalPlanBuilder, TableReference)> {
        let dataset = self.dataset(def, span)?;
        self.scan_of(def, Arc::new(JoinedTable::edges(dataset)), span)
    }

    /// A scan of the node table of `def` that a hop joins on the key of the nodes it
    /// reached: it looks them up in the key's index when they are few (`JoinedTable`).
    fn scan_reached(
        &mut self,
        def: &TypeDef,
        span: Span,
    ) -> Result<(LogicalPlanBuilder, TableReference)> {
        let dataset = self.dataset(def, span)?;
        self.scan_of(def, Arc::new(JoinedTable::nodes(dataset)), span)
    }

    fn dataset(&self, def: &TypeDef, span: Span) -> Result<Arc<Dataset>> {
        self.tables.get(def.name()).cloned().ok_or_else(|| {
            OmniError::internal(format!(
                "the commit's tables hold none for {} (at byte {} of the query)",
                def.name(),
                span.start
            ))
        })
    }

    fn scan_of(
        &mut self,
        def: &TypeDef,
        provider: Arc<dyn TableProvider>,
        span: Span,
    ) -> Result<(LogicalPlanBuilder, TableReference)> {
        let table = TableReference::bare(self.fresh(def.name()));
        let scan = LogicalPlanBuilder::scan(table.clone(), provider_as_source(provider), None);
        Ok((self.df(span, scan)?, table))
    }

    /// The ways the edge types of `relationship` can be walked from a node of
    /// `left_types` to one of `right_types` (any node when `None`).
    pub(crate) fn orientations(
        &self,
        relationship: &RelationshipPattern,
        left_types: Option<&[String]>,
        right_types: Option<&[String]>,
    ) -> Vec<Orientation<'a>> {
        let catalog = self.catalog;
        let named = relationship.labels.as_ref().map(label_names);
        let fits = |types: Option<&[String]>, t: &str| {
            types.is_none_or(|types| types.iter().any(|x| x == t))
        };
        let mut ways = Vec::new();
        for def in catalog.types() {
            let DeclKind::Edge { from, to } = def.kind() else {
                continue;
            };
            if named
                .as_ref()
                .is_some_and(|named| !named.iter().any(|n| n == def.name()))
            {
                continue;
            }
            let direction = relationship.direction.kind;
            let forward = !matches!(direction, RelationshipDirection::Left);
            let backward = !matches!(direction, RelationshipDirection::Right);
            if forward && fits(left_types, from) && fits(right_types, to) {
                ways.push(Orientation {
                    def,
                    from_type: from.clone(),
                    to_type: to.clone(),
                    backward: false,
                    skip_loops: false,
                });
            }
            if backward && fits(left_types, to) && fits(right_types, from) {
                ways.push(Orientation {
                    def,
                    from_type: to.clone(),
                    to_type: from.clone(),
                    backward: true,
                    skip_loops: forward && from == to,
                });
            }
        }
        ways
    }

    /// The edges of `ways` as one relation: their ends, and the relationship's columns
    /// when `relationship` names it.
    pub(crate) fn edges(
        &mut self,
        ways: &[Orientation<'a>],
        relationship: Option<&str>,
        near: Option<&Expr>,
        span: Span,
    ) -> Result<(LogicalPlan, Ends, Option<RelationshipColumns>)> {
        let (from_types, to_types) = end_types(ways);
        let hint = relationship.unwrap_or("edge");
        let ends = Ends {
            from: self.fresh(&format!("{hint}_from")),
            from_label: (from_types.len() > 1).then(|| self.fresh(&format!("{hint}_from_label"))),
            from_types,
            to: self.fresh(&format!("{hint}_to")),
            to_label: (to_types.len() > 1).then(|| self.fresh(&format!("{hint}_to_label"))),
            to_types,
        };
        let mut edge_types: Vec<&TypeDef> = Vec::new();
        for way in ways {
            if !edge_types.iter().any(|d| d.name() == way.def.name()) {
                edge_types.push(way.def);
            }
        }
        let relationship_columns = relationship.map(|name| {
            let properties = self.property_columns(&edge_types, name, true);
            let label = (edge_types.len() > 1).then(|| self.fresh(&format!("{name}_type")));
            (properties, label)
        });
        let mut branches = Vec::with_capacity(ways.len());
        for way in ways {
            let (scan, table) = self.scan_edges(way.def, span)?;
            let key_type = self
                .catalog
                .get(&way.from_type)
                .map_or(PropertyType::String, TypeDef::key_type);
            let to_key_type = self
                .catalog
                .get(&way.to_type)
                .map_or(PropertyType::String, TypeDef::key_type);
            let (from, to) = if way.backward {
                ("dst", "src")
            } else {
                ("src", "dst")
            };
            let mut items = vec![
                self.key_expr(&table, from, key_type).alias(&ends.from),
                self.key_expr(&table, to, to_key_type).alias(&ends.to),
            ];
            if let Some(label) = &ends.from_label {
                items.push(lit(way.from_type.as_str()).alias(label));
            }
            if let Some(label) = &ends.to_label {
                items.push(lit(way.to_type.as_str()).alias(label));
            }
            if let Some((properties, label)) = &relationship_columns {
                if let Some(label) = label {
                    items.push(lit(way.def.name()).alias(label));
                }
                items.extend(self.property_items(way.def, &table, properties));
            }
            let mut scan = scan;
            if let Some(value) = near {
                // The near node's key is one constant: only its edges, which the
                // edge table's index on that end finds.
                let end = Expr::Column(Column::new(Some(table.clone()), from));
                scan = self.df(span, scan.filter(end.eq(value.clone())))?;
            }
            if way.skip_loops {
                // An undirected pattern meets a loop once, not once each way.
                let src = Expr::Column(Column::new(Some(table.clone()), "src"));
                let dst = Expr::Column(Column::new(Some(table.clone()), "dst"));
                scan = self.df(span, scan.filter(src.not_eq(dst)))?;
            }
            branches.push(self.df(
                span,
                scan.project(items).and_then(LogicalPlanBuilder::build),
            )?);
        }
        let plan = match self.union_all(branches)? {
            Some(plan) => plan,
            None => {
                // No edge type fits both ends (the checker narrows less exactly): no
                // edge, with the columns a hop joins on.
                let key_type = self.key_type.clone().unwrap_or(DataType::Utf8);
                let null = ScalarValue::try_from(&key_type).unwrap_or(ScalarValue::Null);
                let empty = LogicalPlanBuilder::empty(false)
                    .project([
                        lit(null.clone()).alias(&ends.from),
                        lit(null).alias(&ends.to),
                    ])
                    .and_then(LogicalPlanBuilder::build);
                self.internal(empty)?
            }
        };
        let columns = relationship_columns.map(|(properties, label)| RelationshipColumns {
            types: edge_types
                .iter()
                .map(|def| def.name().to_string())
                .collect(),
            label,
            properties: properties.into_iter().map(|(p, (c, _))| (p, c)).collect(),
        });
        Ok((plan, ends, columns))
    }

    /// The conditions that a node's columns meet an edge end.
    fn meet(
        node: &NodeColumns,
        key: &str,
        label: Option<&String>,
        types: &BTreeSet<String>,
    ) -> Vec<Expr> {
        let mut on = vec![column(&node.key).eq(column(key))];
        match (&node.label, label) {
            (Some(node_label), Some(label)) => on.push(column(node_label).eq(column(label))),
            (Some(node_label), None) => match types.iter().next() {
                Some(only) => on.push(column(node_label).eq(lit(only.as_str()))),
                // An end of no type: no edge fits it.
                None => on.push(lit(false)),
            },
            (None, Some(label)) => match node.types.first() {
                Some(only) => on.push(column(label).eq(lit(only.as_str()))),
                None => on.push(lit(false)),
            },
            (None, None) => {}
        }
        on
    }

    /// Matches `(left)-[relationship]-(right)` on `rows`.
    fn hop(
        &mut self,
        relationship: &RelationshipPattern,
        span: Span,
        (left_name, unread): (&str, Option<NodeColumns>),
        (right_name, right, right_span): (&str, &NodePattern, Span),
        mut rows: Rows,
    ) -> Result<Rows> {
        if let Some(hops) = hops(relationship) {
            assert!(
                unread.is_none(),
                "a variable-length hop starts from a node that was read"
            );
            return self.variable_hop(
                relationship,
                span,
                left_name,
                hops,
                (right_name, right, right_span),
                rows,
            );
        }
        let right_bound = match rows.env.get(right_name) {
            Some(Entity::Node(bound)) => Some(bound.clone()),
            _ => None,
        };
        let left_types: Vec<String> = match (&unread, rows.env.get(left_name)) {
            (Some(unread), _) => unread.types.clone(),
            (None, Some(Entity::Node(left))) => left.types.clone(),
            _ => unreachable!("the left node of a hop is bound"),
        };
        let mut right_types = self.node_types(right);
        if let Some(bound) = &right_bound {
            right_types.retain(|t| bound.types.contains(t));
        }
        let ways = self.orientations(relationship, Some(&left_types), Some(&right_types));
        // A relationship's columns are read when its variable is, or its property map
        // filters it (an anonymous one then gets a hidden name).
        let relationship_name = match &relationship.variable {
            Some(variable) => Some(variable.kind.text.clone()).filter(|name| {
                self.is_read(name)
                    || relationship.properties.is_some()
                    || rows.env.contains_key(name)
            }),
            None => relationship
                .properties
                .is_some()
                .then(|| format!("\u{0}relationship@{}", span.start)),
        };
        let labels = relationship
            .labels
            .as_ref()
            .map(|l| label_names(l).join("|"))
            .unwrap_or_default();
        let expansion = match (&unread, &relationship_name) {
            (None, None) => self.expand_ways(&ways)?,
            (Some(_), _) => Err("its first node is not read, so the hop reads every edge".into()),
            (None, Some(_)) => Err(
                "the relationship is read, and an artifact holds no edge's id or properties".into(),
            ),
        };
        let why = match expansion {
            Ok(expand_ways) => {
                let Some(Entity::Node(left)) = rows.env.get(left_name).cloned() else {
                    unreachable!("the left node of a hop is bound");
                };
                let described = describe(&expand_ways);
                let (plan, far, far_label, to_types) =
                    self.expand(rows.plan, &left, expand_ways, span)?;
                self.hops.push(format!(
                    "{left_name}-[{labels}]-{right_name}: expansion through the adjacency artifact ({described})"
                ));
                rows.plan = plan;
                return self.right_end(
                    right_name, right, right_span, far, far_label, to_types, rows,
                );
            }
            Err(why) => why,
        };
        let near = match (&unread, rows.env.get(left_name)) {
            (None, Some(Entity::Node(left))) => self.fixed_keys.get(&left.key).cloned(),
            _ => None,
        };
        let (edges, ends, relationship_columns) =
            self.edges(&ways, relationship_name.as_deref(), near.as_ref(), span)?;
        let (how, lookup) = if near.is_some() {
            (
                "a lookup of its key in the edge table's index on",
                String::new(),
            )
        } else {
            (
                "hash join on the edge table's",
                format!(", its keys looked up in the index when at most {EXPAND_LOOKUP_KEYS_MAX}"),
            )
        };
        self.hops.push(format!(
            "{left_name}-[{labels}]-{right_name}: {how} {} ({}){lookup}: {why}",
            match (
                ways.iter().any(|w| !w.backward),
                ways.iter().any(|w| w.backward)
            ) {
                (true, true) => "src/dst",
                (false, true) => "dst",
                _ => "src",
            },
            ways.iter()
                .map(|w| w.def.name())
                .collect::<Vec<_>>()
                .join(", ")
        ));
        let mut rows = match unread {
            Some(unread) => {
                // The left node is the edge's `from` end.
                let left = NodeColumns {
                    types: ends.from_types.iter().cloned().collect(),
                    key: ends.from.clone(),
                    label: ends.from_label.clone(),
                    properties: None,
                };
                let _ = unread;
                let plan = if rows.unit {
                    edges
                } else {
                    let joined = LogicalPlanBuilder::from(rows.plan)
                        .cross_join(edges)
                        .and_then(LogicalPlanBuilder::build);
                    self.df(span, joined)?
                };
                let mut env = rows.env;
                env.insert(left_name.to_string(), Entity::Node(left));
                Rows {
                    plan,
                    env,
                    unit: false,
                }
            }
            None => {
                let Some(Entity::Node(left)) = rows.env.get(left_name).cloned() else {
                    unreachable!("the left node of a hop is bound");
                };
                let on = Self::meet(
                    &left,
                    &ends.from,
                    ends.from_label.as_ref(),
                    &ends.from_types,
                );
                let joined = LogicalPlanBuilder::from(rows.plan)
                    .join_on(edges, JoinType::Inner, on)
                    .and_then(LogicalPlanBuilder::build);
                rows.plan = self.df(span, joined)?;
                rows
            }
        };
        if let (Some(name), Some(columns)) = (&relationship_name, relationship_columns) {
            if let Some(Entity::Relationship(bound)) = rows.env.get(name).cloned() {
                // The same relationship as an earlier clause's: its id and type meet.
                let same = super::expr::same_relationship(&bound, &columns);
                let kept = LogicalPlanBuilder::from(rows.plan)
                    .filter(same)
                    .and_then(LogicalPlanBuilder::build);
                rows.plan = self.df(span, kept)?;
            } else {
                rows.env
                    .insert(name.clone(), Entity::Relationship(columns.clone()));
            }
            if let Some(map) = &relationship.properties {
                rows = self.property_filters(map, &columns.properties, rows)?;
            }
        }
        self.right_end(
            right_name,
            right,
            right_span,
            ends.to,
            ends.to_label,
            ends.to_types,
            rows,
        )
    }

    /// The artifacts that walk `ways`, when every edge type among them has one current
    /// at the commit and node keys keep their own types; otherwise why a hop over them
    /// reads the edge tables. An artifact whose keys are not keys of the node types is
    /// corrupt (an error).
    pub(crate) fn expand_ways(
        &self,
        ways: &[Orientation<'a>],
    ) -> Result<std::result::Result<Vec<ExpandWay>, String>> {
        if ways.is_empty() {
            return Ok(Err("no edge type fits both ends".into()));
        }
        if self.text_keys {
            return Ok(Err("node keys of several types are compared as text".into()));
        }
        let mut found = Vec::with_capacity(ways.len());
        for way in ways {
            let to_key = self
                .catalog
                .get(&way.to_type)
                .map(|def| def.key_type().arrow_type());
            let Some(key_type) = to_key.as_ref().and_then(KeyType::of) else {
                return Ok(Err(format!(
                    "{}'s key is not a key an artifact holds",
                    way.to_type
                )));
            };
            let adjacency = match self.adjacency.get(way.def.name()) {
                Some(Ok(adjacency)) => adjacency.clone(),
                Some(Err(why)) => {
                    return Ok(Err(format!("no artifact of {}: {why}", way.def.name())));
                }
                None => {
                    return Ok(Err(format!(
                        "no artifact of {} was looked for",
                        way.def.name()
                    )));
                }
            };
            let resolved = match crate::exec::expand::resolved(&adjacency, key_type)? {
                Ok(resolved) => resolved,
                Err(why) => {
                    return Ok(Err(format!("the artifact of {}: {why}", way.def.name())));
                }
            };
            found.push(ExpandWay {
                adjacency,
                direction: if way.backward {
                    AdjacencyWay::In
                } else {
                    AdjacencyWay::Out
                },
                from_type: way.from_type.clone(),
                to_type: way.to_type.clone(),
                skip_loops: way.skip_loops,
                resolved,
            });
        }
        Ok(Ok(found))
    }

    /// `plan` expanded from `near` over `ways` (see [`Planner::expansion`]), with fresh
    /// columns for the far key and, when the ways reach several types, its type.
    fn expand(
        &mut self,
        plan: LogicalPlan,
        near: &NodeColumns,
        ways: Vec<ExpandWay>,
        span: Span,
    ) -> Result<(LogicalPlan, String, Option<String>, BTreeSet<String>)> {
        let to_types: BTreeSet<String> = ways.iter().map(|way| way.to_type.clone()).collect();
        let far = self.fresh("far");
        let far_label = (to_types.len() > 1).then(|| self.fresh("far_label"));
        let plan = self.expansion(plan, near, ways, (&far, far_label.as_deref()), span)?;
        Ok((plan, far, far_label, to_types))
    }

    /// `plan`'s rows, each repeated once per edge of its node `near` along `ways`, with
    /// the far node's key in column `far` (and its type in `far_label`).
    pub(crate) fn expansion(
        &mut self,
        plan: LogicalPlan,
        near: &NodeColumns,
        ways: Vec<ExpandWay>,
        (far, far_label): (&str, Option<&str>),
        span: Span,
    ) -> Result<LogicalPlan> {
        let far_type = ways
            .first()
            .and_then(|way| self.catalog.get(&way.to_type))
            .and_then(|def| KeyType::of(&def.key_type().arrow_type()))
            .ok_or_else(|| {
                OmniError::internal(format!(
                    "an expansion reaches a key no artifact holds (at byte {})",
                    span.start
                ))
            })?;
        let node = Expand::new(
            plan,
            (&near.key, near.label.as_deref()),
            ways,
            (far, far_label),
            far_type,
        );
        let node = self.internal(node)?;
        Ok(LogicalPlan::Extension(Extension {
            node: Arc::new(node),
        }))
    }

    /// Binds the node a hop reaches, whose key (and type) the edge end holds.
    #[allow(clippy::too_many_arguments)]
    fn right_end(
        &mut self,
        name: &str,
        node: &NodePattern,
        span: Span,
        key: String,
        label: Option<String>,
        types: BTreeSet<String>,
        mut rows: Rows,
    ) -> Result<Rows> {
        if let Some(Entity::Node(bound)) = rows.env.get(name).cloned() {
            let on = Self::meet(&bound, &key, label.as_ref(), &types);
            let kept = LogicalPlanBuilder::from(rows.plan)
                .filter(on.into_iter().fold(lit(true), Expr::and))
                .and_then(LogicalPlanBuilder::build);
            rows.plan = self.internal(kept)?;
            // Bound before, it still has this pattern's label and property map.
            let rows = self.keep_types(&bound, &self.node_types(node), rows, span)?;
            return self.node_properties(name, node, rows);
        }
        let mut wanted = self.node_types(node);
        wanted.retain(|t| types.contains(t));
        if wanted.is_empty() {
            // No edge reaches a node of its labels: no row. Its properties are null.
            let none = LogicalPlanBuilder::from(rows.plan)
                .filter(lit(false))
                .and_then(LogicalPlanBuilder::build);
            rows.plan = self.internal(none)?;
            let reached = NodeColumns {
                types: Vec::new(),
                key,
                label,
                properties: Some(BTreeMap::new()),
            };
            rows.env.insert(name.to_string(), Entity::Node(reached));
            return Ok(rows);
        }
        let read = node.properties.is_some() || self.is_read(name);
        // Read only for its key, the node needs no table: the edge end holds its key,
        // of the key's own type unless keys are compared as text.
        let key_only = match self.shared_key_property(&wanted) {
            Some(property) if read && !self.text_keys && node.properties.is_none() => self
                .is_read_for_key_only(name, &property)
                .then(|| BTreeMap::from([(property, key.clone())])),
            _ => None,
        };
        if !read || key_only.is_some() {
            let reached = NodeColumns {
                types: types.iter().cloned().collect(),
                key,
                label,
                properties: key_only,
            };
            let rows = self.keep_types(&reached, &wanted, rows, span)?;
            let mut rows = rows;
            let mut reached = reached;
            reached.types.retain(|t| wanted.contains(t));
            rows.env.insert(name.to_string(), Entity::Node(reached));
            return Ok(rows);
        }
        let (scan, columns) = self.scan_reached_nodes(&wanted, name, span)?;
        let mut on = vec![column(&columns.key).eq(column(&key))];
        match (&columns.label, &label) {
            (Some(a), Some(b)) => on.push(column(a).eq(column(b))),
            (None, Some(b)) => on.push(column(b).eq(lit(wanted[0].as_str()))),
            (Some(a), None) => {
                let only = types.iter().next().expect("an edge end has a type");
                on.push(column(a).eq(lit(only.as_str())));
            }
            (None, None) => {}
        }
        let joined = LogicalPlanBuilder::from(rows.plan)
            .join_on(scan, JoinType::Inner, on)
            .and_then(LogicalPlanBuilder::build);
        rows.plan = self.df(span, joined)?;
        rows.env.insert(name.to_string(), Entity::Node(columns));
        self.node_properties(name, node, rows)
    }

    /// `(left)-[:T*lower..upper]-(right)`: the rows after each number of hops from
    /// `lower` to `upper`, in one union; each hop joins the edges of every type the
    /// pattern allows to the node reached so far.
    fn variable_hop(
        &mut self,
        relationship: &RelationshipPattern,
        span: Span,
        left_name: &str,
        (lower, upper): (u64, u64),
        (right_name, right, right_span): (&str, &NodePattern, Span),
        rows: Rows,
    ) -> Result<Rows> {
        let Some(Entity::Node(left)) = rows.env.get(left_name).cloned() else {
            return Err(OmniError::internal("the left node of a hop is bound"));
        };
        if let Some(map) = &relationship.properties {
            return Err(
                self.unsupported(map.span, "a property map on a variable-length relationship")
            );
        }
        let ways = self.orientations(relationship, None, None);
        let node_types: BTreeSet<String> = ways
            .iter()
            .flat_map(|w| [w.from_type.clone(), w.to_type.clone()])
            .chain(left.types.iter().cloned())
            .collect();
        let several = node_types.len() > 1;
        let at = self.fresh("at");
        let at_label = several.then(|| self.fresh("at_label"));
        let carried = self.passthrough(&rows);
        let project = |plan: LogicalPlan, key: &str, label: Option<&String>, only: Option<&str>| {
            let mut items = carried.clone();
            items.push(column(key).alias(&at));
            if let Some(at_label) = &at_label {
                items.push(match (label, only) {
                    (Some(label), _) => column(label).alias(at_label),
                    (None, Some(only)) => lit(only).alias(at_label),
                    (None, None) => lit(ScalarValue::Utf8(None)).alias(at_label),
                });
            }
            LogicalPlanBuilder::from(plan)
                .project(items)
                .and_then(LogicalPlanBuilder::build)
        };
        let first_type = left.types.first().cloned();
        let mut frontier = self.df(
            span,
            project(
                rows.plan.clone(),
                &left.key,
                left.label.as_ref(),
                first_type.as_deref(),
            ),
        )?;
        let mut reached: Vec<LogicalPlan> = Vec::new();
        if lower == 0 {
            reached.push(frontier.clone());
        }
        let expansion = self.expand_ways(&ways)?;
        for depth in 1..=upper {
            if let Ok(expand_ways) = &expansion {
                let current = NodeColumns {
                    types: node_types.iter().cloned().collect(),
                    key: at.clone(),
                    label: at_label.clone(),
                    properties: None,
                };
                let far = self.fresh("far");
                let far_label = at_label.as_ref().map(|_| self.fresh("far_label"));
                let expanded = self.expansion(
                    frontier,
                    &current,
                    expand_ways.clone(),
                    (&far, far_label.as_deref()),
                    span,
                )?;
                let mut items = carried.clone();
                items.push(column(&far).alias(&at));
                if let (Some(at_label), Some(far_label)) = (&at_label, &far_label) {
                    items.push(column(far_label).alias(at_label));
                }
                let next = LogicalPlanBuilder::from(expanded)
                    .project(items)
                    .and_then(LogicalPlanBuilder::build);
                frontier = self.df(span, next)?;
                if depth >= lower {
                    reached.push(frontier.clone());
                }
                continue;
            }
            let (edges, ends, _) = self.edges(&ways, None, None, span)?;
            let current = NodeColumns {
                types: node_types.iter().cloned().collect(),
                key: at.clone(),
                label: at_label.clone(),
                properties: None,
            };
            let on = Self::meet(
                &current,
                &ends.from,
                ends.from_label.as_ref(),
                &ends.from_types,
            );
            let mut items = carried.clone();
            items.push(column(&ends.to).alias(&at));
            if let Some(at_label) = &at_label {
                items.push(match &ends.to_label {
                    Some(label) => column(label).alias(at_label),
                    None => {
                        lit(ends.to_types.iter().next().expect("a type").as_str()).alias(at_label)
                    }
                });
            }
            let next = LogicalPlanBuilder::from(frontier)
                .join_on(edges, JoinType::Inner, on)
                .and_then(|plan| plan.project(items))
                .and_then(LogicalPlanBuilder::build);
            frontier = self.df(span, next)?;
            if depth >= lower {
                reached.push(frontier.clone());
            }
        }
        let joins = match &expansion {
            Ok(expand_ways) => format!(
                "{upper} expansions through the adjacency artifacts ({})",
                describe(expand_ways)
            ),
            Err(why) => format!(
                "{upper} hash joins on the edge tables ({}): {why}",
                ways.iter()
                    .map(|w| w.def.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        self.hops.push(format!(
            "{left_name}-[*{lower}..{upper}]-{right_name}: a union of {} depths, {joins}",
            upper + 1 - lower,
        ));
        let Some(plan) = self.union_all(reached)? else {
            return Err(OmniError::internal(
                "a variable-length hop reaches no depth",
            ));
        };
        let mut rows = Rows {
            plan,
            env: rows.env,
            unit: false,
        };
        if let Some(variable) = &relationship.variable {
            rows.env.insert(variable.kind.text.clone(), Entity::Path);
        }
        self.right_end(
            right_name, right, right_span, at, at_label, node_types, rows,
        )
    }
}

/// The types `ways` start from and reach.
pub(crate) fn end_types(ways: &[Orientation<'_>]) -> (BTreeSet<String>, BTreeSet<String>) {
    (
        ways.iter().map(|way| way.from_type.clone()).collect(),
        ways.iter().map(|way| way.to_type.clone()).collect(),
    )
}

/// The artifacts of `ways`, for EXPLAIN.
pub(crate) fn describe(ways: &[ExpandWay]) -> String {
    ways.iter()
        .map(ExpandWay::describe)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether the path `factors` starts at a node not yet bound and ends at one that is.
fn walked_backward(factors: &[open_cypher::ast::PathFactor], env: &super::Env) -> bool {
    let bound = |factor: Option<&open_cypher::ast::PathFactor>| match factor.map(|f| &f.kind) {
        Some(PathFactorKind::Node(node)) => node
            .variable
            .as_ref()
            .is_some_and(|variable| env.contains_key(&variable.kind.text)),
        _ => false,
    };
    // A property map or inline WHERE may read a variable the path binds before it
    // (`(a)-->(b {age: a.age})`): walked backward, it would be read before it is bound.
    let reads_variables = |expression: Option<&CypherExpr>| {
        expression.is_some_and(|e| super::count::variables(e).is_none_or(|v| !v.is_empty()))
    };
    let self_contained = factors.iter().all(|factor| match &factor.kind {
        PathFactorKind::Node(node) => {
            !reads_variables(node.properties.as_deref())
                && !reads_variables(node.where_clause.as_deref())
        }
        PathFactorKind::Relationship(relationship) => {
            !reads_variables(relationship.properties.as_deref())
                && !reads_variables(relationship.where_clause.as_deref())
        }
        _ => false,
    });
    factors.len() > 1 && self_contained && !bound(factors.first()) && bound(factors.last())
}

/// The path `factors` written from its last node to its first: each relationship's
/// direction turned, the nodes and relationships themselves (spans included) kept.
fn backward(factors: &[open_cypher::ast::PathFactor]) -> Vec<open_cypher::ast::PathFactor> {
    factors
        .iter()
        .rev()
        .map(|factor| {
            let mut factor = factor.clone();
            if let PathFactorKind::Relationship(relationship) = &mut factor.kind {
                relationship.direction.kind = match relationship.direction.kind {
                    RelationshipDirection::Left => RelationshipDirection::Right,
                    RelationshipDirection::Right => RelationshipDirection::Left,
                    other => other,
                };
            }
            factor
        })
        .collect()
}

/// The variable of a node pattern, or a hidden one for an anonymous node.
pub(crate) fn node_name(node: &NodePattern, span: Span) -> String {
    match &node.variable {
        Some(variable) => variable.kind.text.clone(),
        None => format!("\u{0}node@{}", span.start),
    }
}

/// Whether the relationship after the node at `span` has a variable length (its left
/// node is then read: the expansion starts from its rows).
fn next_is_variable_length(factors: &[open_cypher::ast::PathFactor], span: Span) -> bool {
    let mut after = factors.iter().skip_while(|f| f.span != span).skip(1);
    matches!(after.next().map(|f| &f.kind), Some(PathFactorKind::Relationship(r)) if hops(r).is_some())
}

/// The names a label expression lists (`A`, `A|B`), as the checker accepted them.
pub(crate) fn label_names(labels: &LabelExpression) -> Vec<String> {
    match &labels.kind {
        LabelExpressionKind::Name(name) => vec![name.kind.text.clone()],
        LabelExpressionKind::Parenthesized(inner) => label_names(inner),
        LabelExpressionKind::Or(alternatives) => {
            alternatives.iter().flat_map(label_names).collect()
        }
        _ => Vec::new(),
    }
}

/// A relationship's hop bounds, or `None` for one hop (the checker bounded them).
pub(crate) fn hops(relationship: &RelationshipPattern) -> Option<(u64, u64)> {
    match crate::check::length(relationship) {
        crate::check::Length::Hops { lower, upper, .. } => Some((lower, upper)),
        _ => None,
    }
}

trait TextCast {
    fn cast_to_text(self) -> Expr;
}

impl TextCast for Expr {
    fn cast_to_text(self) -> Expr {
        Expr::Cast(datafusion::logical_expr::Cast::new(
            Box::new(self),
            DataType::Utf8,
        ))
    }
}
