//! The log's reclaimed floor (`docs/format.md` §8.4): cleanup reclaims the commit objects
//! below each branch's floor after writing their history. The log lists every commit
//! (the reclaimed ones from the history), time travel and lookups by id say
//! `commit_reclaimed`, head discovery by listing ignores what lies below the floor, a
//! writer whose put lands below the floor goes on from the head, and a run that stops
//! between the history and the deletions leaves a log that reads, which the next run
//! finishes.

use omnigraph_core::{ErrorKind, failpoints};
use omnigraph_graph::Omnigraph;
use omnigraph_maintenance::MaintenanceExt;
use omnigraph_publish::{CommitRef, GraphCommit, layout};
use omnigraph_tests::{Backend, SOCIAL_SCHEMA, TestRoot, ids_at, objects};
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;

/// Updates written before the cleanup.
const UPDATES: usize = 30;

/// A graph with a person and a company, then [`UPDATES`] updates of the company: a long
/// log whose Person pin never moves.
async fn long_log(backend: Backend) -> (Omnigraph, TestRoot) {
    let test = TestRoot::new(backend).await;
    let graph = Omnigraph::create(&test.uri, SOCIAL_SCHEMA).await.unwrap();
    graph
        .insert_json("Person", objects(json!([{"id": "p1", "name": "Ada"}])))
        .await
        .unwrap();
    graph
        .insert_json("Company", objects(json!([{"id": "c1", "name": "c"}])))
        .await
        .unwrap();
    for round in 0..UPDATES {
        graph
            .update(
                "Company",
                "id = 'c1'",
                &[("name".into(), json!(format!("c{round}")))],
            )
            .await
            .unwrap();
    }
    (graph, test)
}

/// The seqs of the commit objects of `branch`.
async fn commit_objects(test: &TestRoot, branch: &str) -> BTreeSet<u64> {
    test.root
        .list(&layout::commits_dir(branch))
        .await
        .unwrap()
        .iter()
        .filter_map(|path| layout::seq_of_commit_path(branch, path))
        .collect()
}

/// Writes commit `seq` of `main` again under another id (a commit a writer put there,
/// as the log sees it); returns the id it had.
async fn with_another_id(test: &TestRoot, seq: u64) -> String {
    let path = layout::commit_path("main", seq);
    let mut commit: GraphCommit =
        serde_json::from_slice(&test.root.get(&path).await.unwrap().unwrap()).unwrap();
    let had = std::mem::replace(&mut commit.commit_id, omnigraph_core::seams::new_id());
    test.root
        .put(&path, serde_json::to_vec(&commit).unwrap().into())
        .await
        .unwrap();
    had
}

async fn cleanup_keeping_one(graph: &Omnigraph) -> omnigraph_maintenance::CleanupReport {
    omnigraph_tests::cleanup_keeping_one_after(graph, Duration::from_secs(120)).await
}

/// Every entry of the log from the head down, checked to follow each other down to
/// genesis.
async fn whole_log(graph: &Omnigraph) -> Vec<omnigraph_publish::log::LogEntry> {
    let entries = graph
        .graph()
        .log("main")
        .unwrap()
        .entries(omnigraph_publish::limits::LOG_PAGE_MAX, None)
        .await
        .unwrap();
    for pair in entries.windows(2) {
        assert_eq!(pair[0].seq, pair[1].seq + 1);
        assert_eq!(
            pair[0].parent_commit_id.as_deref(),
            Some(pair[1].commit_id.as_str())
        );
    }
    assert_eq!(entries.last().unwrap().seq, 0, "down to genesis");
    entries
}

#[tokio::test]
async fn a_log_with_a_reclaimed_floor_lists_everything_and_refuses_what_is_gone() {
    let (graph, test) = long_log(Backend::Local).await;
    let before = graph.head().await.unwrap();
    // A `HEAD` copy naming commit 5, which cleanup is about to reclaim.
    let old_head_copy = test
        .root
        .get(&layout::commit_path("main", 5))
        .await
        .unwrap()
        .unwrap();
    let report = cleanup_keeping_one(&graph).await;
    let floor = report.logs[0].floor;
    assert_eq!(floor, before.seq, "everything below the newest data commit");
    assert_eq!(report.logs[0].history_written, floor);
    assert_eq!(report.totals.commits_removed, floor - 1, "genesis stays");
    let head = graph.head().await.unwrap();
    assert_eq!(
        commit_objects(&test, "main").await,
        BTreeSet::from([0, before.seq, head.seq]),
        "genesis, the newest data commit and the record"
    );
    // The log lists every commit, the reclaimed ones from the history.
    let entries = whole_log(&graph).await;
    assert_eq!(entries.len() as u64, head.seq + 1);
    assert!(
        entries
            .iter()
            .all(|entry| entry.reclaimed == (entry.seq < floor))
    );
    assert_eq!(entries.last().unwrap().operation.kind, "init");
    // Time travel, by seq and by id, says the commit was reclaimed.
    let reclaimed = entries.iter().find(|entry| entry.seq == 5).unwrap();
    for at in [
        CommitRef::Seq(5),
        CommitRef::Id(reclaimed.commit_id.clone()),
    ] {
        let error = graph.graph().commit("main", &at).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::CommitReclaimed, "{at:?}: {error}");
    }
    // Head discovery without a HEAD copy lists the commits, and ignores genesis below
    // the floor; with a copy that names a reclaimed commit, it lists them too.
    for head_copy in [None, Some(old_head_copy)] {
        match head_copy {
            None => test.root.delete(&layout::head_path("main")).await.unwrap(),
            Some(bytes) => test
                .root
                .put(&layout::head_path("main"), bytes)
                .await
                .unwrap(),
        }
        let cold = Omnigraph::open(&test.uri).await.unwrap();
        assert_eq!(cold.head().await.unwrap(), head);
        assert_eq!(ids_at(&cold, "Company", &CommitRef::Head).await, ["c1"]);
    }
    // The history is small: well under 100 bytes a reclaimed commit.
    let history: u64 = test
        .root
        .list_with_meta(&layout::history_dir("main"))
        .await
        .unwrap()
        .iter()
        .map(|object| object.size)
        .sum();
    assert!(history < floor * 100, "{history} bytes for {floor} commits");
}

/// Five more commits (Company renamed), then cleanup keeping one: every commit below
/// the head is reclaimed. Returns the new floor.
async fn supersede_and_reclaim(graph: &Omnigraph) -> u64 {
    for round in 0..5 {
        graph
            .update(
                "Company",
                "id = 'c1'",
                &[("name".into(), json!(format!("d{round}")))],
            )
            .await
            .unwrap();
    }
    cleanup_keeping_one(graph).await.logs[0].floor
}

/// A handle whose cached head is a commit cleanup reclaimed long after it was
/// superseded writes a table that did not move since: its put at the next seq finds
/// the slot free (that commit's object was reclaimed), lands below the floor, and is no
/// commit. The writer sees it, goes on from the head, and publishes there; no reader
/// ever sees the leftover, and the next cleanup deletes it.
#[test]
fn a_writer_on_a_reclaimed_base_publishes_at_the_head_never_below_the_floor() {
    // A debug build's frames for a publication that goes on from the head outgrow a
    // test thread's stack.
    omnigraph_tests::on_a_big_stack(writer_on_a_reclaimed_base);
}

async fn writer_on_a_reclaimed_base() {
    let (graph, test) = long_log(Backend::Memory).await;
    // A warm handle that saw the log when it was short.
    let stale = Omnigraph::open(&test.uri).await.unwrap();
    stale
        .insert_json("Person", objects(json!([{"id": "p2", "name": "Bo"}])))
        .await
        .unwrap();
    let stale_head = stale.head().await.unwrap().seq;
    let floor = supersede_and_reclaim(&graph).await;
    assert!(
        stale_head + 1 < floor,
        "the stale head's successor is reclaimed"
    );
    let head = graph.head().await.unwrap();
    // Minutes later (the base is old), the stale handle inserts into Person, which no
    // commit since its head moved.
    let landed: GraphCommit = omnigraph_tests::later_by(Duration::from_secs(180), async {
        stale
            .insert_json("Person", objects(json!([{"id": "p3", "name": "Cy"}])))
            .await
            .unwrap()
    })
    .await;
    assert_eq!(landed.seq, head.seq + 1, "published at the head");
    assert_eq!(graph.head().await.unwrap(), landed);
    assert_eq!(
        ids_at(&graph, "Person", &CommitRef::Head).await,
        ["p1", "p2", "p3"]
    );
    assert_eq!(ids_at(&graph, "Company", &CommitRef::Head).await, ["c1"]);
    // Its put below the floor is a leftover: readers ignore it, the log is whole, and
    // the next cleanup deletes it.
    assert!(
        commit_objects(&test, "main")
            .await
            .contains(&(stale_head + 1))
    );
    let cold = Omnigraph::open(&test.uri).await.unwrap();
    test.root.delete(&layout::head_path("main")).await.unwrap();
    assert_eq!(cold.head().await.unwrap(), landed, "listing ignores it");
    whole_log(&graph).await;
    let next = omnigraph_tests::cleanup_keeping_one_after(&graph, Duration::from_secs(600)).await;
    assert!(next.totals.commits_removed >= 1, "{:?}", next.logs);
    assert!(
        !commit_objects(&test, "main")
            .await
            .contains(&(stale_head + 1))
    );
    whole_log(&graph).await;
}

/// Two handles that cached the same head, long since reclaimed: the first one's put
/// lands below the floor, a leftover created a moment ago. The second one's put at the
/// same seq loses to that leftover, which is young but no commit: the second must not
/// take it (nor the free slot after it) for the head, and publishes at the head too.
/// DST seed 98659 found a staged delete that published there.
#[test]
fn a_writer_that_loses_its_slot_to_a_leftover_below_the_floor_publishes_at_the_head() {
    omnigraph_tests::on_a_big_stack(loses_to_a_leftover);
}

async fn loses_to_a_leftover() {
    let (graph, test) = long_log(Backend::Memory).await;
    let first = Omnigraph::open(&test.uri).await.unwrap();
    first
        .insert_json("Person", objects(json!([{"id": "p2", "name": "Bo"}])))
        .await
        .unwrap();
    let stale_head = first.head().await.unwrap();
    let second = Omnigraph::open(&test.uri).await.unwrap();
    assert_eq!(second.head().await.unwrap(), stale_head);
    let floor = supersede_and_reclaim(&graph).await;
    assert!(
        stale_head.seq + 2 < floor,
        "the stale head's successors are reclaimed"
    );
    let head = graph.head().await.unwrap();
    let (landed_first, landed_second): (GraphCommit, GraphCommit) =
        omnigraph_tests::later_by(Duration::from_secs(180), async {
            let landed_first = first
                .insert_json("Person", objects(json!([{"id": "p3", "name": "Cy"}])))
                .await
                .unwrap();
            let landed_second = second
                .insert_json("Person", objects(json!([{"id": "p4", "name": "Di"}])))
                .await
                .unwrap();
            (landed_first, landed_second)
        })
        .await;
    assert_eq!(
        landed_first.seq,
        head.seq + 1,
        "the first published at the head"
    );
    assert_eq!(
        landed_second.seq,
        head.seq + 2,
        "the second published at the head, not past the leftover"
    );
    assert_eq!(graph.head().await.unwrap(), landed_second);
    assert_eq!(
        ids_at(&graph, "Person", &CommitRef::Head).await,
        ["p1", "p2", "p3", "p4"]
    );
    // The slot the second lost holds the first's leftover; the one after it stays free.
    let objects = commit_objects(&test, "main").await;
    assert!(objects.contains(&(stale_head.seq + 1)), "{objects:?}");
    assert!(!objects.contains(&(stale_head.seq + 2)), "{objects:?}");
    whole_log(&graph).await;
}

/// A run that stops after writing the history and before deleting the commits it
/// covers leaves every commit object in place: the log, the head and writers are as
/// before, and the next run deletes them, the history unchanged.
#[tokio::test]
async fn a_cleanup_stopped_between_the_history_and_the_deletions_is_finished_by_the_next() {
    let (graph, test) = long_log(Backend::Memory).await;
    let objects_before = commit_objects(&test, "main").await;
    // A `HEAD` that lags far behind (its writers' copies failed): it names commit 5.
    let stale = graph
        .graph()
        .commit("main", &CommitRef::Seq(5))
        .await
        .unwrap();
    test.root
        .put(
            &layout::head_path("main"),
            serde_json::to_vec(&stale).unwrap().into(),
        )
        .await
        .unwrap();
    let armed = failpoints::arm(failpoints::CLEANUP_AFTER_HISTORY, "return");
    // The record's own copy fails too, as copies may: `HEAD` still lags.
    armed.also(failpoints::PUBLISH_AFTER_COMMIT_PUT, "return");
    let stopped = armed.run(cleanup_keeping_one(&graph)).await;
    drop(armed);
    let log = &stopped.logs[0];
    assert!(log.error.is_some(), "{log:?}");
    assert_eq!(log.commits_removed, 0);
    assert_ne!(stopped.exit_code(), 0);
    let history_dir = layout::history_dir("main");
    let history: Vec<_> = test.root.list_with_meta(&history_dir).await.unwrap();
    assert_eq!(history.len(), 1);
    // Nothing was deleted: every commit object is there, with the record's.
    let head = graph.head().await.unwrap();
    let mut expected = objects_before.clone();
    expected.insert(head.seq);
    assert_eq!(commit_objects(&test, "main").await, expected);
    assert_eq!(whole_log(&graph).await.len() as u64, head.seq + 1);
    // Deletions cut short leave any leftovers: here commit 5 without its successors.
    // The run lifted `HEAD` before it moved the floor, so no reader follows it there.
    for seq in [6, 7] {
        test.root
            .delete(&layout::commit_path("main", seq))
            .await
            .unwrap();
    }
    let cold = Omnigraph::open(&test.uri).await.unwrap();
    assert_eq!(cold.head().await.unwrap(), head);
    // The walk of the commits stops at the floor: the leftovers below it are not the
    // log, and neither is a commit a writer landed there (another id at a reclaimed
    // seq): the history names what was published.
    let commits = |graph: &Omnigraph| {
        let log = graph.graph().log("main").unwrap();
        async move {
            log.log(omnigraph_publish::limits::LOG_PAGE_MAX, None)
                .await
                .unwrap()
        }
    };
    assert_eq!(commits(&graph).await.last().unwrap().seq, log.floor);
    let published_id = with_another_id(&test, log.floor - 1).await;
    let entries = whole_log(&graph).await;
    let at_reclaimed = entries.iter().find(|entry| entry.seq == log.floor - 1);
    assert_eq!(at_reclaimed.unwrap().commit_id, published_id);
    let cold = Omnigraph::open(&test.uri).await.unwrap();
    assert_eq!(cold.head().await.unwrap(), head);
    graph
        .insert_json("Person", objects(json!([{"id": "p9", "name": "N"}])))
        .await
        .unwrap();
    // The next run deletes what the first covered, and writes no history again.
    let finished = cleanup_keeping_one(&graph).await;
    assert!(finished.logs[0].error.is_none(), "{:?}", finished.logs);
    assert!(
        finished.totals.commits_removed >= log.floor - 3,
        "all but genesis and the two deleted by hand"
    );
    let after: Vec<_> = test.root.list_with_meta(&history_dir).await.unwrap();
    assert_eq!(after[0], history[0], "the first chunk is unchanged");
    let entries = whole_log(&graph).await;
    assert_eq!(entries.len() as u64, graph.head().await.unwrap().seq + 1);
    assert!(commit_objects(&test, "main").await.len() <= 4);
}

/// A leftover of an earlier life below a branch's floor, and a `HEAD` that lags to it
/// (its successors reclaimed): a creation of the name, now free, that takes the leftover
/// for the newest commit lands below the floor, and goes again after the newest commit
/// a listing finds, instead of calling the name taken.
#[tokio::test]
async fn a_creation_that_lands_below_the_floor_goes_again_after_the_listed_newest() {
    let test = TestRoot::new(Backend::Memory).await;
    let main = Omnigraph::create(&test.uri, SOCIAL_SCHEMA).await.unwrap();
    main.create_branch("b", &CommitRef::Head).await.unwrap();
    let first_end = main.delete_branch("b").await.unwrap();
    let leftover_bytes = test
        .root
        .get(&layout::commit_path("b", first_end.seq))
        .await
        .unwrap()
        .unwrap();
    main.create_branch("b", &CommitRef::Head).await.unwrap();
    let b = omnigraph_tests::on_branch(&main, "b").await;
    for round in 0..6 {
        b.insert_json(
            "Person",
            objects(json!([{"id": format!("p{round}"), "name": "N"}])),
        )
        .await
        .unwrap();
    }
    // The branch's new life records the default grace (its source had no record):
    // the run lowers it on purpose.
    let report = omnigraph_tests::later_by(
        Duration::from_secs(120),
        main.maintenance()
            .cleanup(&omnigraph_tests::keep_with_minimum_grace(1).lowering_grace()),
    )
    .await
    .unwrap();
    let floor = report
        .logs
        .iter()
        .find(|log| log.branch == "b")
        .unwrap()
        .floor;
    assert!(floor > first_end.seq + 2, "{report:?}");
    let second_end = main.delete_branch("b").await.unwrap();
    // The leftover, and a `HEAD` naming it; the commits after it are reclaimed.
    test.root
        .put(
            &layout::commit_path("b", first_end.seq),
            leftover_bytes.clone(),
        )
        .await
        .unwrap();
    test.root
        .put(&layout::head_path("b"), leftover_bytes)
        .await
        .unwrap();
    assert!(
        !commit_objects(&test, "b")
            .await
            .contains(&(first_end.seq + 1))
    );
    let created = omnigraph_tests::later_by(
        Duration::from_secs(120),
        main.create_branch("b", &CommitRef::Head),
    )
    .await
    .unwrap();
    assert_eq!(created.seq, second_end.seq + 1);
    assert_eq!(
        created.parent_commit_id.as_deref(),
        Some(second_end.commit_id.as_str())
    );
    let b = omnigraph_tests::on_branch(&main, "b").await;
    assert_eq!(b.head().await.unwrap(), created);
    assert!(
        ids_at(&b, "Person", &CommitRef::Head).await.is_empty(),
        "a new life from main"
    );
}

/// Above the floor, the log's walk checks that each commit is the parent of the one
/// above it: an object replaced under the log is corruption named at the commit whose
/// parent it no longer is, never a page that silently mixes two histories.
#[tokio::test]
async fn a_log_walk_refuses_a_commit_that_is_not_its_successors_parent() {
    let (graph, test) = long_log(Backend::Memory).await;
    with_another_id(&test, 10).await;
    let error = graph
        .graph()
        .log("main")
        .unwrap()
        .log(omnigraph_publish::limits::LOG_PAGE_MAX, None)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corrupt, "{error}");
    assert!(
        error.to_string().contains(&layout::commit_path("main", 11)),
        "{error}"
    );
}
