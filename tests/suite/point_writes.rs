//! Updates and deletes whose predicate pins the key read only the fragments that hold
//! those keys (a warm handle knows where each key is), and still change exactly the rows
//! a whole-table read would.

use omnigraph_core::OmniError;
use omnigraph_core::storage::{FaultAction, FaultRule, RequestKind};
use omnigraph_graph::{Omnigraph, ScanRequest};
use omnigraph_maintenance::MaintenanceExt;
use omnigraph_publish::{CommitRef, GraphCommit};
use omnigraph_tests::{BACKENDS, Backend, SOCIAL_SCHEMA, TestRoot, objects};
use serde_json::json;

/// How many fragments of people the graph holds, each from one insert.
const FRAGMENTS: usize = 8;
/// People per fragment: enough that a fragment's data is not all read with its footer,
/// so every scan of it reads it again.
const PEOPLE_PER_FRAGMENT: usize = 2_000;

/// `FRAGMENTS` fragments of people (`p0`, `p1`, ...; age = number), one company, and as
/// many fragments of edges, one from each person.
async fn many_fragments(backend: Backend) -> (Omnigraph, TestRoot) {
    let test = TestRoot::new(backend).await;
    let graph = Omnigraph::create(&test.uri, SOCIAL_SCHEMA).await.unwrap();
    graph
        .insert_json("Company", objects(json!([{"id": "c1", "name": "Acme"}])))
        .await
        .unwrap();
    for fragment in 0..FRAGMENTS {
        let numbers = fragment * PEOPLE_PER_FRAGMENT..(fragment + 1) * PEOPLE_PER_FRAGMENT;
        let people: Vec<_> = numbers
            .clone()
            .map(|n| json!({"id": format!("p{n}"), "name": format!("person number {n}"), "age": n}))
            .collect();
        graph
            .insert_json("Person", objects(json!(people)))
            .await
            .unwrap();
        let edges: Vec<_> = numbers
            .map(|n| json!({"id": format!("e{n}"), "src": format!("p{n}"), "dst": "c1"}))
            .collect();
        graph
            .insert_json("WorksAt", objects(json!(edges)))
            .await
            .unwrap();
    }
    (graph, test)
}

/// The reads of the data files of `type_name`'s table among `requests`.
fn data_requests<'a>(
    graph_head: &GraphCommit,
    type_name: &str,
    requests: &'a [omnigraph_core::storage::Request],
) -> impl Iterator<Item = &'a omnigraph_core::storage::Request> {
    let table = graph_head.pin_of_type(type_name).unwrap().table_id.clone();
    requests
        .iter()
        .filter(|request| matches!(request.kind, RequestKind::Get | RequestKind::RangedGet))
        .filter(move |request| {
            request.path.contains(table.as_str()) && request.path.contains("/data/")
        })
}

/// How many reads of the data files of `type_name`'s table `requests` holds.
fn data_reads(
    graph_head: &GraphCommit,
    type_name: &str,
    requests: &[omnigraph_core::storage::Request],
) -> usize {
    data_requests(graph_head, type_name, requests).count()
}

/// The data files of `type_name`'s table that `requests` read, each once.
fn data_files_read(
    graph_head: &GraphCommit,
    type_name: &str,
    requests: &[omnigraph_core::storage::Request],
) -> std::collections::BTreeSet<String> {
    data_requests(graph_head, type_name, requests)
        .map(|request| request.path.clone())
        .collect()
}

fn set(ages: &mut [(String, i64)], key: &str, age: i64) {
    let at = ages.iter().position(|(id, _)| id == key).unwrap();
    ages[at].1 = age;
}

async fn edge_count(graph: &Omnigraph) -> u64 {
    graph
        .count("WorksAt", None, &CommitRef::Head)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_write_by_key_reads_only_the_fragments_that_hold_its_keys() {
    for backend in BACKENDS {
        let (graph, _test) = many_fragments(backend).await;
        let mut expected = omnigraph_tests::people_and_ages(&graph).await;
        assert_eq!(expected.len(), FRAGMENTS * PEOPLE_PER_FRAGMENT);
        let head = graph.head().await.unwrap();
        // The same one-row update twice: by a predicate that does not pin the key (an
        // OR), which reads every fragment, then by one that does, which reads the
        // fragment holding the key.
        let mut reads = Vec::new();
        for (predicate, age) in [("id = 'p4007' OR id = 'p4007'", 1), ("id = 'p4007'", 2)] {
            let probe = graph.graph().root().probe();
            graph
                .update("Person", predicate, &[("age".into(), json!(age))])
                .await
                .unwrap()
                .expect("p4007 is updated");
            reads.push(data_reads(&head, "Person", &probe.requests()));
            set(&mut expected, "p4007", age);
            assert_eq!(
                omnigraph_tests::people_and_ages(&graph).await,
                expected,
                "{backend:?}: {predicate}"
            );
        }
        let [whole, pinned] = reads[..] else {
            unreachable!()
        };
        assert!(
            whole >= FRAGMENTS && pinned <= 2,
            "{backend:?}: data files read: {whole} by a whole-table update, {pinned} by key"
        );

        // Two keys and a condition on another column: only rows meeting it change.
        graph
            .update(
                "Person",
                "`id` IN ('p3', 'p9001') AND age > 5",
                &[("age".into(), json!(99))],
            )
            .await
            .unwrap()
            .expect("p9001 is updated");
        set(&mut expected, "p9001", 99);
        assert_eq!(
            omnigraph_tests::people_and_ages(&graph).await,
            expected,
            "{backend:?}"
        );
        // A key the table lacks, or a pinned key the rest of the predicate rules out:
        // nothing to write, nothing published.
        let before = graph.head().await.unwrap();
        for predicate in ["id = 'nobody'", "id = 'p1' AND age > 100"] {
            let written = graph
                .update("Person", predicate, &[("age".into(), json!(1))])
                .await
                .unwrap();
            assert!(written.is_none(), "{backend:?}: {predicate}");
        }
        assert_eq!(graph.head().await.unwrap(), before);

        // A cascading delete by key reads the node's own fragment and the fragment of
        // its edge (once the handle knows where edges are: its first delete reads every
        // edge fragment's endpoints).
        graph.delete("Person", "id = 'p1'").await.unwrap().unwrap();
        expected.retain(|(id, _)| id != "p1");
        let edges = edge_count(&graph).await;
        let probe = graph.graph().root().probe();
        graph
            .delete("Person", "id = 'p12010'")
            .await
            .unwrap()
            .expect("p12010 is deleted");
        let requests = probe.requests();
        let (people, edge_files) = (
            data_reads(&head, "Person", &requests),
            data_reads(&head, "WorksAt", &requests),
        );
        assert!(
            people <= 2 && edge_files <= 2,
            "{backend:?}: the delete read {people} Person and {edge_files} WorksAt data files"
        );
        expected.retain(|(id, _)| id != "p12010");
        assert_eq!(
            omnigraph_tests::people_and_ages(&graph).await,
            expected,
            "{backend:?}"
        );
        assert_eq!(edge_count(&graph).await, edges - 1, "{backend:?}");
        assert!(
            graph
                .get("WorksAt", &json!("e12010"), &CommitRef::Head)
                .await
                .unwrap()
                .is_none()
        );
    }
}

#[tokio::test]
async fn a_point_update_keeps_the_row_id_and_the_key_index_finds_the_new_row() {
    let (graph, _test) = many_fragments(Backend::Memory).await;
    graph.maintenance().build_indexes().await.unwrap();
    let row_id = |commit: GraphCommit| {
        let graph = &graph;
        async move {
            let table = graph
                .graph()
                .snapshot_of(commit)
                .table("Person")
                .await
                .unwrap();
            omnigraph_tests::text_ids_and_row_ids(&table)
                .await
                .into_iter()
                .filter(|(key, _)| key == "p5")
                .map(|(_, row_id)| row_id)
                .collect::<Vec<_>>()
        }
    };
    let before = row_id(graph.head().await.unwrap()).await;
    assert_eq!(before.len(), 1);
    let commit = graph
        .update("Person", "id = 'p5'", &[("age".into(), json!(55))])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        row_id(commit.clone()).await,
        before,
        "the row keeps its stable id"
    );
    // The key index answers with the new row, once.
    for filter in ["id = 'p5'", "id = 'p5' AND age = 55"] {
        let batches = graph
            .scan(
                "Person",
                &ScanRequest {
                    filter: Some(filter.into()),
                    ..ScanRequest::default()
                },
                &CommitRef::Head,
            )
            .await
            .unwrap();
        let rows = omnigraph_graph::rows::batches_to_json(&batches);
        assert_eq!(rows.len(), 1, "{filter}");
        assert_eq!(rows[0]["age"], 55, "{filter}");
    }
    // Updated twice more, the row is still one row.
    for age in [56, 57] {
        graph
            .update("Person", "id = 'p5'", &[("age".into(), json!(age))])
            .await
            .unwrap()
            .unwrap();
    }
    let p5 = graph
        .get("Person", &json!("p5"), &CommitRef::Head)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(p5["age"], 57);
    assert_eq!(
        omnigraph_tests::people_and_ages(&graph).await.len(),
        FRAGMENTS * PEOPLE_PER_FRAGMENT
    );
}

#[tokio::test]
async fn keys_another_handle_deleted_are_free_again_and_moved_ones_are_found() {
    for backend in BACKENDS {
        let test = TestRoot::new(backend).await;
        let graph = Omnigraph::create(&test.uri, SOCIAL_SCHEMA).await.unwrap();
        graph
            .insert_json(
                "Person",
                objects(json!([
                    {"id": "a", "name": "A", "age": 1},
                    {"id": "b", "name": "B", "age": 2},
                    {"id": "c", "name": "C", "age": 3}
                ])),
            )
            .await
            .unwrap();
        let other = Omnigraph::open(&test.uri).await.unwrap();
        // This handle reads where each key is; then the other deletes one row and
        // moves another out of the same fragment.
        graph
            .update("Person", "id = 'c'", &[("age".into(), json!(30))])
            .await
            .unwrap()
            .unwrap();
        other.delete("Person", "id = 'b'").await.unwrap().unwrap();
        other
            .update("Person", "id = 'a'", &[("age".into(), json!(10))])
            .await
            .unwrap()
            .unwrap();
        // The deleted key is free again; a live one is not.
        graph
            .insert_json(
                "Person",
                objects(json!([{"id": "b", "name": "B2", "age": 20}])),
            )
            .await
            .unwrap();
        let error = graph
            .insert_json("Person", objects(json!([{"id": "a", "name": "again"}])))
            .await
            .unwrap_err();
        assert!(
            matches!(error, OmniError::KeyConflict { .. }),
            "{backend:?}: {error}"
        );
        // The moved row is found where it went.
        graph
            .update("Person", "id = 'a'", &[("age".into(), json!(11))])
            .await
            .unwrap()
            .expect("a is updated where the other handle moved it");
        graph.delete("Person", "id = 'c'").await.unwrap().unwrap();
        assert_eq!(
            omnigraph_tests::people_and_ages(&graph).await,
            vec![("a".to_string(), 11), ("b".to_string(), 20)],
            "{backend:?}"
        );
    }
}

#[tokio::test]
async fn a_node_delete_finds_edges_other_handles_added_or_compacted_since() {
    for backend in BACKENDS {
        let (graph, test) =
            people_at_acme(backend, &["a", "b", "c"], &[("ea", "a"), ("eb", "b")]).await;
        let edge = |id: &str, src: &str| json!({"id": id, "src": src, "dst": "c1"});
        // This handle learns where the edges are.
        graph.delete("Person", "id = 'c'").await.unwrap().unwrap();
        // Another handle adds an edge to `a`, in a fragment of its own, and to `b`.
        let other = Omnigraph::open(&test.uri).await.unwrap();
        for (id, src) in [("ea2", "a"), ("eb2", "b")] {
            other
                .insert_json("WorksAt", objects(json!([edge(id, src)])))
                .await
                .unwrap();
        }
        graph.delete("Person", "id = 'a'").await.unwrap().unwrap();
        assert_eq!(
            omnigraph_tests::ids_at(&graph, "WorksAt", &CommitRef::Head).await,
            ["eb", "eb2"],
            "{backend:?}"
        );
        // Optimize rewrites the edge fragments into one; the deleted node's edges go
        // with it, wherever the rewrite put them.
        let budget = omnigraph_maintenance::MaintenanceBudget::default();
        let report = omnigraph_maintenance::optimize(&other, &budget)
            .await
            .unwrap();
        assert!(report.table("WorksAt").unwrap().published(), "{backend:?}");
        graph.delete("Person", "id = 'b'").await.unwrap().unwrap();
        assert!(
            omnigraph_tests::ids_at(&graph, "WorksAt", &CommitRef::Head)
                .await
                .is_empty(),
            "{backend:?}"
        );
    }
}

#[tokio::test]
async fn a_handle_that_moves_to_an_older_state_of_a_table_finds_every_key_again() {
    for backend in BACKENDS {
        let test = TestRoot::new(backend).await;
        let graph = Omnigraph::create(&test.uri, SOCIAL_SCHEMA).await.unwrap();
        // One fragment, which keeps `d` throughout.
        let people = json!([
            {"id": "a", "name": "A", "age": 1}, {"id": "b", "name": "B", "age": 2},
            {"id": "c", "name": "C", "age": 3}, {"id": "d", "name": "D", "age": 4}
        ]);
        graph.insert_json("Person", objects(people)).await.unwrap();
        // The handle learns where the keys are; a branch keeps this state of Person.
        graph
            .update("Person", "id = 'c'", &[("age".into(), json!(30))])
            .await
            .unwrap()
            .unwrap();
        graph
            .create_branch("before", &CommitRef::Head)
            .await
            .unwrap();
        // Another handle moves `a` out of its fragment and deletes `b` there; this one
        // follows (the fragment only lost rows).
        let other = Omnigraph::open(&test.uri).await.unwrap();
        other
            .update("Person", "id = 'a'", &[("age".into(), json!(10))])
            .await
            .unwrap()
            .unwrap();
        other.delete("Person", "id = 'b'").await.unwrap().unwrap();
        graph
            .update("Person", "id = 'c'", &[("age".into(), json!(31))])
            .await
            .unwrap()
            .unwrap();
        // On the branch, the same handle (and its caches) sees `a` and `b` where they
        // were: both are found, and neither key can be inserted again.
        let graph = graph.with_branch("before").unwrap();
        for key in ["a", "b"] {
            graph
                .update(
                    "Person",
                    &format!("id = '{key}'"),
                    &[("age".into(), json!(99))],
                )
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("{backend:?}: {key} is on the branch"));
            let error = graph
                .insert_json("Person", objects(json!([{"id": key, "name": "again"}])))
                .await
                .unwrap_err();
            assert!(
                matches!(error, OmniError::KeyConflict { .. }),
                "{backend:?}: {error}"
            );
        }
        assert_eq!(
            omnigraph_tests::people_and_ages(&graph).await,
            vec![
                ("a".to_string(), 99),
                ("b".to_string(), 99),
                ("c".to_string(), 30),
                ("d".to_string(), 4)
            ],
            "{backend:?}"
        );
    }
}

#[tokio::test]
async fn a_node_delete_on_an_older_state_finds_edges_deleted_in_a_newer_one() {
    for backend in BACKENDS {
        // One edge fragment, which keeps `ed` throughout.
        let (graph, test) = people_at_acme(
            backend,
            &["a", "b", "d"],
            &[("ea", "a"), ("eb", "b"), ("ed", "d")],
        )
        .await;
        graph
            .create_branch("before", &CommitRef::Head)
            .await
            .unwrap();
        // On main, another handle deletes `a` (and `ea`); then this handle deletes `b`,
        // reading the edge fragment's endpoints while `ea` is deleted there.
        let other = Omnigraph::open(&test.uri).await.unwrap();
        other.delete("Person", "id = 'a'").await.unwrap().unwrap();
        graph.delete("Person", "id = 'b'").await.unwrap().unwrap();
        // On the branch `ea` is live: deleting `a` there deletes it.
        let graph = graph.with_branch("before").unwrap();
        let commit = graph.delete("Person", "id = 'a'").await.unwrap().unwrap();
        let ids = omnigraph_tests::ids_at(&graph, "WorksAt", &CommitRef::Seq(commit.seq)).await;
        assert_eq!(
            ids,
            ["eb", "ed"],
            "{backend:?}: no edge of the deleted node is left"
        );
    }
}

#[tokio::test]
async fn integer_keys_and_self_edges_are_written_by_key() {
    let test = TestRoot::new(Backend::Memory).await;
    let schema = "
node Item { n: Int64 @key, name: String }
edge Next: Item -> Item
";
    let graph = Omnigraph::create(&test.uri, schema).await.unwrap();
    // Items in two fragments; edges both ways between them, and a loop.
    for numbers in [-3..=2, 3..=8] {
        let items: Vec<_> = numbers.map(|n| json!({"n": n, "name": "i"})).collect();
        graph
            .insert_json("Item", objects(json!(items)))
            .await
            .unwrap();
    }
    let edges: Vec<_> = [(-3, 4), (4, 1), (5, 5), (2, 3)]
        .iter()
        .enumerate()
        .map(|(i, (a, b))| json!({"id": format!("e{i}"), "src": a, "dst": b}))
        .collect();
    graph
        .insert_json("Next", objects(json!(edges)))
        .await
        .unwrap();
    let renamed = graph
        .update(
            "Item",
            "n IN (-3, 7) AND name = 'i'",
            &[("name".into(), json!("x"))],
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(renamed.pin_of_type("Item").unwrap().row_count, 12);
    let rows = item_names(&graph).await;
    let changed: Vec<i64> = rows
        .iter()
        .filter(|(_, name)| name == "x")
        .map(|(n, _)| *n)
        .collect();
    assert_eq!(changed, [-3, 7]);
    // Deleting 4 takes the edges from and to it; deleting 5 its loop.
    graph.delete("Item", "n = 4").await.unwrap().unwrap();
    graph
        .delete("Item", "n = -5 OR n = 5")
        .await
        .unwrap()
        .unwrap();
    let batches = graph
        .scan("Next", &ScanRequest::default(), &CommitRef::Head)
        .await
        .unwrap();
    let left: Vec<String> = omnigraph_graph::rows::batches_to_json(&batches)
        .into_iter()
        .map(|row| row["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(left, ["e3"]);
    assert_eq!(item_names(&graph).await.len(), 10);
}

/// `(n, name)` of every Item at the head, sorted.
async fn item_names(graph: &Omnigraph) -> Vec<(i64, String)> {
    let batches = graph
        .scan("Item", &ScanRequest::default(), &CommitRef::Head)
        .await
        .unwrap();
    let mut rows: Vec<(i64, String)> = omnigraph_graph::rows::batches_to_json(&batches)
        .into_iter()
        .map(|row| {
            (
                row["n"].as_i64().unwrap(),
                row["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    rows.sort();
    rows
}

/// A graph with `people` (name = id), the company `c1`, and one insert of `edges`
/// (`(id, person)`, each to `c1`): one fragment each.
async fn people_at_acme(
    backend: Backend,
    people: &[&str],
    edges: &[(&str, &str)],
) -> (Omnigraph, TestRoot) {
    let test = TestRoot::new(backend).await;
    let graph = Omnigraph::create(&test.uri, SOCIAL_SCHEMA).await.unwrap();
    let people: Vec<_> = people
        .iter()
        .map(|id| json!({"id": id, "name": id}))
        .collect();
    graph
        .insert_json("Person", objects(json!(people)))
        .await
        .unwrap();
    graph
        .insert_json("Company", objects(json!([{"id": "c1", "name": "Acme"}])))
        .await
        .unwrap();
    let edges: Vec<_> = edges
        .iter()
        .map(|(id, src)| json!({"id": id, "src": src, "dst": "c1"}))
        .collect();
    graph
        .insert_json("WorksAt", objects(json!(edges)))
        .await
        .unwrap();
    (graph, test)
}

#[tokio::test]
async fn a_warm_get_reads_only_the_fragment_that_holds_its_key() {
    for backend in BACKENDS {
        let (graph, test) = many_fragments(backend).await;
        let head = graph.head().await.unwrap();
        let wanted = 3 * PEOPLE_PER_FRAGMENT + 5;
        let key = json!(format!("p{wanted}"));
        let age_of = |row: Option<serde_json::Map<String, serde_json::Value>>| {
            row.map(|row| row["age"].clone())
        };
        // A handle that holds no keys reads every fragment to find one.
        let cold = Omnigraph::open(&test.uri).await.unwrap();
        let probe = cold.graph().root().probe();
        let found = cold.get("Person", &key, &CommitRef::Head).await.unwrap();
        assert_eq!(age_of(found), Some(json!(wanted)), "{backend:?}");
        let cold_files = data_files_read(&head, "Person", &probe.requests());
        assert_eq!(cold_files.len(), FRAGMENTS, "{backend:?}: {cold_files:?}");
        // The writer knows where each key is: one fragment, and none for a key the
        // table lacks.
        let probe = graph.graph().root().probe();
        let found = graph.get("Person", &key, &CommitRef::Head).await.unwrap();
        assert_eq!(age_of(found), Some(json!(wanted)), "{backend:?}");
        let warm_files = data_files_read(&head, "Person", &probe.requests());
        assert_eq!(warm_files.len(), 1, "{backend:?}: {warm_files:?}");
        probe.reset();
        let missing = graph
            .get("Person", &json!("nobody"), &CommitRef::Head)
            .await
            .unwrap();
        assert_eq!(missing, None, "{backend:?}");
        assert_eq!(
            data_reads(&head, "Person", &probe.requests()),
            0,
            "{backend:?}"
        );
        // Another handle deletes the row and moves a neighbour of it: the warm get sees
        // both at the head, and an older commit still has the deleted row.
        let moved = json!(format!("p{}", wanted + 1));
        cold.delete("Person", &format!("id = 'p{wanted}'"))
            .await
            .unwrap()
            .unwrap();
        cold.update(
            "Person",
            &format!("id = 'p{}'", wanted + 1),
            &[("age".into(), json!(-1))],
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(
            graph.get("Person", &key, &CommitRef::Head).await.unwrap(),
            None,
            "{backend:?}"
        );
        let found = graph.get("Person", &moved, &CommitRef::Head).await.unwrap();
        assert_eq!(age_of(found), Some(json!(-1)), "{backend:?}");
        let before = graph
            .get("Person", &key, &CommitRef::Seq(head.seq))
            .await
            .unwrap();
        assert_eq!(age_of(before), Some(json!(wanted)), "{backend:?}");
        // Another handle compacts every fragment into new ones: the warm get still
        // finds the moved row, and not the deleted one.
        let optimized = cold.maintenance().optimize().await.unwrap();
        assert_eq!(optimized.exit_code(), 0, "{backend:?}: {optimized:?}");
        let found = graph.get("Person", &moved, &CommitRef::Head).await.unwrap();
        assert_eq!(age_of(found), Some(json!(-1)), "{backend:?}");
        assert_eq!(
            graph.get("Person", &key, &CommitRef::Head).await.unwrap(),
            None,
            "{backend:?}"
        );
    }
}

#[tokio::test]
async fn a_get_while_the_handles_own_insert_publishes_keeps_its_keys() {
    for backend in BACKENDS {
        let (graph, _test) = many_fragments(backend).await;
        let graph = std::sync::Arc::new(graph);
        let root = graph.graph().root().clone();
        // The insert's commit lands; its HEAD copy is held, so the insert has not yet
        // noted the keys it appended when the get below reads the new head.
        let held = root.inject(
            FaultRule::new(
                "_graph/branches/main/HEAD",
                &[RequestKind::Put],
                FaultAction::Delay(std::time::Duration::from_secs(5)),
            )
            .times(1),
        );
        let insert = {
            let graph = graph.clone();
            tokio::spawn(async move {
                graph
                    .insert_json("Person", objects(json!([{"id": "new", "name": "N"}])))
                    .await
            })
        };
        for _ in 0..HELD_POLLS_MAX {
            if held.fired() == 1 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(held.fired(), 1, "{backend:?}: the HEAD copy is held");
        let probe = root.probe();
        let found = graph
            .get("Person", &json!("new"), &CommitRef::Head)
            .await
            .unwrap();
        assert!(found.is_some(), "{backend:?}: the get reads the new head");
        assert!(
            !insert.is_finished(),
            "{backend:?}: the insert is still held"
        );
        // It took the warm way: it read the keys of the new fragment, then that
        // fragment's row, and no other fragment.
        let head = graph.head().await.unwrap();
        let read = data_files_read(&head, "Person", &probe.requests());
        assert_eq!(read.len(), 1, "{backend:?}: {read:?}");
        insert.await.unwrap().unwrap();
        // The next insert checks its key against the keys the handle still holds.
        probe.reset();
        graph
            .insert_json("Person", objects(json!([{"id": "newer", "name": "M"}])))
            .await
            .unwrap();
        let head = graph.head().await.unwrap();
        let read = data_files_read(&head, "Person", &probe.requests());
        assert!(read.is_empty(), "{backend:?}: it read the keys of {read:?}");
    }
}

/// How often a test looks for a held request before it gives up.
const HELD_POLLS_MAX: usize = 1_000;

#[tokio::test]
async fn a_write_after_a_get_at_the_head_builds_on_the_head_it_read() {
    for backend in BACKENDS {
        let (graph, test) = many_fragments(backend).await;
        let other = Omnigraph::open(&test.uri).await.unwrap();
        other
            .insert_json("Person", objects(json!([{"id": "theirs", "name": "T"}])))
            .await
            .unwrap();
        let found = graph
            .get("Person", &json!("theirs"), &CommitRef::Head)
            .await
            .unwrap();
        assert!(found.is_some(), "{backend:?}");
        // The insert stages on the head the get read: one try at the slot, no lost race.
        let probe = graph.graph().root().probe();
        let landed = graph
            .insert_json("Person", objects(json!([{"id": "mine", "name": "M"}])))
            .await
            .unwrap();
        let commit_puts: Vec<String> = probe
            .requests()
            .into_iter()
            .filter(|request| {
                request.kind == RequestKind::PutIfAbsent
                    && request.path.starts_with("_graph/branches/main/commits/")
            })
            .map(|request| request.path)
            .collect();
        assert_eq!(
            commit_puts,
            [omnigraph_publish::layout::commit_path("main", landed.seq)],
            "{backend:?}"
        );
    }
}
