//! The adjacency artifact on real Lance tables: optimize builds it per edge table,
//! traversals use it only at the version it was built from and read the edge table
//! otherwise with the same results (random graphs, after deletes, in time travel),
//! writes make it stale until the next optimize, a damaged artifact is passed by, a
//! failed build leaves its unit's outcome alone, a cancel skips it, cleanup reclaims
//! the artifacts of unretained versions, and status says which are current.

use bytes::Bytes;
use omnigraph_core::storage::{FaultAction, FaultRule, RequestKind};
use omnigraph_core::{ErrorKind, StorageKind};
use omnigraph_graph::{Omnigraph, Step, StepDirection, StepVia, Traversal};
use omnigraph_maintenance::{AdjacencyOutcome, MaintenanceExt, OptimizeReport, UnitOutcome};
use omnigraph_publish::CommitRef;
use omnigraph_publish::layout;
use omnigraph_tests::{Backend, TestRoot, objects};
use rand::{Rng, SeedableRng, rngs::StdRng};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

const SCHEMA: &str = "
node Person { id: String @key, name: String, age: Int32? }
node Company { id: String @key, name: String }
edge WorksAt: Person -> Company { since: Int32? }
edge Knows: Person -> Person { since: Int32? }
";

use StepDirection::{Both, In, Out};

/// p1..p6, c1 and c2; p1, p2, p3 work at c1, p4 and p5 at c2; p1 knows p2, p2 knows
/// p3, p3 knows p1, p4 knows p1, p5 knows p5.
async fn small_graph() -> (Omnigraph, TestRoot) {
    let test = TestRoot::new(Backend::Memory).await;
    let graph = Omnigraph::create(&test.uri, SCHEMA).await.unwrap();
    let people: Vec<Value> = (1..=6)
        .map(|i| json!({"id": format!("p{i}"), "name": format!("P{i}"), "age": 10 * i}))
        .collect();
    graph
        .insert_json("Person", objects(Value::Array(people)))
        .await
        .unwrap();
    graph
        .insert_json(
            "Company",
            objects(json!([{"id": "c1", "name": "One"}, {"id": "c2", "name": "Two"}])),
        )
        .await
        .unwrap();
    let works: Vec<Value> = [(1, 1), (2, 1), (3, 1), (4, 2), (5, 2)]
        .iter()
        .map(
            |(p, c)| json!({"id": format!("w{p}"), "src": format!("p{p}"), "dst": format!("c{c}")}),
        )
        .collect();
    graph
        .insert_json("WorksAt", objects(Value::Array(works)))
        .await
        .unwrap();
    let knows: Vec<Value> = [(1, 2), (2, 3), (3, 1), (4, 1), (5, 5)]
        .iter()
        .map(|(a, b)| json!({"id": format!("k{a}{b}"), "src": format!("p{a}"), "dst": format!("p{b}")}))
        .collect();
    graph
        .insert_json("Knows", objects(Value::Array(knows)))
        .await
        .unwrap();
    (graph, test)
}

async fn walk(graph: &Omnigraph, starts: &[&str], steps: &[Step], at: &CommitRef) -> Traversal {
    let starts: Vec<Value> = starts.iter().map(|key| json!(key)).collect();
    graph
        .traverse("Person", &starts, steps, false, at)
        .await
        .unwrap()
}

fn keys(traversal: &Traversal) -> Vec<String> {
    traversal
        .nodes
        .iter()
        .map(|node| node["id"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn vias(traversal: &Traversal) -> Vec<Option<StepVia>> {
    traversal.steps.iter().map(|step| step.via).collect()
}

fn adjacency_of<'a>(report: &'a OptimizeReport, type_key: &str) -> &'a AdjacencyOutcome {
    report
        .table(type_key)
        .unwrap()
        .adjacency
        .as_ref()
        .unwrap_or_else(|| panic!("{type_key} has an adjacency outcome: {report:?}"))
}

async fn current(graph: &Omnigraph, edge_type: &str) -> bool {
    graph
        .adjacency_status(&CommitRef::Head)
        .await
        .unwrap()
        .iter()
        .find(|status| status.edge_type == edge_type)
        .unwrap()
        .current
}

#[tokio::test]
async fn optimize_builds_each_edge_tables_artifact_and_traversals_use_it() {
    let (graph, test) = small_graph().await;
    assert!(!current(&graph, "Knows").await);
    let before = walk(
        &graph,
        &["p1", "p4"],
        &[Step::new("Knows", Out)],
        &CommitRef::Head,
    )
    .await;
    assert_eq!(vias(&before), [Some(StepVia::EdgeTable)]);
    assert!(
        before.steps[0]
            .adjacency_passed
            .as_deref()
            .unwrap()
            .contains("no artifact"),
        "{before:?}"
    );

    let report = graph.maintenance().optimize().await.unwrap();
    let head = graph.head().await.unwrap();
    for (edge_type, edges, nodes) in [("Knows", 5, 5), ("WorksAt", 5, 7)] {
        let pin = head.pin_of_type(edge_type).unwrap();
        match adjacency_of(&report, edge_type) {
            AdjacencyOutcome::Built {
                version,
                edges: built_edges,
                nodes: built_nodes,
                bytes,
                ..
            } => {
                assert_eq!(
                    *version, pin.version,
                    "built from the version the head pins"
                );
                assert_eq!((*built_edges, *built_nodes), (edges, nodes));
                let stored = graph
                    .graph()
                    .root()
                    .get(&layout::adjacency_path(&pin.table_id, pin.version))
                    .await
                    .unwrap()
                    .expect("the artifact is written");
                assert_eq!(stored.len() as u64, *bytes);
            }
            other => panic!("{edge_type}: {other:?}"),
        }
        assert!(current(&graph, edge_type).await);
    }
    assert!(
        report.table("Person").unwrap().adjacency.is_none(),
        "nodes have none"
    );
    // A second run finds them current.
    let again = graph.maintenance().optimize().await.unwrap();
    assert!(matches!(
        adjacency_of(&again, "Knows"),
        AdjacencyOutcome::Current { .. }
    ));

    // The same nodes and counts through the artifact as through the edge table.
    let reader = Omnigraph::open(&test.uri).await.unwrap();
    let plain = Omnigraph::open(&test.uri)
        .await
        .unwrap()
        .without_adjacency();
    let shapes = [
        vec![Step::new("Knows", Out)],
        vec![Step::new("Knows", In), Step::new("Knows", Both)],
        vec![Step::new("WorksAt", Out), Step::new("WorksAt", In)],
        vec![Step::new("Knows", Both)],
    ];
    for shape in &shapes {
        for starts in [&["p1"][..], &["p4", "p5"], &["p9"], &["p6"]] {
            let used = walk(&reader, starts, shape, &CommitRef::Head).await;
            let read = walk(&plain, starts, shape, &CommitRef::Head).await;
            assert_eq!(used.nodes, read.nodes, "{starts:?} {shape:?}");
            for (a, b) in used.steps.iter().zip(&read.steps) {
                assert_eq!(
                    (a.edges, a.reached),
                    (b.edges, b.reached),
                    "{starts:?} {shape:?}"
                );
                if a.via.is_some() {
                    assert_eq!(a.via, Some(StepVia::Adjacency), "{starts:?} {shape:?}");
                    assert_eq!(b.via, Some(StepVia::EdgeTable));
                }
            }
        }
    }
    // p5's self-loop, followed both ways, is one edge.
    let looped = walk(
        &reader,
        &["p5"],
        &[Step::new("Knows", Both)],
        &CommitRef::Head,
    )
    .await;
    assert_eq!(
        (keys(&looped), looped.steps[0].edges),
        (vec!["p5".into()], 1)
    );
    // Paths and edge filters read the edge table, and say why.
    let starts = [json!("p1")];
    let with_paths = reader
        .traverse(
            "Person",
            &starts,
            &[Step::new("Knows", Out)],
            true,
            &CommitRef::Head,
        )
        .await
        .unwrap();
    assert_eq!(vias(&with_paths), [Some(StepVia::EdgeTable)]);
    assert!(
        with_paths.steps[0]
            .adjacency_passed
            .as_deref()
            .unwrap()
            .contains("paths")
    );
    let mut filtered = Step::new("Knows", Out);
    filtered.edge_filter = Some("since IS NULL".into());
    let found = walk(&reader, &["p1"], &[filtered], &CommitRef::Head).await;
    assert_eq!(vias(&found), [Some(StepVia::EdgeTable)]);
    assert_eq!(keys(&found), ["p2"]);
}

#[tokio::test]
async fn writes_to_the_edge_type_make_it_stale_until_the_next_optimize() {
    let (graph, test) = small_graph().await;
    graph.maintenance().optimize().await.unwrap();
    let optimized = graph.head().await.unwrap();
    // A node write leaves the edge tables' artifacts current.
    graph
        .insert_json(
            "Person",
            objects(json!([{"id": "p7", "name": "P7", "age": 70}])),
        )
        .await
        .unwrap();
    assert!(current(&graph, "Knows").await);
    let step = [Step::new("Knows", Out)];
    let found = walk(&graph, &["p1"], &step, &CommitRef::Head).await;
    assert_eq!(vias(&found), [Some(StepVia::Adjacency)]);
    // An edge write makes Knows stale (not WorksAt): the new edge is found all the same.
    graph
        .insert_json(
            "Knows",
            objects(json!([{"id": "k17", "src": "p1", "dst": "p7"}])),
        )
        .await
        .unwrap();
    assert!(!current(&graph, "Knows").await);
    assert!(current(&graph, "WorksAt").await);
    let stale = walk(&graph, &["p1"], &step, &CommitRef::Head).await;
    assert_eq!(keys(&stale), ["p2", "p7"]);
    assert_eq!(vias(&stale), [Some(StepVia::EdgeTable)]);
    // Time travel to the optimized commit still uses that version's artifact.
    let then = walk(&graph, &["p1"], &step, &CommitRef::Seq(optimized.seq)).await;
    assert_eq!(
        (keys(&then), vias(&then)),
        (vec!["p2".into()], vec![Some(StepVia::Adjacency)])
    );
    // The next optimize builds the new version's.
    let report = graph.maintenance().optimize().await.unwrap();
    assert!(matches!(
        adjacency_of(&report, "Knows"),
        AdjacencyOutcome::Built { .. }
    ));
    assert!(matches!(
        adjacency_of(&report, "WorksAt"),
        AdjacencyOutcome::Current { .. }
    ));
    // A fresh handle: this one remembers the miss for a few seconds.
    let reader = Omnigraph::open(&test.uri).await.unwrap();
    let fresh = walk(&reader, &["p1"], &step, &CommitRef::Head).await;
    assert_eq!(
        (keys(&fresh), vias(&fresh)),
        (
            vec!["p2".into(), "p7".into()],
            vec![Some(StepVia::Adjacency)]
        )
    );
}

#[tokio::test]
async fn a_damaged_artifact_is_passed_by_with_the_same_result() {
    let (graph, test) = small_graph().await;
    graph.maintenance().optimize().await.unwrap();
    let pin = graph
        .head()
        .await
        .unwrap()
        .pin_of_type("Knows")
        .unwrap()
        .clone();
    let path = layout::adjacency_path(&pin.table_id, pin.version);
    let root = graph.graph().root();
    let mut bytes = root.get(&path).await.unwrap().unwrap().to_vec();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    root.put(&path, Bytes::from(bytes)).await.unwrap();
    let reader = Omnigraph::open(&test.uri).await.unwrap();
    let found = walk(
        &reader,
        &["p1", "p4"],
        &[Step::new("Knows", Out)],
        &CommitRef::Head,
    )
    .await;
    assert_eq!(keys(&found), ["p1", "p2"]);
    assert_eq!(vias(&found), [Some(StepVia::EdgeTable)]);
    let why = found.steps[0].adjacency_passed.as_deref().unwrap();
    assert!(why.contains("checksum"), "{why}");
    // Truncated, or built from another version under this version's name: the same.
    let other = graph
        .head()
        .await
        .unwrap()
        .pin_of_type("WorksAt")
        .unwrap()
        .clone();
    let foreign = root
        .get(&layout::adjacency_path(&other.table_id, other.version))
        .await
        .unwrap()
        .unwrap();
    root.put(&path, foreign).await.unwrap();
    let reader = Omnigraph::open(&test.uri).await.unwrap();
    let found = walk(
        &reader,
        &["p1"],
        &[Step::new("Knows", Out)],
        &CommitRef::Head,
    )
    .await;
    assert_eq!(keys(&found), ["p2"]);
    let why = found.steps[0].adjacency_passed.as_deref().unwrap();
    assert!(why.contains("built from") || why.contains("rows"), "{why}");
    // The next optimize finds it fails a reader's checks and replaces it.
    let report = graph.maintenance().optimize().await.unwrap();
    assert!(
        matches!(
            adjacency_of(&report, "Knows"),
            AdjacencyOutcome::Built { .. }
        ),
        "{report:?}"
    );
    let reader = Omnigraph::open(&test.uri).await.unwrap();
    let found = walk(
        &reader,
        &["p1", "p4"],
        &[Step::new("Knows", Out)],
        &CommitRef::Head,
    )
    .await;
    assert_eq!(
        (keys(&found), vias(&found)),
        (
            vec!["p1".into(), "p2".into()],
            vec![Some(StepVia::Adjacency)]
        )
    );
}

#[tokio::test]
async fn a_failed_build_is_reported_and_leaves_the_units_outcome() {
    let (graph, _test) = small_graph().await;
    let head = graph.head().await.unwrap();
    let knows = head.pin_of_type("Knows").unwrap().table_id.clone();
    let refused = graph.graph().root().inject(FaultRule::new(
        format!("tables/{knows}/_adjacency/*"),
        &[RequestKind::Put, RequestKind::PutIfAbsent],
        FaultAction::FailBefore(StorageKind::Permanent),
    ));
    let report = graph.maintenance().optimize().await.unwrap();
    drop(refused);
    assert!(
        matches!(
            report.table("Knows").unwrap().outcome,
            UnitOutcome::Published { .. } | UnitOutcome::NothingToDo
        ),
        "{report:?}"
    );
    match adjacency_of(&report, "Knows") {
        AdjacencyOutcome::Failed { code, message } => {
            assert_eq!(code, "storage_permanent", "{message}");
            assert!(message.contains("_adjacency"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        adjacency_of(&report, "WorksAt"),
        AdjacencyOutcome::Built { .. }
    ));
    assert_eq!(
        report.exit_code(),
        0,
        "the artifact is never the unit's outcome"
    );
    assert!(!current(&graph, "Knows").await);
    let found = walk(
        &graph,
        &["p1"],
        &[Step::new("Knows", Out)],
        &CommitRef::Head,
    )
    .await;
    assert_eq!(keys(&found), ["p2"]);
    // The next run builds it.
    let report = graph.maintenance().optimize().await.unwrap();
    assert!(matches!(
        adjacency_of(&report, "Knows"),
        AdjacencyOutcome::Built { .. }
    ));
}

#[tokio::test]
async fn a_cancelled_optimize_skips_the_artifact() {
    let (graph, _test) = small_graph().await;
    let graph = Arc::new(graph);
    let head = graph.head().await.unwrap();
    let knows = head.pin_of_type("Knows").unwrap().table_id.clone();
    let works = head.pin_of_type("WorksAt").unwrap().table_id.clone();
    // WorksAt's artifact (the first edge type in schema order) is slow to write.
    let slow = graph.graph().root().inject(FaultRule::new(
        format!("tables/{works}/_adjacency/*"),
        &[RequestKind::Put, RequestKind::PutIfAbsent],
        FaultAction::Delay(Duration::from_secs(2)),
    ));
    let run = {
        let graph = graph.clone();
        tokio::spawn(async move { graph.maintenance().optimize().await })
    };
    let root = graph.graph().root().clone();
    let mut held = false;
    for _ in 0..1_000 {
        if slow.fired() > 0 {
            held = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(held, "the artifact's write is held");
    graph.cancel_maintenance();
    let error = run.await.unwrap().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::MaintenanceCancelled, "{error}");
    // Past the delay: the held write was dropped, never made; Knows was never built.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    drop(slow);
    for table in [&works, &knows] {
        assert_eq!(
            root.list(&format!("tables/{table}/_adjacency"))
                .await
                .unwrap(),
            Vec::<String>::new()
        );
    }
    assert!(!current(&graph, "WorksAt").await);
}

#[tokio::test]
async fn cleanup_reclaims_the_artifacts_of_unretained_versions() {
    let (graph, _test) = small_graph().await;
    graph.maintenance().optimize().await.unwrap();
    let first = graph
        .head()
        .await
        .unwrap()
        .pin_of_type("Knows")
        .unwrap()
        .clone();
    graph
        .insert_json(
            "Knows",
            objects(json!([{"id": "k26", "src": "p2", "dst": "p6"}])),
        )
        .await
        .unwrap();
    graph.maintenance().optimize().await.unwrap();
    let second = graph
        .head()
        .await
        .unwrap()
        .pin_of_type("Knows")
        .unwrap()
        .clone();
    assert_ne!(first.version, second.version);
    let root = graph.graph().root().clone();
    let folder = format!("tables/{}/_adjacency", first.table_id);
    assert_eq!(root.list(&folder).await.unwrap().len(), 2);
    let report = omnigraph_tests::cleanup_keeping_one_after(&graph, Duration::from_secs(120)).await;
    assert_eq!(report.exit_code(), 0, "{report:?}");
    assert_eq!(
        root.list(&folder).await.unwrap(),
        [layout::adjacency_path(&second.table_id, second.version)],
        "the head's artifact stays; the unretained version's goes"
    );
    let found = walk(
        &graph,
        &["p2"],
        &[Step::new("Knows", Out)],
        &CommitRef::Head,
    )
    .await;
    assert_eq!(
        (keys(&found), vias(&found)),
        (
            vec!["p3".into(), "p6".into()],
            vec![Some(StepVia::Adjacency)]
        )
    );
}

/// The nodes and per-step counts of `shape` from `starts` at `at`, by `graph`.
async fn outcome(
    graph: &Omnigraph,
    starts: &[Value],
    shape: &[Step],
    at: &CommitRef,
) -> (Vec<Value>, Vec<(usize, usize, bool)>, Vec<Option<StepVia>>) {
    let found = graph
        .traverse("Person", starts, shape, false, at)
        .await
        .unwrap();
    let nodes = found.nodes.iter().map(|node| node["id"].clone()).collect();
    let counts = found
        .steps
        .iter()
        .map(|step| (step.edges, step.reached, step.truncated))
        .collect();
    (nodes, counts, vias(&found))
}

#[tokio::test]
async fn the_artifact_and_the_edge_table_agree_on_random_graphs_after_deletes_and_in_time_travel() {
    let (mut by_artifact, mut by_table, mut stale) = (0usize, 0usize, 0usize);
    for seed in 0..4u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let test = TestRoot::new(Backend::Memory).await;
        let graph = Omnigraph::create(&test.uri, SCHEMA).await.unwrap();
        let people = 40;
        let rows: Vec<Value> = (0..people)
            .map(|i| json!({"id": format!("p{i}"), "name": "n", "age": rng.random_range(18..80)}))
            .collect();
        graph
            .insert_json("Person", objects(Value::Array(rows)))
            .await
            .unwrap();
        graph
            .insert_json(
                "Company",
                objects(Value::Array(
                    (0..4)
                        .map(|i| json!({"id": format!("c{i}"), "name": "c"}))
                        .collect(),
                )),
            )
            .await
            .unwrap();
        // Two loads each, so optimize has fragments to compact.
        for part in 0..2 {
            let knows: Vec<Value> = (0..60)
                .map(|i| json!({"id": format!("k{part}_{i}"), "src": format!("p{}", rng.random_range(0..people)), "dst": format!("p{}", rng.random_range(0..people))}))
                .collect();
            graph
                .insert_json("Knows", objects(Value::Array(knows)))
                .await
                .unwrap();
        }
        let works: Vec<Value> = (0..people)
            .filter(|_| rng.random_bool(0.7))
            .map(|i| json!({"id": format!("w{i}"), "src": format!("p{i}"), "dst": format!("c{}", i % 4)}))
            .collect();
        graph
            .insert_json("WorksAt", objects(Value::Array(works)))
            .await
            .unwrap();
        graph.maintenance().optimize().await.unwrap();
        let optimized = graph.head().await.unwrap();
        for _ in 0..3 {
            let victim = rng.random_range(0..people);
            graph
                .delete("Person", &format!("id = 'p{victim}'"))
                .await
                .unwrap();
        }
        // Deletes cascaded to edges: both edge tables are stale here.
        let deleted = graph.head().await.unwrap();
        graph.maintenance().optimize().await.unwrap();
        let reoptimized = graph.head().await.unwrap();
        let reader = Omnigraph::open(&test.uri).await.unwrap();
        let plain = Omnigraph::open(&test.uri)
            .await
            .unwrap()
            .without_adjacency();
        let node_filtered = |edge: &str, direction| {
            let mut step = Step::new(edge, direction);
            step.node_filter = Some("age >= 40".into());
            step
        };
        let limited = |edge: &str, direction| {
            let mut step = Step::new(edge, direction);
            step.limit = 3;
            step
        };
        let shapes: Vec<Vec<Step>> = vec![
            vec![Step::new("Knows", Out)],
            vec![Step::new("Knows", In), Step::new("Knows", Both)],
            vec![Step::new("WorksAt", Out), Step::new("WorksAt", In)],
            vec![
                node_filtered("Knows", Both),
                Step::new("WorksAt", Out),
                limited("WorksAt", In),
            ],
            vec![
                Step::new("Knows", Out),
                limited("Knows", Out),
                node_filtered("Knows", In),
            ],
        ];
        for at in [
            CommitRef::Head,
            CommitRef::Seq(optimized.seq),
            CommitRef::Seq(deleted.seq),
        ] {
            for shape in &shapes {
                for _ in 0..3 {
                    let starts: Vec<Value> = (0..rng.random_range(1..5))
                        .map(|_| json!(format!("p{}", rng.random_range(0..people + 5))))
                        .collect();
                    let (nodes, counts, vias) = outcome(&reader, &starts, shape, &at).await;
                    let (plain_nodes, plain_counts, _) = outcome(&plain, &starts, shape, &at).await;
                    let context = format!("seed {seed}, {at:?}, {starts:?}, {shape:?}");
                    assert_eq!(nodes, plain_nodes, "{context}");
                    assert_eq!(counts, plain_counts, "{context}");
                    for via in vias.iter().flatten() {
                        match via {
                            StepVia::Adjacency => by_artifact += 1,
                            StepVia::EdgeTable => by_table += 1,
                        }
                    }
                    if matches!(at, CommitRef::Seq(seq) if seq == deleted.seq) {
                        // An edge type whose table the deletes changed, and the next
                        // optimize compacted, has no artifact at that commit.
                        for (step, via) in shape.iter().zip(&vias) {
                            let version = |commit: &omnigraph_publish::GraphCommit| {
                                commit.pin_of_type(&step.edge_type).unwrap().version
                            };
                            let moved = version(&deleted) != version(&optimized)
                                && version(&deleted) != version(&reoptimized);
                            if moved {
                                stale += 1;
                                assert_ne!(*via, Some(StepVia::Adjacency), "stale at {context}");
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(stale > 10, "steps on a stale edge table: {stale}");
    assert!(
        by_artifact > 50,
        "steps through the artifact: {by_artifact}"
    );
    assert!(by_table > 20, "steps through the edge table: {by_table}");
}

#[tokio::test]
async fn integer_keys_read_the_same_through_the_artifact() {
    let test = TestRoot::new(Backend::Memory).await;
    let schema = "
node Item { n: Int64 @key, name: String }
edge Next: Item -> Item
";
    let graph = Omnigraph::create(&test.uri, schema).await.unwrap();
    let items: Vec<Value> = (1..=12).map(|n| json!({"n": n, "name": "i"})).collect();
    graph
        .insert_json("Item", objects(Value::Array(items)))
        .await
        .unwrap();
    // 1 -> 2, 1 -> 10, 2 -> 10, 10 -> 1, 3 -> 3, and a duplicate 1 -> 2.
    let edges: Vec<Value> = [(1, 2), (1, 10), (2, 10), (10, 1), (3, 3), (1, 2)]
        .iter()
        .enumerate()
        .map(|(i, (a, b))| json!({"id": format!("e{i}"), "src": a, "dst": b}))
        .collect();
    graph
        .insert_json("Next", objects(Value::Array(edges)))
        .await
        .unwrap();
    graph.maintenance().optimize().await.unwrap();
    let reader = Omnigraph::open(&test.uri).await.unwrap();
    let plain = Omnigraph::open(&test.uri)
        .await
        .unwrap()
        .without_adjacency();
    let counts = |found: &Traversal| {
        found
            .steps
            .iter()
            .map(|step| (step.edges, step.reached))
            .collect::<Vec<_>>()
    };
    for shape in [
        vec![Step::new("Next", Out)],
        vec![Step::new("Next", In), Step::new("Next", Both)],
        vec![Step::new("Next", Both), Step::new("Next", Out)],
    ] {
        for starts in [vec![json!(1)], vec![json!(3), json!(10)], vec![json!(99)]] {
            let used = reader
                .traverse("Item", &starts, &shape, false, &CommitRef::Head)
                .await
                .unwrap();
            let read = plain
                .traverse("Item", &starts, &shape, false, &CommitRef::Head)
                .await
                .unwrap();
            assert_eq!(used.nodes, read.nodes, "{starts:?} {shape:?}");
            assert_eq!(counts(&used), counts(&read), "{starts:?} {shape:?}");
            assert_eq!(used.steps[0].via, Some(StepVia::Adjacency), "{starts:?}");
        }
    }
    let from_one = reader
        .traverse(
            "Item",
            &[json!(1)],
            &[Step::new("Next", Out)],
            false,
            &CommitRef::Head,
        )
        .await
        .unwrap();
    let reached: Vec<Value> = from_one
        .nodes
        .iter()
        .map(|node| node["n"].clone())
        .collect();
    assert_eq!(reached, [json!(10), json!(2)], "key order of the text form");
    assert_eq!(
        from_one.steps[0].edges, 3,
        "the duplicate edge is followed too"
    );
}
