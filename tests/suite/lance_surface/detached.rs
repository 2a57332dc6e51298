//! Detached versions: stacking, siblings from one base, re-commit on a newer base, and a
//! detached Rewrite.

use omnigraph_core::adapter::{self, CompactionBudget};
use omnigraph_tests::{BACKENDS, TestRoot, ids_and_row_ids, new_table, origin, rows};
use std::collections::HashSet;

fn fragment_ids(dataset: &lance::Dataset) -> Vec<u64> {
    dataset.manifest().fragments.iter().map(|f| f.id).collect()
}

fn assert_unique_row_ids(rows: &[(i64, u64)]) {
    let unique: HashSet<u64> = rows.iter().map(|(_, row_id)| *row_id).collect();
    assert_eq!(unique.len(), rows.len(), "stable row ids must be unique");
}

#[tokio::test]
async fn stacked_detached_versions_read_correctly_and_never_move_the_linear_head() {
    for backend in BACKENDS {
        let test = TestRoot::new(backend).await;
        let table = new_table(&test.root, "t1").await;
        let first = adapter::stage_append(&table, vec![rows(0, 100, false)], &origin(1))
            .await
            .unwrap();
        let second = adapter::stage_append(&first.dataset, vec![rows(100, 50, false)], &origin(1))
            .await
            .unwrap();
        assert!(adapter::is_detached(first.version) && adapter::is_detached(second.version));
        assert_ne!(first.version, second.version);

        let fresh = test.reopen().await;
        let at_first = adapter::open_table_at(&fresh, "tables/t1", first.version)
            .await
            .unwrap();
        let at_second = adapter::open_table_at(&fresh, "tables/t1", second.version)
            .await
            .unwrap();
        assert_eq!(at_first.count_rows(None).await.unwrap(), 100, "{backend:?}");
        assert_eq!(
            at_second.count_rows(None).await.unwrap(),
            150,
            "{backend:?}"
        );
        let second_rows = ids_and_row_ids(&at_second).await;
        assert_eq!(second_rows.len(), 150);
        assert_unique_row_ids(&second_rows);

        // Lance's linear history is still only the creation.
        assert_eq!(at_second.latest_version_id().await.unwrap(), 1);
        let versions: Vec<u64> = table
            .versions()
            .await
            .unwrap()
            .iter()
            .map(|v| v.version)
            .collect();
        assert_eq!(versions, vec![1]);
        let latest = adapter::open_table_at(&fresh, "tables/t1", 1)
            .await
            .unwrap();
        assert_eq!(latest.count_rows(None).await.unwrap(), 0);
        assert_eq!(table.list_detached_manifests().await.unwrap().len(), 2);
    }
}

#[tokio::test]
async fn two_detached_appends_from_one_base_both_read_correctly() {
    for backend in BACKENDS {
        let test = TestRoot::new(backend).await;
        let table = new_table(&test.root, "t1").await;
        let base = adapter::stage_append(&table, vec![rows(0, 100, false)], &origin(1))
            .await
            .unwrap();
        let left = adapter::stage_append(&base.dataset, vec![rows(1000, 30, false)], &origin(1))
            .await
            .unwrap();
        let right = adapter::stage_append(&base.dataset, vec![rows(2000, 40, false)], &origin(1))
            .await
            .unwrap();
        assert_eq!(
            left.dataset.count_rows(None).await.unwrap(),
            130,
            "{backend:?}"
        );
        assert_eq!(
            right.dataset.count_rows(None).await.unwrap(),
            140,
            "{backend:?}"
        );
        // Siblings are numbered from the same base: their new fragment ids and stable row
        // ids collide, which is why a sibling is re-committed, never merged by id.
        assert_eq!(fragment_ids(&left.dataset), fragment_ids(&right.dataset));
        let left_new: Vec<u64> = ids_and_row_ids(&left.dataset)
            .await
            .iter()
            .filter(|(id, _)| *id >= 1000)
            .map(|(_, r)| *r)
            .collect();
        let right_new: Vec<u64> = ids_and_row_ids(&right.dataset)
            .await
            .iter()
            .filter(|(id, _)| *id >= 2000)
            .map(|(_, r)| *r)
            .collect();
        assert_eq!(left_new[..30], right_new[..30]);
    }
}

#[tokio::test]
async fn a_staged_append_recommitted_on_a_newer_base_is_renumbered_cleanly() {
    for backend in BACKENDS {
        let test = TestRoot::new(backend).await;
        let table = new_table(&test.root, "t1").await;
        let base = adapter::stage_append(&table, vec![rows(0, 100, false)], &origin(1))
            .await
            .unwrap();
        let winner = adapter::stage_append(&base.dataset, vec![rows(1000, 30, false)], &origin(1))
            .await
            .unwrap();
        let loser = adapter::stage_append(&base.dataset, vec![rows(2000, 40, false)], &origin(1))
            .await
            .unwrap();
        let rebased = adapter::recommit_append(&loser, &winner.dataset, &origin(winner.version))
            .await
            .unwrap();
        assert_eq!(rebased.rows_affected, 40);
        let all = ids_and_row_ids(&rebased.dataset).await;
        assert_eq!(all.len(), 170, "{backend:?}");
        assert_unique_row_ids(&all);
        let ids = fragment_ids(&rebased.dataset);
        let unique: HashSet<u64> = ids.iter().copied().collect();
        assert_eq!(unique.len(), ids.len(), "fragment ids are unique: {ids:?}");
        // The winner's rows keep their row ids; the loser's rows get fresh ones.
        let winner_rows = ids_and_row_ids(&winner.dataset).await;
        for row in &winner_rows {
            assert!(all.contains(row));
        }
        let origin_read = adapter::read_link_origin(&rebased.dataset)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(origin_read.base_version, winner.version);
        // A non-append cannot be re-committed: its ids belong to its base.
        let delete = adapter::stage_delete(&base.dataset, "id < 5", &origin(1))
            .await
            .unwrap();
        let error = adapter::recommit_append(&delete, &winner.dataset, &origin(1))
            .await
            .unwrap_err();
        assert!(error.to_string().contains("only an append"), "{error}");
    }
}

#[tokio::test]
async fn a_detached_rewrite_keeps_every_row_and_its_stable_row_id() {
    for backend in BACKENDS {
        let test = TestRoot::new(backend).await;
        let table = new_table(&test.root, "t1").await;
        let mut tip = adapter::stage_append(&table, vec![rows(0, 10, false)], &origin(1))
            .await
            .unwrap();
        for round in 1..20 {
            tip =
                adapter::stage_append(&tip.dataset, vec![rows(round * 10, 10, false)], &origin(1))
                    .await
                    .unwrap();
        }
        let deleted = adapter::stage_delete(&tip.dataset, "id % 7 = 0", &origin(1))
            .await
            .unwrap();
        let before = ids_and_row_ids(&deleted.dataset).await;
        let base_max = deleted.dataset.manifest().max_fragment_id().unwrap();
        assert_eq!(deleted.dataset.manifest().fragments.len(), 20);

        let rewrite =
            adapter::stage_compaction(&deleted.dataset, &CompactionBudget::default(), &origin(1))
                .await
                .unwrap()
                .expect("twenty small fragments need compaction");
        let after = ids_and_row_ids(&rewrite.dataset).await;
        assert_eq!(
            after, before,
            "{backend:?}: every row and its stable row id"
        );
        let new_ids = fragment_ids(&rewrite.dataset);
        assert_eq!(new_ids.len(), 1, "{new_ids:?}");
        assert!(
            new_ids.iter().all(|id| *id > base_max),
            "new ids above {base_max}: {new_ids:?}"
        );
        assert_eq!(rewrite.rows_affected, before.len() as u64);
        assert_eq!(
            table.latest_version_id().await.unwrap(),
            1,
            "nothing on the linear lineage"
        );
        // Nothing left to do: compaction of one fragment plans no task.
        let again =
            adapter::stage_compaction(&rewrite.dataset, &CompactionBudget::default(), &origin(1))
                .await
                .unwrap();
        assert!(again.is_none());
    }
}
