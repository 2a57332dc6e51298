//! The graph commit log and the exact-CAS publisher on real Lance tables, on a local
//! folder and in memory.

use bytes::Bytes;
use omnigraph_core::storage::{FaultAction, FaultRule, RequestKind};
use omnigraph_core::{ErrorKind, Evidence, OmniError, StorageKind, failpoints};
use omnigraph_publish::{
    CommitOperation, CommitRef, Graph, GraphCommit, Publication, ReadSet, Staging, layout, publish,
};
use omnigraph_tests::{BACKENDS, TestGraph, all_objects, companies, fault_commit_puts, people};

fn operation(summary: &str) -> CommitOperation {
    CommitOperation {
        kind: "test".into(),
        summary: summary.into(),
    }
}

/// Stages `count` people on `base` and publishes strictly.
async fn insert_people(
    graph: &Graph,
    base: GraphCommit,
    person: &str,
    start: usize,
    count: usize,
) -> omnigraph_core::Result<GraphCommit> {
    let mut staging = Staging::new(graph.root().clone(), base);
    staging
        .stage_append(person, vec![people(start, count)])
        .await?;
    staging
        .publish(
            ReadSet::Strict,
            operation(&format!("{count} people")),
            "test",
        )
        .await
}

/// Three commits of ten people each on `test`'s genesis; the last is the head.
async fn three_inserts(test: &TestGraph, person: &str) -> GraphCommit {
    let mut head = test.genesis.clone();
    for start in 0..3 {
        head = insert_people(&test.graph, head, person, start * 10, 10)
            .await
            .unwrap();
    }
    head
}

fn empty_publication(base: GraphCommit, read_set: ReadSet, summary: &str) -> Publication {
    omnigraph_tests::publication_changing_nothing(base, read_set, summary)
}

#[tokio::test]
async fn create_open_and_a_second_create_changes_nothing() {
    for backend in BACKENDS {
        let test = TestGraph::new(backend).await;
        assert_eq!(test.genesis.seq, 0);
        assert_eq!(test.genesis.pins.len(), 3);
        assert!(
            test.genesis
                .pins
                .iter()
                .all(|pin| pin.version == 1 && pin.row_count == 0)
        );
        // Table ids are minted: no type name reaches a path.
        for pin in &test.genesis.pins {
            assert!(!pin.path.contains(&pin.type_name), "{pin:?}");
        }
        let reopened = test.reopen().await;
        let head = reopened.commit("main", &CommitRef::Head).await.unwrap();
        assert_eq!(head, test.genesis);
        let catalog = reopened.catalog(&head).await.unwrap();
        assert_eq!(catalog.hash(), head.schema);

        let before = all_objects(test.graph.root()).await;
        let catalog =
            omnigraph_core::schema::parse("s.pg", omnigraph_tests::SOCIAL_SCHEMA).unwrap();
        let error = Graph::create(&test.uri, &catalog, "test")
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::AlreadyInitialized, "{backend:?}");
        assert_eq!(error.evidence(), &Evidence::BeforeEffect);
        assert_eq!(
            all_objects(test.graph.root()).await,
            before,
            "{backend:?}: nothing changed"
        );
    }
}

#[tokio::test]
async fn open_refuses_a_missing_graph_and_an_unknown_format() {
    let dir = tempfile::tempdir().unwrap();
    let error = Graph::open(dir.path().join("nothing").to_str().unwrap())
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound, "{error}");

    let test = TestGraph::new(omnigraph_tests::Backend::Local).await;
    let future = r#"{"format":"omnigraph","format_version":99,"graph_id":"x","created_at":0}"#;
    test.graph
        .root()
        .put(layout::FORMAT, Bytes::from_static(future.as_bytes()))
        .await
        .unwrap();
    let error = Graph::open(&test.uri).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corrupt);
    assert!(error.to_string().contains("version 99"), "{error}");
    assert!(error.to_string().contains(layout::FORMAT), "{error}");
    test.graph
        .root()
        .put(layout::FORMAT, Bytes::from_static(b"{trunc"))
        .await
        .unwrap();
    assert_eq!(
        Graph::open(&test.uri).await.unwrap_err().kind(),
        ErrorKind::Corrupt
    );
}

#[tokio::test]
async fn publications_time_travel_and_log_pages() {
    for backend in BACKENDS {
        let test = TestGraph::new(backend).await;
        let person = test.table_id("Person");
        let first = insert_people(&test.graph, test.genesis.clone(), &person, 0, 10)
            .await
            .unwrap();
        let second = insert_people(&test.graph, first.clone(), &person, 10, 5)
            .await
            .unwrap();
        assert_eq!((first.seq, second.seq), (1, 2));
        assert_eq!(
            second.parent_commit_id.as_deref(),
            Some(first.commit_id.as_str())
        );
        assert_eq!(second.pin(&person).unwrap().row_count, 15);
        // Untouched tables keep their pins.
        let company = test.table_id("Company");
        assert_eq!(second.pin(&company), test.genesis.pin(&company));

        let graph = test.reopen().await;
        for (at, rows) in [
            (CommitRef::Seq(0), 0),
            (CommitRef::Seq(1), 10),
            (CommitRef::Id(first.commit_id.clone()), 10),
            (CommitRef::Head, 15),
        ] {
            let snapshot = graph.snapshot("main", &at).await.unwrap();
            let table = snapshot.table("Person").await.unwrap();
            assert_eq!(
                table.count_rows(None).await.unwrap(),
                rows,
                "{backend:?} {at:?}"
            );
        }
        let page = graph.log("main").unwrap().log(2, None).await.unwrap();
        assert_eq!(page.iter().map(|c| c.seq).collect::<Vec<_>>(), vec![2, 1]);
        let older = graph.log("main").unwrap().log(10, Some(1)).await.unwrap();
        assert_eq!(older.iter().map(|c| c.seq).collect::<Vec<_>>(), vec![0]);
        let missing = graph.commit("main", &CommitRef::Seq(9)).await.unwrap_err();
        assert_eq!(missing.kind(), ErrorKind::NotFound);
        let missing = graph
            .commit("main", &CommitRef::Id("nope".into()))
            .await
            .unwrap_err();
        assert_eq!(missing.kind(), ErrorKind::NotFound);
    }
}

#[tokio::test]
async fn two_handles_race_and_exactly_one_strict_writer_wins() {
    for backend in BACKENDS {
        let test = TestGraph::new(backend).await;
        let person = test.table_id("Person");
        let (left, right) = (test.reopen().await, test.reopen().await);
        let base = left.commit("main", &CommitRef::Head).await.unwrap();
        let mut left_staging = Staging::new(left.root().clone(), base.clone());
        left_staging
            .stage_append(&person, vec![people(0, 3)])
            .await
            .unwrap();
        let mut right_staging = Staging::new(right.root().clone(), base.clone());
        right_staging
            .stage_append(&person, vec![people(100, 4)])
            .await
            .unwrap();

        let won = left_staging
            .publish(ReadSet::Strict, operation("left"), "left")
            .await
            .unwrap();
        let lost = right_staging
            .publish(ReadSet::Strict, operation("right"), "right")
            .await
            .unwrap_err();
        match &lost {
            OmniError::ReadSetChanged {
                member,
                expected,
                actual,
                evidence,
            } => {
                assert_eq!(member.to_string(), "graph_head:main");
                assert_eq!(expected, &format!("seq 0 ({})", base.commit_id));
                assert_eq!(actual, &format!("seq 1 ({})", won.commit_id));
                assert_eq!(
                    evidence,
                    &Evidence::Unpublished,
                    "{backend:?}: its staging exists"
                );
            }
            other => panic!("{backend:?}: expected ReadSetChanged, got {other}"),
        }
        let head = test.graph.commit("main", &CommitRef::Head).await.unwrap();
        assert_eq!(head, won);
        assert_eq!(head.pin(&person).unwrap().row_count, 3);
    }
}

#[tokio::test]
async fn a_pin_based_writer_moves_onto_a_head_where_only_other_tables_moved() {
    for backend in BACKENDS {
        let test = TestGraph::new(backend).await;
        let (person, company) = (test.table_id("Person"), test.table_id("Company"));
        let base = test.genesis.clone();
        // A maintenance-like writer plans on Company; meanwhile Person moves.
        let mut company_staging = Staging::new(test.graph.root().clone(), base.clone());
        company_staging
            .stage_append(&company, vec![companies(0, 2)])
            .await
            .unwrap();
        let moved = insert_people(&test.graph, base.clone(), &person, 0, 5)
            .await
            .unwrap();
        let published = company_staging
            .publish(company_staging.planned_pins(), operation("company"), "m")
            .await
            .unwrap();
        assert_eq!(published.seq, 2, "{backend:?}");
        assert_eq!(
            published.parent_commit_id.as_deref(),
            Some(moved.commit_id.as_str())
        );
        assert_eq!(
            published.pin(&person),
            moved.pin(&person),
            "the other writer's rows stay visible"
        );
        assert_eq!(published.pin(&company).unwrap().row_count, 2);

        // Planned from a Person pin that has moved since: refused, naming the pin.
        let mut stale = Staging::new(test.graph.root().clone(), base.clone());
        stale
            .stage_append(&person, vec![people(50, 1)])
            .await
            .unwrap();
        let error = stale
            .publish(stale.planned_pins(), operation("stale"), "m")
            .await
            .unwrap_err();
        match &error {
            OmniError::ReadSetChanged {
                member,
                expected,
                actual,
                ..
            } => {
                assert_eq!(member.to_string(), format!("pin:{person}"));
                assert_eq!(expected, "1");
                assert_eq!(actual, &moved.pin(&person).unwrap().version.to_string());
            }
            other => panic!("expected ReadSetChanged, got {other}"),
        }
        assert_eq!(
            test.graph.commit("main", &CommitRef::Head).await.unwrap(),
            published
        );
    }
}

#[tokio::test]
async fn a_lost_acknowledgement_on_the_commit_put_is_resolved_by_read_back() {
    for backend in BACKENDS {
        let test = TestGraph::new(backend).await;
        let person = test.table_id("Person");
        let fault = test.graph.root().inject(
            FaultRule::new(
                "_graph/branches/main/commits/*",
                &[RequestKind::PutIfAbsent],
                FaultAction::LostAck,
            )
            .times(1),
        );
        let published = insert_people(&test.graph, test.genesis.clone(), &person, 0, 7)
            .await
            .unwrap();
        assert_eq!(fault.fired(), 1, "{backend:?}");
        let head = test
            .reopen()
            .await
            .commit("main", &CommitRef::Head)
            .await
            .unwrap();
        assert_eq!(head, published);
        assert_eq!(head.pin(&person).unwrap().row_count, 7);
    }
}

#[tokio::test]
async fn a_failure_before_the_commit_put_leaves_the_head_unchanged() {
    for backend in BACKENDS {
        let test = TestGraph::new(backend).await;
        let person = test.table_id("Person");
        {
            // A refusal (permission denied) cannot land later: a plain storage error.
            let _fault = fault_commit_puts(
                test.graph.root(),
                FaultAction::FailBefore(StorageKind::Configuration),
            );
            let error = insert_people(&test.graph, test.genesis.clone(), &person, 0, 7)
                .await
                .unwrap_err();
            assert_eq!(error.kind(), ErrorKind::Storage(StorageKind::Configuration));
            assert_eq!(
                error.evidence(),
                &Evidence::Unpublished,
                "{backend:?}: staged files exist"
            );
            let error = publish(
                test.graph.root(),
                &empty_publication(test.genesis.clone(), ReadSet::Strict, "empty"),
            )
            .await
            .unwrap_err();
            assert_eq!(
                error.evidence(),
                &Evidence::BeforeEffect,
                "{backend:?}: nothing was staged"
            );
        }
        {
            // A transient error on every attempt may still land: in doubt, never a
            // clean failure.
            let _fault = fault_commit_puts(
                test.graph.root(),
                FaultAction::FailBefore(StorageKind::Transient),
            );
            let error = insert_people(&test.graph, test.genesis.clone(), &person, 0, 7)
                .await
                .unwrap_err();
            assert_eq!(error.kind(), ErrorKind::PublishInDoubt, "{error}");
            assert_eq!(error.evidence(), &Evidence::InDoubt);
        }
        let armed = failpoints::arm(failpoints::PUBLISH_BEFORE_COMMIT_PUT, "return");
        let error = armed
            .run(insert_people(
                &test.graph,
                test.genesis.clone(),
                &person,
                0,
                7,
            ))
            .await
            .unwrap_err();
        drop(armed);
        assert_eq!(error.evidence(), &Evidence::Unpublished);
        let head = test
            .reopen()
            .await
            .commit("main", &CommitRef::Head)
            .await
            .unwrap();
        assert_eq!(head, test.genesis, "{backend:?}");
        // The retry lands.
        let retried = insert_people(&test.graph, test.genesis.clone(), &person, 0, 7)
            .await
            .unwrap();
        assert_eq!(retried.seq, 1);
    }
}

#[tokio::test]
async fn an_unreadable_read_back_is_in_doubt() {
    let test = TestGraph::new(omnigraph_tests::Backend::Memory).await;
    let _put = fault_commit_puts(test.graph.root(), FaultAction::LostAck);
    let _get = test.graph.root().inject(FaultRule::new(
        "_graph/branches/main/commits/00000000000000000001.json",
        &[RequestKind::Get],
        FaultAction::FailBefore(StorageKind::Transient),
    ));
    let error = publish(
        test.graph.root(),
        &empty_publication(test.genesis.clone(), ReadSet::Strict, "x"),
    )
    .await
    .unwrap_err();
    match error {
        OmniError::PublishInDoubt {
            commit_id,
            evidence,
        } => {
            assert_eq!(evidence, Evidence::InDoubt);
            assert_eq!(commit_id.len(), 26);
        }
        other => panic!("expected PublishInDoubt, got {other}"),
    }
}

#[tokio::test]
async fn a_failed_multi_table_publication_leaves_every_pin_unchanged() {
    for backend in BACKENDS {
        let test = TestGraph::new(backend).await;
        let (person, company) = (test.table_id("Person"), test.table_id("Company"));
        let mut staging = Staging::new(test.graph.root().clone(), test.genesis.clone());
        staging
            .stage_append(&person, vec![people(0, 4)])
            .await
            .unwrap();
        staging
            .stage_append(&company, vec![companies(0, 2)])
            .await
            .unwrap();
        {
            let _fault = fault_commit_puts(
                test.graph.root(),
                FaultAction::FailBefore(StorageKind::Permanent),
            );
            let error = staging
                .publish(ReadSet::Strict, operation("both"), "t")
                .await
                .unwrap_err();
            assert_eq!(error.evidence(), &Evidence::Unpublished);
        }
        let head = test
            .reopen()
            .await
            .commit("main", &CommitRef::Head)
            .await
            .unwrap();
        assert_eq!(head.pins, test.genesis.pins, "{backend:?}: no table moved");
        let published = staging
            .publish(ReadSet::Strict, operation("both"), "t")
            .await
            .unwrap();
        assert_eq!(published.pin(&person).unwrap().row_count, 4);
        assert_eq!(
            published.pin(&company).unwrap().row_count,
            2,
            "{backend:?}: both in one commit"
        );
    }
}

#[tokio::test]
async fn bad_storage_state_is_a_typed_error_naming_the_object() {
    let test = TestGraph::new(omnigraph_tests::Backend::Local).await;
    let root = test.graph.root().clone();
    let person = test.table_id("Person");
    let head = three_inserts(&test, &person).await;
    // A truncated commit object.
    let path = layout::commit_path("main", 2);
    let original = root.get(&path).await.unwrap().unwrap();
    root.put(&path, original.slice(..original.len() / 2))
        .await
        .unwrap();
    let error = test
        .graph
        .commit("main", &CommitRef::Seq(2))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corrupt);
    assert!(error.to_string().contains(&path), "{error}");
    root.put(&path, original).await.unwrap();

    // A gap in the sequence, found when HEAD is gone and the log is listed.
    let head_copy = root.get(&layout::head_path("main")).await.unwrap().unwrap();
    root.delete(&layout::head_path("main")).await.unwrap();
    assert_eq!(
        test.graph.commit("main", &CommitRef::Head).await.unwrap(),
        head,
        "LIST fallback"
    );
    let middle = root
        .get(&layout::commit_path("main", 1))
        .await
        .unwrap()
        .unwrap();
    root.delete(&layout::commit_path("main", 1)).await.unwrap();
    let error = test
        .graph
        .commit("main", &CommitRef::Head)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corrupt);
    assert!(
        error.to_string().contains(&layout::commit_path("main", 1)),
        "{error}"
    );
    assert!(error.to_string().contains("gap"), "{error}");
    root.put(&layout::commit_path("main", 1), middle)
        .await
        .unwrap();
    root.put(&layout::head_path("main"), head_copy)
        .await
        .unwrap();

    // A commit that pins a (detached) version that cannot be opened.
    let missing_version = (1u64 << 63) + 12_345;
    let mut broken = head.clone();
    broken.seq = head.seq + 1;
    broken.parent_commit_id = Some(head.commit_id.clone());
    broken.commit_id = "broken".into();
    for pin in &mut broken.pins {
        if pin.table_id == person {
            pin.version = missing_version;
        }
    }
    root.put_if_absent(
        &layout::commit_path("main", broken.seq),
        broken.to_bytes().unwrap(),
    )
    .await
    .unwrap();
    let snapshot = test.graph.snapshot("main", &CommitRef::Head).await.unwrap();
    assert_eq!(snapshot.commit().commit_id, "broken");
    let error = snapshot.table("Person").await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corrupt);
    let message = error.to_string();
    assert!(
        message.contains(&person) && message.contains(&missing_version.to_string()),
        "{message}"
    );
}

/// A manifest that holds another version than its name says (copied over, a restore
/// gone wrong) is refused as corrupt, naming the table and the version: it is never
/// read as the version the commit pins. (Lance compares the two; the adapter asserts
/// it after every open.)
#[tokio::test]
async fn a_manifest_holding_another_version_is_refused() {
    let test = TestGraph::new(omnigraph_tests::Backend::Local).await;
    let root = test.graph.root().clone();
    let person = test.table_id("Person");
    let first = insert_people(&test.graph, test.genesis.clone(), &person, 0, 10)
        .await
        .unwrap();
    let second = insert_people(&test.graph, first.clone(), &person, 10, 10)
        .await
        .unwrap();
    let older = first.require_pin(&person).unwrap().version;
    let newer = second.require_pin(&person).unwrap().version;
    let manifest = |version| {
        format!(
            "{}/{}",
            layout::table_path(&person),
            omnigraph_core::adapter::detached_manifest_object(version)
        )
    };
    let older_bytes = root.get(&manifest(older)).await.unwrap().unwrap();
    root.put(&manifest(newer), older_bytes).await.unwrap();
    // A fresh process's view: nothing cached from the writes above.
    let graph = Graph::open(&test.uri).await.unwrap();
    let snapshot = graph.snapshot("main", &CommitRef::Head).await.unwrap();
    assert_eq!(snapshot.commit().commit_id, second.commit_id);
    let error = snapshot.table("Person").await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corrupt, "{error}");
    let message = error.to_string();
    assert!(
        message.contains(&person) && message.contains(&newer.to_string()),
        "{message}"
    );
}

/// Only a branch's own commit objects are its commits: an object in a folder below
/// `commits/` (a tool's backup copy) is neither taken for the head when `HEAD` is gone
/// nor listed for cleanup to delete.
#[tokio::test]
async fn an_object_below_the_commits_folder_is_not_a_commit() {
    let test = TestGraph::new(omnigraph_tests::Backend::Local).await;
    let root = test.graph.root().clone();
    let person = test.table_id("Person");
    let head = three_inserts(&test, &person).await;
    let copy = root
        .get(&layout::commit_path("main", 1))
        .await
        .unwrap()
        .unwrap();
    for seq in [1u64, 9] {
        let stray = format!("{}/backup/{seq:020}.json", layout::commits_dir("main"));
        root.put(&stray, copy.clone()).await.unwrap();
    }
    root.delete(&layout::head_path("main")).await.unwrap();
    assert_eq!(
        test.graph.commit("main", &CommitRef::Head).await.unwrap(),
        head,
        "the head found by listing"
    );
    let below = test
        .graph
        .log("main")
        .unwrap()
        .objects_below(3)
        .await
        .unwrap();
    assert_eq!(
        below,
        vec![
            (1, layout::commit_path("main", 1)),
            (2, layout::commit_path("main", 2))
        ]
    );
}

/// Publishes `count` empty commits from `writer`, retrying at the caller on conflict.
async fn publish_many(uri: &str, writer: &str, count: usize) {
    let graph = Graph::open(uri).await.unwrap();
    let log = graph.log("main").unwrap();
    for index in 0..count {
        loop {
            let base = log.head().await.unwrap();
            let publication =
                empty_publication(base, ReadSet::Strict, &format!("{writer} {index}"));
            match publish(graph.root(), &publication).await {
                Ok(_) => break,
                Err(OmniError::ReadSetChanged { .. }) => continue,
                Err(other) => panic!("{writer}: {other}"),
            }
        }
    }
}

/// Run as a child process by `two_processes_publish_two_hundred_commits`, never alone.
#[tokio::test]
#[ignore = "a child process of two_processes_publish_two_hundred_commits, which runs it"]
async fn child_process_writer() {
    let (Ok(uri), Ok(writer)) = (
        std::env::var("OMNIGRAPH_TEST_CHILD_ROOT"),
        std::env::var("OMNIGRAPH_TEST_CHILD_WRITER"),
    ) else {
        panic!("run only by two_processes_publish_two_hundred_commits");
    };
    publish_many(&uri, &writer, 100).await;
}

#[tokio::test]
async fn two_processes_publish_two_hundred_commits() {
    let test = TestGraph::new(omnigraph_tests::Backend::Local).await;
    let spawn = |writer: &str| {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "publish::child_process_writer",
                "--exact",
                "--ignored",
                "--test-threads=1",
            ])
            .env("OMNIGRAPH_TEST_CHILD_ROOT", &test.uri)
            .env("OMNIGRAPH_TEST_CHILD_WRITER", writer)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let (mut first, mut second) = (spawn("A"), spawn("B"));
    assert!(first.wait().unwrap().success());
    assert!(second.wait().unwrap().success());

    let log = test.reopen().await.log("main").unwrap();
    let head = log.head().await.unwrap();
    assert_eq!(head.seq, 200, "exactly 200 commits after genesis");
    let commits = log.log(1000, None).await.unwrap();
    assert_eq!(commits.len(), 201);
    let mut summaries: Vec<String> = commits
        .iter()
        .filter(|commit| commit.seq > 0)
        .map(|commit| commit.operation.summary.clone())
        .collect();
    summaries.sort();
    let mut expected: Vec<String> = ["A", "B"]
        .iter()
        .flat_map(|writer| (0..100).map(move |index| format!("{writer} {index}")))
        .collect();
    expected.sort();
    assert_eq!(summaries, expected, "none lost, none duplicated");
    for pair in commits.windows(2) {
        assert_eq!(pair[0].seq, pair[1].seq + 1);
        assert_eq!(
            pair[0].parent_commit_id.as_deref(),
            Some(pair[1].commit_id.as_str())
        );
    }
}

/// Holds the next GET of `reader`'s commit `seq` for `delay`: a head read probing from
/// it stays in flight that long.
fn hold_first_get(
    reader: &omnigraph_publish::Branch,
    seq: u64,
    delay: std::time::Duration,
) -> omnigraph_core::storage::FaultHandle {
    use omnigraph_publish::BranchWriter;
    reader.graph().root().inject(
        FaultRule::new(
            layout::commit_path("main", seq),
            &[RequestKind::Get],
            FaultAction::Delay(delay),
        )
        .times(1),
    )
}

/// Heads asked for at once share reads of the log, and a read already in flight when a
/// caller asked never answers it: that caller sees a commit that landed after the read
/// began (what a server's queries at the head rely on).
#[tokio::test]
async fn heads_asked_at_once_share_reads_and_none_misses_a_commit_made_before_it_asked() {
    use omnigraph_publish::{Branch, BranchWriter};
    const CALLERS: usize = 16;
    for backend in BACKENDS {
        let test = TestGraph::new(backend).await;
        let person = test.table_id("Person");
        let reader = Branch::new(test.reopen().await, "main", "reader");
        let known = reader.head().await.unwrap();
        assert_eq!(known, test.genesis);

        // Every commit GET held, so the callers' reads overlap.
        let probe = reader.graph().root().probe();
        let held = reader.graph().root().inject(FaultRule::new(
            "_graph/branches/main/commits/*",
            &[RequestKind::Get],
            FaultAction::Delay(std::time::Duration::from_millis(100)),
        ));
        let heads = futures::future::join_all((0..CALLERS).map(|_| reader.head())).await;
        drop(held);
        for head in heads {
            assert_eq!(head.unwrap(), known, "{backend:?}");
        }
        let commit_gets = probe
            .requests()
            .iter()
            .filter(|request| {
                request.kind == RequestKind::Get && request.path.contains("/commits/")
            })
            .count();
        // Two reads of three commits each: the first caller's, which no other caller
        // may take (it was in flight when they asked), then one for all of them. Alone,
        // each caller would have made its own.
        assert_eq!(
            commit_gets, 6,
            "{backend:?}: {CALLERS} callers made {commit_gets} commit GETs"
        );

        // A read in flight (its GET of the known commit held; the two after it already
        // answered "absent"), a commit lands, and a caller asks: it gets the new commit,
        // not the in-flight read's answer.
        let held = hold_first_get(&reader, known.seq, std::time::Duration::from_secs(10));
        let reader = std::sync::Arc::new(reader);
        let in_flight = tokio::spawn({
            let reader = reader.clone();
            async move { reader.head().await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let landed = insert_people(&test.graph, known.clone(), &person, 0, 2)
            .await
            .unwrap();
        assert!(
            !in_flight.is_finished(),
            "{backend:?}: the first read is still in flight when the second caller asks"
        );
        let asked_after = reader.head().await.unwrap();
        assert_eq!(asked_after, landed, "{backend:?}");
        assert_eq!(in_flight.await.unwrap().unwrap(), known, "{backend:?}");
        drop(held);
    }
}

/// A head read whose caller goes away (its future dropped mid-read) leaves no waiter
/// behind: one that waited on it makes the next read and gets the head.
#[tokio::test]
async fn a_head_read_dropped_mid_read_leaves_its_waiters_a_read_of_their_own() {
    use omnigraph_publish::{Branch, BranchWriter};
    let test = TestGraph::new(omnigraph_tests::Backend::Local).await;
    let reader = std::sync::Arc::new(Branch::new(test.reopen().await, "main", "reader"));
    let known = reader.head().await.unwrap();
    let _held = hold_first_get(&reader, known.seq, std::time::Duration::from_secs(30));
    let dropped = tokio::spawn({
        let reader = reader.clone();
        async move { reader.head().await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let waiter = tokio::spawn({
        let reader = reader.clone();
        async move { reader.head().await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert!(
        !waiter.is_finished(),
        "the waiter waits on the read in flight"
    );
    dropped.abort();
    let head = tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
        .await
        .expect("the waiter made a read of its own")
        .unwrap()
        .unwrap();
    assert_eq!(head, known);
}
