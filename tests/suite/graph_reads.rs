//! The index writer and the read side on real Lance tables: each index kind, pending
//! vector indexes, coverage, and each read compared with a brute-force answer.

use omnigraph_core::adapter::built_partitions;
use omnigraph_core::lance::index::DatasetIndexExt;
use omnigraph_core::{ErrorKind, OmniError};
use omnigraph_graph::{Direction, Omnigraph};
use omnigraph_maintenance::MaintenanceExt;
use omnigraph_maintenance::indexes::first_partition_count;
use omnigraph_publish::CommitRef;
use omnigraph_tests::{Backend, TestRoot, head_table, objects};
use rand::{Rng, SeedableRng, rngs::StdRng};
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

const DIMENSION: usize = 16;
const SCHEMA: &str = "
node Person { id: String @key, name: String @index(fts), age: Int32? @index, embedding: Vector(16)? @index(vector) }
node Company { id: String @key, name: String }
edge WorksAt: Person -> Company { since: Int32? }
";
fn as_objects(values: Vec<Value>) -> Vec<Map<String, Value>> {
    objects(Value::Array(values))
}

const WORDS: [&str; 6] = ["apple", "banana", "cherry", "durian", "elder", "fig"];

fn vector(rng: &mut StdRng) -> Vec<f32> {
    (0..DIMENSION).map(|_| rng.random::<f32>()).collect()
}

fn people(start: usize, count: usize, rng: Option<&mut StdRng>) -> Vec<Value> {
    let mut rng = rng;
    (start..start + count)
        .map(|i| {
            let name = format!("{} {} person{i}", WORDS[i % WORDS.len()], WORDS[(i / 7) % WORDS.len()]);
            let embedding = rng.as_deref_mut().map(vector);
            json!({"id": format!("p{i}"), "name": name, "age": (i % 80) as i32, "embedding": embedding})
        })
        .collect()
}

async fn graph(backend: Backend) -> (Omnigraph, TestRoot) {
    let test = TestRoot::new(backend).await;
    let graph = Omnigraph::create(&test.uri, SCHEMA).await.unwrap();
    (graph, test)
}

fn ids(rows: &[Map<String, Value>]) -> BTreeSet<String> {
    rows.iter()
        .map(|row| row["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn builds_each_kind_reports_pending_vectors_and_coverage() {
    let (graph, _test) = graph(Backend::Local).await;
    graph
        .insert_json("Person", as_objects(people(0, 50, None)))
        .await
        .unwrap();
    graph
        .insert_json(
            "Company",
            as_objects(vec![json!({"id": "c1", "name": "Acme"})]),
        )
        .await
        .unwrap();
    graph
        .insert_json(
            "WorksAt",
            as_objects(vec![json!({"id": "e1", "src": "p1", "dst": "c1"})]),
        )
        .await
        .unwrap();
    let report = graph.maintenance().build_indexes().await.unwrap();
    let built: BTreeSet<String> = report
        .built
        .iter()
        .map(|(t, i)| format!("{t}.{i}"))
        .collect();
    for expected in [
        "Person.id_btree",
        "Person.name_fts",
        "Person.age_btree",
        "Company.id_btree",
        "WorksAt.id_btree",
        "WorksAt.src_btree",
        "WorksAt.dst_btree",
    ] {
        assert!(built.contains(expected), "{expected} in {built:?}");
    }
    assert_eq!(report.pending_indexes.len(), 1);
    assert_eq!(report.pending_indexes[0].index, "embedding_vector");
    assert!(
        report.pending_indexes[0]
            .reason
            .contains("no non-null vectors"),
        "{:?}",
        report.pending_indexes
    );
    let commit = report.commit.unwrap();
    assert_eq!(commit.operation.kind, "build_indexes");

    let coverage = graph.index_coverage(&CommitRef::Head).await.unwrap();
    let of = |index: &str| {
        coverage
            .iter()
            .find(|c| c.type_name == "Person" && c.index == index)
            .unwrap()
            .clone()
    };
    assert!(of("id_btree").built && of("id_btree").uncovered_rows == 0);
    assert!(!of("embedding_vector").built);
    assert_eq!(of("embedding_vector").uncovered_rows, 50);

    // Nothing new to build: nothing published.
    let again = graph.maintenance().build_indexes().await.unwrap();
    assert!(again.commit.is_none() && again.built.is_empty());

    // New rows: coverage reports them; too few vectors still pend, with the count.
    let mut rng = StdRng::seed_from_u64(7);
    graph
        .insert_json("Person", as_objects(people(50, 100, Some(&mut rng))))
        .await
        .unwrap();
    let coverage = graph.index_coverage(&CommitRef::Head).await.unwrap();
    let btree = coverage
        .iter()
        .find(|c| c.type_name == "Person" && c.index == "id_btree")
        .unwrap();
    assert_eq!(btree.uncovered_rows, 100);
    let report = graph.maintenance().build_indexes().await.unwrap();
    assert!(
        report.pending_indexes[0]
            .reason
            .contains("100 non-null vectors"),
        "{:?}",
        report.pending_indexes
    );
    graph
        .insert_json("Person", as_objects(people(150, 2_000, Some(&mut rng))))
        .await
        .unwrap();
    let report = graph.maintenance().build_indexes().await.unwrap();
    assert_eq!(
        report.built,
        vec![("Person".to_string(), "embedding_vector".to_string())]
    );
    assert!(report.pending_indexes.is_empty());

    // A rebuild keeps the partition count chosen at the first build.
    let snapshot = graph
        .graph()
        .snapshot("main", &CommitRef::Head)
        .await
        .unwrap();
    let table = snapshot.table("Person").await.unwrap();
    let partitions = built_partitions(&table, "embedding_vector")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(partitions, first_partition_count(2_100));
    graph
        .insert_json("Person", as_objects(people(2_150, 3_000, Some(&mut rng))))
        .await
        .unwrap();
    graph
        .maintenance()
        .rebuild_index("Person", "embedding_vector")
        .await
        .unwrap();
    let table = head_table(&graph, "Person").await;
    assert_eq!(
        built_partitions(&table, "embedding_vector").await.unwrap(),
        Some(partitions)
    );
    assert_ne!(
        first_partition_count(5_100),
        partitions,
        "a fresh choice would differ"
    );
    let named = table
        .load_indices()
        .await
        .unwrap()
        .iter()
        .filter(|i| i.name == "embedding_vector")
        .count();
    assert_eq!(named, 1);
}

#[tokio::test]
async fn neighbors_match_a_brute_force_scan_with_and_without_indexes() {
    for backend in [Backend::Local, Backend::Memory] {
        let (graph, _test) = graph(backend).await;
        graph
            .insert_json("Person", as_objects(people(0, 40, None)))
            .await
            .unwrap();
        let companies: Vec<Value> = (0..8)
            .map(|i| json!({"id": format!("c{i}"), "name": format!("co {i}")}))
            .collect();
        graph
            .insert_json("Company", as_objects(companies))
            .await
            .unwrap();
        let mut rng = StdRng::seed_from_u64(3);
        let mut edges = Vec::new();
        let mut truth: Vec<(String, String)> = Vec::new();
        for i in 0..120 {
            let (person, company) = (
                format!("p{}", rng.random_range(0..40)),
                format!("c{}", rng.random_range(0..8)),
            );
            if truth.contains(&(person.clone(), company.clone())) {
                continue;
            }
            edges.push(json!({"id": format!("e{i}"), "src": person, "dst": company}));
            truth.push((person, company));
        }
        graph
            .insert_json("WorksAt", as_objects(edges))
            .await
            .unwrap();
        let unindexed = graph.head().await.unwrap();
        graph.maintenance().build_indexes().await.unwrap();
        for at in [CommitRef::Seq(unindexed.seq), CommitRef::Head] {
            for person in ["p0", "p7", "p39"] {
                let expected: BTreeSet<String> = truth
                    .iter()
                    .filter(|(p, _)| p == person)
                    .map(|(_, c)| c.clone())
                    .collect();
                let found = graph
                    .neighbors(
                        "Person",
                        &json!(person),
                        "WorksAt",
                        Direction::Out,
                        100,
                        &at,
                    )
                    .await
                    .unwrap();
                assert_eq!(ids(&found), expected, "{backend:?} {at:?} {person}");
            }
            let expected: BTreeSet<String> = truth
                .iter()
                .filter(|(_, c)| c == "c3")
                .map(|(p, _)| p.clone())
                .collect();
            let found = graph
                .neighbors("Company", &json!("c3"), "WorksAt", Direction::In, 100, &at)
                .await
                .unwrap();
            assert_eq!(ids(&found), expected);
        }
        // With the endpoint BTree built, the edge lookup uses it.
        let edges = head_table(&graph, "WorksAt").await;
        let mut scanner = edges.scan();
        scanner.filter("src = 'p7'").unwrap();
        let plan = scanner.explain_plan(true).await.unwrap();
        assert!(
            plan.contains("ScalarIndexQuery") && plan.contains("src_btree"),
            "{plan}"
        );
        let error = graph
            .neighbors(
                "Company",
                &json!("c3"),
                "WorksAt",
                Direction::Out,
                10,
                &CommitRef::Head,
            )
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::BadInput);
    }
}

fn l2(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

#[tokio::test]
async fn nearest_is_exact_without_an_index_and_recalls_with_ivf() {
    let (graph, _test) = graph(Backend::Local).await;
    let mut rng = StdRng::seed_from_u64(11);
    let mut vectors = Vec::new();
    for chunk in 0..4 {
        let rows = people(chunk * 5_000, 5_000, Some(&mut rng));
        for row in &rows {
            let embedding: Vec<f32> = row["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
                .collect();
            vectors.push((row["id"].as_str().unwrap().to_string(), embedding));
        }
        graph.insert_json("Person", as_objects(rows)).await.unwrap();
    }
    let exact_commit = graph.head().await.unwrap();
    graph.maintenance().build_indexes().await.unwrap();
    let queries: Vec<Vec<f32>> = (0..20).map(|_| vector(&mut rng)).collect();
    let mut recall_sum = 0.0;
    for query in &queries {
        let mut truth: Vec<(f32, &str)> = vectors
            .iter()
            .map(|(id, v)| (l2(v, query), id.as_str()))
            .collect();
        truth.sort_by(|a, b| a.0.total_cmp(&b.0));
        let top: BTreeSet<String> = truth[..10].iter().map(|(_, id)| id.to_string()).collect();
        let exact = graph
            .nearest(
                "Person",
                "embedding",
                query,
                10,
                None,
                &CommitRef::Seq(exact_commit.seq),
            )
            .await
            .unwrap();
        assert_eq!(ids(&exact), top, "without the index the answer is exact");
        let approximate = graph
            .nearest("Person", "embedding", query, 10, None, &CommitRef::Head)
            .await
            .unwrap();
        recall_sum += ids(&approximate).intersection(&top).count() as f64 / 10.0;
    }
    let recall = recall_sum / queries.len() as f64;
    eprintln!("IVF recall@10 over {} queries: {recall:.3}", queries.len());
    assert!(recall >= 0.9, "recall@10 = {recall}");
    // The index is used at the head, not at the older commit.
    let first_query = omnigraph_core::arrow_array::Float32Array::from(queries[0].clone());
    let plan_of = |table: std::sync::Arc<omnigraph_core::lance::Dataset>| {
        let query = first_query.clone();
        async move {
            let mut scanner = table.scan();
            scanner.nearest("embedding", &query, 10).unwrap();
            scanner.explain_plan(true).await.unwrap()
        }
    };
    let head_table = head_table(&graph, "Person").await;
    let old_table = graph
        .graph()
        .snapshot("main", &CommitRef::Seq(exact_commit.seq))
        .await
        .unwrap()
        .table("Person")
        .await
        .unwrap();
    assert!(
        plan_of(head_table).await.contains("ANN"),
        "the IVF index is used"
    );
    assert!(!plan_of(old_table).await.contains("ANN"));
    // A filter is applied before the k are chosen.
    let filtered = graph
        .nearest(
            "Person",
            "embedding",
            &queries[0],
            5,
            Some("age < 10"),
            &CommitRef::Head,
        )
        .await
        .unwrap();
    assert_eq!(filtered.len(), 5);
    assert!(filtered.iter().all(|row| row["age"].as_i64().unwrap() < 10));
    let error = graph
        .nearest(
            "Person",
            "embedding",
            &[1.0, 2.0],
            5,
            None,
            &CommitRef::Head,
        )
        .await
        .unwrap_err();
    assert!(error.to_string().contains("dimension 16"), "{error}");
}

#[tokio::test]
async fn text_search_needs_its_index_and_then_matches_exactly() {
    let (graph, _test) = graph(Backend::Memory).await;
    let rows = people(0, 300, None);
    graph
        .insert_json("Person", as_objects(rows.clone()))
        .await
        .unwrap();
    let before = graph.head().await.unwrap();
    let error = graph
        .search_text("Person", "name", "cherry", 100, &CommitRef::Head)
        .await
        .unwrap_err();
    match &error {
        OmniError::NotFound { what, .. } => {
            assert!(
                what.contains("name_fts") && what.contains("build-indexes"),
                "{what}"
            );
        }
        other => panic!("expected NotFound, got {other}"),
    }
    graph.maintenance().build_indexes().await.unwrap();
    let found = graph
        .search_text("Person", "name", "cherry", 1_000, &CommitRef::Head)
        .await
        .unwrap();
    let expected: BTreeSet<String> = rows
        .iter()
        .filter(|row| {
            row["name"]
                .as_str()
                .unwrap()
                .split(' ')
                .any(|word| word == "cherry")
        })
        .map(|row| row["id"].as_str().unwrap().to_string())
        .collect();
    assert!(!expected.is_empty());
    assert_eq!(ids(&found), expected);
    // The older commit has no index: the read there says so.
    let error = graph
        .search_text("Person", "name", "cherry", 10, &CommitRef::Seq(before.seq))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound);
    let error = graph
        .search_text("Company", "name", "acme", 10, &CommitRef::Head)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("no full-text index"), "{error}");
}
