//! Branches: creation copies pins and no data, writes stay on their branch, time travel
//! is per branch, deletion fences writers and lets cleanup reclaim what only the
//! branch kept, and a name deleted may be created again.

use omnigraph_core::storage::{RequestKind, StorageRoot};
use omnigraph_core::{ErrorKind, Evidence};
use omnigraph_graph::Omnigraph;
use omnigraph_maintenance::MaintenanceExt;
use omnigraph_publish::CommitRef;
use omnigraph_tests::{Backend, SOCIAL_SCHEMA, TestRoot, ids_at, objects};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

async fn graph_with_people(backend: Backend, count: usize) -> (Omnigraph, TestRoot) {
    let test = TestRoot::new(backend).await;
    let graph = Omnigraph::create(&test.uri, SOCIAL_SCHEMA).await.unwrap();
    let rows: Vec<_> = (0..count)
        .map(|index| json!({"id": format!("p{index}"), "name": "n", "age": index}))
        .collect();
    graph
        .insert_json("Person", objects(json!(rows)))
        .await
        .unwrap();
    (graph, test)
}

async fn person(graph: &Omnigraph, id: &str) {
    graph
        .insert_json("Person", objects(json!([{"id": id, "name": "n"}])))
        .await
        .unwrap();
}

async fn name_of(graph: &Omnigraph, id: &str) -> serde_json::Value {
    let row = graph
        .get("Person", &json!(id), &CommitRef::Head)
        .await
        .unwrap();
    row.unwrap()["name"].clone()
}

async fn sizes(root: &StorageRoot) -> BTreeMap<String, u64> {
    root.list_with_meta("")
        .await
        .unwrap()
        .into_iter()
        .map(|object| (object.path, object.size))
        .collect()
}

async fn table_bytes(root: &StorageRoot, table_id: &str) -> u64 {
    root.list_with_meta(&format!("tables/{table_id}"))
        .await
        .unwrap()
        .iter()
        .map(|object| object.size)
        .sum()
}

use omnigraph_tests::on_branch as on;

#[tokio::test]
async fn creating_a_branch_copies_pins_and_writes_one_commit_and_its_head_copy() {
    let (graph, test) = graph_with_people(Backend::Local, 3).await;
    let head = graph.head().await.unwrap();
    let before = sizes(&test.root).await;
    let probe = graph.graph().root().probe();
    let first = graph
        .create_branch("feature", &CommitRef::Head)
        .await
        .unwrap();
    let counts = probe.counts();
    let after = sizes(&test.root).await;

    assert_eq!(first.seq, 0);
    assert_eq!(first.branch, "feature");
    assert_eq!(
        first.pins, head.pins,
        "the same table versions: nothing copied"
    );
    assert_eq!(first.schema, head.schema);
    let fork = first.fork.clone().unwrap();
    assert_eq!(
        (fork.branch.as_str(), fork.seq, fork.commit_id.as_str()),
        ("main", head.seq, head.commit_id.as_str())
    );
    // Exactly two objects are new, both in the branch's log; nothing else changed.
    let added: Vec<&String> = after
        .keys()
        .filter(|path| !before.contains_key(*path))
        .collect();
    assert_eq!(
        added,
        [
            "_graph/branches/feature/HEAD",
            "_graph/branches/feature/commits/00000000000000000000.json"
        ]
    );
    for (path, size) in &before {
        assert_eq!(after.get(path), Some(size), "{path} unchanged");
    }
    let written: u64 = added.iter().map(|path| after[*path]).sum();
    assert!(
        written < 8 * 1024,
        "{written} bytes for a branch of 3 tables"
    );
    // The source head (4 GETs), the new name's log (a HEAD GET and a LIST), the
    // commit's put-if-absent and the HEAD copy. From the source's head, published
    // within half the grace period of reading it, the source is not read again:
    // cleanup keeps a head's pins for its grace period.
    assert_eq!(counts.get(RequestKind::PutIfAbsent), 1, "{counts}");
    assert_eq!(counts.get(RequestKind::Put), 1, "{counts}");
    assert_eq!(counts.get(RequestKind::List), 1, "{counts}");
    assert_eq!(counts.get(RequestKind::Get), 5, "{counts}");
    assert_eq!(counts.total(), 8, "{counts}");

    let feature = on(&graph, "feature").await;
    assert_eq!(
        ids_at(&feature, "Person", &CommitRef::Head).await,
        ["p0", "p1", "p2"]
    );
}

#[tokio::test]
async fn writes_on_a_branch_and_on_main_are_invisible_to_each_other() {
    for backend in omnigraph_tests::BACKENDS {
        let (main, _test) = graph_with_people(backend, 2).await;
        main.create_branch("feature", &CommitRef::Head)
            .await
            .unwrap();
        let feature = on(&main, "feature").await;
        person(&feature, "on-feature").await;
        feature.delete("Person", "id = 'p0'").await.unwrap();
        person(&main, "on-main").await;
        main.update("Person", "id = 'p1'", &[("name".into(), json!("main's"))])
            .await
            .unwrap();

        assert_eq!(
            ids_at(&main, "Person", &CommitRef::Head).await,
            ["on-main", "p0", "p1"]
        );
        assert_eq!(
            ids_at(&feature, "Person", &CommitRef::Head).await,
            ["on-feature", "p1"]
        );
        assert_eq!(name_of(&main, "p1").await, json!("main's"));
        assert_eq!(name_of(&feature, "p1").await, json!("n"));
        // Each head is its own: a publication on one never fences the other.
        assert_eq!(main.head().await.unwrap().branch, "main");
        assert_eq!(feature.head().await.unwrap().seq, 2);
    }
}

#[tokio::test]
async fn time_travel_reads_each_branch_at_its_own_seqs() {
    let (main, _test) = graph_with_people(Backend::Memory, 1).await;
    let forked_at = main.head().await.unwrap().seq;
    person(&main, "later-on-main").await;
    // From an older commit of main, named by seq.
    main.create_branch("old", &CommitRef::Seq(forked_at))
        .await
        .unwrap();
    let old = on(&main, "old").await;
    person(&old, "on-old").await;
    person(&old, "again-on-old").await;
    assert_eq!(ids_at(&old, "Person", &CommitRef::Seq(0)).await, ["p0"]);
    assert_eq!(
        ids_at(&old, "Person", &CommitRef::Seq(1)).await,
        ["on-old", "p0"]
    );
    assert_eq!(
        ids_at(&old, "Person", &CommitRef::Head).await,
        ["again-on-old", "on-old", "p0"]
    );
    assert_eq!(
        ids_at(&main, "Person", &CommitRef::Seq(forked_at + 1)).await,
        ["later-on-main", "p0"]
    );
    // By commit id too: the branch's first commit.
    let first = old.graph().commit("old", &CommitRef::Seq(0)).await.unwrap();
    assert_eq!(
        ids_at(&old, "Person", &CommitRef::Id(first.commit_id.clone())).await,
        ["p0"]
    );
    // And a branch from a branch.
    old.create_branch("older", &CommitRef::Seq(1))
        .await
        .unwrap();
    let older = on(&main, "older").await;
    assert_eq!(
        ids_at(&older, "Person", &CommitRef::Head).await,
        ["on-old", "p0"]
    );
    assert_eq!(older.head().await.unwrap().fork.unwrap().branch, "old");
}

#[tokio::test]
async fn a_live_name_is_refused_and_of_two_creators_exactly_one_wins() {
    let (main, test) = graph_with_people(Backend::Local, 1).await;
    main.create_branch("taken", &CommitRef::Head).await.unwrap();
    let before = sizes(&test.root).await;
    let error = main
        .create_branch("taken", &CommitRef::Head)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BranchExists, "{error}");
    assert_eq!(error.evidence(), &Evidence::BeforeEffect);
    for bad in ["", "a/b", "../main", "x y"] {
        let error = main.create_branch(bad, &CommitRef::Head).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::BadInput, "{bad:?}: {error}");
    }
    let missing = main
        .create_branch("from-nowhere", &CommitRef::Seq(99))
        .await
        .unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound, "{missing}");
    assert_eq!(sizes(&test.root).await, before, "refusals change nothing");

    // Two handles race for one name: each is held after it reads the head of
    // the new name's log, so both find no branch and both reach the put.
    let other = Omnigraph::open(&test.uri).await.unwrap();
    let holds: Vec<_> = [&main, &other]
        .iter()
        .map(|graph| {
            graph
                .graph()
                .root()
                .inject(omnigraph_core::storage::FaultRule::new(
                    "_graph/branches/raced/HEAD",
                    &[RequestKind::Get],
                    omnigraph_core::storage::FaultAction::Delay(Duration::from_millis(200)),
                ))
        })
        .collect();
    let (first, second) = tokio::join!(
        main.create_branch("raced", &CommitRef::Head),
        other.create_branch("raced", &CommitRef::Head)
    );
    let outcomes = [first.is_ok(), second.is_ok()];
    assert_eq!(
        outcomes.iter().filter(|won| **won).count(),
        1,
        "{outcomes:?}"
    );
    assert!(holds.iter().all(|hold| hold.fired() > 0));
    let lost = first.err().or(second.err()).unwrap();
    assert_eq!(lost.kind(), ErrorKind::BranchExists, "{lost}");
    let names = omnigraph_tests::branch_names(&main).await;
    assert_eq!(names, ["main", "raced", "taken"]);
}

#[tokio::test]
async fn a_deleted_branch_refuses_writers_and_reads_and_its_name_can_live_again() {
    let (main, _test) = graph_with_people(Backend::Memory, 1).await;
    let error = main.delete_branch("main").await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadInput, "{error}");
    main.create_branch("gone", &CommitRef::Head).await.unwrap();
    let gone = on(&main, "gone").await;
    person(&gone, "only-on-gone").await;
    // A writer whose handle knew the head before the delete.
    let stale = on(&main, "gone").await;
    stale.head().await.unwrap();

    let last = main.delete_branch("gone").await.unwrap();
    assert!(last.deleted);
    assert!(last.pins.is_empty());
    assert_eq!(last.seq, 2);
    let listed = main.list_branches().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].name, "main");
    assert!(listed[0].fork.is_none());

    let write = stale
        .insert_json("Person", objects(json!([{"id": "late", "name": "n"}])))
        .await
        .unwrap_err();
    assert_eq!(write.kind(), ErrorKind::NotFound, "{write}");
    let read = gone.head().await.unwrap_err();
    assert_eq!(read.kind(), ErrorKind::NotFound, "{read}");
    // Its commits are reclaimed at once: they are no longer the branch's to keep.
    let old = gone
        .graph()
        .commit("gone", &CommitRef::Seq(1))
        .await
        .unwrap_err();
    assert_eq!(old.kind(), ErrorKind::CommitReclaimed, "{old}");
    let again = main.delete_branch("gone").await.unwrap_err();
    assert_eq!(again.kind(), ErrorKind::NotFound, "{again}");

    // The name lives again, from main's head, after the deletion in the same log.
    let reborn = main.create_branch("gone", &CommitRef::Head).await.unwrap();
    assert_eq!(reborn.seq, 3);
    assert_eq!(
        reborn.parent_commit_id.as_deref(),
        Some(last.commit_id.as_str())
    );
    let gone = on(&main, "gone").await;
    assert_eq!(ids_at(&gone, "Person", &CommitRef::Head).await, ["p0"]);
    person(&gone, "second-life").await;
    assert_eq!(
        ids_at(&gone, "Person", &CommitRef::Head).await,
        ["p0", "second-life"]
    );
}

#[tokio::test]
async fn cleanup_keeps_every_live_branchs_data_and_reclaims_a_deleted_ones() {
    let (main, test) = graph_with_people(Backend::Local, 2).await;
    main.create_branch("kept", &CommitRef::Head).await.unwrap();
    main.create_branch("dropped", &CommitRef::Head)
        .await
        .unwrap();
    let kept = on(&main, "kept").await;
    let dropped = on(&main, "dropped").await;
    for index in 0..3 {
        person(&kept, &format!("kept{index}")).await;
        person(&dropped, &format!("dropped{index}")).await;
    }
    // Main moves on and forgets the fork's versions in its own history.
    for index in 0..3 {
        person(&main, &format!("main{index}")).await;
    }
    let person_table = omnigraph_tests::head_table_id(&main, "Person").await;
    let later = Duration::from_secs(5 * 60);
    let first = omnigraph_tests::cleanup_keeping_one_after(&main, later).await;
    assert_eq!(first.totals.tables_failed, 0, "{first:?}");
    let with_dropped = table_bytes(&test.root, &person_table).await;
    assert_eq!(
        ids_at(&kept, "Person", &CommitRef::Head).await,
        ["kept0", "kept1", "kept2", "p0", "p1"]
    );
    assert_eq!(
        ids_at(&dropped, "Person", &CommitRef::Head).await,
        ["dropped0", "dropped1", "dropped2", "p0", "p1"]
    );

    // The deleted branch's last write, read before cleanup reclaims its commit too.
    let written = main
        .graph()
        .log("dropped")
        .unwrap()
        .require(4)
        .await
        .unwrap();
    main.delete_branch("dropped").await.unwrap();
    let second = omnigraph_tests::cleanup_keeping_one_after(&main, later * 2).await;
    assert_eq!(second.totals.tables_failed, 0, "{second:?}");
    assert!(second.totals.manifests_removed > 0, "{second:?}");
    let without = table_bytes(&test.root, &person_table).await;
    assert!(
        without < with_dropped,
        "the deleted branch's files are reclaimed: {with_dropped} -> {without}"
    );
    assert!(!second.recorded.iter().any(|unit| unit.contains("dropped")));
    // Every live branch reads as before, at its head.
    assert_eq!(
        ids_at(&kept, "Person", &CommitRef::Head).await,
        ["kept0", "kept1", "kept2", "p0", "p1"]
    );
    assert_eq!(
        ids_at(&main, "Person", &CommitRef::Head).await,
        ["main0", "main1", "main2", "p0", "p1"]
    );
    // The files of the deleted branch's last write are gone: its versions no longer
    // open (through a fresh root, with no cached handle).
    let cold = Omnigraph::open(&test.uri).await.unwrap();
    let pin = written.pin_of_type("Person").unwrap();
    let opened =
        omnigraph_core::adapter::open_table_at(cold.graph().root(), &pin.path, pin.version).await;
    assert!(
        opened.is_err(),
        "the deleted branch's version was reclaimed"
    );
}

#[tokio::test]
async fn a_writer_of_a_deleted_life_never_publishes_on_the_next_one() {
    let (main, _test) = graph_with_people(Backend::Memory, 1).await;
    main.create_branch("twice", &CommitRef::Head).await.unwrap();
    // A warm handle: it writes from the head it knows, without reading it again.
    let stale = on(&main, "twice").await;
    stale.head().await.unwrap();
    main.delete_branch("twice").await.unwrap();
    main.create_branch("twice", &CommitRef::Head).await.unwrap();
    let error = stale
        .insert_json("Person", objects(json!([{"id": "old-life", "name": "n"}])))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound, "{error}");
    let twice = on(&main, "twice").await;
    assert_eq!(ids_at(&twice, "Person", &CommitRef::Head).await, ["p0"]);
}

#[tokio::test]
async fn a_branch_deleted_while_cleanup_runs_is_passed_by() {
    let (main, test) = graph_with_people(Backend::Memory, 1).await;
    main.create_branch("going", &CommitRef::Head).await.unwrap();
    person(&on(&main, "going").await, "on-going").await;
    person(&main, "on-main").await;
    // Cleanup's trace of `going` is held while the branch is deleted: its record for
    // `going` then loses its slot to the deletion.
    let held = main
        .graph()
        .root()
        .inject(omnigraph_core::storage::FaultRule::new(
            omnigraph_publish::layout::commit_path("going", 0),
            &[RequestKind::Get],
            omnigraph_core::storage::FaultAction::Delay(Duration::from_millis(500)),
        ));
    let deleter = Omnigraph::open(&test.uri).await.unwrap();
    let options = omnigraph_tests::keep_with_minimum_grace(1);
    let maintenance = main.maintenance();
    let (cleaned, ()) = omnigraph_tests::later_by(Duration::from_secs(300), async {
        tokio::join!(maintenance.cleanup(&options), async {
            while held.fired() == 0 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            deleter.delete_branch("going").await.unwrap();
            // And a new life begins: the record's lost slot now leads to it.
            deleter
                .create_branch("going", &CommitRef::Head)
                .await
                .unwrap();
        })
    })
    .await;
    let report = cleaned.unwrap();
    assert!(
        report.recorded.contains(&"retention:main".to_string()),
        "{report:?}"
    );
    assert!(
        !report.recorded.contains(&"retention:going".to_string()),
        "{report:?}"
    );
    assert_eq!(
        ids_at(&main, "Person", &CommitRef::Head).await,
        ["on-main", "p0"]
    );
    // The new life reads, and its record was not touched by the old one's.
    let going = on(&main, "going").await;
    assert_eq!(
        ids_at(&going, "Person", &CommitRef::Head).await,
        ["on-main", "p0"]
    );
}

#[tokio::test]
async fn cleanup_reclaims_what_merged_and_deleted_branches_kept() {
    // Found by the simulation: a deleted branch's last commit records the default
    // grace period (24 h), and cleanup adopted it as the largest recorded, so it
    // reclaimed nothing younger than a day.
    let (main, test) = graph_with_people(Backend::Memory, 1).await;
    for round in 0..2 {
        let name = format!("b{round}");
        main.create_branch(&name, &CommitRef::Head).await.unwrap();
        person(&on(&main, &name).await, &format!("x{round}")).await;
        let report = main.merge(&name).await.unwrap();
        assert!(report.commit.is_some());
        main.delete_branch(&name).await.unwrap();
    }
    let report = omnigraph_tests::cleanup_keeping_one_after(&main, Duration::from_secs(900)).await;
    assert!(report.totals.manifests_removed >= 2, "{report:?}");
    let head = main.head().await.unwrap();
    let person = head.pin_of_type("Person").unwrap();
    let left: Vec<String> = test
        .root
        .list(&format!("tables/{}/_versions", person.table_id))
        .await
        .unwrap()
        .into_iter()
        .filter(|object| object.contains("/_versions/d"))
        .collect();
    assert_eq!(
        left,
        [format!(
            "tables/{}/_versions/d{}.manifest",
            person.table_id, person.version
        )],
        "only the head's version of Person is left"
    );
    assert_eq!(
        ids_at(&main, "Person", &CommitRef::Head).await,
        ["p0", "x0", "x1"]
    );
}

#[tokio::test]
async fn creating_a_branch_under_commit_put_faults_says_what_it_left() {
    use omnigraph_core::StorageKind;
    use omnigraph_core::storage::{FaultAction, FaultRule};
    let (main, _test) = graph_with_people(Backend::Memory, 1).await;
    let root = main.graph().root().clone();
    let on_put = |name: &str, action: FaultAction| {
        root.inject(
            FaultRule::new(
                format!("_graph/branches/{name}/commits/*"),
                &[RequestKind::PutIfAbsent],
                action,
            )
            .times(1),
        )
    };
    // The put lands and its acknowledgement is lost, or a retry of it is refused as a
    // duplicate: reading back finds the branch's own commit, so the create succeeds.
    for (name, action) in [
        ("lost-ack", FaultAction::LostAck),
        ("duplicated-ack", FaultAction::DuplicatedAck),
    ] {
        let fault = on_put(name, action);
        let first = main.create_branch(name, &CommitRef::Head).await.unwrap();
        assert_eq!(fault.fired(), 1, "{name}");
        let reader = on(&main, name).await;
        assert_eq!(
            reader.head().await.unwrap().commit_id,
            first.commit_id,
            "{name}"
        );
        assert_eq!(ids_at(&reader, "Person", &CommitRef::Head).await, ["p0"]);
    }
    // A refused put leaves nothing: no branch, and the name is free.
    let fault = on_put("refused", FaultAction::FailBefore(StorageKind::Permanent));
    let error = main
        .create_branch("refused", &CommitRef::Head)
        .await
        .unwrap_err();
    assert_eq!(fault.fired(), 1);
    assert_eq!(error.evidence(), &Evidence::BeforeEffect, "{error}");
    let listed = omnigraph_tests::branch_names(&main).await;
    assert!(!listed.contains(&"refused".to_string()), "{listed:?}");
    main.create_branch("refused", &CommitRef::Head)
        .await
        .unwrap();
}

/// Creates branch `b` on `source_handle`'s branch at `at` while the creation's commit
/// PUT is held; `meanwhile` runs once the PUT is under way.
async fn create_while_put_is_held<F: std::future::Future<Output = ()>>(
    source_handle: &Omnigraph,
    at: CommitRef,
    meanwhile: F,
) -> omnigraph_core::Result<omnigraph_publish::GraphCommit> {
    use omnigraph_core::storage::{FaultAction, FaultRule};
    let held = source_handle.graph().root().inject(
        FaultRule::new(
            "_graph/branches/b/commits/*",
            &[RequestKind::PutIfAbsent],
            FaultAction::Delay(Duration::from_millis(300)),
        )
        .times(1),
    );
    let (created, ()) = tokio::join!(source_handle.create_branch("b", &at), async {
        while held.fired() == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        meanwhile.await;
    });
    created
}

/// A branch created from the head of a branch deleted a moment later lives: cleanup
/// keeps the pins of a head for its grace period, deleted branches' too, and the new
/// branch published within half of it. (It was deleted again, and the call said
/// `commit_reclaimed`, though nothing was reclaimed.) From an older commit of the
/// deleted branch, the new branch goes again, and the error says the source was
/// deleted.
#[tokio::test]
async fn a_branch_created_from_a_branch_deleted_a_moment_later() {
    let (main, test) = graph_with_people(Backend::Memory, 1).await;
    main.create_branch("src", &CommitRef::Head).await.unwrap();
    let src = on(&main, "src").await;
    person(&src, "on-src").await;
    let deleter = Omnigraph::open(&test.uri).await.unwrap();
    let created = create_while_put_is_held(&src, CommitRef::Head, async {
        deleter.delete_branch("src").await.unwrap();
    })
    .await
    .unwrap();
    assert_eq!(created.branch, "b");
    let b = on(&main, "b").await;
    assert_eq!(
        ids_at(&b, "Person", &CommitRef::Head).await,
        ["on-src", "p0"]
    );
    // A cleanup within the grace keeps what `b` pins, and so does one after it (`b` is
    // a live branch by then).
    omnigraph_tests::cleanup_keeping_one_after(&main, Duration::from_secs(30)).await;
    omnigraph_tests::cleanup_keeping_one_after(&main, Duration::from_secs(600)).await;
    assert_eq!(
        ids_at(&b, "Person", &CommitRef::Head).await,
        ["on-src", "p0"]
    );

    // From an older commit of a source deleted meanwhile: refused, nothing left live.
    main.create_branch("src2", &CommitRef::Head).await.unwrap();
    let src2 = on(&main, "src2").await;
    person(&src2, "on-src2").await;
    let older = CommitRef::Seq(src2.head().await.unwrap().seq - 1);
    let deleter = Omnigraph::open(&test.uri).await.unwrap();
    main.delete_branch("b").await.unwrap();
    let error = create_while_put_is_held(&src2, older, async {
        deleter.delete_branch("src2").await.unwrap();
    })
    .await
    .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound, "{error}");
    assert!(error.to_string().contains("deleted"), "{error}");
    assert_eq!(error.evidence(), &Evidence::Unpublished);
    assert!(
        !omnigraph_tests::branch_names(&main)
            .await
            .contains(&"b".to_string())
    );
}

/// A creation whose check of the source's head fails after its commit landed deletes
/// the new branch again and says it left something (it said `before_effect`, and the
/// branch stayed live, maybe pinning versions cleanup was reclaiming).
#[tokio::test]
async fn a_creation_whose_check_fails_after_its_commit_landed_goes_again() {
    use omnigraph_core::StorageKind;
    use omnigraph_core::storage::{FaultAction, FaultRule};
    let (main, _test) = graph_with_people(Backend::Memory, 1).await;
    person(&main, "p1").await;
    let older = CommitRef::Seq(main.head().await.unwrap().seq - 1);
    let root = main.graph().root().clone();
    let mut unreadable = None;
    let error = create_while_put_is_held(&main, older, async {
        // The source's log can no longer be read.
        unreadable = Some(root.inject(FaultRule::new(
            "_graph/branches/main/*",
            &[RequestKind::Get, RequestKind::List],
            FaultAction::FailBefore(StorageKind::Permanent),
        )));
    })
    .await
    .unwrap_err();
    drop(unreadable);
    assert_eq!(error.evidence(), &Evidence::Unpublished, "{error}");
    assert!(
        !omnigraph_tests::branch_names(&main)
            .await
            .contains(&"b".to_string())
    );
}
