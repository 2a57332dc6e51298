//! Table reservations (`docs/format.md` §7.7): a writer that keeps losing its slot holds
//! its tables for a short lease; writers of those tables wait, writers of others go on,
//! and the lease bounds what a holder that never comes back costs. Each handle here has
//! a root of its own, as another process would.

use bytes::Bytes;
use omnigraph_core::storage::{FaultAction, FaultRule, RequestKind, RequestProbe, StorageRoot};
use omnigraph_core::{ErrorKind, seams};
use omnigraph_graph::limits::{ATTEMPTS_BEFORE_RESERVING_MAX, LOSSES_BEFORE_RESERVING_MAX};
use omnigraph_graph::{Omnigraph, ScanRequest};
use omnigraph_publish::reservation::Reservation;
use omnigraph_publish::{
    Change, CommitOperation, CommitRef, Graph, GraphCommit, Publication, layout, publish,
};
use omnigraph_tests::{Backend, SOCIAL_SCHEMA, TestRoot, objects};
use serde_json::json;
use std::time::Duration;

/// A graph with people `p1..p3` and company `c1`, and its root.
async fn seeded() -> (Omnigraph, TestRoot) {
    let test = TestRoot::new(Backend::Local).await;
    let graph = Omnigraph::create(&test.uri, SOCIAL_SCHEMA).await.unwrap();
    graph
        .insert_json(
            "Person",
            objects(json!([
                {"id": "p1", "name": "Ada"},
                {"id": "p2", "name": "Bob"},
                {"id": "p3", "name": "Cy"}
            ])),
        )
        .await
        .unwrap();
    graph
        .insert_json("Company", objects(json!([{"id": "c1", "name": "Acme"}])))
        .await
        .unwrap();
    (graph, test)
}

fn table_of(head: &GraphCommit, type_name: &str) -> String {
    head.pin_of_type(type_name).unwrap().table_id.clone()
}

fn test_operation(summary: &str) -> CommitOperation {
    CommitOperation {
        kind: "test".into(),
        summary: summary.into(),
    }
}

/// Publishes a commit that changes no table and reserves `reservation`'s tables.
async fn reserve(graph: &Omnigraph, reservation: Reservation) -> GraphCommit {
    let head = graph.head().await.unwrap();
    let publication = Publication::record(
        head,
        Change::Reserve(reservation.clone()),
        None,
        test_operation("reserve"),
        "test",
    );
    let reserved = publish(graph.graph().root(), &publication).await.unwrap();
    let [held] = reserved.reservations.as_slice() else {
        panic!("one reservation: {:?}", reserved.reservations);
    };
    assert_eq!(
        (&held.holder, &held.tables),
        (&reservation.holder, &reservation.tables)
    );
    // The lease runs from the commit that took it.
    assert!(held.until_micros >= reserved.created_at + 1_000_000);
    reserved
}

async fn commit_at(uri: &str, seq: u64) -> GraphCommit {
    Graph::open(uri)
        .await
        .unwrap()
        .commit("main", &CommitRef::Seq(seq))
        .await
        .unwrap()
}

/// Waits until `probe` saw `count` requests of one of `kinds` whose path starts with
/// `prefix` (each is seen when it is made, before a delay fault holds it).
async fn requests_seen(probe: &RequestProbe, kinds: &[RequestKind], prefix: &str, count: usize) {
    for _ in 0..4_000 {
        let seen = probe
            .requests()
            .iter()
            .filter(|request| kinds.contains(&request.kind) && request.path.starts_with(prefix))
            .count();
        if seen >= count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!(
        "no {count} requests {kinds:?} under {prefix}: {:?}",
        probe.requests()
    );
}

/// Holds the next writes under `prefix`, one rule per hold: rules fire in order, each
/// once, so the first write is held `holds[0]` ms, the next `holds[1]`, and so on.
fn hold_writes(
    root: &StorageRoot,
    prefix: &str,
    holds: &[u64],
) -> Vec<omnigraph_core::storage::FaultHandle> {
    holds
        .iter()
        .map(|millis| {
            root.inject(FaultRule {
                times: Some(1),
                ..FaultRule::new(
                    format!("{prefix}*"),
                    &[RequestKind::Put, RequestKind::PutIfAbsent],
                    FaultAction::Delay(Duration::from_millis(*millis)),
                )
            })
        })
        .collect()
}

#[tokio::test]
async fn a_reservation_holds_writers_of_its_tables_until_its_holder_releases_it() {
    let (graph, test) = seeded().await;
    let head = graph.head().await.unwrap();
    let reservation = Reservation::new(vec![table_of(&head, "Person")]);
    let reserved = reserve(&graph, reservation.clone()).await;

    // Another process inserts a person: it must wait for the holder.
    let person_writer = Omnigraph::open(&test.uri).await.unwrap();
    person_writer.head().await.unwrap();
    let waiter = person_writer.graph().root().probe();
    let waiting = tokio::spawn(async move {
        person_writer
            .insert_json("Person", objects(json!([{"id": "p9", "name": "Dee"}])))
            .await
    });
    // A writer of another table goes on, and carries the reservation forward.
    let company_writer = Omnigraph::open(&test.uri).await.unwrap();
    let company = company_writer
        .insert_json("Company", objects(json!([{"id": "c2", "name": "Bolt"}])))
        .await
        .unwrap();
    assert_eq!(company.seq, reserved.seq + 1);
    assert_eq!(company.reservations, reserved.reservations);
    // It waits for the commit after the company's: it reads that slot, empty.
    let next = layout::commit_path("main", company.seq + 1);
    requests_seen(&waiter, &[RequestKind::Get], &next, 1).await;
    assert!(
        !waiting.is_finished(),
        "the person insert waits while Person is held"
    );
    assert_eq!(graph.head().await.unwrap().seq, company.seq);

    // The holder's publication releases it (here one that changes nothing).
    let release = Publication::record(
        company.clone(),
        Change::Nothing,
        Some(reservation.holder.clone()),
        test_operation("release"),
        "test",
    );
    let released = publish(graph.graph().root(), &release).await.unwrap();
    assert_eq!(released.seq, company.seq + 1);
    assert!(
        released.reservations.is_empty(),
        "the holder's commit releases it"
    );

    let inserted = waiting.await.unwrap().unwrap();
    assert_eq!(
        inserted.seq,
        released.seq + 1,
        "it published right after the release"
    );
    assert_eq!(
        graph
            .get("Person", &json!("p9"), &CommitRef::Head)
            .await
            .unwrap()
            .unwrap()["name"],
        "Dee"
    );
}

#[tokio::test]
async fn a_reservation_ends_with_its_lease() {
    let (graph, test) = seeded().await;
    let head = graph.head().await.unwrap();
    // A holder that never comes back, with a short lease (a writer that takes the
    // lease publishes 2 s; this one is planted).
    let mut reserved = head.clone();
    reserved.seq = head.seq + 1;
    reserved.parent_commit_id = Some(head.commit_id.clone());
    reserved.commit_id = "01SHORTLEASE00000000000000".into();
    let mut reservation = Reservation::new(vec![table_of(&head, "Person")]);
    reservation.until_micros = seams::now_micros() + 200_000;
    let until = reservation.until_micros;
    reserved.reservations = vec![reservation];
    graph
        .graph()
        .root()
        .put_if_absent(
            &layout::commit_path("main", reserved.seq),
            Bytes::from(serde_json::to_vec(&reserved).unwrap()),
        )
        .await
        .unwrap();
    let writer = Omnigraph::open(&test.uri).await.unwrap();
    let waiter = writer.graph().root().probe();
    let inserted = writer
        .insert_json("Person", objects(json!([{"id": "p9", "name": "Dee"}])))
        .await
        .unwrap();
    assert_eq!(inserted.seq, reserved.seq + 1);
    assert!(
        inserted.reservations.is_empty(),
        "a commit after the lease drops it: {:?}",
        inserted.reservations
    );
    assert!(
        inserted.created_at >= until,
        "it waited for the lease to end"
    );
    // It waited by reading the slot after the reservation, which it then took.
    let slot = layout::commit_path("main", reserved.seq + 1);
    assert!(
        waiter
            .requests()
            .iter()
            .any(|request| request.kind == RequestKind::Get && request.path == slot),
        "{:?}",
        waiter.requests()
    );
}

#[tokio::test]
async fn a_delete_that_lost_reserves_its_tables_and_lands_before_a_waiting_edge_insert() {
    let (deleter, test) = seeded().await;
    let head = deleter.head().await.unwrap();
    let edge_writer = Omnigraph::open(&test.uri).await.unwrap();
    edge_writer.head().await.unwrap();
    // The deleter's deletion file in Person is held on each of its tries, before it
    // takes the publish gate, so the edge writer's writes come in between.
    let person_files = format!("tables/{}/_deletions/", table_of(&head, "Person"));
    let probe = deleter.graph().root().probe();
    let mut holds = vec![1_000; ATTEMPTS_BEFORE_RESERVING_MAX as usize];
    holds.push(900);
    let _held = hold_writes(deleter.graph().root(), &person_files, &holds);
    let writes = [RequestKind::Put, RequestKind::PutIfAbsent];
    let deleting = tokio::spawn(async move {
        let deleted = deleter.delete("Person", "id = 'p1'").await;
        (deleted, deleter)
    });
    // An edge to p1 lands while each of the delete's first tries stages: the delete's
    // guard on WorksAt matches it, so it cannot follow, and plans again; after the
    // last of them, it reserves first.
    let mut edges = Vec::new();
    for held in 1..=ATTEMPTS_BEFORE_RESERVING_MAX as usize {
        requests_seen(&probe, &writes, &person_files, held).await;
        let edge = objects(json!([{"src": "p1", "dst": "c1", "since": 2000 + held}]));
        edges.push(edge_writer.insert_json("WorksAt", edge).await.unwrap());
    }
    assert_eq!(edges[0].seq, head.seq + 1);
    // While its next try stages, another edge to p1 waits for the delete.
    requests_seen(&probe, &writes, &person_files, holds.len()).await;
    let second_edge = edge_writer
        .insert_json(
            "WorksAt",
            objects(json!([{"src": "p1", "dst": "c1", "since": 2021}])),
        )
        .await
        .unwrap_err();
    assert_eq!(
        second_edge.kind(),
        ErrorKind::BadInput,
        "the edge waited for the delete of its endpoint: {second_edge}"
    );

    let (deleted, deleter) = deleting.await.unwrap();
    let deleted = deleted.unwrap().expect("p1 was there to delete");
    assert!(
        deleted.reservations.is_empty(),
        "the delete released its tables"
    );
    let reservation_commit = commit_at(&test.uri, deleted.seq - 1).await;
    assert_eq!(reservation_commit.operation.kind, "reserve");
    assert_eq!(reservation_commit.seq, edges.last().unwrap().seq + 1);
    let [reservation] = reservation_commit.reservations.as_slice() else {
        panic!("one reservation: {:?}", reservation_commit.reservations);
    };
    let mut held = reservation.tables.clone();
    held.sort();
    let mut expected = vec![table_of(&head, "Person"), table_of(&head, "WorksAt")];
    expected.sort();
    assert_eq!(held, expected, "a delete holds its read set");
    assert_eq!(deleter.head().await.unwrap().seq, deleted.seq);
    // Nothing dangles: the edges that landed went with p1, the last never landed.
    let edges = deleter
        .scan(
            "WorksAt",
            &ScanRequest {
                filter: None,
                columns: vec!["src".into()],
                limit: None,
            },
            &CommitRef::Head,
        )
        .await
        .unwrap();
    assert_eq!(edges.iter().map(|batch| batch.num_rows()).sum::<usize>(), 0);
}

#[tokio::test]
async fn a_crafted_reservation_is_refused_on_read() {
    let (graph, test) = seeded().await;
    let head = graph.head().await.unwrap();
    let person = table_of(&head, "Person");
    let mut crafted = head.clone();
    crafted.seq = head.seq + 1;
    crafted.parent_commit_id = Some(head.commit_id.clone());
    crafted.commit_id = "01CRAFTEDRESERVATION000000".into();
    let twice = |holder: &str| Reservation {
        holder: holder.into(),
        tables: vec![person.clone()],
        until_micros: i64::MAX,
    };
    crafted.reservations = vec![twice("a"), twice("b")];
    graph
        .graph()
        .root()
        .put_if_absent(
            &layout::commit_path("main", crafted.seq),
            Bytes::from(serde_json::to_vec(&crafted).unwrap()),
        )
        .await
        .unwrap();
    let error = Graph::open(&test.uri)
        .await
        .unwrap()
        .commit("main", &CommitRef::Head)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corrupt, "{error}");
    assert!(error.to_string().contains("reserved twice"), "{error}");
}

#[tokio::test]
async fn a_starved_insert_reserves_its_table_and_lands_before_a_waiting_insert() {
    let (inserter, test) = seeded().await;
    let head = inserter.head().await.unwrap();
    let other = Omnigraph::open(&test.uri).await.unwrap();
    other.head().await.unwrap();
    // The inserter's Person manifest is held on its first try and on its next two
    // re-commits, before it takes the publish gate: the other writer's inserts come in
    // between.
    let manifests = format!("tables/{}/_versions/", table_of(&head, "Person"));
    let probe = inserter.graph().root().probe();
    let mut holds = vec![800; LOSSES_BEFORE_RESERVING_MAX as usize];
    holds.push(900);
    let _held = hold_writes(inserter.graph().root(), &manifests, &holds);
    let writes = [RequestKind::Put, RequestKind::PutIfAbsent];
    let inserting = tokio::spawn(async move {
        let inserted = inserter
            .insert_json("Person", objects(json!([{"id": "p9", "name": "Dee"}])))
            .await;
        (inserted, inserter)
    });
    let mut others = Vec::new();
    for held in 1..=LOSSES_BEFORE_RESERVING_MAX as usize {
        requests_seen(&probe, &writes, &manifests, held).await;
        let id = format!("o{held}");
        let row = objects(json!([{"id": id, "name": id}]));
        others.push(other.insert_json("Person", row).await.unwrap());
    }
    // Starved: the next try holds Person, and this insert waits for it.
    requests_seen(&probe, &writes, &manifests, holds.len()).await;
    let waited = other
        .insert_json("Person", objects(json!([{"id": "p12", "name": "p12"}])))
        .await
        .unwrap();
    let (inserted, inserter) = inserting.await.unwrap();
    let inserted = inserted.unwrap();
    let reservation_commit = commit_at(&test.uri, inserted.seq - 1).await;
    assert_eq!(reservation_commit.operation.kind, "reserve");
    assert_eq!(reservation_commit.seq, others.last().unwrap().seq + 1);
    assert_eq!(
        reservation_commit.reservations[0].tables,
        vec![table_of(&head, "Person")]
    );
    assert_eq!(
        waited.seq,
        inserted.seq + 1,
        "the waiting insert came after it"
    );
    assert!(inserted.reservations.is_empty() && waited.reservations.is_empty());
    let ids = ["p9", "p12", "o1", "o6"];
    for id in ids {
        assert!(
            inserter
                .get("Person", &json!(id), &CommitRef::Head)
                .await
                .unwrap()
                .is_some(),
            "{id}"
        );
    }
}

#[tokio::test]
async fn an_update_that_plans_again_takes_the_head_its_lost_attempt_read() {
    let (updater, test) = seeded().await;
    let head = updater.head().await.unwrap();
    let other = Omnigraph::open(&test.uri).await.unwrap();
    // The updater's first staged write in Person is held, so that another writer's
    // update of the same row lands first: the update cannot follow it, and plans again.
    let person_files = format!("tables/{}/", table_of(&head, "Person"));
    let probe = updater.graph().root().probe();
    let _held = hold_writes(updater.graph().root(), &person_files, &[1_000]);
    let updating = tokio::spawn(async move {
        let updated = updater
            .update("Person", "id = 'p1'", &[("age".to_string(), json!(41))])
            .await;
        (updated, updater)
    });
    let writes = [RequestKind::Put, RequestKind::PutIfAbsent];
    requests_seen(&probe, &writes, &person_files, 1).await;
    let theirs = other
        .update("Person", "id = 'p1'", &[("age".to_string(), json!(40))])
        .await
        .unwrap()
        .unwrap();
    let (updated, updater) = updating.await.unwrap();
    let ours = updated.unwrap().expect("p1 was there to update");
    assert_eq!(
        ours.seq,
        theirs.seq + 1,
        "the update landed after the other"
    );
    // `HEAD` was never read: the first plan probed from the head the updater knew, the
    // lost race found the head from the winner (one commit ahead), and the second plan
    // planned on the head the lost race had just read. It did plan again: it wrote a second data file, its first having
    // updated a row the other update had moved.
    let requests = probe.requests();
    let head_reads = requests
        .iter()
        .filter(|request| request.kind == RequestKind::Get)
        .filter(|request| request.path == layout::head_path("main"))
        .count();
    assert_eq!(head_reads, 0, "{requests:?}");
    let data_files = format!("{person_files}data/");
    let staged = requests
        .iter()
        .filter(|request| request.kind == RequestKind::Put)
        .filter(|request| request.path.starts_with(&data_files))
        .count();
    assert_eq!(staged, 2, "{requests:?}");
    let ages = updater
        .scan(
            "Person",
            &ScanRequest {
                filter: Some("id = 'p1'".into()),
                columns: vec!["age".into()],
                limit: None,
            },
            &CommitRef::Head,
        )
        .await
        .unwrap();
    let ages: Vec<i32> = ages
        .iter()
        .flat_map(|batch| {
            let column = batch.column(0).as_any();
            let ages = column
                .downcast_ref::<omnigraph_core::arrow_array::Int32Array>()
                .unwrap();
            ages.iter().map(|age| age.unwrap()).collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(ages, [41], "the last update's value, once");
}
