//! The `Omnigraph` handle's insert and reads on real Lance tables, on a local folder and
//! in memory.

use omnigraph_core::storage::RequestKind;
use omnigraph_core::{ErrorKind, Evidence, OmniError};
use omnigraph_graph::{LoadMode, Omnigraph, ScanRequest};
use omnigraph_publish::CommitRef;
use omnigraph_tests::{
    BACKENDS, Backend, SOCIAL_SCHEMA, TestRoot, all_objects, head_table, ids_at, objects,
};
use serde_json::{Value, json};
use std::time::Duration;

async fn new_graph(backend: Backend) -> (Omnigraph, TestRoot) {
    let test = TestRoot::new(backend).await;
    let graph = Omnigraph::create(&test.uri, SOCIAL_SCHEMA).await.unwrap();
    (graph, test)
}

#[tokio::test]
async fn insert_then_get_and_scan() {
    for backend in BACKENDS {
        let (graph, _test) = new_graph(backend).await;
        let commit = graph
            .insert_json(
                "Person",
                objects(json!([
                    {"id": "p1", "name": "Ada", "age": 36},
                    {"id": "p2", "name": "Bob"},
                    {"id": "p3", "name": "Cy", "age": 20}
                ])),
            )
            .await
            .unwrap();
        assert_eq!(commit.seq, 1);
        assert_eq!(commit.operation.summary, "3 Person");
        let ada = graph
            .get("Person", &json!("p1"), &CommitRef::Head)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(ada["name"], "Ada", "{backend:?}");
        assert_eq!(ada["age"], 36);
        let bob = graph
            .get("Person", &json!("p2"), &CommitRef::Head)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(bob["age"], Value::Null);
        assert!(
            graph
                .get("Person", &json!("p9"), &CommitRef::Head)
                .await
                .unwrap()
                .is_none()
        );

        let batches = graph
            .scan(
                "Person",
                &ScanRequest {
                    filter: Some("age >= 30 OR age IS NULL".into()),
                    columns: vec!["id".into()],
                    limit: Some(10),
                },
                &CommitRef::Head,
            )
            .await
            .unwrap();
        let rows = omnigraph_graph::rows::batches_to_json(&batches);
        let mut ids: Vec<&str> = rows.iter().map(|row| row["id"].as_str().unwrap()).collect();
        ids.sort();
        assert_eq!(ids, ["p1", "p2"]);
        assert_eq!(rows[0].len(), 1, "projection");
        let limited = graph
            .scan(
                "Person",
                &ScanRequest {
                    limit: Some(2),
                    ..Default::default()
                },
                &CommitRef::Head,
            )
            .await
            .unwrap();
        assert_eq!(limited.iter().map(|b| b.num_rows()).sum::<usize>(), 2);
        let error = graph
            .scan(
                "Person",
                &ScanRequest {
                    filter: Some("nope >".into()),
                    ..Default::default()
                },
                &CommitRef::Head,
            )
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::BadInput);
    }
}

#[tokio::test]
async fn bad_rows_fail_the_whole_call_and_publish_nothing() {
    for backend in BACKENDS {
        let (graph, test) = new_graph(backend).await;
        let before = all_objects(&test.root).await;
        for (rows, field) in [
            (
                json!([{"id": "p1", "name": "A"}, {"name": "no key"}]),
                "field id",
            ),
            (json!([{"id": "p1", "name": 7}]), "field name"),
            (json!([{"id": "p1", "name": "A", "shoe": 42}]), "field shoe"),
            (
                json!([{"id": "p1", "name": "A"}, {"id": "p1", "name": "B"}]),
                "field id",
            ),
        ] {
            let error = graph
                .insert_json("Person", objects(rows))
                .await
                .unwrap_err();
            assert_eq!(error.kind(), ErrorKind::BadInput, "{backend:?}: {error}");
            assert_eq!(error.evidence(), &Evidence::BeforeEffect);
            assert!(error.to_string().contains(field), "{error}");
            assert!(error.to_string().contains("type Person"), "{error}");
        }
        let error = graph
            .insert_json("Robot", objects(json!([{"id": "r"}])))
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::BadInput);
        assert!(error.to_string().contains("no type Robot"), "{error}");
        assert_eq!(
            graph.head().await.unwrap().seq,
            0,
            "{backend:?}: the head did not move"
        );
        assert_eq!(
            all_objects(&test.root).await,
            before,
            "{backend:?}: nothing was written"
        );
    }
}

#[tokio::test]
async fn existing_keys_conflict_and_edges_need_their_endpoints() {
    for backend in BACKENDS {
        let (graph, _test) = new_graph(backend).await;
        graph
            .insert_json("Person", objects(json!([{"id": "p1", "name": "Ada"}])))
            .await
            .unwrap();
        graph
            .insert_json("Company", objects(json!([{"id": "c1", "name": "Acme"}])))
            .await
            .unwrap();
        let error = graph
            .insert_json(
                "Person",
                objects(json!([{"id": "p2", "name": "B"}, {"id": "p1", "name": "again"}])),
            )
            .await
            .unwrap_err();
        match &error {
            OmniError::KeyConflict {
                type_name,
                key,
                location,
                evidence,
            } => {
                assert_eq!((type_name.as_str(), key.as_str()), ("Person", "\"p1\""));
                assert_eq!(evidence, &Evidence::BeforeEffect);
                let location = location.as_deref().expect("the row is named");
                assert_eq!(location.row, Some(1), "the second row gave p1");
                assert_eq!(location.field.as_deref(), Some("id"));
            }
            other => panic!("{backend:?}: expected KeyConflict, got {other}"),
        }
        assert_eq!(error.code().exit_code, 4);
        let error = graph
            .insert_json(
                "WorksAt",
                objects(json!([{"id": "e1", "src": "p1", "dst": "c9"}])),
            )
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::BadInput);
        assert!(error.to_string().contains("field dst"), "{error}");
        assert!(
            error.to_string().contains("\"c9\" is not a Company"),
            "{error}"
        );
        let commit = graph
            .insert_json(
                "WorksAt",
                objects(json!([{"id": "e1", "src": "p1", "dst": "c1", "since": 2020}])),
            )
            .await
            .unwrap();
        assert_eq!(
            commit.pin_of_type("WorksAt").unwrap().row_count,
            1,
            "{backend:?}"
        );
    }
}

#[tokio::test]
async fn racing_inserts_recommit_and_both_land() {
    for backend in BACKENDS {
        let (first, test) = new_graph(backend).await;
        let second = Omnigraph::open(&test.uri).await.unwrap();
        // Both handles are warm on genesis.
        second.head().await.unwrap();
        first
            .insert_json("Person", objects(json!([{"id": "a1", "name": "A"}])))
            .await
            .unwrap();
        let commit = second
            .insert_json(
                "Person",
                objects(json!([{"id": "b1", "name": "B"}, {"id": "b2", "name": "B2"}])),
            )
            .await
            .unwrap();
        assert_eq!(commit.seq, 2, "{backend:?}: re-committed on the new head");
        assert_eq!(commit.pin_of_type("Person").unwrap().row_count, 3);
        for key in ["a1", "b1", "b2"] {
            assert!(
                first
                    .get("Person", &json!(key), &CommitRef::Head)
                    .await
                    .unwrap()
                    .is_some(),
                "{key}"
            );
        }
        // A racing insert of a key the winner took is refused on re-check, after staging.
        let third = Omnigraph::open(&test.uri).await.unwrap();
        third.head().await.unwrap();
        first
            .insert_json("Person", objects(json!([{"id": "x", "name": "first"}])))
            .await
            .unwrap();
        let error = third
            .insert_json("Person", objects(json!([{"id": "x", "name": "third"}])))
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::KeyConflict, "{backend:?}: {error}");
        assert_eq!(error.evidence(), &Evidence::Unpublished);
        let x = first
            .get("Person", &json!("x"), &CommitRef::Head)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(x["name"], "first");
    }
}

#[tokio::test]
async fn time_travel_reads_the_rows_of_an_older_commit() {
    let (graph, _test) = new_graph(Backend::Local).await;
    let first = graph
        .insert_json("Person", objects(json!([{"id": "p1", "name": "Ada"}])))
        .await
        .unwrap();
    graph
        .insert_json("Person", objects(json!([{"id": "p2", "name": "Bob"}])))
        .await
        .unwrap();
    let at_first = CommitRef::Seq(first.seq);
    assert!(
        graph
            .get("Person", &json!("p2"), &at_first)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        graph
            .get("Person", &json!("p2"), &CommitRef::Head)
            .await
            .unwrap()
            .is_some()
    );
    let by_id = CommitRef::Id(first.commit_id.clone());
    assert!(
        graph
            .get("Person", &json!("p1"), &by_id)
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        graph
            .get("Person", &json!("p1"), &CommitRef::Seq(0))
            .await
            .unwrap()
            .is_none()
    );
}

fn write_jsonl(dir: &std::path::Path, name: &str, lines: &[Value]) -> std::path::PathBuf {
    let path = dir.join(name);
    let text: Vec<String> = lines.iter().map(|line| line.to_string()).collect();
    std::fs::write(&path, text.join("\n") + "\n").unwrap();
    path
}

#[tokio::test]
async fn load_mixed_types_with_edges_to_nodes_of_the_same_file() {
    for backend in BACKENDS {
        let (graph, _test) = new_graph(backend).await;
        let dir = tempfile::tempdir().unwrap();
        // The edge comes before its endpoints: endpoints are checked at the end.
        let path = write_jsonl(
            dir.path(),
            "graph.jsonl",
            &[
                json!({"type": "WorksAt", "id": "e1", "src": "p1", "dst": "c1", "since": 2020}),
                json!({"type": "Person", "id": "p1", "name": "Ada", "age": 36}),
                json!({"type": "Person", "id": "p2", "name": "Bob"}),
                json!({"type": "Company", "id": "c1", "name": "Acme"}),
            ],
        );
        let report = graph.load(&path, LoadMode::Append).await.unwrap();
        let commit = report.commit.unwrap();
        assert_eq!(commit.seq, 1, "{backend:?}: one commit for the whole file");
        assert_eq!(report.rows["Person"], 2);
        assert_eq!(report.rows["WorksAt"], 1);
        assert_eq!(commit.pin_of_type("Company").unwrap().row_count, 1);
        assert_eq!(commit.pin_of_type("WorksAt").unwrap().row_count, 1);
    }
}

#[tokio::test]
async fn a_bad_line_fails_the_load_naming_file_line_type_and_field() {
    for backend in BACKENDS {
        let (graph, test) = new_graph(backend).await;
        let dir = tempfile::tempdir().unwrap();
        let good = json!({"type": "Person", "id": "p1", "name": "Ada"});
        for (bad, expected) in [
            (
                json!({"type": "Person", "id": "p2", "name": "B", "age": "x"}),
                "line 2, type Person, field age",
            ),
            (
                json!({"type": "Robot", "id": "r1"}),
                "line 2, type Robot, field type",
            ),
            (json!({"id": "p2", "name": "B"}), "line 2, field type"),
            (
                json!({"type": "Person", "id": "p1", "name": "again"}),
                "line 2, type Person, field id",
            ),
            (
                json!({"type": "WorksAt", "id": "e1", "src": "p1", "dst": "c404"}),
                "line 2, type WorksAt, field dst",
            ),
        ] {
            let path = write_jsonl(dir.path(), "bad.jsonl", &[good.clone(), bad]);
            let error = graph.load(&path, LoadMode::Append).await.unwrap_err();
            assert_eq!(error.kind(), ErrorKind::BadInput, "{backend:?}: {error}");
            let message = error.to_string();
            assert!(message.contains("bad.jsonl"), "{message}");
            assert!(message.contains(expected), "{expected}: {message}");
        }
        std::fs::write(dir.path().join("broken.jsonl"), "{\"type\": \"Person\",\n").unwrap();
        let error = graph
            .load(&dir.path().join("broken.jsonl"), LoadMode::Append)
            .await
            .unwrap_err();
        assert!(
            error.to_string().contains("broken.jsonl, line 1"),
            "{error}"
        );
        assert_eq!(
            graph.head().await.unwrap().seq,
            0,
            "{backend:?}: nothing published"
        );
        let _ = test;
    }
}

#[tokio::test]
async fn a_merge_load_changes_only_the_rows_it_names() {
    for backend in BACKENDS {
        let (graph, _test) = new_graph(backend).await;
        graph
            .insert_json(
                "Person",
                objects(json!([
                    {"id": "p1", "name": "Ada", "age": 36},
                    {"id": "p2", "name": "Bob", "age": 40}
                ])),
            )
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = write_jsonl(
            dir.path(),
            "merge.jsonl",
            &[
                json!({"type": "Person", "id": "p2", "name": "Robert", "age": 41}),
                json!({"type": "Person", "id": "p3", "name": "Cy"}),
            ],
        );
        let error = graph.load(&path, LoadMode::Append).await.unwrap_err();
        assert_eq!(
            error.kind(),
            ErrorKind::KeyConflict,
            "append refuses an existing key"
        );
        let report = graph.load(&path, LoadMode::Merge).await.unwrap();
        let commit = report.commit.unwrap();
        assert_eq!(
            commit.pin_of_type("Person").unwrap().row_count,
            3,
            "{backend:?}"
        );
        let p1 = graph
            .get("Person", &json!("p1"), &CommitRef::Head)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (p1["name"].as_str(), p1["age"].as_i64()),
            (Some("Ada"), Some(36))
        );
        let p2 = graph
            .get("Person", &json!("p2"), &CommitRef::Head)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (p2["name"].as_str(), p2["age"].as_i64()),
            (Some("Robert"), Some(41))
        );
        assert!(
            graph
                .get("Person", &json!("p3"), &CommitRef::Head)
                .await
                .unwrap()
                .is_some()
        );
    }
}

#[tokio::test]
async fn a_large_load_is_checked_in_bounded_batches_staged_as_one_append_and_published_once() {
    let (graph, _test) = new_graph(Backend::Local).await;
    let dir = tempfile::tempdir().unwrap();
    let count = omnigraph_graph::limits::INGEST_BATCH_ROWS_MAX * 2 + 17;
    let lines: Vec<Value> = (0..count)
        .map(|i| json!({"type": "Person", "id": format!("p{i}"), "name": "x", "age": (i % 90) as i32}))
        .collect();
    let path = write_jsonl(dir.path(), "big.jsonl", &lines);
    let report = graph.load(&path, LoadMode::Append).await.unwrap();
    let commit = report.commit.unwrap();
    assert_eq!(commit.seq, 1);
    assert_eq!(
        commit.pin_of_type("Person").unwrap().row_count,
        count as u64
    );
    let table = head_table(&graph, "Person").await;
    assert_eq!(
        table.manifest().fragments.len(),
        1,
        "three checked batches, gathered into one append"
    );
}

#[tokio::test]
async fn racing_loads_recommit_every_batch() {
    let (first, test) = new_graph(Backend::Memory).await;
    let second = Omnigraph::open(&test.uri).await.unwrap();
    second.head().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = write_jsonl(
        dir.path(),
        "b.jsonl",
        &[
            json!({"type": "Person", "id": "b1", "name": "B"}),
            json!({"type": "Company", "id": "c1", "name": "C"}),
        ],
    );
    first
        .insert_json("Person", objects(json!([{"id": "a1", "name": "A"}])))
        .await
        .unwrap();
    let report = second.load(&path, LoadMode::Append).await.unwrap();
    let commit = report.commit.unwrap();
    assert_eq!(commit.seq, 2);
    assert_eq!(commit.pin_of_type("Person").unwrap().row_count, 2);
    assert_eq!(commit.pin_of_type("Company").unwrap().row_count, 1);
}

#[tokio::test]
async fn arrow_batches_insert_with_the_same_checks() {
    let (graph, _test) = new_graph(Backend::Memory).await;
    let commit = graph
        .insert_batches("Person", &[omnigraph_tests::people(0, 5)])
        .await
        .unwrap();
    assert_eq!(commit.pin_of_type("Person").unwrap().row_count, 5);
    let p3 = graph
        .get("Person", &json!("p3"), &CommitRef::Head)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(p3["name"], "name of p3");
    let error = graph
        .insert_batches("Person", &[omnigraph_tests::people(4, 2)])
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::KeyConflict);
    let error = graph
        .insert_batches("Company", &[omnigraph_tests::people(10, 1)])
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadInput);
    assert!(error.to_string().contains("no property age"), "{error}");
    // Edges without an id column get minted ids, as in a JSON insert.
    graph
        .insert_json("Company", objects(json!([{"id": "c1", "name": "Acme"}])))
        .await
        .unwrap();
    let ends = std::sync::Arc::new(omnigraph_core::arrow_schema::Schema::new(vec![
        omnigraph_core::arrow_schema::Field::new(
            "src",
            omnigraph_core::arrow_schema::DataType::Utf8,
            false,
        ),
        omnigraph_core::arrow_schema::Field::new(
            "dst",
            omnigraph_core::arrow_schema::DataType::Utf8,
            false,
        ),
    ]));
    let edges = omnigraph_core::arrow_array::RecordBatch::try_new(
        ends,
        vec![
            std::sync::Arc::new(omnigraph_core::arrow_array::StringArray::from(vec![
                "p0", "p1",
            ])),
            std::sync::Arc::new(omnigraph_core::arrow_array::StringArray::from(vec![
                "c1", "c1",
            ])),
        ],
    )
    .unwrap();
    graph.insert_batches("WorksAt", &[edges]).await.unwrap();
    let found = graph
        .scan("WorksAt", &ScanRequest::default(), &CommitRef::Head)
        .await
        .unwrap();
    let found = omnigraph_graph::rows::batches_to_json(&found);
    assert_eq!(found.len(), 2);
    assert!(
        found
            .iter()
            .all(|edge| edge["id"].as_str().is_some_and(|id| id.len() == 26)),
        "{found:?}"
    );
}

#[tokio::test]
async fn a_merge_load_that_loses_the_race_merges_again_on_the_new_head() {
    let (first, test) = new_graph(Backend::Local).await;
    first
        .insert_json(
            "Person",
            objects(json!([{"id": "p1", "name": "Ada", "age": 36}])),
        )
        .await
        .unwrap();
    let second = Omnigraph::open(&test.uri).await.unwrap();
    second.head().await.unwrap();
    // The first handle moves Person after the second captured its head.
    first
        .insert_json("Person", objects(json!([{"id": "p2", "name": "Bob"}])))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = write_jsonl(
        dir.path(),
        "m.jsonl",
        &[
            json!({"type": "Person", "id": "p1", "name": "Ada L.", "age": 37}),
            json!({"type": "Person", "id": "p3", "name": "Cy"}),
        ],
    );
    let report = second.load(&path, LoadMode::Merge).await.unwrap();
    let commit = report.commit.unwrap();
    assert_eq!(commit.seq, 3, "merged again on the new head");
    assert_eq!(commit.pin_of_type("Person").unwrap().row_count, 3);
    let p1 = first
        .get("Person", &json!("p1"), &CommitRef::Head)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(p1["name"], "Ada L.");
    assert!(
        first
            .get("Person", &json!("p2"), &CommitRef::Head)
            .await
            .unwrap()
            .is_some(),
        "the other writer's row stays"
    );
}

#[tokio::test]
async fn the_key_cache_follows_other_writers_deletes_and_appends() {
    let (first, test) = new_graph(Backend::Local).await;
    first
        .insert_json(
            "Person",
            objects(json!([{"id": "p1", "name": "A"}, {"id": "p2", "name": "B"}])),
        )
        .await
        .unwrap();
    // `first` has read its keys; `second` deletes p1 and appends p3.
    first
        .insert_json("Person", objects(json!([{"id": "p0", "name": "Z"}])))
        .await
        .unwrap();
    let second = Omnigraph::open(&test.uri).await.unwrap();
    second.delete("Person", "id = 'p1'").await.unwrap().unwrap();
    second
        .insert_json("Person", objects(json!([{"id": "p3", "name": "C"}])))
        .await
        .unwrap();
    first.head().await.unwrap();
    // p1 is free again; p3 is taken; p2 is still taken.
    first
        .insert_json("Person", objects(json!([{"id": "p1", "name": "A again"}])))
        .await
        .unwrap();
    for taken in ["p3", "p2", "p1"] {
        let error = first
            .insert_json("Person", objects(json!([{"id": taken, "name": "dup"}])))
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::KeyConflict, "{taken}: {error}");
    }
}

#[tokio::test]
async fn after_another_writers_delete_the_key_cache_reads_only_the_fragment_it_touched() {
    let (first, test) = new_graph(Backend::Local).await;
    // Ten fragments, one row each; `first` reads all their keys on its first insert.
    for i in 0..10 {
        first
            .insert_json(
                "Person",
                objects(json!([{"id": format!("p{i}"), "name": "A"}])),
            )
            .await
            .unwrap();
    }
    let second = Omnigraph::open(&test.uri).await.unwrap();
    second.delete("Person", "id = 'p3'").await.unwrap().unwrap();
    first.head().await.unwrap();
    let probe = first.graph().root().probe();
    first
        .insert_json("Person", objects(json!([{"id": "p3", "name": "A again"}])))
        .await
        .unwrap();
    let data_reads: Vec<String> = probe
        .requests()
        .into_iter()
        .filter(|request| {
            matches!(request.kind, RequestKind::Get | RequestKind::RangedGet)
                && request.path.contains("/data/")
        })
        .map(|request| request.path)
        .collect();
    assert!(
        data_reads.len() <= 1,
        "one fragment's keys are read again, not the table's: {data_reads:?}"
    );
    // The keys are still exact: p3 was free, the others are taken.
    for taken in ["p3", "p4", "p0"] {
        let error = first
            .insert_json("Person", objects(json!([{"id": taken, "name": "dup"}])))
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::KeyConflict, "{taken}: {error}");
    }
}

#[tokio::test]
async fn a_load_reports_its_progress_by_bytes_and_rows() {
    let test = TestRoot::new(Backend::Local).await;
    let graph = Omnigraph::create(&test.uri, SOCIAL_SCHEMA).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("people.jsonl");
    let padding = "x".repeat(180);
    let text: String = (0..12_000)
        .map(|i| format!("{{\"type\": \"Person\", \"id\": \"p{i}\", \"name\": \"{padding}\"}}\n"))
        .collect();
    std::fs::write(&path, &text).unwrap();
    let mut reports = Vec::new();
    let report = graph
        .load_with_progress(&path, LoadMode::Append, |progress| reports.push(*progress))
        .await
        .unwrap();
    assert_eq!(report.rows["Person"], 12_000);
    assert!(
        reports.len() >= 3,
        "about one report per MiB: {}",
        reports.len()
    );
    assert!(
        reports
            .windows(2)
            .all(|pair| pair[0].bytes_read < pair[1].bytes_read),
        "progress only moves forward"
    );
    let last = reports.last().unwrap();
    assert_eq!(
        last.bytes_read,
        text.len() as u64,
        "the end is the whole input"
    );
    assert_eq!(last.total_bytes, Some(text.len() as u64));
    assert_eq!(last.rows, 12_000);
}

#[tokio::test]
async fn load_progress_counts_every_byte_of_the_input() {
    let test = TestRoot::new(Backend::Memory).await;
    let graph = Omnigraph::create(&test.uri, SOCIAL_SCHEMA).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // CRLF endings, a blank line, and a last line without an ending.
    let text = "{\"type\": \"Person\", \"id\": \"p1\", \"name\": \"a\"}\r\n\r\n{\"type\": \"Person\", \"id\": \"p2\", \"name\": \"b\"}";
    let path = dir.path().join("mixed.jsonl");
    std::fs::write(&path, text).unwrap();
    let mut reports = Vec::new();
    graph
        .load_with_progress(&path, LoadMode::Append, |progress| reports.push(*progress))
        .await
        .unwrap();
    let last = reports.last().unwrap();
    assert_eq!(last.bytes_read, text.len() as u64);
    assert_eq!(last.rows, 2);
}

#[tokio::test]
async fn arrow_batches_keep_nan_and_never_go_through_json() {
    use omnigraph_core::arrow_array::{
        Array, Float32Array, Float64Array, RecordBatch, StringArray,
    };
    use omnigraph_core::arrow_schema::{DataType, Field, Schema};
    use std::sync::Arc;
    let test = TestRoot::new(Backend::Memory).await;
    let graph = Omnigraph::create(
        &test.uri,
        "node Reading { id: String @key, value: Float64, spare: Float32? }",
    )
    .await
    .unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("value", DataType::Float64, false),
        Field::new("spare", DataType::Float32, true),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(vec!["r1", "r2"])),
            Arc::new(Float64Array::from(vec![f64::NAN, 1.5])),
            Arc::new(Float32Array::from(vec![Some(f32::NAN), None])),
        ],
    )
    .unwrap();
    graph.insert_batches("Reading", &[batch]).await.unwrap();
    let table = omnigraph_tests::head_table(&graph, "Reading").await;
    let read = table.scan().try_into_batch().await.unwrap();
    use omnigraph_core::arrow_array::cast::AsArray;
    use omnigraph_core::arrow_array::types::{Float32Type, Float64Type};
    let column = |name: &str| read.column_by_name(name).unwrap().clone();
    let (ids, values, spare) = (column("id"), column("value"), column("spare"));
    let (ids, values, spare) = (
        ids.as_string::<i32>(),
        values.as_primitive::<Float64Type>(),
        spare.as_primitive::<Float32Type>(),
    );
    let r1 = (0..read.num_rows())
        .find(|row| ids.value(*row) == "r1")
        .unwrap();
    assert!(values.value(r1).is_nan(), "NaN was not kept: {:?}", values);
    assert!(
        !spare.is_null(r1) && spare.value(r1).is_nan(),
        "NaN became {:?}",
        spare
    );
    let r2 = (0..read.num_rows())
        .find(|row| ids.value(*row) == "r2")
        .unwrap();
    assert!(spare.is_null(r2));
    // A null in a required column is refused naming its row and field; an absent
    // nullable column is null.
    let partial = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("value", DataType::Float64, true),
    ]));
    let batch = RecordBatch::try_new(
        partial.clone(),
        vec![
            Arc::new(StringArray::from(vec!["r3", "r4"])),
            Arc::new(Float64Array::from(vec![Some(2.0), None])),
        ],
    )
    .unwrap();
    let error = graph.insert_batches("Reading", &[batch]).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadInput);
    assert!(
        error.to_string().contains("row 1") && error.to_string().contains("value"),
        "{error}"
    );
    let batch = RecordBatch::try_new(
        partial,
        vec![
            Arc::new(StringArray::from(vec!["r3"])),
            Arc::new(Float64Array::from(vec![Some(2.0)])),
        ],
    )
    .unwrap();
    graph.insert_batches("Reading", &[batch]).await.unwrap();
    let r3 = graph
        .get("Reading", &json!("r3"), &CommitRef::Head)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (r3["value"].clone(), r3["spare"].clone()),
        (json!(2.0), Value::Null)
    );
}

#[tokio::test]
async fn an_arrow_ipc_file_loads_as_one_type_in_one_commit() {
    let (graph, _test) = new_graph(Backend::Memory).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("people.arrow");
    let batch = omnigraph_tests::people(0, 5);
    {
        let file = std::fs::File::create(&path).unwrap();
        let mut writer = arrow::ipc::writer::FileWriter::try_new(file, &batch.schema()).unwrap();
        writer.write(&batch).unwrap();
        writer.write(&omnigraph_tests::people(5, 3)).unwrap();
        writer.finish().unwrap();
    }
    let head = graph.head().await.unwrap();
    let report = graph
        .load_columnar(
            &path,
            omnigraph_graph::InputFormat::ArrowIpc,
            "Person",
            LoadMode::Append,
        )
        .await
        .unwrap();
    assert_eq!(report.rows["Person"], 8);
    assert_eq!(report.commit.unwrap().seq, head.seq + 1, "one commit");
    let p6 = graph
        .get("Person", &json!("p6"), &CommitRef::Head)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(p6["name"], "name of p6");
    // The same file again: its keys exist, nothing is published.
    let error = graph
        .load_columnar(
            &path,
            omnigraph_graph::InputFormat::ArrowIpc,
            "Person",
            LoadMode::Append,
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::KeyConflict, "{error}");
    assert_eq!(graph.head().await.unwrap().seq, head.seq + 1);
}

#[tokio::test]
async fn a_parquet_file_loads_as_one_type_and_a_column_the_type_lacks_is_refused() {
    let (graph, _test) = new_graph(Backend::Memory).await;
    let dir = tempfile::tempdir().unwrap();
    let write_parquet = |name: &str, batch: &omnigraph_core::arrow_array::RecordBatch| {
        let path = dir.path().join(name);
        let file = std::fs::File::create(&path).unwrap();
        let properties = parquet::file::properties::WriterProperties::builder()
            .set_compression(parquet::basic::Compression::SNAPPY)
            .build();
        let mut writer =
            parquet::arrow::ArrowWriter::try_new(file, batch.schema(), Some(properties)).unwrap();
        writer.write(batch).unwrap();
        writer.close().unwrap();
        path
    };
    let path = write_parquet("people.parquet", &omnigraph_tests::people(0, 6));
    let report = graph
        .load_columnar(
            &path,
            omnigraph_graph::InputFormat::Parquet,
            "Person",
            LoadMode::Append,
        )
        .await
        .unwrap();
    assert_eq!(report.rows["Person"], 6);
    let p5 = graph
        .get("Person", &json!("p5"), &CommitRef::Head)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(p5["name"], "name of p5");
    let head = graph.head().await.unwrap();
    // Company's rows in a Person file: the unknown column is named, nothing published.
    let path = write_parquet("companies.parquet", &omnigraph_tests::people(10, 2));
    let error = graph
        .load_columnar(
            &path,
            omnigraph_graph::InputFormat::Parquet,
            "Company",
            LoadMode::Append,
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadInput);
    assert!(error.to_string().contains("age"), "{error}");
    assert_eq!(graph.head().await.unwrap(), head);
}

#[tokio::test]
async fn arrow_rows_are_checked_and_gathered_like_json_rows() {
    use omnigraph_core::arrow_array::{
        Array, FixedSizeListArray, Float32Array, RecordBatch, StringArray,
    };
    use omnigraph_core::arrow_schema::{DataType, Field, Schema};
    use std::sync::Arc;
    let (graph, _test) = new_graph(Backend::Memory).await;
    // No rows is an error, as for JSON.
    let error = graph.insert_batches("Person", &[]).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadInput, "{error}");
    // A hundred one-row batches stage as one link: one new fragment.
    let small: Vec<RecordBatch> = (0..100)
        .map(|index| omnigraph_tests::people(index, 1))
        .collect();
    let commit = graph.insert_batches("Person", &small).await.unwrap();
    assert_eq!(commit.pin_of_type("Person").unwrap().row_count, 100);
    let table = omnigraph_tests::head_table(&graph, "Person").await;
    assert_eq!(table.get_fragments().len(), 1);
    // A merge matches edges by id: edges without one are refused, naming the field.
    graph
        .insert_json("Company", objects(json!([{"id": "c1", "name": "Acme"}])))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("edges.arrow");
    let ends = Arc::new(Schema::new(vec![
        Field::new("src", DataType::Utf8, false),
        Field::new("dst", DataType::Utf8, false),
    ]));
    let edges = RecordBatch::try_new(
        ends.clone(),
        vec![
            Arc::new(StringArray::from(vec!["p0"])),
            Arc::new(StringArray::from(vec!["c1"])),
        ],
    )
    .unwrap();
    {
        let file = std::fs::File::create(&path).unwrap();
        let mut writer = arrow::ipc::writer::FileWriter::try_new(file, &ends).unwrap();
        writer.write(&edges).unwrap();
        writer.finish().unwrap();
    }
    let error = graph
        .load_columnar(
            &path,
            omnigraph_graph::InputFormat::ArrowIpc,
            "WorksAt",
            LoadMode::Merge,
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadInput);
    assert!(
        error.to_string().contains("merge") && error.to_string().contains("edges.arrow"),
        "{error}"
    );
    // A vector holding NaN is refused, naming the row.
    let test = TestRoot::new(Backend::Memory).await;
    let docs = Omnigraph::create(&test.uri, "node Doc { id: String @key, v: Vector(2)? }")
        .await
        .unwrap();
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    let vectors = FixedSizeListArray::try_new(
        item.clone(),
        2,
        Arc::new(Float32Array::from(vec![1.0, 2.0, f32::NAN, 0.5])),
        None,
    )
    .unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("v", vectors.data_type().clone(), true),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(vec!["d1", "d2"])),
            Arc::new(vectors),
        ],
    )
    .unwrap();
    let error = docs.insert_batches("Doc", &[batch]).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadInput);
    assert!(
        error.to_string().contains("row 1") && error.to_string().contains("NaN"),
        "{error}"
    );
}

/// Found by `cargo xtask dst` (seed 1): a warm handle checked an edge's endpoints
/// against the head it last saw and refused, as bad input, an edge to a person another
/// handle had inserted since. Input is refused only on the branch head.
#[tokio::test]
async fn a_warm_handle_never_refuses_input_that_is_valid_at_the_head() {
    // The other handle is warm: it has seen a head and the tables' keys. Meanwhile a
    // person is inserted and another deleted, by another handle.
    let (writer, other, _test, _) = stale_warm_handle().await;
    writer.delete("Person", "id = 'p1'").await.unwrap().unwrap();
    // An edge to the new person, and the deleted key used again: both valid now.
    other
        .insert_json(
            "WorksAt",
            objects(json!([{"id": "e1", "src": "p2", "dst": "c1"}])),
        )
        .await
        .unwrap();
    other
        .insert_json(
            "Person",
            objects(json!([{"id": "p1", "name": "Ann again"}])),
        )
        .await
        .unwrap();
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        file.path(),
        "{\"type\":\"WorksAt\",\"id\":\"e2\",\"src\":\"p1\",\"dst\":\"c1\"}\n",
    )
    .unwrap();
    writer
        .insert_json("Person", objects(json!([{"id": "p3", "name": "Cy"}])))
        .await
        .unwrap();
    other.load(file.path(), LoadMode::Append).await.unwrap();
    assert_eq!(
        ids_at(&writer, "WorksAt", &CommitRef::Head).await,
        vec!["e1", "e2"]
    );
    // Input that is bad at the head is still refused, and nothing is written.
    let error = other
        .insert_json(
            "WorksAt",
            objects(json!([{"id": "e3", "src": "nobody", "dst": "c1"}])),
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadInput, "{error}");
    assert_eq!(error.evidence(), &Evidence::BeforeEffect);
}

#[tokio::test]
async fn a_load_reports_its_first_bad_key_whichever_check_finds_it() {
    let (graph, _test) = new_graph(Backend::Memory).await;
    graph
        .insert_json("Person", objects(json!([{"id": "p0", "name": "Ada"}])))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let person = |id: &str| json!({"type": "Person", "id": id, "name": "n"});
    // Line 2 repeats a key of the call before line 3 gives one the table holds.
    let repeated_first = write_jsonl(
        dir.path(),
        "a.jsonl",
        &[person("p9"), person("p9"), person("p0")],
    );
    match graph.load(&repeated_first, LoadMode::Append).await {
        Err(OmniError::BadInput {
            location, message, ..
        }) => {
            assert_eq!(location.line, Some(2), "{message}");
            assert!(message.contains("more than once"), "{message}");
        }
        other => panic!("expected the repeated key at line 2, got {other:?}"),
    }
    // Line 1 gives a key the table holds, before lines 2 and 3 repeat one.
    let existing_first = write_jsonl(
        dir.path(),
        "b.jsonl",
        &[person("p0"), person("p8"), person("p8")],
    );
    match graph.load(&existing_first, LoadMode::Append).await {
        Err(OmniError::KeyConflict { key, location, .. }) => {
            assert_eq!(key, "\"p0\"");
            assert_eq!(location.and_then(|at| at.line), Some(1));
        }
        other => panic!("expected the existing key at line 1, got {other:?}"),
    }
    let head = graph.head().await.unwrap();
    assert_eq!(head.seq, 1, "nothing published");
}

/// A warm handle writes on the head it last saw. Another handle's schema apply that
/// landed before the write began is not a conflict: the write runs again on the branch
/// head, whether the apply changed another type or the written type itself (dst seed 9).
#[tokio::test]
async fn a_write_begun_after_another_handles_schema_apply_lands() {
    let (graph, test) = new_graph(Backend::Memory).await;
    graph
        .insert_json("Company", objects(json!([{"id": "c1", "name": "Acme"}])))
        .await
        .unwrap();
    graph
        .insert_json("Person", objects(json!([{"id": "p1", "name": "Ada"}])))
        .await
        .unwrap();
    let other = Omnigraph::open(&test.uri).await.unwrap();
    let wider_company = SOCIAL_SCHEMA.replace(
        "node Company { id: String @key, name: String }",
        "node Company { id: String @key, name: String, city: String? }",
    );
    other.apply_schema(&wider_company, false).await.unwrap();
    graph
        .insert_json("Person", objects(json!([{"id": "p2", "name": "Bob"}])))
        .await
        .unwrap();
    let wider_person = wider_company.replace(
        "age: Int32? @index }",
        "age: Int32? @index, nick: String? }",
    );
    other.apply_schema(&wider_person, false).await.unwrap();
    graph
        .insert_json("Person", objects(json!([{"id": "p3", "name": "Cy"}])))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = write_jsonl(
        dir.path(),
        "more.jsonl",
        &[json!({"type": "WorksAt", "id": "e1", "src": "p3", "dst": "c1"})],
    );
    let wider_edge = wider_person.replace("since: Int32? }", "since: Int32?, role: String? }");
    other.apply_schema(&wider_edge, false).await.unwrap();
    graph.load(&file, LoadMode::Append).await.unwrap();
    let reader = Omnigraph::open(&test.uri).await.unwrap();
    let people = ids_at(&reader, "Person", &CommitRef::Head).await;
    assert_eq!(people, ["p1", "p2", "p3"]);
    let cy = reader
        .get("Person", &json!("p3"), &CommitRef::Head)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(cy["nick"], Value::Null);
    assert_eq!(ids_at(&reader, "WorksAt", &CommitRef::Head).await, ["e1"]);
}

#[tokio::test]
async fn a_writer_that_lost_its_slot_finds_the_head_from_the_winner() {
    let (graph, test) = new_graph(Backend::Local).await;
    let other = Omnigraph::open(&test.uri).await.unwrap();
    let mut companies = vec![];
    // The other handle commits once (the winner is the head), then five times.
    for (round, commits) in [1u64, 5].into_iter().enumerate() {
        // The handle's known head is `base` from here on: its next write puts there.
        let company = |n: usize| objects(json!([{"id": format!("c{n}"), "name": "C"}]));
        let base = graph
            .insert_json("Company", company(2 * round))
            .await
            .unwrap();
        let mut last = base.clone();
        for n in 0..commits {
            let people = objects(json!([{"id": format!("p{round}.{n}"), "name": "P"}]));
            last = other.insert_json("Person", people).await.unwrap();
        }
        assert_eq!(last.seq, base.seq + commits);
        let probe = graph.graph().root().probe();
        let commit = graph
            .insert_json("Company", company(2 * round + 1))
            .await
            .unwrap();
        assert_eq!(commit.seq, last.seq + 1);
        assert_eq!(
            commit.parent_commit_id.as_deref(),
            Some(last.commit_id.as_str())
        );
        // The lost PUT, the winner read back, and the two commits after the winner;
        // when both exist, `HEAD`, and then `HEAD`'s commit and the two after it; the
        // PUT that lands, and `HEAD` copied. A writer one commit behind never reads
        // `HEAD`.
        let commit_at = |seq: u64| format!("_graph/branches/main/commits/{seq:020}.json");
        let head = "_graph/branches/main/HEAD".to_string();
        let mut expected = vec![
            (RequestKind::PutIfAbsent, commit_at(base.seq + 1)),
            (RequestKind::Get, commit_at(base.seq + 1)),
            (RequestKind::Get, commit_at(base.seq + 2)),
            (RequestKind::Get, commit_at(base.seq + 3)),
        ];
        if commits > 1 {
            expected.push((RequestKind::Get, head.clone()));
            expected.extend(
                [last.seq, last.seq + 1, last.seq + 2]
                    .map(|seq| (RequestKind::Get, commit_at(seq))),
            );
        }
        expected.extend([
            (RequestKind::PutIfAbsent, commit_at(commit.seq)),
            (RequestKind::Put, head),
        ]);
        let requests: Vec<(RequestKind, String)> = probe
            .requests()
            .into_iter()
            .filter(|request| request.path.starts_with("_graph/"))
            .map(|request| (request.kind, request.path))
            .collect();
        // The commits after the winner, and those from `HEAD`'s, are read together, in
        // any order.
        let sorted = |mut list: Vec<(RequestKind, String)>| {
            list.sort();
            list
        };
        assert_eq!(sorted(requests.clone()), sorted(expected), "{requests:?}");
        assert_eq!(requests[0].0, RequestKind::PutIfAbsent, "{requests:?}");
        companies.extend([format!("c{}", 2 * round), format!("c{}", 2 * round + 1)]);
        assert_eq!(ids_at(&graph, "Company", &CommitRef::Head).await, companies);
    }
    assert_eq!(ids_at(&graph, "Person", &CommitRef::Head).await.len(), 6);
}

#[tokio::test]
async fn an_insert_lands_after_other_writers_moved_its_table_many_times() {
    use omnigraph_core::failpoints;
    // More moves than the old bound of 8 attempts, fewer than the bound.
    const MOVES: usize = 10;
    let (graph, test) = new_graph(Backend::Local).await;
    let other = Omnigraph::open(&test.uri).await.unwrap();
    let clock = omnigraph_core::seams::Simulation::new(11, omnigraph_core::seams::now_micros(), 1);
    let mut inserting = Box::pin(omnigraph_core::seams::simulate(
        clock.clone(),
        graph.insert_json("Person", objects(json!([{"id": "mine", "name": "M"}]))),
    ));
    for n in 0..MOVES {
        // Each staging of the insert (the first, then each re-commit on a newer head)
        // waits outside the publish gate while the other handle moves Person.
        let ticket = omnigraph_tests::parked_at(
            &clock,
            &mut inserting,
            failpoints::STAGE_AFTER_MANIFEST,
            &format!("move {n}"),
        )
        .await;
        other
            .insert_json(
                "Person",
                objects(json!([{"id": format!("other{n}"), "name": "O"}])),
            )
            .await
            .unwrap();
        clock.windows().release(ticket);
    }
    let commit = inserting.await.unwrap();
    assert_eq!(
        commit.pin_of_type("Person").unwrap().row_count,
        MOVES as u64 + 1
    );
    let publications = clock.windows().reached()[failpoints::PUBLISH_BEFORE_COMMIT_PUT.name()];
    assert!(
        publications > MOVES as u64,
        "the insert lost {MOVES} publications, then landed: {publications}"
    );
    let mut expected: Vec<String> = (0..MOVES).map(|n| format!("other{n}")).collect();
    expected.push("mine".into());
    expected.sort();
    assert_eq!(ids_at(&graph, "Person", &CommitRef::Head).await, expected);
}

/// An input a load cannot open twice.
#[derive(Clone, Copy, Debug)]
enum OnceInput {
    /// A named pipe, written once and closed.
    Fifo,
    /// An anonymous pipe, read through `/proc/self/fd` as `/dev/stdin` is.
    Pipe,
}

/// A warm handle whose view is stale (another handle inserted the person `p2` since),
/// and the JSONL of an edge to `p2`: refused on the stale view, valid at the head.
async fn stale_warm_handle() -> (Omnigraph, Omnigraph, TestRoot, &'static str) {
    let (writer, test) = new_graph(Backend::Memory).await;
    let other = Omnigraph::open(&test.uri).await.unwrap();
    other
        .insert_json("Company", objects(json!([{"id": "c1", "name": "Acme"}])))
        .await
        .unwrap();
    other
        .insert_json("Person", objects(json!([{"id": "p1", "name": "Ann"}])))
        .await
        .unwrap();
    writer
        .insert_json("Person", objects(json!([{"id": "p2", "name": "Bo"}])))
        .await
        .unwrap();
    let line = "{\"type\":\"WorksAt\",\"id\":\"e1\",\"src\":\"p2\",\"dst\":\"c1\"}\n";
    (writer, other, test, line)
}

/// Loads `text` into `graph` from an input of `kind` (within 20 s: a load that opens
/// the input again may wait for a writer that is gone).
async fn load_once_input(
    graph: &Omnigraph,
    kind: OnceInput,
    text: &'static str,
) -> Result<omnigraph_graph::IngestReport, OmniError> {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let deadline = Duration::from_secs(20);
    match kind {
        OnceInput::Fifo => {
            let fifo = dir.path().join("input.jsonl");
            let made = std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap();
            assert!(made.success());
            let path = fifo.clone();
            let feeder = std::thread::spawn(move || {
                let mut pipe = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                pipe.write_all(text.as_bytes()).unwrap();
            });
            let loaded = tokio::time::timeout(deadline, graph.load(&fifo, LoadMode::Append))
                .await
                .expect("the load never opens its input twice");
            feeder.join().unwrap();
            loaded
        }
        OnceInput::Pipe => {
            use std::os::fd::AsRawFd;
            let (reader, mut writer) = std::io::pipe().unwrap();
            writer.write_all(text.as_bytes()).unwrap();
            drop(writer);
            let path = std::path::PathBuf::from(format!("/proc/self/fd/{}", reader.as_raw_fd()));
            let loaded = tokio::time::timeout(deadline, graph.load(&path, LoadMode::Append))
                .await
                .expect("the load never opens its input twice");
            drop(reader);
            loaded
        }
    }
}

/// A warm handle refused a load from a pipe or a FIFO on the head it last saw, and the
/// branch head had moved: the load runs again there from the bytes it read. (It opened
/// the input again: a FIFO whose writer was gone hung; a pipe gave nothing, and the
/// load ended `Ok` with nothing loaded.)
#[tokio::test]
async fn a_refused_load_from_a_pipe_runs_again_from_what_it_read() {
    for kind in [OnceInput::Fifo, OnceInput::Pipe] {
        let (writer, other, _test, line) = stale_warm_handle().await;
        let report = load_once_input(&other, kind, line)
            .await
            .unwrap_or_else(|error| panic!("{kind:?}: {error}"));
        assert!(
            report.commit.is_some(),
            "{kind:?}: the second run published"
        );
        assert_eq!(
            ids_at(&writer, "WorksAt", &CommitRef::Head).await,
            vec!["e1"],
            "{kind:?}"
        );
    }
}

/// The same, from an input longer than the handle keeps: the first refusal is final,
/// and nothing changed.
#[tokio::test]
async fn a_refused_load_from_a_pipe_longer_than_the_spool_keeps_its_refusal() {
    let (writer, other, _test, line) = stale_warm_handle().await;
    let other = other.with_load_budget(omnigraph_graph::LoadBudget {
        input_spool_bytes_max: 8,
        ..omnigraph_graph::LoadBudget::default()
    });
    let head = writer.head().await.unwrap();
    let error = load_once_input(&other, OnceInput::Pipe, line)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadInput, "{error}");
    assert_eq!(error.evidence(), &Evidence::BeforeEffect);
    assert!(error.to_string().contains("p2"), "{error}");
    assert_eq!(writer.head().await.unwrap().seq, head.seq);
    assert!(
        ids_at(&writer, "WorksAt", &CommitRef::Head)
            .await
            .is_empty()
    );
}
