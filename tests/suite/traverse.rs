//! Multi-hop traversal on real Lance tables: what each step reaches, its filters and
//! limit, paths, time travel, bad input naming the step, batched lookups, and a
//! comparison with a brute-force walk over every edge on random graphs.

use omnigraph_core::storage::RequestKind;
use omnigraph_core::{ErrorKind, OmniError};
use omnigraph_graph::rows::batches_to_json;
use omnigraph_graph::{Omnigraph, ScanRequest, Step, StepDirection, Traversal};
use omnigraph_publish::CommitRef;
use omnigraph_tests::{Backend, TestRoot, objects};
use rand::{Rng, SeedableRng, rngs::StdRng};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

const SCHEMA: &str = "
node Person { id: String @key, name: String, age: Int32? }
node Company { id: String @key, name: String }
edge WorksAt: Person -> Company { since: Int32? }
edge Knows: Person -> Person { since: Int32? }
";

use StepDirection::{Both, In, Out};

fn step(edge: &str, direction: StepDirection) -> Step {
    Step::new(edge, direction)
}

/// `steps` from the Person nodes `starts` at the head, with paths.
async fn walk(graph: &Omnigraph, starts: &[&str], steps: &[Step]) -> Traversal {
    let starts: Vec<Value> = starts.iter().map(|key| json!(key)).collect();
    graph
        .traverse("Person", &starts, steps, true, &CommitRef::Head)
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

/// p1..p6 (ages 20, 30, .., 70), c1 and c2; p1, p2 and p3 work at c1 (since 2010, 2015,
/// 2020), p4 and p5 at c2; p1 knows p2, p2 knows p3, p3 knows p1, p4 knows p1.
async fn small_graph() -> (Omnigraph, TestRoot) {
    let test = TestRoot::new(Backend::Memory).await;
    let graph = Omnigraph::create(&test.uri, SCHEMA).await.unwrap();
    let people: Vec<Value> = (1..=6)
        .map(|i| json!({"id": format!("p{i}"), "name": format!("P{i}"), "age": 10 + 10 * i}))
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
    graph
        .insert_json(
            "WorksAt",
            objects(json!([
                {"id": "w1", "src": "p1", "dst": "c1", "since": 2010},
                {"id": "w2", "src": "p2", "dst": "c1", "since": 2015},
                {"id": "w3", "src": "p3", "dst": "c1", "since": 2020},
                {"id": "w4", "src": "p4", "dst": "c2", "since": 2012},
                {"id": "w5", "src": "p5", "dst": "c2", "since": 2018},
            ])),
        )
        .await
        .unwrap();
    graph
        .insert_json(
            "Knows",
            objects(json!([
                {"id": "k1", "src": "p1", "dst": "p2"},
                {"id": "k2", "src": "p2", "dst": "p3"},
                {"id": "k3", "src": "p3", "dst": "p1"},
                {"id": "k4", "src": "p4", "dst": "p1"},
            ])),
        )
        .await
        .unwrap();
    (graph, test)
}

#[tokio::test]
async fn two_hops_reach_colleagues_with_one_path_each() {
    let (graph, _test) = small_graph().await;
    let colleagues = [step("WorksAt", Out), step("WorksAt", In)];
    let found = walk(&graph, &["p1"], &colleagues).await;
    assert_eq!(found.node_type, "Person");
    assert_eq!(keys(&found), ["p1", "p2", "p3"]);
    assert_eq!(found.nodes[1]["age"], json!(30), "whole rows come back");
    let reports: Vec<(usize, usize, bool)> = found
        .steps
        .iter()
        .map(|report| (report.edges, report.reached, report.truncated))
        .collect();
    assert_eq!(reports, [(1, 1, false), (3, 3, false)]);
    assert_eq!(found.steps[0].node_type, "Company");
    let paths = found.paths.unwrap();
    assert_eq!(paths[1].nodes, [json!("p1"), json!("c1"), json!("p2")]);
    assert_eq!(paths[1].edges, [json!("w1"), json!("w2")]);
    // Two start nodes at two companies: every colleague once, in key order.
    let found = graph
        .traverse(
            "Person",
            &[json!("p5"), json!("p1")],
            &colleagues,
            false,
            &CommitRef::Head,
        )
        .await
        .unwrap();
    assert_eq!(keys(&found), ["p1", "p2", "p3", "p4", "p5"]);
    assert_eq!(found.paths, None);
}

#[tokio::test]
async fn filters_go_to_the_edges_and_the_nodes_and_a_limit_is_said() {
    let (graph, _test) = small_graph().await;
    let mut later = step("WorksAt", In);
    later.edge_filter = Some("since > 2012".into());
    let found = walk(&graph, &["p1"], &[step("WorksAt", Out), later]).await;
    assert_eq!(keys(&found), ["p2", "p3"]);
    let mut older = step("WorksAt", In);
    older.node_filter = Some("age >= 30 AND age < 40".into());
    let found = walk(&graph, &["p1"], &[step("WorksAt", Out), older]).await;
    assert_eq!(keys(&found), ["p2"]);
    let mut two = step("WorksAt", In);
    two.limit = 2;
    let found = walk(&graph, &["p1"], &[step("WorksAt", Out), two]).await;
    assert_eq!(keys(&found), ["p1", "p2"]);
    assert!(found.steps[1].truncated, "the limit left p3 out");
    // A node filter on a middle step: the next step starts only from what it kept.
    let mut second_company = step("WorksAt", Out);
    second_company.node_filter = Some("name = 'Two'".into());
    let found = walk(
        &graph,
        &["p1", "p4"],
        &[second_company, step("WorksAt", In)],
    )
    .await;
    assert_eq!(keys(&found), ["p4", "p5"]);
}

#[tokio::test]
async fn both_ways_and_three_hops_follow_an_edge_type_between_one_node_type() {
    let (graph, _test) = small_graph().await;
    let found = walk(&graph, &["p1"], &[step("Knows", Both)]).await;
    assert_eq!(keys(&found), ["p2", "p3", "p4"]);
    let edges: Vec<&Value> = found
        .paths
        .iter()
        .flatten()
        .map(|path| &path.edges[0])
        .collect();
    assert_eq!(edges, [&json!("k1"), &json!("k3"), &json!("k4")]);
    let around = [step("Knows", Out), step("Knows", Out), step("Knows", Out)];
    let found = walk(&graph, &["p1"], &around).await;
    assert_eq!(keys(&found), ["p1"]);
    let path = &found.paths.unwrap()[0];
    assert_eq!(
        path.nodes,
        [json!("p1"), json!("p2"), json!("p3"), json!("p1")]
    );
    // A start key no node has reaches nothing; the steps after an empty one report 0.
    let found = walk(&graph, &["nobody"], &around).await;
    assert!(found.nodes.is_empty());
    assert!(found.steps.iter().all(|report| report.reached == 0));
    assert_eq!(found.steps.len(), 3);
    let found = walk(&graph, &["p6"], &[step("Knows", Out), step("Knows", Out)]).await;
    assert!(found.nodes.is_empty(), "p6 knows nobody");
    // A self-loop is found from either end of a both-ways step, and followed once.
    graph
        .insert_json(
            "Knows",
            objects(json!([{"id": "k9", "src": "p5", "dst": "p5"}])),
        )
        .await
        .unwrap();
    let found = walk(&graph, &["p5"], &[step("Knows", Both)]).await;
    assert_eq!(keys(&found), ["p5"]);
    assert_eq!(found.steps[0].edges, 1, "the self-loop counts once");
}

#[tokio::test]
async fn a_traversal_reads_one_commit_and_time_travels() {
    let (graph, _test) = small_graph().await;
    let before = graph.head().await.unwrap();
    graph.delete("WorksAt", "id = 'w2'").await.unwrap().unwrap();
    let colleagues = [step("WorksAt", Out), step("WorksAt", In)];
    let now = walk(&graph, &["p1"], &colleagues).await;
    assert_eq!(keys(&now), ["p1", "p3"]);
    let then = graph
        .traverse(
            "Person",
            &[json!("p1")],
            &colleagues,
            false,
            &CommitRef::Seq(before.seq),
        )
        .await
        .unwrap();
    assert_eq!(keys(&then), ["p1", "p2", "p3"]);
    assert_eq!(then.seq, before.seq);
    // Deleting a node deletes its edges: it is reached no more.
    graph.delete("Person", "id = 'p3'").await.unwrap().unwrap();
    let now = walk(&graph, &["p1"], &colleagues).await;
    assert_eq!(keys(&now), ["p1"]);
}

#[tokio::test]
async fn bad_input_names_the_step_and_the_field() {
    let (graph, _test) = small_graph().await;
    let field_of = |error: OmniError| match error {
        OmniError::BadInput {
            location, message, ..
        } => (location.field.unwrap_or_default(), message),
        other => panic!("expected bad input, got {other}"),
    };
    let refused = |steps: Vec<Step>| {
        let graph = &graph;
        async move {
            field_of(
                graph
                    .traverse("Person", &[json!("p1")], &steps, false, &CommitRef::Head)
                    .await
                    .unwrap_err(),
            )
        }
    };
    let (field, message) = refused(vec![step("WorksAt", Out), step("Likes", Out)]).await;
    assert_eq!(field, "steps[1].edge", "{message}");
    assert!(message.contains("no type Likes"), "{message}");
    let (field, message) = refused(vec![step("WorksAt", In)]).await;
    assert_eq!(field, "steps[0].direction", "{message}");
    assert!(message.contains("from Person to Company"), "{message}");
    let (field, _) = refused(vec![step("WorksAt", Both)]).await;
    assert_eq!(field, "steps[0].direction");
    let (field, _) = refused(vec![step("Company", Out)]).await;
    assert_eq!(field, "steps[0].edge");
    let (field, message) = refused(vec![step("Knows", Out); 9]).await;
    assert_eq!(field, "steps", "{message}");
    let mut huge = step("Knows", Out);
    huge.limit = omnigraph_graph::limits::READ_LIMIT_MAX + 1;
    let (field, _) = refused(vec![huge]).await;
    assert_eq!(field, "steps[0].limit");
    let mut broken = step("Knows", Out);
    broken.edge_filter = Some("no_such_column > 3".into());
    let (field, _) = refused(vec![broken]).await;
    assert_eq!(field, "steps[0].edge_filter");
    // A filter is one expression: it cannot close the key filter's parenthesis and
    // widen the step.
    let mut escaping = step("Knows", Out);
    escaping.edge_filter = Some("since > 0) OR (true".into());
    let (field, message) = refused(vec![escaping]).await;
    assert_eq!(field, "steps[0].edge_filter", "{message}");
    let mut escaping = step("Knows", Out);
    escaping.node_filter = Some("age > 0) OR (true".into());
    let (field, message) = refused(vec![escaping]).await;
    assert_eq!(field, "steps[0].node_filter", "{message}");
    // A trailing comment cannot swallow the closing parenthesis either.
    let mut commented = step("WorksAt", In);
    commented.node_filter = Some("age > 40 --".into());
    let found = graph
        .traverse(
            "Person",
            &[json!("p1")],
            &[step("WorksAt", Out), commented],
            false,
            &CommitRef::Head,
        )
        .await;
    match found {
        Ok(found) => assert!(keys(&found).is_empty(), "p1..p3 are 20 to 40"),
        Err(error) => assert_eq!(error.kind(), ErrorKind::BadInput, "{error}"),
    }
    let error = graph
        .traverse(
            "Person",
            &[json!(7)],
            &[step("Knows", Out)],
            false,
            &CommitRef::Head,
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadInput, "{error}");
    let error = graph
        .traverse(
            "Knows",
            &[json!("k1")],
            &[step("Knows", Out)],
            false,
            &CommitRef::Head,
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadInput, "{error}");
}

#[tokio::test]
async fn a_step_reads_the_same_whatever_the_size_of_its_frontier() {
    let test = TestRoot::new(Backend::Local).await;
    let graph = Omnigraph::create(&test.uri, SCHEMA).await.unwrap();
    let people: Vec<Value> = (0..1_600)
        .map(|i| json!({"id": format!("p{i}"), "name": "n"}))
        .collect();
    graph
        .insert_json("Person", objects(Value::Array(people)))
        .await
        .unwrap();
    let knows: Vec<Value> = (0..1_600)
        .map(|i| json!({"id": format!("k{i}"), "src": format!("p{i}"), "dst": format!("p{}", (i + 1) % 1_600)}))
        .collect();
    graph
        .insert_json("Knows", objects(Value::Array(knows)))
        .await
        .unwrap();
    let requests = |starts: usize| {
        let graph = &graph;
        async move {
            let keys: Vec<Value> = (0..starts).map(|i| json!(format!("p{i}"))).collect();
            let probe = graph.graph().root().probe();
            let found = graph
                .traverse(
                    "Person",
                    &keys,
                    &[step("Knows", Out), step("Knows", Out)],
                    false,
                    &CommitRef::Head,
                )
                .await
                .unwrap();
            assert_eq!(found.nodes.len(), starts);
            (
                probe.counts().get(RequestKind::Get) + probe.counts().get(RequestKind::RangedGet),
                probe.counts().total(),
            )
        }
    };
    // The first call opens the tables; the ones compared find them open.
    requests(1).await;
    let one = requests(1).await;
    let many = requests(300).await;
    let most = requests(1_500).await;
    assert!(
        one.0 > 0,
        "a warm traversal still reads data files: {one:?}"
    );
    // Batched: 300 start nodes read what one does, not 300 times as much; 1,500 make
    // two lookups of 1,000 keys or fewer per step, not 1,500.
    assert_eq!(many, one, "1 start: {one:?}, 300 starts: {many:?}");
    assert!(
        most.1 <= 2 * one.1,
        "1 start: {one:?}, 1,500 starts: {most:?}"
    );
}

/// Every edge of `edge_type` at `at`: `(src, dst, id)`.
async fn all_edges(
    graph: &Omnigraph,
    edge_type: &str,
    at: &CommitRef,
) -> Vec<(String, String, String)> {
    let batches = graph
        .scan(
            edge_type,
            &ScanRequest {
                filter: None,
                columns: vec!["id".into(), "src".into(), "dst".into()],
                limit: Some(10_000),
            },
            at,
        )
        .await
        .unwrap();
    batches_to_json(&batches)
        .into_iter()
        .map(|row| {
            let text = |name: &str| row[name].as_str().unwrap().to_string();
            (text("src"), text("dst"), text("id"))
        })
        .collect()
}

/// The nodes `steps` reach from `starts`, walked over every edge in memory.
async fn brute_force(
    graph: &Omnigraph,
    starts: &[String],
    steps: &[Step],
    at: &CommitRef,
) -> Vec<String> {
    let mut frontier: BTreeSet<String> = starts.iter().cloned().collect();
    let present: BTreeSet<String> = {
        let batches = graph
            .scan(
                "Person",
                &ScanRequest {
                    filter: None,
                    columns: vec!["id".into()],
                    limit: Some(10_000),
                },
                at,
            )
            .await
            .unwrap();
        batches_to_json(&batches)
            .into_iter()
            .map(|row| row["id"].as_str().unwrap().to_string())
            .collect()
    };
    frontier.retain(|key| present.contains(key));
    for step in steps {
        let edges = all_edges(graph, &step.edge_type, at).await;
        let mut next = BTreeSet::new();
        for (src, dst, _) in &edges {
            if matches!(step.direction, Out | Both) && frontier.contains(src) {
                next.insert(dst.clone());
            }
            if matches!(step.direction, In | Both) && frontier.contains(dst) {
                next.insert(src.clone());
            }
        }
        frontier = next;
    }
    frontier.into_iter().collect()
}

#[tokio::test]
async fn traversals_match_a_brute_force_walk_on_random_graphs_after_deletes_and_in_time_travel() {
    let mut reached = 0;
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
        let knows: Vec<Value> = (0..90)
            .map(|i| json!({"id": format!("k{i}"), "src": format!("p{}", rng.random_range(0..people)), "dst": format!("p{}", rng.random_range(0..people))}))
            .collect();
        graph
            .insert_json("Knows", objects(Value::Array(knows)))
            .await
            .unwrap();
        let works: Vec<Value> = (0..people)
            .filter(|_| rng.random_bool(0.7))
            .map(|i| json!({"id": format!("w{i}"), "src": format!("p{i}"), "dst": format!("c{}", i % 4)}))
            .collect();
        graph
            .insert_json("WorksAt", objects(Value::Array(works)))
            .await
            .unwrap();
        let before = graph.head().await.unwrap();
        for _ in 0..3 {
            let victim = rng.random_range(0..people);
            graph
                .delete("Person", &format!("id = 'p{victim}'"))
                .await
                .unwrap();
        }
        let shapes: Vec<Vec<Step>> = vec![
            vec![step("Knows", Out)],
            vec![step("Knows", In), step("Knows", Both)],
            vec![step("WorksAt", Out), step("WorksAt", In)],
            vec![
                step("Knows", Both),
                step("WorksAt", Out),
                step("WorksAt", In),
            ],
            vec![step("Knows", Out), step("Knows", Out), step("Knows", In)],
        ];
        for at in [CommitRef::Head, CommitRef::Seq(before.seq)] {
            for shape in &shapes {
                for _ in 0..3 {
                    let starts: Vec<String> = (0..rng.random_range(1..5))
                        .map(|_| format!("p{}", rng.random_range(0..people)))
                        .collect();
                    let start_values: Vec<Value> = starts.iter().map(|key| json!(key)).collect();
                    let found = graph
                        .traverse("Person", &start_values, shape, true, &at)
                        .await
                        .unwrap();
                    let expected = brute_force(&graph, &starts, shape, &at).await;
                    let context = format!("seed {seed}, {at:?}, {starts:?}, {shape:?}");
                    assert_eq!(keys(&found), expected, "{context}");
                    reached += expected.len();
                    // Every path is made of edges that exist at that commit.
                    let mut edges: BTreeMap<String, (String, String)> = BTreeMap::new();
                    for edge_type in ["Knows", "WorksAt"] {
                        for (src, dst, id) in all_edges(&graph, edge_type, &at).await {
                            edges.insert(id, (src, dst));
                        }
                    }
                    for path in found.paths.as_ref().unwrap() {
                        assert_eq!(path.nodes.len(), shape.len() + 1, "{context}");
                        for (hop, id) in path.edges.iter().enumerate() {
                            let (src, dst) = &edges[id.as_str().unwrap()];
                            let (a, b) = (
                                path.nodes[hop].as_str().unwrap(),
                                path.nodes[hop + 1].as_str().unwrap(),
                            );
                            assert!(
                                (src == a && dst == b) || (src == b && dst == a),
                                "{context}: {path:?}"
                            );
                        }
                    }
                }
            }
        }
    }
    assert!(reached > 100, "the walks reach nodes: {reached}");
}

/// A both-ways step reads the second way with what is left of the per-step edge limit;
/// self-loops, found from the first way already, must not use it up: the real edges
/// behind them would be cut off, and the step would say nothing.
#[tokio::test]
async fn self_loops_never_use_up_the_read_limit_of_a_both_ways_step() {
    use omnigraph_core::arrow_array::{RecordBatch, StringArray};
    let (graph, _test) = small_graph().await;
    let loops = omnigraph_graph::limits::TRAVERSE_EDGES_PER_STEP_MAX * 3 / 5;
    let table = omnigraph_tests::head_table(&graph, "Knows").await;
    let schema: omnigraph_core::arrow_schema::Schema = table.schema().into();
    let schema = std::sync::Arc::new(schema.project(&[0, 1, 2]).unwrap());
    assert_eq!(
        schema
            .fields()
            .iter()
            .map(|field| field.name().as_str())
            .collect::<Vec<_>>(),
        ["id", "src", "dst"]
    );
    let batch = |ids: Vec<String>, src: &str, dst: &str| {
        let count = ids.len();
        RecordBatch::try_new(
            schema.clone(),
            vec![
                std::sync::Arc::new(StringArray::from(ids)),
                std::sync::Arc::new(StringArray::from(vec![src; count])),
                std::sync::Arc::new(StringArray::from(vec![dst; count])),
            ],
        )
        .unwrap()
    };
    // p6 loops onto itself many times, and then p2..p5 know p6: their edges come
    // after the loops in the table.
    let looped: Vec<String> = (0..loops).map(|i| format!("loop{i}")).collect();
    graph
        .insert_batches("Knows", &[batch(looped, "p6", "p6")])
        .await
        .unwrap();
    for from in ["p2", "p3", "p4", "p5"] {
        graph
            .insert_batches("Knows", &[batch(vec![format!("to-p6-{from}")], from, "p6")])
            .await
            .unwrap();
    }
    let found = walk(&graph, &["p6"], &[step("Knows", Both)]).await;
    assert_eq!(keys(&found), ["p2", "p3", "p4", "p5", "p6"]);
    assert_eq!(
        found.steps[0].edges,
        loops + 4,
        "each loop once, and the four"
    );
}
