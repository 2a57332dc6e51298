//! The storage root, the adapter and the publisher on an S3-compatible server with
//! atomic put-if-absent (SeaweedFS, started by `cargo xtask s3`). The tests are ignored
//! by a plain test run; `cargo xtask s3` starts the server, sets `OMNIGRAPH_S3_TEST_URI`
//! and the AWS variables, and runs them.

use bytes::Bytes;
use omnigraph_core::adapter;
use omnigraph_core::storage::{
    FaultAction, FaultRule, PutIfAbsentCheck, PutOutcome, RequestKind, StorageOptions, StorageRoot,
};
use omnigraph_core::{ErrorKind, Evidence, StorageKind};
use omnigraph_graph::{LoadMode, Omnigraph, ScanRequest};
use omnigraph_maintenance::{MaintenanceExt, TableRepairStatus};
use omnigraph_publish::{CommitRef, Graph, ReadSet, Staging};
use omnigraph_tests::{
    SOCIAL_SCHEMA, fault_commit_puts, ids_at, new_table, objects, origin, people, rows,
};
use serde_json::json;

/// A fresh prefix in the test bucket.
fn test_uri(name: &str) -> String {
    let base = std::env::var("OMNIGRAPH_S3_TEST_URI")
        .expect("OMNIGRAPH_S3_TEST_URI is set by `cargo xtask s3`");
    format!(
        "{}/{name}-{}",
        base.trim_end_matches('/'),
        omnigraph_core::seams::new_id()
    )
}

#[tokio::test]
// Ignored by a plain run, which has no S3 server; CI runs it through `cargo xtask s3`
// (.ci/run), which starts SeaweedFS on loopback and fails if it cannot (issue #16).
#[ignore = "needs the S3 test server: run `cargo xtask s3`"]
async fn s3_root_put_if_absent_and_detached_links() {
    let root = StorageRoot::open(&test_uri("root")).await.unwrap();
    assert!(root.canonical().starts_with("s3://"));
    let first = root
        .put_if_absent("_graph/x", Bytes::from_static(b"1"))
        .await
        .unwrap();
    let second = root
        .put_if_absent("_graph/x", Bytes::from_static(b"2"))
        .await
        .unwrap();
    assert_eq!(
        (first, second),
        (PutOutcome::Created, PutOutcome::AlreadyExists)
    );
    assert_eq!(
        root.get("_graph/x").await.unwrap().as_deref(),
        Some(&b"1"[..])
    );

    let table = new_table(&root, "t1").await;
    let probe = root.probe();
    let link = adapter::stage_append(&table, vec![rows(0, 100, false)], &origin(1))
        .await
        .unwrap();
    let counts = probe.counts();
    assert_eq!(
        counts.get(RequestKind::PutIfAbsent),
        1,
        "{counts} {:?}",
        probe.requests()
    );
    assert_eq!(
        counts.get(RequestKind::Put),
        2,
        "{counts} {:?}",
        probe.requests()
    );
    let reopened = StorageRoot::open(&root.canonical()).await.unwrap();
    let opened = adapter::open_table_at(&reopened, "tables/t1", link.version)
        .await
        .unwrap();
    assert_eq!(opened.count_rows(None).await.unwrap(), 100);
    assert_eq!(table.latest_version_id().await.unwrap(), 1);
}

#[tokio::test]
// Ignored by a plain run, which has no S3 server; CI runs it through `cargo xtask s3`
// (.ci/run), which starts SeaweedFS on loopback and fails if it cannot (issue #16).
#[ignore = "needs the S3 test server: run `cargo xtask s3`"]
async fn s3_graph_publication_race() {
    let uri = test_uri("graph");
    let catalog = omnigraph_core::schema::parse("s.pg", SOCIAL_SCHEMA).unwrap();
    let (graph, genesis) = Graph::create(&uri, &catalog, "s3").await.unwrap();
    let person = genesis.pin_of_type("Person").unwrap().table_id.clone();
    let other = Graph::open(&uri).await.unwrap();
    let mut left = Staging::new(graph.root().clone(), genesis.clone());
    left.stage_append(&person, vec![people(0, 2)])
        .await
        .unwrap();
    let mut right = Staging::new(other.root().clone(), genesis.clone());
    right
        .stage_append(&person, vec![people(10, 3)])
        .await
        .unwrap();
    let operation = omnigraph_publish::CommitOperation {
        kind: "test".into(),
        summary: "s3".into(),
    };
    let won = left
        .publish(ReadSet::Strict, operation.clone(), "l")
        .await
        .unwrap();
    let lost = right
        .publish(ReadSet::Strict, operation, "r")
        .await
        .unwrap_err();
    assert_eq!(lost.kind(), omnigraph_core::ErrorKind::ReadSetChanged);
    let head = Graph::open(&uri)
        .await
        .unwrap()
        .commit("main", &CommitRef::Head)
        .await
        .unwrap();
    assert_eq!(head, won);
    let table = graph
        .snapshot("main", &CommitRef::Head)
        .await
        .unwrap()
        .table("Person")
        .await
        .unwrap();
    assert_eq!(table.count_rows(None).await.unwrap(), 2);
}

#[tokio::test]
// Ignored by a plain run, which has no S3 server; CI runs it through `cargo xtask s3`
// (.ci/run), which starts SeaweedFS on loopback and fails if it cannot (issue #16).
#[ignore = "needs the S3 test server: run `cargo xtask s3`"]
async fn s3_every_writer_reader_and_maintenance_run_on_a_bucket() {
    let uri = test_uri("lifecycle");
    let graph = Omnigraph::create(&uri, SOCIAL_SCHEMA).await.unwrap();
    graph
        .insert_json(
            "Person",
            objects(json!([{"id": "p0", "name": "Ada", "age": 36}])),
        )
        .await
        .unwrap();
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        file.path(),
        concat!(
            r#"{"type": "Person", "id": "p1", "name": "Grace", "age": 45}"#,
            "\n",
            r#"{"type": "Company", "id": "c1", "name": "Engines"}"#,
            "\n",
            r#"{"type": "WorksAt", "src": "p1", "dst": "c1"}"#,
            "\n",
        ),
    )
    .unwrap();
    let loaded = graph.load(file.path(), LoadMode::Append).await.unwrap();
    let before_update = loaded.commit.unwrap();
    graph
        .update("Person", "id = 'p0'", &[("age".into(), json!(37))])
        .await
        .unwrap();
    // Deleting p1 deletes its edge in the same commit.
    graph.delete("Person", "id = 'p1'").await.unwrap();
    assert_eq!(ids_at(&graph, "Person", &CommitRef::Head).await, ["p0"]);
    assert!(ids_at(&graph, "WorksAt", &CommitRef::Head).await.is_empty());
    // Time travel to the load.
    let at_load = CommitRef::Seq(before_update.seq);
    assert_eq!(ids_at(&graph, "Person", &at_load).await, ["p0", "p1"]);
    assert_eq!(ids_at(&graph, "WorksAt", &at_load).await.len(), 1);

    let built = graph.maintenance().build_indexes().await.unwrap();
    assert!(built.commit.is_some(), "{built:?}");
    let optimized = graph.maintenance().optimize().await.unwrap();
    assert_eq!(optimized.exit_code(), 0, "{optimized:?}");
    let cleaned =
        omnigraph_tests::cleanup_keeping_one_after(&graph, std::time::Duration::from_secs(120))
            .await;
    assert!(cleaned.totals.files_removed + cleaned.totals.manifests_removed > 0);
    assert_eq!(cleaned.totals.tables_failed, 0);
    // A fresh handle reads the head; the reclaimed commit is a typed error.
    let fresh = Omnigraph::open(&uri).await.unwrap();
    assert_eq!(ids_at(&fresh, "Person", &CommitRef::Head).await, ["p0"]);
    let age = fresh
        .get("Person", &json!("p0"), &CommitRef::Head)
        .await
        .unwrap()
        .unwrap()["age"]
        .clone();
    assert_eq!(age, json!(37));
    let reclaimed = fresh
        .scan("Person", &ScanRequest::default(), &at_load)
        .await
        .unwrap_err();
    assert_eq!(reclaimed.kind(), ErrorKind::CommitReclaimed, "{reclaimed}");
    let repair = fresh.maintenance().repair_report().await.unwrap();
    assert!(
        repair
            .tables
            .iter()
            .all(|table| table.status == TableRepairStatus::NoDrift),
        "{repair:?}"
    );
}

#[tokio::test]
// Ignored by a plain run, which has no S3 server; CI runs it through `cargo xtask s3`
// (.ci/run), which starts SeaweedFS on loopback and fails if it cannot (issue #16).
#[ignore = "needs the S3 test server: run `cargo xtask s3`"]
async fn s3_a_store_without_conditional_put_is_refused() {
    // The server's own conditional PUT passes the check.
    let root = StorageRoot::open(&test_uri("probe")).await.unwrap();
    assert_eq!(
        root.check_put_if_absent().await.unwrap(),
        PutIfAbsentCheck::Atomic
    );
    assert!(
        root.list("_graph/probe").await.unwrap().is_empty(),
        "the scratch object is gone"
    );
    {
        // A client retry of a first PUT that landed is refused: still ours, still atomic.
        let _retried = root.inject(FaultRule::new(
            "_graph/probe/*",
            &[RequestKind::PutIfAbsent],
            FaultAction::DuplicatedAck,
        ));
        assert_eq!(
            root.check_put_if_absent().await.unwrap(),
            PutIfAbsentCheck::Atomic
        );
    }
    {
        // Credentials that may not write cannot commit: nothing to check, reads go on.
        let _read_only = root.inject(FaultRule::new(
            "_graph/probe/*",
            &[RequestKind::PutIfAbsent],
            FaultAction::FailBefore(StorageKind::Configuration),
        ));
        assert_eq!(
            root.check_put_if_absent().await.unwrap(),
            PutIfAbsentCheck::ReadOnly
        );
    }
    // Told not to use conditional PUT, the client cannot make put-if-absent atomic: the
    // root is refused at open, naming the problem.
    let options = StorageOptions::new()
        .with("conditional_put", "disabled")
        .unwrap();
    let error = StorageRoot::open_with(&test_uri("unsafe"), &options)
        .await
        .unwrap_err();
    assert_eq!(
        error.kind(),
        ErrorKind::Storage(StorageKind::Configuration),
        "{error}"
    );
    assert!(error.to_string().contains("conditional PUT"), "{error}");
    assert_eq!(error.evidence(), &Evidence::BeforeEffect);
}

#[tokio::test]
// Ignored by a plain run, which has no S3 server; CI runs it through `cargo xtask s3`
// (.ci/run), which starts SeaweedFS on loopback and fails if it cannot (issue #16).
#[ignore = "needs the S3 test server: run `cargo xtask s3`"]
async fn s3_every_evidence_kind_from_real_requests() {
    let uri = test_uri("evidence");
    let graph = Omnigraph::create(&uri, SOCIAL_SCHEMA).await.unwrap();
    let root = graph.graph().root().clone();
    let person = json!([{"id": "p9", "name": "n"}]);
    let head = graph.head().await.unwrap();
    {
        // The head cannot be read: nothing was written.
        let fresh = Omnigraph::open(&uri).await.unwrap();
        let _fault = fresh.graph().root().inject(FaultRule::new(
            "_graph/*",
            &[RequestKind::Get, RequestKind::Head, RequestKind::List],
            FaultAction::FailBefore(StorageKind::Transient),
        ));
        let error = fresh
            .insert_json("Person", objects(person.clone()))
            .await
            .unwrap_err();
        assert_eq!(error.evidence(), &Evidence::BeforeEffect, "{error}");
    }
    {
        // A data PUT fails while staging: whatever was staged is unpublished.
        let _fault = root.inject(FaultRule::new(
            "tables/*",
            &[RequestKind::Put, RequestKind::PutIfAbsent],
            FaultAction::FailBefore(StorageKind::Permanent),
        ));
        let error = graph
            .insert_json("Person", objects(person.clone()))
            .await
            .unwrap_err();
        assert_eq!(error.evidence(), &Evidence::Unpublished, "{error}");
    }
    {
        // Staged, then the commit PUT is refused for good: unpublished.
        let _fault = fault_commit_puts(&root, FaultAction::FailBefore(StorageKind::Permanent));
        let error = graph
            .insert_json("Person", objects(person.clone()))
            .await
            .unwrap_err();
        assert_eq!(error.evidence(), &Evidence::Unpublished, "{error}");
    }
    {
        // The commit PUT's acknowledgement is lost: in doubt, never a clean failure.
        let _fault = fault_commit_puts(&root, FaultAction::FailBefore(StorageKind::Transient));
        let error = graph
            .insert_json("Person", objects(person.clone()))
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::PublishInDoubt, "{error}");
        assert_eq!(error.evidence(), &Evidence::InDoubt);
    }
    assert_eq!(graph.head().await.unwrap().seq, head.seq, "nothing landed");
    // Two tables with fragments; a cancel once Person's unit published.
    for index in 0..3 {
        graph
            .insert_json(
                "Person",
                objects(json!([{"id": format!("p{index}"), "name": "n"}])),
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
    let before = graph.head().await.unwrap();
    let company = before.pin_of_type("Company").unwrap().table_id.clone();
    let _slow = root.inject(FaultRule::new(
        format!("tables/{company}/data/*"),
        &[RequestKind::Put, RequestKind::PutIfAbsent],
        FaultAction::Delay(std::time::Duration::from_secs(3)),
    ));
    let graph = std::sync::Arc::new(graph);
    let run = {
        let graph = graph.clone();
        tokio::spawn(async move { graph.maintenance().optimize().await })
    };
    let mut published = false;
    for _ in 0..600 {
        if graph.head().await.unwrap().seq > before.seq {
            published = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(published, "Person's unit published");
    graph.cancel_maintenance();
    let error = run.await.unwrap().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::MaintenanceCancelled);
    assert_eq!(
        error.evidence(),
        &Evidence::PartlyPublished {
            published_units: vec!["Person".into()]
        }
    );
}
