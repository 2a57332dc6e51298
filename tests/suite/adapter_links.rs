//! Each adapter link on real Lance tables, on a local folder and in memory: what it
//! leaves readable, what it records, and what a failure leaves behind.

use omnigraph_core::adapter::{self, LinkKind};
use omnigraph_core::storage::RequestKind;
use omnigraph_core::{ErrorKind, Evidence, failpoints};
use omnigraph_tests::{
    BACKENDS, Backend, TestRoot, ids_and_row_ids, ids_where, new_table, origin, rows, string_of,
};

#[tokio::test]
async fn create_gives_an_empty_table_at_version_one() {
    for backend in BACKENDS {
        let test = TestRoot::new(backend).await;
        let table = new_table(&test.root, "t1").await;
        assert_eq!(adapter::version_of(&table), 1);
        assert_eq!(table.count_rows(None).await.unwrap(), 0);
        assert_eq!(
            table.schema().fields.len(),
            4,
            "{backend:?}: the type's Arrow schema"
        );
        assert!(table.manifest().uses_stable_row_ids());
        // Reopening at version 1 from a fresh handle on the root finds the same table.
        let again = adapter::open_table_at(&*test.reopen().await, "tables/t1", 1)
            .await
            .unwrap();
        assert_eq!(again.count_rows(None).await.unwrap(), 0);
    }
}

#[tokio::test]
async fn links_record_their_origin() {
    for backend in BACKENDS {
        let test = TestRoot::new(backend).await;
        let table = new_table(&test.root, "t1").await;
        let link_origin = omnigraph_core::adapter::LinkOrigin {
            branch: "feature-x".into(),
            base_seq: 41,
            base_version: 1,
        };
        let link = adapter::stage_append(&table, vec![rows(0, 10, false)], &link_origin)
            .await
            .unwrap();
        assert_eq!(link.kind, LinkKind::Append);
        assert_eq!(link.rows_affected, 10);
        let reopened = adapter::open_table_at(&*test.reopen().await, "tables/t1", link.version)
            .await
            .unwrap();
        assert_eq!(
            adapter::read_link_origin(&reopened).await.unwrap(),
            Some(link_origin),
            "{backend:?}"
        );
        // The creation is not a staged link.
        assert_eq!(adapter::read_link_origin(&table).await.unwrap(), None);
    }
}

#[tokio::test]
async fn delete_merge_and_update_links() {
    for backend in BACKENDS {
        let test = TestRoot::new(backend).await;
        let table = new_table(&test.root, "t1").await;
        let appended = adapter::stage_append(&table, vec![rows(0, 20, false)], &origin(1))
            .await
            .unwrap();

        let deleted = adapter::stage_delete(&appended.dataset, "id >= 15", &origin(1))
            .await
            .unwrap();
        assert_eq!(deleted.rows_affected, 5);
        assert_eq!(
            ids_where(&deleted.dataset, "true").await,
            (0..15).collect::<Vec<_>>()
        );

        // Upsert: ids 10..20 (10..15 exist, 15..20 are new).
        let merged = adapter::stage_merge_insert(
            &deleted.dataset,
            "id",
            vec![rows(10, 10, false)],
            &origin(1),
        )
        .await
        .unwrap();
        assert_eq!(merged.rows_affected, 10);
        assert_eq!(
            ids_where(&merged.dataset, "true").await,
            (0..20).collect::<Vec<_>>()
        );

        let before = ids_and_row_ids(&merged.dataset).await;
        let updated = adapter::stage_update(
            &merged.dataset,
            "id",
            "id < 3",
            &[("name".to_string(), "'renamed'".to_string())],
            &origin(1),
        )
        .await
        .unwrap()
        .expect("rows matched");
        assert_eq!(updated.kind, LinkKind::Update);
        assert_eq!(updated.rows_affected, 3);
        for id in 0..3 {
            assert_eq!(
                string_of(&updated.dataset, id, "name").await.as_deref(),
                Some("renamed")
            );
        }
        assert_eq!(
            string_of(&updated.dataset, 3, "name").await.as_deref(),
            Some("name-3")
        );
        // Every key survives the update exactly once; each link left the one before
        // it readable and unchanged.
        let after = ids_and_row_ids(&updated.dataset).await;
        let keys = |rows: &[(i64, u64)]| rows.iter().map(|(id, _)| *id).collect::<Vec<_>>();
        assert_eq!(keys(&after), keys(&before));
        assert_eq!(ids_and_row_ids(&merged.dataset).await, before);
        assert_eq!(
            string_of(&merged.dataset, 0, "name").await.as_deref(),
            Some("name-0")
        );
        // The linear history never moved.
        assert_eq!(table.latest_version_id().await.unwrap(), 1, "{backend:?}");
    }
}

#[tokio::test]
async fn an_update_keeps_stable_row_ids_of_untouched_rows() {
    let test = TestRoot::new(Backend::Local).await;
    let table = new_table(&test.root, "t1").await;
    let appended = adapter::stage_append(&table, vec![rows(0, 10, false)], &origin(1))
        .await
        .unwrap();
    let before = ids_and_row_ids(&appended.dataset).await;
    let updated = adapter::stage_update(
        &appended.dataset,
        "id",
        "id = 4",
        &[("text".to_string(), "'changed'".to_string())],
        &origin(1),
    )
    .await
    .unwrap()
    .expect("a row matched");
    // No row matches: nothing is staged.
    let nothing = adapter::stage_update(
        &updated.dataset,
        "id",
        "id = 999",
        &[("text".to_string(), "'changed'".to_string())],
        &origin(1),
    )
    .await
    .unwrap();
    assert!(nothing.is_none());
    let after = ids_and_row_ids(&updated.dataset).await;
    for (id, row_id) in &before {
        if *id != 4 {
            assert!(after.contains(&(*id, *row_id)), "row {id} kept its row id");
        }
    }
    let row_ids: std::collections::HashSet<u64> = after.iter().map(|(_, row_id)| *row_id).collect();
    assert_eq!(row_ids.len(), after.len(), "stable row ids stay unique");
}

#[tokio::test]
async fn bad_predicates_and_assignments_are_bad_input() {
    let test = TestRoot::new(Backend::Memory).await;
    let table = new_table(&test.root, "t1").await;
    let error = adapter::stage_delete(&table, "no_such_column > 3", &origin(1))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadInput, "{error}");
    assert_eq!(error.evidence(), &Evidence::BeforeEffect);
    let error = adapter::stage_update(
        &table,
        "id",
        "true",
        &[("id".to_string(), "7".to_string())],
        &origin(1),
    )
    .await
    .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadInput);
    assert!(error.to_string().contains("key"), "{error}");
}

#[tokio::test]
async fn a_failure_before_the_manifest_leaves_unpublished_files_and_no_version() {
    for backend in BACKENDS {
        let test = TestRoot::new(backend).await;
        let table = new_table(&test.root, "t1").await;
        let error = {
            let armed = failpoints::arm(failpoints::STAGE_BEFORE_MANIFEST, "return");
            armed
                .run(adapter::stage_append(
                    &table,
                    vec![rows(0, 10, false)],
                    &origin(1),
                ))
                .await
                .unwrap_err()
        };
        assert_eq!(error.evidence(), &Evidence::Unpublished, "{backend:?}");
        assert!(table.list_detached_manifests().await.unwrap().is_empty());
        let data_files = test.root.list("tables/t1/data").await.unwrap();
        assert_eq!(
            data_files.len(),
            1,
            "the staged data file is durable: {data_files:?}"
        );
        // The retry stages cleanly.
        let link = adapter::stage_append(&table, vec![rows(0, 10, false)], &origin(1))
            .await
            .unwrap();
        assert_eq!(link.dataset.count_rows(None).await.unwrap(), 10);
    }
}

#[tokio::test]
async fn a_compaction_restaged_twice_carries_every_delete_since_without_writing_rows_again() {
    for backend in BACKENDS {
        let test = TestRoot::new(backend).await;
        let table = new_table(&test.root, "t1").await;
        // Four fragments of five rows; row 2 deleted before the compaction is planned.
        let mut base = table;
        for start in [0, 5, 10, 15] {
            base = adapter::stage_append(&base, vec![rows(start, 5, false)], &origin(1))
                .await
                .unwrap()
                .dataset;
        }
        base = adapter::stage_delete(&base, "id = 2", &origin(1))
            .await
            .unwrap()
            .dataset;
        let before = ids_and_row_ids(&base).await;
        let budget = adapter::CompactionBudget::default();
        let compaction = adapter::stage_compaction(&base, &budget, &origin(1))
            .await
            .unwrap()
            .expect("four small fragments compact");
        // A writer deletes on the base the compaction was planned on, twice; each
        // time the compaction is staged again on the writer's newer version.
        let newer = adapter::stage_delete(&base, "id = 6 OR id = 11", &origin(1))
            .await
            .unwrap()
            .dataset;
        let probe = test.root.probe();
        let first = adapter::restage_compaction(&compaction, &newer, &budget, &origin(1))
            .await
            .unwrap()
            .expect("the group follows");
        let newest = adapter::stage_delete(&newer, "id = 0 OR id >= 15", &origin(1))
            .await
            .unwrap()
            .dataset;
        let second = adapter::restage_compaction(&first, &newest, &budget, &origin(1))
            .await
            .unwrap()
            .expect("the group follows again");
        // The writer's deletes write deletion files only; so does carrying them over.
        let rows_written: Vec<String> = probe
            .requests()
            .into_iter()
            .filter(|request| {
                matches!(request.kind, RequestKind::Put | RequestKind::PutIfAbsent)
                    && request.path.starts_with("tables/t1/data/")
            })
            .map(|request| request.path)
            .collect();
        assert!(
            rows_written.is_empty(),
            "{backend:?}: no row is written again: {rows_written:?}"
        );
        for (link, deleted) in [
            (&first, vec![2, 6, 11]),
            (&second, vec![0, 2, 6, 11, 15, 16, 17, 18, 19]),
        ] {
            let expected: Vec<(i64, u64)> = before
                .iter()
                .filter(|(id, _)| !deleted.contains(id))
                .cloned()
                .collect();
            assert_eq!(
                ids_and_row_ids(&link.dataset).await,
                expected,
                "{backend:?}: every other row, with its stable row id"
            );
            assert_eq!(
                link.dataset.manifest().fragments.len(),
                1,
                "{backend:?}: one compacted fragment"
            );
        }
        // A fresh handle reads the same from storage.
        let reopened = adapter::open_table_at(&*test.reopen().await, "tables/t1", second.version)
            .await
            .unwrap();
        assert_eq!(
            ids_where(&reopened, "true").await,
            vec![1, 3, 4, 5, 7, 8, 9, 10, 12, 13, 14]
        );
    }
}
