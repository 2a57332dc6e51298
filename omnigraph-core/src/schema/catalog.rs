//! The checked catalog: every rule of the schema language, the Arrow schema of each
//! table, its declared indexes, and the content hash of the canonical document.

use super::{
    DeclKind, IndexKind, NAME_LEN_MAX, PROPERTIES_MAX, PropertyDecl, PropertyType,
    SCHEMA_DOCUMENT_VERSION, Span, TYPES_MAX, TypeDecl, VECTOR_DIMENSION_MAX,
};
use crate::error::{InputLocation, OmniError, Result};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Arc;

/// Words that cannot name a type: the language's keywords and type names.
const RESERVED_TYPE_NAMES: &[&str] = &[
    "node",
    "edge",
    "string",
    "bool",
    "int32",
    "int64",
    "float32",
    "float64",
    "timestamp",
    "vector",
];
/// Property names every type reserves: `type` is the JSONL discriminator.
const RESERVED_PROPERTY_NAMES: &[&str] = &["type"];
/// The columns an edge table gets besides its properties.
pub const EDGE_ID_COLUMN: &str = "id";
/// The column holding an edge's source node key.
pub const EDGE_SRC_COLUMN: &str = "src";
/// The column holding an edge's destination node key.
pub const EDGE_DST_COLUMN: &str = "dst";

/// A column of a type's table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    /// Column name.
    pub name: String,
    /// Its property type.
    pub data_type: PropertyType,
    /// Whether it may hold nulls.
    pub nullable: bool,
}

/// An index the schema declares on a column.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DeclaredIndex {
    /// The index name, stable across rebuilds: `<column>_<kind>`.
    pub name: String,
    /// The indexed column.
    pub column: String,
    /// The index kind.
    pub kind: IndexKind,
}

/// One checked node or edge type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeDef {
    decl: TypeDecl,
    columns: Vec<Column>,
    indexes: Vec<DeclaredIndex>,
}

impl TypeDef {
    /// The type name.
    pub fn name(&self) -> &str {
        &self.decl.name
    }

    /// Node or edge, with the endpoints of an edge.
    pub fn kind(&self) -> &DeclKind {
        &self.decl.kind
    }

    /// Whether this is a node type.
    pub fn is_node(&self) -> bool {
        self.decl.kind == DeclKind::Node
    }

    /// The declared properties, in order.
    pub fn properties(&self) -> &[PropertyDecl] {
        &self.decl.properties
    }

    /// The key column: the `@key` property of a node, `id` of an edge.
    pub fn key_column(&self) -> &str {
        match self.decl.kind {
            DeclKind::Node => self
                .decl
                .properties
                .iter()
                .find(|property| property.key)
                .map(|property| property.name.as_str())
                .unwrap_or_else(|| unreachable!("a checked node type has a key")),
            DeclKind::Edge { .. } => EDGE_ID_COLUMN,
        }
    }

    /// The type of the key column.
    pub fn key_type(&self) -> PropertyType {
        let key = self.key_column();
        self.columns
            .iter()
            .find(|column| column.name == key)
            .map(|column| column.data_type)
            .unwrap_or_else(|| unreachable!("a checked type has its key among its columns"))
    }

    /// The table's columns: an edge's `id`, `src`, `dst` first, then the properties.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// The table's Arrow schema.
    pub fn arrow_schema(&self) -> Arc<Schema> {
        let fields: Vec<Field> = self
            .columns
            .iter()
            .map(|column| Field::new(&column.name, column.data_type.arrow_type(), column.nullable))
            .collect();
        Arc::new(Schema::new(fields))
    }

    /// The indexes the schema declares on this type's table.
    pub fn declared_indexes(&self) -> &[DeclaredIndex] {
        &self.indexes
    }
}

/// The Arrow type that stores a property type.
impl PropertyType {
    /// The Arrow type of a column of this type (`docs/format.md`, section 4).
    pub fn arrow_type(&self) -> DataType {
        match self {
            PropertyType::String => DataType::Utf8,
            PropertyType::Bool => DataType::Boolean,
            PropertyType::Int32 => DataType::Int32,
            PropertyType::Int64 => DataType::Int64,
            PropertyType::Float32 => DataType::Float32,
            PropertyType::Float64 => DataType::Float64,
            PropertyType::Timestamp => {
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
            }
            PropertyType::Vector(dimension) => DataType::FixedSizeList(
                Arc::new(Field::new("item", DataType::Float32, true)),
                *dimension as i32,
            ),
        }
    }
}

/// A checked schema: its types in declaration order and its content hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Catalog {
    types: Vec<TypeDef>,
    document: String,
    hash: String,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct SchemaDocument {
    format_version: u32,
    types: Vec<TypeDecl>,
}

impl Catalog {
    /// Checks declarations (from any source) and builds the catalog.
    pub fn build(decls: Vec<TypeDecl>) -> Result<Catalog> {
        Catalog::build_in("<schema>", decls)
    }

    pub(crate) fn build_in(source_name: &str, decls: Vec<TypeDecl>) -> Result<Catalog> {
        let checker = Checker { source_name };
        checker.check(&decls)?;
        let key_types: HashMap<&str, PropertyType> = decls
            .iter()
            .filter(|decl| decl.kind == DeclKind::Node)
            .filter_map(|decl| {
                let key = decl.properties.iter().find(|property| property.key)?;
                Some((decl.name.as_str(), key.data_type))
            })
            .collect();
        let types = decls
            .iter()
            .map(|decl| type_def(decl, &key_types))
            .collect();
        let document = serde_json::to_string_pretty(&SchemaDocument {
            format_version: SCHEMA_DOCUMENT_VERSION,
            types: decls,
        })
        .map_err(|error| OmniError::internal(format!("schema document: {error}")))?;
        let hash = hex(&Sha256::digest(document.as_bytes()));
        Ok(Catalog {
            types,
            document,
            hash,
        })
    }

    /// The address of a stored schema document: SHA-256 of its bytes, in lowercase hex.
    pub fn document_hash(document: &[u8]) -> String {
        hex(&Sha256::digest(document))
    }

    /// Reads a stored schema document (as written by [`Catalog::document`]) and checks
    /// it like source. `object` names the stored object in errors.
    pub fn from_document(object: &str, document: &str) -> Result<Catalog> {
        let parsed: SchemaDocument = serde_json::from_str(document).map_err(|error| {
            OmniError::corrupt(object, format!("not a schema document: {error}"))
        })?;
        if parsed.format_version != SCHEMA_DOCUMENT_VERSION {
            return Err(OmniError::corrupt(
                object,
                format!(
                    "schema document version {} is not supported (this build reads {SCHEMA_DOCUMENT_VERSION})",
                    parsed.format_version
                ),
            ));
        }
        Catalog::build_in(object, parsed.types)
    }

    /// The types in declaration order.
    pub fn types(&self) -> &[TypeDef] {
        &self.types
    }

    /// The type with this exact name.
    pub fn get(&self, name: &str) -> Option<&TypeDef> {
        self.types.iter().find(|type_def| type_def.name() == name)
    }

    /// The type with this name, or a typed `NotFound`.
    pub fn require(&self, name: &str) -> Result<&TypeDef> {
        self.get(name)
            .ok_or_else(|| OmniError::not_found(format!("type {name} in the schema")))
    }

    /// The canonical schema document (JSON): what is stored under its hash.
    pub fn document(&self) -> &str {
        &self.document
    }

    /// The SHA-256 of the canonical document, lower-case hex. Comments, whitespace and
    /// separators in the source do not change it.
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// The schema rendered as canonical `.pg` source; parsing it gives this catalog.
    pub fn to_pg(&self) -> String {
        let mut out = String::new();
        for type_def in &self.types {
            match type_def.kind() {
                DeclKind::Node => out.push_str(&format!("node {} {{", type_def.name())),
                DeclKind::Edge { from, to } => {
                    out.push_str(&format!("edge {}: {from} -> {to} {{", type_def.name()))
                }
            }
            let properties: Vec<String> = type_def
                .properties()
                .iter()
                .map(|property| {
                    let mut text = format!(" {}: {}", property.name, property.data_type.to_pg());
                    if property.optional {
                        text.push('?');
                    }
                    if property.key {
                        text.push_str(" @key");
                    }
                    match property.index {
                        Some(IndexKind::BTree) => text.push_str(" @index"),
                        Some(IndexKind::FullText) => text.push_str(" @index(fts)"),
                        Some(IndexKind::Vector) => text.push_str(" @index(vector)"),
                        None => {}
                    }
                    text
                })
                .collect();
            out.push_str(&properties.join(","));
            out.push_str(" }\n");
        }
        out
    }
}

fn type_def(decl: &TypeDecl, key_types: &HashMap<&str, PropertyType>) -> TypeDef {
    let mut columns = Vec::new();
    let mut indexes = Vec::new();
    let mut declare = |column: &str, kind: IndexKind| {
        indexes.push(DeclaredIndex {
            name: format!("{column}_{}", kind.suffix()),
            column: column.to_string(),
            kind,
        })
    };
    if let DeclKind::Edge { from, to } = &decl.kind {
        for (name, data_type) in [
            (EDGE_ID_COLUMN, PropertyType::String),
            (EDGE_SRC_COLUMN, key_types[from.as_str()]),
            (EDGE_DST_COLUMN, key_types[to.as_str()]),
        ] {
            columns.push(Column {
                name: name.to_string(),
                data_type,
                nullable: false,
            });
            declare(name, IndexKind::BTree);
        }
    }
    for property in &decl.properties {
        columns.push(Column {
            name: property.name.clone(),
            data_type: property.data_type,
            nullable: property.optional,
        });
        if property.key {
            declare(&property.name, IndexKind::BTree);
        }
        if let Some(kind) = property.index {
            declare(&property.name, kind);
        }
    }
    TypeDef {
        decl: decl.clone(),
        columns,
        indexes,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

struct Checker<'a> {
    source_name: &'a str,
}

impl Checker<'_> {
    fn error(
        &self,
        span: Span,
        type_name: &str,
        field: Option<&str>,
        message: String,
    ) -> OmniError {
        let mut location = InputLocation::in_source(self.source_name).type_name(type_name);
        if span.line > 0 {
            location = location.at(span.line.into(), span.column.into());
        }
        if let Some(field) = field {
            location = location.field(field);
        }
        OmniError::bad_input(location, message)
    }

    fn check(&self, decls: &[TypeDecl]) -> Result<()> {
        if decls.is_empty() {
            return Err(OmniError::bad_input(
                InputLocation::in_source(self.source_name),
                "the schema declares no types",
            ));
        }
        if decls.len() > TYPES_MAX {
            return Err(OmniError::bad_input(
                InputLocation::in_source(self.source_name),
                format!("{} types; the limit is {TYPES_MAX}", decls.len()),
            ));
        }
        let mut seen: HashMap<String, &TypeDecl> = HashMap::new();
        for decl in decls {
            self.check_name(decl.span, &decl.name, None, "type")?;
            if RESERVED_TYPE_NAMES.contains(&decl.name.to_ascii_lowercase().as_str()) {
                return Err(self.error(
                    decl.span,
                    &decl.name,
                    None,
                    format!("'{}' is reserved and cannot name a type", decl.name),
                ));
            }
            if let Some(first) = seen.insert(decl.name.to_ascii_lowercase(), decl) {
                return Err(self.error(
                    decl.span,
                    &decl.name,
                    None,
                    format!(
                        "duplicate type name '{}' (already declared as '{}'{}); names are compared without case",
                        decl.name,
                        first.name,
                        line_suffix(first.span)
                    ),
                ));
            }
        }
        for decl in decls {
            self.check_type(decl, &seen)?;
        }
        Ok(())
    }

    fn check_name(
        &self,
        span: Span,
        name: &str,
        type_name: Option<&str>,
        what: &str,
    ) -> Result<()> {
        let owner = type_name.unwrap_or(name);
        let field = type_name.map(|_| name);
        let problem = if name.is_empty() {
            Some("is empty".to_string())
        } else if name.len() > NAME_LEN_MAX {
            Some(format!(
                "is {} bytes long; the limit is {NAME_LEN_MAX}",
                name.len()
            ))
        } else if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
            Some("must start with an ASCII letter ('_' starts the engine's reserved names)".into())
        } else {
            name.chars()
                .find(|c| !(c.is_ascii_alphanumeric() || *c == '_'))
                .map(|bad| {
                    format!(
                        "contains {bad:?}: names are ASCII letters, digits and '_', with no path characters, separators or dots"
                    )
                })
        };
        match problem {
            Some(problem) => Err(self.error(
                span,
                owner,
                field,
                format!("{what} name {name:?} {problem}"),
            )),
            None => Ok(()),
        }
    }

    fn check_type(&self, decl: &TypeDecl, types: &HashMap<String, &TypeDecl>) -> Result<()> {
        let name = decl.name.as_str();
        if decl.properties.len() > PROPERTIES_MAX {
            return Err(self.error(
                decl.span,
                name,
                None,
                format!(
                    "{} properties; the limit is {PROPERTIES_MAX}",
                    decl.properties.len()
                ),
            ));
        }
        let mut reserved: Vec<&str> = RESERVED_PROPERTY_NAMES.to_vec();
        if let DeclKind::Edge { from, to } = &decl.kind {
            reserved.extend([EDGE_ID_COLUMN, EDGE_SRC_COLUMN, EDGE_DST_COLUMN]);
            for (role, endpoint) in [("source", from), ("destination", to)] {
                match types.get(&endpoint.to_ascii_lowercase()) {
                    Some(target) if target.name == *endpoint && target.kind == DeclKind::Node => {}
                    Some(target) if target.name == *endpoint => {
                        return Err(self.error(
                            decl.span,
                            name,
                            None,
                            format!("the {role} of edge {name} is {endpoint}, which is an edge type; endpoints must be node types"),
                        ));
                    }
                    _ => {
                        return Err(self.error(
                            decl.span,
                            name,
                            None,
                            format!("the {role} of edge {name} is {endpoint}, which is not a declared node type"),
                        ));
                    }
                }
            }
        }
        let mut seen: HashMap<String, &PropertyDecl> = HashMap::new();
        for property in &decl.properties {
            let field = Some(property.name.as_str());
            self.check_name(property.span, &property.name, Some(name), "property")?;
            if reserved.contains(&property.name.to_ascii_lowercase().as_str()) {
                let why = if property.name.eq_ignore_ascii_case("type") {
                    "'type' names the type of a JSONL record"
                } else {
                    "edge tables hold id, src and dst themselves"
                };
                return Err(self.error(
                    property.span,
                    name,
                    field,
                    format!("property name '{}' is reserved: {why}", property.name),
                ));
            }
            if let Some(first) = seen.insert(property.name.to_ascii_lowercase(), property) {
                return Err(self.error(
                    property.span,
                    name,
                    field,
                    format!(
                        "duplicate property '{}' in {name} (already declared as '{}'{}); names are compared without case",
                        property.name,
                        first.name,
                        line_suffix(first.span)
                    ),
                ));
            }
            self.check_property(name, &decl.kind, property)?;
        }
        if decl.kind == DeclKind::Node {
            let keys: Vec<&PropertyDecl> = decl.properties.iter().filter(|p| p.key).collect();
            match keys.as_slice() {
                [] => {
                    return Err(self.error(
                        decl.span,
                        name,
                        None,
                        format!("node {name} has no @key property; a node type needs exactly one"),
                    ));
                }
                [_] => {}
                [first, second, ..] => {
                    return Err(self.error(
                        second.span,
                        name,
                        Some(&second.name),
                        format!(
                            "node {name} has a second @key ({}) besides {}; a node type needs exactly one",
                            second.name, first.name
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    fn check_property(
        &self,
        type_name: &str,
        kind: &DeclKind,
        property: &PropertyDecl,
    ) -> Result<()> {
        let error = |message: String| {
            Err(self.error(property.span, type_name, Some(&property.name), message))
        };
        if let PropertyType::Vector(dimension) = property.data_type
            && !(1..=VECTOR_DIMENSION_MAX).contains(&dimension)
        {
            return error(format!(
                "vector dimension {dimension} is out of range 1..={VECTOR_DIMENSION_MAX}"
            ));
        }
        if property.key {
            if *kind != DeclKind::Node {
                return error(format!(
                    "@key on edge {type_name}: edges get a minted id; @key is for node types"
                ));
            }
            if !matches!(
                property.data_type,
                PropertyType::String | PropertyType::Int32 | PropertyType::Int64
            ) {
                return error(format!(
                    "key {} is {}; a key must be String, Int32 or Int64",
                    property.name,
                    property.data_type.to_pg()
                ));
            }
            if property.optional {
                return error(format!("key {} cannot be optional", property.name));
            }
            if property.index.is_some() {
                return error(format!(
                    "{} is the key and is indexed already; drop the @index",
                    property.name
                ));
            }
        }
        match (property.index, property.data_type) {
            (None, _) => Ok(()),
            (Some(IndexKind::FullText), PropertyType::String) => Ok(()),
            (Some(IndexKind::Vector), PropertyType::Vector(_)) => Ok(()),
            (Some(IndexKind::BTree), PropertyType::Vector(_)) => {
                error("a vector takes @index(vector), not @index".into())
            }
            (Some(IndexKind::BTree), _) => Ok(()),
            (Some(IndexKind::FullText), other) => error(format!(
                "@index(fts) needs a String property, and {} is {}",
                property.name,
                other.to_pg()
            )),
            (Some(IndexKind::Vector), other) => error(format!(
                "@index(vector) needs a Vector(n) property, and {} is {}",
                property.name,
                other.to_pg()
            )),
        }
    }
}

fn line_suffix(span: Span) -> String {
    if span.line > 0 {
        format!(" at line {}", span.line)
    } else {
        String::new()
    }
}
