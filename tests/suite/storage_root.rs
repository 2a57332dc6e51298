//! The storage root: URIs, process-shared memory, the engine's own requests, probes and
//! injected faults.

use bytes::Bytes;
use omnigraph_core::storage::{
    FaultAction, FaultRule, PutOutcome, RequestKind, RootLocation, StorageOptions, StorageRoot,
};
use omnigraph_core::{ErrorKind, StorageKind};
use omnigraph_tests::{BACKENDS, Backend, TestRoot};

#[test]
fn root_uris_parse_and_bad_ones_are_typed() {
    let local = RootLocation::parse("/tmp/some/graph").unwrap();
    assert_eq!(local.canonical(), "file:///tmp/some/graph");
    assert_eq!(
        RootLocation::parse("file:///tmp/some/graph").unwrap(),
        local
    );
    let memory = RootLocation::parse("memory://g1/sub/dir").unwrap();
    assert_eq!(memory.canonical(), "memory://g1/sub/dir");
    for bad in [
        "",
        "ftp://x/y",
        "memory://bad name",
        "memory://g/../x",
        "s3:///nobucket",
    ] {
        let error = RootLocation::parse(bad).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::BadInput, "{bad:?}: {error}");
    }
}

#[tokio::test]
async fn storage_options_are_checked_before_any_request() {
    let options = |pair: &str| StorageOptions::new().with_pair(pair).unwrap();
    // A setting S3 does not have is named, and nothing is sent anywhere.
    let error = StorageRoot::open_with("s3://bucket/graph", &options("zzz_setting=1"))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Storage(StorageKind::Configuration));
    assert!(error.to_string().contains("zzz_setting"), "{error}");
    // A folder or memory root takes none.
    let dir = tempfile::tempdir().unwrap();
    for uri in [
        dir.path().display().to_string(),
        "memory://options".to_string(),
    ] {
        let error = StorageRoot::open_with(&uri, &options("region=us-east-1"))
            .await
            .unwrap_err();
        assert_eq!(
            error.kind(),
            ErrorKind::Storage(StorageKind::Configuration),
            "{uri}"
        );
        assert!(error.to_string().contains("s3:// roots only"), "{error}");
    }
}

#[tokio::test]
async fn memory_roots_are_shared_within_the_process() {
    let test = TestRoot::new(Backend::Memory).await;
    test.root
        .put("_graph/FORMAT", Bytes::from_static(b"v1"))
        .await
        .unwrap();
    let other = test.reopen().await;
    assert_eq!(
        other.get("_graph/FORMAT").await.unwrap().as_deref(),
        Some(&b"v1"[..])
    );
    // A different name is a different store.
    let elsewhere = TestRoot::new(Backend::Memory).await;
    assert_eq!(elsewhere.root.get("_graph/FORMAT").await.unwrap(), None);
}

#[tokio::test]
async fn local_roots_keep_every_object_inside_the_folder() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("g").display().to_string();
    let root = StorageRoot::open(&uri).await.unwrap();
    root.put("_graph/FORMAT", Bytes::from_static(b"v1"))
        .await
        .unwrap();
    assert!(dir.path().join("g/_graph/FORMAT").is_file());
    assert_eq!(root.list("_graph").await.unwrap(), vec!["_graph/FORMAT"]);
}

#[tokio::test]
async fn put_if_absent_is_exact_and_counted() {
    for backend in BACKENDS {
        let test = TestRoot::new(backend).await;
        let root = &test.root;
        let probe = root.probe();
        let first = root
            .put_if_absent(
                "_graph/branches/main/commits/1.json",
                Bytes::from_static(b"a"),
            )
            .await
            .unwrap();
        let second = root
            .put_if_absent(
                "_graph/branches/main/commits/1.json",
                Bytes::from_static(b"b"),
            )
            .await
            .unwrap();
        assert_eq!(
            (first, second),
            (PutOutcome::Created, PutOutcome::AlreadyExists)
        );
        assert_eq!(
            root.get("_graph/branches/main/commits/1.json")
                .await
                .unwrap()
                .as_deref(),
            Some(&b"a"[..]),
            "{backend:?}: the loser changed nothing"
        );
        let counts = probe.counts();
        assert_eq!(
            counts.get(RequestKind::PutIfAbsent),
            2,
            "{backend:?} {counts}"
        );
        assert_eq!(counts.get(RequestKind::Get), 1, "{backend:?} {counts}");
        assert_eq!(counts.total(), 3, "{backend:?} {counts}");
        assert_eq!(
            probe.requests()[0].path,
            "_graph/branches/main/commits/1.json",
            "paths are root-relative"
        );
    }
}

#[tokio::test]
async fn a_fault_before_the_request_changes_nothing() {
    for backend in BACKENDS {
        let test = TestRoot::new(backend).await;
        let fault = test.root.inject(FaultRule::new(
            "_graph/*",
            &[RequestKind::PutIfAbsent],
            FaultAction::FailBefore(StorageKind::Transient),
        ));
        let error = test
            .root
            .put_if_absent("_graph/FORMAT", Bytes::from_static(b"v1"))
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Storage(StorageKind::Transient));
        assert_eq!(fault.fired(), 1);
        assert_eq!(test.root.get("_graph/FORMAT").await.unwrap(), None);
        // Other kinds and paths are untouched.
        test.root
            .put("_graph/HEAD", Bytes::from_static(b"x"))
            .await
            .unwrap();
        drop(fault);
        assert_eq!(
            test.root
                .put_if_absent("_graph/FORMAT", Bytes::from_static(b"v1"))
                .await
                .unwrap(),
            PutOutcome::Created
        );
    }
}

#[tokio::test]
async fn a_lost_acknowledgement_takes_effect_and_reports_failure() {
    for backend in BACKENDS {
        let test = TestRoot::new(backend).await;
        let fault = test
            .root
            .inject(FaultRule::new("*/commits/*", &[], FaultAction::LostAck).times(1));
        let error = test
            .root
            .put_if_absent(
                "_graph/branches/main/commits/7.json",
                Bytes::from_static(b"c"),
            )
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Storage(StorageKind::Transient));
        // The write happened: the read-back finds it (and the rule is spent).
        assert_eq!(
            test.root
                .get("_graph/branches/main/commits/7.json")
                .await
                .unwrap()
                .as_deref(),
            Some(&b"c"[..])
        );
        assert_eq!(fault.fired(), 1);
    }
}

#[tokio::test]
async fn fault_kinds_classify_back_to_their_storage_kind() {
    let test = TestRoot::new(Backend::Memory).await;
    for kind in StorageKind::ALL {
        let _fault = test.root.inject(FaultRule::new(
            "x",
            &[RequestKind::Get],
            FaultAction::FailBefore(kind),
        ));
        let error = test.root.get("x").await;
        match (kind, error) {
            // A NotFound read is an absent object, not an error.
            (StorageKind::NotFound, Ok(None)) => {}
            (kind, Err(error)) => assert_eq!(error.kind(), ErrorKind::Storage(kind)),
            (kind, Ok(found)) => panic!("{kind:?}: expected a failure, got {found:?}"),
        }
    }
}
