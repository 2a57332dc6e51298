//! JSONL lines decoded straight into the Arrow builders of their type, with no
//! `serde_json::Value` in between: each value is read by serde as what it is (a number,
//! a string…) and appended to its column, under the same rules and with the same
//! errors as [`crate::rows::rows_from_json`] (a differential test holds the two
//! together).
//!
//! arrow-json's decoder is not used: it takes `"12"` for an integer column and cuts
//! `1.5` to `1`, where a load must refuse both.

use crate::ingest::LoadMode;
use crate::limits::ITEMS_PREALLOCATED_MAX;
use crate::rows::{
    ColumnBuilder, Found, KeyColumn, RowSource, TYPE_FIELD, TypedRows, describe_found,
};
use omnigraph_core::arrow_array::{ArrayRef, RecordBatch};
use omnigraph_core::schema::{EDGE_ID_COLUMN, TypeDef};
use omnigraph_core::{OmniError, Result, seams};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

/// The type a JSONL line names: read first, so the line's values go to the right
/// builders. `Err` holds the message of a line that is not an object naming its type.
pub(crate) fn line_type(line: &[u8]) -> std::result::Result<String, LineTypeError> {
    let mut deserializer = serde_json::Deserializer::from_slice(line);
    let found = deserializer
        .deserialize_map(TypeVisitor)
        .and_then(|found| deserializer.end().map(|()| found))
        .map_err(|error| LineTypeError::NotAnObject(error.to_string()))?;
    found.ok_or(LineTypeError::NoType)
}

/// Why a line names no type.
#[derive(Debug)]
pub(crate) enum LineTypeError {
    /// Not a JSON object (the parser's message).
    NotAnObject(String),
    /// An object without a `type` string.
    NoType,
}

struct TypeVisitor;

impl<'de> Visitor<'de> for TypeVisitor {
    /// The `type` string, if the object has one; `Some("")`-free: a non-string `type`
    /// is `None`.
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            if key == TYPE_FIELD {
                found = match map.next_value::<serde_json::Value>()? {
                    serde_json::Value::String(type_name) => Some(type_name),
                    _ => None,
                };
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// Rows of one type decoded from JSONL lines, waiting to be staged.
pub(crate) struct LineRows {
    type_def: TypeDef,
    mode: LoadMode,
    builders: Vec<ColumnBuilder>,
    keys: KeyColumn,
    endpoints: [KeyColumn; 2],
    sources: Vec<RowSource>,
    /// What each column of the line being decoded was given.
    given: Vec<Given>,
    /// The line's key, `src` and `dst`, rendered into buffers every line reuses.
    rendered: [String; 3],
    /// Edge ids given by the lines (the others were minted).
    ids_given: usize,
    /// Input bytes of the rows held.
    pub(crate) bytes: usize,
}

impl LineRows {
    /// An empty buffer for rows of `type_def`, loaded in `mode` (an append mints a
    /// missing edge id; a merge refuses it).
    pub(crate) fn new(type_def: &TypeDef, mode: LoadMode, capacity: usize) -> LineRows {
        LineRows {
            type_def: type_def.clone(),
            mode,
            builders: type_def
                .columns()
                .iter()
                .map(|column| ColumnBuilder::new(column.data_type, capacity))
                .collect(),
            keys: KeyColumn::with_capacity(capacity),
            endpoints: [KeyColumn::default(), KeyColumn::default()],
            sources: Vec::with_capacity(capacity),
            given: Vec::new(),
            rendered: Default::default(),
            ids_given: 0,
            bytes: 0,
        }
    }

    /// Rows held.
    pub(crate) fn len(&self) -> usize {
        self.sources.len()
    }

    /// Decodes `line` (one JSON object of this type) into the buffer. On bad input
    /// nothing of the line is kept in a way that matters: the load fails.
    pub(crate) fn push_line(&mut self, line: &[u8], source: RowSource) -> Result<()> {
        let columns = self.type_def.columns();
        // One buffer for every line: a vector per line was an allocation and a free.
        self.given.clear();
        self.given.resize(columns.len(), Given::Absent);
        for rendered in &mut self.rendered {
            rendered.clear();
        }
        let mut row = RowState {
            type_def: &self.type_def,
            builders: &mut self.builders,
            given: &mut self.given,
            rendered: &mut self.rendered,
            has: [false; 3],
            unknown: None,
            first_error: None,
        };
        let mut deserializer = serde_json::Deserializer::from_slice(line);
        let parsed = (&mut row)
            .deserialize(&mut deserializer)
            .and_then(|()| deserializer.end());
        let type_name = self.type_def.name();
        if let Err(error) = parsed {
            return Err(OmniError::bad_input(
                source.location(type_name, None),
                format!("not a JSON object: {error}"),
            ));
        }
        let edge_id = (!self.type_def.is_node())
            .then(|| {
                columns
                    .iter()
                    .position(|column| column.name == EDGE_ID_COLUMN)
            })
            .flatten();
        // A merge matches edges by id: one without fails before any other check.
        if let Some(at) = edge_id
            && row.given[at] != Given::Value
            && self.mode == LoadMode::Merge
        {
            return Err(OmniError::bad_input(
                source.location(type_name, Some(EDGE_ID_COLUMN)),
                format!(
                    "a merge load matches {type_name} edges by their {EDGE_ID_COLUMN}, and this one has none: give it one, or load it with --mode append (which mints ids)"
                ),
            ));
        }
        if let Some(name) = row.unknown.take() {
            return Err(OmniError::bad_input(
                source.location(type_name, Some(&name)),
                format!("{type_name} has no property {name}"),
            ));
        }
        // The first problem in column order, as the object path reports it.
        let key_column = self.type_def.key_column();
        let mut minted_here = false;
        for (index, column) in columns.iter().enumerate() {
            if let Some((at, message)) = &row.first_error
                && *at == index
            {
                return Err(OmniError::bad_input(
                    source.location(type_name, Some(&column.name)),
                    message.clone(),
                ));
            }
            if row.given[index] == Given::Value {
                continue;
            }
            if Some(index) == edge_id {
                minted_here = true;
                let minted = seams::new_id();
                row.builders[index].push_str(&minted).map_err(|expected| {
                    OmniError::internal(format!("a minted id is {expected}"))
                })?;
                row.given[index] = Given::Value;
                if column.name == key_column {
                    row.rendered[KEY].clear();
                    crate::rows::push_text_key(&mut row.rendered[KEY], &minted);
                    row.has[KEY] = true;
                }
                continue;
            }
            if !column.nullable {
                return Err(crate::rows::missing(&self.type_def, &source, &column.name));
            }
            if row.given[index] == Given::Absent {
                row.builders[index].push_null();
            }
        }
        if edge_id.is_some() && !minted_here {
            self.ids_given += 1;
        }
        if !row.has[KEY] {
            return Err(OmniError::internal("a row's key was given but not kept"));
        }
        let ends_kept = self.type_def.is_node() || (row.has[SRC] && row.has[DST]);
        if !ends_kept {
            return Err(OmniError::internal(
                "an edge's endpoints were given but not kept",
            ));
        }
        self.keys.push(&self.rendered[KEY]);
        if !self.type_def.is_node() {
            self.endpoints[0].push(&self.rendered[SRC]);
            self.endpoints[1].push(&self.rendered[DST]);
        }
        self.sources.push(source);
        Ok(())
    }

    /// The rows as one batch of the table's schema, with their sources.
    pub(crate) fn finish(self) -> Result<(Vec<RowSource>, TypedRows)> {
        let arrays: Vec<ArrayRef> = self
            .builders
            .into_iter()
            .map(ColumnBuilder::finish)
            .collect();
        let batch =
            RecordBatch::try_new(self.type_def.arrow_schema(), arrays).map_err(|error| {
                OmniError::internal(format!("rows of {}: {error}", self.type_def.name()))
            })?;
        assert_eq!(batch.num_rows(), self.sources.len(), "one source per row");
        Ok((
            self.sources,
            TypedRows {
                batch,
                keys: self.keys,
                endpoints: self.endpoints,
                // Every id of the batch minted here: new, so neither checked nor kept.
                keys_minted: !self.type_def.is_node() && self.ids_given == 0,
            },
        ))
    }
}

/// What a line gave for a column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Given {
    /// Nothing: a null is appended at the end of the row.
    Absent,
    /// An explicit null, appended.
    Null,
    /// A value, appended.
    Value,
}

/// Where a line's rendered key, `src` and `dst` are kept.
const KEY: usize = 0;
const SRC: usize = 1;
const DST: usize = 2;

/// One line being decoded.
struct RowState<'r> {
    type_def: &'r TypeDef,
    builders: &'r mut [ColumnBuilder],
    given: &'r mut [Given],
    /// The key, `src` and `dst` rendered (indexed by [`KEY`], [`SRC`], [`DST`]), and
    /// which of them the line gave.
    rendered: &'r mut [String; 3],
    has: [bool; 3],
    /// The first unknown property by name (the object path reports that one).
    unknown: Option<String>,
    /// The first bad value by column.
    first_error: Option<(usize, String)>,
}

impl RowState<'_> {
    fn note_error(&mut self, index: usize, message: String) {
        if self.first_error.as_ref().is_none_or(|(at, _)| index < *at) {
            self.first_error = Some((index, message));
        }
    }
}

impl<'de> DeserializeSeed<'de> for &mut RowState<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> std::result::Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for &mut RowState<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        let columns = self.type_def.columns();
        while let Some(name) = map.next_key::<Cow<'de, str>>()? {
            let Some(index) = columns.iter().position(|column| column.name == name) else {
                if name != TYPE_FIELD && self.unknown.as_deref().is_none_or(|first| *name < *first)
                {
                    self.unknown = Some(name.to_string());
                }
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            if self.given[index] != Given::Absent {
                return Err(serde::de::Error::custom(format!(
                    "the property {name} is given twice"
                )));
            }
            let value = map.next_value_seed(ValueSeed)?;
            self.given[index] = match value {
                Read::Null => Given::Null,
                _ => Given::Value,
            };
            let column = &columns[index];
            let is_edge_id = !self.type_def.is_node() && column.name == EDGE_ID_COLUMN;
            if is_edge_id && matches!(value, Read::Null) {
                // A null edge id is a missing one: minted (append) or refused (merge).
                self.given[index] = Given::Absent;
                continue;
            }
            let pushed = match &value {
                Read::Null => {
                    // A required property's null is reported as missing, in column order.
                    if column.nullable {
                        self.builders[index].push_null();
                    }
                    Ok(())
                }
                Read::Bool(flag) => self.builders[index].push_bool(*flag),
                Read::Number(number) => self.builders[index].push_number(number),
                Read::String(text) => self.builders[index].push_str(text),
                Read::Array(items) => self.builders[index].push_vector(items),
                Read::Object => Err(self.builders[index].expected()),
            };
            if let Err(expected) = pushed {
                let message = format!(
                    "expected {expected}, found {}",
                    describe_found(&value.found())
                );
                self.note_error(index, message);
                continue;
            }
            if matches!(value, Read::Null) {
                continue;
            }
            // Only the key and the endpoints are rendered: a string per value was an
            // allocation and a free per property of every line.
            let is_key = column.name == self.type_def.key_column();
            let end = match column.name.as_str() {
                "src" if !self.type_def.is_node() => Some(0),
                "dst" if !self.type_def.is_node() => Some(1),
                _ => None,
            };
            let slots = [is_key.then_some(KEY), end.map(|end| SRC + end)];
            for slot in slots.into_iter().flatten() {
                self.rendered[slot].clear();
                self.has[slot] = value.render_key(&mut self.rendered[slot]);
            }
        }
        Ok(())
    }
}

/// One value as read: what a column needs to take it, and to describe it.
enum Read<'de> {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(Cow<'de, str>),
    /// An array's items read as numbers (`None` for one that is not a number).
    Array(Vec<Option<f64>>),
    Object,
}

impl Read<'_> {
    fn found(&self) -> Found<'_> {
        match self {
            Read::Null => Found::Null,
            Read::Bool(flag) => Found::Bool(*flag),
            Read::Number(number) => Found::Number(number.clone()),
            Read::String(text) => Found::String(text),
            Read::Array(items) => Found::Array(items.len()),
            Read::Object => Found::Object,
        }
    }

    /// Appends the value as a rendered key (`"p1"` quoted, `42` bare) to `out`, as
    /// [`crate::rows::render_key`] renders the same JSON value; false for a value no key
    /// can be.
    fn render_key(&self, out: &mut String) -> bool {
        use std::fmt::Write;
        match self {
            Read::String(text) => crate::rows::push_text_key(out, text),
            Read::Number(number) => {
                let _ = write!(out, "{number}");
            }
            Read::Bool(flag) => out.push_str(if *flag { "true" } else { "false" }),
            Read::Null | Read::Array(_) | Read::Object => return false,
        }
        true
    }
}

struct ValueSeed;

impl<'de> DeserializeSeed<'de> for ValueSeed {
    type Value = Read<'de>;

    fn deserialize<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> std::result::Result<Read<'de>, D::Error> {
        deserializer.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Read<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> std::result::Result<Read<'de>, E> {
        Ok(Read::Null)
    }

    fn visit_none<E>(self) -> std::result::Result<Read<'de>, E> {
        Ok(Read::Null)
    }

    fn visit_bool<E>(self, flag: bool) -> std::result::Result<Read<'de>, E> {
        Ok(Read::Bool(flag))
    }

    fn visit_i64<E>(self, number: i64) -> std::result::Result<Read<'de>, E> {
        Ok(Read::Number(number.into()))
    }

    fn visit_u64<E>(self, number: u64) -> std::result::Result<Read<'de>, E> {
        Ok(Read::Number(number.into()))
    }

    fn visit_f64<E: serde::de::Error>(self, number: f64) -> std::result::Result<Read<'de>, E> {
        serde_json::Number::from_f64(number)
            .map(Read::Number)
            .ok_or_else(|| E::custom("a number that is not finite"))
    }

    fn visit_borrowed_str<E>(self, text: &'de str) -> std::result::Result<Read<'de>, E> {
        Ok(Read::String(Cow::Borrowed(text)))
    }

    fn visit_str<E>(self, text: &str) -> std::result::Result<Read<'de>, E> {
        Ok(Read::String(Cow::Owned(text.to_string())))
    }

    fn visit_string<E>(self, text: String) -> std::result::Result<Read<'de>, E> {
        Ok(Read::String(Cow::Owned(text)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Read<'de>, A::Error> {
        let mut items =
            Vec::with_capacity(seq.size_hint().unwrap_or(0).min(ITEMS_PREALLOCATED_MAX));
        while let Some(item) = seq.next_element_seed(ItemSeed)? {
            items.push(item);
        }
        Ok(Read::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Read<'de>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Read::Object)
    }
}

/// One array item, as a vector column reads it: a number, or `None` for anything else.
struct ItemSeed;

impl<'de> DeserializeSeed<'de> for ItemSeed {
    type Value = Option<f64>;

    fn deserialize<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> std::result::Result<Option<f64>, D::Error> {
        deserializer.deserialize_any(ItemVisitor)
    }
}

struct ItemVisitor;

impl<'de> Visitor<'de> for ItemVisitor {
    type Value = Option<f64>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_i64<E>(self, number: i64) -> std::result::Result<Option<f64>, E> {
        Ok(Some(number as f64))
    }

    fn visit_u64<E>(self, number: u64) -> std::result::Result<Option<f64>, E> {
        Ok(Some(number as f64))
    }

    fn visit_f64<E>(self, number: f64) -> std::result::Result<Option<f64>, E> {
        Ok(Some(number))
    }

    fn visit_unit<E>(self) -> std::result::Result<Option<f64>, E> {
        Ok(None)
    }

    fn visit_bool<E>(self, _: bool) -> std::result::Result<Option<f64>, E> {
        Ok(None)
    }

    fn visit_str<E>(self, _: &str) -> std::result::Result<Option<f64>, E> {
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<Option<f64>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Option<f64>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::rows_from_json;
    use omnigraph_core::schema::{PropertyType, parse};
    use serde_json::{Map, Value};

    const SCHEMA: &str = "
        node Person { id: String @key, name: String, age: Int32?, big: Int64?, f: Float32?, d: Float64?, ok: Bool?, at: Timestamp?, v: Vector(3)? }
        node Company { id: Int64 @key, name: String? }
        edge WorksAt: Person -> Company { since: Int32? }";

    /// Values of every JSON kind, and the edge cases of each column type.
    const VALUES: &[&str] = &[
        r#""p1""#,
        r#""a string with an \" escape""#,
        r#""xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxé and then more""#,
        r#""12""#,
        "42",
        "-7",
        "0",
        "1.5",
        "1.0",
        "1e2",
        "3000000000",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775809",
        "true",
        "false",
        "null",
        "[1, 2, 3]",
        "[1.5, -2, 3e1]",
        r#"[1, "x", 3]"#,
        "[1, 2]",
        "[1, null, 3]",
        "[[1], 2, 3]",
        "[]",
        "{}",
        r#"{"a": [1, {"b": null}]}"#,
    ];

    /// Values a column of `data_type` takes.
    fn good_values(data_type: PropertyType) -> &'static [&'static str] {
        match data_type {
            PropertyType::String => &[r#""p1""#, r#""p\u00e9""#, r#""x""#],
            PropertyType::Bool => &["true", "false"],
            PropertyType::Int32 => &["42", "-7", "0"],
            PropertyType::Int64 => &["42", "3000000000", "9223372036854775807"],
            PropertyType::Float32 | PropertyType::Float64 => &["1.5", "42", "1e2", "-0.25"],
            PropertyType::Timestamp => &["1700000000000000", "0"],
            PropertyType::Vector(_) => &["[1, 2, 3]", "[1.5, -2, 3e1]"],
        }
    }

    /// A small deterministic generator (xorshift), so a failure replays.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    fn source(line: u64) -> RowSource {
        RowSource {
            source: "in.jsonl".into(),
            line: Some(line),
            row: line - 1,
        }
    }

    /// A random line of `type_name`: some of its columns (an edge always with an id, so
    /// nothing is minted), sometimes an unknown property, in a random order.
    fn line(rng: &mut Rng, type_def: &TypeDef) -> String {
        let mut fields: Vec<String> = vec![format!(r#""type": "{}""#, type_def.name())];
        for column in type_def.columns() {
            let always = !type_def.is_node() && column.name == EDGE_ID_COLUMN;
            if always || rng.below(4) != 0 {
                let value = if always {
                    format!(r#""e{}""#, rng.below(1000))
                } else if rng.below(10) < 7 {
                    let good = good_values(column.data_type);
                    good[rng.below(good.len())].to_string()
                } else {
                    VALUES[rng.below(VALUES.len())].to_string()
                };
                fields.push(format!(r#""{}": {value}"#, column.name));
            }
        }
        for unknown in ["shoe", "aardvark"] {
            if rng.below(8) == 0 {
                fields.push(format!(r#""{unknown}": 1"#));
            }
        }
        for at in (1..fields.len()).rev() {
            fields.swap(at, rng.below(at + 1));
        }
        format!("{{{}}}", fields.join(", "))
    }

    /// The object path's outcome for one line, as the loader ran it: parsed to a map,
    /// then checked.
    fn by_objects(type_def: &TypeDef, text: &str) -> std::result::Result<TypedRows, String> {
        let object: Map<String, Value> = serde_json::from_str(text).expect("valid JSON");
        rows_from_json(type_def, &[(source(1), object)]).map_err(|error| error.to_string())
    }

    fn by_lines(type_def: &TypeDef, text: &str) -> std::result::Result<TypedRows, String> {
        let mut rows = LineRows::new(type_def, LoadMode::Append, 1);
        rows.push_line(text.as_bytes(), source(1))
            .map_err(|error| error.to_string())?;
        rows.finish()
            .map(|(_, typed)| typed)
            .map_err(|error| error.to_string())
    }

    #[test]
    fn lines_decode_exactly_as_objects_do() {
        let catalog = parse("s.pg", SCHEMA).unwrap();
        let mut rng = Rng(0x5eed_cafe_f00d_1234);
        let (mut accepted, mut refused) = (0, 0);
        for round in 0..6_000 {
            let type_def = &catalog.types()[round % catalog.types().len()];
            let text = line(&mut rng, type_def);
            let expected = by_objects(type_def, &text);
            let decoded = by_lines(type_def, &text);
            match (&expected, &decoded) {
                (Ok(expected), Ok(decoded)) => {
                    assert_eq!(expected.batch, decoded.batch, "{text}");
                    assert_eq!(expected.keys, decoded.keys, "{text}");
                    assert_eq!(expected.endpoints, decoded.endpoints, "{text}");
                    accepted += 1;
                }
                (Err(expected), Err(decoded)) => {
                    assert_eq!(expected, decoded, "{text}");
                    refused += 1;
                }
                _ => panic!("{text}\nobjects: {expected:?}\nlines: {decoded:?}"),
            }
        }
        // The generator reaches both outcomes often enough to mean something.
        assert!(
            accepted > 500 && refused > 2_000,
            "{accepted} accepted, {refused} refused"
        );
    }

    #[test]
    fn many_lines_make_the_same_batch_as_their_objects() {
        let catalog = parse("s.pg", SCHEMA).unwrap();
        let person = catalog.get("Person").unwrap();
        let texts: Vec<String> = (0..50)
            .map(|i| {
                format!(
                    r#"{{"type": "Person", "id": "p{i}", "name": "n{i}", "age": {i}, "d": {i}.5, "v": [{i}, 1, 2], "ok": {}}}"#,
                    i % 2 == 0
                )
            })
            .collect();
        let objects: Vec<(RowSource, Map<String, Value>)> = texts
            .iter()
            .enumerate()
            .map(|(i, text)| (source(i as u64 + 1), serde_json::from_str(text).unwrap()))
            .collect();
        let expected = rows_from_json(person, &objects).unwrap();
        let mut rows = LineRows::new(person, LoadMode::Append, 8);
        for (i, text) in texts.iter().enumerate() {
            rows.push_line(text.as_bytes(), source(i as u64 + 1))
                .unwrap();
        }
        let (sources, decoded) = rows.finish().unwrap();
        assert_eq!(decoded.batch, expected.batch);
        assert_eq!(decoded.keys, expected.keys);
        assert_eq!(sources.len(), 50);
    }

    #[test]
    fn an_edge_without_an_id_is_minted_one_in_an_append_and_refused_in_a_merge() {
        let catalog = parse("s.pg", SCHEMA).unwrap();
        let works_at = catalog.get("WorksAt").unwrap();
        let text = r#"{"type": "WorksAt", "src": "p1", "dst": 7, "id": null}"#;
        let mut rows = LineRows::new(works_at, LoadMode::Append, 1);
        rows.push_line(text.as_bytes(), source(1)).unwrap();
        let (_, typed) = rows.finish().unwrap();
        assert!(typed.keys_minted, "every id of the batch was minted");
        assert_eq!(typed.endpoints[0].iter().collect::<Vec<_>>(), ["\"p1\""]);
        assert_eq!(typed.endpoints[1].iter().collect::<Vec<_>>(), ["7"]);
        assert_eq!(typed.batch.column(0).null_count(), 0, "an id was minted");
        let mut rows = LineRows::new(works_at, LoadMode::Merge, 1);
        let error = rows.push_line(text.as_bytes(), source(1)).unwrap_err();
        assert!(error.to_string().contains("--mode append"), "{error}");
    }

    #[test]
    fn a_property_given_twice_in_one_line_is_refused() {
        let catalog = parse("s.pg", SCHEMA).unwrap();
        let person = catalog.get("Person").unwrap();
        let mut rows = LineRows::new(person, LoadMode::Append, 1);
        let error = rows
            .push_line(br#"{"id": "p1", "name": "a", "name": "b"}"#, source(3))
            .unwrap_err();
        let said = error.to_string();
        assert!(
            said.contains("given twice") && said.contains("line 3"),
            "{said}"
        );
    }

    #[test]
    fn the_type_of_a_line_is_read_first() {
        assert_eq!(
            line_type(br#"{"a": [1, {"b": 2}], "type": "Person"}"#).unwrap(),
            "Person"
        );
        assert!(matches!(
            line_type(br#"{"type": 3}"#),
            Err(LineTypeError::NoType)
        ));
        assert!(matches!(
            line_type(br#"{"id": "p1"}"#),
            Err(LineTypeError::NoType)
        ));
        assert!(matches!(
            line_type(b"[1, 2]"),
            Err(LineTypeError::NotAnObject(_))
        ));
        assert!(matches!(
            line_type(br#"{"type": "Person"} x"#),
            Err(LineTypeError::NotAnObject(_))
        ));
    }
}
