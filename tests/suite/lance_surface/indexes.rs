//! Indexes on detached versions: which follow a detached Rewrite (row-id domain) and
//! which lose coverage (BTree, address domain), and the two trainability traps.

use lance::index::DatasetIndexExt;
use omnigraph_core::adapter::{self, CompactionBudget, IndexBuild, IndexBuildKind, StagedLink};
use omnigraph_tests::{BACKENDS, Backend, TestRoot, ids_where, new_table, origin, rows};
use std::sync::Arc;

async fn build(link: &StagedLink, column: &str, name: &str, kind: IndexBuildKind) -> StagedLink {
    adapter::stage_index(
        &link.dataset,
        &IndexBuild {
            column: column.into(),
            name: name.into(),
            kind,
            replace: false,
        },
        &origin(1),
    )
    .await
    .unwrap_or_else(|error| panic!("build {name}: {error}"))
}

/// Fragment ids the named index covers among the table's live fragments.
async fn coverage(dataset: &Arc<lance::Dataset>, name: &str) -> Vec<u32> {
    let indexes = dataset.load_indices().await.unwrap();
    let index = indexes
        .iter()
        .find(|index| index.name == name)
        .expect("index listed");
    index
        .effective_fragment_bitmap(dataset.fragment_bitmap())
        .map(|bitmap| bitmap.iter().collect())
        .unwrap_or_default()
}

async fn plan_of(dataset: &lance::Dataset, filter: &str) -> String {
    let mut scanner = dataset.scan();
    scanner.filter(filter).unwrap();
    scanner.explain_plan(true).await.unwrap()
}

#[tokio::test]
async fn after_a_rewrite_row_id_indexes_follow_and_a_btree_loses_coverage() {
    for backend in BACKENDS {
        let test = TestRoot::new(backend).await;
        let table = new_table(&test.root, "t1").await;
        let mut tip = adapter::stage_append(&table, vec![rows(0, 100, false)], &origin(1))
            .await
            .unwrap();
        for round in 1..4 {
            tip = adapter::stage_append(
                &tip.dataset,
                vec![rows(round * 100, 100, false)],
                &origin(1),
            )
            .await
            .unwrap();
        }
        let tip = build(&tip, "id", "id_btree", IndexBuildKind::BTree).await;
        let tip = build(
            &tip,
            "vec",
            "vec_vector",
            IndexBuildKind::IvfFlat { partitions: 4 },
        )
        .await;
        let tip = build(&tip, "text", "text_fts", IndexBuildKind::FullText).await;
        for name in ["id_btree", "vec_vector", "text_fts"] {
            assert_eq!(
                coverage(&tip.dataset, name).await,
                vec![0, 1, 2, 3],
                "{backend:?} {name}"
            );
        }
        assert!(
            plan_of(&tip.dataset, "id >= 95 AND id < 125")
                .await
                .contains("id_btree")
        );

        let rewrite =
            adapter::stage_compaction(&tip.dataset, &CompactionBudget::default(), &origin(1))
                .await
                .unwrap()
                .expect("four fragments compact");
        let new_fragment = rewrite.dataset.manifest().fragments[0].id as u32;
        assert!(new_fragment > 3);
        assert_eq!(
            coverage(&rewrite.dataset, "vec_vector").await,
            vec![new_fragment],
            "{backend:?}"
        );
        assert_eq!(
            coverage(&rewrite.dataset, "text_fts").await,
            vec![new_fragment],
            "{backend:?}"
        );
        assert_eq!(
            coverage(&rewrite.dataset, "id_btree").await,
            Vec::<u32>::new(),
            "{backend:?}: the BTree no longer covers the rewritten rows and must be rebuilt"
        );
        // Results stay right either way; the BTree is simply not used.
        let plan = plan_of(&rewrite.dataset, "id >= 95 AND id < 125").await;
        assert!(!plan.contains("ScalarIndexQuery"), "{plan}");
        assert_eq!(
            ids_where(&rewrite.dataset, "id >= 95 AND id < 125").await,
            (95..125).collect::<Vec<_>>()
        );

        // Rebuilding under the same name (replace) restores coverage and use.
        let rebuilt = adapter::stage_index(
            &rewrite.dataset,
            &IndexBuild {
                column: "id".into(),
                name: "id_btree".into(),
                kind: IndexBuildKind::BTree,
                replace: true,
            },
            &origin(1),
        )
        .await
        .unwrap();
        let named: Vec<String> = rebuilt
            .dataset
            .load_indices()
            .await
            .unwrap()
            .iter()
            .map(|index| index.name.clone())
            .filter(|name| name == "id_btree")
            .collect();
        assert_eq!(named.len(), 1, "replace keeps one index under the name");
        assert_eq!(
            coverage(&rebuilt.dataset, "id_btree").await,
            vec![new_fragment]
        );
        assert!(
            plan_of(&rebuilt.dataset, "id >= 95 AND id < 125")
                .await
                .contains("id_btree")
        );
    }
}

#[tokio::test]
async fn ivf_flat_on_all_null_vectors_fails() {
    let test = TestRoot::new(Backend::Local).await;
    let table = new_table(&test.root, "t1").await;
    let tip = adapter::stage_append(&table, vec![rows(0, 300, true)], &origin(1))
        .await
        .unwrap();
    let error = adapter::stage_index(
        &tip.dataset,
        &IndexBuild {
            column: "vec".into(),
            name: "vec_vector".into(),
            kind: IndexBuildKind::IvfFlat { partitions: 4 },
            replace: false,
        },
        &origin(1),
    )
    .await
    .unwrap_err();
    assert!(error.to_string().contains("KMeans cannot train"), "{error}");
}

#[tokio::test]
async fn ivf_pq_on_too_few_rows_silently_builds_an_untrained_index() {
    let test = TestRoot::new(Backend::Local).await;
    let table = new_table(&test.root, "t1").await;
    let tip = adapter::stage_append(&table, vec![rows(0, 100, false)], &origin(1))
        .await
        .unwrap();
    let built = build(
        &tip,
        "vec",
        "vec_vector",
        IndexBuildKind::IvfPq {
            partitions: 2,
            sub_vectors: 2,
        },
    )
    .await;
    // No error, and an index is listed, but it covers nothing: the engine must judge
    // trainability itself (PQ needs 256 vectors).
    assert_eq!(
        coverage(&built.dataset, "vec_vector").await,
        Vec::<u32>::new()
    );
    let statistics: serde_json::Value =
        serde_json::from_str(&built.dataset.index_statistics("vec_vector").await.unwrap()).unwrap();
    assert_eq!(statistics["num_indexed_rows"], 0, "{statistics}");
    assert_eq!(statistics["num_unindexed_rows"], 100, "{statistics}");
}

#[tokio::test]
async fn ivf_sq_builds_and_reads_back_as_sized() {
    let test = TestRoot::new(Backend::Local).await;
    let table = new_table(&test.root, "t1").await;
    let tip = adapter::stage_append(&table, vec![rows(0, 600, false)], &origin(1))
        .await
        .unwrap();
    let built = build(
        &tip,
        "vec",
        "vec_vector",
        IndexBuildKind::IvfSq { partitions: 3 },
    )
    .await;
    assert_eq!(
        adapter::built_vector_index(&built.dataset, "vec_vector")
            .await
            .unwrap(),
        Some(adapter::BuiltVectorIndex {
            quantisation: adapter::Quantisation::Sq,
            partitions: 3
        })
    );
    let statistics: serde_json::Value =
        serde_json::from_str(&built.dataset.index_statistics("vec_vector").await.unwrap()).unwrap();
    assert_eq!(statistics["num_indexed_rows"], 600, "{statistics}");
}

#[tokio::test]
async fn a_full_text_index_keeps_word_positions_and_its_details_say_so() {
    let test = TestRoot::new(Backend::Memory).await;
    let table = new_table(&test.root, "t1").await;
    let tip = adapter::stage_append(&table, vec![rows(0, 40, false)], &origin(1))
        .await
        .unwrap();
    assert_eq!(
        adapter::full_text_positions(&tip.dataset, "text_fts")
            .await
            .unwrap(),
        None,
        "no index built yet"
    );
    let tip = build(&tip, "text", "text_fts", IndexBuildKind::FullText).await;
    assert_eq!(
        adapter::full_text_positions(&tip.dataset, "text_fts")
            .await
            .unwrap(),
        Some(true)
    );
    let params = adapter::built_full_text_params(&tip.dataset, "text_fts")
        .await
        .unwrap()
        .expect("the details decode");
    assert!(params.has_positions());
}
