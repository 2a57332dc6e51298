//! The `.pg` schema language and the catalog it produces.
//!
//! ```text
//! node Person { id: String @key, name: String @index(fts), age: Int32? @index }
//! node Company { id: String @key, name: String }
//! edge WorksAt: Person -> Company { since: Int32? }
//! ```
//!
//! [`parse`] turns source text into declarations ([`TypeDecl`]); [`Catalog::build`]
//! checks every rule and yields each table's Arrow schema and declared indexes, and a
//! content hash of the canonical schema document. A document read back from storage
//! goes through the same checks ([`Catalog::from_document`]).

mod catalog;
mod lexer;
mod parser;
#[cfg(test)]
mod tests;

use crate::limits::{
    NAME_LEN_MAX, PROPERTIES_MAX, SCHEMA_BYTES_MAX, TYPES_MAX, VECTOR_DIMENSION_MAX,
};
pub use catalog::{
    Catalog, Column, DeclaredIndex, EDGE_DST_COLUMN, EDGE_ID_COLUMN, EDGE_SRC_COLUMN, TypeDef,
};
pub use parser::parse;

/// The version of the schema document format this build writes and reads.
pub(crate) const SCHEMA_DOCUMENT_VERSION: u32 = 1;

/// Whether `name` is a valid type or property name: an ASCII letter, then ASCII
/// letters, digits and '_', at most [`NAME_LEN_MAX`] bytes. Names read back from storage
/// are checked with it before use.
pub fn is_identifier(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= NAME_LEN_MAX
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A position in schema source: one-based line and column. Absent (zero) for
/// declarations read from a stored document.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    /// One-based line; 0 when unknown.
    pub line: u32,
    /// One-based column; 0 when unknown.
    pub column: u32,
}

/// The type of a property.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PropertyType {
    /// UTF-8 text.
    String,
    /// true or false.
    Bool,
    /// 32-bit signed integer.
    Int32,
    /// 64-bit signed integer.
    Int64,
    /// 32-bit float.
    Float32,
    /// 64-bit float.
    Float64,
    /// Microseconds since the epoch, UTC.
    Timestamp,
    /// A fixed-size list of Float32 of the given dimension.
    Vector(u32),
}

impl PropertyType {
    /// How the type is spelled in `.pg` source.
    pub fn to_pg(&self) -> String {
        match self {
            PropertyType::String => "String".into(),
            PropertyType::Bool => "Bool".into(),
            PropertyType::Int32 => "Int32".into(),
            PropertyType::Int64 => "Int64".into(),
            PropertyType::Float32 => "Float32".into(),
            PropertyType::Float64 => "Float64".into(),
            PropertyType::Timestamp => "Timestamp".into(),
            PropertyType::Vector(dimension) => format!("Vector({dimension})"),
        }
    }

    /// The scalar type names of the language, in the order the docs list them.
    pub(crate) const SCALAR_NAMES: [&'static str; 7] = [
        "String",
        "Bool",
        "Int32",
        "Int64",
        "Float32",
        "Float64",
        "Timestamp",
    ];

    fn from_scalar_name(name: &str) -> Option<PropertyType> {
        Some(match name {
            "String" => PropertyType::String,
            "Bool" => PropertyType::Bool,
            "Int32" => PropertyType::Int32,
            "Int64" => PropertyType::Int64,
            "Float32" => PropertyType::Float32,
            "Float64" => PropertyType::Float64,
            "Timestamp" => PropertyType::Timestamp,
            _ => return None,
        })
    }
}

/// The kind of a declared index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IndexKind {
    /// A scalar BTree (`@key`, `@index`, edge endpoints).
    BTree,
    /// An inverted full-text index (`@index(fts)`).
    FullText,
    /// An IVF vector index (`@index(vector)`).
    Vector,
}

impl IndexKind {
    /// The suffix used in index names.
    pub fn suffix(&self) -> &'static str {
        match self {
            IndexKind::BTree => "btree",
            IndexKind::FullText => "fts",
            IndexKind::Vector => "vector",
        }
    }
}

/// Whether a type is a node or an edge.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DeclKind {
    /// A node type: exactly one `@key` property.
    Node,
    /// An edge type between two node types.
    Edge {
        /// The source node type.
        from: String,
        /// The destination node type.
        to: String,
    },
}

/// One property as declared.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PropertyDecl {
    /// The property name.
    pub name: String,
    /// Its type.
    pub data_type: PropertyType,
    /// Whether it may be null (`?`).
    pub optional: bool,
    /// Whether it is the node's key (`@key`).
    #[serde(default)]
    pub key: bool,
    /// The declared index, if any (`@index`, `@index(fts)`, `@index(vector)`).
    #[serde(default)]
    pub index: Option<IndexKind>,
    /// Where it was declared in source.
    #[serde(skip)]
    pub span: Span,
}

/// One node or edge type as declared.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TypeDecl {
    /// The type name.
    pub name: String,
    /// Node or edge, with the edge's endpoints.
    #[serde(flatten)]
    pub kind: DeclKind,
    /// The properties in declaration order.
    pub properties: Vec<PropertyDecl>,
    /// Where it was declared in source.
    #[serde(skip)]
    pub span: Span,
}
