//! A user's SQL filter, checked against a type's own columns before Lance sees it: the
//! error then names only the type's properties (never Lance's internal columns such as
//! `_rowaddr`) and never a source location inside Lance.

use crate::error::{InputLocation, OmniError, Result};
use crate::schema::TypeDef;
use arrow_schema::SchemaRef;
use datafusion::common::DFSchema;
use datafusion::logical_expr::ExprSchemable;
use datafusion::sql::sqlparser::ast::{BinaryOperator, Expr, Ident, visit_expressions};
use datafusion::sql::sqlparser::dialect::{Dialect, GenericDialect};
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use lance_datafusion::planner::Planner;
use std::ops::ControlFlow;

/// Checks a user's `filter` on rows of `type_def` before any read or write uses it:
/// `bad_input` naming `source` (the command or call), the filter and the type.
pub fn check_on_type(type_def: &TypeDef, filter: &str, source: &str) -> Result<()> {
    check_filter(filter, type_def.arrow_schema()).map_err(|message| {
        OmniError::bad_input(
            InputLocation::in_source(source)
                .type_name(type_def.name())
                .field("filter"),
            format!("filter `{filter}` on {}: {message}", type_def.name()),
        )
    })
}

/// Checks that `filter` parses and that every column it names is one of `columns`'
/// fields. The error is a message for the user, without Lance's internals.
pub fn check_filter(filter: &str, columns: SchemaRef) -> std::result::Result<(), String> {
    let parsed = check_syntax(filter)?;
    check_columns(&parsed, &columns)?;
    let planner = Planner::new(columns.clone());
    let expr = planner
        .parse_filter(filter)
        .map_err(|error| user_message(&error))?;
    let schema = DFSchema::try_from(columns).map_err(|error| error.to_string())?;
    expr.to_field(&schema).map_err(|error| error.to_string())?;
    Ok(())
}

/// The SQL dialect Lance reads filters in: the generic one, except that only a backtick
/// quotes a name (`"Bob"` is a string, as Lance takes it, not a column).
#[derive(Debug)]
struct FilterDialect;

impl Dialect for FilterDialect {
    fn dialect(&self) -> std::any::TypeId {
        GenericDialect {}.dialect()
    }

    fn is_identifier_start(&self, ch: char) -> bool {
        GenericDialect {}.is_identifier_start(ch)
    }

    fn is_identifier_part(&self, ch: char) -> bool {
        GenericDialect {}.is_identifier_part(ch)
    }

    fn is_delimited_identifier_start(&self, ch: char) -> bool {
        ch == '`'
    }

    fn supports_bitwise_shift_operators(&self) -> bool {
        GenericDialect {}.supports_bitwise_shift_operators()
    }
}

/// Parses `filter` on its own, so a syntax error's line and column are the user's (Lance
/// parses it inside a query of its own, whose text and offsets would leak).
fn check_syntax(filter: &str) -> std::result::Result<Expr, String> {
    let dialect = FilterDialect;
    let tokens = Tokenizer::new(&dialect, filter)
        .tokenize_with_location()
        .map_err(|error| error.to_string())?;
    let mut parser = Parser::new(&dialect).with_tokens_with_locations(tokens);
    let parsed = parser.parse_expr().map_err(|error| match error {
        ParserError::ParserError(message) | ParserError::TokenizerError(message) => message,
        ParserError::RecursionLimitExceeded => "the filter is nested too deeply".to_string(),
    })?;
    // One closing semicolon is allowed, as Lance allows it.
    let _ = parser.consume_token(&Token::SemiColon);
    let rest = parser.peek_token();
    if rest.token != Token::EOF {
        return Err(format!(
            "unexpected `{}` after the end of the expression at Line: {}, Column: {}",
            rest.token, rest.span.start.line, rest.span.start.column
        ));
    }
    Ok(parsed)
}

/// Finds the first plain name in `parsed` that is not one of `columns`, and says where
/// it is. An unquoted name matches regardless of case, as Lance resolves it.
fn check_columns(parsed: &Expr, columns: &SchemaRef) -> std::result::Result<(), String> {
    let known = |ident: &Ident| {
        columns
            .fields()
            .iter()
            .any(|field| match ident.quote_style {
                Some(_) => field.name() == &ident.value,
                None => field.name().eq_ignore_ascii_case(&ident.value),
            })
    };
    let unknown = visit_expressions(parsed, |expr| match expr {
        Expr::Identifier(ident) if !known(ident) => ControlFlow::Break(ident.clone()),
        _ => ControlFlow::Continue(()),
    });
    match unknown {
        ControlFlow::Break(ident) => Err(format!(
            "no property `{}` at Line: {}, Column: {}; the properties are {}",
            ident.value,
            ident.span.start.line,
            ident.span.start.column,
            columns
                .fields()
                .iter()
                .map(|field| field.name().as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// A literal a filter compares a type's key to: text (single- or double-quoted, as Lance
/// reads both) or an integer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyLiteral {
    /// A quoted string, as written (with `''` read as one quote).
    Text(String),
    /// A whole number, with its sign.
    Integer(i64),
}

/// The keys a filter pins on `key_column` of `columns`: when one of its top-level `AND`
/// terms is `key = literal` or `key IN (literals)`, every row it matches has one of those
/// keys. `None` when no term pins the key, or when a term is not read here exactly as
/// Lance reads it (a literal with a backslash, a name that fits two columns): the
/// caller then reads every row, so `None` is always safe.
pub fn keys_pinned(filter: &str, columns: &SchemaRef, key_column: &str) -> Option<Vec<KeyLiteral>> {
    let parsed = check_syntax(filter).ok()?;
    let names_key = |ident: &Ident| {
        let fits = |name: &str| match ident.quote_style {
            Some(_) => name == ident.value,
            None => name.eq_ignore_ascii_case(&ident.value),
        };
        fits(key_column)
            && columns
                .fields()
                .iter()
                .filter(|field| fits(field.name()))
                .count()
                == 1
    };
    let mut terms = vec![&parsed];
    // Each term is split or read once; a filter has fewer terms than characters.
    let terms_max = filter.len() + 1;
    let mut term = 0;
    while term < terms.len() {
        assert!(
            terms.len() <= terms_max,
            "a filter split into more terms than it has characters"
        );
        match terms[term] {
            Expr::Nested(inner) => terms[term] = &**inner,
            Expr::BinaryOp {
                left,
                op: BinaryOperator::And,
                right,
            } => {
                terms[term] = &**left;
                terms.push(&**right);
            }
            Expr::BinaryOp {
                left,
                op: BinaryOperator::Eq,
                right,
            } => {
                let pinned = match (left.as_ref(), right.as_ref()) {
                    (Expr::Identifier(ident), value) | (value, Expr::Identifier(ident))
                        if names_key(ident) =>
                    {
                        key_literal(value)
                    }
                    _ => None,
                };
                if let Some(pinned) = pinned {
                    return Some(vec![pinned]);
                }
                term += 1;
            }
            Expr::InList {
                expr,
                list,
                negated: false,
            } if matches!(expr.as_ref(), Expr::Identifier(ident) if names_key(ident)) => {
                let pinned: Option<Vec<KeyLiteral>> = list.iter().map(key_literal).collect();
                if pinned.is_some() {
                    return pinned;
                }
                term += 1;
            }
            _ => term += 1,
        }
    }
    None
}

/// The key literal `expr` is, when it is read here as Lance reads it.
fn key_literal(expr: &Expr) -> Option<KeyLiteral> {
    use datafusion::sql::sqlparser::ast::{UnaryOperator, Value};
    let (negative, value) = match expr {
        Expr::Value(value) => (false, &value.value),
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => match expr.as_ref() {
            Expr::Value(value) => (true, &value.value),
            _ => return None,
        },
        _ => return None,
    };
    match value {
        Value::SingleQuotedString(text) | Value::DoubleQuotedString(text)
            if !negative && !text.contains('\\') =>
        {
            Some(KeyLiteral::Text(text.clone()))
        }
        Value::Number(digits, false) if digits.bytes().all(|byte| byte.is_ascii_digit()) => {
            let number: i64 = digits.parse().ok()?;
            Some(KeyLiteral::Integer(if negative { -number } else { number }))
        }
        _ => None,
    }
}

/// A Lance error's own message, without the source location Lance appends.
fn user_message(error: &lance::Error) -> String {
    match error {
        lance::Error::InvalidInput { source, .. } => source.to_string(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_schema::{DataType, Field, Schema};
    use std::sync::Arc;

    fn columns() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Utf8, false),
            Field::new("age", DataType::Int32, true),
        ]))
    }

    #[test]
    fn a_filter_pins_the_key_only_where_every_row_it_matches_has_one_of_its_keys() {
        use KeyLiteral::{Integer, Text};
        let text = |keys: &[&str]| Some(keys.iter().map(|key| Text(key.to_string())).collect());
        let pinned = |filter: &str| keys_pinned(filter, &columns(), "id");
        assert_eq!(pinned("id = 'x'"), text(&["x"]));
        assert_eq!(pinned("'x' = id"), text(&["x"]));
        assert_eq!(pinned("`id` = \"x\""), text(&["x"]));
        assert_eq!(pinned("ID = 'it''s'"), text(&["it's"]));
        assert_eq!(pinned("id IN ('a', 'b')"), text(&["a", "b"]));
        assert_eq!(pinned("age > 3 AND (id = 'x' AND age < 9)"), text(&["x"]));
        assert_eq!(pinned("(age > 3) AND id IN ('a')"), text(&["a"]));
        for unpinned in [
            "age > 3",
            "id = 'x' OR id = 'y'",
            "id = 'x' OR age > 3",
            "NOT id = 'x'",
            "id NOT IN ('a')",
            "id <> 'x'",
            "lower(id) = 'x'",
            "id = age",
            "id IN ('a', age)",
            "id = 'a\\b'",
            "`ID` = 'x'",
            "id LIKE 'x%'",
            "not a filter (",
        ] {
            assert_eq!(pinned(unpinned), None, "{unpinned}");
        }
        // An integer key: only whole numbers.
        let numbered = |filter: &str| keys_pinned(filter, &columns(), "age");
        assert_eq!(numbered("age = 42"), Some(vec![Integer(42)]));
        assert_eq!(
            numbered("age IN (-5, 7)"),
            Some(vec![Integer(-5), Integer(7)])
        );
        assert_eq!(numbered("age = 4.2"), None);
        assert_eq!(numbered("age = 99999999999999999999"), None);
        // A name two columns answer to, unquoted, is never taken for the key.
        let twins = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Utf8, false),
            Field::new("ID", DataType::Utf8, true),
        ]));
        assert_eq!(keys_pinned("id = 'x'", &twins, "id"), None);
        assert_eq!(
            keys_pinned("`id` = 'x'", &twins, "id"),
            Some(vec![Text("x".into())])
        );
    }

    #[test]
    fn a_bad_filter_names_only_the_types_columns() {
        assert!(check_filter("age > 3 AND id = 'x'", columns()).is_ok());
        let unknown = check_filter("age > 1 AND zzzq = 1", columns()).unwrap_err();
        assert!(
            unknown.contains("`zzzq` at Line: 1, Column: 13"),
            "{unknown}"
        );
        assert!(unknown.contains("id, age"), "{unknown}");
        assert!(check_filter("AGE > 1 AND `id` = 'x' AND lower(id) = 'x'", columns()).is_ok());
        assert!(check_filter("`ID` = 'x'", columns()).is_err());
        // Lance reads a double-quoted word as a string, not a column.
        assert!(check_filter("id = \"x\" OR id IN (\"a\", \"b\")", columns()).is_ok());
        assert!(!unknown.contains("_row"), "{unknown}");
        assert!(!unknown.contains(".rs:"), "{unknown}");
        let broken = check_filter("age = ", columns()).unwrap_err();
        assert!(!broken.contains(".rs:"), "{broken}");
        // The position is the user's column, not one inside Lance's own wrapper query.
        let misplaced = check_filter("age = = 3", columns()).unwrap_err();
        assert!(misplaced.contains("Column: 7"), "{misplaced}");
        assert!(!misplaced.contains("SELECT"), "{misplaced}");
        assert!(check_filter("age = 3;", columns()).is_ok());
        // Lance would drop a LIMIT without a word: it is refused.
        assert!(check_filter("age = 3 LIMIT 1", columns()).is_err());
        let trailing = check_filter("age = 3 4", columns()).unwrap_err();
        assert!(
            trailing.contains("`4`") && trailing.contains("Column: 9"),
            "{trailing}"
        );
    }
}
