//! A user's SQL filter, checked against a type's own columns before Lance sees it: the
//! error then names only the type's properties (never Lance's internal columns such as
//! `_rowaddr`) and never a source location inside Lance.

use arrow_schema::SchemaRef;
use datafusion::common::DFSchema;
use datafusion::logical_expr::ExprSchemable;
use lance_datafusion::planner::Planner;

/// Checks that `filter` parses and that every column it names is one of `columns`'
/// fields. The error is a message for the user, without Lance's internals.
pub fn check_filter(filter: &str, columns: SchemaRef) -> Result<(), String> {
    let planner = Planner::new(columns.clone());
    let expr = planner
        .parse_filter(filter)
        .map_err(|error| user_message(&error))?;
    let schema = DFSchema::try_from(columns).map_err(|error| error.to_string())?;
    expr.to_field(&schema).map_err(|error| error.to_string())?;
    Ok(())
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
    fn a_bad_filter_names_only_the_types_columns() {
        assert!(check_filter("age > 3 AND id = 'x'", columns()).is_ok());
        let unknown = check_filter("zzzq = 1", columns()).unwrap_err();
        assert!(unknown.contains("zzzq"), "{unknown}");
        assert!(!unknown.contains("_row"), "{unknown}");
        assert!(!unknown.contains(".rs:"), "{unknown}");
        let broken = check_filter("age = ", columns()).unwrap_err();
        assert!(!broken.contains(".rs:"), "{broken}");
    }
}
