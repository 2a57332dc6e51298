//! Loads past their key budget: the keys a load keeps spill to sorted runs on disk, and
//! every check still holds (a key given twice, a key the table holds, an edge whose
//! endpoint is missing), naming the first bad row. The runs go when the load ends.

use arrow_array::{ArrayRef, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use omnigraph_core::OmniError;
use omnigraph_graph::{InputFormat, LoadBudget, LoadMode, Omnigraph};
use omnigraph_publish::CommitRef;
use omnigraph_tests::{Backend, SOCIAL_SCHEMA, TestRoot, objects};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Rows of each load here: more than two batches, so keys reach the set (and spill)
/// while the input is still being read.
const PEOPLE: usize = 20_000;

/// A budget that spills every few hundred keys, into `dir`.
fn tiny_budget(dir: &Path) -> LoadBudget {
    LoadBudget {
        key_set_memory_bytes_max: 16 << 10,
        spill_dir: dir.to_path_buf(),
        ..LoadBudget::default()
    }
}

/// Where and why a load was refused as bad input.
fn refused(
    loaded: Result<omnigraph_graph::IngestReport, OmniError>,
) -> (omnigraph_core::InputLocation, String) {
    match loaded {
        Err(OmniError::BadInput {
            location, message, ..
        }) => (*location, message),
        other => panic!("expected bad input, got {other:?}"),
    }
}

fn files_in(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|entries| entries.count())
        .unwrap_or(0)
}

fn write_jsonl(dir: &Path, lines: &[Value]) -> PathBuf {
    let path = dir.join("input.jsonl");
    let text: Vec<String> = lines.iter().map(Value::to_string).collect();
    std::fs::write(&path, text.join("\n") + "\n").unwrap();
    path
}

fn person(id: &str) -> Value {
    json!({"type": "Person", "id": id, "name": "n"})
}

fn works_at(src: &str, dst: &str) -> Value {
    json!({"type": "WorksAt", "src": src, "dst": dst})
}

/// A graph on a local folder whose handle spills its load keys into a folder of its own.
async fn spilling_graph() -> (Omnigraph, TestRoot, tempfile::TempDir) {
    let test = TestRoot::new(Backend::Local).await;
    let spill = tempfile::tempdir().unwrap();
    let graph = Omnigraph::create(&test.uri, SOCIAL_SCHEMA)
        .await
        .unwrap()
        .with_load_budget(tiny_budget(spill.path()));
    (graph, test, spill)
}

/// Loads `path`, returning the result and the most spilled runs seen as it was read.
async fn load_watching_runs(
    graph: &Omnigraph,
    path: &Path,
    spill: &Path,
) -> (Result<omnigraph_graph::IngestReport, OmniError>, usize) {
    let mut runs_seen = 0;
    let loaded = graph
        .load_with_progress(path, LoadMode::Append, |_| {
            runs_seen = runs_seen.max(files_in(spill));
        })
        .await;
    (loaded, runs_seen)
}

#[tokio::test]
async fn a_load_past_its_key_budget_spills_runs_and_loads_every_row_and_edge() {
    let (graph, _test, spill) = spilling_graph().await;
    let input = tempfile::tempdir().unwrap();
    // Edges first: their endpoints wait until the nodes are read, past the budget too.
    let mut lines: Vec<Value> = (0..50)
        .map(|i| works_at(&format!("p{}", i * 7), &format!("c{}", i % 10)))
        .collect();
    lines.extend((0..PEOPLE).map(|i| person(&format!("p{i}"))));
    lines.extend((0..500).map(|i| json!({"type": "Company", "id": format!("c{i}"), "name": "c"})));
    // Then edges to people whose keys spilled long ago.
    lines.extend(
        (0..PEOPLE).map(|i| works_at(&format!("p{}", (i * 13) % PEOPLE), &format!("c{}", i % 500))),
    );
    let path = write_jsonl(input.path(), &lines);
    let (loaded, runs_seen) = load_watching_runs(&graph, &path, spill.path()).await;
    let report = loaded.unwrap();
    assert!(
        runs_seen >= 2,
        "keys spilled while the input was read ({runs_seen} runs)"
    );
    assert_eq!(report.rows["Person"], PEOPLE as u64);
    assert_eq!(report.rows["Company"], 500);
    assert_eq!(report.rows["WorksAt"], PEOPLE as u64 + 50);
    assert_eq!(
        graph.count("Person", None, &CommitRef::Head).await.unwrap(),
        PEOPLE as u64
    );
    assert_eq!(
        graph
            .count("WorksAt", None, &CommitRef::Head)
            .await
            .unwrap(),
        PEOPLE as u64 + 50
    );
    assert_eq!(files_in(spill.path()), 0, "the runs go with the load");
    // The next load checks its keys against the table: one it holds is refused.
    let again = write_jsonl(input.path(), &[person("new"), person("p19999")]);
    match graph.load(&again, LoadMode::Append).await {
        Err(OmniError::KeyConflict { key, location, .. }) => {
            assert_eq!(key, "\"p19999\"");
            assert_eq!(location.and_then(|at| at.line), Some(2));
        }
        other => panic!("expected a key conflict at line 2, got {other:?}"),
    }
}

#[tokio::test]
async fn a_key_repeated_across_spilled_runs_is_refused_at_its_first_repeat() {
    let (graph, _test, spill) = spilling_graph().await;
    let input = tempfile::tempdir().unwrap();
    let mut lines: Vec<Value> = (0..15_000).map(|i| person(&format!("p{i}"))).collect();
    // Line 15,001 repeats a key that spilled long before; line 18,992 repeats one still
    // in memory, which is found first but is not the first bad row.
    lines.push(person("p10"));
    lines.extend((15_000..18_990).map(|i| person(&format!("p{i}"))));
    lines.push(person("p18985"));
    lines.extend((18_990..PEOPLE).map(|i| person(&format!("p{i}"))));
    assert_eq!(lines[15_000], person("p10"));
    assert_eq!(lines[18_991], person("p18985"));
    let path = write_jsonl(input.path(), &lines);
    let (loaded, runs_seen) = load_watching_runs(&graph, &path, spill.path()).await;
    assert!(
        runs_seen >= 2,
        "keys spilled while the input was read ({runs_seen} runs)"
    );
    let (location, message) = refused(loaded);
    assert_eq!(location.line, Some(15_001), "{message}");
    assert_eq!(location.field.as_deref(), Some("id"), "{message}");
    assert!(
        message.contains("\"p10\" of Person is given more than once"),
        "{message}"
    );
    assert_eq!(graph.head().await.unwrap().seq, 0, "nothing published");
    assert_eq!(
        files_in(spill.path()),
        0,
        "the runs go with the failed load too"
    );
    // Without the later repeat, the first one is found only once the input is read.
    lines.remove(18_991);
    let path = write_jsonl(input.path(), &lines);
    match graph.load(&path, LoadMode::Append).await {
        Err(OmniError::BadInput { location, .. }) => assert_eq!(location.line, Some(15_001)),
        other => panic!("expected the repeat at line 15,001, got {other:?}"),
    }
    assert_eq!(graph.head().await.unwrap().seq, 0, "nothing published");
    // A bad value at a later line fails the load while it reads: the spilled repeat
    // before it is still the row reported.
    lines[19_500] = json!({"type": "Person", "id": "bad", "name": 5});
    let path = write_jsonl(input.path(), &lines);
    let (location, message) = refused(graph.load(&path, LoadMode::Append).await);
    assert_eq!(location.line, Some(15_001), "{message}");
    assert!(message.contains("more than once"), "{message}");
    assert_eq!(graph.head().await.unwrap().seq, 0, "nothing published");
}

#[tokio::test]
async fn an_edge_to_a_node_neither_spilled_nor_in_the_table_is_refused_at_its_line() {
    let (graph, _test, spill) = spilling_graph().await;
    graph
        .insert_json("Company", objects(json!([{"id": "c1", "name": "Acme"}])))
        .await
        .unwrap();
    let input = tempfile::tempdir().unwrap();
    let mut lines: Vec<Value> = (0..PEOPLE).map(|i| person(&format!("p{i}"))).collect();
    lines.extend((0..100).map(|i| works_at(&format!("p{}", i * 150), "c1")));
    // Lines 20,101 and 20,103 point at people nobody gave; the first is refused.
    lines.push(works_at("ghost-b", "c1"));
    lines.push(works_at("p3", "c1"));
    lines.push(works_at("ghost-a", "c1"));
    let path = write_jsonl(input.path(), &lines);
    let (location, message) = refused(graph.load(&path, LoadMode::Append).await);
    assert_eq!(location.line, Some(20_101), "{message}");
    assert_eq!(location.field.as_deref(), Some("src"), "{message}");
    assert!(message.contains("ghost-b"), "{message}");
    assert_eq!(graph.head().await.unwrap().seq, 1, "nothing published");
    assert_eq!(files_in(spill.path()), 0);
}

#[tokio::test]
async fn a_spilled_load_that_loses_the_race_is_refused_at_the_key_another_writer_added() {
    let (first, test, _) = spilling_graph().await;
    let spill = tempfile::tempdir().unwrap();
    let second = Omnigraph::open(&test.uri)
        .await
        .unwrap()
        .with_load_budget(tiny_budget(spill.path()));
    second.head().await.unwrap();
    // Another writer adds a key of the load after the load's handle last saw the head.
    first
        .insert_json(
            "Person",
            objects(json!([{"id": "b12345", "name": "first"}])),
        )
        .await
        .unwrap();
    let input = tempfile::tempdir().unwrap();
    let lines: Vec<Value> = (0..PEOPLE).map(|i| person(&format!("b{i}"))).collect();
    let path = write_jsonl(input.path(), &lines);
    match second.load(&path, LoadMode::Append).await {
        Err(OmniError::KeyConflict { key, location, .. }) => {
            assert_eq!(key, "\"b12345\"");
            assert_eq!(location.and_then(|at| at.line), Some(12_346));
        }
        other => panic!("expected the key another writer added, got {other:?}"),
    }
    let head = second.head().await.unwrap();
    assert_eq!(head.seq, 1, "only the other writer's commit");
    assert_eq!(files_in(spill.path()), 0);
}

#[tokio::test]
async fn a_spilled_edge_load_that_loses_the_race_to_a_delete_is_refused_at_its_first_edge_to_it() {
    let (first, test, _first_spill) = spilling_graph().await;
    let input = tempfile::tempdir().unwrap();
    let mut nodes: Vec<Value> = (0..PEOPLE).map(|i| person(&format!("p{i}"))).collect();
    nodes.push(json!({"type": "Company", "id": "c1", "name": "Acme"}));
    first
        .load(&write_jsonl(input.path(), &nodes), LoadMode::Append)
        .await
        .unwrap();
    let spill = tempfile::tempdir().unwrap();
    let second = Omnigraph::open(&test.uri)
        .await
        .unwrap()
        .with_load_budget(tiny_budget(spill.path()));
    second.head().await.unwrap();
    // Another writer deletes a node the load's edges point at, after the load's handle
    // last saw the head: the load finds it in the table it read, then on the new head it
    // is gone.
    first
        .delete("Person", "id = 'p12345'")
        .await
        .unwrap()
        .unwrap();
    let edges: Vec<Value> = (0..PEOPLE)
        .map(|i| works_at(&format!("p{i}"), "c1"))
        .collect();
    let path = write_jsonl(input.path(), &edges);
    let (location, message) = refused(second.load(&path, LoadMode::Append).await);
    assert_eq!(location.line, Some(12_346), "{message}");
    assert_eq!(location.field.as_deref(), Some("src"), "{message}");
    assert!(message.contains("p12345"), "{message}");
    assert_eq!(
        second.head().await.unwrap().seq,
        2,
        "the load published nothing"
    );
    assert_eq!(files_in(spill.path()), 0);
}

#[tokio::test]
async fn a_parquet_load_past_its_budget_refuses_a_repeat_at_its_row() {
    let (graph, _test, spill) = spilling_graph().await;
    let input = tempfile::tempdir().unwrap();
    let mut ids: Vec<String> = (0..PEOPLE).map(|i| format!("p{i}")).collect();
    ids[17_000] = "p42".to_string();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("name", DataType::Utf8, false),
    ]));
    let names: StringArray = ids.iter().map(|_| Some("n")).collect();
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from(ids.clone())) as ArrayRef,
            Arc::new(names) as ArrayRef,
        ],
    )
    .unwrap();
    let path = input.path().join("people.parquet");
    let mut writer =
        parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), schema, None)
            .unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    match graph
        .load_columnar(&path, InputFormat::Parquet, "Person", LoadMode::Append)
        .await
    {
        Err(OmniError::BadInput {
            location, message, ..
        }) => {
            assert_eq!(location.row, Some(17_000), "{message}");
            assert!(message.contains("\"p42\""), "{message}");
        }
        other => panic!("expected the repeat at row 17,000, got {other:?}"),
    }
    assert_eq!(graph.head().await.unwrap().seq, 0);
    // Without the repeat the same file loads whole.
    ids[17_000] = "p17000".to_string();
    let batch = RecordBatch::try_new(
        batch.schema(),
        vec![
            Arc::new(StringArray::from(ids)) as ArrayRef,
            batch.column(1).clone(),
        ],
    )
    .unwrap();
    let mut writer = parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(&path).unwrap(),
        batch.schema(),
        None,
    )
    .unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    let report = graph
        .load_columnar(&path, InputFormat::Parquet, "Person", LoadMode::Append)
        .await
        .unwrap();
    assert_eq!(report.rows["Person"], PEOPLE as u64);
    assert_eq!(files_in(spill.path()), 0);
}
