//! Merging branches: per-table fast-forwards, row merges by key, typed conflicts that
//! publish nothing, no dangling edge, a merge that loses its CAS to a writer (it plans
//! again, and a starved one reserves), the base that moves with each merge, and a merge
//! beside a branch deletion and cleanup.

use omnigraph_core::storage::{FaultAction, FaultRule, RequestKind};
use omnigraph_core::{ErrorKind, Evidence, MergeConflictKind, OmniError, failpoints, seams};
use omnigraph_graph::{Omnigraph, TableMergeAction};
use omnigraph_maintenance::MaintenanceExt;
use omnigraph_publish::CommitRef;
use omnigraph_tests::{Backend, SOCIAL_SCHEMA, TestRoot, ids_at, objects, on_branch};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// main with people p0..p3 and companies c0, c1 (p0 works at c0), and a branch
/// `feature` from its head.
async fn forked(backend: Backend) -> (Omnigraph, Omnigraph, TestRoot) {
    let test = TestRoot::new(backend).await;
    let main = Omnigraph::create(&test.uri, SOCIAL_SCHEMA).await.unwrap();
    let people: Vec<Value> = (0..4)
        .map(|index| json!({"id": format!("p{index}"), "name": "n", "age": index}))
        .collect();
    main.insert_json("Person", objects(json!(people)))
        .await
        .unwrap();
    main.insert_json(
        "Company",
        objects(json!([{"id": "c0", "name": "c"}, {"id": "c1", "name": "c"}])),
    )
    .await
    .unwrap();
    main.insert_json(
        "WorksAt",
        objects(json!([{"id": "w0", "src": "p0", "dst": "c0"}])),
    )
    .await
    .unwrap();
    main.create_branch("feature", &CommitRef::Head)
        .await
        .unwrap();
    let feature = on_branch(&main, "feature").await;
    (main, feature, test)
}

async fn insert(graph: &Omnigraph, type_name: &str, rows: Value) {
    graph.insert_json(type_name, objects(rows)).await.unwrap();
}

async fn age(graph: &Omnigraph, id: &str) -> Option<Value> {
    graph
        .get("Person", &json!(id), &CommitRef::Head)
        .await
        .unwrap()
        .map(|row| row["age"].clone())
}

fn action(report: &omnigraph_graph::MergeReport, type_name: &str) -> TableMergeAction {
    report
        .tables
        .iter()
        .find(|table| table.type_name == type_name)
        .unwrap()
        .action
}

fn conflicts(error: &OmniError) -> Vec<(String, String, MergeConflictKind)> {
    match error {
        OmniError::MergeConflict { conflicts, .. } => conflicts
            .iter()
            .map(|conflict| {
                (
                    conflict.type_name.clone(),
                    conflict.key.clone(),
                    conflict.kind,
                )
            })
            .collect(),
        other => panic!("not a merge conflict: {other}"),
    }
}

#[tokio::test]
async fn a_table_only_the_source_changed_is_fast_forwarded_and_the_others_kept() {
    for backend in omnigraph_tests::BACKENDS {
        let (main, feature, _test) = forked(backend).await;
        insert(&feature, "Person", json!([{"id": "f1", "name": "n"}])).await;
        insert(&main, "Company", json!([{"id": "m1", "name": "c"}])).await;
        let before = main.head().await.unwrap();

        let dry = main.merge_dry_run("feature").await.unwrap();
        assert!(dry.commit.is_none() && dry.conflicts.is_empty());
        assert_eq!(
            main.head().await.unwrap(),
            before,
            "a dry run changes nothing"
        );
        let report = main.merge("feature").await.unwrap();
        assert_eq!(action(&dry, "Person"), TableMergeAction::FastForward);
        assert_eq!(action(&report, "Person"), TableMergeAction::FastForward);
        assert_eq!(action(&report, "Company"), TableMergeAction::Keep);
        assert_eq!(action(&report, "WorksAt"), TableMergeAction::Unchanged);
        let commit = report.commit.unwrap();
        assert_eq!(commit.seq, before.seq + 1, "one commit on the target");
        let source = feature.head().await.unwrap();
        assert_eq!(
            commit.pin_of_type("Person"),
            source.pin_of_type("Person"),
            "the source's pin, not a copy"
        );
        assert_eq!(commit.merged_from[0].seq, source.seq);
        assert_eq!(
            ids_at(&main, "Person", &CommitRef::Head).await,
            ["f1", "p0", "p1", "p2", "p3"]
        );
        assert_eq!(
            ids_at(&main, "Company", &CommitRef::Head).await,
            ["c0", "c1", "m1"]
        );
        // The source is untouched, and merging again has nothing to do.
        assert_eq!(
            ids_at(&feature, "Company", &CommitRef::Head).await,
            ["c0", "c1"]
        );
        let again = main.merge("feature").await.unwrap();
        assert!(again.commit.is_none(), "{again:?}");
    }
}

#[tokio::test]
async fn disjoint_changes_to_one_table_merge_by_key() {
    let (main, feature, _test) = forked(Backend::Local).await;
    insert(&feature, "Person", json!([{"id": "f1", "name": "n"}])).await;
    feature
        .update("Person", "id = 'p1'", &[("age".into(), json!(41))])
        .await
        .unwrap();
    feature.delete("Person", "id = 'p3'").await.unwrap();
    insert(&main, "Person", json!([{"id": "m1", "name": "n"}])).await;
    main.update("Person", "id = 'p2'", &[("age".into(), json!(42))])
        .await
        .unwrap();
    // The same change on both sides is no conflict.
    for graph in [&main, &feature] {
        graph
            .update("Person", "id = 'p0'", &[("age".into(), json!(40))])
            .await
            .unwrap();
    }

    let report = main.merge("feature").await.unwrap();
    let person = report
        .tables
        .iter()
        .find(|table| table.type_name == "Person")
        .unwrap();
    assert_eq!(person.action, TableMergeAction::RowMerge);
    assert_eq!(
        (person.taken, person.deleted),
        (2, 1),
        "f1 and p1 taken, p3 deleted"
    );
    assert_eq!(
        ids_at(&main, "Person", &CommitRef::Head).await,
        ["f1", "m1", "p0", "p1", "p2"]
    );
    assert_eq!(age(&main, "p0").await, Some(json!(40)));
    assert_eq!(age(&main, "p1").await, Some(json!(41)));
    assert_eq!(age(&main, "p2").await, Some(json!(42)));
    // A key check on the merged table sees the merged keys.
    let error = main
        .insert_json("Person", objects(json!([{"id": "f1", "name": "again"}])))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::KeyConflict, "{error}");
}

#[tokio::test]
async fn keys_changed_on_both_sides_or_deleted_on_one_are_conflicts_and_publish_nothing() {
    let (main, feature, _test) = forked(Backend::Memory).await;
    for (graph, age) in [(&main, 50), (&feature, 51)] {
        graph
            .update("Person", "id = 'p1'", &[("age".into(), json!(age))])
            .await
            .unwrap();
    }
    feature.delete("Person", "id = 'p2'").await.unwrap();
    main.update("Person", "id = 'p2'", &[("age".into(), json!(52))])
        .await
        .unwrap();
    // Added on both sides with different values.
    insert(&main, "Person", json!([{"id": "both", "name": "main's"}])).await;
    insert(
        &feature,
        "Person",
        json!([{"id": "both", "name": "feature's"}]),
    )
    .await;
    let before = main.head().await.unwrap();

    let error = main.merge("feature").await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::MergeConflict, "{error}");
    assert_eq!(error.evidence(), &omnigraph_core::Evidence::BeforeEffect);
    assert_eq!(
        conflicts(&error),
        [
            (
                "Person".to_string(),
                "\"both\"".to_string(),
                MergeConflictKind::ChangedOnBoth
            ),
            (
                "Person".to_string(),
                "\"p1\"".to_string(),
                MergeConflictKind::ChangedOnBoth
            ),
            (
                "Person".to_string(),
                "\"p2\"".to_string(),
                MergeConflictKind::DeletedAndChanged
            ),
        ]
    );
    assert!(error.to_string().contains("3 conflicts"), "{error}");
    assert_eq!(main.head().await.unwrap(), before, "nothing published");
    assert_eq!(age(&main, "p1").await, Some(json!(50)));
    let dry = main.merge_dry_run("feature").await.unwrap();
    assert_eq!(dry.conflicts.len(), 3);
}

#[test]
fn a_merge_never_leaves_an_edge_without_its_endpoints() {
    // In a debug build this test's own body takes over 600 KiB of stack (the futures
    // of two merges, two deletes and the inserts), and an insert under it about 1.2 MiB
    // more: past a test thread's 2 MiB. See `on_a_big_stack`.
    omnigraph_tests::on_a_big_stack(a_merge_keeps_every_edge_with_its_endpoints);
}

async fn a_merge_keeps_every_edge_with_its_endpoints() {
    // The source adds an edge to a company the target deleted.
    let (main, feature, _test) = forked(Backend::Memory).await;
    insert(
        &feature,
        "WorksAt",
        json!([{"id": "w1", "src": "p1", "dst": "c1"}]),
    )
    .await;
    main.delete("Company", "id = 'c1'").await.unwrap();
    let error = main.merge("feature").await.unwrap_err();
    assert_eq!(
        conflicts(&error),
        [(
            "WorksAt".to_string(),
            "\"w1\"".to_string(),
            MergeConflictKind::DanglingEdge
        )]
    );

    // The target adds an edge to a person the source deleted.
    let (main, feature, _test) = forked(Backend::Memory).await;
    insert(
        &main,
        "WorksAt",
        json!([{"id": "w2", "src": "p2", "dst": "c1"}]),
    )
    .await;
    feature.delete("Person", "id = 'p2'").await.unwrap();
    let error = main.merge("feature").await.unwrap_err();
    assert_eq!(
        conflicts(&error),
        [(
            "WorksAt".to_string(),
            "\"w2\"".to_string(),
            MergeConflictKind::DanglingEdge
        )]
    );

    // Both sides change edges and nodes, and every endpoint survives: the merge lands.
    let (main, feature, _test) = forked(Backend::Memory).await;
    insert(
        &feature,
        "WorksAt",
        json!([{"id": "w3", "src": "p3", "dst": "c1"}]),
    )
    .await;
    insert(
        &main,
        "WorksAt",
        json!([{"id": "w4", "src": "p1", "dst": "c0"}]),
    )
    .await;
    main.delete("Person", "id = 'p0'").await.unwrap();
    main.merge("feature").await.unwrap();
    let edges = ids_at(&main, "WorksAt", &CommitRef::Head).await;
    assert_eq!(edges, ["w3", "w4"], "w0 went with p0");
}

#[tokio::test]
async fn a_merge_that_loses_its_cas_to_a_writer_plans_again_and_lands() {
    let (main, feature, test) = forked(Backend::Local).await;
    insert(&feature, "Person", json!([{"id": "f1", "name": "n"}])).await;
    insert(&main, "Person", json!([{"id": "m0", "name": "n"}])).await;
    // The merge's staged rows of Person are held while a writer publishes on main.
    // (A writer on a handle of this process would wait at the branch's publication
    // gate instead: the race needs the writer to publish while the merge stages.)
    let person = omnigraph_tests::head_table_id(&main, "Person").await;
    let fault = main.graph().root().inject(FaultRule::new(
        format!("tables/{person}/data/*"),
        &[RequestKind::Put, RequestKind::PutIfAbsent],
        FaultAction::Delay(Duration::from_secs(1)),
    ));
    let merging = main.merge("feature");
    let racing = async {
        while fault.fired() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // While the merge stages, a writer on another handle publishes on main.
        let writer = Omnigraph::open(&test.uri).await.unwrap();
        insert(&writer, "Company", json!([{"id": "raced", "name": "c"}])).await;
    };
    let (merged, ()) = tokio::join!(merging, racing);
    drop(fault);
    // It lost its slot, planned again on the head that beat it, and landed after it.
    let report = merged.unwrap();
    let raced = main.head().await.unwrap().seq - 1;
    assert_eq!(
        report.into_seq, raced,
        "the second plan is on the writer's commit"
    );
    assert!(report.commit.is_some());
    assert_eq!(
        ids_at(&main, "Person", &CommitRef::Head).await,
        ["f1", "m0", "p0", "p1", "p2", "p3"]
    );
    assert_eq!(
        ids_at(&main, "Company", &CommitRef::Head).await,
        ["c0", "c1", "raced"]
    );
}

#[tokio::test]
async fn each_merge_moves_the_base_so_a_later_merge_never_undoes_the_target() {
    let (main, feature, _test) = forked(Backend::Memory).await;
    insert(&feature, "Person", json!([{"id": "f1", "name": "n"}])).await;
    main.merge("feature").await.unwrap();
    // The target deletes what it merged, and the source writes on elsewhere.
    main.delete("Person", "id = 'f1'").await.unwrap();
    feature
        .update("Person", "id = 'p1'", &[("age".into(), json!(7))])
        .await
        .unwrap();
    let report = main.merge("feature").await.unwrap();
    assert_eq!(
        report.base_branch, "feature",
        "the base is the last merged commit"
    );
    assert_eq!(
        ids_at(&main, "Person", &CommitRef::Head).await,
        ["p0", "p1", "p2", "p3"],
        "f1 stays deleted"
    );
    assert_eq!(age(&main, "p1").await, Some(json!(7)));

    // Merging main back into the branch brings the target's changes over.
    feature.merge("main").await.unwrap();
    assert_eq!(
        ids_at(&feature, "Person", &CommitRef::Head).await,
        ["p0", "p1", "p2", "p3"]
    );
    // Branches related only through a third (both forked from main) have no merge
    // base the engine knows: it refuses rather than guess.
    main.create_branch("other", &CommitRef::Head).await.unwrap();
    let other = on_branch(&main, "other").await;
    let unrelated = other.merge("feature").await.unwrap_err();
    assert_eq!(unrelated.kind(), ErrorKind::BadInput, "{unrelated}");
}

#[tokio::test]
async fn cleanup_keeps_a_branchs_merge_base_readable() {
    let (main, feature, _test) = forked(Backend::Local).await;
    insert(&feature, "Person", json!([{"id": "f1", "name": "n"}])).await;
    // Main moves on far past the fork, and cleanup keeps one commit of each branch.
    for index in 0..3 {
        main.update("Person", "id = 'p1'", &[("age".into(), json!(100 + index))])
            .await
            .unwrap();
    }
    let later = Duration::from_secs(5 * 60);
    let report = omnigraph_tests::cleanup_keeping_one_after(&main, later).await;
    assert_eq!(report.totals.tables_failed, 0, "{report:?}");
    assert!(report.totals.manifests_removed > 0, "{report:?}");
    // Person changed on both sides: the merge reads its base version, which main's
    // own history no longer retains.
    let merged = omnigraph_tests::later_by(later, main.merge("feature"))
        .await
        .unwrap();
    assert_eq!(action(&merged, "Person"), TableMergeAction::RowMerge);
    assert_eq!(
        ids_at(&main, "Person", &CommitRef::Head).await,
        ["f1", "p0", "p1", "p2", "p3"]
    );
    assert_eq!(age(&main, "p1").await, Some(json!(102)));
}

#[tokio::test]
async fn a_merge_never_takes_its_base_from_an_earlier_life_of_a_branch() {
    let (main, feature, _test) = forked(Backend::Memory).await;
    let forked_at = main.head().await.unwrap().seq;
    insert(&feature, "Person", json!([{"id": "f1", "name": "n"}])).await;
    main.merge("feature").await.unwrap();
    // The branch goes, and a new life of it starts from main before the merge.
    main.delete_branch("feature").await.unwrap();
    main.create_branch("feature", &CommitRef::Seq(forked_at))
        .await
        .unwrap();
    let reborn = on_branch(&main, "feature").await;
    insert(&reborn, "Person", json!([{"id": "f2", "name": "n"}])).await;
    let report = main.merge("feature").await.unwrap();
    assert_eq!(
        report.base_branch, "main",
        "the new life's fork point, not the old merge"
    );
    assert_eq!(
        ids_at(&main, "Person", &CommitRef::Head).await,
        ["f1", "f2", "p0", "p1", "p2", "p3"],
        "what main merged from the old life stays"
    );
}

#[tokio::test]
async fn a_full_record_of_merges_drops_only_ended_branches_and_refuses_otherwise() {
    let (main, feature, _test) = forked(Backend::Memory).await;
    let max = omnigraph_publish::limits::MERGED_FROM_MAX;
    insert(&feature, "Person", json!([{"id": "f", "name": "n"}])).await;
    // `feature`, then b0 .. b62, each add a person and are merged.
    main.merge("feature").await.unwrap();
    for index in 0..max - 1 {
        let name = format!("b{index}");
        main.create_branch(&name, &CommitRef::Head).await.unwrap();
        insert(
            &on_branch(&main, &name).await,
            "Person",
            json!([{"id": name, "name": "n"}]),
        )
        .await;
        main.merge(&name).await.unwrap();
    }
    assert_eq!(main.head().await.unwrap().merged_from.len(), max);
    main.create_branch("late", &CommitRef::Head).await.unwrap();
    insert(
        &on_branch(&main, "late").await,
        "Person",
        json!([{"id": "late", "name": "n"}]),
    )
    .await;
    let full = main.merge("late").await.unwrap_err();
    assert_eq!(full.kind(), ErrorKind::BadInput, "{full}");
    // Once merged branches are deleted, their entries make room; live ones stay.
    for index in 1..max - 1 {
        main.delete_branch(&format!("b{index}")).await.unwrap();
    }
    main.merge("late").await.unwrap();
    let record: Vec<String> = main
        .head()
        .await
        .unwrap()
        .merged_from
        .iter()
        .map(|merged| merged.branch.clone())
        .collect();
    assert_eq!(record, ["feature", "b0", "late"]);
}

/// [`SOCIAL_SCHEMA`] with an optional `city` on Company and a new type, Project.
const WITH_CITY: &str = "
node Person { id: String @key, name: String @index(fts), age: Int32? @index }
node Company { id: String @key, name: String, city: String? }
node Project { id: String @key, name: String }
edge WorksAt: Person -> Company { since: Int32? }
";

/// [`SOCIAL_SCHEMA`] with an optional `email` on Person.
const WITH_EMAIL: &str = "
node Person { id: String @key, name: String @index(fts), age: Int32? @index, email: String? }
node Company { id: String @key, name: String }
edge WorksAt: Person -> Company { since: Int32? }
";

async fn city(graph: &Omnigraph, id: &str) -> Option<Value> {
    graph
        .get("Company", &json!(id), &CommitRef::Head)
        .await
        .unwrap()
        .map(|row| row["city"].clone())
}

/// `graph` moves to [`WITH_CITY`] and writes a company with a city and a project.
async fn city_and_project_on(graph: &Omnigraph) {
    graph.apply_schema(WITH_CITY, false).await.unwrap();
    insert(
        graph,
        "Company",
        json!([{"id": "f1", "name": "c", "city": "Oslo"}]),
    )
    .await;
    insert(graph, "Project", json!([{"id": "x", "name": "x"}])).await;
}

#[tokio::test]
async fn a_schema_change_on_the_source_merges_when_the_target_did_not_write_its_types() {
    let (main, feature, _test) = forked(Backend::Memory).await;
    city_and_project_on(&feature).await;
    insert(&main, "Person", json!([{"id": "m1", "name": "n"}])).await;
    let report = main.merge("feature").await.unwrap();
    assert_eq!(action(&report, "Company"), TableMergeAction::FastForward);
    assert_eq!(action(&report, "Project"), TableMergeAction::FastForward);
    assert_eq!(action(&report, "Person"), TableMergeAction::Keep);
    let head = main.head().await.unwrap();
    assert_eq!(head.schema, feature.head().await.unwrap().schema);
    assert_eq!(
        ids_at(&main, "Person", &CommitRef::Head).await,
        ["m1", "p0", "p1", "p2", "p3"]
    );
    assert_eq!(city(&main, "f1").await, Some(json!("Oslo")));
    assert_eq!(ids_at(&main, "Project", &CommitRef::Head).await, ["x"]);
}

#[tokio::test]
async fn a_schema_change_on_the_target_keeps_the_types_it_changed_and_merges_the_others() {
    // The source writes a type the target's schema change did not touch.
    let (main, feature, _test) = forked(Backend::Memory).await;
    main.apply_schema(WITH_CITY, false).await.unwrap();
    insert(&feature, "Person", json!([{"id": "f1", "name": "n"}])).await;
    let schema_before = main.head().await.unwrap().schema;
    let report = main.merge("feature").await.unwrap();
    assert_eq!(action(&report, "Person"), TableMergeAction::FastForward);
    assert_eq!(action(&report, "Company"), TableMergeAction::Keep);
    assert_eq!(action(&report, "Project"), TableMergeAction::Keep);
    let merged = report.commit.unwrap();
    assert_eq!(merged.schema, schema_before, "the target's schema stays");
    assert_ne!(merged.schema, feature.head().await.unwrap().schema);
    assert_eq!(
        ids_at(&main, "Person", &CommitRef::Head).await,
        ["f1", "p0", "p1", "p2", "p3"]
    );
    assert_eq!(city(&main, "c0").await, Some(Value::Null));
}

#[tokio::test]
async fn an_index_declared_on_one_side_never_conflicts_with_rows_written_on_the_other() {
    // Declaring an index changes no table: the target's rows of the type merge as any.
    let (main, feature, _test) = forked(Backend::Memory).await;
    feature
        .apply_schema(
            &SOCIAL_SCHEMA.replace(
                "Company { id: String @key, name: String }",
                "Company { id: String @key, name: String @index }",
            ),
            false,
        )
        .await
        .unwrap();
    insert(&main, "Company", json!([{"id": "m1", "name": "c"}])).await;
    let report = main.merge("feature").await.unwrap();
    assert_eq!(action(&report, "Company"), TableMergeAction::Keep);
    assert_eq!(
        main.head().await.unwrap().schema,
        feature.head().await.unwrap().schema
    );
    assert_eq!(
        ids_at(&main, "Company", &CommitRef::Head).await,
        ["c0", "c1", "m1"]
    );
}

#[tokio::test]
async fn a_schema_change_against_writes_to_its_type_conflicts_until_both_sides_have_it() {
    let (main, feature, _test) = forked(Backend::Local).await;
    city_and_project_on(&feature).await;
    insert(&main, "Company", json!([{"id": "m1", "name": "c"}])).await;
    let before = main.head().await.unwrap();
    let error = main.merge("feature").await.unwrap_err();
    assert_eq!(
        conflicts(&error),
        [(
            "Company".to_string(),
            String::new(),
            MergeConflictKind::Schema
        )]
    );
    assert_eq!(error.evidence(), &omnigraph_core::Evidence::BeforeEffect);
    assert_eq!(main.head().await.unwrap(), before, "nothing published");

    // The same schema on the target: its Company table and the source's now differ
    // from the base's columns, and the rows merge by key. Each side created its own
    // Project table: the source's, which holds a row, is taken, and the target's goes.
    main.apply_schema(WITH_CITY, false).await.unwrap();
    let head = main.head().await.unwrap();
    let empty_project = head.pin_of_type("Project").unwrap().table_id.clone();
    let report = main.merge("feature").await.unwrap();
    assert_eq!(action(&report, "Company"), TableMergeAction::RowMerge);
    assert_eq!(action(&report, "Project"), TableMergeAction::FastForward);
    let merged = report.commit.unwrap();
    assert_eq!(
        merged.pin_of_type("Project"),
        feature.head().await.unwrap().pin_of_type("Project")
    );
    assert!(
        merged.pin(&empty_project).is_none(),
        "the target's empty table goes"
    );
    assert_eq!(ids_at(&main, "Project", &CommitRef::Head).await, ["x"]);
    assert_eq!(
        ids_at(&main, "Company", &CommitRef::Head).await,
        ["c0", "c1", "f1", "m1"]
    );
    assert_eq!(city(&main, "f1").await, Some(json!("Oslo")));
    assert_eq!(city(&main, "m1").await, Some(Value::Null));

    // Different schema changes on both sides.
    let (main, feature, _test) = forked(Backend::Memory).await;
    feature.apply_schema(WITH_CITY, false).await.unwrap();
    main.apply_schema(WITH_EMAIL, false).await.unwrap();
    let error = main.merge("feature").await.unwrap_err();
    assert_eq!(
        conflicts(&error),
        [(String::new(), String::new(), MergeConflictKind::Schema)]
    );
}

/// Disjoint and conflicting changes to Person and Company on both sides of `feature`.
async fn changed_on_both_sides(main: &Omnigraph, feature: &Omnigraph) {
    let people: Vec<Value> = (10..40)
        .map(|index| json!({"id": format!("p{index}"), "name": "n", "age": index}))
        .collect();
    for graph in [main, feature] {
        insert(graph, "Person", json!(people)).await;
    }
    insert(feature, "Person", json!([{"id": "f1", "name": "n"}])).await;
    for (graph, age) in [(main, 50), (feature, 51)] {
        graph
            .update("Person", "id = 'p1'", &[("age".into(), json!(age))])
            .await
            .unwrap();
    }
    feature.delete("Person", "id = 'p3'").await.unwrap();
    feature.delete("Company", "id = 'c1'").await.unwrap();
    main.update("Person", "id = 'p2'", &[("age".into(), json!(42))])
        .await
        .unwrap();
}

#[tokio::test]
async fn a_row_merge_in_many_passes_plans_what_one_pass_plans() {
    let (main, feature, test) = forked(Backend::Local).await;
    changed_on_both_sides(&main, &feature).await;
    // An edge to the company the branch deletes: it would dangle.
    insert(
        &main,
        "WorksAt",
        json!([{"id": "w9", "src": "p2", "dst": "c1"}]),
    )
    .await;
    // One row per pass: Person takes 34 passes, and Company, whose lost keys are read
    // for that edge, two.
    let tiny = omnigraph_graph::MergeBudget {
        pass_rows_max: 1,
        passes_max: 64,
        ..Default::default()
    };
    let narrow = Omnigraph::open(&test.uri)
        .await
        .unwrap()
        .with_merge_budget(tiny)
        .unwrap();
    let one_pass = main.merge_dry_run("feature").await.unwrap();
    let passes = narrow.merge_dry_run("feature").await.unwrap();
    assert_eq!(passes.tables, one_pass.tables);
    assert_eq!(passes.conflicts, one_pass.conflicts);
    assert_eq!(
        passes
            .conflicts
            .iter()
            .map(|c| (c.key.as_str(), c.kind))
            .collect::<Vec<_>>(),
        [
            ("\"p1\"", MergeConflictKind::ChangedOnBoth),
            ("\"w9\"", MergeConflictKind::DanglingEdge)
        ]
    );
    // Resolved on both sides, the merge lands in passes.
    feature
        .update("Person", "id = 'p1'", &[("age".into(), json!(50))])
        .await
        .unwrap();
    main.delete("WorksAt", "id = 'w9'").await.unwrap();
    let report = narrow.merge("feature").await.unwrap();
    assert_eq!(action(&report, "Person"), TableMergeAction::RowMerge);
    assert_eq!(action(&report, "Company"), TableMergeAction::FastForward);
    let mut expected: Vec<String> = (0..40)
        .filter(|index| *index < 3 || *index >= 10)
        .map(|index| format!("p{index}"))
        .chain(["f1".to_string()])
        .collect();
    expected.sort();
    assert_eq!(ids_at(&main, "Person", &CommitRef::Head).await, expected);
    assert_eq!(age(&main, "p1").await, Some(json!(50)));
    assert_eq!(age(&main, "p2").await, Some(json!(42)));
    assert_eq!(ids_at(&main, "Company", &CommitRef::Head).await, ["c0"]);
}

#[tokio::test]
async fn a_merge_over_its_budget_fails_before_any_effect() {
    let (main, feature, test) = forked(Backend::Local).await;
    changed_on_both_sides(&main, &feature).await;
    let before = main.head().await.unwrap();
    let objects_before = omnigraph_tests::all_objects(&test.root).await;
    let budgets = [
        // 34 rows in passes of 4: 9 passes.
        omnigraph_graph::MergeBudget {
            pass_rows_max: 4,
            passes_max: 8,
            ..Default::default()
        },
        // f1 taken, p3 deleted, p1 in conflict: more than one changed row.
        omnigraph_graph::MergeBudget {
            changed_rows_max: 1,
            ..Default::default()
        },
    ];
    for budget in budgets {
        let narrow = Omnigraph::open(&test.uri)
            .await
            .unwrap()
            .with_merge_budget(budget)
            .unwrap();
        for dry_run in [true, false] {
            let error = if dry_run {
                narrow.merge_dry_run("feature").await.unwrap_err()
            } else {
                narrow.merge("feature").await.unwrap_err()
            };
            assert_eq!(error.kind(), ErrorKind::BadInput, "{error}");
            assert_eq!(error.evidence(), &omnigraph_core::Evidence::BeforeEffect);
            assert!(error.to_string().contains("MergeBudget"), "{error}");
        }
    }
    assert_eq!(main.head().await.unwrap(), before, "nothing published");
    assert_eq!(
        omnigraph_tests::all_objects(&test.root).await,
        objects_before,
        "nothing written"
    );
    // A limit of 0 is refused when the budget is set.
    let zero = omnigraph_graph::MergeBudget {
        passes_max: 0,
        ..Default::default()
    };
    let error = Omnigraph::open(&test.uri)
        .await
        .unwrap()
        .with_merge_budget(zero)
        .err()
        .unwrap();
    assert_eq!(error.kind(), ErrorKind::BadInput, "{error}");
}

#[tokio::test]
async fn a_type_dropped_on_one_side_goes_unless_the_other_side_wrote_it() {
    for write_it in [true, false] {
        let test = TestRoot::new(Backend::Memory).await;
        let main = Omnigraph::create(&test.uri, WITH_CITY).await.unwrap();
        insert(&main, "Company", json!([{"id": "c0", "name": "c"}])).await;
        main.create_branch("feature", &CommitRef::Head)
            .await
            .unwrap();
        let feature = on_branch(&main, "feature").await;
        // The branch drops Project and Company's city.
        feature.apply_schema(SOCIAL_SCHEMA, true).await.unwrap();
        if write_it {
            insert(&main, "Project", json!([{"id": "x", "name": "x"}])).await;
        } else {
            insert(&main, "Person", json!([{"id": "m1", "name": "n"}])).await;
        }
        let head = main.head().await.unwrap();
        let project = head.pin_of_type("Project").unwrap().table_id.clone();
        let result = main.merge("feature").await;
        if write_it {
            let error = result.unwrap_err();
            assert_eq!(
                conflicts(&error),
                [(
                    "Project".to_string(),
                    String::new(),
                    MergeConflictKind::Schema
                )]
            );
            continue;
        }
        let merged = result.unwrap().commit.unwrap();
        assert_eq!(merged.schema, feature.head().await.unwrap().schema);
        assert!(merged.pin(&project).is_none(), "Project's table is dropped");
        assert!(merged.pin_of_type("Project").is_none());
        assert_eq!(ids_at(&main, "Person", &CommitRef::Head).await, ["m1"]);
        let company = main
            .get("Company", &json!("c0"), &CommitRef::Head)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(company.get("city"), None, "the branch's Company table");
    }
}

#[tokio::test]
async fn a_property_both_sides_made_required_merges_rows_whose_base_held_null() {
    let (main, _feature, _test) = forked(Backend::Local).await;
    insert(&main, "Person", json!([{"id": "q", "name": "n"}])).await;
    main.create_branch("backfill", &CommitRef::Head)
        .await
        .unwrap();
    let backfill = on_branch(&main, "backfill").await;
    let required = SOCIAL_SCHEMA.replace("age: Int32? @index", "age: Int32 @index");
    for (graph, id) in [(&main, "m1"), (&backfill, "b1")] {
        graph
            .update("Person", "id = 'q'", &[("age".into(), json!(5))])
            .await
            .unwrap();
        graph.apply_schema(&required, true).await.unwrap();
        insert(graph, "Person", json!([{"id": id, "name": "n", "age": 1}])).await;
    }
    // The base's row of q holds null where both sides now require a value.
    let report = main.merge("backfill").await.unwrap();
    assert_eq!(action(&report, "Person"), TableMergeAction::RowMerge);
    assert_eq!(
        ids_at(&main, "Person", &CommitRef::Head).await,
        ["b1", "m1", "p0", "p1", "p2", "p3", "q"]
    );
    assert_eq!(age(&main, "q").await, Some(json!(5)));
}

#[tokio::test]
async fn a_type_dropped_and_added_again_on_one_side_takes_its_new_table() {
    // The branch moves WorksAt's endpoints the only way there is: it drops the type and
    // adds it again, a new table with the same columns.
    let (main, feature, _test) = forked(Backend::Memory).await;
    let without = SOCIAL_SCHEMA.replace("edge WorksAt: Person -> Company { since: Int32? }", "");
    let moved = SOCIAL_SCHEMA.replace("Person -> Company", "Person -> Person");
    feature.apply_schema(&without, true).await.unwrap();
    feature.apply_schema(&moved, false).await.unwrap();
    insert(
        &feature,
        "WorksAt",
        json!([{"id": "k1", "src": "p0", "dst": "p1"}]),
    )
    .await;
    insert(&main, "Person", json!([{"id": "m1", "name": "n"}])).await;
    let old_table = main
        .head()
        .await
        .unwrap()
        .pin_of_type("WorksAt")
        .unwrap()
        .table_id
        .clone();
    let report = main.merge("feature").await.unwrap();
    assert_eq!(action(&report, "WorksAt"), TableMergeAction::FastForward);
    assert_eq!(action(&report, "Person"), TableMergeAction::Keep);
    let merged = report.commit.unwrap();
    assert_eq!(merged.schema, feature.head().await.unwrap().schema);
    assert!(
        merged.pin(&old_table).is_none(),
        "the old WorksAt table goes"
    );
    assert_eq!(ids_at(&main, "WorksAt", &CommitRef::Head).await, ["k1"]);
    assert_eq!(
        ids_at(&main, "Person", &CommitRef::Head).await,
        ["m1", "p0", "p1", "p2", "p3"]
    );
}

/// What happens to the merge's source while the merge stages.
#[derive(Clone, Copy, Debug)]
enum Meanwhile {
    /// The source branch is deleted.
    SourceDeleted,
    /// The source branch moves on (one more write to the table the merge takes).
    SourceMoved,
}

/// A merge parked just before it publishes while its source branch is deleted or moves
/// on and a cleanup keeping one commit runs: the merge's source head was a head within
/// the grace period, so cleanup keeps its pins, and the merge lands on a head that
/// reads. `stalled` more seconds of the clock pass before the merge goes on.
async fn merge_beside_cleanup(
    meanwhile: Meanwhile,
    stalled: i64,
) -> (
    Omnigraph,
    Result<omnigraph_graph::MergeReport, OmniError>,
    TestRoot,
) {
    let (main, feature, test) = forked(Backend::Local).await;
    // Company and Person change only on the branch: the merge takes their pins as they
    // are, staging nothing.
    insert(&feature, "Company", json!([{"id": "c9", "name": "c"}])).await;
    feature
        .update("Company", "id = 'c0'", &[("name".into(), json!("renamed"))])
        .await
        .unwrap();
    insert(&feature, "Person", json!([{"id": "f1", "name": "n"}])).await;
    // Everything written so far is minutes old to the clock the rest runs on.
    let clock = seams::Simulation::new(7, seams::now_micros() + 120_000_000, 0);
    let merged = seams::simulate(clock.clone(), async {
        let mut merging = Box::pin(main.merge("feature"));
        let ticket = omnigraph_tests::parked_at(
            &clock,
            &mut merging,
            failpoints::PUBLISH_BEFORE_GATE,
            "the merge's publication",
        )
        .await;
        match meanwhile {
            Meanwhile::SourceDeleted => {
                main.delete_branch("feature").await.unwrap();
            }
            Meanwhile::SourceMoved => {
                feature
                    .update("Company", "id = 'c1'", &[("name".into(), json!("moved"))])
                    .await
                    .unwrap();
            }
        }
        let report = main
            .maintenance()
            .cleanup(&omnigraph_tests::keep_with_minimum_grace(1))
            .await
            .unwrap();
        assert_eq!(report.totals.tables_failed, 0);
        clock.advance(stalled * 1_000_000);
        clock.windows().release(ticket);
        merging.await
    })
    .await;
    (main, merged, test)
}

#[tokio::test]
async fn a_merge_beside_a_source_deletion_and_cleanup_lands_on_a_head_that_reads() {
    for meanwhile in [Meanwhile::SourceDeleted, Meanwhile::SourceMoved] {
        let (main, merged, _test) = merge_beside_cleanup(meanwhile, 0).await;
        let report = merged.unwrap_or_else(|error| panic!("{meanwhile:?}: {error}"));
        assert_eq!(action(&report, "Company"), TableMergeAction::FastForward);
        // Every pin the merge published reads: the rows of both sides are there.
        assert_eq!(
            ids_at(&main, "Company", &CommitRef::Head).await,
            ["c0", "c1", "c9"],
            "{meanwhile:?}"
        );
        assert_eq!(
            ids_at(&main, "Person", &CommitRef::Head).await,
            ["f1", "p0", "p1", "p2", "p3"],
            "{meanwhile:?}"
        );
        let renamed = main
            .get("Company", &json!("c0"), &CommitRef::Head)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(renamed["name"], json!("renamed"), "{meanwhile:?}");
        // Once the grace period has passed, a cleanup keeps what main's head pins.
        omnigraph_tests::cleanup_keeping_one_after(&main, Duration::from_secs(600)).await;
        assert_eq!(
            ids_at(&main, "Company", &CommitRef::Head).await,
            ["c0", "c1", "c9"],
            "{meanwhile:?}"
        );
    }
}

#[tokio::test]
async fn a_merge_stalled_past_half_the_grace_beside_cleanup_publishes_nothing() {
    // Stalled 40 s after it read its source, past half the one-minute grace period: the
    // pins it read may be gone, so it fails as staging that old does, and the head (the
    // cleanup's record) reads.
    let (main, merged, _test) = merge_beside_cleanup(Meanwhile::SourceDeleted, 40).await;
    let error = merged.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::StagingExpired, "{error}");
    // It staged nothing: its pins are taken as they are.
    assert_eq!(error.evidence(), &Evidence::BeforeEffect);
    let head = main.head().await.unwrap();
    assert_eq!(
        head.operation.kind,
        omnigraph_publish::retention::RECORD_OPERATION
    );
    assert_eq!(
        ids_at(&main, "Company", &CommitRef::Head).await,
        ["c0", "c1"]
    );
    assert_eq!(
        ids_at(&main, "Person", &CommitRef::Head).await,
        ["p0", "p1", "p2", "p3"]
    );
}

#[tokio::test]
async fn a_merge_beside_a_steady_stream_of_inserts_lands() {
    let (main, feature, test) = forked(Backend::Local).await;
    insert(&feature, "Company", json!([{"id": "c7", "name": "c"}])).await;
    // Each read of the branch's log is slow, so every plan spans several inserts.
    let _slow = main.graph().root().inject(FaultRule::new(
        "_graph/branches/feature/commits/*",
        &[RequestKind::Get],
        FaultAction::Delay(Duration::from_millis(150)),
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let inserted = Arc::new(AtomicU64::new(0));
    let writer = {
        let (stop, inserted) = (stop.clone(), inserted.clone());
        let writer = Omnigraph::open(&test.uri).await.unwrap();
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let at = inserted.fetch_add(1, Ordering::SeqCst);
                insert(
                    &writer,
                    "Person",
                    json!([{"id": format!("s{at}"), "name": "n"}]),
                )
                .await;
            }
        })
    };
    while inserted.load(Ordering::SeqCst) < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let merged = main.merge("feature").await;
    stop.store(true, Ordering::SeqCst);
    writer.await.unwrap();
    let report = merged.unwrap();
    let commit = report.commit.unwrap();
    // It lost to the inserts, reserved every table, and landed before the next insert.
    assert!(
        commit.seq > report.into_seq,
        "the merge's commit follows its plan's head"
    );
    let log = main
        .graph()
        .log("main")
        .unwrap()
        .log(64, None)
        .await
        .unwrap();
    assert!(
        log.iter()
            .any(|commit| commit.operation.kind == omnigraph_graph::reserving::RESERVE_OPERATION),
        "a starved merge reserves"
    );
    assert_eq!(
        ids_at(&main, "Company", &CommitRef::Head).await,
        ["c0", "c1", "c7"]
    );
    let people = ids_at(&main, "Person", &CommitRef::Head).await;
    assert_eq!(
        people.len() as u64,
        4 + inserted.load(Ordering::SeqCst),
        "every insert landed too"
    );
}
