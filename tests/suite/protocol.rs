//! Publication correctness: each test reproduces a way the protocol could break the
//! graph's invariants or report a false outcome, on real Lance tables and real storage
//! (a local folder or `memory://`), with faults injected through the object-store
//! wrapper and the named failpoints.

use bytes::Bytes;
use omnigraph_core::storage::{FaultAction, FaultRule, RequestKind, StorageRoot};
use omnigraph_core::{ErrorKind, Evidence, OmniError, StorageKind, failpoints};
use omnigraph_graph::{LoadMode, Omnigraph, ScanRequest};
use omnigraph_publish::{CommitRef, Graph, GraphCommit, Publication, ReadSet, layout, publish};
use omnigraph_tests::{Backend, SOCIAL_SCHEMA, TestRoot, all_objects, fault_commit_puts, objects};
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

fn empty_publication(base: GraphCommit, read_set: ReadSet, summary: &str) -> Publication {
    omnigraph_tests::publication_changing_nothing(base, read_set, summary)
}

/// `count` empty commits published on `head`, one after another: the last.
async fn publish_empty(
    root: &std::sync::Arc<StorageRoot>,
    mut head: GraphCommit,
    count: usize,
) -> GraphCommit {
    for index in 0..count {
        let summary = format!("empty {index} after {}", head.seq);
        head = publish(root, &empty_publication(head, ReadSet::Strict, &summary))
            .await
            .unwrap();
    }
    head
}

async fn new_graph(backend: Backend) -> (Omnigraph, TestRoot) {
    let test = TestRoot::new(backend).await;
    let graph = Omnigraph::create(&test.uri, SOCIAL_SCHEMA).await.unwrap();
    (graph, test)
}

/// A graph with people `p1..p3` and company `c1`.
async fn seeded_graph(backend: Backend) -> (Omnigraph, TestRoot) {
    let (graph, test) = new_graph(backend).await;
    graph
        .insert_json(
            "Person",
            objects(json!([
                {"id": "p1", "name": "Ada", "age": 36},
                {"id": "p2", "name": "Bob", "age": 41},
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

async fn head_of(uri: &str) -> GraphCommit {
    Graph::open(uri)
        .await
        .unwrap()
        .commit("main", &CommitRef::Head)
        .await
        .unwrap()
}

/// Every value of `column` in the table of `type_name` at the head.
async fn column_values(graph: &Omnigraph, type_name: &str, column: &str) -> Vec<String> {
    let batches = graph
        .scan(
            type_name,
            &ScanRequest {
                filter: None,
                columns: vec![column.to_string()],
                limit: Some(1_000_000),
            },
            &CommitRef::Head,
        )
        .await
        .unwrap();
    omnigraph_graph::rows::batches_to_json(&batches)
        .into_iter()
        .map(|row| row[column].as_str().unwrap().to_string())
        .collect()
}

// ---- 1. Dangling edges -------------------------------------------------------------

#[tokio::test]
async fn an_edge_insert_racing_a_node_delete_never_publishes_a_dangling_edge() {
    for backend in omnigraph_tests::BACKENDS {
        let (deleter, test) = seeded_graph(backend).await;
        // B is warm at seq n: its next insert starts from the head it knows.
        let writer = Omnigraph::open(&test.uri).await.unwrap();
        writer.head().await.unwrap();
        // A deletes p3, which has no edges: the edge table's pin does not move.
        deleter
            .delete("Person", "id = 'p3'")
            .await
            .unwrap()
            .unwrap();
        let error = writer
            .insert_json(
                "WorksAt",
                objects(json!([{"id": "w1", "src": "p3", "dst": "c1"}])),
            )
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::BadInput, "{backend:?}: {error}");
        assert!(error.to_string().contains("p3"), "{error}");
        assert_eq!(
            error.evidence(),
            &Evidence::Unpublished,
            "its link was staged"
        );
        assert!(
            column_values(&deleter, "WorksAt", "id").await.is_empty(),
            "{backend:?}: no edge was published"
        );
        // An edge to a node that still exists lands on the new head.
        let commit = writer
            .insert_json(
                "WorksAt",
                objects(json!([{"id": "w2", "src": "p1", "dst": "c1"}])),
            )
            .await
            .unwrap();
        assert_eq!(commit.pin_of_type("WorksAt").unwrap().row_count, 1);
    }
}

#[tokio::test]
async fn a_merge_load_of_edges_racing_a_node_delete_is_refused() {
    let (deleter, test) = seeded_graph(Backend::Memory).await;
    let writer = Omnigraph::open(&test.uri).await.unwrap();
    writer.head().await.unwrap();
    deleter
        .delete("Person", "id = 'p2'")
        .await
        .unwrap()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("edges.jsonl");
    std::fs::write(
        &path,
        json!({"type": "WorksAt", "id": "w1", "src": "p2", "dst": "c1"}).to_string() + "\n",
    )
    .unwrap();
    let error = writer.load(&path, LoadMode::Merge).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadInput, "{error}");
    assert!(column_values(&deleter, "WorksAt", "id").await.is_empty());
}

// ---- 2. The publisher's own commit reported as lost ---------------------------------

#[tokio::test]
async fn a_duplicated_acknowledgement_of_the_commit_put_is_our_publication() {
    for backend in omnigraph_tests::BACKENDS {
        let (graph, test) = new_graph(backend).await;
        let base = graph.head().await.unwrap();
        let fault = graph.graph().root().inject(
            FaultRule::new(
                "_graph/branches/main/commits/*",
                &[RequestKind::PutIfAbsent],
                FaultAction::DuplicatedAck,
            )
            .times(1),
        );
        // A strict publication: before, its own commit made it ReadSetChanged.
        let published = publish(
            graph.graph().root(),
            &empty_publication(base.clone(), ReadSet::Strict, "mine"),
        )
        .await
        .unwrap();
        assert_eq!(fault.fired(), 1);
        drop(fault);
        assert_eq!(published.seq, base.seq + 1);
        assert_eq!(head_of(&test.uri).await, published, "{backend:?}");

        // An insert: before, its own keys came back as a KeyConflict.
        let _fault = graph.graph().root().inject(
            FaultRule::new(
                "_graph/branches/main/commits/*",
                &[RequestKind::PutIfAbsent],
                FaultAction::DuplicatedAck,
            )
            .times(1),
        );
        let commit = graph
            .insert_json("Person", objects(json!([{"id": "p1", "name": "Ada"}])))
            .await
            .unwrap();
        assert_eq!(commit.seq, published.seq + 1, "exactly one new commit");
        let head = head_of(&test.uri).await;
        assert_eq!(head, commit);
        assert_eq!(head.pin_of_type("Person").unwrap().row_count, 1);
    }
}

// ---- 3. Restartable creation --------------------------------------------------------

fn social_catalog() -> omnigraph_core::schema::Catalog {
    omnigraph_core::schema::parse("social.pg", SOCIAL_SCHEMA).unwrap()
}

/// The graph at `uri` opens, its head is genesis, and it takes a write.
async fn assert_usable(uri: &str) {
    let head = head_of(uri).await;
    assert_eq!(head.seq, 0);
    assert_eq!(head.pins.len(), 3);
    let graph = Omnigraph::open(uri).await.unwrap();
    let commit = graph
        .insert_json("Person", objects(json!([{"id": "p1", "name": "Ada"}])))
        .await
        .unwrap();
    assert_eq!(commit.seq, 1);
}

#[tokio::test]
async fn a_create_that_stopped_after_the_format_object_is_finished_by_the_next() {
    for backend in omnigraph_tests::BACKENDS {
        let test = TestRoot::new(backend).await;
        let armed = failpoints::arm(failpoints::CREATE_AFTER_FORMAT, "return");
        let error = armed
            .run(Graph::create(&test.uri, &social_catalog(), "t"))
            .await
            .unwrap_err();
        drop(armed);
        assert_eq!(error.evidence(), &Evidence::Unpublished, "{error}");
        assert!(
            all_objects(&test.root)
                .await
                .contains(&layout::FORMAT.to_string())
        );
        let (_, genesis) = Graph::create(&test.uri, &social_catalog(), "t")
            .await
            .unwrap();
        assert_eq!(genesis.seq, 0, "{backend:?}");
        assert_usable(&test.uri).await;
    }
}

#[tokio::test]
async fn lost_and_duplicated_acknowledgements_during_create_are_resolved() {
    let cases = [
        ("_graph/FORMAT", FaultAction::LostAck),
        ("_graph/FORMAT", FaultAction::DuplicatedAck),
        ("_graph/branches/main/commits/*", FaultAction::LostAck),
        ("_graph/branches/main/commits/*", FaultAction::DuplicatedAck),
    ];
    for (pattern, action) in cases {
        let test = TestRoot::new(Backend::Memory).await;
        let root = StorageRoot::open(&test.uri).await.unwrap();
        let fault =
            root.inject(FaultRule::new(pattern, &[RequestKind::PutIfAbsent], action).times(1));
        let (_, genesis) = Graph::create_in_root(root.clone(), &social_catalog(), "t")
            .await
            .unwrap_or_else(|error| panic!("{pattern} {action:?}: {error}"));
        assert_eq!(fault.fired(), 1, "{pattern} {action:?}");
        assert_eq!(head_of(&test.uri).await, genesis, "{pattern} {action:?}");
        assert_usable(&test.uri).await;
    }
}

#[tokio::test]
async fn a_create_whose_genesis_put_failed_is_finished_by_the_next() {
    let test = TestRoot::new(Backend::Local).await;
    let root = StorageRoot::open(&test.uri).await.unwrap();
    {
        // A refusal cannot land later: a storage error, and the tables made are staging.
        let _fault = fault_commit_puts(&root, FaultAction::FailBefore(StorageKind::Configuration));
        let error = Graph::create_in_root(root.clone(), &social_catalog(), "t")
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Storage(StorageKind::Configuration));
        assert_eq!(error.evidence(), &Evidence::Unpublished);
    }
    {
        // Every genesis put times out: it may still land, so the create is in doubt.
        let _fault = fault_commit_puts(&root, FaultAction::FailBefore(StorageKind::Transient));
        let error = Graph::create_in_root(root.clone(), &social_catalog(), "t")
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::PublishInDoubt, "{error}");
        assert_eq!(error.evidence(), &Evidence::InDoubt);
    }
    assert!(Graph::open(&test.uri).await.is_ok(), "FORMAT is there");
    Graph::create(&test.uri, &social_catalog(), "t")
        .await
        .unwrap();
    assert_usable(&test.uri).await;
    // A finished graph is not created again.
    let error = Graph::create(&test.uri, &social_catalog(), "t")
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::AlreadyInitialized);
    assert_eq!(error.evidence(), &Evidence::BeforeEffect);
}

// ---- 4. A PUT still in flight after a transport error -------------------------------

#[tokio::test]
async fn a_commit_put_that_lands_after_a_timeout_is_decided_by_reissuing_it() {
    for backend in omnigraph_tests::BACKENDS {
        let (graph, test) = new_graph(backend).await;
        let base = graph.head().await.unwrap();
        let fault = graph.graph().root().inject(
            FaultRule::new(
                "_graph/branches/main/commits/*",
                &[RequestKind::PutIfAbsent],
                FaultAction::AppliedLater(Duration::from_millis(300)),
            )
            .times(1),
        );
        let outcome = publish(
            graph.graph().root(),
            &empty_publication(base.clone(), ReadSet::Strict, "slow"),
        )
        .await;
        assert_eq!(fault.fired(), 1);
        // Let the delayed write land, whatever the publisher decided.
        tokio::time::sleep(Duration::from_millis(600)).await;
        let head = head_of(&test.uri).await;
        let published = outcome.unwrap_or_else(|error| {
            panic!(
                "{backend:?}: reported {error} but the head is now seq {}",
                head.seq
            )
        });
        assert_eq!(head, published, "{backend:?}: exactly one new commit");
        assert_eq!(head.seq, base.seq + 1);
    }
}

#[tokio::test]
async fn a_publication_that_cannot_be_decided_is_in_doubt() {
    let (graph, _test) = new_graph(Backend::Memory).await;
    let base = graph.head().await.unwrap();
    let _put = fault_commit_puts(
        graph.graph().root(),
        FaultAction::AppliedLater(Duration::from_millis(50)),
    );
    let _get = graph.graph().root().inject(FaultRule::new(
        "_graph/branches/main/commits/*",
        &[RequestKind::Get],
        FaultAction::FailBefore(StorageKind::Transient),
    ));
    let error = publish(
        graph.graph().root(),
        &empty_publication(base, ReadSet::Strict, "x"),
    )
    .await
    .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::PublishInDoubt, "{error}");
    assert_eq!(error.evidence(), &Evidence::InDoubt);
}

// ---- 5. A warm handle after another process applies a schema ------------------------

#[tokio::test]
async fn a_warm_handle_recovers_after_another_handle_applies_a_schema() {
    let (warm, test) = seeded_graph(Backend::Memory).await;
    let other = Omnigraph::open(&test.uri).await.unwrap();
    let wider = SOCIAL_SCHEMA.replace(
        "node Company { id: String @key, name: String }",
        "node Company { id: String @key, name: String, city: String? }",
    );
    other.apply_schema(&wider, false).await.unwrap();
    let first = warm
        .insert_json("Person", objects(json!([{"id": "p4", "name": "Di"}])))
        .await;
    if let Err(error) = &first {
        assert_eq!(error.kind(), ErrorKind::ReadSetChanged, "{error}");
    }
    // Whatever the first attempt said, the handle is not stuck.
    let second = warm
        .insert_json("Person", objects(json!([{"id": "p5", "name": "Ed"}])))
        .await
        .unwrap();
    assert_eq!(second.schema, head_of(&test.uri).await.schema);
    let ids: BTreeSet<String> = column_values(&warm, "Person", "id")
        .await
        .into_iter()
        .collect();
    assert!(ids.contains("p5"));
}

// ---- 6. Transient storage errors are not corruption or bad input --------------------

fn transient_on(root: &StorageRoot, pattern: &str) -> omnigraph_core::storage::FaultHandle {
    root.inject(FaultRule::new(
        pattern,
        &[RequestKind::Get, RequestKind::RangedGet, RequestKind::Head],
        FaultAction::FailBefore(StorageKind::Transient),
    ))
}

fn assert_transient(error: &OmniError, what: &str) {
    assert_eq!(
        error.kind(),
        ErrorKind::Storage(StorageKind::Transient),
        "{what}: {error}"
    );
    assert_eq!(error.code().code, "storage_transient", "{what}");
    assert_eq!(error.code().exit_code, 75, "{what}");
}

#[tokio::test]
async fn a_throttled_read_is_storage_transient_on_every_read_path() {
    let (_graph, test) = seeded_graph(Backend::Memory).await;

    // Opening a pinned table.
    let fresh = Omnigraph::open(&test.uri).await.unwrap();
    let snapshot = fresh
        .graph()
        .snapshot("main", &CommitRef::Head)
        .await
        .unwrap();
    {
        let _fault = transient_on(fresh.graph().root(), "tables/*");
        let error = snapshot.table("Person").await.unwrap_err();
        assert_transient(&error, "open_pinned");
    }

    // count_where (update), keys_where (delete) and scan_table (scan, get).
    let fresh = Omnigraph::open(&test.uri).await.unwrap();
    fresh.head().await.unwrap();
    fresh
        .scan("Person", &ScanRequest::default(), &CommitRef::Head)
        .await
        .unwrap();
    let fresh = Omnigraph::open(&test.uri).await.unwrap();
    let head = fresh.head().await.unwrap();
    let _ = fresh.catalog_at(&head).await.unwrap();
    let _fault = transient_on(fresh.graph().root(), "tables/*/data/*");
    let error = fresh
        .update("Person", "name = 'Ada'", &[("age".to_string(), json!(37))])
        .await
        .unwrap_err();
    assert_transient(&error, "count_where");
    let error = fresh.delete("Person", "name = 'Ada'").await.unwrap_err();
    assert_transient(&error, "keys_where");
    let error = fresh
        .scan(
            "Person",
            &ScanRequest {
                filter: Some("name = 'Ada'".into()),
                ..Default::default()
            },
            &CommitRef::Head,
        )
        .await
        .unwrap_err();
    assert_transient(&error, "scan_table");
}

// ---- 7. Evidence is not under-reported ----------------------------------------------

#[tokio::test]
async fn a_bad_line_after_checked_batches_wrote_nothing_and_says_so() {
    let (graph, test) = new_graph(Backend::Memory).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("people.jsonl");
    let good = 3 * omnigraph_graph::limits::INGEST_BATCH_ROWS_MAX;
    let mut text = String::with_capacity(good * 48);
    for index in 0..good {
        text.push_str(
            &json!({"type": "Person", "id": format!("p{index}"), "name": "x"}).to_string(),
        );
        text.push('\n');
    }
    text.push_str("{not json\n");
    std::fs::write(&path, text).unwrap();
    let before = all_objects(&test.root).await;
    let error = graph.load(&path, LoadMode::Append).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadInput);
    assert!(
        error.to_string().contains(&format!("line {}", good + 1)),
        "{error}"
    );
    // Three batches were checked, and gathered to be staged as one append: nothing
    // was written yet, and the evidence says exactly that.
    assert_eq!(error.evidence(), &Evidence::BeforeEffect);
    assert_eq!(
        all_objects(&test.root).await,
        before,
        "no object was written"
    );
    assert_eq!(head_of(&test.uri).await.seq, 0, "nothing published");
}

#[tokio::test]
async fn a_schema_refusal_after_a_table_was_created_says_unpublished() {
    let (graph, _test) = seeded_graph(Backend::Memory).await;
    // Adds a type (a new table) and makes a property with nulls required (refused).
    // The new type comes first in the schema, so its table is created before the
    // refusal.
    let next = format!("node Aardvark {{ id: String @key }}\n{SOCIAL_SCHEMA}")
        .replace("age: Int32? @index", "age: Int32 @index");
    let error = graph.apply_schema(&next, true).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::SchemaViolation, "{error}");
    assert_eq!(
        error.evidence(),
        &Evidence::Unpublished,
        "the new type's table was created"
    );
}

// ---- 8. Untrusted stored state ------------------------------------------------------

/// Writes `commit` as the next commit after `head`, bypassing the publisher.
async fn plant(root: &StorageRoot, commit: &GraphCommit) {
    root.put_if_absent(
        &layout::commit_path("main", commit.seq),
        Bytes::from(serde_json::to_vec(commit).unwrap()),
    )
    .await
    .unwrap();
}

fn successor(head: &GraphCommit, id: &str) -> GraphCommit {
    let mut next = head.clone();
    next.seq = head.seq + 1;
    next.parent_commit_id = Some(head.commit_id.clone());
    next.commit_id = id.to_string();
    next
}

#[tokio::test]
async fn a_commit_whose_pin_points_elsewhere_is_corrupt() {
    let (graph, test) = seeded_graph(Backend::Local).await;
    let head = graph.head().await.unwrap();
    let company_path = head.pin_of_type("Company").unwrap().path.clone();
    let mut crafted = successor(&head, "01CRAFTEDPATH0000000000000");
    for pin in &mut crafted.pins {
        if pin.type_name == "Person" {
            // Readers of Person would open Company's table.
            pin.path = company_path.clone();
        }
    }
    plant(graph.graph().root(), &crafted).await;
    let reader = Graph::open(&test.uri).await.unwrap();
    let error = match reader.snapshot("main", &CommitRef::Head).await {
        Ok(snapshot) => snapshot
            .table("Person")
            .await
            .map(|_| ())
            .expect_err("a pin whose path is not its table's folder is refused"),
        Err(error) => error,
    };
    assert_eq!(error.kind(), ErrorKind::Corrupt, "{error}");
    assert!(
        error
            .to_string()
            .contains(&layout::commit_path("main", crafted.seq)),
        "{error}"
    );

    let mut escaping = crafted.clone();
    escaping.seq += 1;
    escaping.parent_commit_id = Some(crafted.commit_id.clone());
    escaping.commit_id = "01CRAFTEDPATH0000000000001".into();
    for pin in &mut escaping.pins {
        pin.path = "../../outside".into();
    }
    let error = GraphCommit::parse(
        "x",
        &serde_json::to_vec(&escaping).unwrap(),
        "main",
        escaping.seq,
    )
    .map(|_| ())
    .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corrupt, "{error}");
}

#[tokio::test]
async fn a_crafted_table_id_or_schema_hash_is_refused_on_read_and_on_write() {
    let (graph, _test) = seeded_graph(Backend::Memory).await;
    let head = graph.head().await.unwrap();
    let mut bad_id = successor(&head, "01CRAFTEDID000000000000000");
    bad_id.pins[0].table_id = "../../etc".into();
    let error = GraphCommit::parse(
        "c",
        &serde_json::to_vec(&bad_id).unwrap(),
        "main",
        bad_id.seq,
    )
    .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corrupt);
    let mut bad_schema = successor(&head, "01CRAFTEDSCHEMA00000000000");
    bad_schema.schema = "../../../etc/passwd".into();
    let error = GraphCommit::parse(
        "c",
        &serde_json::to_vec(&bad_schema).unwrap(),
        "main",
        bad_schema.seq,
    )
    .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corrupt);

    // The publisher refuses to write a commit that would not validate.
    let mut pin = head.pins[0].clone();
    pin.table_id = "../../etc".into();
    let publication =
        omnigraph_tests::publication_changing(head.clone(), ReadSet::Strict, vec![pin], "crafted");
    let error = publish(graph.graph().root(), &publication)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Internal, "{error}");
    assert_eq!(error.evidence(), &Evidence::BeforeEffect);
    assert_eq!(graph.head().await.unwrap(), head, "nothing published");
}

#[tokio::test]
async fn head_content_is_never_trusted_over_the_commit_it_copies() {
    let (graph, test) = seeded_graph(Backend::Memory).await;
    let head = graph.head().await.unwrap();
    let mut forged = head.clone();
    forged.commit_id = "01FORGEDHEAD00000000000000".into();
    for pin in &mut forged.pins {
        pin.row_count = 999;
    }
    graph
        .graph()
        .root()
        .put(
            &layout::head_path("main"),
            Bytes::from(serde_json::to_vec(&forged).unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(head_of(&test.uri).await, head);
}

#[tokio::test]
async fn an_oversized_commit_is_refused_without_being_read() {
    let (graph, test) = new_graph(Backend::Memory).await;
    let head = graph.head().await.unwrap();
    let mut huge = successor(&head, "01HUGECOMMIT00000000000000");
    let limit = omnigraph_publish::limits::COMMIT_BYTES_MAX;
    huge.operation.summary = String::new();
    let base_len = serde_json::to_vec(&huge).unwrap().len();
    // Valid JSON, one byte over the limit.
    huge.operation.summary = "x".repeat(limit + 1 - base_len);
    let bytes = serde_json::to_vec(&huge).unwrap();
    assert_eq!(bytes.len(), limit + 1);
    plant(graph.graph().root(), &huge).await;
    let reader = Graph::open(&test.uri).await.unwrap();
    let error = reader
        .commit("main", &CommitRef::Seq(huge.seq))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corrupt, "{error}");
    assert!(error.to_string().contains(&limit.to_string()), "{error}");
}

// ---- 9. A gap is never filled by a fork ---------------------------------------------

#[tokio::test]
async fn a_writer_never_fills_a_gap_in_the_log() {
    let (graph, test) = new_graph(Backend::Local).await;
    publish_empty(graph.graph().root(), graph.head().await.unwrap(), 3).await;
    let root = graph.graph().root();
    let first = root
        .get(&layout::commit_path("main", 1))
        .await
        .unwrap()
        .unwrap();
    // HEAD lags at 1, commit 2 is gone, commit 3 exists.
    root.put(&layout::head_path("main"), first).await.unwrap();
    root.delete(&layout::commit_path("main", 2)).await.unwrap();
    let before = all_objects(root).await;

    let writer = Omnigraph::open(&test.uri).await.unwrap();
    let error = writer
        .insert_json("Person", objects(json!([{"id": "p1", "name": "Ada"}])))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corrupt, "{error}");
    assert!(
        error.to_string().contains(&layout::commit_path("main", 2)),
        "names the missing object: {error}"
    );
    assert!(
        root.get(&layout::commit_path("main", 2))
            .await
            .unwrap()
            .is_none(),
        "no commit was published into the gap"
    );
    assert_eq!(all_objects(root).await, before);
}

/// A handle reads the head from the one it knows (commits s, s+1 and s+2, without
/// `HEAD`), and the log still decides: a log that moved on, a gap after the known head,
/// and a log restored to an earlier state are each read as a fresh handle reads them.
#[tokio::test]
async fn a_handle_probes_from_the_head_it_knows_and_the_log_decides() {
    let (graph, test) = new_graph(Backend::Local).await;
    let root = graph.graph().root().clone();
    let known = graph.head().await.unwrap();
    // Another writer publishes three commits; `HEAD` is made to lag at genesis, so only
    // the log tells the handle where the head is.
    let other = Omnigraph::open(&test.uri).await.unwrap();
    let head = publish_empty(&root, other.head().await.unwrap(), 3).await;
    let genesis = root
        .get(&layout::commit_path("main", known.seq))
        .await
        .unwrap()
        .unwrap();
    root.put(&layout::head_path("main"), genesis).await.unwrap();
    let probe = root.probe();
    assert_eq!(graph.head().await.unwrap(), head, "the log moved on");
    assert!(
        probe
            .requests()
            .iter()
            .all(|request| request.path != layout::head_path("main")),
        "HEAD is not read: {:?}",
        probe.requests()
    );
    // A gap after the head it knows: commit n+1 gone, n+2 there. Reported, never read
    // past.
    let next = publish_empty(&root, head.clone(), 2).await;
    let gap = layout::commit_path("main", head.seq + 1);
    let missing = root.get(&gap).await.unwrap().unwrap();
    root.delete(&gap).await.unwrap();
    let error = graph.head().await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corrupt, "{error}");
    assert!(error.to_string().contains(&gap.to_string()), "{error}");
    root.put(&gap, missing).await.unwrap();
    assert_eq!(graph.head().await.unwrap(), next);
    // The root restored to a backup that ends before the head the handle knows: the
    // restored head is the head, and the next write follows it.
    for seq in head.seq + 1..=next.seq {
        root.delete(&layout::commit_path("main", seq))
            .await
            .unwrap();
    }
    assert_eq!(
        graph.head().await.unwrap(),
        head,
        "the restored log decides"
    );
    let written = graph
        .insert_json("Person", objects(json!([{"id": "p9", "name": "After"}])))
        .await
        .unwrap();
    assert_eq!(
        (written.seq, written.parent_commit_id.as_deref()),
        (head.seq + 1, Some(head.commit_id.as_str()))
    );
}

#[tokio::test]
async fn a_winner_that_does_not_follow_the_base_is_corrupt() {
    let (graph, _test) = seeded_graph(Backend::Local).await;
    let head = graph.head().await.unwrap();
    // Commit n+1 names another parent than commit n; `HEAD` still names n.
    let mut stray = successor(&head, "01STRAYPARENT0000000000000");
    stray.parent_commit_id = Some("01NOTTHEPARENT000000000000".into());
    plant(graph.graph().root(), &stray).await;
    let before = all_objects(graph.graph().root()).await;
    // The handle built on n loses n+1 to the stray commit and reads it back.
    let error = graph
        .insert_json("Company", objects(json!([{"id": "c2", "name": "Two"}])))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corrupt, "{error}");
    let stray_path = layout::commit_path("main", stray.seq);
    assert!(error.to_string().contains(&stray_path), "{error}");
    let root = graph.graph().root();
    assert!(
        root.get(&layout::commit_path("main", stray.seq + 1))
            .await
            .unwrap()
            .is_none(),
        "nothing was published after it"
    );
    // Only the insert's unpublished staging was added.
    let added: Vec<String> = all_objects(root)
        .await
        .into_iter()
        .filter(|path| !before.contains(path))
        .collect();
    assert!(
        added.iter().all(|path| path.starts_with("tables/")),
        "{added:?}"
    );
}

// ---- 10. Bounded loops and typed cursors --------------------------------------------

#[tokio::test]
async fn a_log_cursor_past_the_head_is_bad_input() {
    let (graph, _test) = new_graph(Backend::Memory).await;
    let log = graph.graph().log("main").unwrap();
    let error = log.log(10, Some(7)).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadInput, "{error}");
    assert_eq!(
        log.log(10, Some(1)).await.unwrap().len(),
        1,
        "before head+1 is the head"
    );
}

#[tokio::test]
async fn an_integer_key_given_as_text_is_refused_before_any_filter() {
    let test = TestRoot::new(Backend::Memory).await;
    let graph = Omnigraph::create(&test.uri, "node Item { id: Int64 @key, name: String }")
        .await
        .unwrap();
    graph
        .insert_json(
            "Item",
            objects(json!([{"id": 1, "name": "one"}, {"id": 2, "name": "two"}])),
        )
        .await
        .unwrap();
    // The text "id" spliced into `id = "id"` compares the column with itself and
    // would match every row.
    for key in [json!("id"), json!("2"), json!(2.5), json!(true)] {
        let outcome = graph.get("Item", &key, &CommitRef::Head).await;
        let error = outcome.expect_err(&format!("{key} is not an Int64 key"));
        assert_eq!(error.kind(), ErrorKind::BadInput, "{key}: {error}");
        assert!(error.to_string().contains("field id"), "{key}: {error}");
    }
    assert!(
        graph
            .get("Item", &json!(2), &CommitRef::Head)
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn a_stale_head_copy_costs_a_bounded_probe() {
    let (graph, test) = new_graph(Backend::Memory).await;
    let genesis = graph.head().await.unwrap();
    let root = graph.graph().root();
    let genesis_bytes = root.get(&layout::head_path("main")).await.unwrap().unwrap();
    let mut head = genesis;
    let depth = omnigraph_publish::limits::HEAD_PROBE_MAX as u64 + 20;
    while head.seq < depth {
        head = publish(root, &empty_publication(head, ReadSet::Strict, "grow"))
            .await
            .unwrap();
    }
    root.put(&layout::head_path("main"), genesis_bytes)
        .await
        .unwrap();
    let fresh = StorageRoot::open(&test.uri).await.unwrap();
    let reader = Graph::open_root(fresh.clone()).await.unwrap();
    let probe = fresh.probe();
    assert_eq!(reader.commit("main", &CommitRef::Head).await.unwrap(), head);
    let counts = probe.counts();
    assert!(
        counts.get(RequestKind::Get) <= omnigraph_publish::limits::HEAD_PROBE_MAX as u64 + 6,
        "{counts}"
    );
    assert_eq!(counts.get(RequestKind::List), 1, "{counts}");
}

#[tokio::test]
async fn finding_a_commit_by_id_walks_a_bounded_distance() {
    let (graph, _test) = new_graph(Backend::Memory).await;
    let genesis = graph.head().await.unwrap();
    let root = graph.graph().root();
    let mut head = genesis.clone();
    let depth = omnigraph_publish::limits::FIND_WALK_MAX as u64 + 5;
    while head.seq < depth {
        head = publish(root, &empty_publication(head, ReadSet::Strict, "grow"))
            .await
            .unwrap();
    }
    let log = graph.graph().log("main").unwrap();
    let error = log.find(&genesis.commit_id).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound, "{error}");
    assert!(
        error.to_string().contains("seq"),
        "says how to name it: {error}"
    );
    let recent = log.log(3, None).await.unwrap();
    assert_eq!(log.find(&recent[2].commit_id).await.unwrap(), recent[2]);
}

// ---- 11. Bounded memory on input ----------------------------------------------------

#[tokio::test]
async fn the_jsonl_line_limit_holds_while_reading() {
    let (graph, _test) = new_graph(Backend::Memory).await;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("endless.jsonl");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let writer_path = fifo.clone();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        let mut pipe = std::fs::OpenOptions::new()
            .write(true)
            .open(&writer_path)
            .unwrap();
        // One byte over the limit, no newline, and the pipe stays open: a reader that
        // waits for the end of the line before checking its length never returns.
        let line = vec![b'a'; omnigraph_graph::limits::JSONL_LINE_BYTES_MAX + 1];
        let _ = pipe.write_all(&line);
        let _ = stopped.recv_timeout(Duration::from_secs(30));
    });
    let outcome =
        tokio::time::timeout(Duration::from_secs(10), graph.load(&fifo, LoadMode::Append)).await;
    let _ = stop.send(());
    writer.join().unwrap();
    let error = outcome
        .expect("the load refuses the line while reading it")
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadInput, "{error}");
    assert!(error.to_string().contains("line 1"), "{error}");
}

#[tokio::test]
async fn a_line_at_the_limit_loads() {
    let (graph, _test) = new_graph(Backend::Memory).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long.jsonl");
    let frame = json!({"type": "Person", "id": "p1", "name": ""}).to_string();
    let name = "n".repeat(omnigraph_graph::limits::JSONL_LINE_BYTES_MAX - frame.len());
    let line = json!({"type": "Person", "id": "p1", "name": name}).to_string();
    assert_eq!(line.len(), omnigraph_graph::limits::JSONL_LINE_BYTES_MAX);
    std::fs::write(&path, line + "\n").unwrap();
    let report = graph.load(&path, LoadMode::Append).await.unwrap();
    assert_eq!(report.rows["Person"], 1);
}

/// Merge-loads `rows` people with names of `name_bytes` bytes on a handle whose head
/// is stale, so the load loses the race once.
async fn merge_after_a_lost_race(rows: usize, name_bytes: usize) -> omnigraph_core::Result<()> {
    let (first, test) = seeded_graph(Backend::Memory).await;
    let second = Omnigraph::open(&test.uri).await.unwrap();
    second.head().await.unwrap();
    first
        .insert_json("Person", objects(json!([{"id": "q1", "name": "Q"}])))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("merge.jsonl");
    let name = "m".repeat(name_bytes);
    let mut text = String::new();
    for index in 0..rows {
        text.push_str(
            &json!({"type": "Person", "id": format!("m{index}"), "name": name}).to_string(),
        );
        text.push('\n');
    }
    std::fs::write(&path, text).unwrap();
    second.load(&path, LoadMode::Merge).await.map(|_| ())
}

#[tokio::test]
async fn the_merge_retention_cap_counts_bytes() {
    let cap = omnigraph_graph::limits::MERGE_RETAINED_BYTES_MAX;
    let name_bytes = 1_000_000;
    // Names alone just over the cap: the rows are not kept, so the load cannot merge
    // again after losing the race.
    let over = cap / name_bytes + 1;
    let error = merge_after_a_lost_race(over, name_bytes).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::ReadSetChanged, "{error}");
    assert_eq!(error.evidence(), &Evidence::Unpublished);
    // Well under the cap they are kept, and the load merges again on the new head.
    merge_after_a_lost_race(4, name_bytes).await.unwrap();
}

#[tokio::test]
async fn filling_one_tables_key_cache_does_not_block_another_tables_writers() {
    let (seed, test) = seeded_graph(Backend::Memory).await;
    let company = seed
        .head()
        .await
        .unwrap()
        .pin_of_type("Company")
        .unwrap()
        .table_id
        .clone();
    let handle = std::sync::Arc::new(Omnigraph::open(&test.uri).await.unwrap());
    handle.head().await.unwrap();
    // Company's key scan is slow; Person's is not.
    let _slow = handle.graph().root().inject(FaultRule::new(
        format!("tables/{company}/data/*"),
        &[RequestKind::Get, RequestKind::RangedGet],
        FaultAction::Delay(Duration::from_secs(4)),
    ));
    let slow = {
        let handle = handle.clone();
        tokio::spawn(async move {
            handle
                .insert_json("Company", objects(json!([{"id": "c2", "name": "Bolt"}])))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!slow.is_finished());
    tokio::time::timeout(
        Duration::from_secs(3),
        handle.insert_json("Person", objects(json!([{"id": "p9", "name": "Ida"}]))),
    )
    .await
    .expect("Person's key check does not wait for Company's key scan")
    .unwrap();
    assert!(
        !slow.is_finished(),
        "Company's insert is still reading keys"
    );
    slow.await.unwrap().unwrap();
}

// ---- The same races across two OS processes ------------------------------------------

const ROUNDS: usize = 24;
/// The time slot of one round of the two-process race.
const SLOT_MILLIS: u128 = 150;

/// Retries `attempt` on the conflicts a writer is expected to retry.
async fn retrying<T, F, Fut>(mut attempt: F) -> omnigraph_core::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = omnigraph_core::Result<T>>,
{
    let mut tries = 0;
    loop {
        match attempt().await {
            Err(error)
                if matches!(
                    error.kind(),
                    ErrorKind::ReadSetChanged | ErrorKind::ContentionExhausted
                ) && tries < 200 =>
            {
                tries += 1;
            }
            other => return other,
        }
    }
}

/// Run as a child process by `two_processes_insert_edges_and_delete_nodes`, never
/// alone. Writes one line per acknowledged outcome to the output file.
#[tokio::test]
#[ignore = "a child process of two_processes_insert_edges_and_delete_nodes, which runs it"]
async fn child_process_graph_writer() {
    let (Ok(uri), Ok(role), Ok(out)) = (
        std::env::var("OMNIGRAPH_TEST_CHILD_ROOT"),
        std::env::var("OMNIGRAPH_TEST_CHILD_ROLE"),
        std::env::var("OMNIGRAPH_TEST_CHILD_OUT"),
    ) else {
        panic!("run only by two_processes_insert_edges_and_delete_nodes");
    };
    let start: u128 = std::env::var("OMNIGRAPH_TEST_CHILD_START")
        .unwrap()
        .parse()
        .unwrap();
    // Rows of its own on a warm handle; the delete or edge insert of each round on a
    // fresh handle, as one `omnigraph` command per round would do. Both processes start
    // round k in the same time slot, so the delete and the edge insert overlap.
    let graph = Omnigraph::open(&uri).await.unwrap();
    let mut acknowledged = Vec::new();
    for round in 0..ROUNDS {
        let slot = start + round as u128 * SLOT_MILLIS;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis();
        if slot > now {
            tokio::time::sleep(Duration::from_millis((slot - now) as u64)).await;
        }
        let target = format!("s{round}");
        let command = Omnigraph::open(&uri).await.unwrap();
        if role == "a" {
            if round % 2 == 0 {
                let predicate = format!("id = '{target}'");
                retrying(|| command.delete("Person", &predicate))
                    .await
                    .unwrap_or_else(|error| panic!("delete {target}: {error}"));
                acknowledged.push(format!("deleted {target}"));
            }
        } else {
            let edge = format!("e{round}");
            let outcome = retrying(|| {
                command.insert_json(
                    "WorksAt",
                    objects(json!([{"id": edge.clone(), "src": target.clone(), "dst": "c1"}])),
                )
            })
            .await;
            match outcome {
                Ok(_) => acknowledged.push(format!("WorksAt {edge}")),
                Err(error) if error.kind() == ErrorKind::BadInput => {
                    acknowledged.push(format!("refused {edge}"));
                }
                Err(error) => panic!("edge {edge}: {error}"),
            }
        }
        let own = format!("{role}{round}");
        retrying(|| {
            graph.insert_json(
                "Person",
                objects(json!([{"id": own.clone(), "name": "child"}])),
            )
        })
        .await
        .unwrap_or_else(|error| panic!("{role}: insert {own}: {error}"));
        acknowledged.push(format!("Person {own}"));
    }
    std::fs::write(out, acknowledged.join("\n")).unwrap();
}

#[tokio::test]
async fn two_processes_insert_edges_and_delete_nodes() {
    let (graph, test) = seeded_graph(Backend::Local).await;
    let sources: Vec<Value> = (0..ROUNDS)
        .map(|round| json!({"id": format!("s{round}"), "name": "source"}))
        .collect();
    graph
        .insert_json("Person", objects(Value::Array(sources)))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Both children start round 0 at the same moment, after they have started up.
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 1_500;
    let spawn = |role: &str| {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "protocol::child_process_graph_writer",
                "--exact",
                "--ignored",
                "--test-threads=1",
            ])
            .env("OMNIGRAPH_TEST_CHILD_ROOT", &test.uri)
            .env("OMNIGRAPH_TEST_CHILD_ROLE", role)
            .env("OMNIGRAPH_TEST_CHILD_OUT", dir.path().join(role))
            .env("OMNIGRAPH_TEST_CHILD_START", start.to_string())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let (mut deleter, mut edger) = (spawn("a"), spawn("b"));
    assert!(deleter.wait().unwrap().success());
    assert!(edger.wait().unwrap().success());
    let mut acknowledged = Vec::new();
    for role in ["a", "b"] {
        let text = std::fs::read_to_string(dir.path().join(role)).unwrap();
        acknowledged.extend(text.lines().map(str::to_string));
    }

    let reader = Omnigraph::open(&test.uri).await.unwrap();
    let people = column_values(&reader, "Person", "id").await;
    let edges = column_values(&reader, "WorksAt", "id").await;
    let sources = column_values(&reader, "WorksAt", "src").await;
    let person_set: HashSet<&String> = people.iter().collect();
    assert_eq!(person_set.len(), people.len(), "no duplicate Person key");
    let edge_set: HashSet<&String> = edges.iter().collect();
    assert_eq!(edge_set.len(), edges.len(), "no duplicate edge key");
    for src in &sources {
        assert!(person_set.contains(src), "dangling edge from {src}");
    }
    for line in &acknowledged {
        let (what, key) = line.split_once(' ').unwrap();
        match what {
            "Person" => assert!(person_set.contains(&key.to_string()), "lost {line}"),
            "deleted" => assert!(!person_set.contains(&key.to_string()), "{line} is back"),
            "WorksAt" => {
                // An acknowledged edge stays unless its source was deleted after it.
                let round: usize = key[1..].parse().unwrap();
                if round % 2 == 1 {
                    assert!(edge_set.contains(&key.to_string()), "lost {line}");
                }
            }
            "refused" => {
                let round: usize = key[1..].parse().unwrap();
                assert_eq!(round % 2, 0, "{line}: its source was never deleted");
            }
            other => panic!("unknown outcome {other}"),
        }
    }
    assert_eq!(
        acknowledged
            .iter()
            .filter(|line| line.starts_with("Person "))
            .count(),
        2 * ROUNDS
    );
}

#[tokio::test]
async fn a_warm_handle_whose_checks_failed_on_a_stale_head_lands_on_retry() {
    let (warm, test) = seeded_graph(Backend::Memory).await;
    warm.head().await.unwrap();
    let other = Omnigraph::open(&test.uri).await.unwrap();
    other
        .insert_json("Company", objects(json!([{"id": "c2", "name": "Bolt"}])))
        .await
        .unwrap();
    let edge = || objects(json!([{"id": "w1", "src": "p1", "dst": "c2"}]));
    // Checked against the head the handle knew, c2 does not exist yet.
    if let Err(error) = warm.insert_json("WorksAt", edge()).await {
        assert_eq!(error.kind(), ErrorKind::BadInput, "{error}");
        assert_eq!(
            error.evidence(),
            &Evidence::BeforeEffect,
            "endpoints are checked before the gathered rows are written"
        );
    }
    // The handle forgot that head: the retry checks against the branch head.
    let ids = match warm.insert_json("WorksAt", edge()).await {
        Ok(_) => column_values(&warm, "WorksAt", "id").await,
        Err(error) if error.kind() == ErrorKind::KeyConflict => {
            column_values(&warm, "WorksAt", "id").await
        }
        Err(error) => panic!("the retry on the same handle fails: {error}"),
    };
    assert_eq!(ids, vec!["w1".to_string()]);
}

#[tokio::test]
async fn create_refuses_a_root_with_genesis_whatever_else_is_missing() {
    let (_graph, test) = new_graph(Backend::Memory).await;
    test.root.delete(layout::FORMAT).await.unwrap();
    let before = all_objects(&test.root).await;
    let error = Graph::create(&test.uri, &social_catalog(), "t")
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::AlreadyInitialized, "{error}");
    assert_eq!(error.evidence(), &Evidence::BeforeEffect);
    assert_eq!(all_objects(&test.root).await, before, "nothing written");
}

/// A JSONL file of `rows` Person rows of 1 MB each: more bytes than a batch holds in
/// far fewer rows.
fn long_rows(dir: &std::path::Path) -> (std::path::PathBuf, usize) {
    let path = dir.join("long.jsonl");
    let name = "n".repeat(1_000_000);
    let rows = omnigraph_graph::limits::INGEST_BATCH_BYTES_MAX / 1_000_000 + 2;
    let mut text = String::new();
    for index in 0..rows {
        text.push_str(
            &json!({"type": "Person", "id": format!("p{index}"), "name": name}).to_string(),
        );
        text.push('\n');
    }
    std::fs::write(&path, text).unwrap();
    (path, rows)
}

#[tokio::test]
async fn long_rows_are_staged_in_batches_bounded_by_bytes() {
    let (graph, _test) = new_graph(Backend::Memory).await;
    let dir = tempfile::tempdir().unwrap();
    let (path, rows) = long_rows(dir.path());
    // A simulated writer stages each batch it gathers as it is full: two batches, two
    // fragments.
    let simulation = omnigraph_core::seams::Simulation::new(7, 1_000_000, 1);
    let report = omnigraph_core::seams::simulate(simulation, graph.load(&path, LoadMode::Append))
        .await
        .unwrap();
    assert_eq!(report.rows["Person"], rows as u64);
    let table = omnigraph_tests::head_table(&graph, "Person").await;
    assert_eq!(table.manifest().fragments.len(), 2);
}

#[tokio::test]
async fn rows_past_the_stream_threshold_go_to_one_write_beside_the_checks() {
    let (graph, _test) = new_graph(Backend::Memory).await;
    let dir = tempfile::tempdir().unwrap();
    let (path, rows) = long_rows(dir.path());
    let report = graph.load(&path, LoadMode::Append).await.unwrap();
    assert_eq!(report.rows["Person"], rows as u64);
    let commit = report.commit.unwrap();
    assert_eq!(commit.pin_of_type("Person").unwrap().row_count, rows as u64);
    // Both batches went to one streamed write: one fragment, every row readable.
    let table = omnigraph_tests::head_table(&graph, "Person").await;
    assert_eq!(table.manifest().fragments.len(), 1);
    assert_eq!(table.count_rows(None).await.unwrap(), rows);
    let last = graph
        .get("Person", &json!(format!("p{}", rows - 1)), &CommitRef::Head)
        .await
        .unwrap()
        .expect("the last row");
    assert_eq!(last["name"].as_str().map(str::len), Some(1_000_000));
}

#[tokio::test]
async fn a_streamed_append_that_loses_the_race_is_committed_again_on_the_new_head() {
    let (first, test) = new_graph(Backend::Memory).await;
    let second = Omnigraph::open(&test.uri).await.unwrap();
    second.head().await.unwrap();
    first
        .insert_json("Person", objects(json!([{"id": "other", "name": "O"}])))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (path, rows) = long_rows(dir.path());
    let report = second.load(&path, LoadMode::Append).await.unwrap();
    let commit = report.commit.unwrap();
    assert_eq!(commit.seq, 2, "on the other writer's commit");
    assert_eq!(
        commit.pin_of_type("Person").unwrap().row_count,
        rows as u64 + 1
    );
    let reader = Omnigraph::open(&test.uri).await.unwrap();
    assert_eq!(
        reader
            .count("Person", None, &CommitRef::Head)
            .await
            .unwrap(),
        rows as u64 + 1
    );
}

#[tokio::test]
async fn a_bad_line_after_the_stream_began_fails_unpublished_and_publishes_nothing() {
    let (graph, test) = new_graph(Backend::Memory).await;
    let dir = tempfile::tempdir().unwrap();
    let (path, rows) = long_rows(dir.path());
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str(&json!({"type": "Person", "id": "bad", "name": 5}).to_string());
    text.push('\n');
    std::fs::write(&path, text).unwrap();
    let error = graph.load(&path, LoadMode::Append).await.unwrap_err();
    match &error {
        OmniError::BadInput { location, .. } => {
            assert_eq!(location.line, Some(rows as u64 + 1), "{error}");
            assert_eq!(location.field.as_deref(), Some("name"), "{error}");
        }
        other => panic!("expected the bad line, got {other}"),
    }
    // The first batch was already streaming to Lance: its files may exist.
    assert_eq!(error.evidence(), &Evidence::Unpublished, "{error}");
    let reader = Omnigraph::open(&test.uri).await.unwrap();
    assert_eq!(reader.head().await.unwrap().seq, 0, "nothing published");
    assert_eq!(
        reader
            .count("Person", None, &CommitRef::Head)
            .await
            .unwrap(),
        0
    );
    // The failed load stopped its write: no data file turns up later (the streamed
    // rows, written to the end, would make one). On this single-threaded runtime the
    // write is never mid-poll when it is stopped; on a multi-threaded one, files it
    // finished first would stay, unpublished, for cleanup.
    let person = reader
        .head()
        .await
        .unwrap()
        .pin_of_type("Person")
        .unwrap()
        .table_id
        .clone();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let data = format!("tables/{person}/data");
    assert_eq!(test.root.list(&data).await.unwrap(), Vec::<String>::new());
}

#[tokio::test]
async fn a_schema_document_whose_content_is_not_its_address_is_corrupt() {
    let (graph, test) = new_graph(Backend::Memory).await;
    let head = graph.head().await.unwrap();
    // Another schema's document, stored under this commit's schema hash.
    let other = TestRoot::new(Backend::Memory).await;
    let other_graph = Omnigraph::create(&other.uri, "node Thing { id: String @key }")
        .await
        .unwrap();
    let other_hash = other_graph.head().await.unwrap().schema;
    let other_document = other
        .root
        .get(&layout::schema_path(&other_hash))
        .await
        .unwrap()
        .unwrap();
    test.root
        .put(&layout::schema_path(&head.schema), other_document)
        .await
        .unwrap();
    let reader = Omnigraph::open(&test.uri).await.unwrap();
    let error = reader
        .insert_json("Person", objects(json!([{"id": "p1", "name": "n"}])))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corrupt, "{error}");
    assert!(error.to_string().contains(&head.schema), "{error}");
    assert_eq!(error.evidence(), &Evidence::BeforeEffect);
}

#[tokio::test]
async fn a_huge_predicate_never_makes_an_unreadable_commit() {
    let (graph, test) = seeded_graph(Backend::Memory).await;
    // The predicate is quoted in the commit's summary; 5 MiB of it would exceed the
    // largest commit a reader accepts.
    let predicate = format!("id = 'p1' OR name = '{}'", "x".repeat(5 << 20));
    graph
        .update("Person", &predicate, &[("name".into(), json!("renamed"))])
        .await
        .unwrap()
        .unwrap();
    let reader = Omnigraph::open(&test.uri).await.unwrap();
    let head = reader.head().await.unwrap();
    assert!(head.operation.summary.len() <= omnigraph_publish::limits::SUMMARY_LEN_MAX);
    assert!(
        head.operation
            .summary
            .starts_with("1 Person where id = 'p1'"),
        "{}",
        head.operation.summary
    );
}
