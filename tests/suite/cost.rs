//! The cost golden: exact object-store request counts of the hot paths, compared with
//! `tests/golden/cost.txt`, so any change to them is a reviewed diff. Regenerate with
//! `OMNIGRAPH_BLESS=1 cargo test -p omnigraph-tests --test suite cost::`.

use omnigraph_core::adapter;
use omnigraph_core::storage::{RequestCounts, StorageRoot};
use omnigraph_maintenance::MaintenanceExt;
use omnigraph_publish::{
    CommitOperation, CommitRef, Graph, Publication, ReadSet, Staging, publish,
};
use omnigraph_tests::{Backend, TestGraph, TestRoot, new_table, origin, people, rows};
use std::collections::BTreeMap;
use std::sync::Arc;

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/golden/cost.txt");

fn line(counts: &RequestCounts) -> String {
    let kinds: Vec<String> = counts
        .by_kind
        .iter()
        .map(|(kind, count)| {
            format!(
                "{}={count}",
                serde_json::to_value(kind).unwrap().as_str().unwrap()
            )
        })
        .collect();
    format!("{} [{}]", counts.total(), kinds.join(" "))
}

fn empty_commit(base: omnigraph_publish::GraphCommit) -> Publication {
    omnigraph_tests::publication_changing_nothing(base, ReadSet::Strict, "cost")
}

/// Grows the log of `graph` to `depth` commits with empty publications.
async fn grow_to(graph: &Graph, depth: u64) {
    let log = graph.log("main").unwrap();
    let mut head = log.head().await.unwrap();
    while head.seq < depth {
        head = publish(graph.root(), &empty_commit(head)).await.unwrap();
    }
}

/// Head read and empty publication on a fresh handle at `depth`.
async fn log_costs(test: &TestGraph, depth: u64, costs: &mut BTreeMap<String, String>) {
    grow_to(&test.graph, depth).await;
    let root: Arc<StorageRoot> = StorageRoot::open(&test.uri).await.unwrap();
    let graph = Graph::open_root(root.clone()).await.unwrap();
    let probe = root.probe();
    let head = graph.commit("main", &CommitRef::Head).await.unwrap();
    costs.insert(
        format!("log.head_read.depth_{depth}"),
        line(&probe.counts()),
    );
    probe.reset();
    let near = graph.head_near("main", &head).await.unwrap();
    assert_eq!(near, head);
    costs.insert(
        format!("log.head_read_near.depth_{depth}"),
        line(&probe.counts()),
    );
    probe.reset();
    publish(graph.root(), &empty_commit(head)).await.unwrap();
    costs.insert(
        format!("publish.empty_commit.depth_{depth}"),
        line(&probe.counts()),
    );
}

async fn measure() -> BTreeMap<String, String> {
    let mut costs = BTreeMap::new();

    let test = TestRoot::new(Backend::Local).await;
    let table = new_table(&test.root, "t1").await;
    let probe = test.root.probe();
    let link = adapter::stage_append(&table, vec![rows(0, 100, false)], &origin(1))
        .await
        .unwrap();
    costs.insert("adapter.detached_append".into(), line(&probe.counts()));
    let cold = test.reopen().await;
    let probe = cold.probe();
    adapter::open_table_at(&cold, "tables/t1", link.version)
        .await
        .unwrap();
    costs.insert("adapter.open_detached_cold".into(), line(&probe.counts()));

    let shallow = TestGraph::new(Backend::Local).await;
    log_costs(&shallow, 10, &mut costs).await;
    let deep = TestGraph::new(Backend::Local).await;
    log_costs(&deep, 1000, &mut costs).await;

    // A one-table staged publication on a warm handle: stage, count, publish.
    let person = shallow.table_id("Person");
    let head = shallow
        .graph
        .commit("main", &CommitRef::Head)
        .await
        .unwrap();
    let mut staging = Staging::new(shallow.graph.root().clone(), head);
    staging.chain(&person).await.unwrap();
    let probe = shallow.graph.root().probe();
    staging
        .stage_append(&person, vec![people(0, 1)])
        .await
        .unwrap();
    staging
        .publish(
            ReadSet::Strict,
            CommitOperation {
                kind: "test".into(),
                summary: "one row".into(),
            },
            "cost",
        )
        .await
        .unwrap();
    costs.insert("publish.one_row_append_warm".into(), line(&probe.counts()));

    // A branch from main's head: two log reads of the source, the new log, the commit.
    let handle = omnigraph_graph::Omnigraph::open(&shallow.uri)
        .await
        .unwrap();
    let branching = handle.graph().root().probe();
    handle
        .create_branch("costed", &CommitRef::Head)
        .await
        .unwrap();
    costs.insert(
        "branches.create_from_head".into(),
        line(&branching.counts()),
    );

    // A single-row insert on a warm handle, into a table that has rows (so the key is
    // checked against them).
    let test = TestRoot::new(Backend::Local).await;
    let graph = omnigraph_graph::Omnigraph::create(&test.uri, omnigraph_tests::SOCIAL_SCHEMA)
        .await
        .unwrap();
    let warm_rows =
        |start: usize, count: usize| -> Vec<serde_json::Map<String, serde_json::Value>> {
            (start..start + count)
                .map(|i| {
                    serde_json::json!({"id": format!("p{i}"), "name": "x"})
                        .as_object()
                        .unwrap()
                        .clone()
                })
                .collect()
        };
    graph.insert_json("Person", warm_rows(0, 10)).await.unwrap();
    graph.insert_json("Person", warm_rows(10, 1)).await.unwrap();
    let probe = graph.graph().root().probe();
    graph.insert_json("Person", warm_rows(11, 1)).await.unwrap();
    costs.insert("writers.insert_one_row_warm".into(), line(&probe.counts()));
    graph.maintenance().build_indexes().await.unwrap();
    graph.insert_json("Person", warm_rows(12, 1)).await.unwrap();
    let indexed = graph.graph().root().probe();
    graph.insert_json("Person", warm_rows(13, 1)).await.unwrap();
    costs.insert(
        "writers.insert_one_row_warm_indexed".into(),
        line(&indexed.counts()),
    );

    // Optimize's own objects: exactly one commit (and its HEAD copy) per published
    // table; everything else it writes is Lance's files under tables/.
    let maintenance = graph.graph().root().probe();
    let report = omnigraph_maintenance::optimize(&graph, &Default::default())
        .await
        .unwrap();
    assert_eq!(report.tables.iter().filter(|t| t.published()).count(), 1);
    let mut own_counts = RequestCounts::default();
    for request in maintenance.requests() {
        if !request.path.starts_with("tables/") {
            *own_counts.by_kind.entry(request.kind).or_default() += 1;
        }
    }
    costs.insert(
        "maintenance.optimize_one_table.graph_objects".into(),
        line(&own_counts),
    );
    // Cleanup with nothing to delete, on the 3 tables of a fresh handle: after a run
    // that reclaimed, a second one on a cold root (its own Lance session).
    let later = std::time::Duration::from_secs(5 * 60);
    let options = omnigraph_tests::keep_with_minimum_grace(1);
    let recording = graph.graph().root().probe();
    let recorded = omnigraph_tests::later_by(later, graph.maintenance().cleanup(&options))
        .await
        .unwrap();
    assert_eq!(recorded.recorded, vec!["retention:main".to_string()]);
    // Outside `tables/` a run reads the log and publishes its record: one commit and
    // its `HEAD` copy, and no object of its own.
    let mut own_counts = RequestCounts::default();
    for request in recording.requests() {
        if !request.path.starts_with("tables/") {
            *own_counts.by_kind.entry(request.kind).or_default() += 1;
        }
    }
    costs.insert(
        "maintenance.cleanup_record.graph_objects".into(),
        line(&own_counts),
    );
    let cold = omnigraph_graph::Omnigraph::open(&test.uri).await.unwrap();
    let sweep = cold.graph().root().probe();
    let report = omnigraph_tests::later_by(later, cold.maintenance().cleanup(&options))
        .await
        .unwrap();
    assert_eq!(report.tables.len(), 3);
    assert_eq!(
        report.totals.manifests_removed + report.totals.files_removed,
        0
    );
    costs.insert(
        "maintenance.cleanup_nothing_to_delete.3_tables".into(),
        line(&sweep.counts()),
    );
    Box::pin(writer_costs(&graph, &mut costs)).await;
    if std::env::var("OMNIGRAPH_COST_TRACE").is_ok() {
        for request in sweep.requests() {
            eprintln!("cleanup: {:?} {}", request.kind, request.path);
        }
    }
    if std::env::var("OMNIGRAPH_COST_TRACE").is_ok() {
        for request in probe.requests().iter().chain(indexed.requests().iter()) {
            eprintln!("insert_one_row_warm: {:?} {}", request.kind, request.path);
        }
    }
    costs
}

/// How many runs the cost test makes while a task brings a key cache to the head.
const KEY_CACHE_FILL_RUNS_MAX: usize = 500;

/// Every other writer, warm: each runs once to warm the handle, then once measured.
async fn writer_costs(graph: &omnigraph_graph::Omnigraph, costs: &mut BTreeMap<String, String>) {
    use omnigraph_graph::LoadMode;
    use serde_json::json;
    let rows = |value: serde_json::Value| omnigraph_tests::objects(value);
    graph
        .insert_json("Company", rows(json!([{"id": "c0", "name": "Acme"}])))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let jsonl = |name: &str, lines: &[serde_json::Value]| {
        let path = dir.path().join(name);
        let text: String = lines.iter().map(|line| format!("{line}\n")).collect();
        std::fs::write(&path, text).unwrap();
        path
    };
    // Two runs of `write(i)`, the second measured.
    macro_rules! warm {
        ($name:expr, |$i:ident| $write:expr) => {{
            {
                let $i = 0usize;
                Box::pin(async { $write }).await;
            }
            let probe = graph.graph().root().probe();
            {
                let $i = 1usize;
                Box::pin(async { $write }).await;
            }
            costs.insert($name.to_string(), line(&probe.counts()));
            if std::env::var("OMNIGRAPH_COST_TRACE").is_ok() {
                for request in probe.requests() {
                    eprintln!("{}: {:?} {}", $name, request.kind, request.path);
                }
            }
        }};
    }
    warm!("writers.load_append_warm", |i| {
        let path = jsonl(
            &format!("append{i}.jsonl"),
            &[
                json!({"type": "Person", "id": format!("l{i}"), "name": "l"}),
                json!({"type": "WorksAt", "id": format!("le{i}"), "src": format!("l{i}"), "dst": "c0"}),
            ],
        );
        graph.load(&path, LoadMode::Append).await.unwrap()
    });
    warm!("writers.load_merge_warm", |i| {
        let path = jsonl(
            &format!("merge{i}.jsonl"),
            &[json!({"type": "Person", "id": format!("l{i}"), "name": "merged"})],
        );
        graph.load(&path, LoadMode::Merge).await.unwrap()
    });
    warm!("writers.edge_insert_warm", |i| {
        graph
            .insert_json(
                "WorksAt",
                rows(json!([{"id": format!("ee{i}"), "src": "p1", "dst": "c0"}])),
            )
            .await
            .unwrap()
    });
    warm!("writers.update_one_row_warm", |i| {
        graph
            .update(
                "Person",
                "id = 'p2'",
                &[("age".to_string(), json!(40 + i as i64))],
            )
            .await
            .unwrap()
            .unwrap()
    });
    warm!("writers.delete_one_row_cascade_warm", |i| {
        graph
            .delete("Person", &format!("id = 'l{i}'"))
            .await
            .unwrap()
            .unwrap()
    });
    // A warm handle one commit behind: another handle moved Person after this one's
    // last write, so the write loses `n+1`, reads the head once and follows it.
    let other = omnigraph_graph::Omnigraph::open(&graph.graph().root().canonical())
        .await
        .unwrap();
    // The other handle moves Person: an insert of one person.
    let beat = |id: String| {
        let other = &other;
        async move {
            other
                .insert_json("Person", rows(json!([{"id": id, "name": "other"}])))
                .await
                .unwrap();
        }
    };
    warm!("writers.insert_one_row_after_a_lost_race", |i| {
        beat(format!("o{i}")).await;
        graph
            .insert_json(
                "Person",
                rows(json!([{"id": format!("r{i}"), "name": "r"}])),
            )
            .await
            .unwrap()
    });
    // An update staged, then beaten to `n+1` by an insert of other keys: it follows
    // the insert (the fragment it changes is untouched, no added row matches).
    warm!("writers.update_one_row_after_a_lost_race", |i| {
        let prepared = graph
            .prepare_update(
                "Person",
                "id = 'p2'",
                &[("age".to_string(), json!(60 + i as i64))],
            )
            .await
            .unwrap();
        beat(format!("u{i}")).await;
        prepared.publish(graph).await.unwrap().unwrap()
    });
    // An edge insert beaten by a load into its own table and an endpoint table it
    // checked: it checks its endpoints again on the new head and re-commits its
    // append on the edge table's new version.
    warm!("writers.edge_insert_after_a_lost_race", |i| {
        let path = jsonl(
            &format!("beaten{i}.jsonl"),
            &[
                json!({"type": "Person", "id": format!("x{i}"), "name": "x"}),
                json!({"type": "WorksAt", "id": format!("ox{i}"), "src": format!("x{i}"), "dst": "c0"}),
            ],
        );
        other.load(&path, LoadMode::Append).await.unwrap();
        graph
            .insert_json(
                "WorksAt",
                rows(json!([{"id": format!("ex{i}"), "src": "p1", "dst": "c0"}])),
            )
            .await
            .unwrap()
    });
    // A load of a node and its edge beaten by an insert into the node's table.
    warm!("writers.load_append_after_a_lost_race", |i| {
        beat(format!("y{i}")).await;
        let path = jsonl(
            &format!("raced{i}.jsonl"),
            &[
                json!({"type": "Person", "id": format!("ly{i}"), "name": "l"}),
                json!({"type": "WorksAt", "id": format!("ley{i}"), "src": format!("ly{i}"), "dst": "c0"}),
            ],
        );
        graph.load(&path, LoadMode::Append).await.unwrap()
    });
    // A cascading delete staged, then beaten by an insert of other keys: it follows.
    warm!("writers.delete_one_row_cascade_after_a_lost_race", |i| {
        let prepared = graph
            .prepare_delete("Person", &format!("id = 'ly{i}'"))
            .await
            .unwrap();
        beat(format!("z{i}")).await;
        prepared.publish(graph).await.unwrap().unwrap()
    });
    warm!("writers.build_indexes_nothing_missing", |_i| {
        graph.maintenance().build_indexes().await.unwrap()
    });
    let probe = graph.graph().root().probe();
    graph
        .apply_schema(
            "node Person { id: String @key, name: String @index(fts), age: Int32? @index }
             node Company { id: String @key, name: String, city: String? }
             edge WorksAt: Person -> Company { since: Int32? }",
            false,
        )
        .await
        .unwrap();
    costs.insert(
        "writers.schema_apply_add_property".into(),
        line(&probe.counts()),
    );
    // A point read by key on a warm handle, its plan prepared by the run before: through
    // the key's index (a handle that never reads a key's row from its key cache), and
    // from the place the key cache holds once a task brought it to the head (no task
    // runs while it is measured).
    /// The rows of a point read, whether its plan was reused and whether it read
    /// its key's row from the key cache.
    async fn read(graph: &omnigraph_graph::Omnigraph, id: &str) -> (usize, (bool, bool)) {
        let point = "MATCH (p:Person {id: $id}) RETURN p.name";
        let options = omnigraph_query::QueryOptions::new().parameter("id", json!(id));
        let rows = omnigraph_query::query(graph, point, &options)
            .await
            .unwrap();
        let reused = (rows.plan_reused(), rows.key_row_taken());
        let batches = rows.collect().await.unwrap();
        (batches.iter().map(|b| b.num_rows()).sum::<usize>(), reused)
    }
    let plain = omnigraph_graph::Omnigraph::open_root(graph.graph().root().clone())
        .await
        .unwrap()
        .without_key_rows();
    assert_eq!(Box::pin(read(&plain, "p0")).await, (1, (false, false)));
    let probe = graph.graph().root().probe();
    assert_eq!(Box::pin(read(&plain, "p1")).await, (1, (true, false)));
    costs.insert("query.point_read_warm".into(), line(&probe.counts()));
    let mut taken = false;
    for _ in 0..KEY_CACHE_FILL_RUNS_MAX {
        if Box::pin(read(graph, "p0")).await.1.1 {
            taken = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(taken, "the key cache was brought to the head");
    let probe = graph.graph().root().probe();
    assert_eq!(Box::pin(read(graph, "p1")).await, (1, (true, true)));
    costs.insert("query.point_read_key_row".into(), line(&probe.counts()));
}

fn render(costs: &BTreeMap<String, String>) -> String {
    let mut text = String::from(
        "# Exact object-store requests per operation: total [by kind].\n\
         # Checked by tests/suite/cost.rs; regenerate with OMNIGRAPH_BLESS=1.\n",
    );
    for (name, value) in costs {
        text.push_str(&format!("{name} = {value}\n"));
    }
    text
}

#[test]
fn request_counts_match_the_golden_file() {
    // Every writer in one test: see `on_a_big_stack`.
    let costs = omnigraph_tests::on_a_big_stack(measure);
    // The rules the golden encodes, asserted here too so a bless cannot hide them.
    assert_eq!(
        costs["log.head_read.depth_10"], costs["log.head_read.depth_1000"],
        "reading the head must not grow with history"
    );
    // HEAD (a seq hint) then commits s, s+1 and s+2 together: the head itself, the
    // probe, and the gap check.
    assert!(
        costs["log.head_read.depth_1000"].starts_with("4 "),
        "{costs:?}"
    );
    // From a head read before: commits s, s+1 and s+2 together, without HEAD.
    assert!(
        costs["log.head_read_near.depth_1000"].starts_with("3 "),
        "{costs:?}"
    );
    assert_eq!(
        costs["publish.empty_commit.depth_10"], costs["publish.empty_commit.depth_1000"],
        "a publication costs the same at any depth"
    );
    let insert: u64 = costs["writers.insert_one_row_warm"]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        insert <= 8,
        "a single-row insert on a warm handle costs {insert} requests (limit 8)"
    );
    let rendered = render(&costs);
    if std::env::var("OMNIGRAPH_BLESS").as_deref() == Ok("1") && std::env::var_os("CI").is_none() {
        std::fs::write(GOLDEN, &rendered).unwrap();
        return;
    }
    let golden = std::fs::read_to_string(GOLDEN).unwrap_or_default();
    assert_eq!(
        rendered, golden,
        "request counts changed; review and regenerate with OMNIGRAPH_BLESS=1"
    );
}
