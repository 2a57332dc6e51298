//! A row's key rendered as text, and one Arrow cell as JSON: the one form that key
//! checks, key caches, messages and the adjacency artifact share. A reader of an
//! artifact compares keys by this text, so its writer and reader must render alike;
//! both sit above this crate.

use crate::arrow_array::Array;
use serde_json::Value;

/// One row's key, rendered for messages and lookups.
pub type RowKey = String;

/// A key as text: strings quoted, numbers bare, so `"1"` and `1` differ.
pub fn render_key(value: &Value) -> RowKey {
    value.to_string()
}

/// A text key rendered as [`render_key`] renders the JSON string: quoted, escaped as
/// serde_json escapes. Sized to fit: serde_json's writer starts at 128 bytes, which a
/// load paid once per row and kept for as long as it kept the key.
pub fn render_text_key(text: &str) -> RowKey {
    let mut key = String::with_capacity(text.len() + 2);
    push_text_key(&mut key, text);
    key.shrink_to_fit();
    key
}

/// Appends `text` rendered as [`render_text_key`] renders it.
pub fn push_text_key(out: &mut String, text: &str) {
    // serde_json escapes exactly these bytes; any other text is quoted as it is.
    if text
        .bytes()
        .any(|byte| byte < 0x20 || byte == b'"' || byte == b'\\')
    {
        out.push_str(
            &serde_json::to_string(text).unwrap_or_else(|_| render_key(&Value::from(text))),
        );
        return;
    }
    out.push('"');
    out.push_str(text);
    out.push('"');
}

/// The key in `column` at `row`, rendered as [`render_key`] renders its JSON value,
/// without making that value: a load renders one per row.
pub fn render_array_key(column: &dyn Array, row: usize) -> RowKey {
    let mut key = String::new();
    push_array_key(&mut key, column, row);
    key.shrink_to_fit();
    key
}

/// Appends the key in `column` at `row`, rendered as [`render_array_key`] renders it:
/// written in place, where a string per key was a third of rendering a load's keys.
pub fn push_array_key(out: &mut String, column: &dyn Array, row: usize) {
    use crate::arrow_array::cast::AsArray;
    use crate::arrow_array::types::{Int32Type, Int64Type};
    use crate::arrow_schema::DataType;
    use std::fmt::Write;
    if column.is_null(row) {
        out.push_str("null");
        return;
    }
    let written = match column.data_type() {
        DataType::Utf8 => {
            push_text_key(out, column.as_string::<i32>().value(row));
            Ok(())
        }
        DataType::Int32 => write!(out, "{}", column.as_primitive::<Int32Type>().value(row)),
        DataType::Int64 => write!(out, "{}", column.as_primitive::<Int64Type>().value(row)),
        _ => {
            out.push_str(&render_key(&json_value(column, row)));
            Ok(())
        }
    };
    written.expect("writing to a String does not fail");
}

/// The items of one list cell as a JSON array.
fn list_value(items: &dyn Array) -> Value {
    Value::from(
        (0..items.len())
            .map(|index| json_value(items, index))
            .collect::<Vec<_>>(),
    )
}

/// One cell as JSON: numbers as numbers, a timestamp as its microseconds, a vector or
/// list as an array, a struct as an object.
pub fn json_value(column: &dyn Array, row: usize) -> Value {
    use crate::arrow_array::cast::AsArray;
    use crate::arrow_array::types::{
        Float32Type, Float64Type, Int32Type, Int64Type, TimestampMicrosecondType, UInt32Type,
        UInt64Type,
    };
    use crate::arrow_schema::DataType;
    if column.is_null(row) {
        return Value::Null;
    }
    match column.data_type() {
        DataType::Utf8 => Value::from(column.as_string::<i32>().value(row)),
        DataType::Boolean => Value::from(column.as_boolean().value(row)),
        DataType::Int32 => Value::from(column.as_primitive::<Int32Type>().value(row)),
        DataType::Int64 => Value::from(column.as_primitive::<Int64Type>().value(row)),
        DataType::UInt32 => Value::from(column.as_primitive::<UInt32Type>().value(row)),
        DataType::UInt64 => Value::from(column.as_primitive::<UInt64Type>().value(row)),
        DataType::Float32 => Value::from(column.as_primitive::<Float32Type>().value(row) as f64),
        DataType::Float64 => Value::from(column.as_primitive::<Float64Type>().value(row)),
        DataType::Timestamp(_, _) => {
            Value::from(column.as_primitive::<TimestampMicrosecondType>().value(row))
        }
        DataType::LargeUtf8 => Value::from(column.as_string::<i64>().value(row)),
        DataType::Utf8View => Value::from(column.as_string_view().value(row)),
        DataType::FixedSizeList(_, _) => list_value(&column.as_fixed_size_list().value(row)),
        // Lists and structs a query builds (`collect`, a node returned whole).
        DataType::List(_) => list_value(&column.as_list::<i32>().value(row)),
        DataType::LargeList(_) => list_value(&column.as_list::<i64>().value(row)),
        DataType::Struct(fields) => {
            let values = column.as_struct();
            Value::Object(
                fields
                    .iter()
                    .zip(values.columns())
                    .map(|(field, child)| (field.name().clone(), json_value(child.as_ref(), row)))
                    .collect(),
            )
        }
        DataType::Null => Value::Null,
        other => Value::from(format!("<{other}>")),
    }
}
