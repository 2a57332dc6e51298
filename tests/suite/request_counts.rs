//! Exact object-store request counts for the adapter's hot paths, on a local folder and
//! in memory. Every request Lance makes passes through the root's wrapper.

use omnigraph_core::adapter;
use omnigraph_core::storage::RequestKind;
use omnigraph_tests::{BACKENDS, TestRoot, new_table, origin, rows};

#[tokio::test]
async fn one_detached_append_is_three_puts() {
    for backend in BACKENDS {
        let test = TestRoot::new(backend).await;
        let table = new_table(&test.root, "t1").await;
        let probe = test.root.probe();
        let link = adapter::stage_append(&table, vec![rows(0, 100, false)], &origin(1))
            .await
            .unwrap();
        let counts = probe.counts();
        let requests = probe.requests();
        assert_eq!(counts.total(), 3, "{backend:?}: {counts} {requests:?}");
        assert_eq!(counts.get(RequestKind::Put), 2, "{backend:?}: {requests:?}");
        assert_eq!(
            counts.get(RequestKind::PutIfAbsent),
            1,
            "{backend:?}: {requests:?}"
        );
        let paths: Vec<&str> = requests
            .iter()
            .map(|request| request.path.as_str())
            .collect();
        assert!(paths[0].starts_with("tables/t1/data/"), "{paths:?}");
        assert!(
            paths[1].starts_with("tables/t1/_transactions/"),
            "{paths:?}"
        );
        assert_eq!(
            paths[2],
            format!("tables/t1/_versions/d{}.manifest", link.version),
            "the manifest is the put-if-absent"
        );
        assert_eq!(requests[2].kind, RequestKind::PutIfAbsent);
    }
}

#[tokio::test]
async fn opening_a_table_at_a_detached_version_is_one_read() {
    for backend in BACKENDS {
        let test = TestRoot::new(backend).await;
        let table = new_table(&test.root, "t1").await;
        let link = adapter::stage_append(&table, vec![rows(0, 100, false)], &origin(1))
            .await
            .unwrap();
        // A fresh root handle: its own Lance session, nothing cached.
        let cold = test.reopen().await;
        let probe = cold.probe();
        let opened = adapter::open_table_at(&cold, "tables/t1", link.version)
            .await
            .unwrap();
        // Lance's HEAD for the manifest's size is answered by the GET of its last
        // block, which its read then takes: one request, not two.
        let counts = probe.counts();
        assert_eq!(
            counts.total(),
            1,
            "{backend:?}: {counts} {:?}",
            probe.requests()
        );
        assert_eq!(
            counts.get(RequestKind::RangedGet),
            1,
            "{backend:?}: {counts}"
        );
        assert_eq!(
            probe.requests()[0].path,
            format!("tables/t1/_versions/d{}.manifest", link.version)
        );
        assert_eq!(opened.count_rows(None).await.unwrap(), 100);
    }
}

#[tokio::test]
async fn opening_a_table_of_many_fragments_is_still_one_read() {
    // Fragments enough for a manifest many times Lance's 4 KiB local block.
    const FRAGMENTS: i64 = 120;
    for backend in BACKENDS {
        let test = TestRoot::new(backend).await;
        let mut table = new_table(&test.root, "t1").await;
        let mut version = 0;
        for n in 0..FRAGMENTS {
            let link = adapter::stage_append(&table, vec![rows(n, 1, false)], &origin(1))
                .await
                .unwrap();
            (table, version) = (link.dataset, link.version);
        }
        let manifest = format!("tables/t1/_versions/d{version}.manifest");
        let bytes = test.root.get(&manifest).await.unwrap().unwrap();
        // Many 4 KiB blocks, within one 64 KiB block.
        assert!(
            (16 << 10..64 << 10).contains(&bytes.len()),
            "{} bytes",
            bytes.len()
        );
        let cold = test.reopen().await;
        let probe = cold.probe();
        let opened = adapter::open_table_at(&cold, "tables/t1", version)
            .await
            .unwrap();
        let requests = probe.requests();
        let kinds: Vec<RequestKind> = requests.iter().map(|request| request.kind).collect();
        assert_eq!(kinds, [RequestKind::RangedGet], "{backend:?}: {requests:?}");
        assert!(requests.iter().all(|request| request.path == manifest));
        assert_eq!(opened.get_fragments().len() as i64, FRAGMENTS);
        assert_eq!(opened.count_rows(None).await.unwrap() as i64, FRAGMENTS);
    }
}
