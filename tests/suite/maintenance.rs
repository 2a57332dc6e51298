//! The maintenance failure model on real Lance tables: the lane, run evidence, typed
//! unit outcomes, cancellation, the budget, fold fixes and storage that refuses writes.

use omnigraph_core::storage::{FaultAction, FaultHandle, FaultRule, RequestKind, StorageRoot};
use omnigraph_core::{ErrorKind, Evidence, StorageKind};
use omnigraph_graph::Omnigraph;
use omnigraph_maintenance::{
    Maintenance, MaintenanceBudget, MaintenanceExt, MaintenanceProgress, ProgressItems,
    ProgressStage, UnitOutcome,
};
use omnigraph_publish::{CommitRef, GraphCommit};
use omnigraph_tests::{Backend, SOCIAL_SCHEMA, TestRoot, objects};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// A graph whose Person and Company tables each have `inserts` fragments.
async fn fragmented(backend: Backend, inserts: usize) -> (Arc<Omnigraph>, TestRoot) {
    let test = TestRoot::new(backend).await;
    let graph = Omnigraph::create(&test.uri, SOCIAL_SCHEMA).await.unwrap();
    for index in 0..inserts {
        graph
            .insert_json(
                "Person",
                objects(json!([{"id": format!("p{index}"), "name": "n", "age": index}])),
            )
            .await
            .unwrap();
        graph
            .insert_json(
                "Company",
                objects(json!([{"id": format!("c{index}"), "name": "c"}])),
            )
            .await
            .unwrap();
    }
    (Arc::new(graph), test)
}

fn table_of(head: &GraphCommit, type_name: &str) -> String {
    head.pin_of_type(type_name).unwrap().table_id.clone()
}

/// Holds every write under `tables/<table>/<folder>/` for `delay`.
fn slow_writes(root: &StorageRoot, table: &str, folder: &str, delay: Duration) -> FaultHandle {
    root.inject(FaultRule::new(
        format!("tables/{table}/{folder}/*"),
        &[RequestKind::Put, RequestKind::PutIfAbsent],
        FaultAction::Delay(delay),
    ))
}

/// An optimize run on `graph`, in a task of its own.
fn spawn_optimize(
    graph: &Arc<Omnigraph>,
) -> tokio::task::JoinHandle<omnigraph_core::Result<omnigraph_maintenance::OptimizeReport>> {
    let graph = graph.clone();
    tokio::spawn(async move { graph.maintenance().optimize().await })
}

/// An optimize run on `graph` that holds the root's lane, every write under
/// `tables/<table>/<folder>/` held for `delay` until the fault is dropped.
async fn optimize_holding_the_lane(
    graph: &Arc<Omnigraph>,
    table: &str,
    folder: &str,
    delay: Duration,
) -> (
    FaultHandle,
    tokio::task::JoinHandle<omnigraph_core::Result<omnigraph_maintenance::OptimizeReport>>,
) {
    let slow = slow_writes(graph.graph().root(), table, folder, delay);
    let run = spawn_optimize(graph);
    until_running(graph).await;
    (slow, run)
}

/// A rebuild of Person's full-text index on `graph`, in a task of its own.
fn spawn_rebuild(
    graph: &Arc<Omnigraph>,
) -> tokio::task::JoinHandle<omnigraph_core::Result<omnigraph_maintenance::IndexBuildReport>> {
    let graph = graph.clone();
    tokio::spawn(async move {
        graph
            .maintenance()
            .rebuild_index("Person", "name_fts")
            .await
    })
}

/// Waits until some handle's run holds the root's lane.
async fn until_running(graph: &Omnigraph) {
    for _ in 0..200 {
        if graph.maintenance_in_progress().is_some() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no maintenance run started");
}

#[tokio::test]
async fn one_lane_per_root_shared_by_handles_in_arrival_order() {
    let (graph, test) = fragmented(Backend::Memory, 4).await;
    let person = table_of(&graph.head().await.unwrap(), "Person");
    let (_slow, first) =
        optimize_holding_the_lane(&graph, &person, "data", Duration::from_millis(600)).await;
    // Another handle on the same root sees the run and waits behind it.
    let other = Arc::new(Omnigraph::open(&test.uri).await.unwrap());
    let activity = other
        .maintenance_in_progress()
        .expect("visible from any handle");
    assert_eq!(activity.operation, "optimize");
    let second = {
        let other = other.clone();
        tokio::spawn(async move { other.maintenance().build_indexes().await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!first.is_finished());
    assert!(!second.is_finished(), "the second run waits for the lane");
    let report = first.await.unwrap().unwrap();
    assert!(report.table("Person").unwrap().published());
    second.await.unwrap().unwrap();
    assert!(other.maintenance_in_progress().is_none());
}

#[tokio::test]
async fn a_cancel_while_staging_stops_the_run_and_publishes_nothing() {
    let (graph, _test) = fragmented(Backend::Memory, 4).await;
    let before = graph.head().await.unwrap();
    let person = table_of(&before, "Person");
    let (slow, run) =
        optimize_holding_the_lane(&graph, &person, "data", Duration::from_secs(2)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    graph.cancel_maintenance();
    let error = run.await.unwrap().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::MaintenanceCancelled, "{error}");
    assert_eq!(error.code().exit_code, 75);
    assert_eq!(error.code().http_status, 503);
    assert_ne!(error.evidence(), &Evidence::InDoubt);
    assert!(
        !matches!(error.evidence(), Evidence::PartlyPublished { .. }),
        "{error:?}"
    );
    drop(slow);
    assert_eq!(graph.head().await.unwrap(), before, "nothing published");
    // A later run is not cancelled, and publishes.
    let report = graph.maintenance().optimize().await.unwrap();
    assert!(report.table("Person").unwrap().published());
}

#[tokio::test]
async fn a_cancel_after_a_tables_first_link_is_unpublished() {
    let (graph, _test) = fragmented(Backend::Memory, 4).await;
    graph.maintenance().build_indexes().await.unwrap();
    for index in 10..14 {
        graph
            .insert_json(
                "Person",
                objects(json!([{"id": format!("p{index}"), "name": "n", "age": index}])),
            )
            .await
            .unwrap();
    }
    let before = graph.head().await.unwrap();
    let person = table_of(&before, "Person");
    // The compaction link lands; the fold's index files are slow.
    let (slow, run) =
        optimize_holding_the_lane(&graph, &person, "_indices", Duration::from_secs(2)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    graph.cancel_maintenance();
    let error = run.await.unwrap().unwrap_err();
    drop(slow);
    assert_eq!(error.kind(), ErrorKind::MaintenanceCancelled, "{error}");
    assert_eq!(error.evidence(), &Evidence::Unpublished, "{error:?}");
    let head = graph.head().await.unwrap();
    assert_eq!(head, before, "head and every pin unchanged");
}

/// An index rebuild takes the root's lane like every maintenance run: it waits for the
/// run holding it, and a cancel drops its build where it stands. (It ran outside the
/// lane, beside optimize, and no cancel reached it.)
#[tokio::test]
async fn an_index_rebuild_waits_in_the_lane_and_a_cancel_drops_it() {
    let (graph, _test) = fragmented(Backend::Memory, 4).await;
    graph.maintenance().build_indexes().await.unwrap();
    let before = graph.head().await.unwrap();
    let person = table_of(&before, "Person");
    // An optimize holds the lane, slowed down at its index files.
    let (slow, optimizing) =
        optimize_holding_the_lane(&graph, &person, "_indices", Duration::from_millis(300)).await;
    let rebuilding = spawn_rebuild(&graph);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        graph.maintenance_in_progress().unwrap().operation,
        "optimize",
        "the rebuild waits its turn"
    );
    optimizing.await.unwrap().unwrap();
    let rebuilt = rebuilding.await.unwrap().unwrap();
    let commit = rebuilt.commit.unwrap();
    assert_eq!(commit.operation.kind, "rebuild_index");
    assert!(commit.seq > before.seq + 1, "after optimize's commits");
    // A cancel while it builds: nothing published, the build's files unreachable.
    let head = graph.head().await.unwrap();
    let rebuilding = spawn_rebuild(&graph);
    until_running(&graph).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    graph.cancel_maintenance();
    let error = rebuilding.await.unwrap().unwrap_err();
    drop(slow);
    assert_eq!(error.kind(), ErrorKind::MaintenanceCancelled, "{error}");
    assert_eq!(error.evidence(), &Evidence::Unpublished, "{error:?}");
    assert_eq!(graph.head().await.unwrap(), head);
}

#[tokio::test]
async fn a_cancel_ends_waiting_runs_but_never_a_later_one() {
    let (graph, _test) = fragmented(Backend::Memory, 3).await;
    let person = table_of(&graph.head().await.unwrap(), "Person");
    let (slow, holder) =
        optimize_holding_the_lane(&graph, &person, "data", Duration::from_secs(2)).await;
    let waiter = {
        let graph = graph.clone();
        tokio::spawn(async move { graph.maintenance().build_indexes().await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    graph.cancel_maintenance();
    for run in [
        holder.await.unwrap().map(|_| ()),
        waiter.await.unwrap().map(|_| ()),
    ] {
        let error = run.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::MaintenanceCancelled, "{error}");
    }
    drop(slow);
    graph.maintenance().optimize().await.unwrap();
}

#[tokio::test]
async fn a_cancel_after_a_unit_published_is_partly_published() {
    let (graph, _test) = fragmented(Backend::Memory, 4).await;
    let before = graph.head().await.unwrap();
    let company = table_of(&before, "Company");
    // Person (first in schema order) publishes; Company's staging is slow.
    let slow = slow_writes(
        graph.graph().root(),
        &company,
        "data",
        Duration::from_secs(2),
    );
    let run = spawn_optimize(&graph);
    let mut published = false;
    for _ in 0..300 {
        if graph.head().await.unwrap().seq > before.seq {
            published = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(published, "Person's unit published");
    graph.cancel_maintenance();
    let error = run.await.unwrap().unwrap_err();
    drop(slow);
    assert_eq!(error.kind(), ErrorKind::MaintenanceCancelled);
    assert_eq!(
        error.evidence(),
        &Evidence::PartlyPublished {
            published_units: vec!["Person".into()]
        }
    );
    let head = graph.head().await.unwrap();
    assert_eq!(head.seq, before.seq + 1);
    assert_eq!(head.pin_of_type("Company"), before.pin_of_type("Company"));
}

#[tokio::test]
async fn storage_that_refuses_writes_fails_one_unit_and_the_next_run_publishes() {
    let (graph, _test) = fragmented(Backend::Local, 4).await;
    let before = graph.head().await.unwrap();
    let company = table_of(&before, "Company");
    {
        // Company's data folder refuses writes (permission denied).
        let _read_only = graph.graph().root().inject(FaultRule::new(
            format!("tables/{company}/data/*"),
            &[RequestKind::Put, RequestKind::PutIfAbsent],
            FaultAction::FailBefore(StorageKind::Configuration),
        ));
        let report = graph.maintenance().optimize().await.unwrap();
        let person = report.table("Person").unwrap();
        assert!(
            person.published(),
            "the unit before the failure: {person:?}"
        );
        match &report.table("Company").unwrap().outcome {
            UnitOutcome::Failed { code, evidence, .. } => {
                // Lance's upload path keeps only the text of the store's refusal, so
                // it is classified unknown, never transient.
                assert!(
                    code.starts_with("storage_") && code != "storage_transient",
                    "{code}"
                );
                assert_eq!(evidence, &Evidence::Unpublished);
            }
            other => panic!("expected a failed unit, got {other:?}"),
        }
        assert_eq!(report.exit_code(), 1);
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["tables"][1]["outcome"], "failed");
        assert_eq!(json["tables"][0]["outcome"], "published");
        let head = graph.head().await.unwrap();
        assert_eq!(head.pin_of_type("Company"), before.pin_of_type("Company"));
    }
    let report = graph.maintenance().optimize().await.unwrap();
    assert!(report.table("Company").unwrap().published(), "{report:?}");
    assert_eq!(report.exit_code(), 0);
}

#[tokio::test]
async fn an_index_build_on_a_read_only_indices_folder_is_unpublished_then_lands() {
    let (graph, _test) = fragmented(Backend::Local, 2).await;
    let before = graph.head().await.unwrap();
    {
        let _read_only = graph.graph().root().inject(FaultRule::new(
            "tables/*/_indices/*",
            &[RequestKind::Put, RequestKind::PutIfAbsent],
            FaultAction::FailBefore(StorageKind::Configuration),
        ));
        let error = graph.maintenance().build_indexes().await.unwrap_err();
        assert!(
            matches!(
                error.kind(),
                ErrorKind::Storage(StorageKind::Configuration | StorageKind::Unknown)
            ),
            "{error}"
        );
        assert_eq!(error.evidence(), &Evidence::Unpublished);
        assert_eq!(graph.head().await.unwrap(), before);
    }
    let report = graph.maintenance().build_indexes().await.unwrap();
    assert!(report.commit.is_some());
}

#[tokio::test]
async fn two_units_at_once_reach_the_same_result() {
    for units in [1, 2] {
        let (graph, _test) = fragmented(Backend::Memory, 5).await;
        let budget = MaintenanceBudget::default().with_unit_concurrency(units);
        let report = Maintenance::of(&*graph)
            .with_maintenance_budget(budget)
            .optimize()
            .await
            .unwrap();
        let outcomes: Vec<_> = report
            .tables
            .iter()
            .map(|table| {
                (
                    table.type_key.clone(),
                    table.published(),
                    table.fragments_after,
                )
            })
            .collect();
        assert_eq!(
            outcomes,
            vec![
                ("Person".to_string(), true, 1),
                ("Company".to_string(), true, 1),
                ("WorksAt".to_string(), false, 0),
            ],
            "{units} units at once"
        );
        let head = graph.head().await.unwrap();
        let people = graph
            .scan("Person", &Default::default(), &CommitRef::Head)
            .await
            .unwrap();
        assert_eq!(people.iter().map(|b| b.num_rows()).sum::<usize>(), 5);
        assert_eq!(head.pin_of_type("Company").unwrap().row_count, 5);
    }
}

const MIXED_SCHEMA: &str = "
node Person { id: String @key, age: Int32? @index, embedding: Vector(4)? @index(vector) }
";

fn vector_rows(
    start: usize,
    count: usize,
    with_vectors: bool,
) -> Vec<serde_json::Map<String, serde_json::Value>> {
    let rows: Vec<serde_json::Value> = (start..start + count)
        .map(|index| {
            let embedding = if with_vectors {
                json!([index as f32, (index % 7) as f32, (index % 3) as f32, 1.0])
            } else {
                serde_json::Value::Null
            };
            json!({"id": format!("v{index}"), "age": index as i32, "embedding": embedding})
        })
        .collect();
    objects(serde_json::Value::Array(rows))
}

#[tokio::test]
async fn a_fold_judges_lag_on_the_tip_and_trainability_like_a_first_build() {
    let test = TestRoot::new(Backend::Memory).await;
    let graph = Omnigraph::create(&test.uri, MIXED_SCHEMA).await.unwrap();
    for batch in 0..6 {
        graph
            .insert_json("Person", vector_rows(batch * 60, 60, true))
            .await
            .unwrap();
    }
    let built = graph.maintenance().build_indexes().await.unwrap();
    assert!(
        built
            .built
            .iter()
            .any(|(_, index)| index == "embedding_vector"),
        "{built:?}"
    );
    // Every fragment is covered; compaction rewrites them all. The vector index
    // (row-id domain) is carried across the rewrite; the BTree (addresses) is not.
    let report = graph.maintenance().optimize().await.unwrap();
    let person = report.table("Person").unwrap();
    assert!(person.published(), "{person:?}");
    assert!(
        person.indexes_folded.contains(&"age_btree".to_string()),
        "{person:?}"
    );
    assert!(
        !person
            .indexes_folded
            .contains(&"embedding_vector".to_string()),
        "only indexes that lag at the tip are rebuilt: {person:?}"
    );

    // Most vectors go; new rows without vectors arrive in new fragments. The vector
    // index lags and can no longer train: it waits, and the run goes on.
    graph.delete("Person", "age >= 100").await.unwrap();
    for batch in 0..3 {
        graph
            .insert_json("Person", vector_rows(1_000 + batch * 10, 10, false))
            .await
            .unwrap();
    }
    let report = graph.maintenance().optimize().await.unwrap();
    let person = report.table("Person").unwrap();
    assert!(person.published(), "{person:?}");
    assert!(
        person.indexes_folded.contains(&"age_btree".to_string()),
        "{person:?}"
    );
    let pending = person
        .pending_indexes
        .iter()
        .find(|pending| pending.index == "embedding_vector")
        .expect("the vector index is pending");
    assert!(
        pending.reason.contains("100 non-null vectors"),
        "{pending:?}"
    );
    assert_eq!(report.exit_code(), 0);
}

#[tokio::test]
async fn heavy_work_runs_on_the_maintenance_runtime_and_the_caller_still_sees_it() {
    let (graph, _test) = fragmented(Backend::Memory, 4).await;
    graph.maintenance().build_indexes().await.unwrap();
    graph
        .insert_json("Person", objects(json!([{"id": "late", "name": "n"}])))
        .await
        .unwrap();
    let probe = graph.graph().root().probe();
    let report = graph.maintenance().optimize().await.unwrap();
    assert!(report.table("Person").unwrap().published());
    let heavy: Vec<_> = probe
        .requests()
        .into_iter()
        .filter(|request| {
            request.path.starts_with("tables/")
                && (request.path.contains("/data/") || request.path.contains("/_indices/"))
                && matches!(request.kind, RequestKind::Put | RequestKind::PutIfAbsent)
        })
        .collect();
    assert!(!heavy.is_empty(), "the caller's probe counts the work");
    for request in &heavy {
        assert_eq!(
            request.thread.as_deref(),
            Some(omnigraph_maintenance::runtime::MAINTENANCE_THREAD_NAME),
            "{request:?}"
        );
    }
    // A data writer's files are written on the caller's runtime.
    probe.reset();
    graph
        .insert_json("Person", objects(json!([{"id": "later", "name": "n"}])))
        .await
        .unwrap();
    assert!(
        probe
            .requests()
            .iter()
            .all(|request| request.thread.as_deref()
                != Some(omnigraph_maintenance::runtime::MAINTENANCE_THREAD_NAME))
    );

    // The caller's failpoint scope follows the work to the maintenance runtime.
    for index in 0..3 {
        graph
            .insert_json(
                "Person",
                objects(json!([{"id": format!("more{index}"), "name": "n"}])),
            )
            .await
            .unwrap();
    }
    let before = graph.head().await.unwrap();
    let armed = omnigraph_core::failpoints::arm(
        omnigraph_core::failpoints::STAGE_BEFORE_MANIFEST,
        "return",
    );
    let report = armed.run(graph.maintenance().optimize()).await.unwrap();
    drop(armed);
    assert!(
        matches!(
            report.table("Person").unwrap().outcome,
            UnitOutcome::Failed { .. }
        ),
        "{report:?}"
    );
    assert_eq!(graph.head().await.unwrap(), before);
}

#[tokio::test]
async fn dropping_the_callers_future_aborts_the_maintenance_work() {
    let (graph, _test) = fragmented(Backend::Memory, 4).await;
    let before = graph.head().await.unwrap();
    let person = table_of(&before, "Person");
    let _slow = slow_writes(
        graph.graph().root(),
        &person,
        "data",
        Duration::from_secs(1),
    );
    let probe = graph.graph().root().probe();
    let dropped =
        tokio::time::timeout(Duration::from_millis(300), graph.maintenance().optimize()).await;
    assert!(dropped.is_err(), "the run was still staging");
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let manifests = probe
        .requests()
        .into_iter()
        .filter(|request| {
            request.path.contains("/_versions/")
                && matches!(request.kind, RequestKind::Put | RequestKind::PutIfAbsent)
        })
        .count();
    assert_eq!(manifests, 0, "no link was committed after the drop");
    assert_eq!(graph.head().await.unwrap(), before);
    assert!(
        graph.maintenance_in_progress().is_none(),
        "the lane is free"
    );
}

#[test]
fn every_budget_knob_reaches_lance() {
    let budget = MaintenanceBudget::default();
    // What stage_compaction hands Lance's planner and every task.
    let options = omnigraph_core::adapter::compaction_options(&budget.compaction);
    assert_eq!(options.io_buffer_size, Some(64 << 20));
    assert_eq!(options.batch_size, Some(8_192));
    assert_eq!(options.num_threads, Some(1));
    assert_eq!(options.target_rows_per_fragment, 1_048_576);
    let smaller = MaintenanceBudget {
        compaction: omnigraph_core::adapter::CompactionBudget {
            io_buffer_bytes: 8 << 20,
            batch_rows: 1_024,
            target_rows_per_fragment: 4_096,
        },
        ..budget
    };
    let options = omnigraph_core::adapter::compaction_options(&smaller.compaction);
    assert_eq!(
        (
            options.io_buffer_size,
            options.batch_size,
            options.target_rows_per_fragment
        ),
        (Some(8 << 20), Some(1_024), 4_096)
    );
    // What stage_index hands Lance for a full-text build. Lance keeps these fields to
    // itself (and out of its serialised form); its Debug view shows them.
    let params = format!(
        "{:?}",
        omnigraph_core::adapter::full_text_params(&budget.full_text)
    );
    assert!(params.contains("memory_limit_mb: Some(512)"), "{params}");
    assert!(params.contains("num_workers: Some(2)"), "{params}");
    let params = format!(
        "{:?}",
        omnigraph_core::adapter::full_text_params(&omnigraph_core::adapter::FullTextBudget {
            memory_mib: 128,
            workers: 1,
        })
    );
    assert!(params.contains("memory_limit_mb: Some(128)"), "{params}");
    assert!(params.contains("num_workers: Some(1)"), "{params}");
}

/// A sink that keeps every progress report of a run.
fn recorder() -> (
    omnigraph_maintenance::ProgressSink,
    Arc<std::sync::Mutex<Vec<MaintenanceProgress>>>,
) {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = seen.clone();
    let sink: omnigraph_maintenance::ProgressSink =
        Arc::new(move |progress: &MaintenanceProgress| kept.lock().unwrap().push(progress.clone()));
    (sink, seen)
}

/// The reports of `stage`, checked to move only forward, and the last of them.
fn last_of(reports: &[MaintenanceProgress], stage: ProgressStage) -> MaintenanceProgress {
    let staged: Vec<&MaintenanceProgress> = reports
        .iter()
        .filter(|report| report.stage == stage)
        .collect();
    for pair in staged.windows(2) {
        assert!(
            pair[1].done >= pair[0].done && pair[1].tables_done >= pair[0].tables_done,
            "progress went back: {pair:?}"
        );
    }
    for report in &staged {
        assert!(report.is_consistent(), "{report:?}");
    }
    (*staged.last().expect("the stage reported")).clone()
}

#[tokio::test]
async fn index_builds_optimize_and_cleanup_report_progress_up_to_their_totals() {
    let (graph, _test) = fragmented(Backend::Local, 3).await;

    let (sink, seen) = recorder();
    let built = graph
        .maintenance()
        .with_progress(sink)
        .build_indexes()
        .await
        .unwrap();
    let last = last_of(&seen.lock().unwrap(), ProgressStage::Working);
    assert_eq!(last.operation, "build_indexes");
    assert_eq!(last.items, ProgressItems::Indexes);
    let judged = (built.built.len() + built.pending_indexes.len()) as u64;
    assert!(judged > 0);
    assert_eq!((last.done, last.total), (judged, judged));
    assert_eq!(last.tables_done, last.tables_total);

    let rows: u64 = graph
        .head()
        .await
        .unwrap()
        .pins
        .iter()
        .map(|pin| pin.row_count)
        .sum();
    let (sink, seen) = recorder();
    let report = graph
        .maintenance()
        .with_progress(sink)
        .optimize()
        .await
        .unwrap();
    let reports = seen.lock().unwrap().clone();
    assert_eq!(
        (reports[0].done, reports[0].tables_done),
        (0, 0),
        "{:?}",
        reports[0]
    );
    let last = last_of(&reports, ProgressStage::Working);
    assert_eq!(
        (last.operation, last.items),
        ("optimize", ProgressItems::Rows)
    );
    assert_eq!((last.done, last.total), (rows, rows));
    assert_eq!(last.tables_total, report.tables.len() as u64);
    assert_eq!(last.tables_done, last.tables_total);

    let (sink, seen) = recorder();
    let cleaned = omnigraph_tests::later_by(
        Duration::from_secs(120),
        graph
            .maintenance()
            .with_progress(sink)
            .cleanup(&omnigraph_tests::keep_with_minimum_grace(1)),
    )
    .await
    .unwrap();
    let reports = seen.lock().unwrap().clone();
    let planned = last_of(&reports, ProgressStage::Planning);
    assert_eq!(planned.items, ProgressItems::Tables);
    assert_eq!(planned.tables_total, cleaned.tables.len() as u64);
    assert_eq!(
        (planned.done, planned.tables_done),
        (planned.total, planned.tables_total)
    );
    let deleted = last_of(&reports, ProgressStage::Working);
    let removed = cleaned.totals.manifests_removed + cleaned.totals.files_removed;
    assert!(removed > 0);
    assert_eq!(deleted.items, ProgressItems::Files);
    assert_eq!((deleted.done, deleted.total), (removed, removed));
    assert_eq!(deleted.tables_done, deleted.tables_total);
}

/// A run with a budget other than the default honours it: it stages at most its unit
/// concurrency of tables at once (counted), and every compaction and full-text build
/// hands Lance the budget's buffer, scan batch, fragment size, memory and workers
/// (observed where the adapter calls Lance), with the outcome a fragment size shows.
#[tokio::test]
async fn a_run_honours_a_budget_other_than_the_default() {
    use omnigraph_core::adapter::observed::{
        CompactionSeen, FullTextSeen, compactions_of, full_text_builds_of,
    };
    let budget = MaintenanceBudget {
        unit_concurrency: 2,
        compaction: omnigraph_core::adapter::CompactionBudget {
            io_buffer_bytes: 3 << 20,
            batch_rows: 100,
            target_rows_per_fragment: 4,
        },
        full_text: omnigraph_core::adapter::FullTextBudget {
            memory_mib: 48,
            workers: 1,
        },
    };
    for units in [2, 1] {
        let budget = budget.with_unit_concurrency(units);
        let (graph, _test) = fragmented(Backend::Local, 10).await;
        let head = graph.head().await.unwrap();
        let person = head.pin_of_type("Person").unwrap().path.clone();
        let company = head.pin_of_type("Company").unwrap().path.clone();
        let report = graph
            .maintenance()
            .with_maintenance_budget(budget)
            .optimize()
            .await
            .unwrap();
        assert!(report.table("Person").unwrap().published());
        assert!(report.table("Company").unwrap().published());
        // Both tables had work: the run staged as many at once as it may, no more.
        assert_eq!(report.units_at_once_max, units, "{units} at once");
        let expected = CompactionSeen {
            io_buffer_bytes: 3 << 20,
            batch_rows: 100,
            target_rows_per_fragment: 4,
        };
        for table in [&person, &company] {
            let seen = compactions_of(table);
            assert!(!seen.is_empty(), "{table} was compacted");
            assert!(seen.iter().all(|seen| *seen == expected), "{seen:?}");
        }
        // The declared full-text index was built by the run, within its budget.
        assert_eq!(
            full_text_builds_of(&person),
            vec![FullTextSeen {
                memory_mib: 48,
                workers: 1
            }]
        );
        // What the fragment size did: Lance bins fragments up to 4 rows, so the ten
        // one-row fragments become a few (the default's million-row target makes one).
        let table = omnigraph_tests::head_table(&graph, "Person").await;
        let fragments = table.manifest().fragments.len();
        assert!((2..10).contains(&fragments), "{fragments} fragments");
    }
}
