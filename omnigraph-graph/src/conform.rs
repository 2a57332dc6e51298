//! Columns as people's tools write them, conformed to a property's Arrow type. pandas
//! and pyarrow write `int64` and `double`, polars `large_string` and `string_view`,
//! categoricals are dictionary-encoded, and vectors arrive as lists: every column whose
//! values the property can hold loads, and a value it cannot hold is refused at its
//! row. The conversions (`docs/cli.md` lists them):
//!
//! - text: `Utf8`, `LargeUtf8`, `Utf8View` into `String`;
//! - integers of any width and sign into `Int32`, `Int64` (a value out of range is
//!   refused), `Float32` and `Float64`;
//! - `Float16`, `Float32`, `Float64` into `Float32` and `Float64` (a finite value too
//!   large for `Float32` is refused; NaN and infinities are kept, as given);
//! - timestamps of any unit, without a zone or in UTC, into `Timestamp` (microseconds,
//!   UTC; a value out of its range is refused);
//! - lists (`List`, `LargeList`, `FixedSizeList`) of such numbers into `Vector(n)`,
//!   when every vector holds exactly `n` of them;
//! - a dictionary-encoded column of any of these, unpacked first;
//! - CSV text, parsed into the property's type ([`parse_text`]).
//!
//! Anything else is refused by type, before any row is read.

use omnigraph_core::arrow_array::cast::AsArray;
use omnigraph_core::arrow_array::types::{Float32Type, Float64Type};
use omnigraph_core::arrow_array::{Array, ArrayRef};
use omnigraph_core::arrow_schema::{DataType, TimeUnit};

/// Why a column does not conform.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// No value of the column's type can be held (`expected ..., found ...`).
    Type(String),
    /// The value at `row` (of the column) cannot be held.
    Value { row: usize, message: String },
}

/// Whether a column of `from` may conform to `to` (its values are still checked).
pub(crate) fn conformable(from: &DataType, to: &DataType) -> bool {
    if from.equals_datatype(to) {
        return true;
    }
    match (from, to) {
        (DataType::Dictionary(_, values), _) => conformable(values, to),
        (DataType::LargeUtf8 | DataType::Utf8View, DataType::Utf8) => true,
        (from, DataType::Int32 | DataType::Int64 | DataType::Float32 | DataType::Float64)
            if from.is_integer() =>
        {
            true
        }
        (
            DataType::Float16 | DataType::Float32 | DataType::Float64,
            DataType::Float32 | DataType::Float64,
        ) => true,
        (DataType::Timestamp(_, zone), DataType::Timestamp(TimeUnit::Microsecond, Some(_))) => {
            zone.as_deref().is_none_or(is_utc)
        }
        (
            DataType::List(item) | DataType::LargeList(item) | DataType::FixedSizeList(item, _),
            DataType::FixedSizeList(target, _),
        ) => conformable(item.data_type(), target.data_type()),
        _ => false,
    }
}

fn is_utc(zone: &str) -> bool {
    matches!(zone, "UTC" | "utc" | "+00:00" | "Z" | "Etc/UTC")
}

/// `array` as a column of `to`; every value kept, or the first that cannot be held
/// refused at its row. A column already of `to` is returned as it is.
pub(crate) fn conform(array: &ArrayRef, to: &DataType) -> Result<ArrayRef, Refused> {
    let from = array.data_type();
    if from == to {
        return Ok(array.clone());
    }
    if !conformable(from, to) {
        return Err(Refused::Type(format!("expected {to}, found {from}")));
    }
    if let DataType::Dictionary(_, values) = from {
        let unpacked = cast(array, values)?;
        return conform(&unpacked, to);
    }
    if let DataType::FixedSizeList(item, size) = to
        && !from.equals_datatype(to)
    {
        return vector(array, item, *size);
    }
    // Same type up to nested field names, text, integers, timestamps: a cast that
    // makes a value it cannot hold null, which is then found and refused.
    let converted = cast(array, to)?;
    if let Some(row) = lost_row(array.as_ref(), converted.as_ref()) {
        return Err(Refused::Value {
            row,
            message: format!("{} does not fit in {to}", shown(array, row)),
        });
    }
    if matches!(to, DataType::Float32)
        && let Some(row) = overflowed_row(array.as_ref(), converted.as_ref())
    {
        return Err(Refused::Value {
            row,
            message: format!("{} is too large for Float32", shown(array, row)),
        });
    }
    Ok(converted)
}

/// A CSV column (text) parsed into `to`: numbers and timestamps as arrow's CSV reader
/// parses them, booleans as `true` or `false` in any case (arrow's cast would also
/// take `t`, `yes`, `on`, `1` and their prefixes: a typo there must not load as a
/// value); a value that does not parse is refused at its row. An empty field is null.
pub(crate) fn parse_text(array: &ArrayRef, to: &DataType) -> Result<ArrayRef, Refused> {
    if matches!(to, DataType::Utf8) {
        return Ok(array.clone());
    }
    if let (DataType::Boolean, Some(text)) = (to, array.as_string_opt::<i32>()) {
        return boolean(array, text);
    }
    // Floats are parsed wide, then narrowed as any float column is: a value too large
    // for Float32 is refused rather than made infinite.
    let parsed_as = match to {
        DataType::Float32 => DataType::Float64,
        other => other.clone(),
    };
    let parsed = cast(array, &parsed_as)?;
    if let Some(row) = lost_row(array.as_ref(), parsed.as_ref()) {
        return Err(Refused::Value {
            row,
            message: format!("expected {}, found {}", describe(to), shown(array, row)),
        });
    }
    conform(&parsed, to)
}

fn boolean(
    array: &ArrayRef,
    text: &omnigraph_core::arrow_array::StringArray,
) -> Result<ArrayRef, Refused> {
    let mut values = Vec::with_capacity(text.len());
    for (row, value) in text.iter().enumerate() {
        values.push(match value {
            None => None,
            Some(value) if value.eq_ignore_ascii_case("true") => Some(true),
            Some(value) if value.eq_ignore_ascii_case("false") => Some(false),
            Some(_) => {
                return Err(Refused::Value {
                    row,
                    message: format!(
                        "expected {}, found {}",
                        describe(&DataType::Boolean),
                        shown(array, row)
                    ),
                });
            }
        });
    }
    Ok(std::sync::Arc::new(
        omnigraph_core::arrow_array::BooleanArray::from(values),
    ))
}

/// What a value of `to` is, for a refusal.
fn describe(to: &DataType) -> String {
    match to {
        DataType::Boolean => "true or false".into(),
        DataType::Int32 | DataType::Int64 => format!("a whole number ({to})"),
        DataType::Float32 | DataType::Float64 => format!("a number ({to})"),
        DataType::Timestamp(..) => "a timestamp (RFC 3339)".into(),
        other => format!("a {other}"),
    }
}

fn cast(array: &ArrayRef, to: &DataType) -> Result<ArrayRef, Refused> {
    arrow::compute::cast_with_options(array, to, &arrow::compute::CastOptions::default())
        .map_err(|error| Refused::Type(format!("cannot take this column as {to}: {error}")))
}

/// The first row that held a value before a (safe) cast and none after it.
fn lost_row(before: &dyn Array, after: &dyn Array) -> Option<usize> {
    if after.null_count() == before.null_count() {
        return None;
    }
    (0..before.len()).find(|row| before.is_valid(*row) && after.is_null(*row))
}

/// The first row whose value was finite before a narrowing to Float32 and is not after.
fn overflowed_row(before: &dyn Array, after: &dyn Array) -> Option<usize> {
    let after = after.as_primitive_opt::<Float32Type>()?;
    let finite_before = |row: usize| match before.data_type() {
        DataType::Float64 => before.as_primitive::<Float64Type>().value(row).is_finite(),
        // Integers and narrower floats never overflow Float32.
        _ => false,
    };
    (0..after.len())
        .find(|row| after.is_valid(*row) && !after.value(*row).is_finite() && finite_before(*row))
}

/// The value at `row` as a user would write it.
fn shown(array: &ArrayRef, row: usize) -> String {
    let options = arrow::util::display::FormatOptions::default();
    match arrow::util::display::ArrayFormatter::try_new(array.as_ref(), &options) {
        Ok(formatter) => match array.data_type() {
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                format!("{:?}", formatter.value(row).to_string())
            }
            _ => formatter.value(row).to_string(),
        },
        Err(_) => format!("the value at row {row}"),
    }
}

/// A list's own values (a sliced list keeps the whole child array, and offsets into
/// it), and each row's `start..end` in them.
fn own_values<O: omnigraph_core::arrow_array::OffsetSizeTrait>(
    values: &ArrayRef,
    offsets: &[O],
) -> (ArrayRef, Vec<(usize, usize)>) {
    let first = offsets.first().map_or(0, |offset| offset.as_usize());
    let last = offsets.last().map_or(0, |offset| offset.as_usize());
    let bounds = offsets
        .windows(2)
        .map(|pair| (pair[0].as_usize() - first, pair[1].as_usize() - first))
        .collect();
    (values.slice(first, last - first), bounds)
}

/// A list column as `Vector(size)` of `item`s: every vector holds exactly `size`
/// numbers, each of which its item type can hold.
fn vector(
    array: &ArrayRef,
    item_field: &omnigraph_core::arrow_schema::FieldRef,
    size: i32,
) -> Result<ArrayRef, Refused> {
    let item = item_field.data_type();
    let expected = usize::try_from(size).unwrap_or(0);
    let (values, bounds): (ArrayRef, Vec<(usize, usize)>) = match array.data_type() {
        DataType::List(_) => {
            let list = array.as_list::<i32>();
            own_values(list.values(), list.value_offsets())
        }
        DataType::LargeList(_) => {
            let list = array.as_list::<i64>();
            own_values(list.values(), list.value_offsets())
        }
        DataType::FixedSizeList(_, given) => {
            let list = array.as_fixed_size_list();
            let given = usize::try_from(*given).unwrap_or(0);
            let bounds = (0..list.len())
                .map(|row| (row * given, (row + 1) * given))
                .collect();
            (list.values().clone(), bounds)
        }
        other => return Err(Refused::Type(format!("expected a list, found {other}"))),
    };
    if let Some(row) = (0..array.len())
        .find(|row| array.is_valid(*row) && bounds[*row].1 - bounds[*row].0 != expected)
    {
        let (start, end) = bounds[row];
        return Err(Refused::Value {
            row,
            message: format!("a vector of {expected} numbers (got {})", end - start),
        });
    }
    let row_of = |at: usize| {
        bounds
            .iter()
            .position(|(start, end)| (*start..*end).contains(&at))
    };
    let items = conform(&values, item).map_err(|refused| match refused {
        Refused::Value { row: at, message } => Refused::Value {
            row: row_of(at).unwrap_or(0),
            message,
        },
        other => other,
    })?;
    // The conformed items, laid out as the target's fixed-size rows (a null vector
    // keeps its place).
    let mut taken: Vec<u64> = Vec::with_capacity(array.len() * expected);
    for (row, (start, _)) in bounds.iter().enumerate() {
        for at in 0..expected {
            // A null vector's place is filled from its first item, or the first item
            // of all: its validity, below, hides it.
            let from = if array.is_valid(row) { start + at } else { 0 };
            taken.push(from as u64);
        }
    }
    let indices = omnigraph_core::arrow_array::UInt64Array::from(taken);
    let laid_out = if items.is_empty() {
        arrow::array::new_null_array(item, array.len() * expected)
    } else {
        arrow::compute::take(items.as_ref(), &indices, None)
            .map_err(|error| Refused::Type(format!("cannot lay out the vectors: {error}")))?
    };
    let vectors = arrow::array::FixedSizeListArray::try_new(
        item_field.clone(),
        size,
        laid_out,
        array.logical_nulls(),
    )
    .map_err(|error| Refused::Type(format!("cannot take the vectors: {error}")))?;
    Ok(std::sync::Arc::new(vectors))
}

#[cfg(test)]
mod tests {
    use super::*;
    use omnigraph_core::arrow_array::{
        DictionaryArray, Float64Array, Int64Array, LargeStringArray, StringArray, StringViewArray,
        UInt8Array, types::Int8Type,
    };
    use std::sync::Arc;

    #[test]
    fn integers_narrow_when_every_value_fits_and_refuse_the_first_that_does_not() {
        let wide: ArrayRef = Arc::new(Int64Array::from(vec![Some(1), None, Some(-7)]));
        let narrow = conform(&wide, &DataType::Int32).unwrap();
        assert_eq!(narrow.data_type(), &DataType::Int32);
        assert_eq!(narrow.null_count(), 1);
        let too_wide: ArrayRef = Arc::new(Int64Array::from(vec![1, 2, 3_000_000_000]));
        assert_eq!(
            conform(&too_wide, &DataType::Int32),
            Err(Refused::Value {
                row: 2,
                message: "3000000000 does not fit in Int32".into()
            })
        );
        let unsigned: ArrayRef = Arc::new(UInt8Array::from(vec![200]));
        assert!(conform(&unsigned, &DataType::Float32).is_ok());
    }

    #[test]
    fn text_of_every_kind_and_dictionaries_become_utf8() {
        for text in [
            Arc::new(LargeStringArray::from(vec!["a", "b"])) as ArrayRef,
            Arc::new(StringViewArray::from(vec!["a", "b"])) as ArrayRef,
            Arc::new(
                vec!["a", "b"]
                    .into_iter()
                    .collect::<DictionaryArray<Int8Type>>(),
            ) as ArrayRef,
        ] {
            let utf8 = conform(&text, &DataType::Utf8).unwrap();
            assert_eq!(utf8.as_string::<i32>().value(1), "b");
        }
        let numbers: ArrayRef = Arc::new(StringArray::from(vec!["1"]));
        assert!(matches!(
            conform(&numbers, &DataType::Int32),
            Err(Refused::Type(_))
        ));
    }

    #[test]
    fn doubles_narrow_to_float32_keeping_nan_and_refusing_what_overflows() {
        let doubles: ArrayRef = Arc::new(Float64Array::from(vec![1.5, f64::NAN, f64::INFINITY]));
        let floats = conform(&doubles, &DataType::Float32).unwrap();
        assert!(floats.as_primitive::<Float32Type>().value(1).is_nan());
        let huge: ArrayRef = Arc::new(Float64Array::from(vec![0.0, 1e300]));
        assert!(matches!(
            conform(&huge, &DataType::Float32),
            Err(Refused::Value { row: 1, .. })
        ));
    }

    #[test]
    fn a_sliced_list_conforms_its_own_rows_only() {
        use omnigraph_core::arrow_array::builder::{Float64Builder, ListBuilder};
        let mut builder = ListBuilder::new(Float64Builder::new());
        for row in [vec![1e300, 0.0], vec![1.0, 2.0], vec![3.0, 4.0], vec![5.0]] {
            builder.values().append_slice(&row);
            builder.append(true);
        }
        let whole: ArrayRef = Arc::new(builder.finish());
        // Rows 1 and 2 only: the huge value and the short vector are not theirs.
        let sliced = whole.slice(1, 2);
        let item = Arc::new(omnigraph_core::arrow_schema::Field::new(
            "item",
            DataType::Float32,
            true,
        ));
        let vectors = conform(&sliced, &DataType::FixedSizeList(item.clone(), 2)).unwrap();
        let values = vectors.as_fixed_size_list().values().clone();
        let values = values.as_primitive::<Float32Type>();
        assert_eq!(values.values().to_vec(), vec![1.0, 2.0, 3.0, 4.0]);
        // A slice names its own row at fault.
        assert!(matches!(
            conform(&whole.slice(2, 2), &DataType::FixedSizeList(item, 2)),
            Err(Refused::Value { row: 1, .. })
        ));
    }

    #[test]
    fn csv_text_parses_and_names_the_value_that_does_not() {
        let text: ArrayRef = Arc::new(StringArray::from(vec![Some("1.5"), None, Some("abc")]));
        assert_eq!(
            parse_text(&text, &DataType::Float64),
            Err(Refused::Value {
                row: 2,
                message: "expected a number (Float64), found \"abc\"".into()
            })
        );
        let fine: ArrayRef = Arc::new(StringArray::from(vec![Some("2"), None]));
        let parsed = parse_text(&fine, &DataType::Int64).unwrap();
        assert_eq!(parsed.null_count(), 1);
    }

    #[test]
    fn csv_booleans_are_true_or_false_in_any_case_and_nothing_else() {
        let text: ArrayRef = Arc::new(StringArray::from(vec![
            Some("true"),
            Some("FALSE"),
            None,
            Some("True"),
        ]));
        let parsed = parse_text(&text, &DataType::Boolean).unwrap();
        let parsed = parsed.as_boolean();
        assert_eq!(
            parsed.iter().collect::<Vec<_>>(),
            vec![Some(true), Some(false), None, Some(true)]
        );
        for typo in ["t", "yes", "on", "1", "fals", " true"] {
            let text: ArrayRef = Arc::new(StringArray::from(vec![Some("false"), Some(typo)]));
            assert_eq!(
                parse_text(&text, &DataType::Boolean),
                Err(Refused::Value {
                    row: 1,
                    message: format!("expected true or false, found {typo:?}"),
                }),
                "{typo}"
            );
        }
    }
}
