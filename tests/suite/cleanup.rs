//! Cleanup as a tracing collector and the repair report, on real Lance tables: what is
//! reclaimed and when, what is never touched, how a run fails, and writers and cleanup
//! in separate processes.
//!
//! Time: a run "after the grace period" executes inside a simulation whose clock starts
//! minutes ahead of the wall clock, so the files and commits written just before are
//! old to it. Nothing else runs in that window, which is what makes that shortcut safe
//! here; the multi-process test instead speeds up every process's clock alike.

use futures::TryStreamExt;
use omnigraph_core::seams;
use omnigraph_core::storage::{FaultAction, FaultRule, RequestKind, RequestProbe, StorageRoot};
use omnigraph_core::{ErrorKind, Evidence, StorageKind, adapter, failpoints};
use omnigraph_graph::{Omnigraph, ScanRequest};
use omnigraph_maintenance::repair::TableRepairStatus;
use omnigraph_maintenance::{CleanupOptions, CleanupPolicy, CleanupReport, MaintenanceExt};
use omnigraph_publish::commit::Retention;
use omnigraph_publish::limits::GRACE_MIN;
use omnigraph_publish::retention;
use omnigraph_publish::{
    Change, CommitOperation, CommitRef, GraphCommit, Publication, ReadSet, publish,
};
use omnigraph_tests::{Backend, SOCIAL_SCHEMA, TestRoot, ids_at, objects, people};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::time::Duration;

fn keep(n: u64) -> CleanupOptions {
    omnigraph_tests::keep_with_minimum_grace(n)
}

/// Runs `future` on a clock `minutes` ahead of the wall clock.
async fn minutes_later<F: std::future::Future>(minutes: u64, future: F) -> F::Output {
    omnigraph_tests::later_by(Duration::from_secs(60 * minutes), future).await
}

/// Waits until `probe` saw a `kind` request, to exactly `path` when one is given.
async fn until_requested(probe: &RequestProbe, kind: RequestKind, path: Option<&str>) {
    const ROUNDS_MAX: usize = 4_000;
    for _ in 0..ROUNDS_MAX {
        let seen = probe
            .requests()
            .iter()
            .any(|request| request.kind == kind && path.is_none_or(|path| request.path == path));
        if seen {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("no {kind:?} request to {path:?} in {ROUNDS_MAX} rounds");
}

async fn cleanup_later(graph: &Omnigraph, options: CleanupOptions) -> CleanupReport {
    minutes_later(2, graph.maintenance().cleanup(&options))
        .await
        .unwrap()
}

async fn tables_bytes(root: &StorageRoot) -> u64 {
    root.list_with_meta("tables")
        .await
        .unwrap()
        .iter()
        .map(|object| object.size)
        .sum()
}

async fn objects_under(root: &StorageRoot, prefix: &str) -> HashSet<String> {
    root.list(prefix).await.unwrap().into_iter().collect()
}

async fn detached_manifests(root: &StorageRoot, table_id: &str) -> HashSet<String> {
    objects_under(root, &format!("tables/{table_id}/_versions"))
        .await
        .into_iter()
        .filter(|path| path.contains("/d"))
        .collect()
}

/// The detached manifests of a table that are not among `before`.
async fn staged_since(
    root: &StorageRoot,
    table_id: &str,
    before: &HashSet<String>,
) -> HashSet<String> {
    detached_manifests(root, table_id)
        .await
        .difference(before)
        .cloned()
        .collect()
}

fn table_of(head: &GraphCommit, type_name: &str) -> String {
    head.pin_of_type(type_name).unwrap().table_id.clone()
}

/// A graph with a few commits of inserts, updates and a delete on Person and Company.
async fn busy_graph(backend: Backend) -> (Omnigraph, TestRoot) {
    let test = TestRoot::new(backend).await;
    let graph = Omnigraph::create(&test.uri, SOCIAL_SCHEMA).await.unwrap();
    for index in 0..4 {
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
    graph
        .update("Person", "id = 'p1'", &[("name".into(), json!("renamed"))])
        .await
        .unwrap();
    graph.delete("Company", "id = 'c0'").await.unwrap();
    (graph, test)
}

#[tokio::test]
async fn cleanup_reclaims_what_no_retained_commit_needs_and_keeps_the_rest_readable() {
    for backend in omnigraph_tests::BACKENDS {
        let (graph, test) = busy_graph(backend).await;
        let head = graph.head().await.unwrap();
        let before = tables_bytes(&test.root).await;
        let people = ids_at(&graph, "Person", &CommitRef::Head).await;
        let companies = ids_at(&graph, "Company", &CommitRef::Head).await;
        let previous = ids_at(&graph, "Company", &CommitRef::Seq(head.seq - 1)).await;

        let report = cleanup_later(&graph, keep(2)).await;
        assert!(report.deleted);
        assert_eq!(report.oldest_retained["main"], head.seq - 1);
        assert!(report.totals.manifests_removed > 0, "{report:?}");
        assert!(report.totals.bytes_removed > 0);
        assert_eq!(report.totals.tables_failed, 0);
        assert_eq!(report.recorded, vec!["retention:main".to_string()]);
        assert_eq!(
            report.evidence,
            Evidence::PartlyPublished {
                published_units: vec!["retention:main".into()]
            }
        );
        // The record is a commit on the head: the same pins, and what it retains.
        let record = graph.head().await.unwrap();
        assert_eq!(record.seq, head.seq + 1);
        assert_eq!(record.pins, head.pins);
        assert_eq!(record.operation.kind, retention::RECORD_OPERATION);
        let recorded = record.retention.unwrap();
        assert_eq!(recorded.oldest_retained, head.seq - 1);
        assert_eq!(recorded.grace(), GRACE_MIN);
        let after = tables_bytes(&test.root).await;
        assert_eq!(
            before - after,
            report.totals.bytes_removed,
            "{backend:?}: the report counts exactly the bytes that went"
        );

        // The retained commits read every row; a reclaimed one is a typed error.
        assert_eq!(ids_at(&graph, "Person", &CommitRef::Head).await, people);
        assert_eq!(ids_at(&graph, "Company", &CommitRef::Head).await, companies);
        assert_eq!(
            ids_at(&graph, "Company", &CommitRef::Seq(head.seq - 1)).await,
            previous
        );
        let reader = Omnigraph::open(&test.uri).await.unwrap();
        let error = reader
            .scan("Person", &ScanRequest::default(), &CommitRef::Seq(1))
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::CommitReclaimed, "{error}");
        assert_eq!(error.code().http_status, 410);
        assert!(
            error.to_string().contains("reclaimed by cleanup"),
            "{error}"
        );
        // History is still listed: the reclaimed commits' from the history cleanup
        // wrote before it deleted their objects.
        let log = graph
            .graph()
            .log("main")
            .unwrap()
            .entries(100, None)
            .await
            .unwrap();
        assert_eq!(log.len() as u64, record.seq + 1);
        let floor = report.logs[0].floor;
        assert!(floor > 0, "{report:?}");
        assert!(
            log.iter()
                .all(|entry| entry.reclaimed == (entry.seq < floor))
        );
        let objects = objects_under(&test.root, "_graph/branches/main/commits").await;
        assert_eq!(
            objects.len() as u64,
            record.seq + 1 - floor + 1,
            "the commits from the floor, and genesis: {objects:?}"
        );

        // A second run finds nothing and records nothing (its own record does not count
        // as one of the commits kept); repair finds nothing wrong.
        let again = cleanup_later(&graph, keep(2)).await;
        assert_eq!(
            again.totals.manifests_removed + again.totals.files_removed,
            0
        );
        assert_eq!(again.evidence, Evidence::BeforeEffect);
        assert!(again.recorded.is_empty());
        assert_eq!(graph.head().await.unwrap().seq, record.seq);
        let repair = graph.maintenance().repair_report().await.unwrap();
        assert_eq!(repair.exit_code(), 0, "{repair:?}");
        assert!(
            repair
                .tables
                .iter()
                .all(|table| table.status == TableRepairStatus::NoDrift)
        );
    }
}

#[tokio::test]
async fn within_the_grace_period_nothing_is_deleted_and_a_preview_never_deletes() {
    let (graph, test) = busy_graph(Backend::Local).await;
    let before = objects_under(&test.root, "tables").await;
    // Real time: every commit and file is younger than the grace period.
    let report = graph.maintenance().cleanup(&keep(1)).await.unwrap();
    assert_eq!(
        report.totals.manifests_removed + report.totals.files_removed,
        0
    );
    assert_eq!(objects_under(&test.root, "tables").await, before);
    assert_eq!(
        report.oldest_retained["main"], 0,
        "young commits are retained"
    );
    assert_eq!(
        ids_at(&graph, "Person", &CommitRef::Seq(1)).await,
        vec!["p0"]
    );

    // A preview after the grace period says what would go, and deletes nothing.
    let preview = minutes_later(2, graph.maintenance().preview_cleanup(&keep(1)))
        .await
        .unwrap();
    assert!(!preview.deleted);
    assert!(preview.totals.manifests_removed > 0);
    assert_eq!(preview.evidence, Evidence::BeforeEffect);
    assert_eq!(objects_under(&test.root, "tables").await, before);
    let ran = cleanup_later(&graph, keep(1)).await;
    assert_eq!(
        ran.totals.manifests_removed,
        preview.totals.manifests_removed
    );
    assert_eq!(ran.totals.files_removed, preview.totals.files_removed);
    assert_eq!(ran.totals.bytes_removed, preview.totals.bytes_removed);
}

#[tokio::test]
async fn dead_staging_is_kept_within_the_grace_period_and_reclaimed_after_it() {
    let (graph, test) = busy_graph(Backend::Local).await;
    let head = graph.head().await.unwrap();
    let person = table_of(&head, "Person");
    let company = table_of(&head, "Company");
    let before = detached_manifests(&test.root, &person).await;

    // A failpoint after a link: staged, never published.
    let armed = failpoints::arm(failpoints::STAGE_AFTER_MANIFEST, "return");
    let failed = armed
        .run(graph.insert_json("Person", objects(json!([{"id": "x1", "name": "n"}]))))
        .await
        .unwrap_err();
    drop(armed);
    assert_eq!(failed.evidence(), &Evidence::Unpublished);
    // A lost race: two deletes of one row staged on one head; the second is refused
    // (a write is never moved over a change to the rows it changes).
    let first = graph.prepare_delete("Company", "id = 'c1'").await.unwrap();
    let second = graph.prepare_delete("Company", "id = 'c1'").await.unwrap();
    first.publish(&graph).await.unwrap();
    let lost = second.publish(&graph).await.unwrap_err();
    assert_eq!(lost.kind(), ErrorKind::ReadSetChanged, "{lost}");

    let staged = detached_manifests(&test.root, &person).await;
    let dead: HashSet<String> = staged.difference(&before).cloned().collect();
    assert!(!dead.is_empty(), "the failed insert left its staging");

    // Within the grace period they stay.
    graph.maintenance().cleanup(&keep(1)).await.unwrap();
    assert!(
        detached_manifests(&test.root, &person)
            .await
            .is_superset(&dead)
    );

    // After the grace period, dead staging goes, counted as unpublished staging: the
    // failed insert's too, though it was staged on the pin Person still has.
    let report = cleanup_later(&graph, keep(1)).await;
    let remaining = detached_manifests(&test.root, &person).await;
    assert!(remaining.is_disjoint(&dead), "{remaining:?}");
    assert!(report.table(&person).unwrap().unpublished_manifests >= 1);
    assert!(report.table(&company).unwrap().unpublished_manifests >= 1);
    assert!(report.totals.unpublished_bytes > 0);
    graph
        .insert_json("Person", objects(json!([{"id": "p4", "name": "n"}])))
        .await
        .unwrap();
    assert_eq!(
        ids_at(&graph, "Company", &CommitRef::Head).await,
        vec!["c2", "c3"]
    );
    assert_eq!(
        ids_at(&graph, "Person", &CommitRef::Head).await,
        vec!["p0", "p1", "p2", "p3", "p4"]
    );
}

#[tokio::test]
#[ignore = "a child process of a_writer_killed_mid_staging_leaves_staging_that_cleanup_reclaims, which runs it"]
async fn child_process_stalled_writer() {
    let Ok(uri) = std::env::var(CHILD_ROOT) else {
        panic!("run only as a child of the test below");
    };
    let graph = Omnigraph::open(&uri).await.unwrap();
    // Hold the writer just after its first link's manifest: the parent kills it there.
    let armed = failpoints::arm(failpoints::STAGE_AFTER_MANIFEST, "sleep(60000)");
    let _ = armed
        .run(graph.insert_json("Person", objects(json!([{"id": "killed", "name": "n"}]))))
        .await;
    panic!("the writer was meant to be killed while staging");
}

#[tokio::test]
async fn a_writer_killed_mid_staging_leaves_staging_that_cleanup_reclaims() {
    let (graph, test) = busy_graph(Backend::Local).await;
    let head = graph.head().await.unwrap();
    let person = table_of(&head, "Person");
    let before = detached_manifests(&test.root, &person).await;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "cleanup::child_process_stalled_writer",
            "--exact",
            "--ignored",
            "--test-threads=1",
        ])
        .env(CHILD_ROOT, &test.uri)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut staged = HashSet::new();
    for _ in 0..200 {
        staged = staged_since(&test.root, &person, &before).await;
        if !staged.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        !staged.is_empty(),
        "the child staged a link before it was killed"
    );
    assert_eq!(
        graph.head().await.unwrap().seq,
        head.seq,
        "nothing published"
    );

    graph.maintenance().cleanup(&keep(1)).await.unwrap();
    assert!(
        detached_manifests(&test.root, &person)
            .await
            .is_superset(&staged)
    );
    // Once Person's pin moves, the killed writer's staging can never publish.
    graph
        .insert_json("Person", objects(json!([{"id": "p4", "name": "n"}])))
        .await
        .unwrap();
    let report = cleanup_later(&graph, keep(1)).await;
    assert!(
        detached_manifests(&test.root, &person)
            .await
            .is_disjoint(&staged)
    );
    assert!(report.table(&person).unwrap().unpublished_manifests >= 1);
    assert_eq!(
        ids_at(&graph, "Person", &CommitRef::Head).await,
        vec!["p0", "p1", "p2", "p3", "p4"]
    );
}

#[tokio::test]
async fn staging_older_than_the_grace_period_goes_even_on_the_heads_pin_and_never_publishes() {
    let (graph, test) = busy_graph(Backend::Local).await;
    let head = graph.head().await.unwrap();
    let company = table_of(&head, "Company");
    let before = detached_manifests(&test.root, &company).await;
    // Staged on the head's pin, not yet published.
    let pending = graph.prepare_delete("Company", "id = 'c3'").await.unwrap();
    let staged = staged_since(&test.root, &company, &before).await;
    assert_eq!(staged.len(), 1);
    // Within the grace period it is kept, and it could publish.
    graph.maintenance().cleanup(&keep(1)).await.unwrap();
    assert!(
        detached_manifests(&test.root, &company)
            .await
            .is_superset(&staged)
    );
    // Once it is older than the grace period it is dead, though Company's pin never
    // moved: its writer, at the same age, is refused.
    let report = cleanup_later(&graph, keep(1)).await;
    assert!(
        detached_manifests(&test.root, &company)
            .await
            .is_disjoint(&staged),
        "staging older than the grace period is reclaimed"
    );
    assert!(report.table(&company).unwrap().unpublished_manifests >= 1);
    let error = minutes_later(2, pending.publish(&graph)).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::StagingExpired, "{error}");
    assert_eq!(error.evidence(), &Evidence::Unpublished);
    // The delete, made again, lands.
    graph.delete("Company", "id = 'c3'").await.unwrap().unwrap();
    assert_eq!(
        ids_at(&graph, "Company", &CommitRef::Head).await,
        vec!["c1", "c2"]
    );
}

#[tokio::test]
async fn a_stale_head_copy_never_makes_a_reclaimed_commit_readable() {
    let (graph, test) = busy_graph(Backend::Memory).await;
    let head_copy = omnigraph_publish::layout::head_path("main");
    let stale = test.root.get(&head_copy).await.unwrap().unwrap();
    cleanup_later(&graph, keep(1)).await;
    // `HEAD` lags the log, as when the record's copy was lost: the reader checks the
    // stale copy, finds Person's version at seq 1 gone, and asks the log's head.
    test.root.put(&head_copy, stale).await.unwrap();
    let reader = Omnigraph::open(&test.uri).await.unwrap();
    let error = reader
        .scan("Person", &ScanRequest::default(), &CommitRef::Seq(1))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::CommitReclaimed, "{error}");
    assert_eq!(error.evidence(), &Evidence::BeforeEffect);
}

/// A commit that changes nothing, as cleanup records: with `retention`, its record.
fn publication_on(
    base: GraphCommit,
    read_set: ReadSet,
    retention: Option<Retention>,
) -> Publication {
    let operation = CommitOperation {
        kind: retention::RECORD_OPERATION.into(),
        summary: "test".into(),
    };
    match retention {
        Some(record) => {
            assert_eq!(read_set, ReadSet::Nothing, "a record reads nothing");
            let change = Change::Retention {
                record,
                lowers_grace: false,
            };
            Publication::record(base, change, None, operation, "test")
        }
        None => {
            let requires = omnigraph_publish::Requirements::reading(read_set);
            Publication::new(
                base,
                requires,
                Change::tables(Vec::new()),
                operation,
                "test",
            )
        }
    }
}

#[tokio::test]
async fn a_strict_writer_follows_a_cleanup_record_that_took_its_slot() {
    let (graph, test) = busy_graph(Backend::Memory).await;
    let base = graph.head().await.unwrap();
    let report = cleanup_later(&graph, keep(1)).await;
    assert_eq!(report.recorded, vec!["retention:main".to_string()]);
    // A strict writer (as schema apply is) staged on the head before the record: the
    // record changed nothing it read, so it lands after it.
    let landed = publish(
        &graph.graph().root().clone(),
        &publication_on(base.clone(), ReadSet::Strict, None),
    )
    .await
    .unwrap();
    assert_eq!(landed.seq, base.seq + 2);
    assert_eq!(landed.retention, graph.head().await.unwrap().retention);
    assert!(landed.retention.is_some(), "the record is carried forward");
    drop(test);
}

#[tokio::test]
async fn two_runs_recording_the_same_never_push_a_real_commit_out() {
    let (graph, _test) = busy_graph(Backend::Memory).await;
    let data_head = graph.head().await.unwrap();
    let root = graph.graph().root().clone();
    // Two runs that traced the same head recorded the same thing, one after the other.
    let record = retention::record(GRACE_MIN, data_head.seq);
    let first = publish(
        &root,
        &publication_on(data_head.clone(), ReadSet::Nothing, Some(record)),
    )
    .await
    .unwrap();
    let second = publish(
        &root,
        &publication_on(first, ReadSet::Nothing, Some(record)),
    )
    .await
    .unwrap();
    assert_eq!(second.retention, Some(record));
    // Keeping one commit keeps the newest that changed the graph.
    let report = cleanup_later(&graph, keep(1)).await;
    assert_eq!(report.oldest_retained["main"], data_head.seq);
    assert_eq!(
        ids_at(&graph, "Person", &CommitRef::Seq(data_head.seq)).await,
        vec!["p0", "p1", "p2", "p3"]
    );
}

/// The child of the fence test: a delete that passes its staging-age check, then stalls
/// before its commit PUT; it prints its error's code.
#[tokio::test]
#[ignore = "a child process of a_writer_stalled_after_its_age_check_in_another_process_is_fenced_by_the_record, which runs it"]
async fn child_process_writer_stalled_after_its_age_check() {
    let Ok(uri) = std::env::var(CHILD_FENCED_ROOT) else {
        panic!("run only as a child of the test below");
    };
    let graph = Omnigraph::open(&uri).await.unwrap();
    let armed = failpoints::arm(failpoints::PUBLISH_BEFORE_COMMIT_PUT, "sleep(5000)");
    let outcome = armed.run(graph.delete("Company", "id = 'c3'")).await;
    match outcome {
        Ok(_) => println!("outcome=published"),
        Err(error) => println!("outcome={}", error.code().code),
    }
}

const CHILD_FENCED_ROOT: &str = "OMNIGRAPH_TEST_CLEANUP_FENCED_ROOT";
/// How much faster the fenced child's clock runs: its staging checks young (well under
/// 30 s) before it stalls, and old (minutes) after its 5-second stall.
const FENCED_CLOCK_FACTOR: i64 = 20;

#[tokio::test]
async fn a_writer_stalled_after_its_age_check_in_another_process_is_fenced_by_the_record() {
    let (graph, test) = busy_graph(Backend::Local).await;
    // A first run records the minimum grace. A second one, later, has nothing new to
    // record, but the stalled writer's staging to reclaim.
    cleanup_later(&graph, keep(1)).await;
    let head = graph.head().await.unwrap();
    let company = table_of(&head, "Company");
    let before = detached_manifests(&test.root, &company).await;
    let anchor = seams::now_micros();
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "cleanup::child_process_writer_stalled_after_its_age_check",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_FENCED_ROOT, &test.uri)
        .env(
            seams::CLOCK_SCALE_ENV,
            format!("{anchor}:{FENCED_CLOCK_FACTOR}"),
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let began = std::time::Instant::now();
    while detached_manifests(&test.root, &company).await == before {
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "the child staged"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The child is past its age check now, stalled before its commit PUT.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let report = cleanup_later(&graph, keep(1)).await;
    assert_eq!(report.recorded, vec!["retention:main".to_string()]);
    assert!(report.table(&company).unwrap().unpublished_manifests >= 1);
    // The child loses the slot to the record, checks its staging again, and is refused.
    let output = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(said.contains("outcome=staging_expired"), "{said}");
    assert_eq!(
        graph.head().await.unwrap().seq,
        head.seq + 1,
        "only the record"
    );
    assert_eq!(
        ids_at(&graph, "Company", &CommitRef::Head).await,
        vec!["c1", "c2", "c3"]
    );
}

#[tokio::test]
async fn a_larger_grace_recorded_after_the_runs_own_record_is_adopted() {
    let (graph, test) = busy_graph(Backend::Memory).await;
    let company = table_of(&graph.head().await.unwrap(), "Company");
    let before = detached_manifests(&test.root, &company).await;
    let _pending = graph.prepare_delete("Company", "id = 'c3'").await.unwrap();
    let staged = staged_since(&test.root, &company, &before).await;
    let head = graph.head().await.unwrap();
    // The run's record lands at n+1. While its `HEAD` copy is held, its next read of
    // the heads is held too, and another run (in another process) records a 24-hour
    // grace at n+2 in between.
    let held_copy = graph.graph().root().inject(
        FaultRule::new(
            omnigraph_publish::layout::head_path("main"),
            &[RequestKind::Put],
            FaultAction::Delay(Duration::from_millis(500)),
        )
        .times(1),
    );
    let graph = std::sync::Arc::new(graph);
    let run = {
        let graph = graph.clone();
        tokio::spawn(async move { cleanup_later(&graph, keep(1)).await })
    };
    while held_copy.fired() == 0 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let _held_read = graph.graph().root().inject(
        FaultRule::new(
            omnigraph_publish::layout::head_path("main"),
            &[RequestKind::Get],
            FaultAction::Delay(Duration::from_millis(1500)),
        )
        .times(1),
    );
    let record = graph
        .graph()
        .log("main")
        .unwrap()
        .read(head.seq + 1)
        .await
        .unwrap()
        .expect("the run's own record");
    assert_eq!(record.operation.kind, retention::RECORD_OPERATION);
    let raise = retention::record(retention::GRACE_DEFAULT, 0);
    publish(
        &graph.graph().root().clone(),
        &publication_on(record, ReadSet::Nothing, Some(raise)),
    )
    .await
    .unwrap();
    let report = run.await.unwrap();
    // Writers following the raise may publish that staging: the run kept it.
    assert!(
        detached_manifests(&test.root, &company)
            .await
            .is_superset(&staged),
        "{report:?}"
    );
    assert_eq!(report.table(&company).unwrap().unpublished_manifests, 0);
}

/// Found by `cargo xtask dst` (seeds 292 and 894): a warm handle whose last seen head
/// cleanup had since reclaimed failed a valid write (`storage_not_found` or
/// `commit_reclaimed`), checking it on versions that were gone.
#[tokio::test]
async fn a_handle_whose_last_seen_head_was_reclaimed_still_writes() {
    let (graph, test) = busy_graph(Backend::Memory).await;
    let other = Omnigraph::open(&test.uri).await.unwrap();
    other
        .insert_json("Company", objects(json!([{"id": "c9", "name": "n"}])))
        .await
        .unwrap();
    // Another handle moves every table on, and cleanup keeps only the newest commit.
    graph
        .insert_json("Person", objects(json!([{"id": "p9", "name": "n"}])))
        .await
        .unwrap();
    graph
        .update("Company", "id = 'c9'", &[("name".into(), json!("renamed"))])
        .await
        .unwrap();
    cleanup_later(&graph, keep(1)).await;
    // The warm handle's rows are valid at the head: a person, then an edge. (An append
    // staged on a reclaimed version, which fails after writing its data, is reproduced
    // by dst seed 17, in the CI tier.)
    other
        .insert_json("Person", objects(json!([{"id": "p10", "name": "n"}])))
        .await
        .unwrap();
    cleanup_later(&graph, keep(1)).await;
    other
        .insert_json(
            "WorksAt",
            objects(json!([{"id": "e9", "src": "p9", "dst": "c9"}])),
        )
        .await
        .unwrap();
    assert_eq!(
        ids_at(&graph, "WorksAt", &CommitRef::Head).await,
        vec!["e9"]
    );
}

/// A reader holds a head that had been idle for longer than the grace period when one
/// write superseded it and a cleanup keeping one commit ran: the head is aged by the
/// write that superseded it, so the reader finishes (it failed with `storage_not_found`
/// when commits were aged by their own creation). Once the grace period has passed
/// since the write, the head goes like any other.
#[tokio::test]
async fn a_head_idle_past_the_grace_stays_readable_for_the_grace_after_it_is_superseded() {
    let (graph, test) = busy_graph(Backend::Local).await;
    let idle = graph.head().await.unwrap();
    let person = table_of(&idle, "Person");
    minutes_later(2, async {
        let reader = Omnigraph::open(&test.uri).await.unwrap();
        let snapshot = reader
            .graph()
            .snapshot("main", &CommitRef::Head)
            .await
            .unwrap();
        assert_eq!(snapshot.commit().seq, idle.seq);
        graph
            .update("Person", "id = 'p2'", &[("name".into(), json!("later"))])
            .await
            .unwrap();
        let report = graph.maintenance().cleanup(&keep(1)).await.unwrap();
        assert_eq!(report.oldest_retained["main"], idle.seq);
        // The reader opens its table only now, at the version its head pins.
        let table = snapshot.table("Person").await.unwrap();
        assert_eq!(
            adapter::version_of(&table),
            idle.pin(&person).unwrap().version
        );
        assert_eq!(
            ids_at(&reader, "Person", &CommitRef::Seq(idle.seq)).await,
            vec!["p0", "p1", "p2", "p3"]
        );
    })
    .await;
    // Ten minutes on, the write is older than the grace period: the idle head goes.
    let report = minutes_later(10, graph.maintenance().cleanup(&keep(1)))
        .await
        .unwrap();
    assert_eq!(report.oldest_retained["main"], idle.seq + 1);
    drop(test);
}

/// Every file under `folder`, following nothing.
fn files_in(folder: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut folders = vec![folder.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                folders.push(entry.path());
            } else {
                files.push(entry.path());
            }
        }
    }
    files.sort();
    files
}

/// Where a table's folder, or its `data` folder, was moved out of the root and linked
/// back (as in a crafted graph, or one unpacked from an archive).
#[derive(Clone, Copy, Debug)]
enum LinkedOut {
    Table,
    Data,
}

#[tokio::test]
async fn cleanup_never_lists_or_deletes_through_a_symbolic_link_and_repair_reports_it() {
    for linked in [LinkedOut::Data, LinkedOut::Table] {
        let (graph, test) = busy_graph(Backend::Local).await;
        graph.maintenance().optimize().await.unwrap();
        let person = table_of(&graph.head().await.unwrap(), "Person");
        let company = table_of(&graph.head().await.unwrap(), "Company");
        let root = graph.graph().root().clone();
        let (relative, link_name) = match linked {
            LinkedOut::Table => (format!("tables/{person}"), format!("tables/{person}")),
            LinkedOut::Data => (
                format!("tables/{person}/data"),
                format!("tables/{person}/data"),
            ),
        };
        let inside = std::path::PathBuf::from(root.reader_uri(&relative));
        let outside = tempfile::tempdir().unwrap();
        let moved = outside.path().join("moved");
        std::fs::rename(&inside, &moved).unwrap();
        std::os::unix::fs::symlink(&moved, &inside).unwrap();
        let before = files_in(&moved);
        assert!(before.len() > 1, "{linked:?}: the folder holds files");

        let report = cleanup_later(&graph, keep(1)).await;
        // The linked table is an error row naming the link; nothing outside the root
        // went; the other tables were swept; the run does not exit 0.
        let row = report.table(&person).unwrap();
        let error = row.error.as_ref().expect("the linked table is refused");
        assert_eq!(error.code, "corrupt_state", "{linked:?}: {error:?}");
        assert!(error.message.contains(&link_name), "{linked:?}: {error:?}");
        assert_eq!(row.files_removed + row.manifests_removed, 0);
        assert_eq!(
            files_in(&moved),
            before,
            "{linked:?}: nothing outside the root went"
        );
        assert_ne!(report.exit_code(), 0);
        assert!(report.table(&company).unwrap().error.is_none());

        let repair = graph.maintenance().repair_report().await.unwrap();
        let row = repair.table(&person).unwrap();
        assert_eq!(row.status, TableRepairStatus::Symlinked, "{linked:?}");
        assert_eq!(row.symlinks, vec![link_name.clone()]);
        assert_eq!(repair.exit_code(), 3);
        // A listing through the root refuses it too, naming the link.
        let listed = root.list(&format!("tables/{person}")).await.unwrap_err();
        assert_eq!(listed.kind(), ErrorKind::Corrupt);
        drop(test);
    }
}

#[tokio::test]
async fn a_writer_never_publishes_staging_older_than_half_the_grace_period() {
    let (graph, _test) = busy_graph(Backend::Memory).await;
    // No cleanup ever ran: the default grace (24 h) protects a 40-second-old staging.
    let pending = graph.prepare_delete("Company", "id = 'c3'").await.unwrap();
    let half_minute_later = |future| omnigraph_tests::later_by(Duration::from_secs(40), future);
    half_minute_later(pending.publish(&graph)).await.unwrap();

    // Cleanup ran with a one-minute grace: 40 s is older than half of it.
    cleanup_later(&graph, keep(1)).await;
    let recorded = graph.head().await.unwrap().retention.unwrap();
    assert_eq!(recorded.grace(), GRACE_MIN);
    let head = graph.head().await.unwrap();
    let pending = graph.prepare_delete("Company", "id = 'c2'").await.unwrap();
    let error = half_minute_later(pending.publish(&graph))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::StagingExpired, "{error}");
    assert_eq!(error.evidence(), &Evidence::Unpublished);
    assert_eq!(error.code().exit_code, 75);
    assert_eq!(
        graph.head().await.unwrap().seq,
        head.seq,
        "nothing published"
    );
    // Fresh staging publishes.
    graph.delete("Company", "id = 'c2'").await.unwrap().unwrap();
}

#[tokio::test]
async fn foreign_drift_is_reported_and_never_adopted_or_deleted() {
    let (graph, test) = busy_graph(Backend::Local).await;
    let head = graph.head().await.unwrap();
    let person = table_of(&head, "Person");
    let folder = format!("tables/{person}");
    // Someone appends to the table's linear lineage with plain Lance.
    let linear = adapter::open_table_at(&test.root, &folder, 1)
        .await
        .unwrap();
    let mut linear = (*linear).clone();
    adapter::baseline_append(&mut linear, people(100, 3))
        .await
        .unwrap();

    let report = graph.maintenance().repair_report().await.unwrap();
    let row = report.table(&person).unwrap();
    assert_eq!(row.status, TableRepairStatus::ForeignDrift);
    assert_eq!(row.foreign_versions, 1);
    assert!(row.advice.contains("never adopted"), "{}", row.advice);
    assert_eq!(report.exit_code(), 3);
    assert_eq!(
        report.table(&table_of(&head, "Company")).unwrap().status,
        TableRepairStatus::NoDrift
    );

    let cleaned = cleanup_later(&graph, keep(1)).await;
    assert_eq!(cleaned.table(&person).unwrap().foreign_versions, 1);
    assert!(cleaned.table(&person).unwrap().manifests_removed > 0);
    // The foreign version's rows still read in full: its files were all kept.
    let foreign = adapter::open_table_at(&test.root, &folder, 2)
        .await
        .unwrap();
    let mut foreign_ids: Vec<String> = omnigraph_graph::rows::batches_to_json(
        &foreign
            .scan()
            .try_into_stream()
            .await
            .unwrap()
            .try_collect::<Vec<_>>()
            .await
            .unwrap(),
    )
    .into_iter()
    .map(|row| row["id"].as_str().unwrap().to_string())
    .collect();
    foreign_ids.sort();
    assert_eq!(foreign_ids, vec!["p100", "p101", "p102"]);
    assert_eq!(
        ids_at(&graph, "Person", &CommitRef::Head).await,
        vec!["p0", "p1", "p2", "p3"],
        "the graph never sees foreign rows"
    );
    assert_eq!(
        graph
            .maintenance()
            .repair_report()
            .await
            .unwrap()
            .exit_code(),
        3
    );
}

/// Repair beside a cleanup that reclaims versions while repair reads the tables: those
/// versions are legitimately gone, and the report says nothing is missing. (It said
/// `missing_pin`, exit 3, "restore from a backup".)
#[tokio::test]
async fn repair_beside_cleanup_reports_no_pin_missing_that_cleanup_reclaimed() {
    let (graph, _test) = busy_graph(Backend::Memory).await;
    let person = table_of(&graph.head().await.unwrap(), "Person");
    let held = graph.graph().root().inject(
        FaultRule::new(
            format!("tables/{person}"),
            &[RequestKind::List],
            FaultAction::Delay(Duration::from_millis(1_500)),
        )
        .times(1),
    );
    let graph = std::sync::Arc::new(graph);
    let repairing = {
        let graph = graph.clone();
        tokio::spawn(async move { graph.maintenance().repair_report().await })
    };
    while held.fired() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Repair has traced the logs and is listing Person: cleanup reclaims its old
    // versions meanwhile.
    let cleaned = cleanup_later(&graph, keep(1)).await;
    assert!(cleaned.table(&person).unwrap().manifests_removed > 0);
    let report = repairing.await.unwrap().unwrap();
    let row = report.table(&person).unwrap();
    assert_eq!(row.status, TableRepairStatus::NoDrift, "{row:?}");
    assert!(row.missing.is_empty(), "{row:?}");
    assert_eq!(report.exit_code(), 0);
}

#[tokio::test]
async fn a_pinned_version_that_lost_a_file_is_reported_missing() {
    let (graph, test) = busy_graph(Backend::Memory).await;
    let head = graph.head().await.unwrap();
    let company = table_of(&head, "Company");
    let data = objects_under(&test.root, &format!("tables/{company}/data")).await;
    for path in &data {
        test.root.delete(path).await.unwrap();
    }
    let report = graph.maintenance().repair_report().await.unwrap();
    let row = report.table(&company).unwrap();
    assert_eq!(row.status, TableRepairStatus::MissingPin, "{row:?}");
    assert!(row.missing.iter().any(|m| m.contains("data/")), "{row:?}");
    assert_eq!(report.exit_code(), 3);
}

#[tokio::test]
async fn one_tables_failure_is_an_error_row_and_the_others_are_swept() {
    let (graph, _test) = busy_graph(Backend::Local).await;
    let head = graph.head().await.unwrap();
    let (person, company) = (table_of(&head, "Person"), table_of(&head, "Company"));
    let _refused = graph.graph().root().inject(FaultRule::new(
        format!("tables/{company}/*"),
        &[RequestKind::Delete],
        FaultAction::FailBefore(StorageKind::Permanent),
    ));
    let report = cleanup_later(&graph, keep(1)).await;
    let failed = report.table(&company).unwrap();
    assert_eq!(failed.error.as_ref().unwrap().code, "storage_permanent");
    assert_eq!(failed.manifests_removed + failed.files_removed, 0);
    assert!(report.table(&person).unwrap().manifests_removed > 0);
    assert_eq!(report.totals.tables_failed, 1);
    assert_eq!(
        report.evidence,
        Evidence::PartlyPublished {
            published_units: vec!["retention:main".into()]
        }
    );
    assert_eq!(report.exit_code(), 1);
    drop(_refused);
    assert_eq!(
        ids_at(&graph, "Company", &CommitRef::Head).await,
        vec!["c1", "c2", "c3"]
    );
    // The next run sweeps it.
    let again = cleanup_later(&graph, keep(1)).await;
    assert!(again.table(&company).unwrap().manifests_removed > 0);
    assert_eq!(again.totals.tables_failed, 0);
}

#[tokio::test]
async fn a_cancel_stops_before_the_next_deletion_and_says_what_it_left() {
    let (graph, test) = busy_graph(Backend::Local).await;
    let head = graph.head().await.unwrap();
    let planned = minutes_later(2, graph.maintenance().preview_cleanup(&keep(1)))
        .await
        .unwrap();
    let planned_deletes = planned.totals.manifests_removed + planned.totals.files_removed;
    let _slow = graph.graph().root().inject(FaultRule::new(
        "tables/*",
        &[RequestKind::Delete],
        FaultAction::Delay(Duration::from_millis(300)),
    ));
    let probe = graph.graph().root().probe();
    let graph = std::sync::Arc::new(graph);
    // Cancel as soon as the first deletion is under way.
    let canceller = {
        let graph = graph.clone();
        tokio::spawn(async move {
            until_requested(&probe, RequestKind::Delete, None).await;
            graph.cancel_maintenance();
            probe
        })
    };
    let error = minutes_later(2, graph.maintenance().cleanup(&keep(1)))
        .await
        .unwrap_err();
    let probe = canceller.await.unwrap();
    assert_eq!(error.kind(), ErrorKind::MaintenanceCancelled, "{error}");
    // The record landed before any deletion: the run says so.
    assert_eq!(
        error.evidence(),
        &Evidence::PartlyPublished {
            published_units: vec!["retention:main".into()]
        }
    );
    // The deletions in flight finished; the rest were never started.
    let issued: Vec<String> = probe
        .requests()
        .into_iter()
        .filter(|request| request.kind == RequestKind::Delete)
        .map(|request| request.path)
        .collect();
    assert!(!issued.is_empty());
    assert!(
        (issued.len() as u64) < planned_deletes,
        "{} of {planned_deletes} deletions were started",
        issued.len()
    );
    let left = objects_under(&test.root, "tables").await;
    for path in &issued {
        assert!(
            !left.contains(path),
            "{path} was being deleted and is still there"
        );
    }
    drop(_slow);
    // What is retained still reads, and the next run finishes the sweep.
    assert_eq!(
        ids_at(&graph, "Person", &CommitRef::Head).await,
        vec!["p0", "p1", "p2", "p3"]
    );
    let rest = cleanup_later(&graph, keep(1)).await;
    assert_eq!(
        rest.totals.manifests_removed + rest.totals.files_removed,
        planned_deletes - issued.len() as u64
    );
    // The cancelled run recorded already; this one records the same, as the fence
    // before its deletions.
    assert_eq!(rest.recorded, vec!["retention:main".to_string()]);
    assert_eq!(graph.head().await.unwrap().seq, head.seq + 2);
}

/// A cancel that comes while cleanup lists and plans its tables ends the run before any
/// effect: no record is published, nothing is deleted. (The run published its record
/// after the cancel, and then stopped.)
#[tokio::test]
async fn a_cancel_while_cleanup_plans_records_and_deletes_nothing() {
    let (graph, test) = busy_graph(Backend::Local).await;
    let head = graph.head().await.unwrap();
    let person = table_of(&head, "Person");
    let listing = format!("tables/{person}");
    let _held = graph.graph().root().inject(FaultRule::new(
        listing.clone(),
        &[RequestKind::List],
        FaultAction::Delay(Duration::from_millis(400)),
    ));
    let probe = graph.graph().root().probe();
    let before = objects_under(&test.root, "tables").await;
    let graph = std::sync::Arc::new(graph);
    let canceller = {
        let graph = graph.clone();
        tokio::spawn(async move {
            until_requested(&probe, RequestKind::List, Some(&listing)).await;
            graph.cancel_maintenance();
            probe
        })
    };
    let error = minutes_later(2, graph.maintenance().cleanup(&keep(1)))
        .await
        .unwrap_err();
    let probe = canceller.await.unwrap();
    assert_eq!(error.kind(), ErrorKind::MaintenanceCancelled, "{error}");
    assert_eq!(error.evidence(), &Evidence::BeforeEffect);
    assert_eq!(graph.head().await.unwrap(), head, "no record");
    assert!(
        probe
            .requests()
            .iter()
            .all(|request| request.kind != RequestKind::Delete),
        "nothing deleted"
    );
    assert_eq!(objects_under(&test.root, "tables").await, before);
    // The next run records and sweeps.
    let report = cleanup_later(&graph, keep(1)).await;
    assert_eq!(report.recorded, vec!["retention:main".to_string()]);
}

/// A cancel that comes while cleanup publishes its first branch's record stops it
/// before the next branch's: the record in progress lands, the run ends cancelled with
/// that record as its evidence, and nothing is deleted.
#[tokio::test]
async fn a_cancel_between_two_branches_records_stops_before_the_second() {
    let (graph, _test) = busy_graph(Backend::Memory).await;
    // Records go in branch-name order: `alpha` before `main`.
    graph
        .create_branch("alpha", &CommitRef::Head)
        .await
        .unwrap();
    let main_before = graph.head().await.unwrap();
    let clock = seams::Simulation::new(5, seams::now_micros() + 120_000_000, 0);
    let outcome = seams::simulate(clock.clone(), async {
        let (maintenance, options) = (graph.maintenance(), keep(1));
        let mut cleaning = Box::pin(maintenance.cleanup(&options));
        let ticket = omnigraph_tests::parked_at(
            &clock,
            &mut cleaning,
            failpoints::PUBLISH_BEFORE_GATE,
            "alpha's record",
        )
        .await;
        graph.cancel_maintenance();
        clock.windows().release(ticket);
        cleaning.await
    })
    .await;
    let error = outcome.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::MaintenanceCancelled, "{error}");
    assert_eq!(
        error.evidence(),
        &Evidence::PartlyPublished {
            published_units: vec!["retention:alpha".into()]
        }
    );
    assert_eq!(
        graph.head().await.unwrap(),
        main_before,
        "no record on main"
    );
    let alpha = omnigraph_tests::on_branch(&graph, "alpha").await;
    assert_eq!(
        alpha.head().await.unwrap().operation.kind,
        retention::RECORD_OPERATION
    );
}

#[tokio::test]
async fn a_head_that_moves_while_cleanup_plans_is_traced_again() {
    let (graph, _test) = busy_graph(Backend::Local).await;
    let head = graph.head().await.unwrap();
    let person = table_of(&head, "Person");
    // Hold the listing of Person's folder while a writer publishes to Person.
    let _held = graph.graph().root().inject(FaultRule::new(
        format!("tables/{person}"),
        &[RequestKind::List],
        FaultAction::Delay(Duration::from_millis(400)),
    ));
    let probe = graph.graph().root().probe();
    let graph = std::sync::Arc::new(graph);
    let listing = format!("tables/{person}");
    let writer = {
        let graph = graph.clone();
        tokio::spawn(async move {
            // Once cleanup is listing Person, it has read the heads it plans on.
            until_requested(&probe, RequestKind::List, Some(&listing)).await;
            graph
                .insert_json("Person", objects(json!([{"id": "p9", "name": "n"}])))
                .await
                .unwrap()
        })
    };
    let lists = graph.graph().root().probe();
    let report = minutes_later(2, graph.maintenance().cleanup(&keep(1)))
        .await
        .unwrap();
    writer.await.unwrap();
    // Planning a table lists its folder once.
    let listing = format!("tables/{person}");
    let planned_person = lists
        .requests()
        .iter()
        .filter(|request| request.kind == RequestKind::List && request.path == listing)
        .count();
    assert_eq!(
        planned_person, 2,
        "Person was planned again after its pin moved"
    );
    assert_eq!(report.totals.tables_failed, 0);
    assert_eq!(
        ids_at(&graph, "Person", &CommitRef::Head).await,
        vec!["p0", "p1", "p2", "p3", "p9"]
    );
}

/// A run with a shorter grace period than the one recorded plans and records the
/// longer one: a writer may be checking its staging against it. (Its record lowered
/// it, so a longer-grace run after it was a raise, which a concurrent shorter-grace run
/// cannot see in time.) Only an explicit lowering shortens it.
#[tokio::test]
async fn a_recorded_grace_is_never_shortened_but_on_purpose() {
    let (graph, _test) = busy_graph(Backend::Memory).await;
    let two_hours = Duration::from_secs(2 * 60 * 60);
    let longer = keep(1).with_grace(two_hours).unwrap();
    let report = cleanup_later(&graph, longer).await;
    assert_eq!(report.grace_secs, two_hours.as_secs());
    let report = cleanup_later(&graph, keep(1)).await;
    assert_eq!(
        report.grace_secs,
        two_hours.as_secs(),
        "planned with the longer"
    );
    let recorded = graph.head().await.unwrap().retention.unwrap();
    assert_eq!(recorded.grace(), two_hours);
    let report = cleanup_later(&graph, keep(1).lowering_grace()).await;
    assert_eq!(report.grace_secs, GRACE_MIN.as_secs());
    assert_eq!(
        graph.head().await.unwrap().retention.unwrap().grace(),
        GRACE_MIN
    );
}

#[tokio::test]
async fn a_policy_and_a_grace_period_are_checked() {
    let error = CleanupPolicy::keep_commits(0).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadInput);
    let error = CleanupOptions::new(CleanupPolicy::older_than(Duration::from_secs(60)))
        .with_grace(Duration::from_secs(59))
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadInput);
    assert!(error.to_string().contains("grace"), "{error}");
    let (graph, _test) = busy_graph(Backend::Memory).await;
    let error = graph
        .maintenance()
        .cleanup(&CleanupOptions::new(CleanupPolicy::default()))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadInput);
    assert_eq!(error.evidence(), &Evidence::BeforeEffect);
}

#[tokio::test]
async fn older_than_keeps_the_commits_younger_than_it() {
    let (graph, _test) = busy_graph(Backend::Memory).await;
    let head = graph.head().await.unwrap();
    // Two minutes later, everything is older than 90 s: only the head stays.
    let options = CleanupOptions::new(CleanupPolicy::older_than(Duration::from_secs(90)))
        .with_grace(GRACE_MIN)
        .unwrap();
    let report = cleanup_later(&graph, options).await;
    assert_eq!(report.oldest_retained["main"], head.seq);
    // Ten minutes of age allowed: everything stays.
    let (graph, _test) = busy_graph(Backend::Memory).await;
    let options = CleanupOptions::new(CleanupPolicy::older_than(Duration::from_secs(600)))
        .with_grace(GRACE_MIN)
        .unwrap();
    let report = cleanup_later(&graph, options).await;
    assert_eq!(report.oldest_retained["main"], 0);
}

/// A schema of four types for the footprint check.
const FOUR_TYPES: &str = "
node Person { id: String @key, name: String @index(fts), age: Int32? @index }
node Company { id: String @key, name: String }
node City { id: String @key, name: String }
edge WorksAt: Person -> Company { since: Int32? }
";

const FOOTPRINT_ROWS: usize = 20;

async fn load_four_types(graph: &Omnigraph) {
    let rows = |prefix: &str| {
        (0..FOOTPRINT_ROWS)
            .map(|i| json!({"id": format!("{prefix}{i}"), "name": format!("{prefix} {i}")}))
            .collect::<Vec<Value>>()
    };
    graph
        .insert_json("Person", objects(Value::Array(rows("p"))))
        .await
        .unwrap();
    graph
        .insert_json("Company", objects(Value::Array(rows("c"))))
        .await
        .unwrap();
    graph
        .insert_json("City", objects(Value::Array(rows("t"))))
        .await
        .unwrap();
    let edges: Vec<Value> = (0..FOOTPRINT_ROWS)
        .map(|i| json!({"id": format!("w{i}"), "src": format!("p{i}"), "dst": format!("c{i}")}))
        .collect();
    graph
        .insert_json("WorksAt", objects(Value::Array(edges)))
        .await
        .unwrap();
}

/// Final value of row `i` of a type after `updates` round-robin single-row updates.
fn final_name(prefix: &str, i: usize, updates: usize) -> String {
    let types = 3;
    let type_index = ["p", "c", "t"].iter().position(|p| *p == prefix).unwrap();
    let last = (0..updates)
        .rev()
        .find(|u| u % types == type_index && (u / types) % FOOTPRINT_ROWS == i);
    match last {
        Some(u) => format!("v{u}"),
        None => format!("{prefix} {i}"),
    }
}

#[tokio::test]
async fn storage_stays_bounded_after_many_updates_optimize_and_cleanup() {
    let updates = 150;
    let test = TestRoot::new(Backend::Local).await;
    let graph = Omnigraph::create(&test.uri, FOUR_TYPES).await.unwrap();
    load_four_types(&graph).await;
    for u in 0..updates {
        let (type_name, prefix) = [("Person", "p"), ("Company", "c"), ("City", "t")][u % 3];
        let key = format!("{prefix}{}", (u / 3) % FOOTPRINT_ROWS);
        graph
            .update(
                type_name,
                &format!("id = '{key}'"),
                &[("name".into(), json!(format!("v{u}")))],
            )
            .await
            .unwrap();
    }
    let grown = tables_bytes(&test.root).await;
    graph.maintenance().optimize().await.unwrap();
    cleanup_later(&graph, keep(1)).await;
    let kept = tables_bytes(&test.root).await;

    // A fresh graph loaded with the same final rows and indexes.
    let fresh_root = TestRoot::new(Backend::Local).await;
    let fresh = Omnigraph::create(&fresh_root.uri, FOUR_TYPES)
        .await
        .unwrap();
    load_four_types(&fresh).await;
    for (type_name, prefix) in [("Person", "p"), ("Company", "c"), ("City", "t")] {
        for i in 0..FOOTPRINT_ROWS {
            let name = final_name(prefix, i, updates);
            if name != format!("{prefix} {i}") {
                fresh
                    .update(
                        type_name,
                        &format!("id = '{prefix}{i}'"),
                        &[("name".into(), json!(name))],
                    )
                    .await
                    .unwrap();
            }
        }
    }
    fresh.maintenance().optimize().await.unwrap();
    cleanup_later(&fresh, keep(1)).await;
    let baseline = tables_bytes(&fresh_root.root).await;
    for (type_name, prefix) in [("Person", "p"), ("Company", "c"), ("City", "t")] {
        for i in 0..FOOTPRINT_ROWS {
            let row = graph
                .get(type_name, &json!(format!("{prefix}{i}")), &CommitRef::Head)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(row["name"], json!(final_name(prefix, i, updates)));
        }
    }
    eprintln!(
        "footprint after {updates} updates: grown {grown} B, kept {kept} B, fresh {baseline} B"
    );
    assert!(
        kept <= 2 * baseline,
        "tables/ holds {kept} B after cleanup; a fresh graph holds {baseline} B"
    );
    assert!(kept < grown / 2, "cleanup reclaimed most of {grown} B");
}

// Writers and cleanup in separate processes, on one clock sped up alike.

const CHILD_ROOT: &str = "OMNIGRAPH_TEST_CLEANUP_ROOT";
const CHILD_ROLE: &str = "OMNIGRAPH_TEST_CLEANUP_ROLE";
const CHILD_OUT: &str = "OMNIGRAPH_TEST_CLEANUP_OUT";
const CHILD_UNTIL: &str = "OMNIGRAPH_TEST_CLEANUP_UNTIL";
/// Clock factor: the one-minute grace passes in three seconds.
const CLOCK_FACTOR: i64 = 20;
const WRITE_ATTEMPTS_MAX: usize = 20;

fn wall_millis() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// Retries a write on the typed conflicts a concurrent writer causes.
async fn retried<F, Fut, T>(mut write: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = omnigraph_core::Result<T>>,
{
    for _ in 0..WRITE_ATTEMPTS_MAX {
        match write().await {
            Ok(value) => return Some(value),
            Err(error)
                if matches!(
                    error.kind(),
                    ErrorKind::ReadSetChanged
                        | ErrorKind::ContentionExhausted
                        | ErrorKind::StagingExpired
                ) => {}
            Err(error) => panic!("write failed: {error}"),
        }
    }
    None
}

#[tokio::test]
#[ignore = "a child process of cleanup_beside_writers_in_other_processes_loses_nothing_acknowledged, which runs it"]
async fn child_process_cleanup_worker() {
    let Ok(uri) = std::env::var(CHILD_ROOT) else {
        panic!("run only as a child of the test below");
    };
    let role = std::env::var(CHILD_ROLE).unwrap();
    let until: u128 = std::env::var(CHILD_UNTIL).unwrap().parse().unwrap();
    let graph = Omnigraph::open(&uri).await.unwrap();
    let mut log = Vec::new();
    let mut round = 0usize;
    while wall_millis() < until {
        match role.as_str() {
            "a" => {
                let key = format!("a{round}");
                let row = || objects(json!([{"id": key.clone(), "name": "a"}]));
                if retried(|| graph.insert_json("Person", row()))
                    .await
                    .is_some()
                {
                    log.push(format!("Person {key}"));
                }
                if round % 3 == 2 {
                    let target = format!("a{}", round - 1);
                    let predicate = format!("id = '{target}'");
                    let set = [("name".to_string(), json!("updated"))];
                    if retried(|| graph.update("Person", &predicate, &set))
                        .await
                        .is_some()
                    {
                        log.push(format!("updated {target}"));
                    }
                }
                if round % 5 == 4 {
                    let target = format!("a{}", round - 2);
                    let predicate = format!("id = '{target}'");
                    if retried(|| graph.delete("Person", &predicate))
                        .await
                        .is_some()
                    {
                        log.push(format!("deleted {target}"));
                    }
                }
                if round % 7 == 6 {
                    graph.maintenance().optimize().await.unwrap();
                }
            }
            "b" => {
                let (person, company, edge) = (
                    format!("b{round}"),
                    format!("c{round}"),
                    format!("w{round}"),
                );
                let people = || objects(json!([{"id": person.clone(), "name": "b"}]));
                let companies = || objects(json!([{"id": company.clone(), "name": "c"}]));
                let edges = || {
                    objects(
                        json!([{"id": edge.clone(), "src": person.clone(), "dst": company.clone()}]),
                    )
                };
                if retried(|| graph.insert_json("Person", people()))
                    .await
                    .is_some()
                    && retried(|| graph.insert_json("Company", companies()))
                        .await
                        .is_some()
                {
                    log.push(format!("Person {person}"));
                    log.push(format!("Company {company}"));
                    if retried(|| graph.insert_json("WorksAt", edges()))
                        .await
                        .is_some()
                    {
                        log.push(format!("WorksAt {edge}"));
                    }
                }
                // Paced, so the commits younger than the grace period stay few enough
                // to read back one by one.
                tokio::time::sleep(Duration::from_millis(40)).await;
            }
            "cleanup" => {
                let report = graph.maintenance().cleanup(&keep(1)).await;
                match report {
                    Ok(report) => log.push(format!(
                        "removed {}",
                        report.totals.manifests_removed + report.totals.files_removed
                    )),
                    Err(error) if error.kind() == ErrorKind::ContentionExhausted => {}
                    Err(error) => panic!("cleanup failed: {error}"),
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            other => panic!("unknown role {other}"),
        }
        round += 1;
    }
    std::fs::write(std::env::var(CHILD_OUT).unwrap(), log.join("\n")).unwrap();
}

#[tokio::test]
async fn cleanup_beside_writers_in_other_processes_loses_nothing_acknowledged() {
    let test = TestRoot::new(Backend::Local).await;
    Omnigraph::create(&test.uri, SOCIAL_SCHEMA).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let scale = format!("{}:{CLOCK_FACTOR}", seams::now_micros());
    let until = wall_millis() + 10_000;
    let spawn = |role: &str| {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "cleanup::child_process_cleanup_worker",
                "--exact",
                "--ignored",
                "--test-threads=1",
                "--nocapture",
            ])
            .env(CHILD_ROOT, &test.uri)
            .env(CHILD_ROLE, role)
            .env(CHILD_OUT, dir.path().join(role))
            .env(CHILD_UNTIL, until.to_string())
            .env(seams::CLOCK_SCALE_ENV, &scale)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let children: Vec<_> = ["a", "b", "cleanup"]
        .iter()
        .map(|role| (role.to_string(), spawn(role)))
        .collect();
    for (role, mut child) in children {
        assert!(child.wait().unwrap().success(), "child {role} failed");
    }
    let read = |role: &str| std::fs::read_to_string(dir.path().join(role)).unwrap();
    let removed: u64 = read("cleanup")
        .lines()
        .map(|line| {
            line.strip_prefix("removed ")
                .unwrap()
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    assert!(removed > 0, "cleanup reclaimed while the writers ran");

    let reader = Omnigraph::open(&test.uri).await.unwrap();
    let people: HashSet<String> = ids_at(&reader, "Person", &CommitRef::Head)
        .await
        .into_iter()
        .collect();
    let companies: HashSet<String> = ids_at(&reader, "Company", &CommitRef::Head)
        .await
        .into_iter()
        .collect();
    let edges: HashSet<String> = ids_at(&reader, "WorksAt", &CommitRef::Head)
        .await
        .into_iter()
        .collect();
    let deleted: HashSet<String> = read("a")
        .lines()
        .filter_map(|line| line.strip_prefix("deleted ").map(str::to_string))
        .collect();
    let mut acknowledged = 0;
    for line in read("a").lines().chain(read("b").lines()) {
        let (what, key) = line.split_once(' ').unwrap();
        let key = key.to_string();
        acknowledged += 1;
        match what {
            "Person" | "updated" if !deleted.contains(&key) => {
                assert!(people.contains(&key), "lost {line}")
            }
            "Person" | "updated" => {}
            "deleted" => assert!(!people.contains(&key), "{line} is back"),
            "Company" => assert!(companies.contains(&key), "lost {line}"),
            "WorksAt" => assert!(edges.contains(&key), "lost {line}"),
            other => panic!("unknown outcome {other}"),
        }
    }
    assert!(
        acknowledged > 20,
        "the writers made progress: {acknowledged}"
    );
    // Every retained commit opens and scans every table.
    let head = reader.head().await.unwrap();
    for seq in retention::oldest_retained(&head)..=head.seq {
        for type_name in ["Person", "Company", "WorksAt"] {
            ids_at(&reader, type_name, &CommitRef::Seq(seq)).await;
        }
    }
    let repair = reader.maintenance().repair_report().await.unwrap();
    assert!(
        repair
            .tables
            .iter()
            .all(|table| table.status == TableRepairStatus::NoDrift),
        "{repair:?}"
    );
}

#[tokio::test]
async fn a_table_no_retained_commit_pins_loses_its_whole_folder() {
    let (graph, test) = busy_graph(Backend::Local).await;
    let head = graph.head().await.unwrap();
    let works_at = table_of(&head, "WorksAt");
    graph
        .insert_json(
            "WorksAt",
            objects(json!([{"id": "w1", "src": "p1", "dst": "c1"}])),
        )
        .await
        .unwrap();
    let without_edges =
        SOCIAL_SCHEMA.replace("edge WorksAt: Person -> Company { since: Int32? }", "");
    graph.apply_schema(&without_edges, true).await.unwrap();
    assert!(graph.head().await.unwrap().pin_of_type("WorksAt").is_none());
    assert!(
        !objects_under(&test.root, &format!("tables/{works_at}"))
            .await
            .is_empty()
    );

    // keep 2 still retains the commit before the drop.
    let kept = cleanup_later(&graph, keep(2)).await;
    assert!(kept.table(&works_at).unwrap().type_name.is_some());
    assert!(
        !objects_under(&test.root, &format!("tables/{works_at}"))
            .await
            .is_empty()
    );
    let report = cleanup_later(&graph, keep(1)).await;
    let row = report.table(&works_at).unwrap();
    assert_eq!(row.type_name, None, "no retained commit pins it");
    assert!(
        row.manifests_removed > 0 && row.files_removed > 0,
        "{row:?}"
    );
    assert!(
        objects_under(&test.root, &format!("tables/{works_at}"))
            .await
            .is_empty(),
        "the whole folder went"
    );
    assert_eq!(
        ids_at(&graph, "Person", &CommitRef::Head).await,
        vec!["p0", "p1", "p2", "p3"]
    );
}
