//! Cypher expressions as DataFusion expressions over the columns the variables hold.
//! Cypher's null logic is SQL's; where the two languages differ, the translation says
//! so: string `+` is concatenation, lists index from 0, `collect` skips nulls and of
//! no values is `[]`.

use super::{Binding, Context, Entity, Planner, Rows, column};
use crate::functions;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::datatypes::Field;
use datafusion::common::ScalarValue;
use datafusion::functions::expr_fn as f;
use datafusion::functions_aggregate::expr_fn as agg;
use datafusion::functions_nested::expr_fn as list;
use datafusion::logical_expr::expr::Case;
use datafusion::logical_expr::expr::Placeholder;
use datafusion::logical_expr::{
    BinaryExpr, Cast, Expr, ExprFunctionExt, LogicalPlanBuilder, Operator, TryCast, lit,
};
use omnigraph_core::{OmniError, QueryRefusal, Result};
use open_cypher::Span;
use open_cypher::ast::{
    BinaryOperator, ClauseKind, Expr as CypherExpr, ExprKind, FunctionInvocation, IntegerLiteral,
    IntegerRadix, IsPredicate, LiteralKind, Parameter, ParameterName, Query, QueryKind,
    SubqueryExpressionKind, UnaryOperator,
};
use std::sync::Arc;

/// The left operand of a binary operator: as written (the first of a chain), or
/// computed from the operators before it.
enum Operand<'q> {
    Source(&'q CypherExpr),
    Computed(Expr),
}

/// The aggregates a projection computes, each under a fresh name.
#[derive(Default)]
pub(crate) struct Aggregates {
    pub(crate) exprs: Vec<Expr>,
    pub(crate) names: Vec<String>,
    /// The type of each, by position.
    pub(crate) types: Vec<DataType>,
}

/// Whether `expression` calls an aggregate (outside any subquery).
pub(crate) fn aggregates(expression: &CypherExpr) -> bool {
    let mut found = false;
    visit(expression, &mut |e| {
        if let ExprKind::Function(call) = &e.kind
            && functions::lookup(&function_name(call)).is_some_and(|f| f.aggregate)
        {
            found = true;
        }
    });
    found
}

/// Calls `each` on `expression` and every expression inside it, not entering
/// subqueries (their aggregates are their own). A loop over a stack: a long chain of
/// `OR`s is not deep recursion.
fn visit(expression: &CypherExpr, each: &mut dyn FnMut(&CypherExpr)) {
    let mut pending = vec![expression];
    while let Some(next) = pending.pop() {
        each(next);
        children(next, &mut pending);
    }
}

/// Pushes the expressions directly inside `expression` onto `pending`; says whether its
/// kind is one this walk knows whole. A subquery or a pattern predicate is not entered
/// (its variables are not only its own), nor a form the checker refuses.
pub(crate) fn children<'e>(expression: &'e CypherExpr, pending: &mut Vec<&'e CypherExpr>) -> bool {
    match &expression.kind {
        ExprKind::Literal(_) | ExprKind::Parameter(_) | ExprKind::Variable(_) => {}
        // `*` in count(*): rows, not a value.
        ExprKind::Wildcard => {}
        ExprKind::List(items) => pending.extend(items),
        ExprKind::Map(entries) => pending.extend(entries.iter().map(|e| &e.value)),
        ExprKind::Unary { operand, .. } => pending.push(operand),
        ExprKind::Binary { left, right, .. } => {
            pending.push(left);
            pending.push(right);
        }
        ExprKind::Is { expression, .. }
        | ExprKind::Property { expression, .. }
        | ExprKind::Parenthesized(expression) => pending.push(expression),
        ExprKind::Index { expression, index } => {
            pending.push(expression);
            pending.push(index);
        }
        ExprKind::Slice {
            expression,
            lower,
            upper,
        } => {
            pending.push(expression);
            pending.extend(lower.iter().map(|b| &**b));
            pending.extend(upper.iter().map(|b| &**b));
        }
        ExprKind::Function(call) => pending.extend(&call.arguments),
        ExprKind::Case(case) => {
            pending.extend(case.operand.iter().map(|e| &**e));
            pending.extend(case.else_expression.iter().map(|e| &**e));
            for alternative in &case.alternatives {
                pending.extend(&alternative.when);
                pending.push(&alternative.then);
            }
        }
        _ => return false,
    }
    true
}

/// Whether `value` reads one of the aggregates `collected` computed.
pub(crate) fn holds_aggregate(value: &Expr, collected: &Aggregates) -> bool {
    value
        .column_refs()
        .iter()
        .any(|c| collected.names.contains(&c.name))
}

pub(crate) fn function_name(call: &FunctionInvocation) -> String {
    call.name
        .parts
        .iter()
        .map(|part| part.kind.text.as_str())
        .collect::<Vec<_>>()
        .join(".")
        .to_ascii_lowercase()
}

/// The value of `expression` when it is an integer literal (or one negated).
fn integer_literal(expression: &CypherExpr) -> Option<i64> {
    match &expression.kind {
        ExprKind::Literal(literal) => match &literal.kind {
            LiteralKind::Integer(value) => integer(value),
            _ => None,
        },
        ExprKind::Unary { operator, operand } if operator.kind == UnaryOperator::Minus => {
            integer_literal(operand).and_then(i64::checked_neg)
        }
        ExprKind::Parenthesized(inner) => integer_literal(inner),
        _ => None,
    }
}

/// An integer literal's value, when it fits 64 bits.
pub(crate) fn integer(literal: &IntegerLiteral) -> Option<i64> {
    let text = literal.text.replace('_', "");
    match literal.radix {
        IntegerRadix::Decimal => text.parse().ok(),
        IntegerRadix::Hexadecimal => {
            i64::from_str_radix(text.trim_start_matches("0x").trim_start_matches("0X"), 16).ok()
        }
        IntegerRadix::Octal => {
            let digits = text.trim_start_matches("0o").trim_start_matches("0O");
            i64::from_str_radix(digits.trim_start_matches('0').max("0"), 8).ok()
        }
        _ => None,
    }
}

impl Planner<'_> {
    /// The parameter `name`, whose value is `value`, as a value of the plan: a literal,
    /// or a placeholder of its type when the plan is compiled to serve any value
    /// ([`Binding::Placeholders`]). A null or a list has no type a placeholder could
    /// keep for every value, so it is always a literal, and binds the plan to it.
    fn parameter_value(&self, name: &str, value: &ScalarValue) -> Expr {
        match self.binding {
            Binding::Placeholders if placeholder_type(value) => {
                let field = Arc::new(Field::new("", value.data_type(), true));
                Expr::Placeholder(Placeholder::new_with_field(format!("${name}"), Some(field)))
            }
            Binding::Placeholders => {
                self.value_bound.set(true);
                lit(value.clone())
            }
            Binding::Literals => lit(value.clone()),
        }
    }
}

/// Whether a parameter of `value`'s type can be a placeholder: a value of one scalar
/// type that is not null.
pub(crate) fn placeholder_type(value: &ScalarValue) -> bool {
    !value.is_null()
        && matches!(
            value.data_type(),
            DataType::Boolean | DataType::Int64 | DataType::Float64 | DataType::Utf8
        )
}

pub(crate) fn parameter_name(
    planner: &Planner<'_>,
    parameter: &Parameter,
    span: Span,
) -> Result<String> {
    match &parameter.name {
        ParameterName::Named(name) => Ok(name.clone()),
        _ => Err(planner.unsupported(span, "a positional parameter")),
    }
}

/// A node or relationship as a value: a struct of its properties (and its type when
/// it may be of several).
pub(crate) fn entity_value(planner: &Planner<'_>, entity: &Entity, span: Span) -> Result<Expr> {
    let mut fields: Vec<Expr> = Vec::new();
    match entity {
        Entity::Node(node) => {
            if let Some(label) = &node.label {
                fields.extend([lit("_label"), column(label)]);
            }
            match &node.properties {
                Some(properties) => {
                    for (name, col) in properties {
                        fields.extend([lit(name.as_str()), column(col)]);
                    }
                }
                None => fields.extend([lit("_key"), column(&node.key)]),
            }
            if fields.is_empty() {
                // A node no edge reached (no type fits): its key alone.
                fields.extend([lit("_key"), column(&node.key)]);
            }
            Ok(null_when_absent(column(&node.key), f::named_struct(fields)))
        }
        Entity::Relationship(relationship) => {
            if let Some(label) = &relationship.label {
                fields.extend([lit("_type"), column(label)]);
            }
            for (name, col) in &relationship.properties {
                fields.extend([lit(name.as_str()), column(col)]);
            }
            let id = relationship_id(relationship);
            if fields.is_empty() {
                // A relationship of no type that fits: its id alone (null).
                fields.extend([lit("_id"), id.clone()]);
            }
            Ok(null_when_absent(id, f::named_struct(fields)))
        }
        Entity::Path => Err(planner.unsupported(
            span,
            "a variable-length relationship as a value (count the rows, or name the nodes)",
        )),
        Entity::Value(col) => Ok(column(col)),
    }
}

/// `value`, or null where `identity` is null: a node or relationship that did not match
/// (`OPTIONAL MATCH`) is null, not a struct of nulls.
fn null_when_absent(identity: Expr, value: Expr) -> Expr {
    Expr::Case(Case::new(
        None,
        vec![(
            Box::new(identity.is_null()),
            Box::new(lit(ScalarValue::Null)),
        )],
        Some(Box::new(value)),
    ))
}

/// What identifies a node or relationship, for `count(DISTINCT n)` and `collect`: its
/// key (with its type when it may be of several).
fn identity(entity: &Entity) -> Option<Expr> {
    match entity {
        Entity::Node(node) => Some(match &node.label {
            Some(label) => binary(column(label), Operator::StringConcat, lit(":"))
                .binary(Operator::StringConcat, column(&node.key).cast_text()),
            None => column(&node.key),
        }),
        Entity::Relationship(relationship) => Some(match &relationship.label {
            Some(label) => binary(column(label), Operator::StringConcat, lit(":"))
                .binary(Operator::StringConcat, relationship_id(relationship)),
            None => relationship_id(relationship),
        }),
        _ => None,
    }
}

/// A relationship's id column, or null for one of no type that fits (it has no columns).
fn relationship_id(relationship: &super::RelationshipColumns) -> Expr {
    relationship
        .properties
        .get("id")
        .map_or(lit(ScalarValue::Utf8(None)), |id| column(id))
}

/// A node's or relationship's type, as a column when it may be of several, else the one
/// type as a literal; and its key or id.
fn typed_identity(entity: &Entity) -> Option<(Expr, Expr)> {
    let (label, types, key) = match entity {
        Entity::Node(node) => (&node.label, &node.types, column(&node.key)),
        Entity::Relationship(relationship) => (
            &relationship.label,
            &relationship.types,
            relationship_id(relationship),
        ),
        _ => return None,
    };
    let label = match (label, types.as_slice()) {
        (Some(label), _) => column(label),
        // The one type, where there is a key: an optional match's null node has none.
        (None, [only]) => Expr::Case(Case::new(
            None,
            vec![(
                Box::new(key.clone().is_null()),
                Box::new(lit(ScalarValue::Utf8(None))),
            )],
            Some(Box::new(lit(only.as_str()))),
        )),
        (None, _) => lit(ScalarValue::Utf8(None)),
    };
    Some((label, key))
}

/// Whether two relationships are the same one: its type and its id (ids are unique
/// within one edge table only).
pub(crate) fn same_relationship(
    a: &super::RelationshipColumns,
    b: &super::RelationshipColumns,
) -> Expr {
    let (a, b) = (
        Entity::Relationship(a.clone()),
        Entity::Relationship(b.clone()),
    );
    match (typed_identity(&a), typed_identity(&b)) {
        (Some((a_type, a_id)), Some((b_type, b_id))) => a_type.eq(b_type).and(a_id.eq(b_id)),
        _ => lit(false),
    }
}

fn binary(left: Expr, op: Operator, right: Expr) -> Expr {
    Expr::BinaryExpr(BinaryExpr::new(Box::new(left), op, Box::new(right)))
}

trait Build {
    fn binary(self, op: Operator, right: Expr) -> Expr;
    fn cast_text(self) -> Expr;
}

impl Build for Expr {
    fn binary(self, op: Operator, right: Expr) -> Expr {
        binary(self, op, right)
    }
    fn cast_text(self) -> Expr {
        Expr::Cast(Cast::new(Box::new(self), DataType::Utf8))
    }
}

impl Context<'_> {
    fn reborrow(&mut self) -> Context<'_> {
        match self {
            Context::Row => Context::Row,
            Context::Projection(collected) => Context::Projection(collected),
        }
    }
}

impl<'a> Planner<'a> {
    /// `expression` over `rows`; a subquery in it adds its column to `rows` first.
    pub(crate) fn expression(
        &mut self,
        expression: &CypherExpr,
        rows: &mut Rows,
        mut context: Context<'_>,
    ) -> Result<Expr> {
        let span = expression.span;
        Ok(match &expression.kind {
            ExprKind::Literal(literal) => match &literal.kind {
                LiteralKind::Null => lit(ScalarValue::Null),
                LiteralKind::Boolean(value) => lit(*value),
                LiteralKind::Integer(value) => lit(integer(value).ok_or_else(|| {
                    self.refuse(
                        QueryRefusal::WrongType,
                        span,
                        format!("{} is not a 64-bit integer", value.text),
                    )
                })?),
                LiteralKind::Float(value) => {
                    lit(value.text.replace('_', "").parse::<f64>().map_err(|_| {
                        self.refuse(
                            QueryRefusal::WrongType,
                            span,
                            format!("{} is not a number", value.text),
                        )
                    })?)
                }
                LiteralKind::String(value) => lit(value.value.as_str()),
                _ => return Err(self.unsupported(span, "this literal")),
            },
            ExprKind::Parameter(parameter) => {
                let name = parameter_name(self, parameter, span)?;
                match self.parameters.get(&name) {
                    Some(value) => self.parameter_value(&name, value),
                    None => return Err(self.missing_parameter(&name, span)),
                }
            }
            ExprKind::Variable(variable) => match rows.env.get(&variable.kind.text) {
                Some(entity) => entity_value(self, &entity.clone(), span)?,
                None => {
                    return Err(self.refuse(
                        QueryRefusal::UnknownVariable,
                        variable.span,
                        format!("{} is not bound here", variable.kind.text),
                    ));
                }
            },
            ExprKind::List(items) => {
                let mut values = Vec::new();
                for item in items {
                    values.push(self.expression(item, rows, context.reborrow())?);
                }
                list::make_array(values)
            }
            ExprKind::Map(entries) => {
                let mut fields = Vec::new();
                for entry in entries {
                    fields.push(lit(entry.key.kind.text.as_str()));
                    fields.push(self.expression(&entry.value, rows, context.reborrow())?);
                }
                f::named_struct(fields)
            }
            ExprKind::Unary { operator, operand } => {
                let value = self.expression(operand, rows, context)?;
                match operator.kind {
                    UnaryOperator::Not => Expr::Not(Box::new(value)),
                    UnaryOperator::Minus => Expr::Negative(Box::new(value)),
                    UnaryOperator::Plus => value,
                    _ => return Err(self.unsupported(span, "this operator")),
                }
            }
            ExprKind::Binary { .. } => self.binary(expression, rows, context)?,
            ExprKind::Is {
                expression,
                negated,
                predicate,
            } => {
                if !matches!(predicate, IsPredicate::Null) {
                    return Err(self.unsupported(span, "IS other than IS [NOT] NULL"));
                }
                let value = match self.entity_of(expression, rows) {
                    Some(Entity::Path) => {
                        return Err(self.unsupported(
                            span,
                            "IS NULL of a variable-length relationship (test its end node)",
                        ));
                    }
                    Some(entity) => identity(&entity).unwrap_or(lit(ScalarValue::Null)),
                    None => self.expression(expression, rows, context)?,
                };
                if *negated {
                    value.is_not_null()
                } else {
                    value.is_null()
                }
            }
            ExprKind::Property {
                expression: target,
                key,
            } => {
                let property = &key.kind.text;
                match self.entity_of(target, rows) {
                    Some(Entity::Node(node)) => match &node.properties {
                        Some(properties) => match properties.get(property) {
                            Some(col) => column(col),
                            None => lit(ScalarValue::Null),
                        },
                        None => {
                            return Err(self.refuse(
                                QueryRefusal::Unsupported,
                                span,
                                "the planner did not read this node's properties (a defect: report it)",
                            ));
                        }
                    },
                    Some(Entity::Relationship(relationship)) => {
                        match relationship.properties.get(property) {
                            Some(col) => column(col),
                            None => lit(ScalarValue::Null),
                        }
                    }
                    Some(Entity::Path) => {
                        return Err(
                            self.unsupported(span, "a property of a variable-length relationship")
                        );
                    }
                    _ => {
                        let value = self.expression(target, rows, context)?;
                        f::get_field(value, property.as_str())
                    }
                }
            }
            ExprKind::Index {
                expression: target,
                index,
            } => {
                let value = self.expression(target, rows, context)?;
                // Cypher counts from 0 (negative from the end); DataFusion from 1 (and
                // from -1 at the end). A literal index only: a computed one would be
                // read three times, and nested, grow the plan exponentially.
                let at = match &index.kind {
                    ExprKind::Parameter(parameter) => {
                        let name = parameter_name(self, parameter, index.span)?;
                        self.value_bound.set(true);
                        match self.parameters.get(&name) {
                            Some(ScalarValue::Int64(Some(at))) => Some(*at),
                            Some(_) => None,
                            None => return Err(self.missing_parameter(&name, index.span)),
                        }
                    }
                    _ => integer_literal(index),
                };
                let Some(at) = at else {
                    return Err(self.unsupported(
                        index.span,
                        "an index that is not an integer literal or parameter",
                    ));
                };
                let position = if at >= 0 { at.saturating_add(1) } else { at };
                list::array_element(value, lit(position))
            }
            ExprKind::Slice {
                expression: target,
                lower,
                upper,
            } => {
                // Literal bounds from 0 only: [a..b) counting from 0 is a+1..b counting
                // from 1, both ends kept.
                let bound = |bound: &Option<Box<CypherExpr>>| -> Result<Option<i64>> {
                    match bound {
                        None => Ok(None),
                        Some(bound) => match integer_literal(bound) {
                            Some(value) if value >= 0 => Ok(Some(value)),
                            _ => Err(self.unsupported(
                                bound.span,
                                "a slice bound that is not a non-negative integer literal",
                            )),
                        },
                    }
                };
                let (from, to) = (bound(lower)?, bound(upper)?);
                let value = self.expression(target, rows, context)?;
                let from = lit(from.unwrap_or(0).saturating_add(1));
                // An open end: to the last item (DataFusion's -1).
                let to = lit(to.unwrap_or(-1));
                list::array_slice(value, from, to, None)
            }
            ExprKind::Function(call) => self.function(call, span, rows, context)?,
            ExprKind::Case(case) => {
                let operand = match &case.operand {
                    Some(operand) => Some(Box::new(self.expression(
                        operand,
                        rows,
                        context.reborrow(),
                    )?)),
                    None => None,
                };
                let mut arms = Vec::new();
                for alternative in &case.alternatives {
                    if alternative.when.len() > 1 {
                        return Err(self.unsupported(
                            alternative.span,
                            "several values in one WHEN (write a WHEN for each)",
                        ));
                    }
                    let then = self.expression(&alternative.then, rows, context.reborrow())?;
                    for when in &alternative.when {
                        let when = self.expression(when, rows, context.reborrow())?;
                        arms.push((Box::new(when), Box::new(then.clone())));
                    }
                }
                let otherwise = match &case.else_expression {
                    Some(otherwise) => Some(Box::new(self.expression(otherwise, rows, context)?)),
                    None => None,
                };
                Expr::Case(Case::new(operand, arms, otherwise))
            }
            ExprKind::Subquery(subquery) => {
                let counting = match subquery.kind.kind {
                    SubqueryExpressionKind::Exists => false,
                    SubqueryExpressionKind::Count => true,
                    _ => return Err(self.unsupported(span, "COLLECT { }")),
                };
                self.subquery(&subquery.query, counting, span, rows)?
            }
            ExprKind::Pattern(pattern) => self.exists_pattern(pattern, span, rows)?,
            ExprKind::Parenthesized(inner) => self.expression(inner, rows, context)?,
            _ => return Err(self.unsupported(span, "this expression")),
        })
    }

    /// The node or relationship `expression` names, if it names one.
    fn entity_of(&self, expression: &CypherExpr, rows: &Rows) -> Option<Entity> {
        let mut inner = expression;
        while let ExprKind::Parenthesized(next) = &inner.kind {
            inner = next;
        }
        match &inner.kind {
            ExprKind::Variable(variable) => match rows.env.get(&variable.kind.text) {
                Some(entity @ (Entity::Node(_) | Entity::Relationship(_) | Entity::Path)) => {
                    Some(entity.clone())
                }
                _ => None,
            },
            _ => None,
        }
    }

    /// A chain of binary operators down its left side (`a OR b OR c ...`), one operator
    /// at a time in a loop: a long chain is not deep recursion.
    fn binary(
        &mut self,
        expression: &CypherExpr,
        rows: &mut Rows,
        mut context: Context<'_>,
    ) -> Result<Expr> {
        let mut spine = Vec::new();
        let mut first = expression;
        while let ExprKind::Binary {
            left,
            operator,
            right,
        } = &first.kind
        {
            spine.push((operator.kind, operator.span, &**right));
            first = left;
        }
        let mut value: Option<Expr> = None;
        for (operator, at, right) in spine.into_iter().rev() {
            let left = match value.take() {
                None => Operand::Source(first),
                Some(computed) => Operand::Computed(computed),
            };
            value = Some(self.binary_step(left, operator, at, right, rows, context.reborrow())?);
        }
        value.ok_or_else(|| OmniError::internal("a binary expression has an operator"))
    }

    #[allow(clippy::too_many_arguments)]
    fn binary_step(
        &mut self,
        left: Operand<'_>,
        operator: BinaryOperator,
        at: Span,
        right: &CypherExpr,
        rows: &mut Rows,
        mut context: Context<'_>,
    ) -> Result<Expr> {
        // Two nodes or relationships compare by identity.
        if matches!(operator, BinaryOperator::Equal | BinaryOperator::NotEqual)
            && let Operand::Source(left) = &left
            && let (Some(a), Some(b)) = (self.entity_of(left, rows), self.entity_of(right, rows))
        {
            let (Some((a_type, a_key)), Some((b_type, b_key))) =
                (typed_identity(&a), typed_identity(&b))
            else {
                return Err(self.unsupported(at, "comparing variable-length relationships"));
            };
            // Of one type and one key: a type alone never equals a key of another.
            let same = a_type.eq(b_type).and(a_key.eq(b_key));
            return Ok(if matches!(operator, BinaryOperator::Equal) {
                same
            } else {
                Expr::Not(Box::new(same))
            });
        }
        let left_span = match &left {
            Operand::Source(left) => left.span,
            Operand::Computed(_) => at,
        };
        let a = match left {
            Operand::Source(left) => self.expression(left, rows, context.reborrow())?,
            Operand::Computed(computed) => computed,
        };
        self.combine(a, operator, at, left_span, right, rows, context)
    }

    /// `a operator right`, `a` computed already.
    #[allow(clippy::too_many_arguments)]
    fn combine(
        &mut self,
        a: Expr,
        operator: BinaryOperator,
        at: Span,
        left_span: Span,
        right: &CypherExpr,
        rows: &mut Rows,
        mut context: Context<'_>,
    ) -> Result<Expr> {
        if operator == BinaryOperator::In {
            let needle = a;
            return Ok(match &right.kind {
                ExprKind::List(items) => {
                    let mut values = Vec::new();
                    for item in items {
                        values.push(self.expression(item, rows, context.reborrow())?);
                    }
                    needle.in_list(values, false)
                }
                ExprKind::Parameter(parameter) => {
                    let name = parameter_name(self, parameter, right.span)?;
                    self.value_bound.set(true);
                    match self.parameters.get(&name) {
                        Some(ScalarValue::List(array)) => {
                            let values = (0..array.value_length(0))
                                .map(|i| {
                                    ScalarValue::try_from_array(&array.value(0), i as usize)
                                        .map(lit)
                                })
                                .collect::<std::result::Result<Vec<_>, _>>();
                            needle.in_list(self.df(right.span, values)?, false)
                        }
                        Some(_) => {
                            return Err(self.refuse(
                                QueryRefusal::WrongType,
                                right.span,
                                format!("IN takes a list, and ${name} is not one"),
                            ));
                        }
                        None => return Err(self.missing_parameter(&name, right.span)),
                    }
                }
                _ => {
                    let haystack = self.expression(right, rows, context)?;
                    list::array_has(haystack, needle)
                }
            });
        }
        let b = self.expression(right, rows, context.reborrow())?;
        Ok(match operator {
            BinaryOperator::Or => a.or(b),
            BinaryOperator::And => a.and(b),
            // XOR of booleans is inequality, with the same nulls.
            BinaryOperator::Xor => {
                let boolean = |t: &DataType| matches!(t, DataType::Boolean | DataType::Null);
                let (left_type, right_type) = (
                    self.type_of(&a, rows, &context, left_span)?,
                    self.type_of(&b, rows, &context, right.span)?,
                );
                if !boolean(&left_type) || !boolean(&right_type) {
                    return Err(self.refuse(
                        QueryRefusal::WrongType,
                        at,
                        format!("XOR takes booleans, not {left_type} and {right_type}"),
                    ));
                }
                a.not_eq(b)
            }
            BinaryOperator::Equal => a.eq(b),
            BinaryOperator::NotEqual => a.not_eq(b),
            BinaryOperator::Less => a.lt(b),
            BinaryOperator::LessEqual => a.lt_eq(b),
            BinaryOperator::Greater => a.gt(b),
            BinaryOperator::GreaterEqual => a.gt_eq(b),
            BinaryOperator::StartsWith => f::starts_with(a, b),
            BinaryOperator::EndsWith => f::ends_with(a, b),
            BinaryOperator::Contains => f::contains(a, b),
            BinaryOperator::Add => {
                let (left_type, right_type) = (
                    self.type_of(&a, rows, &context, left_span)?,
                    self.type_of(&b, rows, &context, right.span)?,
                );
                let text = |t: &DataType| {
                    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
                };
                let listy = |t: &DataType| matches!(t, DataType::List(_) | DataType::LargeList(_));
                if text(&left_type) || text(&right_type) {
                    binary(a, Operator::StringConcat, b)
                } else if listy(&left_type) && listy(&right_type) {
                    list::array_concat(vec![a, b])
                } else {
                    a + b
                }
            }
            BinaryOperator::Subtract => a - b,
            BinaryOperator::Multiply => a * b,
            BinaryOperator::Divide => a / b,
            BinaryOperator::Remainder => a % b,
            BinaryOperator::Power => f::power(
                Expr::Cast(Cast::new(Box::new(a), DataType::Float64)),
                Expr::Cast(Cast::new(Box::new(b), DataType::Float64)),
            ),
            BinaryOperator::Concat => binary(a, Operator::StringConcat, b),
            _ => return Err(self.unsupported(at, "this operator")),
        })
    }

    fn function(
        &mut self,
        call: &FunctionInvocation,
        span: Span,
        rows: &mut Rows,
        mut context: Context<'_>,
    ) -> Result<Expr> {
        let name = function_name(call);
        let Some(function) = functions::lookup(&name) else {
            return Err(self.unsupported(span, &format!("the function {name}")));
        };
        let distinct = matches!(
            call.quantifier.as_ref().map(|q| q.kind),
            Some(open_cypher::ast::SetQuantifier::Distinct)
        );
        if function.aggregate {
            let Context::Projection(collected) = context else {
                return Err(self.refuse(
                    QueryRefusal::Unsupported,
                    span,
                    format!("{name}() here: aggregate in WITH or RETURN, and order by its alias"),
                ));
            };
            let star = matches!(call.arguments.as_slice(), [a] if a.kind == ExprKind::Wildcard);
            let aggregate = if star {
                datafusion::functions_aggregate::count::count_all()
            } else {
                let argument = &call.arguments[0];
                let entity = self.entity_of(argument, rows);
                let value = match (&entity, name.as_str()) {
                    (Some(entity), "count") => identity(entity).ok_or_else(|| {
                        self.unsupported(span, "counting variable-length relationships")
                    })?,
                    _ => self.expression(argument, rows, Context::Row)?,
                };
                match (name.as_str(), distinct) {
                    ("count", false) => agg::count(value),
                    ("count", true) => agg::count_distinct(value),
                    ("sum", false) => agg::sum(value),
                    ("sum", true) => agg::sum(value)
                        .distinct()
                        .build()
                        .map_err(|e| self.bad_types(span, &e))?,
                    ("avg", false) => agg::avg(value),
                    ("avg", true) => agg::avg(value)
                        .distinct()
                        .build()
                        .map_err(|e| self.bad_types(span, &e))?,
                    ("min", _) => agg::min(value),
                    ("max", _) => agg::max(value),
                    ("collect", _) => {
                        // collect() skips nulls (a node that did not match is null).
                        let present = match &entity {
                            Some(entity) => identity(entity).unwrap_or(lit(true)).is_not_null(),
                            None => value.clone().is_not_null(),
                        };
                        let builder = agg::array_agg(value).filter(present);
                        let builder = if distinct {
                            builder.distinct()
                        } else {
                            builder
                        };
                        builder.build().map_err(|e| self.bad_types(span, &e))?
                    }
                    _ => return Err(self.unsupported(span, &format!("{name}(DISTINCT ...)"))),
                }
            };
            let target = self.fresh(&name);
            let data_type = self.type_of(&aggregate, rows, &Context::Row, span)?;
            collected.exprs.push(aggregate.alias(&target));
            collected.names.push(target.clone());
            collected.types.push(data_type);
            // collect() of no values is [], not SQL's null. sum() of no values stays
            // null, as in Kuzu (Neo4j says 0; docs/query.md).
            return Ok(match name.as_str() {
                "collect" => f::coalesce(vec![column(&target), list::make_array(vec![])]),
                _ => column(&target),
            });
        }
        let mut arguments = Vec::new();
        for argument in &call.arguments {
            arguments.push(self.expression(argument, rows, context.reborrow())?);
        }
        let first_type = match arguments.first() {
            Some(first) => Some(self.type_of(first, rows, &context, span)?),
            None => None,
        };
        let mut arguments = arguments.into_iter();
        let mut next = || arguments.next().expect("the checker counted the arguments");
        Ok(match name.as_str() {
            "lower" | "tolower" => f::lower(next()),
            "upper" | "toupper" => f::upper(next()),
            "trim" => f::btrim(vec![next()]),
            "ltrim" => f::ltrim(vec![next()]),
            "rtrim" => f::rtrim(vec![next()]),
            "substring" => {
                let text = next();
                let start = next() + lit(1i64);
                match call.arguments.len() {
                    3 => f::substring(text, start, next()),
                    _ => f::substr(text, start),
                }
            }
            "left" => f::left(next(), next()),
            "right" => f::right(next(), next()),
            "replace" => f::replace(next(), next(), next()),
            // Cypher's integers are 64-bit signed: a size is too.
            "size" | "length" => Expr::Cast(Cast::new(
                Box::new(match first_type {
                    Some(
                        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..),
                    ) => list::cardinality(next()),
                    _ => f::character_length(next()),
                }),
                DataType::Int64,
            )),
            "abs" => f::abs(next()),
            "ceil" => f::ceil(next()),
            "floor" => f::floor(next()),
            "round" => f::round(vec![next()]),
            "sign" => f::signum(next()),
            "sqrt" => f::sqrt(next()),
            "coalesce" => f::coalesce(
                std::iter::from_fn(|| Some(next()))
                    .take(call.arguments.len())
                    .collect(),
            ),
            "tostring" => Expr::Cast(Cast::new(Box::new(next()), DataType::Utf8)),
            "tointeger" => Expr::TryCast(TryCast::new(Box::new(next()), DataType::Int64)),
            "tofloat" => Expr::TryCast(TryCast::new(Box::new(next()), DataType::Float64)),
            _ => return Err(self.unsupported(span, &format!("the function {name}"))),
        })
    }

    /// `EXISTS { ... }` or `COUNT { ... }`: the subquery runs on the numbered rows; its
    /// matches, counted per row, are joined back.
    fn subquery(
        &mut self,
        query: &Query,
        counting: bool,
        span: Span,
        rows: &mut Rows,
    ) -> Result<Expr> {
        let QueryKind::Regular(regular) = &query.kind else {
            return Err(self.refuse(QueryRefusal::Syntax, span, "not a query"));
        };
        if let Some(clause) = regular
            .head
            .kind
            .clauses
            .iter()
            .find(|c| !matches!(c.kind, ClauseKind::Match(_) | ClauseKind::Unwind(_)))
        {
            return Err(self.unsupported(
                clause.span,
                "a subquery with other clauses than MATCH and UNWIND",
            ));
        }
        let (outer, identity) = self.outer(rows, span)?;
        let (matched, _) = self.query(query, outer)?;
        self.count_back(identity, matched, counting, span, rows)
    }

    /// A pattern as a predicate: whether it matches from the row.
    fn exists_pattern(
        &mut self,
        pattern: &open_cypher::ast::Pattern,
        span: Span,
        rows: &mut Rows,
    ) -> Result<Expr> {
        let (outer, identity) = self.outer(rows, span)?;
        let matched = self.pattern(pattern, outer)?;
        self.count_back(identity, matched, false, span, rows)
    }

    /// Joins the count of `matched`'s rows per outer row (by `identity`) back to
    /// `rows`; returns the count (or whether it is above 0).
    fn count_back(
        &mut self,
        identity: Vec<String>,
        matched: Rows,
        counting: bool,
        span: Span,
        rows: &mut Rows,
    ) -> Result<Expr> {
        let aliases: Vec<String> = identity.iter().map(|_| self.fresh("outer")).collect();
        let count = self.fresh("matches");
        let counted = LogicalPlanBuilder::from(matched.plan)
            .aggregate(
                identity
                    .iter()
                    .zip(&aliases)
                    .map(|(name, alias)| column(name).alias(alias))
                    .collect::<Vec<_>>(),
                [datafusion::functions_aggregate::count::count_all().alias(&count)],
            )
            .and_then(LogicalPlanBuilder::build);
        let counted = self.df(span, counted)?;
        rows.plan = self.join_back(rows.plan.clone(), counted, &identity, &aliases, span)?;
        let total = f::coalesce(vec![column(&count), lit(0i64)]);
        Ok(if counting { total } else { total.gt(lit(0i64)) })
    }
}
