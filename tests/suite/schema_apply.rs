//! Schema apply on real Lance tables: additions, metadata-only property changes, refusals
//! of data loss, and forced changes.

use omnigraph_core::{ErrorKind, Evidence, OmniError};
use omnigraph_graph::{Omnigraph, SchemaChange};
use omnigraph_publish::CommitRef;
use omnigraph_tests::{BACKENDS, Backend, SOCIAL_SCHEMA, TestRoot, objects};
use serde_json::{Value, json};

async fn graph_with_people(backend: Backend) -> (Omnigraph, TestRoot) {
    let test = TestRoot::new(backend).await;
    let graph = Omnigraph::create(&test.uri, SOCIAL_SCHEMA).await.unwrap();
    graph
        .insert_json(
            "Person",
            objects(json!([{"id": "p1", "name": "Ada", "age": 36}, {"id": "p2", "name": "Bob"}])),
        )
        .await
        .unwrap();
    (graph, test)
}

fn with_person(props: &str) -> String {
    SOCIAL_SCHEMA.replace(
        "node Person { id: String @key, name: String @index(fts), age: Int32? @index }",
        &format!(
            "node Person {{ id: String @key, name: String @index(fts), age: Int32? @index{props} }}"
        ),
    )
}

async fn person_data_files(test: &TestRoot, graph: &Omnigraph) -> Vec<String> {
    let head = graph.head().await.unwrap();
    let pin = head.pin_of_type("Person").unwrap();
    test.root.list(&format!("{}/data", pin.path)).await.unwrap()
}

#[tokio::test]
async fn adding_an_optional_property_rewrites_no_data_file() {
    for backend in BACKENDS {
        let (graph, test) = graph_with_people(backend).await;
        let before = person_data_files(&test, &graph).await;
        let report = graph
            .apply_schema(&with_person(", email: String?"), false)
            .await
            .unwrap();
        assert_eq!(
            report.changes,
            vec![SchemaChange::AddProperty {
                type_name: "Person".into(),
                property: "email".into()
            }]
        );
        let commit = report.commit.unwrap();
        assert_eq!(
            person_data_files(&test, &graph).await,
            before,
            "{backend:?}: no data file written"
        );
        let p1 = graph
            .get("Person", &json!("p1"), &CommitRef::Head)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(p1["email"], Value::Null);
        assert_eq!(p1["name"], "Ada");
        // The new property takes values from now on; older commits keep the old schema.
        graph
            .insert_json(
                "Person",
                objects(json!([{"id": "p3", "name": "Cy", "email": "cy@x"}])),
            )
            .await
            .unwrap();
        let p3 = graph
            .get("Person", &json!("p3"), &CommitRef::Head)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(p3["email"], "cy@x");
        let old = graph
            .get("Person", &json!("p1"), &CommitRef::Seq(commit.seq - 1))
            .await
            .unwrap()
            .unwrap();
        assert!(!old.contains_key("email"));
        // Applying the same schema again changes nothing.
        let again = graph
            .apply_schema(&with_person(", email: String?"), false)
            .await
            .unwrap();
        assert!(again.commit.is_none() && again.changes.is_empty());
    }
}

#[tokio::test]
async fn adding_and_dropping_types() {
    for backend in BACKENDS {
        let (graph, _test) = graph_with_people(backend).await;
        let extended = format!(
            "{SOCIAL_SCHEMA}\nnode City {{ name: String @key }}\nedge LivesIn: Person -> City"
        );
        let report = graph.apply_schema(&extended, false).await.unwrap();
        assert_eq!(report.changes.len(), 2);
        let commit = report.commit.unwrap();
        assert_eq!(commit.pins.len(), 5, "{backend:?}");
        graph
            .insert_json("City", objects(json!([{"name": "Oslo"}])))
            .await
            .unwrap();
        graph
            .insert_json(
                "LivesIn",
                objects(json!([{"id": "l1", "src": "p1", "dst": "Oslo"}])),
            )
            .await
            .unwrap();
        // Dropping a type that holds rows is refused unless forced, naming the change.
        let error = graph.apply_schema(SOCIAL_SCHEMA, false).await.unwrap_err();
        match &error {
            OmniError::SchemaViolation {
                message, evidence, ..
            } => {
                assert!(
                    message.contains("drop_type") && message.contains("force"),
                    "{message}"
                );
                assert_eq!(evidence, &Evidence::BeforeEffect);
            }
            other => panic!("expected SchemaViolation, got {other}"),
        }
        let head = graph.head().await.unwrap();
        assert_eq!(head.pins.len(), 5, "refusal changed nothing");
        let forced = graph
            .apply_schema(SOCIAL_SCHEMA, true)
            .await
            .unwrap()
            .commit
            .unwrap();
        assert_eq!(forced.pins.len(), 3);
        assert!(forced.pin_of_type("City").is_none());
        let error = graph
            .insert_json("City", objects(json!([{"name": "Rome"}])))
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::BadInput);
    }
}

#[tokio::test]
async fn data_losing_property_changes_need_force_and_required_needs_no_nulls() {
    let (graph, _test) = graph_with_people(Backend::Local).await;
    // Making `age` required: refused unless forced; forced, still refused while p2 has no age.
    let required = SOCIAL_SCHEMA.replace("age: Int32? @index", "age: Int32 @index");
    let error = graph.apply_schema(&required, false).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::SchemaViolation);
    assert!(error.to_string().contains("require_property"), "{error}");
    let error = graph.apply_schema(&required, true).await.unwrap_err();
    assert!(error.to_string().contains("1 rows hold null"), "{error}");
    assert_eq!(graph.head().await.unwrap().seq, 1);
    graph
        .update("Person", "id = 'p2'", &[("age".into(), json!(40))])
        .await
        .unwrap();
    let report = graph.apply_schema(&required, true).await.unwrap();
    assert!(report.commit.is_some());
    let error = graph
        .insert_json("Person", objects(json!([{"id": "p9", "name": "N"}])))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("field age"), "{error}");

    // Dropping a property of a type with rows needs force.
    let dropped = required.replace(", age: Int32 @index", "");
    let error = graph.apply_schema(&dropped, false).await.unwrap_err();
    assert!(error.to_string().contains("drop_property"), "{error}");
    graph.apply_schema(&dropped, true).await.unwrap();
    let p1 = graph
        .get("Person", &json!("p1"), &CommitRef::Head)
        .await
        .unwrap()
        .unwrap();
    assert!(!p1.contains_key("age"));

    // Unsupported changes are refused outright.
    let retyped = dropped.replace("name: String @index(fts)", "name: Int64");
    let error = graph.apply_schema(&retyped, true).await.unwrap_err();
    assert!(error.to_string().contains("changes type"), "{error}");
    let error = graph.apply_schema("node Person { id: String @key, name: String, x: Int32 }\nnode Company { id: String @key, name: String }\nedge WorksAt: Person -> Company { since: Int32? }", true).await.unwrap_err();
    assert!(error.to_string().contains("must be optional"), "{error}");
}

#[tokio::test]
async fn index_declarations_are_schema_changes() {
    let (graph, _test) = graph_with_people(Backend::Memory).await;
    let undeclared = SOCIAL_SCHEMA.replace("age: Int32? @index", "age: Int32?");
    let report = graph.apply_schema(&undeclared, false).await.unwrap();
    assert_eq!(
        report.changes,
        vec![SchemaChange::DropIndex {
            type_name: "Person".into(),
            index: "age_btree".into()
        }]
    );
    let report = graph.apply_schema(SOCIAL_SCHEMA, false).await.unwrap();
    assert_eq!(
        report.changes,
        vec![SchemaChange::DeclareIndex {
            type_name: "Person".into(),
            index: "age_btree".into()
        }]
    );
    let head = graph.head().await.unwrap();
    assert_eq!(
        graph.graph().catalog(&head).await.unwrap().hash(),
        head.schema
    );
}

/// A schema apply that loses its slot to a data write plans again and lands; one that
/// another schema apply overtook stops with `read_set_changed` on the schema, and the
/// other apply's schema stays (planned again, it would have undone it: found by
/// `cargo xtask dst`, seed 1775).
#[tokio::test]
async fn an_apply_plans_again_after_a_write_and_stops_after_another_apply() {
    use omnigraph_core::{failpoints, seams};
    let (graph, test) = graph_with_people(Backend::Memory).await;
    let other = Omnigraph::open(&test.uri).await.unwrap();
    let with_phone_and_email = with_person(", phone: String?, email: String?");
    let with_phone = with_person(", phone: String?");
    let with_fax = with_person(", phone: String?, fax: String?");
    let with_pager = with_person(", phone: String?, fax: String?, pager: String?");
    // What the rival does while the apply waits at its publication, what the apply
    // applies, and what the rival applies (if it does).
    let cases = [
        ("a write", &with_phone, None),
        ("another schema", &with_phone_and_email, Some(&with_fax)),
        ("the same schema", &with_pager, Some(&with_pager)),
    ];
    for (rival, target, rival_schema) in cases {
        let clock = seams::Simulation::new(3, seams::now_micros(), 1);
        let applied = seams::simulate(clock.clone(), async {
            let mut applying = Box::pin(graph.apply_schema(target, false));
            let ticket = omnigraph_tests::parked_at(
                &clock,
                &mut applying,
                failpoints::PUBLISH_BEFORE_GATE,
                "the apply's publication",
            )
            .await;
            match rival_schema {
                None => {
                    other
                        .insert_json("Person", objects(json!([{"id": "w1", "name": "W"}])))
                        .await
                        .unwrap();
                }
                Some(schema) => {
                    other.apply_schema(schema, false).await.unwrap();
                }
            }
            clock.windows().release(ticket);
            applying.await
        })
        .await;
        let head = graph.head().await.unwrap();
        let catalog = graph.catalog_at(&head).await.unwrap();
        let person = catalog.require("Person").unwrap();
        let has = |name: &str| person.properties().iter().any(|p| p.name == name);
        match rival {
            "another schema" => {
                let error = applied.unwrap_err();
                assert!(
                    matches!(
                        &error,
                        OmniError::ReadSetChanged {
                            member: omnigraph_core::ReadSetMember::Schema { .. },
                            ..
                        }
                    ),
                    "{error}"
                );
                assert_eq!(error.evidence(), &Evidence::Unpublished, "it staged");
                assert!(has("fax"));
                assert!(!has("email"));
            }
            "the same schema" => {
                // The schema it applies is in force: nothing to do, nothing undone.
                let report = applied.unwrap();
                assert_eq!(report.commit, None, "{rival}");
                assert!(report.changes.is_empty());
                assert_eq!(head.operation.kind, "schema_apply");
                assert!(has("pager") && has("fax"));
            }
            _ => {
                let report = applied.unwrap();
                assert_eq!(
                    report.commit.unwrap().seq,
                    head.seq,
                    "it landed after the write"
                );
            }
        }
    }
}
