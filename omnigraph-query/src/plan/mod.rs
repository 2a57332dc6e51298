//! A checked query compiled to one DataFusion logical plan over the tables a commit
//! pins. Rows flow through the clauses as a plan whose columns hold what the query's
//! variables stand for ([`Entity`]); each clause wraps the plan of the one before.
//!
//! - `pattern`: `MATCH` and `OPTIONAL MATCH`: scans, one join per hop, variable length
//!   as a union of hop counts.
//! - `count`: `RETURN count(*)` of a chain of hops, counted node by node without
//!   materialising the paths.
//! - `expr`: Cypher expressions to DataFusion expressions, subqueries (`EXISTS { }`,
//!   `COUNT { }`, pattern predicates) run on the distinct outer rows and joined back on
//!   what identifies them.
//! - this file: the planner's state, `WITH`, `UNWIND` and `RETURN`.

mod count;
mod expr;
mod mentions;
mod pattern;
mod retrieval;
pub(crate) use expr::placeholder_type;
pub(crate) use pattern::describe;

use crate::check::CheckedQuery;
use crate::limits::QUERY_COLUMNS_MAX;
use crate::position::line_and_column;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Column, ScalarValue};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder, SortExpr};
use omnigraph_core::lance::Dataset;
use omnigraph_core::schema::{Catalog, DeclKind};
use omnigraph_core::{OmniError, QueryRefusal, Result};
use open_cypher::Span;
use open_cypher::ast::{
    ClauseKind, Expr as CypherExpr, ExprKind, LiteralKind, ProjectionClause, ProjectionItemKind,
    Query, QueryKind, SortDirection,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// What a variable of the query stands for, as columns of the plan.
#[derive(Clone, Debug)]
pub(crate) enum Entity {
    /// A node: its key, its label when it may be of several types, its properties when
    /// they were read (a node nothing reads is known by its key alone).
    Node(NodeColumns),
    /// A relationship of one hop: its columns by property name (`id`, `src`, `dst` and
    /// the declared ones), and its type when it may be of several.
    Relationship(RelationshipColumns),
    /// A variable-length pattern's relationships: bound, but not a value the engine
    /// returns yet.
    Path,
    /// Any other value, in one column.
    Value(String),
}

#[derive(Clone, Debug)]
pub(crate) struct NodeColumns {
    /// The node types it may be, sorted.
    pub(crate) types: Vec<String>,
    /// The column holding its key (as text when the graph's key types differ).
    pub(crate) key: String,
    /// The column holding its type, when it may be of more than one.
    pub(crate) label: Option<String>,
    /// Its properties' columns, when they were read.
    pub(crate) properties: Option<BTreeMap<String, String>>,
}

#[derive(Clone, Debug)]
pub(crate) struct RelationshipColumns {
    /// The edge types it may be, sorted.
    pub(crate) types: Vec<String>,
    pub(crate) label: Option<String>,
    pub(crate) properties: BTreeMap<String, String>,
}

impl Entity {
    fn columns(&self) -> Vec<String> {
        match self {
            Entity::Node(node) => {
                let mut columns = vec![node.key.clone()];
                columns.extend(node.label.clone());
                for column in node.properties.iter().flat_map(|map| map.values()) {
                    if !columns.contains(column) {
                        columns.push(column.clone());
                    }
                }
                columns
            }
            Entity::Relationship(relationship) => {
                let mut columns: Vec<String> = relationship.label.iter().cloned().collect();
                columns.extend(relationship.properties.values().cloned());
                columns
            }
            Entity::Path => Vec::new(),
            Entity::Value(column) => vec![column.clone()],
        }
    }
}

/// The variables in scope, by name.
pub(crate) type Env = BTreeMap<String, Entity>;

/// Rows between two clauses: a plan and what its columns stand for.
#[derive(Clone)]
pub(crate) struct Rows {
    pub(crate) plan: LogicalPlan,
    pub(crate) env: Env,
    /// Whether the plan is the single empty row a query starts from.
    pub(crate) unit: bool,
}

/// What a compiled query hands the runner.
pub(crate) struct Compiled {
    pub(crate) plan: LogicalPlan,
    /// How each hop is expanded, for `EXPLAIN`.
    pub(crate) hops: Vec<String>,
    /// Whether the plan was shaped by some parameter's value (so it serves that value
    /// only, whatever its [`Binding`]).
    pub(crate) value_bound: bool,
}

/// How a compiled plan holds the query's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Binding {
    /// As literals: the plan serves these values only.
    Literals,
    /// A parameter compared or returned as a value is a typed placeholder, bound when
    /// the plan runs (`LogicalPlan::with_param_values`), so one plan serves every value
    /// of the same types. A parameter that shapes the plan (`IN $list`, `[$i]`,
    /// `SKIP`/`LIMIT $n`) is still read as its value, and marks the plan
    /// [`Compiled::value_bound`].
    Placeholders,
}

/// The tables of a commit by type name, opened at the versions it pins.
pub(crate) type Tables = HashMap<String, Arc<Dataset>>;

/// The adjacency artifact of each edge type at the commit, or why a hop over it reads
/// the edge table instead (said in `EXPLAIN`).
pub(crate) type Adjacencies =
    HashMap<String, std::result::Result<Arc<omnigraph_publish::adjacency::Adjacency>, String>>;

pub(crate) struct Planner<'a> {
    pub(crate) catalog: &'a Catalog,
    pub(crate) tables: &'a Tables,
    pub(crate) adjacency: &'a Adjacencies,
    pub(crate) parameters: &'a BTreeMap<String, ScalarValue>,
    pub(crate) binding: Binding,
    /// Set when a parameter's value shaped the plan ([`Binding::Placeholders`]).
    pub(crate) value_bound: std::cell::Cell<bool>,
    text: &'a str,
    /// How often each variable is named (`mentions.rs`): a node variable named once is
    /// read by nothing, so its table need not be joined.
    mentions: HashMap<String, usize>,
    /// How each variable is named besides (`mentions.rs`): the properties read of it.
    uses: HashMap<String, mentions::Uses>,
    /// Whether some projection is `*` (it returns every variable).
    wildcard: bool,
    /// Whether node keys are compared as text (the key types of the nodes the query
    /// may bind differ).
    pub(crate) text_keys: bool,
    /// The one key type of the nodes the query may bind, when keys keep their types.
    pub(crate) key_type: Option<DataType>,
    fresh: usize,
    pub(crate) hops: Vec<String>,
    /// Node key columns whose value a pattern fixed to a constant (`{id: 12345}`), by
    /// column: a hop from such a node reads only its edges, through the edge table's
    /// `src`/`dst` index.
    pub(crate) fixed_keys: HashMap<String, Expr>,
}

/// The edge types `checked` may walk, or `None` for any (a relationship that names
/// none): the only ones whose artifacts it needs.
pub(crate) fn walked_edge_types(
    checked: &CheckedQuery,
) -> Option<std::collections::BTreeSet<String>> {
    mentions::Mentions::of(&checked.query).edge_types
}

/// Compiles `checked` (checked against `catalog`) over `tables`.
pub(crate) fn compile(
    checked: &CheckedQuery,
    catalog: &Catalog,
    tables: &Tables,
    adjacency: &Adjacencies,
    parameters: &BTreeMap<String, ScalarValue>,
    binding: Binding,
) -> Result<Compiled> {
    let mentions::Mentions {
        counts: mentions,
        uses,
        wildcard,
        node_labels,
        named_edges,
        any_node,
        ..
    } = mentions::Mentions::of(&checked.query);
    // Keys are compared as text only when the query may bind nodes whose key types
    // differ: the types its node patterns name and the ends of the edge types its
    // relationships name, or every node type when a node may be of any.
    let mut bindable = node_labels;
    for def in catalog.types() {
        if let DeclKind::Edge { from, to } = def.kind()
            && named_edges.contains(def.name())
        {
            bindable.extend([from.clone(), to.clone()]);
        }
    }
    let key_types: std::collections::HashSet<_> = catalog
        .types()
        .iter()
        .filter(|def| def.is_node() && (any_node || bindable.contains(def.name())))
        .map(|def| def.key_type())
        .collect();
    let mut planner = Planner {
        catalog,
        tables,
        adjacency,
        parameters,
        binding,
        value_bound: std::cell::Cell::new(false),
        text: &checked.text,
        mentions,
        uses,
        wildcard,
        text_keys: key_types.len() > 1,
        key_type: match key_types.iter().collect::<Vec<_>>().as_slice() {
            [only] => Some(only.arrow_type()),
            _ => None,
        },
        fresh: 0,
        hops: Vec::new(),
        fixed_keys: HashMap::new(),
    };
    if let Some(plan) = planner.count_paths(&checked.query)? {
        return Ok(Compiled {
            plan,
            value_bound: planner.value_bound.get(),
            hops: planner.hops,
        });
    }
    let start = Rows {
        plan: planner.df(Span::new(0, 0), LogicalPlanBuilder::empty(true).build())?,
        env: Env::new(),
        unit: true,
    };
    let (rows, columns) = planner.query(&checked.query, start)?;
    let columns = columns.ok_or_else(|| {
        planner.refuse(
            QueryRefusal::Syntax,
            checked.query.span,
            "a query ends with RETURN",
        )
    })?;
    debug_assert_eq!(
        columns, checked.columns,
        "the checker and the planner name columns alike"
    );
    Ok(Compiled {
        plan: rows.plan,
        value_bound: planner.value_bound.get(),
        hops: planner.hops,
    })
}

/// The columns that tell one row's variables from another's: a node's key and label, a
/// relationship's id and type, a value itself.
pub(crate) fn identity_columns(env: &Env) -> Vec<String> {
    let mut identity: Vec<String> = Vec::new();
    for entity in env.values() {
        let columns: Vec<String> = match entity {
            Entity::Node(node) => std::iter::once(node.key.clone())
                .chain(node.label.clone())
                .collect(),
            Entity::Relationship(relationship) => relationship
                .properties
                .get("id")
                .cloned()
                .into_iter()
                .chain(relationship.label.clone())
                .collect(),
            Entity::Value(value) => vec![value.clone()],
            Entity::Path => Vec::new(),
        };
        for column in columns {
            if !identity.contains(&column) {
                identity.push(column);
            }
        }
    }
    identity
}

/// A column of the plan by its exact name (never parsed as `table.column`).
pub(crate) fn column(name: &str) -> Expr {
    Expr::Column(Column::from_name(name))
}

impl<'a> Planner<'a> {
    pub(crate) fn refuse(
        &self,
        refusal: QueryRefusal,
        span: Span,
        message: impl Into<String>,
    ) -> OmniError {
        let (line, column) = line_and_column(self.text, span.start);
        OmniError::bad_query(refusal, line, column, message)
    }

    pub(crate) fn unsupported(&self, span: Span, what: &str) -> OmniError {
        self.refuse(
            QueryRefusal::Unsupported,
            span,
            format!("{what} is not supported (docs/query.md lists what is)"),
        )
    }

    /// A DataFusion refusal while building the plan: the expression at `span` does not
    /// fit the types it meets.
    pub(crate) fn df<T>(
        &self,
        span: Span,
        result: std::result::Result<T, DataFusionError>,
    ) -> Result<T> {
        result.map_err(|error| self.bad_types(span, &error))
    }

    /// The refusal [`Planner::df`] makes of `error`.
    pub(crate) fn bad_types(&self, span: Span, error: &DataFusionError) -> OmniError {
        self.refuse(
            QueryRefusal::WrongType,
            span,
            format!("the types here do not fit: {}", error.find_root()),
        )
    }

    /// A DataFusion refusal while building the plan's structure (scans, joins, unions):
    /// the planner's defect, never the query's.
    pub(crate) fn internal<T>(&self, result: std::result::Result<T, DataFusionError>) -> Result<T> {
        result.map_err(|error| OmniError::internal(format!("query plan: {}", error.find_root())))
    }

    /// A column name no other column of the query has.
    pub(crate) fn fresh(&mut self, hint: &str) -> String {
        self.fresh += 1;
        let hint: String = hint
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            .take(24)
            .collect();
        format!("{hint}#{}", self.fresh)
    }

    /// Whether `name` is read anywhere but where it is bound.
    pub(crate) fn is_read(&self, name: &str) -> bool {
        self.wildcard || self.mentions.get(name).copied().unwrap_or(0) > 1
    }

    /// Whether `name` is read, besides where it is bound once, only as
    /// `name.{key}`: the query reads nothing of it that its key does not give.
    pub(crate) fn is_read_for_key_only(&self, name: &str, key: &str) -> bool {
        if self.wildcard {
            return false;
        }
        self.uses
            .get(name)
            .is_some_and(|uses| uses.whole == 1 && uses.properties.iter().all(|p| p == key))
    }

    /// Runs the clauses of `query` on `rows`; returns the rows after them and, when the
    /// query ends with `RETURN`, its columns.
    pub(crate) fn query(
        &mut self,
        query: &Query,
        mut rows: Rows,
    ) -> Result<(Rows, Option<Vec<String>>)> {
        let QueryKind::Regular(regular) = &query.kind else {
            return Err(self.refuse(QueryRefusal::Syntax, query.span, "not a query"));
        };
        for clause in &regular.head.kind.clauses {
            match &clause.kind {
                ClauseKind::Match(matching) => rows = self.match_clause(matching, rows)?,
                ClauseKind::Call(call) => rows = self.call(call, clause.span, rows)?,
                ClauseKind::Unwind(unwind) => {
                    let name = unwind.variable.kind.text.clone();
                    rows = self.unwind(&unwind.expression, &name, rows)?;
                }
                ClauseKind::With(with) => {
                    let (projected, _) =
                        self.projection(&with.projection, rows, Projecting::With)?;
                    rows = projected;
                    if let Some(predicate) = &with.where_clause {
                        rows = self.filter(predicate, rows)?;
                    }
                }
                ClauseKind::Return(ret) => {
                    let (projected, columns) =
                        self.projection(&ret.projection, rows, Projecting::Return)?;
                    return Ok((projected, Some(columns)));
                }
                _ => return Err(self.unsupported(clause.span, "this clause")),
            }
        }
        Ok((rows, None))
    }

    /// Keeps the rows `predicate` holds for.
    pub(crate) fn filter(&mut self, predicate: &CypherExpr, mut rows: Rows) -> Result<Rows> {
        let condition = self.expression(predicate, &mut rows, Context::Row)?;
        let width = rows.plan.schema().fields().len();
        let plan = LogicalPlanBuilder::from(rows.plan).filter(condition);
        let plan = self.df(predicate.span, plan.and_then(LogicalPlanBuilder::build))?;
        debug_assert_eq!(plan.schema().fields().len(), width);
        rows.plan = plan;
        Ok(rows)
    }

    fn unwind(&mut self, list: &CypherExpr, name: &str, mut rows: Rows) -> Result<Rows> {
        let value = self.expression(list, &mut rows, Context::Row)?;
        let target = self.fresh(name);
        let mut items: Vec<Expr> = self.passthrough(&rows);
        items.push(value.alias(&target));
        let plan = LogicalPlanBuilder::from(rows.plan)
            .project(items)
            .and_then(|plan| {
                plan.unnest_column_with_options(
                    Column::from_name(&target),
                    datafusion::common::UnnestOptions::new().with_preserve_nulls(false),
                )
            })
            .and_then(LogicalPlanBuilder::build);
        rows.plan = self.df(list.span, plan)?;
        rows.env.insert(name.to_string(), Entity::Value(target));
        rows.unit = false;
        Ok(rows)
    }

    /// Every column the variables in scope hold, to carry through a projection.
    pub(crate) fn passthrough(&self, rows: &Rows) -> Vec<Expr> {
        let mut names: Vec<String> = Vec::new();
        for entity in rows.env.values() {
            for name in entity.columns() {
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
        names.iter().map(|name| column(name)).collect()
    }

    /// `WITH` or `RETURN`: the rows after it and its column names.
    fn projection(
        &mut self,
        projection: &ProjectionClause,
        mut rows: Rows,
        projecting: Projecting,
    ) -> Result<(Rows, Vec<String>)> {
        let span = projection.span;
        // Each item: its output name and what it holds.
        let mut items: Vec<(String, Item)> = Vec::new();
        for item in &projection.items {
            match &item.kind {
                ProjectionItemKind::Wildcard => {
                    for (name, entity) in &rows.env {
                        if name.starts_with('\u{0}') {
                            continue;
                        }
                        items.push((name.clone(), Item::Entity(entity.clone())));
                    }
                }
                ProjectionItemKind::Expression { expression, alias } => {
                    let name = self.item_name(expression, alias.as_ref());
                    let holds = match &expression.kind {
                        ExprKind::Variable(variable)
                            if projecting == Projecting::With
                                && matches!(
                                    rows.env.get(&variable.kind.text),
                                    Some(Entity::Node(_) | Entity::Relationship(_) | Entity::Path)
                                ) =>
                        {
                            Item::Entity(rows.env[&variable.kind.text].clone())
                        }
                        _ => Item::Expression(expression),
                    };
                    items.push((name, holds));
                }
                _ => return Err(self.unsupported(item.span, "this projection")),
            }
        }
        if items.len() > QUERY_COLUMNS_MAX {
            return Err(self.refuse(
                QueryRefusal::Unsupported,
                span,
                format!("more than {QUERY_COLUMNS_MAX} columns"),
            ));
        }
        let distinct = matches!(
            projection.quantifier.as_ref().map(|q| q.kind),
            Some(open_cypher::ast::SetQuantifier::Distinct)
        );
        let aggregates = items.iter().any(|(_, item)| match item {
            Item::Expression(expression) => expr::aggregates(expression),
            Item::Entity(_) => false,
        });

        // The expressions of the items, over the rows before the projection; an
        // aggregate's arguments are collected apart.
        let mut collected = expr::Aggregates::default();
        let mut exprs: Vec<(String, Expr)> = Vec::new();
        let mut env_after = Env::new();
        let mut entity_columns: Vec<String> = Vec::new();
        for (name, item) in &items {
            match item {
                Item::Entity(entity) => {
                    env_after.insert(name.clone(), entity.clone());
                    for column in entity.columns() {
                        if !entity_columns.contains(&column) {
                            entity_columns.push(column);
                        }
                    }
                }
                Item::Expression(expression) => {
                    let context = if aggregates {
                        Context::Projection(&mut collected)
                    } else {
                        Context::Row
                    };
                    let value = self.expression(expression, &mut rows, context)?;
                    let target = self.fresh(name);
                    env_after.insert(name.clone(), Entity::Value(target.clone()));
                    exprs.push((target, value));
                }
            }
        }

        let mut plan = LogicalPlanBuilder::from(rows.plan.clone());
        let collapses = aggregates || distinct;
        if aggregates {
            // Group by the items that do not aggregate (entities by all their columns),
            // then compute the items over the groups.
            let mut groups: Vec<Expr> = entity_columns.iter().map(|c| column(c)).collect();
            let mut finals: Vec<Expr> = entity_columns.iter().map(|c| column(c)).collect();
            for (target, value) in &exprs {
                if expr::holds_aggregate(value, &collected) {
                    finals.push(value.clone().alias(target));
                } else {
                    groups.push(value.clone().alias(target));
                    finals.push(column(target));
                }
            }
            plan = self.df(span, plan.aggregate(groups, collected.exprs.clone()))?;
            plan = self.df(span, plan.project(finals))?;
        } else {
            let mut projected: Vec<Expr> = if collapses {
                entity_columns.iter().map(|c| column(c)).collect()
            } else {
                // ORDER BY may still read what was in scope before.
                self.passthrough(&rows)
            };
            for (target, value) in &exprs {
                projected.push(value.clone().alias(target));
            }
            plan = self.df(span, plan.project(projected))?;
            if distinct {
                plan = self.df(span, plan.distinct())?;
            }
        }

        // ORDER BY over the projected names (and, without collapse, the earlier ones).
        let mut ordered = Rows {
            plan: self.df(span, plan.build())?,
            env: if collapses {
                env_after.clone()
            } else {
                let mut both = rows.env.clone();
                both.extend(env_after.clone());
                both
            },
            unit: false,
        };
        let skip = match projection.skip.as_ref().or(projection.offset.as_ref()) {
            Some(skip) => self.count(skip)?,
            None => 0,
        };
        let limit = match &projection.limit {
            Some(limit) => Some(self.count(limit)?),
            None => None,
        };
        let mut sorts: Vec<SortExpr> = Vec::new();
        if let Some(order) = &projection.order_by {
            for item in &order.items {
                // An expression the collapsed projection computed is read from its
                // column (the checker allowed only those there).
                let computed = collapses
                    .then(|| {
                        crate::check::projected_expression(
                            self.text,
                            &projection.items,
                            item.expression.span,
                        )
                    })
                    .flatten()
                    .and_then(|index| match &projection.items[index].kind {
                        ProjectionItemKind::Expression { expression, alias } => {
                            let name = self.item_name(expression, alias.as_ref());
                            match env_after.get(&name) {
                                Some(Entity::Value(target)) => Some(column(target)),
                                _ => None,
                            }
                        }
                        _ => None,
                    });
                let value = match computed {
                    Some(value) => value,
                    None => self.expression(&item.expression, &mut ordered, Context::Row)?,
                };
                let ascending = !matches!(
                    item.direction.as_ref().map(|d| d.kind),
                    Some(SortDirection::Descending)
                );
                // Cypher orders null after every value: last ascending, first descending.
                sorts.push(value.sort(ascending, !ascending));
            }
        }
        if projecting == Projecting::With && (skip > 0 || limit.is_some()) {
            // The rows a WITH keeps are the same on every evaluation of its plan (an
            // optional match or subquery after it reads the plan twice): ties in its
            // order are broken by what identifies each row.
            for name in identity_columns(&env_after) {
                sorts.push(column(&name).sort(true, false));
            }
        }
        if !sorts.is_empty() {
            let sorted = LogicalPlanBuilder::from(ordered.plan).sort(sorts);
            ordered.plan = self.df(span, sorted.and_then(LogicalPlanBuilder::build))?;
        }
        if skip > 0 || limit.is_some() {
            let limited = LogicalPlanBuilder::from(ordered.plan).limit(skip, limit);
            ordered.plan = self.df(span, limited.and_then(LogicalPlanBuilder::build))?;
        }

        // The projection proper: only what it names.
        let names: Vec<String> = items.iter().map(|(name, _)| name.clone()).collect();
        let finals: Vec<Expr> = match projecting {
            Projecting::With => {
                let mut keep: Vec<String> = Vec::new();
                for entity in env_after.values() {
                    for name in entity.columns() {
                        if !keep.contains(&name) {
                            keep.push(name);
                        }
                    }
                }
                keep.iter().map(|name| column(name)).collect()
            }
            Projecting::Return => {
                let mut finals = Vec::new();
                for name in &names {
                    let value = match &env_after[name] {
                        Entity::Value(target) => column(target),
                        entity => expr::entity_value(self, entity, span)?,
                    };
                    finals.push(value.alias(name));
                }
                finals
            }
        };
        let plan = LogicalPlanBuilder::from(ordered.plan)
            .project(finals)
            .and_then(LogicalPlanBuilder::build);
        let plan = self.df(span, plan)?;
        if projecting == Projecting::Return && plan.schema().fields().len() != names.len() {
            return Err(OmniError::internal(format!(
                "RETURN of {} items yields {} columns",
                names.len(),
                plan.schema().fields().len()
            )));
        }
        Ok((
            Rows {
                plan,
                env: env_after,
                unit: false,
            },
            names,
        ))
    }

    /// The column a projection item names: its alias, its variable, or its text.
    fn item_name(&self, expression: &CypherExpr, alias: Option<&open_cypher::ast::Name>) -> String {
        match (alias, &expression.kind) {
            (Some(alias), _) => alias.kind.text.clone(),
            (None, ExprKind::Variable(variable)) => variable.kind.text.clone(),
            (None, _) => self
                .text
                .get(expression.span.start..expression.span.end)
                .unwrap_or_default()
                .to_string(),
        }
    }

    /// `SKIP` or `LIMIT`: a non-negative integer literal or parameter.
    fn count(&self, expression: &CypherExpr) -> Result<usize> {
        let refuse = |what: String| self.refuse(QueryRefusal::WrongType, expression.span, what);
        let value: i128 = match &expression.kind {
            ExprKind::Literal(literal) => match &literal.kind {
                LiteralKind::Integer(integer) => expr::integer(integer)
                    .map(i128::from)
                    .ok_or_else(|| refuse(format!("{} is not a 64-bit integer", integer.text)))?,
                _ => return Err(refuse("SKIP and LIMIT take an integer".into())),
            },
            ExprKind::Parameter(parameter) => {
                let name = expr::parameter_name(self, parameter, expression.span)?;
                self.value_bound.set(true);
                match self.parameters.get(&name) {
                    Some(ScalarValue::Int64(Some(value))) => i128::from(*value),
                    Some(other) => {
                        return Err(refuse(format!(
                            "${name} is {}, and SKIP and LIMIT take an integer",
                            other.data_type()
                        )));
                    }
                    None => return Err(self.missing_parameter(&name, expression.span)),
                }
            }
            _ => {
                return Err(refuse(
                    "SKIP and LIMIT take an integer or a parameter".into(),
                ));
            }
        };
        usize::try_from(value).map_err(|_| refuse(format!("{value} is negative or too large")))
    }

    pub(crate) fn missing_parameter(&self, name: &str, span: Span) -> OmniError {
        self.refuse(
            QueryRefusal::UnknownVariable,
            span,
            format!("the query reads ${name}, and no value was given for it"),
        )
    }

    /// The arrow type of `value` over `rows`, and over the aggregates a projection
    /// collected so far (`size(collect(x))` reads one before it is computed).
    pub(crate) fn type_of(
        &self,
        value: &Expr,
        rows: &Rows,
        context: &Context<'_>,
        span: Span,
    ) -> Result<DataType> {
        use datafusion::logical_expr::ExprSchemable;
        let Context::Projection(collected) = context else {
            return self.df(span, value.get_type(rows.plan.schema()));
        };
        let mut fields: Vec<datafusion::arrow::datatypes::FieldRef> =
            rows.plan.schema().fields().iter().cloned().collect();
        for (name, data_type) in collected.names.iter().zip(&collected.types) {
            fields.push(std::sync::Arc::new(
                datafusion::arrow::datatypes::Field::new(name, data_type.clone(), true),
            ));
        }
        let schema = datafusion::common::DFSchema::try_from(
            datafusion::arrow::datatypes::Schema::new(fields),
        );
        let schema = self.df(span, schema)?;
        self.df(span, value.get_type(&schema))
    }
}

/// What a projection item holds.
enum Item<'q> {
    /// A node or relationship passed on whole by `WITH`.
    Entity(Entity),
    Expression(&'q CypherExpr),
}

/// Which clause projects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Projecting {
    With,
    Return,
}

/// Where an expression is: aggregates are collected only in a projection.
pub(crate) enum Context<'c> {
    Row,
    Projection(&'c mut expr::Aggregates),
}
