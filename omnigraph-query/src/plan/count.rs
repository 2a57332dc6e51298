//! Counting paths without materialising them: `MATCH` of one chain of single hops,
//! `WHERE` a conjunction of conditions each on one node, `RETURN count(*)`. The count
//! is carried along the chain, one aggregate per hop:
//!
//! ```text
//! paths(v at node 0)  = 1 where v passes node 0's conditions
//! paths(v at node i)  = [v passes node i's conditions] * sum of paths(u at node i-1)
//!                       over the edges u -> v of hop i
//! count(*)            = sum of paths(v at the last node)
//! ```
//!
//! so a two-hop count over E edges is two aggregates over E rows, never the E * degree
//! rows of the paths. Any other shape takes the general plan.

use super::pattern::{hops, node_name};
use super::{Entity, Planner, Rows, column};
use crate::exec::expand::ExpandWay;
use datafusion::arrow::array::{Int64Builder, RecordBatch, UInt32Builder};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::JoinType;
use datafusion::common::{DataFusionError, TableReference};
use datafusion::datasource::{MemTable, provider_as_source};
use datafusion::functions_aggregate::expr_fn as agg;
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder, lit};
use omnigraph_core::Result;
use omnigraph_publish::adjacency::AdjacencyWay;
use open_cypher::Span;
use open_cypher::ast::{
    BinaryOperator, ClauseKind, Expr as CypherExpr, ExprKind, MatchClause, NodePattern,
    PathFactorKind, ProjectionItemKind, Query, QueryKind, RelationshipPattern,
};
use std::collections::BTreeSet;
use std::sync::Arc;

/// Which end of a way's edges a degree counts.
#[derive(Clone, Copy)]
enum End {
    /// The node the way leaves: its edges out along the way.
    Near,
    /// The node the way reaches: its edges in along the way.
    Far,
}

/// A chain the count plan can take: its nodes, hops and each node's conditions.
struct Chain<'q> {
    nodes: Vec<(String, &'q NodePattern, Span)>,
    hops: Vec<(&'q RelationshipPattern, Span)>,
    conditions: Vec<Vec<&'q CypherExpr>>,
    column: String,
}

impl<'a> Planner<'a> {
    /// The count plan for `query`, when it is a path count this module takes.
    pub(crate) fn count_paths(&mut self, query: &Query) -> Result<Option<LogicalPlan>> {
        let Some(chain) = self.chain(query) else {
            return Ok(None);
        };
        let span = chain.nodes[0].2;
        // The weighted frontier: a node's key and the number of paths reaching it
        // (`None`: one path for every node, nothing read yet).
        let mut frontier: Option<(LogicalPlan, String, String)> = None;
        let mut types = self.node_types(chain.nodes[0].1);
        if self.node_is_constrained(&chain, 0) {
            // The frontier is joined on keys alone: keys of two types may be equal.
            if types.len() > 1 {
                return Ok(None);
            }
            let (plan, key) = self.passing_nodes(&chain, 0, &types)?;
            let weight = self.fresh("paths");
            let plan = self.df(
                span,
                LogicalPlanBuilder::from(plan)
                    .project([column(&key), lit(1i64).alias(&weight)])
                    .and_then(LogicalPlanBuilder::build),
            )?;
            frontier = Some((plan, key, weight));
        }
        let last = chain.hops.len();
        // How each hop was counted, for EXPLAIN.
        let mut how: Vec<String> = Vec::with_capacity(last);
        for (index, (relationship, at)) in chain.hops.iter().enumerate() {
            let node = index + 1;
            let is_last = index + 1 == last;
            let constrained = self.node_is_constrained(&chain, node);
            let wanted = self.node_types(chain.nodes[node].1);
            let ways = self.orientations(relationship, Some(&types), Some(&wanted));
            if ways.is_empty() {
                return Ok(None);
            }
            let (from_types, to_types) = super::pattern::end_types(&ways);
            if from_types.len() > 1 || to_types.len() > 1 {
                // Keys are joined alone, and keys of two types may be equal.
                return Ok(None);
            }
            types = to_types.into_iter().collect();
            let artifacts = self.expand_ways(&ways)?;
            // One way over one artifact, loops kept: its degrees count its edges.
            let single = match &artifacts {
                Ok(found) => match found.as_slice() {
                    [way] if !way.skip_loops => Some(way.clone()),
                    _ => None,
                },
                Err(_) => None,
            };
            // The rows reaching node `node`: a plan, the node's key, and the number of
            // paths each row stands for.
            let (mut reached, to, paths) = match (frontier.take(), &artifacts, single) {
                (None, _, Some(way)) => {
                    how.push(format!("degrees of {}", way.describe()));
                    let (plan, key, degree) = self.degrees(&way, End::Far, *at)?;
                    (plan, key, agg::sum(column(&degree)))
                }
                (Some((plan, key, weight)), _, Some(way)) if is_last && !constrained => {
                    how.push(format!("degrees of {}", way.describe()));
                    let (degrees, near, degree) = self.degrees(&way, End::Near, *at)?;
                    let joined = LogicalPlanBuilder::from(plan)
                        .join_on(degrees, JoinType::Inner, [column(&key).eq(column(&near))])
                        .and_then(LogicalPlanBuilder::build);
                    let paths = agg::sum(column(&weight) * column(&degree));
                    (self.df(*at, joined)?, near, paths)
                }
                (Some((plan, key, weight)), Ok(found), _) => {
                    how.push(format!(
                        "expansion through {}",
                        super::pattern::describe(found)
                    ));
                    let far = self.fresh("at");
                    let near = super::NodeColumns {
                        types: Vec::new(),
                        key,
                        label: None,
                        properties: None,
                    };
                    let plan = self.expansion(plan, &near, found.clone(), (&far, None), *at)?;
                    (plan, far, agg::sum(column(&weight)))
                }
                (frontier, _, _) => {
                    let why = artifacts.as_ref().err().cloned().unwrap_or_else(|| {
                        "a count over several ways or with loops skipped reads every edge".into()
                    });
                    how.push(format!("a join with the edge table: {why}"));
                    let (edges, ends, _) = self.edges(&ways, None, None, *at)?;
                    match frontier {
                        None => (
                            edges,
                            ends.to,
                            datafusion::functions_aggregate::count::count_all(),
                        ),
                        Some((plan, key, weight)) => {
                            let joined = LogicalPlanBuilder::from(plan)
                                .join_on(
                                    edges,
                                    JoinType::Inner,
                                    [column(&key).eq(column(&ends.from))],
                                )
                                .and_then(LogicalPlanBuilder::build);
                            (self.df(*at, joined)?, ends.to, agg::sum(column(&weight)))
                        }
                    }
                }
            };
            if constrained {
                let (passing, key) = self.passing_nodes(&chain, node, &types)?;
                let joined = LogicalPlanBuilder::from(reached)
                    .join_on(passing, JoinType::Inner, [column(&to).eq(column(&key))])
                    .and_then(LogicalPlanBuilder::build);
                reached = self.df(*at, joined)?;
            }
            let total = self.fresh("paths");
            if is_last {
                let counted = LogicalPlanBuilder::from(reached)
                    .aggregate(Vec::<Expr>::new(), [paths.alias(&total)])
                    .and_then(|plan| {
                        plan.project([datafusion::functions::expr_fn::coalesce(vec![
                            Expr::Cast(datafusion::logical_expr::Cast::new(
                                Box::new(column(&total)),
                                datafusion::arrow::datatypes::DataType::Int64,
                            )),
                            lit(0i64),
                        ])
                        .alias(&chain.column)])
                    })
                    .and_then(LogicalPlanBuilder::build);
                self.hops.push(format!(
                    "{} hops: counted by node, one aggregate per hop; no path materialised ({})",
                    chain.hops.len(),
                    how.join("; ")
                ));
                return Ok(Some(self.df(*at, counted)?));
            }
            let key = self.fresh("at");
            let grouped = LogicalPlanBuilder::from(reached)
                .aggregate([column(&to).alias(&key)], [paths.alias(&total)])
                .and_then(LogicalPlanBuilder::build);
            frontier = Some((self.df(*at, grouped)?, key, total));
        }
        unreachable!("a chain has at least one hop")
    }

    /// Each node with edges along `way` at `end`, and how many (a node with none is
    /// left out), read from the artifact: the count of a hop's edges by node without
    /// reading the edge table. Returns the plan, the key column and the degree column.
    fn degrees(
        &mut self,
        way: &ExpandWay,
        end: End,
        span: Span,
    ) -> Result<(LogicalPlan, String, String)> {
        let direction = match (end, way.direction) {
            (End::Near, direction) => direction,
            (End::Far, AdjacencyWay::Out) => AdjacencyWay::In,
            (End::Far, AdjacencyWay::In) => AdjacencyWay::Out,
        };
        // The keys were parsed and checked when the hop was planned: take them by
        // position (an artifact lists its degrees in position order).
        let mut positions = UInt32Builder::new();
        let mut degrees = Int64Builder::new();
        for (position, (_, degree)) in way.adjacency.degrees(direction).enumerate() {
            if degree == 0 {
                continue;
            }
            positions.append_value(position as u32);
            degrees.append_value(i64::try_from(degree).unwrap_or(i64::MAX));
        }
        let keys = self.internal(
            take(way.resolved.keys().as_ref(), &positions.finish(), None)
                .map_err(DataFusionError::from),
        )?;
        let key = self.fresh("at");
        let degree = self.fresh("degree");
        let schema = Arc::new(Schema::new(vec![
            Field::new(&key, keys.data_type().clone(), false),
            Field::new(&degree, DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(schema.clone(), vec![keys, Arc::new(degrees.finish())]);
        let batch = self.internal(batch.map_err(DataFusionError::from))?;
        let table = self.internal(MemTable::try_new(schema, vec![vec![batch]]))?;
        let scan = LogicalPlanBuilder::scan(
            TableReference::bare(self.fresh("degrees")),
            provider_as_source(Arc::new(table)),
            None,
        )
        .and_then(LogicalPlanBuilder::build);
        Ok((self.df(span, scan)?, key, degree))
    }

    /// Whether node `index` of the chain has conditions of its own (a property map or
    /// a WHERE condition). Its label needs no scan: the hops' orientations keep only
    /// the edge types whose ends it may be, and every edge's ends exist.
    fn node_is_constrained(&self, chain: &Chain<'_>, index: usize) -> bool {
        chain.nodes[index].1.properties.is_some() || !chain.conditions[index].is_empty()
    }

    /// The nodes of `types` that pass node `index`'s conditions: a plan and the column
    /// of their key.
    fn passing_nodes(
        &mut self,
        chain: &Chain<'_>,
        index: usize,
        types: &[String],
    ) -> Result<(LogicalPlan, String)> {
        let (name, node, span) = &chain.nodes[index];
        let (scan, columns) = self.scan_nodes(types, name, *span)?;
        let key = columns.key.clone();
        let mut rows = Rows {
            plan: scan,
            env: [(name.clone(), Entity::Node(columns))]
                .into_iter()
                .collect(),
            unit: false,
        };
        rows = self.node_properties(name, node, rows)?;
        for condition in &chain.conditions[index] {
            rows = self.filter(condition, rows)?;
        }
        Ok((rows.plan, key))
    }

    /// `query` as a chain, when it has the shape this module takes.
    fn chain<'q>(&self, query: &'q Query) -> Option<Chain<'q>> {
        let QueryKind::Regular(regular) = &query.kind else {
            return None;
        };
        if !regular.unions.is_empty() {
            return None;
        }
        let [first, second] = regular.head.kind.clauses.as_slice() else {
            return None;
        };
        let (ClauseKind::Match(matching), ClauseKind::Return(ret)) = (&first.kind, &second.kind)
        else {
            return None;
        };
        let projection = &ret.projection;
        if projection.quantifier.is_some()
            || projection.order_by.is_some()
            || projection.skip.is_some()
            || projection.offset.is_some()
            || projection.limit.is_some()
        {
            return None;
        }
        let [item] = projection.items.as_slice() else {
            return None;
        };
        let ProjectionItemKind::Expression { expression, alias } = &item.kind else {
            return None;
        };
        let ExprKind::Function(call) = &expression.kind else {
            return None;
        };
        let star = matches!(call.arguments.as_slice(), [a] if a.kind == ExprKind::Wildcard);
        if super::expr::function_name(call) != "count" || !star || call.quantifier.is_some() {
            return None;
        }
        let column = match alias {
            Some(alias) => alias.kind.text.clone(),
            None => self
                .text
                .get(expression.span.start..expression.span.end)?
                .to_string(),
        };
        let chain = self.chain_of(matching)?;
        Some(Chain { column, ..chain })
    }

    fn chain_of<'q>(&self, matching: &'q MatchClause) -> Option<Chain<'q>> {
        if matching.optional || matching.mode.is_some() || !matching.hints.is_empty() {
            return None;
        }
        let [part] = matching.pattern.parts.as_slice() else {
            return None;
        };
        if part.kind.binding.is_some() || part.kind.selector.is_some() {
            return None;
        }
        let mut nodes = Vec::new();
        let mut relationships = Vec::new();
        for factor in &part.kind.path.kind.factors {
            match &factor.kind {
                PathFactorKind::Node(node) if nodes.len() == relationships.len() => {
                    nodes.push((node_name(node, factor.span), node, factor.span));
                }
                PathFactorKind::Relationship(relationship)
                    if nodes.len() == relationships.len() + 1 =>
                {
                    let read = relationship
                        .variable
                        .as_ref()
                        .is_some_and(|v| self.is_read(&v.kind.text));
                    if hops(relationship).is_some()
                        || read
                        || relationship.properties.is_some()
                        || relationship.where_clause.is_some()
                    {
                        return None;
                    }
                    relationships.push((relationship, factor.span));
                }
                _ => return None,
            }
        }
        if relationships.is_empty() || nodes.len() != relationships.len() + 1 {
            return None;
        }
        // A property map that reads another variable (`{age: a.age}`) is a condition on
        // two nodes.
        for (_, node, _) in &nodes {
            if let Some(map) = &node.properties
                && !variables(map)?.is_empty()
            {
                return None;
            }
        }
        let names: BTreeSet<&String> = nodes.iter().map(|(name, _, _)| name).collect();
        if names.len() != nodes.len() || nodes.iter().any(|(_, n, _)| n.where_clause.is_some()) {
            return None;
        }
        let mut conditions: Vec<Vec<&CypherExpr>> = vec![Vec::new(); nodes.len()];
        if let Some(predicate) = &matching.where_clause {
            for conjunct in conjuncts(predicate) {
                let variables = variables(conjunct)?;
                let [variable] = variables.as_slice() else {
                    return None;
                };
                let index = nodes.iter().position(|(name, _, _)| name == variable)?;
                conditions[index].push(conjunct);
            }
        }
        Some(Chain {
            nodes,
            hops: relationships,
            conditions,
            column: String::new(),
        })
    }
}

/// The conditions `predicate` joins with AND.
fn conjuncts(predicate: &CypherExpr) -> Vec<&CypherExpr> {
    let mut out = Vec::new();
    let mut pending = vec![predicate];
    while let Some(next) = pending.pop() {
        match &next.kind {
            ExprKind::Binary {
                left,
                operator,
                right,
            } if operator.kind == BinaryOperator::And => {
                pending.push(right);
                pending.push(left);
            }
            ExprKind::Parenthesized(inner) => pending.push(inner),
            _ => out.push(next),
        }
    }
    out
}

/// The variables `expression` reads, or `None` when it holds a subquery or pattern
/// (whose variables are not only its own).
pub(super) fn variables(expression: &CypherExpr) -> Option<Vec<String>> {
    let mut found = BTreeSet::new();
    let mut pending = vec![expression];
    while let Some(next) = pending.pop() {
        if let ExprKind::Variable(name) = &next.kind {
            found.insert(name.kind.text.clone());
        }
        if !super::expr::children(next, &mut pending) {
            return None;
        }
    }
    Some(found.into_iter().collect())
}
