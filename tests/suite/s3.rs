//! The storage root, the adapter and the publisher on an S3-compatible server with
//! atomic put-if-absent (SeaweedFS, started by `cargo xtask s3`). Built only with the
//! `s3` feature; `cargo xtask s3` sets `OMNIGRAPH_S3_TEST_URI` and the AWS variables.

use bytes::Bytes;
use omnigraph_core::adapter;
use omnigraph_core::storage::{PutOutcome, RequestKind, StorageRoot};
use omnigraph_publish::{CommitRef, Graph, ReadSet, Staging};
use omnigraph_tests::{SOCIAL_SCHEMA, new_table, origin, people, rows};

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
