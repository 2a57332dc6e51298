//! Why Lance's own version cleanup is forbidden on data tables: it sees only linear
//! manifests, so the files of detached versions look unreferenced and are deleted.
//! This file is the one place the guard lets that API be named.

use lance::index::DatasetIndexExt;
use omnigraph_core::adapter::{self, IndexBuild, IndexBuildKind};
use omnigraph_tests::{Backend, TestRoot, new_table, origin, rows};

#[tokio::test]
async fn lance_cleanup_deletes_the_files_of_detached_versions() {
    let test = TestRoot::new(Backend::Local).await;
    let table = new_table(&test.root, "t1").await;
    let appended = adapter::stage_append(&table, vec![rows(0, 150, false)], &origin(1))
        .await
        .unwrap();
    let indexed = adapter::stage_index(
        &appended.dataset,
        &IndexBuild {
            column: "id".into(),
            name: "id_btree".into(),
            kind: IndexBuildKind::BTree,
            replace: false,
        },
        &origin(1),
    )
    .await
    .unwrap();
    assert_eq!(indexed.dataset.load_indices().await.unwrap().len(), 1);
    let data_before = test.root.list("tables/t1/data").await.unwrap();
    assert_eq!(data_before.len(), 1);

    let stats = table
        .cleanup_old_versions(chrono::Duration::zero(), Some(true), None)
        .await
        .unwrap();
    assert_eq!(stats.data_files_removed, 1, "{stats:?}");
    assert!(stats.index_files_removed >= 1, "{stats:?}");
    assert!(test.root.list("tables/t1/data").await.unwrap().is_empty());

    // The detached version still opens (its manifest is kept) but its rows are gone.
    let reopened = adapter::open_table_at(&*test.reopen().await, "tables/t1", indexed.version)
        .await
        .unwrap();
    let scan = reopened.scan().try_into_batch().await;
    assert!(
        scan.is_err(),
        "the detached version's data files were deleted"
    );
}
