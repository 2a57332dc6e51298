//! `CALL omni.vector`, `omni.text` and `omni.fuse` (`procedures.rs`): a call's legs one
//! [`Leg`] node (`exec/leg.rs`, which reads the candidates once and runs the legs at
//! once), a fusion their rows summed by node, and the hits joined to the rows so far.
//!
//! - A call on a type's name searches the whole type: its hits are crossed with the
//!   rows so far (the one empty row when the call comes first).
//! - A call on a node variable ranks the distinct nodes that variable holds, and keeps
//!   the rows whose node is among the hits (an inner join on its key): the pattern and
//!   `WHERE` before the call restrict the candidates before top-k.
//!
//! Reciprocal rank fusion (`method: 'rrf'`, the default): a node's fused score is
//! `Σ weight / (rrf_k + rank)` over the legs that found it. Fusion by score
//! (`method: 'score'`): `Σ weight × s`, where `s` is the node's score in a leg scaled
//! over that leg's hits from 0 (its worst) to 1 (its best). Either keeps the `k` best,
//! ties by key.

use super::{Entity, NodeColumns, Planner, Rows, column};
use crate::exec::leg::{Leg, LegColumns, LegSpec, Search, TextMatch};
use crate::limits::{FUZZINESS_MAX, LEG_K_MAX, PHRASE_SLOP_MAX, PREFIX_CHARS_MIN};
use crate::procedures::{self, Call, LegCall, LegKind, LegOption, Output, RRF_K_DEFAULT, Target};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::functions_aggregate::expr_fn::{max, sum};
use datafusion::functions_nested::expr_fn::make_array;
use datafusion::logical_expr::{
    Expr, Extension, JoinType, LogicalPlan, LogicalPlanBuilder, cast, lit,
};
use omnigraph_core::lance_linalg::distance::DistanceType;
use omnigraph_core::schema::{IndexKind, PropertyType, TypeDef};
use omnigraph_core::{QueryRefusal, Result};
use open_cypher::Span;
use open_cypher::ast::{CallClause, Expr as CypherExpr, ExprKind, LiteralKind, UnaryOperator};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A call's hits: a plan and the names of its columns.
struct Hits {
    plan: LogicalPlan,
    /// The node's key.
    key: String,
    /// A leg's distance or score; a fusion's fused score.
    score: String,
    /// A leg's rank; a fusion's list of the legs' ranks.
    rank: String,
}

impl Planner<'_> {
    /// A procedure call on `rows`.
    pub(crate) fn call(&mut self, call: &CallClause, span: Span, rows: Rows) -> Result<Rows> {
        let env = rows.env.clone();
        let variable_types = |name: &str| match env.get(name) {
            Some(Entity::Node(node)) => Some(node.types.clone()),
            _ => None,
        };
        let refuse = |refusal, span, message: String| self.refuse(refusal, span, message);
        let read = procedures::read(call, span, self.catalog, &variable_types, &refuse)?;
        // The plan holds the call's values (a query vector, k): it serves them only.
        self.value_bound.set(true);
        let def = self
            .catalog
            .get(&read.type_name)
            .expect("the call's type was checked");
        let key_type = def.key_type().arrow_type();
        let candidates = match &read.target {
            Target::Type => None,
            Target::Variable(name) => {
                let Some(Entity::Node(node)) = rows.env.get(name) else {
                    unreachable!("the call's variable was checked to be a node");
                };
                let key = self.fresh("candidate");
                let plan = LogicalPlanBuilder::from(rows.plan.clone())
                    .project(vec![cast(column(&node.key), key_type.clone()).alias(&key)])
                    .and_then(LogicalPlanBuilder::distinct)
                    .and_then(LogicalPlanBuilder::build);
                Some(self.internal(plan)?)
            }
        };
        let hits = match read.procedure {
            procedures::Procedure::Fuse => self.fusion(&read, def, candidates, span)?,
            procedures::Procedure::Vector | procedures::Procedure::Text => {
                let k = self.leg_k(read.k)?;
                let spec = self.leg_spec(def, &read.legs[0], k, span)?;
                let (plan, columns) = self.legs(vec![spec], candidates)?;
                Hits {
                    plan,
                    key: columns.key,
                    score: columns.score,
                    rank: columns.rank,
                }
            }
        };
        // The hits' key as the plan compares keys.
        let Hits {
            plan: hits,
            key,
            score,
            rank,
            ..
        } = if self.text_keys && def.key_type() != PropertyType::String {
            let text = self.fresh("hit_key");
            let mut items: Vec<Expr> = hits
                .plan
                .schema()
                .fields()
                .iter()
                .filter(|field| field.name() != &hits.key)
                .map(|field| column(field.name()))
                .collect();
            items.push(cast(column(&hits.key), DataType::Utf8).alias(&text));
            let plan = LogicalPlanBuilder::from(hits.plan)
                .project(items)
                .and_then(LogicalPlanBuilder::build);
            Hits {
                plan: self.internal(plan)?,
                key: text,
                ..hits
            }
        } else {
            hits
        };
        let mut rows = match &read.target {
            Target::Type if rows.unit => Rows {
                plan: hits,
                env: rows.env,
                unit: false,
            },
            Target::Type => {
                let joined = LogicalPlanBuilder::from(rows.plan)
                    .cross_join(hits)
                    .and_then(LogicalPlanBuilder::build);
                Rows {
                    plan: self.internal(joined)?,
                    env: rows.env,
                    unit: false,
                }
            }
            Target::Variable(name) => {
                let Some(Entity::Node(node)) = rows.env.get(name) else {
                    unreachable!("the call's variable was checked to be a node");
                };
                let joined = LogicalPlanBuilder::from(rows.plan)
                    .join_on(
                        hits,
                        JoinType::Inner,
                        vec![column(&node.key).eq(column(&key))],
                    )
                    .and_then(LogicalPlanBuilder::build);
                Rows {
                    plan: self.internal(joined)?,
                    env: rows.env,
                    unit: false,
                }
            }
        };
        for (output, name, _) in &read.yields {
            match output {
                Output::Node => match &read.target {
                    Target::Variable(bound) => {
                        let node = rows.env[bound].clone();
                        rows.env.insert(name.clone(), node);
                    }
                    Target::Type => {
                        rows = self.reach(name, def, key.clone(), span, rows)?;
                    }
                },
                // A leg's rank, a fusion's ranks: the one column the call has.
                Output::Rank | Output::Ranks => {
                    rows.env.insert(name.clone(), Entity::Value(rank.clone()));
                }
                Output::Score => {
                    rows.env.insert(name.clone(), Entity::Value(score.clone()));
                }
            }
        }
        if let Some(filter) = read.filter {
            rows = self.filter(filter, rows)?;
        }
        Ok(rows)
    }

    /// The node `name` of type `def` whose key the hits hold in `key`: its table joined
    /// on the key when the query reads more of it than its key.
    fn reach(
        &mut self,
        name: &str,
        def: &TypeDef,
        key: String,
        span: Span,
        mut rows: Rows,
    ) -> Result<Rows> {
        let types = vec![def.name().to_string()];
        let key_only = !self.text_keys && self.is_read_for_key_only(name, def.key_column());
        if !self.is_read(name) || key_only {
            let properties =
                key_only.then(|| BTreeMap::from([(def.key_column().to_string(), key.clone())]));
            rows.env.insert(
                name.to_string(),
                Entity::Node(NodeColumns {
                    types,
                    key,
                    label: None,
                    properties,
                }),
            );
            return Ok(rows);
        }
        let (scan, columns) = self.scan_reached_nodes(&types, name, span)?;
        let joined = LogicalPlanBuilder::from(rows.plan)
            .join_on(
                scan,
                JoinType::Inner,
                vec![column(&columns.key).eq(column(&key))],
            )
            .and_then(LogicalPlanBuilder::build);
        rows.plan = self.df(span, joined)?;
        rows.env.insert(name.to_string(), Entity::Node(columns));
        Ok(rows)
    }

    /// One leg's search, as the call asks it.
    fn leg_spec(
        &mut self,
        def: &TypeDef,
        leg: &LegCall<'_>,
        k: usize,
        span: Span,
    ) -> Result<LegSpec> {
        let table = self
            .tables
            .get(def.name())
            .cloned()
            .ok_or_else(|| self.refuse(QueryRefusal::UnknownLabel, span, "no such table"))?;
        let search = match leg.kind {
            LegKind::Vector => {
                let dimension = match def.columns().iter().find(|c| c.name == leg.property) {
                    Some(column) => match column.data_type {
                        PropertyType::Vector(dimension) => dimension as usize,
                        _ => unreachable!("a vector leg's property was checked"),
                    },
                    None => unreachable!("a leg's property was checked"),
                };
                let query = self.vector(leg.query, dimension)?;
                let metric = match leg.options.get(&LegOption::Metric) {
                    Some(metric) => Some(self.metric(metric)?),
                    None => None,
                };
                let nprobes = match leg.options.get(&LegOption::Nprobes) {
                    Some(value) => Some(self.positive(value, "nprobes", usize::MAX)?),
                    None => None,
                };
                let refine = match leg.options.get(&LegOption::Refine) {
                    Some(value) => Some(self.positive(value, "refine", u32::MAX as usize)? as u32),
                    None => None,
                };
                let index = def
                    .declared_indexes()
                    .iter()
                    .find(|index| index.kind == IndexKind::Vector && index.column == leg.property)
                    .map(|index| index.name.clone());
                Search::Vector {
                    property: leg.property.clone(),
                    query,
                    metric,
                    nprobes,
                    index,
                    refine,
                }
            }
            LegKind::Text => {
                let option = |this: &Self, option, what, most, unit| match leg.options.get(&option)
                {
                    Some(value) => this
                        .zero_to(value, what, most, unit)
                        .map(|count| Some((count, value.span))),
                    None => Ok(None),
                };
                let fuzziness = option(
                    self,
                    LegOption::Fuzziness,
                    "fuzziness",
                    FUZZINESS_MAX,
                    "edits",
                )?;
                let slop = option(self, LegOption::Slop, "slop", PHRASE_SLOP_MAX, "words")?;
                let mode = match leg.options.get(&LegOption::Match) {
                    Some(value) => (self.text(value)?, value.span),
                    None => ("any".to_string(), span),
                };
                let only_for = |option: &str, modes: &str, at: Span| {
                    self.refuse(
                        QueryRefusal::WrongType,
                        at,
                        format!("{option} applies to match {modes}, not '{}'", mode.0),
                    )
                };
                let matching = match mode.0.as_str() {
                    "any" | "all" => {
                        if let Some((_, at)) = slop {
                            return Err(only_for("slop", "'phrase'", at));
                        }
                        let fuzziness = fuzziness.map_or(0, |(edits, _)| edits);
                        if mode.0 == "any" {
                            TextMatch::Any { fuzziness }
                        } else {
                            TextMatch::All { fuzziness }
                        }
                    }
                    "phrase" => {
                        if let Some((_, at)) = fuzziness {
                            return Err(only_for("fuzziness", "'any' and 'all'", at));
                        }
                        TextMatch::Phrase {
                            slop: slop.map_or(0, |(words, _)| words),
                        }
                    }
                    "prefix" => {
                        if let Some((_, at)) = slop {
                            return Err(only_for("slop", "'phrase'", at));
                        }
                        if let Some((_, at)) = fuzziness {
                            return Err(only_for("fuzziness", "'any' and 'all'", at));
                        }
                        let text = self.text(leg.query)?;
                        let prefix = crate::exec::prefix::prefix_of(&text).unwrap_or_default();
                        if prefix.chars().count() < PREFIX_CHARS_MIN {
                            return Err(self.refuse(
                                QueryRefusal::WrongType,
                                leg.query.span,
                                format!(
                                    "a prefix has at least {PREFIX_CHARS_MIN} characters, not '{prefix}'"
                                ),
                            ));
                        }
                        TextMatch::Prefix
                    }
                    other => {
                        return Err(self.refuse(
                            QueryRefusal::WrongType,
                            mode.1,
                            format!("match is 'any', 'all', 'phrase' or 'prefix', not '{other}'"),
                        ));
                    }
                };
                let index = def
                    .declared_indexes()
                    .iter()
                    .find(|index| index.kind == IndexKind::FullText && index.column == leg.property)
                    .map(|index| index.name.clone());
                Search::Text {
                    property: leg.property.clone(),
                    query: self.text(leg.query)?,
                    matching,
                    index,
                }
            }
        };
        Ok(LegSpec {
            table,
            type_name: def.name().to_string(),
            key_column: def.key_column().to_string(),
            search,
            k,
        })
    }

    /// One node running `specs` over `candidates` (read once for all of them).
    fn legs(
        &mut self,
        specs: Vec<LegSpec>,
        candidates: Option<LogicalPlan>,
    ) -> Result<(LogicalPlan, LegColumns)> {
        let columns = LegColumns {
            key: self.fresh("key"),
            score: self.fresh("score"),
            rank: self.fresh("rank"),
            normalised: self.fresh("normalised"),
            leg: self.fresh("leg"),
        };
        let node = self.internal(Leg::new(specs, candidates, &columns))?;
        let plan = LogicalPlan::Extension(Extension {
            node: Arc::new(node),
        });
        Ok((plan, columns))
    }

    /// A fusion: every leg's hits from one node, each row's contribution (by reciprocal
    /// rank, or its weighted scaled score) summed by node, the `k` best kept; its rank
    /// column is the list of the legs' ranks.
    fn fusion(
        &mut self,
        call: &Call<'_>,
        def: &TypeDef,
        candidates: Option<LogicalPlan>,
        span: Span,
    ) -> Result<Hits> {
        let k = self.leg_k(call.k)?;
        let by_score = match call.method {
            Some(value) => match self.text(value)?.as_str() {
                "rrf" => false,
                "score" => true,
                other => {
                    return Err(self.refuse(
                        QueryRefusal::WrongType,
                        value.span,
                        format!("a fusion's method is 'rrf' or 'score', not '{other}'"),
                    ));
                }
            },
            None => false,
        };
        let rrf_k = match call.rrf_k {
            Some(value) if by_score => {
                return Err(self.refuse(
                    QueryRefusal::WrongType,
                    value.span,
                    "rrf_k applies to method 'rrf', not 'score'",
                ));
            }
            Some(value) => self.non_negative(value, "rrf_k")?,
            None => RRF_K_DEFAULT,
        };
        let mut specs = Vec::with_capacity(call.legs.len());
        let mut weights = Vec::with_capacity(call.legs.len());
        for leg in &call.legs {
            weights.push(match leg.options.get(&LegOption::Weight) {
                Some(value) => self.non_negative(value, "a leg's weight")?,
                None => 1.0,
            });
            let leg_k = self.leg_k(leg.k)?;
            specs.push(self.leg_spec(def, leg, leg_k, span)?);
        }
        let (hits, columns) = self.legs(specs, candidates)?;
        // Each row's contribution, by the weight of the leg that found it; each leg's
        // rank in a column of its own.
        let of_leg = |i: usize| column(&columns.leg).eq(lit(i as i64));
        let mut weight = lit(ScalarValue::Float64(None));
        for (i, w) in weights.iter().enumerate().rev() {
            weight = Expr::Case(datafusion::logical_expr::Case::new(
                None,
                vec![(Box::new(of_leg(i)), Box::new(lit(*w)))],
                Some(Box::new(weight)),
            ));
        }
        let contribution_of_row = if by_score {
            weight * column(&columns.normalised)
        } else {
            weight / (lit(rrf_k) + cast(column(&columns.rank), DataType::Float64))
        };
        let key = self.fresh("key");
        let contribution = self.fresh("contribution");
        let ranks: Vec<String> = (0..call.legs.len())
            .map(|i| self.fresh(&format!("leg{i}_rank")))
            .collect();
        let mut items = vec![
            column(&columns.key).alias(&key),
            contribution_of_row.alias(&contribution),
        ];
        for (i, name) in ranks.iter().enumerate() {
            let rank = Expr::Case(datafusion::logical_expr::Case::new(
                None,
                vec![(Box::new(of_leg(i)), Box::new(column(&columns.rank)))],
                Some(Box::new(lit(ScalarValue::Int64(None)))),
            ));
            items.push(rank.alias(name));
        }
        let union = self.internal(LogicalPlanBuilder::from(hits).project(items))?;
        let score = self.fresh("score");
        let all_ranks = self.fresh("ranks");
        let mut aggregates = vec![sum(column(&contribution)).alias(&score)];
        aggregates.extend(ranks.iter().map(|name| max(column(name)).alias(name)));
        let fused = union
            .aggregate(vec![column(&key)], aggregates)
            .and_then(|plan| {
                plan.sort(vec![
                    column(&score).sort(false, false),
                    column(&key).sort(true, false),
                ])
            })
            .and_then(|plan| plan.limit(0, Some(k)))
            .and_then(|plan| {
                plan.project(vec![
                    column(&key),
                    column(&score),
                    make_array(ranks.iter().map(|name| column(name)).collect()).alias(&all_ranks),
                ])
            })
            .and_then(LogicalPlanBuilder::build);
        Ok(Hits {
            plan: self.internal(fused)?,
            key,
            score,
            rank: all_ranks,
        })
    }

    /// A leg's or a call's `k`: 1 to [`LEG_K_MAX`].
    fn leg_k(&self, value: &CypherExpr) -> Result<usize> {
        self.positive(value, "k", LEG_K_MAX)
    }

    /// A count of 0 to `most` `unit`s.
    fn zero_to(&self, value: &CypherExpr, what: &str, most: i64, unit: &str) -> Result<u32> {
        let number = self.integer(value, what)?;
        if (0..=most).contains(&number) {
            Ok(number as u32)
        } else {
            Err(self.refuse(
                QueryRefusal::WrongType,
                value.span,
                format!("{what} is 0 to {most} {unit}, not {number}"),
            ))
        }
    }

    fn positive(&self, value: &CypherExpr, what: &str, most: usize) -> Result<usize> {
        let number = self.integer(value, what)?;
        match usize::try_from(number) {
            Ok(number) if (1..=most).contains(&number) => Ok(number),
            _ => Err(self.refuse(
                QueryRefusal::WrongType,
                value.span,
                format!("{what} is 1 to {most}, not {number}"),
            )),
        }
    }

    /// A literal or parameter value of the call.
    fn value(&self, value: &CypherExpr) -> Result<ScalarValue> {
        match &value.kind {
            ExprKind::Parameter(parameter) => {
                let name = super::expr::parameter_name(self, parameter, value.span)?;
                self.parameters
                    .get(&name)
                    .cloned()
                    .ok_or_else(|| self.missing_parameter(&name, value.span))
            }
            ExprKind::Literal(literal) => Ok(match &literal.kind {
                LiteralKind::Integer(integer) => ScalarValue::Int64(super::expr::integer(integer)),
                LiteralKind::Float(float) => {
                    ScalarValue::Float64(float.text.replace('_', "").parse::<f64>().ok())
                }
                LiteralKind::String(text) => ScalarValue::Utf8(Some(text.value.clone())),
                LiteralKind::Boolean(value) => ScalarValue::Boolean(Some(*value)),
                LiteralKind::Null => ScalarValue::Null,
                _ => return Err(self.literal_refused(value.span)),
            }),
            ExprKind::Unary { operator, operand } if operator.kind == UnaryOperator::Minus => {
                match self.value(operand)? {
                    ScalarValue::Int64(Some(n)) => Ok(ScalarValue::Int64(n.checked_neg())),
                    ScalarValue::Float64(Some(n)) => Ok(ScalarValue::Float64(Some(-n))),
                    _ => Err(self.literal_refused(value.span)),
                }
            }
            ExprKind::List(items) => {
                let values = items
                    .iter()
                    .map(|item| self.value(item))
                    .collect::<Result<Vec<_>>>()?;
                let floats: Vec<ScalarValue> = values
                    .into_iter()
                    .map(|v| match v {
                        ScalarValue::Int64(Some(n)) => Ok(ScalarValue::Float64(Some(n as f64))),
                        ScalarValue::Float64(Some(_)) => Ok(v),
                        _ => Err(self.literal_refused(value.span)),
                    })
                    .collect::<Result<_>>()?;
                Ok(ScalarValue::List(ScalarValue::new_list_nullable(
                    &floats,
                    &DataType::Float64,
                )))
            }
            _ => Err(self.literal_refused(value.span)),
        }
    }

    fn literal_refused(&self, span: Span) -> omnigraph_core::OmniError {
        self.refuse(
            QueryRefusal::WrongType,
            span,
            "a call's arguments are literals or parameters",
        )
    }

    fn integer(&self, value: &CypherExpr, what: &str) -> Result<i64> {
        match self.value(value)? {
            ScalarValue::Int64(Some(number)) => Ok(number),
            other => Err(self.refuse(
                QueryRefusal::WrongType,
                value.span,
                format!("{what} is an integer, not {}", other.data_type()),
            )),
        }
    }

    fn number(&self, value: &CypherExpr, what: &str) -> Result<f64> {
        match self.value(value)? {
            ScalarValue::Int64(Some(number)) => Ok(number as f64),
            ScalarValue::Float64(Some(number)) => Ok(number),
            other => Err(self.refuse(
                QueryRefusal::WrongType,
                value.span,
                format!("{what} is a number, not {}", other.data_type()),
            )),
        }
    }

    /// A finite number of at least 0.
    fn non_negative(&self, value: &CypherExpr, what: &str) -> Result<f64> {
        let number = self.number(value, what)?;
        if number.is_finite() && number >= 0.0 {
            Ok(number)
        } else {
            Err(self.refuse(
                QueryRefusal::WrongType,
                value.span,
                format!("{what} is a number of at least 0, not {number}"),
            ))
        }
    }

    fn text(&self, value: &CypherExpr) -> Result<String> {
        match self.value(value)? {
            ScalarValue::Utf8(Some(text)) => Ok(text),
            other => Err(self.refuse(
                QueryRefusal::WrongType,
                value.span,
                format!("a text leg's query is a string, not {}", other.data_type()),
            )),
        }
    }

    fn metric(&self, value: &CypherExpr) -> Result<DistanceType> {
        match self.text(value)?.as_str() {
            "l2" => Ok(DistanceType::L2),
            "cosine" => Ok(DistanceType::Cosine),
            "dot" => Ok(DistanceType::Dot),
            other => Err(self.refuse(
                QueryRefusal::WrongType,
                value.span,
                format!("the metric is 'l2', 'cosine' or 'dot', not '{other}'"),
            )),
        }
    }

    /// A query vector of `dimension` finite numbers.
    fn vector(&self, value: &CypherExpr, dimension: usize) -> Result<Vec<f32>> {
        let refuse = |message: String| self.refuse(QueryRefusal::WrongType, value.span, message);
        let ScalarValue::List(list) = self.value(value)? else {
            return Err(refuse("a query vector is a list of numbers".into()));
        };
        let items = list.value(0);
        if items.len() != dimension {
            return Err(refuse(format!(
                "the query vector has {} numbers; the property has dimension {dimension}",
                items.len()
            )));
        }
        let mut vector = Vec::with_capacity(dimension);
        for i in 0..items.len() {
            let number = match ScalarValue::try_from_array(&items, i) {
                Ok(ScalarValue::Float64(Some(n))) => n,
                Ok(ScalarValue::Int64(Some(n))) => n as f64,
                _ => return Err(refuse("a query vector is a list of numbers".into())),
            };
            let number = number as f32;
            if !number.is_finite() {
                return Err(refuse(format!(
                    "the query vector's number {} is not a finite 32-bit float",
                    i + 1
                )));
            }
            vector.push(number);
        }
        Ok(vector)
    }
}
