//! Update and delete on real Lance tables: strict publication, cascades, bad input.

use omnigraph_core::storage::FaultAction;
use omnigraph_core::{ErrorKind, Evidence, OmniError, StorageKind};
use omnigraph_graph::{Omnigraph, ScanRequest};
use omnigraph_maintenance::MaintenanceExt;
use omnigraph_publish::{CommitRef, GraphCommit};
use omnigraph_tests::{
    BACKENDS, Backend, SOCIAL_SCHEMA, TestRoot, all_objects, fault_commit_puts, objects,
};
use serde_json::{Value, json};

/// Three people, two companies, three edges.
async fn populated(backend: Backend) -> (Omnigraph, TestRoot) {
    let test = TestRoot::new(backend).await;
    let graph = Omnigraph::create(&test.uri, SOCIAL_SCHEMA).await.unwrap();
    graph
        .insert_json(
            "Person",
            objects(json!([
                {"id": "p1", "name": "Ada", "age": 36},
                {"id": "p2", "name": "Bob", "age": 40},
                {"id": "p3", "name": "Cy", "age": 20}
            ])),
        )
        .await
        .unwrap();
    graph
        .insert_json(
            "Company",
            objects(json!([{"id": "c1", "name": "Acme"}, {"id": "c2", "name": "Initech"}])),
        )
        .await
        .unwrap();
    graph
        .insert_json(
            "WorksAt",
            objects(json!([
                {"id": "e1", "src": "p1", "dst": "c1"},
                {"id": "e2", "src": "p2", "dst": "c1"},
                {"id": "e3", "src": "p1", "dst": "c2"}
            ])),
        )
        .await
        .unwrap();
    (graph, test)
}

async fn name_of(graph: &Omnigraph, key: &str) -> Option<Value> {
    graph
        .get("Person", &json!(key), &CommitRef::Head)
        .await
        .unwrap()
        .map(|row| row["name"].clone())
}

#[tokio::test]
async fn update_changes_only_matching_rows() {
    for backend in BACKENDS {
        let (graph, _test) = populated(backend).await;
        let commit = graph
            .update(
                "Person",
                "age >= 36",
                &[("name".into(), json!("Senior")), ("age".into(), json!(50))],
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            commit.pin_of_type("Person").unwrap().row_count,
            3,
            "{backend:?}"
        );
        assert_eq!(name_of(&graph, "p1").await, Some(json!("Senior")));
        assert_eq!(name_of(&graph, "p2").await, Some(json!("Senior")));
        assert_eq!(name_of(&graph, "p3").await, Some(json!("Cy")));
        let p1 = graph
            .get("Person", &json!("p1"), &CommitRef::Head)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(p1["age"], 50);
        // Nothing matches: nothing is published.
        let head = graph.head().await.unwrap();
        assert!(
            graph
                .update("Person", "age > 1000", &[("age".into(), json!(1))])
                .await
                .unwrap()
                .is_none()
        );
        assert_eq!(graph.head().await.unwrap(), head);
        // Time travel still sees the old values.
        let before = graph
            .get("Person", &json!("p1"), &CommitRef::Seq(commit.seq - 1))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(before["name"], "Ada");
    }
}

#[tokio::test]
async fn bad_updates_are_bad_input_and_change_nothing() {
    let (graph, test) = populated(Backend::Memory).await;
    let before = all_objects(&test.root).await;
    for (predicate, property, value, expected) in [
        ("true", "id", json!("x"), "the key"),
        ("true", "shoe", json!(1), "no property shoe"),
        ("true", "age", json!("old"), "expected an Int32"),
        ("true", "name", Value::Null, "required"),
        ("nope >", "age", json!(1), "filter `nope >` on Person"),
    ] {
        let error = graph
            .update("Person", predicate, &[(property.into(), value)])
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::BadInput, "{property}: {error}");
        assert_eq!(error.evidence(), &Evidence::BeforeEffect);
        assert!(error.to_string().contains(expected), "{expected}: {error}");
    }
    assert_eq!(all_objects(&test.root).await, before);
}

#[tokio::test]
async fn an_update_prepared_before_an_insert_it_matches_must_retry() {
    for backend in BACKENDS {
        let (graph, test) = populated(backend).await;
        let other = Omnigraph::open(&test.uri).await.unwrap();
        // p4 does not exist yet; the insert adds a row the predicate matches, so the
        // update staged without it cannot publish over it.
        let prepared = graph
            .prepare_update(
                "Person",
                "id = 'p3' OR id = 'p4'",
                &[("age".into(), json!(21))],
            )
            .await
            .unwrap();
        assert_eq!(prepared.rows(), 1);
        let inserted = other
            .insert_json("Person", objects(json!([{"id": "p4", "name": "Dee"}])))
            .await
            .unwrap();
        let error = prepared.publish(&graph).await.unwrap_err();
        match &error {
            OmniError::ReadSetChanged {
                member,
                actual,
                evidence,
                ..
            } => {
                let person = inserted.pin_of_type("Person").unwrap();
                assert_eq!(member.to_string(), format!("pin:{}", person.table_id));
                assert_eq!(actual, &person.version.to_string());
                assert_eq!(evidence, &Evidence::Unpublished);
            }
            other => panic!("{backend:?}: expected ReadSetChanged, got {other}"),
        }
        assert_eq!(graph.head().await.unwrap(), inserted, "nothing published");
        let retried = graph
            .update(
                "Person",
                "id = 'p3' OR id = 'p4'",
                &[("age".into(), json!(21))],
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!(retried.seq, inserted.seq + 1);
        for key in ["p3", "p4"] {
            let row = graph
                .get("Person", &json!(key), &CommitRef::Head)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(row["age"], 21, "{key}");
        }
    }
}

#[tokio::test]
async fn an_update_prepared_before_an_insert_of_other_rows_follows_them() {
    for backend in BACKENDS {
        let (graph, test) = populated(backend).await;
        let other = Omnigraph::open(&test.uri).await.unwrap();
        let before = graph.head().await.unwrap();
        let prepared = graph
            .prepare_update("Person", "id = 'p3'", &[("age".into(), json!(21))])
            .await
            .unwrap();
        let inserted = other
            .insert_json(
                "Person",
                objects(json!([{"id": "p4", "name": "Dee", "age": 20}])),
            )
            .await
            .unwrap();
        let published = prepared.publish(&graph).await.unwrap().unwrap();
        assert_eq!(published.seq, inserted.seq + 1, "{backend:?}");
        let people = omnigraph_tests::people_and_ages(&graph).await;
        assert_eq!(
            people,
            [("p1", 36), ("p2", 40), ("p3", 21), ("p4", 20)].map(|(k, a)| (k.to_string(), a)),
            "{backend:?}: the insert is kept and only p3 changed"
        );
        // The rows the update did not touch keep their stable row ids.
        assert_eq!(
            row_ids_of(&graph, &before, &["p1", "p2"]).await,
            row_ids_of(&graph, &published, &["p1", "p2"]).await
        );
    }
}

#[tokio::test]
async fn an_update_follows_changes_to_other_fragments_but_never_to_its_own_rows() {
    for backend in BACKENDS {
        let (graph, test) = populated(backend).await;
        for (key, age) in [("p4", 4), ("p5", 5)] {
            graph
                .insert_json(
                    "Person",
                    objects(json!([{"id": key, "name": key, "age": age}])),
                )
                .await
                .unwrap();
        }
        let other = Omnigraph::open(&test.uri).await.unwrap();
        // p5 lies in another fragment: its update and a compaction-free delete of p1
        // (in the first fragment) leave p4's fragment as the update read it.
        let prepared = graph
            .prepare_update("Person", "id = 'p4'", &[("age".into(), json!(50))])
            .await
            .unwrap();
        set_age(&other, "p5", 60).await;
        other.delete("Person", "id = 'p1'").await.unwrap().unwrap();
        prepared.publish(&graph).await.unwrap().unwrap();
        assert_eq!(
            omnigraph_tests::people_and_ages(&graph).await,
            [("p2", 40), ("p3", 20), ("p4", 50), ("p5", 60)].map(|(k, a)| (k.to_string(), a)),
            "{backend:?}"
        );
        // A delete of the very row is never followed: the update would bring it back.
        let prepared = graph
            .prepare_update("Person", "id = 'p4'", &[("age".into(), json!(51))])
            .await
            .unwrap();
        other.delete("Person", "id = 'p4'").await.unwrap().unwrap();
        match prepared.publish(&graph).await.unwrap_err() {
            OmniError::ReadSetChanged { evidence, .. } => {
                assert_eq!(evidence, Evidence::Unpublished, "{backend:?}")
            }
            error => panic!("{backend:?}: expected ReadSetChanged, got {error}"),
        }
        assert_eq!(
            graph
                .update("Person", "id = 'p4'", &[("age".into(), json!(51))])
                .await
                .unwrap(),
            None,
            "{backend:?}: planned again, the update finds nothing"
        );
        assert!(
            graph
                .get("Person", &json!("p4"), &CommitRef::Head)
                .await
                .unwrap()
                .is_none()
        );
    }
}

#[tokio::test]
async fn writes_follow_other_rows_deleted_in_their_own_fragments() {
    for backend in BACKENDS {
        // p1, p2 and p3 share one fragment, e1, e2 and e3 another. Another writer's
        // update of p2 and delete of p1 (with e1 and e3) mark rows deleted in both.
        let (graph, test) = populated(backend).await;
        let other = Omnigraph::open(&test.uri).await.unwrap();
        let prepared = graph
            .prepare_update("Person", "id = 'p3'", &[("age".into(), json!(30))])
            .await
            .unwrap();
        set_age(&other, "p2", 41).await;
        let deleted = other.delete("Person", "id = 'p1'").await.unwrap().unwrap();
        let published = prepared.publish(&graph).await.unwrap().unwrap();
        assert_eq!(published.seq, deleted.seq + 1, "{backend:?}");
        assert_eq!(
            omnigraph_tests::people_and_ages(&graph).await,
            [("p2", 41), ("p3", 30)].map(|(k, a)| (k.to_string(), a)),
            "{backend:?}: both writes hold, and no deleted row came back"
        );
        assert_eq!(
            omnigraph_tests::ids_at(&graph, "WorksAt", &CommitRef::Head).await,
            ["e2"],
            "{backend:?}"
        );

        // A delete that cascades follows the same way in the node and the edge table.
        let (graph, test) = populated(backend).await;
        let other = Omnigraph::open(&test.uri).await.unwrap();
        let prepared = graph.prepare_delete("Person", "id = 'p2'").await.unwrap();
        other.delete("Person", "id = 'p1'").await.unwrap().unwrap();
        set_age(&other, "p3", 25).await;
        prepared.publish(&graph).await.unwrap().unwrap();
        assert_eq!(
            omnigraph_tests::people_and_ages(&graph).await,
            [("p3", 25)].map(|(k, a)| (k.to_string(), a)),
            "{backend:?}"
        );
        assert!(
            omnigraph_tests::ids_at(&graph, "WorksAt", &CommitRef::Head)
                .await
                .is_empty(),
            "{backend:?}"
        );
        let head = graph.head().await.unwrap();
        assert_eq!(
            graph
                .get("Person", &json!("p2"), &CommitRef::Seq(head.seq - 1))
                .await
                .unwrap()
                .map(|row| row["age"].clone()),
            Some(json!(40)),
            "{backend:?}: the commit before still has p2"
        );
    }
}

#[tokio::test]
async fn writes_to_the_same_row_of_a_fragment_never_follow_each_other() {
    for backend in BACKENDS {
        let (graph, test) = populated(backend).await;
        let other = Omnigraph::open(&test.uri).await.unwrap();
        let prepared = graph
            .prepare_update("Person", "id = 'p3'", &[("age".into(), json!(30))])
            .await
            .unwrap();
        set_age(&other, "p3", 31).await;
        let before = graph.head().await.unwrap();
        match prepared.publish(&graph).await.unwrap_err() {
            OmniError::ReadSetChanged { evidence, .. } => {
                assert_eq!(evidence, Evidence::Unpublished, "{backend:?}")
            }
            error => panic!("{backend:?}: expected ReadSetChanged, got {error}"),
        }
        assert_eq!(graph.head().await.unwrap(), before, "{backend:?}");
        assert_eq!(
            omnigraph_tests::people_and_ages(&graph).await,
            [("p1", 36), ("p2", 40), ("p3", 31)].map(|(k, a)| (k.to_string(), a)),
            "{backend:?}: only the other writer's update holds"
        );

        let prepared = graph.prepare_delete("Person", "id = 'p2'").await.unwrap();
        other.delete("Person", "id = 'p2'").await.unwrap().unwrap();
        assert_eq!(
            prepared.publish(&graph).await.unwrap_err().kind(),
            ErrorKind::ReadSetChanged,
            "{backend:?}"
        );
        assert_eq!(
            omnigraph_tests::people_and_ages(&graph).await,
            [("p1", 36), ("p3", 31)].map(|(k, a)| (k.to_string(), a)),
            "{backend:?}"
        );

        // The other writer's update moves p1 out of the predicate, so no row it added
        // matches it: only the row both marked deleted stops the follow (carried over,
        // p1 would be there twice, as the update and as the other writer's row).
        let prepared = graph
            .prepare_update("Person", "age > 33", &[("name".into(), json!("old"))])
            .await
            .unwrap();
        assert_eq!(prepared.rows(), 1, "{backend:?}: p1 only");
        set_age(&other, "p1", 30).await;
        assert_eq!(
            prepared.publish(&graph).await.unwrap_err().kind(),
            ErrorKind::ReadSetChanged,
            "{backend:?}"
        );
        assert_eq!(
            omnigraph_tests::people_and_ages(&graph).await,
            [("p1", 30), ("p3", 31)].map(|(k, a)| (k.to_string(), a)),
            "{backend:?}"
        );
        assert_eq!(
            name_of(&graph, "p1").await,
            Some(json!("Ada")),
            "{backend:?}"
        );
    }
}

#[tokio::test]
async fn an_update_follows_a_concurrent_index_build_and_the_index_answers_right() {
    for backend in BACKENDS {
        let (graph, test) = populated(backend).await;
        graph
            .insert_json(
                "Person",
                objects(json!([{"id": "p4", "name": "Dee", "age": 4}])),
            )
            .await
            .unwrap();
        let other = Omnigraph::open(&test.uri).await.unwrap();
        let prepared = graph
            .prepare_update("Person", "id = 'p4'", &[("age".into(), json!(50))])
            .await
            .unwrap();
        // The indexes cover every fragment, the update's own included (unchanged).
        other.maintenance().build_indexes().await.unwrap();
        prepared.publish(&graph).await.unwrap().unwrap();
        let ids_where = |filter: &'static str| {
            let graph = &graph;
            async move {
                let batches = graph
                    .scan(
                        "Person",
                        &ScanRequest {
                            filter: Some(filter.into()),
                            columns: vec!["id".into()],
                            limit: None,
                        },
                        &CommitRef::Head,
                    )
                    .await
                    .unwrap();
                omnigraph_graph::rows::batches_to_json(&batches)
                    .into_iter()
                    .map(|row| row["id"].as_str().unwrap().to_string())
                    .collect::<Vec<_>>()
            }
        };
        // The BTree's entry for the old value is masked by the update's deletion; the
        // new value lies in a fragment the index does not cover, and is scanned.
        assert_eq!(ids_where("age = 50").await, ["p4"], "{backend:?}");
        assert!(ids_where("age = 4").await.is_empty(), "{backend:?}");
        assert_eq!(ids_where("id = 'p4'").await, ["p4"], "{backend:?}");
    }
}

#[tokio::test]
async fn a_delete_prepared_before_an_edge_to_its_node_must_retry_and_cascades_to_it() {
    for backend in BACKENDS {
        let (graph, test) = populated(backend).await;
        let other = Omnigraph::open(&test.uri).await.unwrap();
        let prepared = graph.prepare_delete("Person", "id = 'p2'").await.unwrap();
        // An edge to another node is followed; an edge to the deleted node is not.
        other
            .insert_json(
                "WorksAt",
                objects(json!([{"id": "e4", "src": "p3", "dst": "c2"}])),
            )
            .await
            .unwrap();
        let prepared_again = graph.prepare_delete("Person", "id = 'p2'").await.unwrap();
        other
            .insert_json(
                "WorksAt",
                objects(json!([{"id": "e5", "src": "p2", "dst": "c2"}])),
            )
            .await
            .unwrap();
        for prepared in [prepared, prepared_again] {
            match prepared.publish(&graph).await.unwrap_err() {
                OmniError::ReadSetChanged { evidence, .. } => {
                    assert_eq!(evidence, Evidence::Unpublished, "{backend:?}")
                }
                error => panic!("{backend:?}: expected ReadSetChanged, got {error}"),
            }
        }
        graph.delete("Person", "id = 'p2'").await.unwrap().unwrap();
        assert_eq!(
            omnigraph_tests::ids_at(&graph, "WorksAt", &CommitRef::Head).await,
            ["e1", "e3", "e4"],
            "{backend:?}"
        );
    }
}

#[tokio::test]
async fn a_delete_prepared_before_other_edges_and_nodes_follows_them() {
    for backend in BACKENDS {
        let (graph, test) = populated(backend).await;
        let other = Omnigraph::open(&test.uri).await.unwrap();
        let prepared = graph.prepare_delete("Person", "id = 'p1'").await.unwrap();
        other
            .insert_json(
                "Person",
                objects(json!([{"id": "p4", "name": "Dee", "age": 20}])),
            )
            .await
            .unwrap();
        let inserted = other
            .insert_json(
                "WorksAt",
                objects(json!([{"id": "e4", "src": "p4", "dst": "c2"}])),
            )
            .await
            .unwrap();
        let published = prepared.publish(&graph).await.unwrap().unwrap();
        assert_eq!(published.seq, inserted.seq + 1, "{backend:?}");
        assert_eq!(
            omnigraph_tests::ids_at(&graph, "WorksAt", &CommitRef::Head).await,
            ["e2", "e4"],
            "{backend:?}"
        );
        let people: Vec<String> = omnigraph_tests::people_and_ages(&graph)
            .await
            .into_iter()
            .map(|(key, _)| key)
            .collect();
        assert_eq!(people, ["p2", "p3", "p4"], "{backend:?}");
    }
}

/// Every Person's key and age at the head, by key.
/// Sets the age of the person `key` through `graph`, which must publish.
async fn set_age(graph: &Omnigraph, key: &str, age: i64) -> GraphCommit {
    graph
        .update(
            "Person",
            &format!("id = '{key}'"),
            &[("age".into(), json!(age))],
        )
        .await
        .unwrap()
        .unwrap()
}

/// The stable row ids of `keys` in Person at `commit`.
async fn row_ids_of(graph: &Omnigraph, commit: &GraphCommit, keys: &[&str]) -> Vec<u64> {
    let table = graph
        .graph()
        .snapshot_of(commit.clone())
        .table("Person")
        .await
        .unwrap();
    omnigraph_tests::text_ids_and_row_ids(&table)
        .await
        .into_iter()
        .filter(|(key, _)| keys.contains(&key.as_str()))
        .map(|(_, row_id)| row_id)
        .collect()
}

#[tokio::test]
async fn deleting_nodes_deletes_their_edges_in_the_same_commit() {
    for backend in BACKENDS {
        let (graph, _test) = populated(backend).await;
        let before = graph.head().await.unwrap();
        let commit = graph.delete("Person", "id = 'p1'").await.unwrap().unwrap();
        assert_eq!(commit.seq, before.seq + 1, "{backend:?}: one commit");
        assert_eq!(commit.pin_of_type("Person").unwrap().row_count, 2);
        assert_eq!(
            commit.pin_of_type("WorksAt").unwrap().row_count,
            1,
            "e1 and e3 went with p1"
        );
        assert_eq!(
            commit.pin_of_type("Company").unwrap(),
            before.pin_of_type("Company").unwrap()
        );
        assert!(
            graph
                .get("WorksAt", &json!("e2"), &CommitRef::Head)
                .await
                .unwrap()
                .is_some()
        );
        assert!(
            graph
                .get("WorksAt", &json!("e1"), &CommitRef::Head)
                .await
                .unwrap()
                .is_none()
        );
        // Deleting a company cascades on the destination side.
        let commit = graph.delete("Company", "id = 'c1'").await.unwrap().unwrap();
        assert_eq!(commit.pin_of_type("WorksAt").unwrap().row_count, 0);
        // Deleting nothing publishes nothing.
        assert!(
            graph
                .delete("Person", "id = 'nobody'")
                .await
                .unwrap()
                .is_none()
        );
    }
}

#[tokio::test]
async fn a_failed_cascading_delete_leaves_nodes_and_edges_unchanged() {
    for backend in BACKENDS {
        let (graph, test) = populated(backend).await;
        let before = graph.head().await.unwrap();
        {
            let _fault = fault_commit_puts(
                graph.graph().root(),
                FaultAction::FailBefore(StorageKind::Configuration),
            );
            let error = graph.delete("Person", "id = 'p1'").await.unwrap_err();
            assert_eq!(error.evidence(), &Evidence::Unpublished, "{backend:?}");
        }
        let head = Omnigraph::open(&test.uri)
            .await
            .unwrap()
            .head()
            .await
            .unwrap();
        assert_eq!(head, before, "{backend:?}: neither table moved");
        assert!(
            graph
                .get("WorksAt", &json!("e1"), &CommitRef::Head)
                .await
                .unwrap()
                .is_some()
        );
        let error = graph.delete("Person", "nope >").await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::BadInput);
    }
}

#[tokio::test]
async fn an_update_never_points_an_edge_at_a_missing_node() {
    let (graph, test) = populated(Backend::Memory).await;
    let before = all_objects(&test.root).await;
    let head = graph.head().await.unwrap();
    for (property, value) in [("src", "nobody"), ("dst", "nowhere")] {
        let error = graph
            .update("WorksAt", "id = 'e1'", &[(property.into(), json!(value))])
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::BadInput, "{property}: {error}");
        assert!(error.to_string().contains(property), "{error}");
        assert_eq!(error.evidence(), &Evidence::BeforeEffect);
    }
    assert_eq!(graph.head().await.unwrap().seq, head.seq);
    assert_eq!(all_objects(&test.root).await, before);
}

#[tokio::test]
async fn updates_and_deletes_publish_over_commits_to_tables_they_did_not_read() {
    let (graph, test) = populated(Backend::Memory).await;
    let other = Omnigraph::open(&test.uri).await.unwrap();
    let prepared = graph
        .prepare_update("Person", "id = 'p3'", &[("age".into(), json!(21))])
        .await
        .unwrap();
    let company = other
        .insert_json("Company", objects(json!([{"id": "c9", "name": "Late"}])))
        .await
        .unwrap();
    let updated = prepared.publish(&graph).await.unwrap().unwrap();
    assert_eq!(updated.seq, company.seq + 1);
    assert_eq!(
        updated.pin_of_type("Company"),
        company.pin_of_type("Company")
    );
    let p3 = graph
        .get("Person", &json!("p3"), &CommitRef::Head)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(p3["age"], json!(21));
    // A Company delete reads Company and WorksAt, not Person.
    let prepared = graph.prepare_delete("Company", "id = 'c9'").await.unwrap();
    other
        .insert_json("Person", objects(json!([{"id": "p9", "name": "Nine"}])))
        .await
        .unwrap();
    prepared.publish(&graph).await.unwrap().unwrap();
    assert!(
        graph
            .get("Company", &json!("c9"), &CommitRef::Head)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        graph
            .get("Person", &json!("p9"), &CommitRef::Head)
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn a_delete_never_publishes_over_an_edge_inserted_to_its_node_meanwhile() {
    let (graph, test) = populated(Backend::Memory).await;
    let other = Omnigraph::open(&test.uri).await.unwrap();
    // p3 has no edges when the delete is planned: WorksAt is only read, not staged.
    let prepared = graph.prepare_delete("Person", "id = 'p3'").await.unwrap();
    let edge = other
        .insert_json(
            "WorksAt",
            objects(json!([{"id": "e9", "src": "p3", "dst": "c2"}])),
        )
        .await
        .unwrap();
    let error = prepared.publish(&graph).await.unwrap_err();
    let works_at = edge.pin_of_type("WorksAt").unwrap();
    match &error {
        OmniError::ReadSetChanged { member, .. } => {
            assert_eq!(member.to_string(), format!("pin:{}", works_at.table_id));
        }
        other => panic!("expected ReadSetChanged, got {other}"),
    }
    assert_eq!(graph.head().await.unwrap(), edge, "nothing published");
    // The one-call delete plans again on the new head and takes the new edge with it.
    graph.delete("Person", "id = 'p3'").await.unwrap().unwrap();
    assert!(
        graph
            .get("Person", &json!("p3"), &CommitRef::Head)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        graph
            .get("WorksAt", &json!("e9"), &CommitRef::Head)
            .await
            .unwrap()
            .is_none()
    );
}
