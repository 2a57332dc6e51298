//! Optimize on real Lance tables: compaction that keeps every row and row id, index
//! folds and deferred builds, per-table publication beside concurrent writers, failure
//! evidence, and convergence over runs.

use omnigraph_core::adapter::built_partitions;
use omnigraph_core::lance::index::DatasetIndexExt;
use omnigraph_core::storage::{FaultAction, RequestKind};
use omnigraph_core::{Evidence, OmniError, StorageKind, failpoints};
use omnigraph_graph::Omnigraph;
use omnigraph_maintenance::MaintenanceExt;
use omnigraph_maintenance::optimize as run_optimize;
use omnigraph_maintenance::optimize::{plan_unit, publish_unit};
use omnigraph_publish::CommitRef;
use omnigraph_tests::{Backend, SOCIAL_SCHEMA, TestRoot, fault_commit_puts, head_table, objects};
use rand::{Rng, SeedableRng, rngs::StdRng};
use serde_json::{Value, json};

const VECTOR_SCHEMA: &str = "
node Person { id: String @key, name: String, embedding: Vector(16)? @index(vector) }
";

fn budget() -> omnigraph_maintenance::MaintenanceBudget {
    Default::default()
}

async fn fifty_inserts(backend: Backend) -> (Omnigraph, TestRoot) {
    let test = TestRoot::new(backend).await;
    let graph = Omnigraph::create(&test.uri, SOCIAL_SCHEMA).await.unwrap();
    graph
        .insert_json(
            "Person",
            objects(json!([{"id": "p0", "name": "apple zero", "age": 0}])),
        )
        .await
        .unwrap();
    graph.maintenance().build_indexes().await.unwrap();
    for i in 1..50 {
        let word = ["apple", "banana", "cherry"][i % 3];
        graph
            .insert_json(
                "Person",
                objects(json!([{"id": format!("p{i}"), "name": format!("{word} {i}"), "age": i}])),
            )
            .await
            .unwrap();
    }
    (graph, test)
}

#[tokio::test]
async fn fifty_small_inserts_compact_keeping_rows_row_ids_and_results() {
    for backend in [Backend::Local, Backend::Memory] {
        let (graph, _test) = fifty_inserts(backend).await;
        let before_table = head_table(&graph, "Person").await;
        assert_eq!(before_table.manifest().fragments.len(), 50);
        let before_rows = ids_and_row_ids_of(&before_table).await;
        let scalar_before = scalar_ids(&graph).await;
        let text_before = text_ids(&graph).await;
        let report = run_optimize(&graph, &budget()).await.unwrap();
        let person = report.table("Person").unwrap();
        assert!(person.published(), "{person:?}");
        // Lance bins neighbouring fragments only when the same indexes cover them: the
        // indexed first fragment and the 49 later ones compact apart in the first run.
        assert_eq!(person.fragments_before, 50);
        assert!(person.fragments_after <= 2, "{backend:?}: {person:?}");
        assert!(
            person.indexes_folded.contains(&"id_btree".to_string()),
            "{person:?}"
        );
        assert!(
            person.indexes_folded.contains(&"age_btree".to_string()),
            "{person:?}"
        );
        assert!(
            person.indexes_folded.contains(&"name_fts".to_string()),
            "full-text is folded (rebuilt whole): {person:?}"
        );
        // Untouched tables publish nothing.
        assert!(
            report
                .tables
                .iter()
                .filter(|t| t.type_key != "Person")
                .all(|t| !t.published())
        );

        let after_table = head_table(&graph, "Person").await;
        assert_eq!(
            ids_and_row_ids_of(&after_table).await,
            before_rows,
            "every row keeps its stable row id"
        );
        assert_eq!(scalar_ids(&graph).await, scalar_before);
        let mut scanner = after_table.scan();
        scanner.filter("id = 'p7'").unwrap();
        let plan = scanner.explain_plan(true).await.unwrap();
        assert!(
            plan.contains("ScalarIndexQuery") && plan.contains("id_btree"),
            "the BTree is used again: {plan}"
        );
        assert_eq!(
            text_ids(&graph).await,
            text_before,
            "full-text results are unchanged"
        );
        assert_eq!(
            text_before.len(),
            17,
            "apple: p0 and every third of p1..p49"
        );
    }
}

async fn ids_and_row_ids_of(table: &omnigraph_core::lance::Dataset) -> Vec<(String, u64)> {
    omnigraph_tests::text_ids_and_row_ids(table).await
}

async fn text_ids(graph: &Omnigraph) -> Vec<String> {
    let found = graph
        .search_text("Person", "name", "apple", 100, &CommitRef::Head)
        .await
        .unwrap();
    let mut ids: Vec<String> = found
        .iter()
        .map(|row| row["id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

async fn scalar_ids(graph: &Omnigraph) -> Vec<String> {
    let batches = graph
        .scan(
            "Person",
            &omnigraph_graph::ScanRequest {
                filter: Some("age >= 20 AND age < 30".into()),
                columns: vec!["id".into()],
                limit: Some(100),
            },
            &CommitRef::Head,
        )
        .await
        .unwrap();
    let mut ids: Vec<String> = omnigraph_graph::rows::batches_to_json(&batches)
        .into_iter()
        .map(|row| row["id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

fn vectors(rng: &mut StdRng, start: usize, count: usize) -> Vec<serde_json::Map<String, Value>> {
    (start..start + count)
        .map(|i| {
            let embedding: Vec<f32> = (0..16).map(|_| rng.random::<f32>()).collect();
            json!({"id": format!("v{i}"), "name": "v", "embedding": embedding})
                .as_object()
                .unwrap()
                .clone()
        })
        .collect()
}

/// For each stored vector, the id of its nearest row.
async fn nearest_self(graph: &Omnigraph, probes: &[(String, Vec<f32>)]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for (id, vector) in probes {
        let rows = graph
            .nearest("Person", "embedding", vector, 1, None, &CommitRef::Head)
            .await
            .unwrap();
        found.push((id.clone(), rows[0]["id"].as_str().unwrap().to_string()));
    }
    found
}

#[tokio::test]
async fn an_ivf_index_keeps_its_partitions_after_a_fold() {
    let test = TestRoot::new(Backend::Local).await;
    let graph = Omnigraph::create(&test.uri, VECTOR_SCHEMA).await.unwrap();
    let mut rng = StdRng::seed_from_u64(5);
    graph
        .insert_json("Person", vectors(&mut rng, 0, 4_000))
        .await
        .unwrap();
    graph.maintenance().build_indexes().await.unwrap();
    assert_eq!(
        built_partitions(&*head_table(&graph, "Person").await, "embedding_vector")
            .await
            .unwrap(),
        Some(63),
        "√4,000 rounds to 63"
    );
    for round in 0..5 {
        graph
            .insert_json("Person", vectors(&mut rng, 4_000 + round * 10, 10))
            .await
            .unwrap();
    }
    // Stored vectors as queries: each finds itself first, before and after the fold.
    let request = omnigraph_graph::ScanRequest {
        filter: Some("id IN ('v7', 'v1234', 'v3999', 'v4003')".into()),
        columns: vec!["id".into(), "embedding".into()],
        limit: Some(10),
    };
    let stored = graph
        .scan("Person", &request, &CommitRef::Head)
        .await
        .unwrap();
    let probes: Vec<(String, Vec<f32>)> = omnigraph_graph::rows::batches_to_json(&stored)
        .into_iter()
        .map(|row| {
            let vector = row["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
                .collect();
            (row["id"].as_str().unwrap().to_string(), vector)
        })
        .collect();
    assert_eq!(probes.len(), 4);
    let before = nearest_self(&graph, &probes).await;
    assert!(before.iter().all(|(id, found)| id == found), "{before:?}");
    let report = run_optimize(&graph, &budget()).await.unwrap();
    assert!(
        report.tables[0]
            .indexes_folded
            .contains(&"embedding_vector".to_string()),
        "{report:?}"
    );
    let table = head_table(&graph, "Person").await;
    // 4,050 vectors call for 64 partitions, less than twice 63: the fold keeps 63.
    assert!(report.tables[0].indexes_retrained.is_empty(), "{report:?}");
    assert_eq!(
        built_partitions(&table, "embedding_vector").await.unwrap(),
        Some(63)
    );
    let indexes = table.load_indices().await.unwrap();
    let index = indexes
        .iter()
        .find(|i| i.name == "embedding_vector")
        .unwrap();
    let covered = index
        .effective_fragment_bitmap(table.fragment_bitmap())
        .unwrap();
    assert!(
        table
            .manifest()
            .fragments
            .iter()
            .all(|f| covered.contains(f.id as u32)),
        "the fold covers every fragment"
    );
    assert_eq!(
        nearest_self(&graph, &probes).await,
        before,
        "vector results are unchanged by the fold"
    );
}

#[tokio::test]
async fn a_pending_vector_index_waits_and_a_later_run_builds_it() {
    let test = TestRoot::new(Backend::Memory).await;
    let graph = Omnigraph::create(&test.uri, VECTOR_SCHEMA).await.unwrap();
    graph
        .insert_json("Person", objects(json!([{"id": "a", "name": "no vector"}])))
        .await
        .unwrap();
    let report = run_optimize(&graph, &budget()).await.unwrap();
    let person = &report.tables[0];
    assert!(
        person
            .pending_indexes
            .iter()
            .any(|p| p.index == "embedding_vector" && p.reason.contains("no non-null vectors"))
    );
    assert!(person.indexes_built.contains(&"id_btree".to_string()));
    let mut rng = StdRng::seed_from_u64(9);
    graph
        .insert_json("Person", vectors(&mut rng, 0, 300))
        .await
        .unwrap();
    let report = run_optimize(&graph, &budget()).await.unwrap();
    assert!(
        report.tables[0]
            .indexes_built
            .contains(&"embedding_vector".to_string()),
        "{report:?}"
    );
}

/// The fragments the `age_btree` index of `table` says it covers.
async fn age_index_coverage(
    table: &omnigraph_core::lance::Dataset,
) -> std::collections::BTreeSet<u32> {
    table
        .load_indices()
        .await
        .unwrap()
        .iter()
        .find(|index| index.name == "age_btree")
        .and_then(|index| index.fragment_bitmap.as_ref())
        .expect("age_btree with a fragment bitmap")
        .iter()
        .collect()
}

/// The ids of Person at the head, sorted.
async fn person_ids(graph: &Omnigraph) -> Vec<String> {
    ids_and_row_ids_of(&*head_table(graph, "Person").await)
        .await
        .into_iter()
        .map(|(id, _)| id)
        .collect()
}

fn pending_names(person: &omnigraph_maintenance::TableOptimize) -> Vec<String> {
    let mut names: Vec<String> = person
        .pending_indexes
        .iter()
        .map(|pending| pending.index.clone())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_unit_restages_beside_a_concurrent_insert_and_every_row_and_index_answers() {
    let (graph, test) = fifty_inserts(Backend::Local).await;
    let before = ids_and_row_ids_of(&*head_table(&graph, "Person").await).await;
    let unit = plan_unit(&graph, "Person", &budget().compaction)
        .await
        .unwrap();
    assert!(unit.has_work());
    let other = Omnigraph::open(&test.uri).await.unwrap();
    other
        .insert_json(
            "Person",
            objects(json!([{"id": "late", "name": "late", "age": 25}])),
        )
        .await
        .unwrap();
    let person = publish_unit(&graph, unit).await.unwrap();
    assert!(person.published(), "{person:?}");
    // The compaction landed on the new pin: the 50 rows in one or two fragments, and
    // the late row's own fragment beside them.
    assert_eq!(person.fragments_before, 51, "{person:?}");
    assert!(person.fragments_after <= 3, "{person:?}");
    let after = ids_and_row_ids_of(&*head_table(&graph, "Person").await).await;
    let kept: Vec<(String, u64)> = after
        .iter()
        .filter(|(id, _)| id != "late")
        .cloned()
        .collect();
    assert_eq!(kept, before, "every row keeps its stable row id");
    assert!(
        after.iter().any(|(id, _)| id == "late"),
        "the insert is kept"
    );
    // The folds were built on the planned layout, whose compacted fragments now carry
    // other ids (a BTree holds row addresses): they are built again on the new tip, so
    // they cover the compacted rows and the late row. (A fold re-committed with
    // renumbered coverage answered with row addresses of other fragments.)
    assert!(
        person.indexes_folded.contains(&"age_btree".to_string())
            && person.indexes_folded.contains(&"id_btree".to_string()),
        "{person:?}"
    );
    assert!(
        person.indexes_folded.contains(&"name_fts".to_string()),
        "{person:?}"
    );
    assert!(pending_names(&person).is_empty(), "{person:?}");
    let table = head_table(&graph, "Person").await;
    let covered = age_index_coverage(&table).await;
    for fragment in table.manifest().fragments.iter() {
        assert!(covered.contains(&(fragment.id as u32)), "{:?}", fragment.id);
    }
    let mut expected: Vec<String> = (20..30).map(|i| format!("p{i}")).collect();
    expected.push("late".into());
    expected.sort();
    assert_eq!(scalar_ids(&graph).await, expected);
    assert_eq!(scalar_ids(&other).await, expected);
}

/// A busy table moves during most restages: the unit restages each time and lands once
/// the table holds still, here after a writer moved it before its first publication and
/// during each of its next five restages. (At 3 restages it ended `pin_moved`, and
/// under four busy writers the busiest table's fragments piled up for good.)
#[tokio::test]
async fn a_unit_lands_after_a_writer_moved_its_table_during_many_restages() {
    const MOVES: usize = 6;
    let (graph, test) = fifty_inserts(Backend::Local).await;
    let other = Omnigraph::open(&test.uri).await.unwrap();
    let unit = plan_unit(&graph, "Person", &budget().compaction)
        .await
        .unwrap();
    assert!(unit.has_work());
    insert_late(&other, 0).await;
    let clock = omnigraph_core::seams::Simulation::new(7, omnigraph_core::seams::now_micros(), 1);
    let mut publishing = Box::pin(omnigraph_core::seams::simulate(
        clock.clone(),
        publish_unit(&graph, unit),
    ));
    for n in 1..MOVES {
        // A restage stages its links outside the branch gate: the writer moves the
        // table while the unit's restaged link waits there.
        let ticket = omnigraph_tests::parked_at(
            &clock,
            &mut publishing,
            failpoints::STAGE_AFTER_MANIFEST,
            &format!("restage {n}"),
        )
        .await;
        insert_late(&other, n).await;
        clock.windows().release(ticket);
    }
    let person = publishing.await.unwrap();
    assert!(person.published(), "{person:?}");
    let publications = clock.windows().reached()[failpoints::PUBLISH_BEFORE_COMMIT_PUT.name()];
    assert!(
        publications > MOVES as u64,
        "the unit lost {MOVES} publications, then landed: {publications}"
    );
    assert_eq!(person.fragments_before, 50 + MOVES, "{person:?}");
    let mut expected: Vec<String> = (0..50)
        .map(|i| format!("p{i}"))
        .chain((0..MOVES).map(|n| format!("late{n}")))
        .collect();
    expected.sort();
    assert_eq!(person_ids(&graph).await, expected);
    let head = head_table(&graph, "Person").await;
    assert!(
        head.manifest().fragments.len() <= 2 + MOVES,
        "compacted: {}",
        head.manifest().fragments.len()
    );
}

#[tokio::test]
async fn a_unit_compacts_again_the_groups_a_concurrent_delete_and_update_touched() {
    let (graph, test) = fifty_inserts(Backend::Local).await;
    let before = ids_and_row_ids_of(&*head_table(&graph, "Person").await).await;
    let unit = plan_unit(&graph, "Person", &budget().compaction)
        .await
        .unwrap();
    let other = Omnigraph::open(&test.uri).await.unwrap();
    other.delete("Person", "id = 'p7'").await.unwrap().unwrap();
    other
        .update("Person", "id = 'p21'", &[("age".into(), json!(99))])
        .await
        .unwrap()
        .unwrap();
    let person = publish_unit(&graph, unit).await.unwrap();
    assert!(person.published(), "{person:?}");
    let ids = person_ids(&graph).await;
    assert_eq!(ids.len(), 49, "{ids:?}");
    assert!(!ids.contains(&"p7".to_string()), "the delete is kept");
    let p21 = graph
        .get("Person", &json!("p21"), &CommitRef::Head)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(p21["age"], 99, "the update is kept");
    // Rows the delete and update did not touch keep their stable row ids.
    let after = ids_and_row_ids_of(&*head_table(&graph, "Person").await).await;
    for row in &before {
        if row.0 != "p7" && row.0 != "p21" {
            assert!(after.contains(row), "{row:?} moved");
        }
    }
    let expected: Vec<String> = (20..30)
        .filter(|i| *i != 21)
        .map(|i| format!("p{i}"))
        .collect();
    assert_eq!(scalar_ids(&graph).await, expected);
    let head = head_table(&graph, "Person").await;
    assert!(
        head.manifest().fragments.len() <= 4,
        "{:?}",
        head.manifest().fragments.len()
    );
}

#[tokio::test]
async fn a_unit_carries_concurrent_deletes_into_its_compacted_rows_without_writing_them_again() {
    let test = TestRoot::new(Backend::Local).await;
    let graph = Omnigraph::create(&test.uri, SOCIAL_SCHEMA).await.unwrap();
    // Ten fragments of five rows each.
    for chunk in 0..10 {
        let rows: Vec<Value> = (chunk * 5..chunk * 5 + 5)
            .map(|i| json!({"id": format!("p{i}"), "name": format!("apple {i}"), "age": i}))
            .collect();
        graph
            .insert_json("Person", objects(Value::Array(rows)))
            .await
            .unwrap();
        if chunk == 0 {
            graph.maintenance().build_indexes().await.unwrap();
        }
    }
    let before = ids_and_row_ids_of(&*head_table(&graph, "Person").await).await;
    let unit = plan_unit(&graph, "Person", &budget().compaction)
        .await
        .unwrap();
    assert!(unit.has_work());
    // Another writer deletes one row of a fragment, every row of another (which
    // removes it), and updates a row of a third.
    let other = Omnigraph::open(&test.uri).await.unwrap();
    other.delete("Person", "id = 'p7'").await.unwrap().unwrap();
    other
        .delete("Person", "age >= 15 AND age < 20")
        .await
        .unwrap()
        .unwrap();
    other
        .update("Person", "id = 'p21'", &[("age".into(), json!(99))])
        .await
        .unwrap()
        .unwrap();
    let written = other.head().await.unwrap();
    let table_id = written
        .require_pin_of_type("Person")
        .unwrap()
        .table_id
        .clone();
    let probe = graph.graph().root().probe();
    let person = publish_unit(&graph, unit).await.unwrap();
    assert!(person.published(), "{person:?}");
    // The compaction published first, then the index folds staged on it: two commits.
    assert_eq!(person.commit_seq(), Some(written.seq + 2), "{person:?}");
    assert!(
        person.indexes_folded.contains(&"age_btree".to_string())
            && person.indexes_folded.contains(&"id_btree".to_string()),
        "{person:?}"
    );
    let data_written: Vec<String> = probe
        .requests()
        .into_iter()
        .filter(|request| {
            matches!(request.kind, RequestKind::Put | RequestKind::PutIfAbsent)
                && request
                    .path
                    .starts_with(&format!("tables/{table_id}/data/"))
        })
        .map(|request| request.path)
        .collect();
    assert!(
        data_written.is_empty(),
        "the compacted rows are not written again: {data_written:?}"
    );
    let head = head_table(&graph, "Person").await;
    assert!(
        head.manifest()
            .fragments
            .iter()
            .any(|fragment| fragment.deletion_file.is_some()),
        "the deletes are marked in the compacted fragments"
    );
    let covered = age_index_coverage(&head).await;
    for fragment in head.manifest().fragments.iter() {
        assert!(covered.contains(&(fragment.id as u32)), "{:?}", fragment.id);
    }
    // Every row the other writer did not touch is there with its stable row id; the
    // deleted rows are gone; the update is kept; the scalar index answers.
    let after = ids_and_row_ids_of(&head).await;
    let gone = |id: &str| ["p7", "p15", "p16", "p17", "p18", "p19"].contains(&id);
    let expected: Vec<(String, u64)> = before
        .iter()
        .filter(|(id, _)| !gone(id) && id != "p21")
        .cloned()
        .collect();
    let untouched: Vec<(String, u64)> = after
        .iter()
        .filter(|(id, _)| id != "p21")
        .cloned()
        .collect();
    assert_eq!(untouched, expected);
    assert_eq!(after.len(), 44, "{after:?}");
    let p21 = graph
        .get("Person", &json!("p21"), &CommitRef::Head)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(p21["age"], 99, "the update is kept");
    let expected_scalar: Vec<String> = (20..30)
        .filter(|i| *i != 21)
        .map(|i| format!("p{i}"))
        .collect();
    assert_eq!(scalar_ids(&graph).await, expected_scalar);
    assert_eq!(scalar_ids(&other).await, expected_scalar);
    for deleted in ["p7", "p15", "p19"] {
        assert!(
            graph
                .get("Person", &json!(deleted), &CommitRef::Head)
                .await
                .unwrap()
                .is_none(),
            "{deleted} stays deleted"
        );
    }
}

#[tokio::test]
async fn a_unit_whose_fragments_another_optimize_replaced_ends_pin_moved() {
    let (graph, test) = fifty_inserts(Backend::Local).await;
    let unit = plan_unit(&graph, "Person", &budget().compaction)
        .await
        .unwrap();
    let other = Omnigraph::open(&test.uri).await.unwrap();
    let first = run_optimize(&other, &budget()).await.unwrap();
    assert!(first.table("Person").unwrap().published());
    let head_before = graph.head().await.unwrap();
    let outcome = publish_unit(&graph, unit).await.unwrap();
    match &outcome.outcome {
        omnigraph_maintenance::UnitOutcome::PinMoved { member, .. } => {
            assert_eq!(member, &format!("pin:{}", outcome.table_id));
        }
        other => panic!("expected pin_moved, got {other:?}"),
    }
    assert_eq!(graph.head().await.unwrap().seq, head_before.seq);
    let expected: Vec<String> = {
        let mut ids: Vec<String> = (0..50).map(|i| format!("p{i}")).collect();
        ids.sort();
        ids
    };
    assert_eq!(person_ids(&graph).await, expected);
}

#[tokio::test]
async fn a_fold_alone_is_recommitted_beside_a_concurrent_insert() {
    let test = TestRoot::new(Backend::Local).await;
    let graph = Omnigraph::create(&test.uri, SOCIAL_SCHEMA).await.unwrap();
    let ten: Vec<Value> = (0..10)
        .map(|i| json!({"id": format!("p{i}"), "name": format!("n{i}"), "age": 20 + i}))
        .collect();
    graph
        .insert_json("Person", objects(Value::Array(ten)))
        .await
        .unwrap();
    graph.maintenance().build_indexes().await.unwrap();
    graph
        .insert_json(
            "Person",
            objects(json!([{"id": "p10", "name": "n10", "age": 21}])),
        )
        .await
        .unwrap();
    let unit = plan_unit(&graph, "Person", &budget().compaction)
        .await
        .unwrap();
    assert!(
        unit.report()
            .indexes_folded
            .contains(&"age_btree".to_string())
    );
    let other = Omnigraph::open(&test.uri).await.unwrap();
    other
        .insert_json(
            "Person",
            objects(json!([{"id": "p11", "name": "n11", "age": 22}])),
        )
        .await
        .unwrap();
    let person = publish_unit(&graph, unit).await.unwrap();
    assert!(person.published(), "{person:?}");
    assert!(
        person.indexes_folded.contains(&"age_btree".to_string()),
        "the fold covers what it read and is kept: {person:?}"
    );
    let table = head_table(&graph, "Person").await;
    let covered = age_index_coverage(&table).await;
    let fragments: Vec<u64> = table.manifest().fragments.iter().map(|f| f.id).collect();
    assert_eq!(fragments.len(), 3);
    assert!(covered.contains(&(fragments[0] as u32)) && covered.contains(&(fragments[1] as u32)));
    assert!(
        !covered.contains(&(fragments[2] as u32)),
        "the concurrent insert's fragment is not claimed"
    );
    let expected: Vec<String> = [
        "p0", "p1", "p10", "p11", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9",
    ]
    .iter()
    .map(|id| id.to_string())
    .collect();
    assert_eq!(scalar_ids(&graph).await, expected);
}

#[tokio::test]
async fn an_update_prepared_before_optimize_publishes_must_retry() {
    let (graph, _test) = fifty_inserts(Backend::Memory).await;
    let prepared = graph
        .prepare_update("Person", "id = 'p3'", &[("age".into(), json!(99))])
        .await
        .unwrap();
    run_optimize(&graph, &budget()).await.unwrap();
    let person = graph
        .head()
        .await
        .unwrap()
        .pin_of_type("Person")
        .unwrap()
        .table_id
        .clone();
    match prepared.publish(&graph).await.unwrap_err() {
        OmniError::ReadSetChanged { member, .. } => {
            assert_eq!(member.to_string(), format!("pin:{person}"))
        }
        other => panic!("expected ReadSetChanged, got {other}"),
    }
    graph
        .update("Person", "id = 'p3'", &[("age".into(), json!(99))])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        graph
            .get("Person", &json!("p3"), &CommitRef::Head)
            .await
            .unwrap()
            .unwrap()["age"],
        99
    );
}

/// Person's unit failed with `Unpublished` evidence, the report still describes its
/// plan, and the run's exit status is `exit_code`.
fn assert_unit_failed_unpublished(report: &omnigraph_maintenance::OptimizeReport, exit_code: i32) {
    let person = report.table("Person").unwrap();
    match &person.outcome {
        omnigraph_maintenance::UnitOutcome::Failed { evidence, .. } => {
            assert_eq!(evidence, &Evidence::Unpublished, "{person:?}");
        }
        other => panic!("expected a failed unit, got {other:?}"),
    }
    assert!(
        person.fragments_before > person.fragments_after,
        "{person:?}"
    );
    assert_eq!(report.exit_code(), exit_code);
}

#[tokio::test]
async fn a_failure_before_publication_changes_nothing_and_the_retry_compacts() {
    let (graph, _test) = fifty_inserts(Backend::Local).await;
    let before = graph.head().await.unwrap();
    {
        let _fault = fault_commit_puts(
            graph.graph().root(),
            FaultAction::FailBefore(StorageKind::Configuration),
        );
        let report = run_optimize(&graph, &budget()).await.unwrap();
        assert_unit_failed_unpublished(&report, 1);
    }
    assert_eq!(
        graph.head().await.unwrap(),
        before,
        "head and every pin unchanged"
    );
    let armed = failpoints::arm(failpoints::PUBLISH_BEFORE_COMMIT_PUT, "return");
    let report = armed.run(run_optimize(&graph, &budget())).await.unwrap();
    drop(armed);
    // The failpoint injects a transient fault: exit 75.
    assert_unit_failed_unpublished(&report, 75);
    assert_eq!(graph.head().await.unwrap(), before);
    let report = run_optimize(&graph, &budget()).await.unwrap();
    let person = report.table("Person").unwrap();
    assert!(
        person.published() && person.fragments_after <= 2,
        "{person:?}"
    );
}

#[tokio::test]
async fn repeated_runs_converge_and_write_only_lance_files_and_commits() {
    let (graph, _test) = fifty_inserts(Backend::Local).await;
    let probe = graph.graph().root().probe();
    let first = run_optimize(&graph, &budget()).await.unwrap();
    let published = first.tables.iter().filter(|t| t.published()).count();
    let writes: Vec<String> = probe
        .requests()
        .into_iter()
        .filter(|r| matches!(r.kind, RequestKind::Put | RequestKind::PutIfAbsent))
        .map(|r| r.path)
        .collect();
    let commits = writes
        .iter()
        .filter(|p| p.starts_with("_graph/branches/main/commits/"))
        .count();
    assert_eq!(commits, published, "one commit per published table");
    assert!(
        writes.iter().all(|p| p.starts_with("tables/")
            || p.starts_with("_graph/branches/main/commits/")
            || p == "_graph/branches/main/HEAD"),
        "no sidecar or control file: {writes:?}"
    );
    let mut runs = 1;
    loop {
        let report = run_optimize(&graph, &budget()).await.unwrap();
        if report.tables.iter().all(|t| !t.published()) {
            break;
        }
        runs += 1;
        assert!(runs <= 3, "a fixpoint within a few runs: {report:?}");
    }
    // Every index, full-text too, covers every row at the fixpoint: one fragment.
    assert_eq!(
        head_table(&graph, "Person")
            .await
            .manifest()
            .fragments
            .len(),
        1,
        "one fragment once every index covers all"
    );
}

/// A schema apply that lands while a unit is staged is a conflict, like a moved pin:
/// the unit ends `pin_moved` on the schema, with nothing published, not `failed`
/// (dst seed 416).
#[tokio::test]
async fn a_unit_that_a_schema_apply_overtook_ends_pin_moved() {
    let (graph, test) = fifty_inserts(Backend::Memory).await;
    let unit = plan_unit(&graph, "Person", &budget().compaction)
        .await
        .unwrap();
    let other = Omnigraph::open(&test.uri).await.unwrap();
    let wider = SOCIAL_SCHEMA.replace(
        "node Company { id: String @key, name: String }",
        "node Company { id: String @key, name: String, city: String? }",
    );
    other.apply_schema(&wider, false).await.unwrap();
    let head_before = other.head().await.unwrap();
    let outcome = publish_unit(&graph, unit).await.unwrap();
    match &outcome.outcome {
        omnigraph_maintenance::UnitOutcome::PinMoved { member, .. } => {
            assert_eq!(member, "schema:main");
        }
        other => panic!("expected pin_moved, got {other:?}"),
    }
    assert_eq!(graph.head().await.unwrap().seq, head_before.seq);
    assert_eq!(person_ids(&graph).await.len(), 50);
}

/// A unit whose staging a cleanup may have reclaimed while it waited is not staged again
/// on a moved pin: it fails `staging_expired`, with nothing published.
#[test]
fn a_unit_that_waited_through_a_cleanup_is_not_restaged() {
    // Deep writer futures in a debug build (a plan, an insert, a cleanup and a publish
    // nested in one simulation): see `on_a_big_stack`.
    omnigraph_tests::on_a_big_stack(a_unit_waits_through_a_cleanup);
}

async fn a_unit_waits_through_a_cleanup() {
    let second = 1_000_000;
    let clock = omnigraph_core::seams::Simulation::new(
        7,
        omnigraph_core::seams::now_micros() / second * second,
        1,
    );
    omnigraph_core::seams::simulate(clock.clone(), async move {
        let (graph, test) = fifty_inserts(Backend::Memory).await;
        let unit = plan_unit(&graph, "Person", &budget().compaction)
            .await
            .unwrap();
        let other = Omnigraph::open(&test.uri).await.unwrap();
        other
            .insert_json("Person", objects(json!([{"id": "late", "name": "late"}])))
            .await
            .unwrap();
        // Ten minutes on, a cleanup of the shortest grace.
        clock.advance(600 * second);
        other
            .maintenance()
            .cleanup(&omnigraph_tests::keep_with_minimum_grace(1))
            .await
            .unwrap();
        let head_before = other.head().await.unwrap();
        let error = publish_unit(&graph, unit).await.unwrap_err();
        assert_eq!(
            error.kind(),
            omnigraph_core::ErrorKind::StagingExpired,
            "{error}"
        );
        assert_eq!(error.evidence(), &Evidence::Unpublished);
        assert_eq!(other.head().await.unwrap().seq, head_before.seq);
        assert_eq!(person_ids(&graph).await.len(), 51);
    })
    .await;
}

/// An optimize through the lane, on a clock of its own whose windows the test parks it
/// at.
struct ParkedOptimize<'a> {
    clock: std::sync::Arc<omnigraph_core::seams::Simulation>,
    run: std::pin::Pin<
        Box<
            dyn std::future::Future<
                    Output = omnigraph_core::Result<omnigraph_maintenance::OptimizeReport>,
                > + 'a,
        >,
    >,
}

impl<'a> ParkedOptimize<'a> {
    fn start(graph: &'a Omnigraph) -> ParkedOptimize<'a> {
        let clock =
            omnigraph_core::seams::Simulation::new(7, omnigraph_core::seams::now_micros(), 1);
        let run = Box::pin(omnigraph_core::seams::simulate(clock.clone(), async move {
            graph.maintenance().optimize().await
        }));
        ParkedOptimize { clock, run }
    }

    /// Runs until the next staged manifest is written, and parks there.
    async fn park_at_next_link(&mut self, step: &str) -> u64 {
        omnigraph_tests::parked_at(
            &self.clock,
            &mut self.run,
            failpoints::STAGE_AFTER_MANIFEST,
            step,
        )
        .await
    }

    /// Runs until a staged manifest is written after `publications` publications were
    /// tried (releasing the links staged before), and parks there.
    async fn park_at_a_link_after(&mut self, publications: u64, step: &str) -> u64 {
        loop {
            let ticket = self.park_at_next_link(step).await;
            if self.publications() >= publications {
                assert_eq!(self.publications(), publications, "{step}");
                return ticket;
            }
            self.clock.windows().release(ticket);
        }
    }

    fn publications(&self) -> u64 {
        self.clock
            .windows()
            .reached()
            .get(failpoints::PUBLISH_BEFORE_COMMIT_PUT.name())
            .copied()
            .unwrap_or(0)
    }
}

/// Inserts the Person `late{n}` through `other`.
async fn insert_late(other: &Omnigraph, n: usize) {
    other
        .insert_json(
            "Person",
            objects(json!([{"id": format!("late{n}"), "name": "late", "age": 25}])),
        )
        .await
        .unwrap();
}

/// A cancel that comes while a unit stages again on a moved pin: the restage is
/// dropped (or, if it finished, not published), and the run ends cancelled with
/// nothing of it published. (The restaged unit was published without a cancel check.)
#[tokio::test]
async fn a_cancel_while_a_unit_restages_publishes_nothing() {
    let (graph, test) = fifty_inserts(Backend::Local).await;
    let other = Omnigraph::open(&test.uri).await.unwrap();
    let before = graph.head().await.unwrap();
    let mut optimize = ParkedOptimize::start(&graph);
    let ticket = optimize.park_at_next_link("the unit's compaction").await;
    insert_late(&other, 0).await;
    optimize.clock.windows().release(ticket);
    // The unit lost its publication to the insert and stages again on the new pin.
    let ticket = optimize.park_at_a_link_after(1, "the restage").await;
    graph.cancel_maintenance();
    optimize.clock.windows().release(ticket);
    let error = (&mut optimize.run).await.unwrap_err();
    assert_eq!(
        error.kind(),
        omnigraph_core::ErrorKind::MaintenanceCancelled,
        "{error}"
    );
    assert_eq!(error.evidence(), &Evidence::Unpublished);
    assert_eq!(optimize.publications(), 1, "nothing after the cancel");
    let head = graph.head().await.unwrap();
    assert_eq!(head.seq, before.seq + 1, "only the writer's insert");
    assert_eq!(head.operation.kind, "insert");
    // The next run compacts.
    let report = run_optimize(&graph, &budget()).await.unwrap();
    assert!(report.table("Person").unwrap().published());
}

/// A cancel that comes while a unit builds the index work it set aside to land its
/// compaction first: the compaction stays published, the index work is dropped and
/// listed pending, and the run ends cancelled, partly published. (The deferred index
/// work was built and published without a cancel check.)
#[tokio::test]
async fn a_cancel_while_deferred_index_work_stages_keeps_the_compaction_only() {
    let (graph, test) = fifty_inserts(Backend::Local).await;
    let other = Omnigraph::open(&test.uri).await.unwrap();
    let mut optimize = ParkedOptimize::start(&graph);
    let ticket = optimize.park_at_next_link("the unit's compaction").await;
    insert_late(&other, 0).await;
    optimize.clock.windows().release(ticket);
    // The restage carries the compaction and sets the index folds aside; the
    // compaction publishes alone, and its index work stages on its commit.
    let ticket = optimize
        .park_at_a_link_after(2, "the deferred index work")
        .await;
    let compacted = graph.head().await.unwrap();
    assert_eq!(compacted.operation.kind, "optimize");
    assert!(
        compacted.operation.summary.contains("0 folded, 0 built"),
        "{}",
        compacted.operation.summary
    );
    graph.cancel_maintenance();
    optimize.clock.windows().release(ticket);
    let error = (&mut optimize.run).await.unwrap_err();
    assert_eq!(
        error.kind(),
        omnigraph_core::ErrorKind::MaintenanceCancelled,
        "{error}"
    );
    assert_eq!(
        error.evidence(),
        &Evidence::PartlyPublished {
            published_units: vec!["Person".into()]
        }
    );
    assert_eq!(
        optimize.publications(),
        2,
        "the index work was not published"
    );
    assert_eq!(graph.head().await.unwrap().seq, compacted.seq);
    let lagging = graph
        .index_coverage(&CommitRef::Head)
        .await
        .unwrap()
        .into_iter()
        .filter(|coverage| coverage.type_name == "Person" && coverage.uncovered_rows > 0)
        .count();
    assert!(lagging > 0, "the folds wait for the next run");
    let report = run_optimize(&graph, &budget()).await.unwrap();
    assert!(report.table("Person").unwrap().published());
}
