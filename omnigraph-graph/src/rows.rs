//! JSON objects to validated Arrow rows of one type.
//!
//! Every value is checked against the type's columns before anything is staged: a
//! missing key or required property, a wrong type, an unknown property, a vector of the
//! wrong length, a key given twice in one call. The first bad value fails the whole call
//! with `BadInput` naming the source, line (or row), type and field.

use omnigraph_core::arrow_array::builder::{
    BooleanBuilder, FixedSizeListBuilder, Float32Builder, Float64Builder, Int32Builder,
    Int64Builder, StringBuilder, TimestampMicrosecondBuilder,
};
use omnigraph_core::arrow_array::{Array, ArrayRef, RecordBatch};
use omnigraph_core::schema::{
    EDGE_DST_COLUMN, EDGE_ID_COLUMN, EDGE_SRC_COLUMN, PropertyType, TypeDef,
};
use omnigraph_core::{InputLocation, OmniError, Result, seams};
use serde_json::{Map, Value};
use std::collections::HashSet;
use std::sync::Arc;

/// Where a row came from, for error messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowSource {
    /// The file or argument (`people.jsonl`, `--json`), shared by the rows of a call.
    pub source: std::sync::Arc<str>,
    /// One-based line of a JSONL file; `None` for rows given in a call.
    pub line: Option<u64>,
    /// Zero-based position in the call.
    pub row: u64,
}

impl RowSource {
    /// Where this row is, naming its type and optionally a field.
    pub fn location(&self, type_name: &str, field: Option<&str>) -> InputLocation {
        let mut location = InputLocation::in_source(&*self.source).type_name(type_name);
        match self.line {
            Some(line) => location.line = Some(line),
            None => location = location.row(self.row),
        }
        if let Some(field) = field {
            location = location.field(field);
        }
        location
    }
}

/// Where each row of a batch came from: a span of rows of one source (a columnar file,
/// a call's Arrow rows), which a load of millions of rows states once rather than per
/// row; or one [`RowSource`] per row (JSONL lines, JSON objects).
#[derive(Clone, Debug)]
pub(crate) enum BatchSources {
    /// Rows `first_row..first_row + rows` of `source`, in order.
    Span {
        source: std::sync::Arc<str>,
        first_row: u64,
        rows: usize,
    },
    /// One source per row, in order.
    Each(Vec<RowSource>),
}

impl BatchSources {
    pub(crate) fn len(&self) -> usize {
        match self {
            BatchSources::Span { rows, .. } => *rows,
            BatchSources::Each(sources) => sources.len(),
        }
    }

    /// The name of row `at`'s source.
    pub(crate) fn name(&self, at: usize) -> &std::sync::Arc<str> {
        assert!(at < self.len(), "row {at} of a batch of {}", self.len());
        match self {
            BatchSources::Span { source, .. } => source,
            BatchSources::Each(sources) => &sources[at].source,
        }
    }

    /// Row `at`'s line (JSONL) and its position in the call.
    pub(crate) fn line_and_row(&self, at: usize) -> (Option<u64>, u64) {
        assert!(at < self.len(), "row {at} of a batch of {}", self.len());
        match self {
            BatchSources::Span { first_row, .. } => (None, first_row + at as u64),
            BatchSources::Each(sources) => (sources[at].line, sources[at].row),
        }
    }

    /// Row `at`'s source, to name it in an error.
    pub(crate) fn get(&self, at: usize) -> RowSource {
        let (line, row) = self.line_and_row(at);
        RowSource {
            source: self.name(at).clone(),
            line,
            row,
        }
    }
}

/// Fields a JSONL record may carry besides the type's columns.
pub(crate) const TYPE_FIELD: &str = "type";

/// A JSON object with where it came from: the input of [`rows_from_json`].
pub type SourcedObject = (RowSource, Map<String, Value>);

use crate::limits::QUOTED_BYTES_MAX;
pub use omnigraph_core::keys::RowKey;
pub(crate) use omnigraph_core::keys::{
    json_value, push_text_key, render_array_key, render_key, render_text_key,
};

/// A set of keys, hashed with a seeded fast hash: a load hashes each key several times,
/// and SipHash was a tenth of a Parquet load's time.
pub(crate) type KeySet = foldhash::HashSet<RowKey>;
/// A map from keys, hashed as [`KeySet`].
pub(crate) type KeyMap<V> = foldhash::HashMap<RowKey, V>;

/// Rendered keys of a batch's rows, in order, in one buffer: a load renders one per
/// row (and two more per edge), and a `String` each cost an allocation and a free.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyColumn {
    text: String,
    /// Where each key ends in `text`.
    ends: Vec<usize>,
}

impl KeyColumn {
    pub(crate) fn with_capacity(keys: usize) -> KeyColumn {
        KeyColumn {
            text: String::new(),
            ends: Vec::with_capacity(keys),
        }
    }

    /// The keys of every row of `column`, rendered as [`render_array_key`] renders
    /// them; the buffer is sized by the column's own text, never by one value's.
    pub(crate) fn of_array(column: &dyn Array) -> KeyColumn {
        use omnigraph_core::arrow_array::cast::AsArray;
        let mut keys = KeyColumn::with_capacity(column.len());
        if let Some(text) = column.as_string_opt::<i32>() {
            let offsets = text.value_offsets();
            let (first, last) = (offsets[0], offsets[offsets.len() - 1]);
            let given = usize::try_from(last - first).unwrap_or(0);
            // Two quotes per key; escapes grow the buffer as they come.
            keys.text.reserve(given + 2 * column.len());
        }
        for row in 0..column.len() {
            keys.push_array_key(column, row);
        }
        keys
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether it holds no key.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The key of row `at`.
    pub fn get(&self, at: usize) -> &str {
        let start = if at == 0 { 0 } else { self.ends[at - 1] };
        &self.text[start..self.ends[at]]
    }

    /// The keys in row order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        (0..self.len()).map(|at| self.get(at))
    }

    /// The bytes of all keys.
    pub(crate) fn text_bytes(&self) -> usize {
        self.text.len()
    }

    /// Appends a rendered key.
    pub(crate) fn push(&mut self, key: &str) {
        self.text.push_str(key);
        self.ends.push(self.text.len());
    }

    /// Appends the key in `column` at `row`, rendered as [`render_array_key`] renders it.
    pub(crate) fn push_array_key(&mut self, column: &dyn Array, row: usize) {
        omnigraph_core::keys::push_array_key(&mut self.text, column, row);
        self.ends.push(self.text.len());
    }
}

impl<'a> FromIterator<&'a str> for KeyColumn {
    fn from_iter<I: IntoIterator<Item = &'a str>>(keys: I) -> KeyColumn {
        let mut column = KeyColumn::default();
        for key in keys {
            column.push(key);
        }
        column
    }
}

/// The integer endpoints of a batch of edges, one per row (an endpoint is never null):
/// checked by their numbers, and rendered as keys (the number's digits, as
/// [`render_array_key`] renders them) only when a number is not known.
pub(crate) enum EndNumbers<'a> {
    Int64(&'a [i64]),
    Int32(&'a [i32]),
}

impl<'a> EndNumbers<'a> {
    /// The numbers of an endpoint column, when its keys are integers without nulls.
    pub(crate) fn of(column: &'a dyn Array) -> Option<EndNumbers<'a>> {
        use omnigraph_core::arrow_array::cast::AsArray;
        use omnigraph_core::arrow_array::types::{Int32Type, Int64Type};
        if column.null_count() > 0 {
            return None;
        }
        match column.data_type() {
            omnigraph_core::arrow_schema::DataType::Int64 => Some(EndNumbers::Int64(
                column.as_primitive::<Int64Type>().values(),
            )),
            omnigraph_core::arrow_schema::DataType::Int32 => Some(EndNumbers::Int32(
                column.as_primitive::<Int32Type>().values(),
            )),
            _ => None,
        }
    }

    pub(crate) fn get(&self, at: usize) -> i64 {
        match self {
            EndNumbers::Int64(numbers) => numbers[at],
            EndNumbers::Int32(numbers) => i64::from(numbers[at]),
        }
    }
}

/// Rows of one type, validated, with their keys in order.
#[derive(Clone, Debug)]
pub struct TypedRows {
    /// The rows as one batch with the table's Arrow schema.
    pub batch: RecordBatch,
    /// Each row's key, rendered (`"p1"` or `42`).
    pub keys: KeyColumn,
    /// For an edge type: each row's `src` and `dst` endpoint keys, rendered; empty for
    /// a node type, and for an end whose keys are integers without nulls
    /// (`EndNumbers`), which the load checks by their numbers in `batch`.
    pub endpoints: [KeyColumn; 2],
    /// Whether every key is an edge id minted here: new ids, unique by construction,
    /// that no table or call can hold already.
    pub keys_minted: bool,
}

/// The refusal of a row of `type_def` (from `source`) that lacks the required
/// `column`: the one wording of both JSON paths.
pub(crate) fn missing(type_def: &TypeDef, source: &RowSource, column: &str) -> OmniError {
    let what = if column == type_def.key_column() {
        "the key"
    } else {
        "a required property"
    };
    OmniError::bad_input(
        source.location(type_def.name(), Some(column)),
        format!("{column} is {what} of {} and is missing", type_def.name()),
    )
}

/// Converts JSON objects to rows of `type_def`, checking every value.
pub fn rows_from_json(type_def: &TypeDef, objects: &[SourcedObject]) -> Result<TypedRows> {
    let columns = type_def.columns();
    let type_name = type_def.name();
    let key_column = type_def.key_column();
    let mut seen_keys: HashSet<RowKey> = HashSet::new();
    let mut keys = KeyColumn::with_capacity(objects.len());
    let mut endpoints = [KeyColumn::default(), KeyColumn::default()];
    let mut builders: Vec<ColumnBuilder> = columns
        .iter()
        .map(|column| ColumnBuilder::new(column.data_type, objects.len()))
        .collect();
    for (source, object) in objects {
        for name in object.keys() {
            if name != TYPE_FIELD && !columns.iter().any(|column| &column.name == name) {
                return Err(OmniError::bad_input(
                    source.location(type_name, Some(name)),
                    format!("{type_name} has no property {name}"),
                ));
            }
        }
        for (column, builder) in columns.iter().zip(builders.iter_mut()) {
            let value = object.get(&column.name).unwrap_or(&Value::Null);
            if value.is_null() && !column.nullable {
                return Err(missing(type_def, source, &column.name));
            }
            builder.push(value).map_err(|expected| {
                OmniError::bad_input(
                    source.location(type_name, Some(&column.name)),
                    format!("expected {expected}, found {}", describe(value)),
                )
            })?;
        }
        let key = render_key(&object[key_column]);
        if !seen_keys.insert(key.clone()) {
            return Err(OmniError::bad_input(
                source.location(type_name, Some(key_column)),
                format!("key {key} of {type_name} is given more than once"),
            ));
        }
        keys.push(&key);
        if !type_def.is_node() {
            endpoints[0].push(&render_key(&object["src"]));
            endpoints[1].push(&render_key(&object["dst"]));
        }
    }
    let arrays: Vec<ArrayRef> = builders.into_iter().map(ColumnBuilder::finish).collect();
    let batch = RecordBatch::try_new(type_def.arrow_schema(), arrays)
        .map_err(|error| OmniError::internal(format!("rows of {type_name}: {error}")))?;
    Ok(TypedRows {
        batch,
        keys,
        endpoints,
        keys_minted: false,
    })
}

/// What Arrow rows of an edge type without an id get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MissingEdgeIds {
    /// A minted id (append).
    Mint,
    /// A refusal: a merge matches edges by id (as a JSON merge load does).
    Refuse,
}

/// Checks Arrow rows of `type_def` column by column and puts them in the table's
/// schema, never through JSON (a float NaN stays NaN): every column is one of the
/// type's properties, once, with its Arrow type; a missing nullable property is null, a
/// required one may hold no null, a vector holds no null or NaN value, and the keys
/// are distinct. `first_row` numbers the rows of `source` in errors.
pub fn rows_from_batch(
    type_def: &TypeDef,
    batch: &RecordBatch,
    source: &str,
    first_row: u64,
    missing_ids: MissingEdgeIds,
) -> Result<TypedRows> {
    use omnigraph_core::arrow_array::{StringArray, new_null_array};
    let type_name = type_def.name();
    let table_schema = type_def.arrow_schema();
    let rows = batch.num_rows();
    let at = |row: usize, field: &str| {
        RowSource {
            source: source.into(),
            line: None,
            row: first_row + row as u64,
        }
        .location(type_name, Some(field))
    };
    let mut named = HashSet::new();
    for field in batch.schema().fields() {
        if !named.insert(field.name().clone()) {
            return Err(OmniError::bad_input(
                at(0, field.name()),
                format!("the column {} is given twice", field.name()),
            ));
        }
        let expected = table_schema.field_with_name(field.name()).map_err(|_| {
            OmniError::bad_input(
                at(0, field.name()),
                format!("{type_name} has no property {}", field.name()),
            )
        })?;
        // A column whose values the property can hold (see `conform`); each value is
        // checked below.
        if !crate::conform::conformable(field.data_type(), expected.data_type()) {
            return Err(OmniError::bad_input(
                at(0, field.name()),
                format!(
                    "expected {}, found {}",
                    expected.data_type(),
                    field.data_type()
                ),
            ));
        }
    }
    let mint_ids = !type_def.is_node();
    let refuse_missing_id = |row: usize| {
        OmniError::bad_input(
            at(row, EDGE_ID_COLUMN),
            format!(
                "a merge load matches {type_name} edges by their {EDGE_ID_COLUMN}, and this one has none: give it one, or load with --mode append (which mints ids)"
            ),
        )
    };
    let mut keys_minted = false;
    let mut arrays: Vec<ArrayRef> = Vec::with_capacity(table_schema.fields().len());
    for field in table_schema.fields() {
        let name = field.name().as_str();
        let given = batch
            .column_by_name(name)
            .map(|given| crate::conform::conform(given, field.data_type()))
            .transpose()
            .map_err(|refused| match refused {
                crate::conform::Refused::Type(message) => {
                    OmniError::bad_input(at(0, name), message)
                }
                crate::conform::Refused::Value { row, message } => {
                    OmniError::bad_input(at(row, name), message)
                }
            })?;
        let array = match given {
            Some(array) if mint_ids && name == EDGE_ID_COLUMN && array.null_count() > 0 => {
                if missing_ids == MissingEdgeIds::Refuse {
                    let row = (0..rows).find(|row| array.is_null(*row)).unwrap_or(0);
                    return Err(refuse_missing_id(row));
                }
                let ids = array
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .ok_or_else(|| {
                        OmniError::internal(format!("the {name} column of {type_name} is not text"))
                    })?;
                let minted: StringArray = (0..rows)
                    .map(|row| {
                        Some(if ids.is_null(row) {
                            seams::new_id()
                        } else {
                            ids.value(row).to_string()
                        })
                    })
                    .collect();
                Arc::new(minted) as ArrayRef
            }
            Some(array) => array,
            None if mint_ids && name == EDGE_ID_COLUMN && rows > 0 => {
                if missing_ids == MissingEdgeIds::Refuse {
                    return Err(refuse_missing_id(0));
                }
                keys_minted = true;
                Arc::new(seams::new_ids(rows)) as ArrayRef
            }
            None => new_null_array(field.data_type(), rows),
        };
        if !field.is_nullable()
            && let Some(row) = (0..rows).find(|row| array.is_null(*row))
        {
            let what = if name == type_def.key_column() {
                "the key"
            } else {
                "a required property"
            };
            return Err(OmniError::bad_input(
                at(row, name),
                format!("{name} is {what} of {type_name} and is missing"),
            ));
        }
        if let Some(row) = bad_vector_row(array.as_ref()) {
            return Err(OmniError::bad_input(
                at(row, name),
                format!("{name} holds a null or NaN number in its vector"),
            ));
        }
        arrays.push(array);
    }
    let batch = RecordBatch::try_new(table_schema, arrays)
        .map_err(|error| OmniError::internal(format!("rows of {type_name}: {error}")))?;
    let column = |name: &str| {
        batch
            .column_by_name(name)
            .cloned()
            .ok_or_else(|| OmniError::internal(format!("{type_name} has no column {name}")))
    };
    let key_column = column(type_def.key_column())?;
    let keys = KeyColumn::of_array(key_column.as_ref());
    // A key given twice, in this batch or an earlier one, is refused at its row by the
    // call's key set, which every key passes through.
    let mut endpoints = [KeyColumn::default(), KeyColumn::default()];
    if !type_def.is_node() {
        for (ends, name) in endpoints.iter_mut().zip([EDGE_SRC_COLUMN, EDGE_DST_COLUMN]) {
            let column = column(name)?;
            // Integer ends are rendered only where their numbers are not known: a
            // string per endpoint was a fifth of a large edge load.
            if EndNumbers::of(column.as_ref()).is_none() {
                *ends = KeyColumn::of_array(column.as_ref());
            }
        }
    }
    Ok(TypedRows {
        batch,
        keys,
        endpoints,
        keys_minted,
    })
}

/// The first row of a vector column whose vector holds a null or NaN number (an index
/// cannot train on it); `None` for other columns.
fn bad_vector_row(array: &dyn Array) -> Option<usize> {
    use omnigraph_core::arrow_array::cast::AsArray;
    use omnigraph_core::arrow_array::types::Float32Type;
    let list = array.as_fixed_size_list_opt()?;
    let values = list.values().as_primitive_opt::<Float32Type>()?;
    let size = usize::try_from(list.value_length()).ok()?;
    (0..list.len()).find(|row| {
        list.is_valid(*row)
            && (row * size..(row + 1) * size)
                .any(|at| values.is_null(at) || values.value(at).is_nan())
    })
}

/// The SQL literal of a caller's key for `type_def`'s key column, checked against the
/// key's type first: a key never reaches a filter as text it was not typed as.
pub(crate) fn key_filter_literal(type_def: &TypeDef, key: &Value) -> Result<String> {
    let key_type = type_def.key_type();
    let fits = match key_type {
        PropertyType::String => key.is_string(),
        PropertyType::Int32 => key.as_i64().is_some_and(|n| i32::try_from(n).is_ok()),
        PropertyType::Int64 | PropertyType::Timestamp => key.as_i64().is_some(),
        _ => false,
    };
    if !fits {
        return Err(OmniError::bad_input(
            InputLocation::in_source("key")
                .type_name(type_def.name())
                .field(type_def.key_column()),
            format!(
                "the key of {} is {key_type:?}; {} is not",
                type_def.name(),
                describe(key)
            ),
        ));
    }
    Ok(key_literal(&render_key(key), key_type))
}

/// `column IN (...)`: a SQL filter for rendered keys of a column of `data_type`.
pub(crate) fn key_in_filter<'a>(
    column: &str,
    keys: impl IntoIterator<Item = &'a str>,
    data_type: PropertyType,
) -> String {
    let literals: Vec<String> = keys
        .into_iter()
        .map(|key| key_literal(key, data_type))
        .collect();
    format!("`{column}` IN ({})", literals.join(", "))
}

/// A SQL literal for a rendered key of a column of `data_type`.
pub(crate) fn key_literal(key: &str, data_type: PropertyType) -> String {
    match data_type {
        PropertyType::String => {
            let text: String = serde_json::from_str(key).unwrap_or_else(|_| key.to_string());
            format!("'{}'", text.replace('\'', "''"))
        }
        _ => key.to_string(),
    }
}

fn describe(value: &Value) -> String {
    describe_found(&Found::of(value))
}

/// What a JSON value is, as much as a message about it says.
pub(crate) enum Found<'a> {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(&'a str),
    Array(usize),
    Object,
}

impl<'a> Found<'a> {
    fn of(value: &'a Value) -> Found<'a> {
        match value {
            Value::Null => Found::Null,
            Value::Bool(flag) => Found::Bool(*flag),
            Value::Number(number) => Found::Number(number.clone()),
            Value::String(text) => Found::String(text),
            Value::Array(items) => Found::Array(items.len()),
            Value::Object(_) => Found::Object,
        }
    }
}

pub(crate) fn describe_found(found: &Found<'_>) -> String {
    match found {
        Found::Null => "null".into(),
        Found::Bool(flag) => format!("a boolean ({flag})"),
        Found::Number(number) => format!("a number ({number})"),
        Found::String(text) if text.len() > QUOTED_BYTES_MAX => {
            // Cut at a character boundary: a byte index inside a character panics.
            let cut = (0..=QUOTED_BYTES_MAX)
                .rev()
                .find(|at| text.is_char_boundary(*at))
                .unwrap_or(0);
            format!("a string ({:?}…)", &text[..cut])
        }
        Found::String(text) => format!("a string ({})", Value::String((*text).to_string())),
        Found::Array(items) => format!("an array of {items} items"),
        Found::Object => "an object".into(),
    }
}

/// `number` as a Float32, or `None` when it is too large for one (it would become an
/// infinity: JSON has none, so it is refused, not stored). Too small a number becomes 0
/// or a subnormal, as any float parser rounds it.
fn narrow_to_f32(number: f64) -> Option<f32> {
    let narrowed = number as f32;
    narrowed.is_finite().then_some(narrowed)
}

/// The Arrow columns for a type, built value by value.
pub(crate) enum ColumnBuilder {
    String(StringBuilder),
    Bool(BooleanBuilder),
    Int32(Int32Builder),
    Int64(Int64Builder),
    Float32(Float32Builder),
    Float64(Float64Builder),
    Timestamp(TimestampMicrosecondBuilder),
    Vector(FixedSizeListBuilder<Float32Builder>, u32),
}

impl ColumnBuilder {
    pub(crate) fn new(data_type: PropertyType, capacity: usize) -> ColumnBuilder {
        match data_type {
            PropertyType::String => {
                ColumnBuilder::String(StringBuilder::with_capacity(capacity, capacity * 16))
            }
            PropertyType::Bool => ColumnBuilder::Bool(BooleanBuilder::with_capacity(capacity)),
            PropertyType::Int32 => ColumnBuilder::Int32(Int32Builder::with_capacity(capacity)),
            PropertyType::Int64 => ColumnBuilder::Int64(Int64Builder::with_capacity(capacity)),
            PropertyType::Float32 => {
                ColumnBuilder::Float32(Float32Builder::with_capacity(capacity))
            }
            PropertyType::Float64 => {
                ColumnBuilder::Float64(Float64Builder::with_capacity(capacity))
            }
            PropertyType::Timestamp => ColumnBuilder::Timestamp(
                TimestampMicrosecondBuilder::with_capacity(capacity).with_timezone("UTC"),
            ),
            PropertyType::Vector(dimension) => ColumnBuilder::Vector(
                FixedSizeListBuilder::with_capacity(
                    Float32Builder::new(),
                    dimension as i32,
                    capacity,
                ),
                dimension,
            ),
        }
    }

    /// Appends one value; on a mismatch, returns what was expected.
    fn push(&mut self, value: &Value) -> std::result::Result<(), String> {
        match value {
            Value::Null => {
                self.push_null();
                Ok(())
            }
            Value::Bool(flag) => self.push_bool(*flag),
            Value::Number(number) => self.push_number(number),
            Value::String(text) => self.push_str(text),
            Value::Array(items) => {
                let numbers: Vec<Option<f64>> = items.iter().map(Value::as_f64).collect();
                self.push_vector(&numbers)
            }
            Value::Object(_) => Err(self.expected()),
        }
    }

    /// What this column takes, for a message about a value it cannot.
    pub(crate) fn expected(&self) -> String {
        match self {
            ColumnBuilder::String(_) => "a string".into(),
            ColumnBuilder::Bool(_) => "a boolean".into(),
            ColumnBuilder::Int32(_) => "an integer (Int32)".into(),
            ColumnBuilder::Int64(_) => "an integer (Int64)".into(),
            ColumnBuilder::Float32(_) => "a number (Float32)".into(),
            ColumnBuilder::Float64(_) => "a number (Float64)".into(),
            ColumnBuilder::Timestamp(_) => "a timestamp (microseconds since the epoch)".into(),
            ColumnBuilder::Vector(_, dimension) => format!("a vector of {dimension} numbers"),
        }
    }

    /// Appends a null (a vector: a null list of null numbers).
    pub(crate) fn push_null(&mut self) {
        match self {
            ColumnBuilder::String(builder) => builder.append_null(),
            ColumnBuilder::Bool(builder) => builder.append_null(),
            ColumnBuilder::Int32(builder) => builder.append_null(),
            ColumnBuilder::Int64(builder) => builder.append_null(),
            ColumnBuilder::Float32(builder) => builder.append_null(),
            ColumnBuilder::Float64(builder) => builder.append_null(),
            ColumnBuilder::Timestamp(builder) => builder.append_null(),
            ColumnBuilder::Vector(builder, dimension) => {
                for _ in 0..*dimension {
                    builder.values().append_null();
                }
                builder.append(false);
            }
        }
    }

    pub(crate) fn push_bool(&mut self, flag: bool) -> std::result::Result<(), String> {
        match self {
            ColumnBuilder::Bool(builder) => builder.append_value(flag),
            _ => return Err(self.expected()),
        }
        Ok(())
    }

    pub(crate) fn push_str(&mut self, text: &str) -> std::result::Result<(), String> {
        match self {
            ColumnBuilder::String(builder) => builder.append_value(text),
            _ => return Err(self.expected()),
        }
        Ok(())
    }

    /// A JSON number: an integer column takes it only as an integer (`1.0` is not one),
    /// a float column any number.
    pub(crate) fn push_number(
        &mut self,
        number: &serde_json::Number,
    ) -> std::result::Result<(), String> {
        match self {
            ColumnBuilder::Int32(builder) => match number.as_i64() {
                Some(number) => builder.append_value(
                    i32::try_from(number).map_err(|_| "an Int32 (out of range)".to_string())?,
                ),
                None => return Err(self.expected()),
            },
            ColumnBuilder::Int64(builder) => match number.as_i64() {
                Some(number) => builder.append_value(number),
                None => return Err(self.expected()),
            },
            ColumnBuilder::Float32(builder) => match number.as_f64() {
                Some(number) => builder.append_value(
                    narrow_to_f32(number).ok_or_else(|| "a Float32 (out of range)".to_string())?,
                ),
                None => return Err(self.expected()),
            },
            ColumnBuilder::Float64(builder) => match number.as_f64() {
                Some(number) => builder.append_value(number),
                None => return Err(self.expected()),
            },
            ColumnBuilder::Timestamp(builder) => match number.as_i64() {
                Some(micros) => builder.append_value(micros),
                None => return Err(self.expected()),
            },
            _ => return Err(self.expected()),
        }
        Ok(())
    }

    /// A JSON array, given as its items read as numbers (`None` for an item that is
    /// not one): only a vector column of its length takes it.
    pub(crate) fn push_vector(&mut self, items: &[Option<f64>]) -> std::result::Result<(), String> {
        let ColumnBuilder::Vector(builder, dimension) = self else {
            return Err(self.expected());
        };
        if items.len() != *dimension as usize {
            return Err(format!(
                "a vector of {dimension} numbers (got {})",
                items.len()
            ));
        }
        if items.iter().any(Option::is_none) {
            return Err(format!("a vector of {dimension} numbers"));
        }
        let narrowed: Option<Vec<f32>> =
            items.iter().flatten().map(|n| narrow_to_f32(*n)).collect();
        let narrowed = narrowed
            .ok_or_else(|| format!("a vector of {dimension} Float32 numbers (out of range)"))?;
        for number in narrowed {
            builder.values().append_value(number);
        }
        builder.append(true);
        Ok(())
    }

    pub(crate) fn finish(self) -> ArrayRef {
        match self {
            ColumnBuilder::String(mut builder) => Arc::new(builder.finish()),
            ColumnBuilder::Bool(mut builder) => Arc::new(builder.finish()),
            ColumnBuilder::Int32(mut builder) => Arc::new(builder.finish()),
            ColumnBuilder::Int64(mut builder) => Arc::new(builder.finish()),
            ColumnBuilder::Float32(mut builder) => Arc::new(builder.finish()),
            ColumnBuilder::Float64(mut builder) => Arc::new(builder.finish()),
            ColumnBuilder::Timestamp(mut builder) => Arc::new(builder.finish()),
            ColumnBuilder::Vector(mut builder, _) => Arc::new(builder.finish()),
        }
    }
}

/// Rows as JSON objects, column by column.
pub fn batches_to_json(batches: &[RecordBatch]) -> Vec<Map<String, Value>> {
    let mut out = Vec::new();
    for batch in batches {
        let schema = batch.schema();
        for row in 0..batch.num_rows() {
            let mut object = Map::new();
            for (field, column) in schema.fields().iter().zip(batch.columns()) {
                object.insert(field.name().clone(), json_value(column.as_ref(), row));
            }
            out.push(object);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use omnigraph_core::ErrorKind;
    use omnigraph_core::schema::parse;

    const SCHEMA: &str =
        "node Person { id: String @key, name: String, age: Int32?, v: Vector(3)?, at: Timestamp? }
        node Company { id: Int64 @key }
        edge WorksAt: Person -> Company { since: Int32? }";

    fn objects(lines: &[&str]) -> Vec<(RowSource, Map<String, Value>)> {
        lines
            .iter()
            .enumerate()
            .map(|(index, line)| {
                (
                    RowSource {
                        source: "people.jsonl".into(),
                        line: Some(index as u64 + 1),
                        row: index as u64,
                    },
                    serde_json::from_str(line).unwrap(),
                )
            })
            .collect()
    }

    fn error_of(type_name: &str, lines: &[&str]) -> String {
        let catalog = parse("s.pg", SCHEMA).unwrap();
        let error = rows_from_json(catalog.get(type_name).unwrap(), &objects(lines)).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::BadInput, "{error}");
        error.to_string()
    }

    #[test]
    fn valid_rows_become_a_batch_with_the_table_schema() {
        let catalog = parse("s.pg", SCHEMA).unwrap();
        let rows = rows_from_json(
            catalog.get("Person").unwrap(),
            &objects(&[
                r#"{"type":"Person","id":"p1","name":"Ada","age":36,"v":[1,2,3],"at":1700000000000000}"#,
                r#"{"id":"p2","name":"Bob"}"#,
            ]),
        )
        .unwrap();
        assert_eq!(rows.batch.num_rows(), 2);
        assert_eq!(
            rows.batch.schema(),
            catalog.get("Person").unwrap().arrow_schema()
        );
        assert_eq!(rows.keys.iter().collect::<Vec<_>>(), ["\"p1\"", "\"p2\""]);
        assert_eq!(rows.batch.column(2).null_count(), 1);

        let edges = rows_from_json(
            catalog.get("WorksAt").unwrap(),
            &objects(&[r#"{"type":"WorksAt","id":"e1","src":"p1","dst":7,"since":2020}"#]),
        )
        .unwrap();
        assert_eq!(edges.endpoints[0].iter().collect::<Vec<_>>(), ["\"p1\""]);
        assert_eq!(edges.endpoints[1].iter().collect::<Vec<_>>(), ["7"]);
    }

    #[test]
    fn each_kind_of_bad_value_names_line_type_and_field() {
        let message = error_of("Person", &[r#"{"id":"p1","name":"A"}"#, r#"{"name":"B"}"#]);
        assert!(
            message.contains("people.jsonl, line 2, type Person, field id"),
            "{message}"
        );
        assert!(message.contains("the key"), "{message}");
        let message = error_of("Person", &[r#"{"id":"p1"}"#]);
        assert!(
            message.contains("field name") && message.contains("required"),
            "{message}"
        );
        let message = error_of("Person", &[r#"{"id":"p1","name":"A","age":"old"}"#]);
        assert!(
            message.contains("field age: expected an integer (Int32), found a string"),
            "{message}"
        );
        let message = error_of("Person", &[r#"{"id":"p1","name":"A","age":99999999999}"#]);
        assert!(message.contains("out of range"), "{message}");
        let message = error_of("Person", &[r#"{"id":"p1","name":"A","shoe":42}"#]);
        assert!(
            message.contains("field shoe") && message.contains("no property shoe"),
            "{message}"
        );
        let message = error_of("Person", &[r#"{"id":"p1","name":"A","v":[1,2]}"#]);
        assert!(
            message.contains("a vector of 3 numbers (got 2)"),
            "{message}"
        );
        let message = error_of(
            "Person",
            &[r#"{"id":"p1","name":"A"}"#, r#"{"id":"p1","name":"B"}"#],
        );
        assert!(
            message.contains("line 2") && message.contains("more than once"),
            "{message}"
        );
        let message = error_of("WorksAt", &[r#"{"id":"e1","src":"p1"}"#]);
        assert!(message.contains("field dst"), "{message}");
        let message = error_of("Company", &[r#"{"id":"7"}"#]);
        assert!(message.contains("expected an integer (Int64)"), "{message}");
    }

    #[test]
    fn a_long_string_in_the_wrong_column_is_described_without_splitting_a_character() {
        // 39 ASCII bytes, then a character of two bytes across byte 40.
        let text = format!("{}é and more text after it", "x".repeat(39));
        let line = format!(r#"{{"id":"p1","name":"A","age":"{text}"}}"#);
        let message = error_of("Person", &[&line]);
        assert!(message.contains("expected an integer (Int32)"), "{message}");
        assert!(message.contains("xxxx"), "{message}");
    }

    #[test]
    fn keys_render_from_arrays_as_from_their_json_values() {
        use omnigraph_core::arrow_array::{Int32Array, Int64Array, StringArray};
        let texts = StringArray::from(vec![
            Some("p1"),
            Some("o\"q\\é\n"),
            None,
            Some("\u{7f}\u{1f}é\t"),
            Some(""),
            Some("plain é ü 中"),
        ]);
        let small = Int32Array::from(vec![Some(-7), Some(i32::MAX), None]);
        let large = Int64Array::from(vec![Some(i64::MIN), Some(42), None]);
        for column in [&texts as &dyn Array, &small, &large] {
            let mut pushed = KeyColumn::default();
            for row in 0..column.len() {
                assert_eq!(
                    render_array_key(column, row),
                    render_key(&json_value(column, row)),
                    "{column:?} row {row}"
                );
                pushed.push_array_key(column, row);
            }
            for row in 0..column.len() {
                assert_eq!(
                    pushed.get(row),
                    render_key(&json_value(column, row)),
                    "{column:?} row {row}, in a key column"
                );
            }
        }
    }

    #[test]
    fn a_number_too_large_for_a_float32_is_refused_not_made_infinite() {
        const SCHEMA32: &str = "node Point { id: String @key, f: Float32?, v: Vector(2)? }";
        let catalog = parse("s.pg", SCHEMA32).unwrap();
        let point = catalog.get("Point").unwrap();
        for line in [r#"{"id":"a","f":1e300}"#, r#"{"id":"a","v":[1, -1e300]}"#] {
            let error = rows_from_json(point, &objects(&[line])).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::BadInput, "{line}: {error}");
            assert!(
                error.to_string().contains("out of range"),
                "{line}: {error}"
            );
        }
        let rows = rows_from_json(
            point,
            &objects(&[r#"{"id":"a","f":3.0e38,"v":[1e-50, 2]}"#]),
        )
        .unwrap();
        assert_eq!(
            rows.batch.num_rows(),
            1,
            "within range (and underflow to 0) is taken"
        );
    }

    #[test]
    fn key_literals_are_quoted_for_sql() {
        assert_eq!(key_literal("\"o'neil\"", PropertyType::String), "'o''neil'");
        assert_eq!(key_literal("42", PropertyType::Int64), "42");
    }
}
