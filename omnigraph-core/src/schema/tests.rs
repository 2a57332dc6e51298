use super::*;
use crate::error::{ErrorKind, OmniError};
use arrow_schema::{DataType, TimeUnit};
use proptest::prelude::*;

const EXAMPLE: &str = r#"
// People and where they work.
node Person { id: String @key, name: String @index(fts), age: Int32? @index, embedding: Vector(8)? @index(vector) }
node Company { id: String @key, name: String }
edge WorksAt: Person -> Company { since: Int32? }
"#;

fn bad(text: &str) -> (u64, u64, String) {
    match parse("test.pg", text) {
        Err(OmniError::BadInput {
            location, message, ..
        }) => {
            assert_eq!(location.source.as_deref(), Some("test.pg"));
            (
                location.line.unwrap_or(0),
                location.column.unwrap_or(0),
                message,
            )
        }
        Err(other) => panic!("expected BadInput for {text:?}, got {other}"),
        Ok(_) => panic!("expected an error for {text:?}"),
    }
}

#[test]
fn example_builds_tables_and_indexes() {
    let catalog = parse("example.pg", EXAMPLE).unwrap();
    let names: Vec<&str> = catalog.types().iter().map(|t| t.name()).collect();
    assert_eq!(names, ["Person", "Company", "WorksAt"]);

    let person = catalog.get("Person").unwrap();
    assert_eq!(person.key_column(), "id");
    let schema = person.arrow_schema();
    assert_eq!(schema.fields().len(), 4);
    assert_eq!(schema.field(0).data_type(), &DataType::Utf8);
    assert!(!schema.field(0).is_nullable());
    assert_eq!(schema.field(2).data_type(), &DataType::Int32);
    assert!(schema.field(2).is_nullable());
    match schema.field(3).data_type() {
        DataType::FixedSizeList(item, 8) => assert_eq!(item.data_type(), &DataType::Float32),
        other => panic!("embedding is {other:?}"),
    }
    let indexes: Vec<(&str, IndexKind)> = person
        .declared_indexes()
        .iter()
        .map(|index| (index.name.as_str(), index.kind))
        .collect();
    assert_eq!(
        indexes,
        [
            ("id_btree", IndexKind::BTree),
            ("name_fts", IndexKind::FullText),
            ("age_btree", IndexKind::BTree),
            ("embedding_vector", IndexKind::Vector),
        ]
    );

    let works_at = catalog.get("WorksAt").unwrap();
    assert!(!works_at.is_node());
    let columns: Vec<(&str, bool)> = works_at
        .columns()
        .iter()
        .map(|column| (column.name.as_str(), column.nullable))
        .collect();
    assert_eq!(
        columns,
        [
            ("id", false),
            ("src", false),
            ("dst", false),
            ("since", true)
        ]
    );
    let edge_indexes: Vec<&str> = works_at
        .declared_indexes()
        .iter()
        .map(|index| index.name.as_str())
        .collect();
    assert_eq!(edge_indexes, ["id_btree", "src_btree", "dst_btree"]);
    assert_eq!(catalog.get("Company").unwrap().declared_indexes().len(), 1);
}

#[test]
fn every_property_type_maps_to_arrow() {
    let catalog = parse(
        "t.pg",
        "node T { k: Int64 @key, s: String?, b: Bool, i: Int32, f: Float32, d: Float64, t: Timestamp, v: Vector(3) }",
    )
    .unwrap();
    let schema = catalog.get("T").unwrap().arrow_schema();
    let types: Vec<DataType> = schema
        .fields()
        .iter()
        .map(|field| field.data_type().clone())
        .collect();
    assert_eq!(types[0], DataType::Int64);
    assert_eq!(types[1], DataType::Utf8);
    assert_eq!(types[2], DataType::Boolean);
    assert_eq!(types[4], DataType::Float32);
    assert_eq!(types[5], DataType::Float64);
    assert_eq!(
        types[6],
        DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
    );
    assert!(matches!(types[7], DataType::FixedSizeList(_, 3)));
}

#[test]
fn edge_endpoint_columns_take_the_key_types() {
    let catalog = parse(
        "t.pg",
        "node A { k: Int64 @key }\nnode B { k: String @key }\nedge E: A -> B",
    )
    .unwrap();
    let schema = catalog.get("E").unwrap().arrow_schema();
    assert_eq!(schema.field(1).data_type(), &DataType::Int64);
    assert_eq!(schema.field(2).data_type(), &DataType::Utf8);
}

#[test]
fn hash_is_stable_and_ignores_layout_but_not_content() {
    let compact = parse("a.pg", EXAMPLE).unwrap();
    let spaced = parse(
        "b.pg",
        &EXAMPLE
            .replace(", ", ",\n   ")
            .replace("{ ", "{\n  // comment\n  "),
    )
    .unwrap();
    assert_eq!(compact.hash(), spaced.hash());
    assert_eq!(compact.hash().len(), 64);
    let changed = parse("c.pg", &EXAMPLE.replace("since: Int32?", "since: Int64?")).unwrap();
    assert_ne!(compact.hash(), changed.hash());
    // The canonical rendering and the stored document both round-trip to the same catalog.
    let rendered = parse("d.pg", &compact.to_pg()).unwrap();
    assert_eq!(rendered.hash(), compact.hash());
    let stored = Catalog::from_document("_graph/schemas/x.json", compact.document()).unwrap();
    assert_eq!(stored.hash(), compact.hash());
    assert_eq!(stored.types().len(), 3);
}

#[test]
fn stored_documents_are_checked_like_source() {
    let error =
        Catalog::from_document("_graph/schemas/x.json", "{\"format_version\": 1").unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corrupt);
    assert!(error.to_string().contains("_graph/schemas/x.json"));
    let future = r#"{"format_version": 99, "types": []}"#;
    let error = Catalog::from_document("s.json", future).unwrap_err();
    assert!(error.to_string().contains("version 99"), "{error}");
    // A document that parses as JSON but breaks a rule is refused with the same rule.
    let catalog = parse("a.pg", "node A { k: String @key }").unwrap();
    let tampered = catalog
        .document()
        .replace("\"name\": \"A\"", "\"name\": \"Per.son\"");
    let error = Catalog::from_document("s.json", &tampered).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadInput);
    assert!(error.to_string().contains("path characters"), "{error}");
}

#[test]
fn unknown_type_names_line_and_column() {
    let (line, column, message) = bad("node A {\n  k: String @key,\n  n: Strng\n}");
    assert_eq!((line, column), (3, 6));
    assert!(message.contains("unknown type 'Strng'"), "{message}");
}

#[test]
fn duplicate_type_and_property_names() {
    let (line, _, message) = bad("node A { k: String @key }\nnode a { k: String @key }");
    assert_eq!(line, 2);
    assert!(message.contains("duplicate type name 'a'"), "{message}");
    let (line, column, message) = bad("node A { k: String @key,\n name: String, Name: Int32 }");
    assert_eq!((line, column), (2, 16));
    assert!(message.contains("duplicate property 'Name'"), "{message}");
}

#[test]
fn missing_or_second_key() {
    let (_, _, message) = bad("node A { name: String }");
    assert!(message.contains("no @key"), "{message}");
    let (line, column, message) = bad("node A { a: String @key,\n b: String @key }");
    assert_eq!((line, column), (2, 2));
    assert!(message.contains("second @key (b)"), "{message}");
    let (_, _, message) = bad("node A { a: String @key @key }");
    assert!(message.contains("twice"), "{message}");
    let (_, _, message) = bad("node A { a: String? @key }");
    assert!(message.contains("cannot be optional"), "{message}");
    let (_, _, message) = bad("node A { a: Float64 @key }");
    assert!(
        message.contains("must be String, Int32 or Int64"),
        "{message}"
    );
    let (_, _, message) = bad("node A { a: String @key }\nedge E: A -> A { w: String @key }");
    assert!(message.contains("edges get a minted id"), "{message}");
}

#[test]
fn vector_dimensions() {
    let (line, column, message) = bad("node A { k: String @key, v: Vector(0) }");
    assert_eq!((line, column), (1, 26));
    assert!(message.contains("dimension 0"), "{message}");
    let (_, _, message) = bad("node A { k: String @key, v: Vector(99999999999) }");
    assert!(message.contains("99999999999"), "{message}");
    let (_, _, message) = bad("node A { k: String @key, v: Vector(x) }");
    assert!(
        message.contains("expected the vector dimension"),
        "{message}"
    );
    let (_, _, message) = bad("node A { k: String @key, v: Vector(4) @index }");
    assert!(message.contains("@index(vector)"), "{message}");
    let (_, _, message) = bad("node A { k: String @key, v: Int32 @index(vector) }");
    assert!(message.contains("needs a Vector"), "{message}");
    let (_, _, message) = bad("node A { k: String @key, v: Int32 @index(fts) }");
    assert!(message.contains("needs a String"), "{message}");
    let (_, _, message) = bad("node A { k: String @key, v: Int32 @index(hash) }");
    assert!(message.contains("unknown index kind 'hash'"), "{message}");
    let (_, _, message) = bad("node A { k: String @key, v: Int32 @unique }");
    assert!(
        message.contains("unknown annotation '@unique'"),
        "{message}"
    );
}

#[test]
fn names_with_path_characters_separators_or_dots() {
    for text in [
        "node Per/son { k: String @key }",
        "node Per\\son { k: String @key }",
        "node Per.son { k: String @key }",
        "node A { k: String @key, a.b: Int32 }",
        "node A { k: String @key, a/b: Int32 }",
        "node ../etc { k: String @key }",
        "node A { k: String @key, a$b: Int32 }",
    ] {
        let (line, column, message) = bad(text);
        assert_eq!(line, 1, "{text}");
        assert!(column > 1, "{text}");
        assert!(
            message.contains("path characters, separators or dots"),
            "{text}: {message}"
        );
    }
    let (_, _, message) = bad("node Ünï { k: String @key }");
    assert!(message.contains("unexpected character"), "{message}");
    let long = "A".repeat(NAME_LEN_MAX + 1);
    let (_, _, message) = bad(&format!("node {long} {{ k: String @key }}"));
    assert!(message.contains("limit is 64"), "{message}");
}

#[test]
fn reserved_names() {
    let (_, _, message) = bad("node node { k: String @key }");
    assert!(message.contains("reserved"), "{message}");
    let (_, _, message) = bad("node String { k: String @key }");
    assert!(message.contains("reserved"), "{message}");
    let (_, _, message) = bad("node A { k: String @key, _rowid: Int64 }");
    assert!(message.contains("reserved"), "{message}");
    let (_, _, message) = bad("node A { k: String @key, type: String }");
    assert!(message.contains("'type' names the type"), "{message}");
    let (_, _, message) = bad("node A { k: String @key }\nedge E: A -> A { src: String }");
    assert!(
        message.contains("edge tables hold id, src and dst"),
        "{message}"
    );
}

#[test]
fn edge_endpoints_must_be_declared_node_types() {
    let (line, _, message) = bad("node A { k: String @key }\nedge E: A -> B");
    assert_eq!(line, 2);
    assert!(
        message.contains("B, which is not a declared node type"),
        "{message}"
    );
    let (_, _, message) = bad("node A { k: String @key }\nedge E: A -> A\nedge F: A -> E");
    assert!(message.contains("E, which is an edge type"), "{message}");
}

#[test]
fn syntax_errors_name_what_was_expected() {
    let (_, _, message) = bad("");
    assert!(message.contains("no types"), "{message}");
    let (line, column, message) = bad("node A { k String @key }");
    assert_eq!((line, column), (1, 12));
    assert!(
        message.contains("expected ':' after property k"),
        "{message}"
    );
    let (_, _, message) = bad("node A { k: String @key");
    assert!(message.contains("end of input"), "{message}");
    let (_, _, message) = bad("table A { k: String @key }");
    assert!(message.contains("expected 'node' or 'edge'"), "{message}");
    let (_, _, message) = bad("node A { k: String @key }\nedge E A -> A");
    assert!(message.contains("expected ':' after edge E"), "{message}");
}

#[test]
fn errors_change_nothing_and_carry_before_effect() {
    let error = parse("x.pg", "node A {").unwrap_err();
    assert_eq!(error.evidence(), &crate::error::Evidence::BeforeEffect);
    assert_eq!(error.code().exit_code, 2);
}

/// Fragments that random schemas are assembled from: enough of the grammar that many
/// inputs get deep into the parser and the checker, plus junk.
fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("node ".to_string()),
        Just("edge ".to_string()),
        Just("{".to_string()),
        Just("}".to_string()),
        Just(":".to_string()),
        Just(",".to_string()),
        Just("->".to_string()),
        Just("?".to_string()),
        Just("@key ".to_string()),
        Just("@index".to_string()),
        Just("(fts)".to_string()),
        Just("(vector)".to_string()),
        Just("Vector(".to_string()),
        Just(")".to_string()),
        Just("String ".to_string()),
        Just("Int32 ".to_string()),
        Just("\n".to_string()),
        Just("// c\n".to_string()),
        "[A-Za-z_][A-Za-z0-9_]{0,8} ",
        "[0-9]{1,25}",
        any::<char>().prop_map(|c| c.to_string()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_text_never_panics(text in "\\PC{0,200}") {
        let _ = parse("fuzz.pg", &text);
    }

    #[test]
    fn random_token_soup_never_panics(parts in prop::collection::vec(fragment(), 0..60)) {
        let text: String = parts.concat();
        match parse("fuzz.pg", &text) {
            Ok(catalog) => {
                // Whatever parses renders back to the same catalog.
                let again = parse("again.pg", &catalog.to_pg()).unwrap();
                prop_assert_eq!(again.hash(), catalog.hash());
            }
            Err(error) => prop_assert_eq!(error.kind(), ErrorKind::BadInput),
        }
    }

    #[test]
    fn generated_valid_schemas_round_trip(
        type_count in 1usize..5,
        property_types in prop::collection::vec(0usize..8, 0..6),
        optional in prop::collection::vec(any::<bool>(), 6),
    ) {
        let scalar = ["String", "Bool", "Int32", "Int64", "Float32", "Float64", "Timestamp", "Vector(4)"];
        let mut text = String::new();
        for index in 0..type_count {
            text.push_str(&format!("node N{index} {{ key: String @key"));
            for (position, type_index) in property_types.iter().enumerate() {
                let mark = if optional[position] { "?" } else { "" };
                text.push_str(&format!(", p{position}: {}{mark}", scalar[*type_index]));
            }
            text.push_str(" }\n");
        }
        text.push_str("edge Link: N0 -> N0 { weight: Float64? }\n");
        let catalog = parse("gen.pg", &text).unwrap();
        prop_assert_eq!(catalog.types().len(), type_count + 1);
        let again = Catalog::from_document("doc", catalog.document()).unwrap();
        prop_assert_eq!(again.hash(), catalog.hash());
        prop_assert_eq!(again.get("N0").unwrap().arrow_schema(), catalog.get("N0").unwrap().arrow_schema());
    }
}
