//! Columnar loads (CSV, Parquet, Arrow IPC) with good and bad files: every bad file is
//! refused with a typed error naming the file and what was wrong, and publishes
//! nothing.

use arrow_array::{
    ArrayRef, FixedSizeListArray, Float32Array, Float64Array, Int32Array, RecordBatch, StringArray,
};
use arrow_schema::{DataType, Field, Schema};
use omnigraph_core::{ErrorKind, OmniError};
use omnigraph_graph::{InputFormat, LoadMode, Omnigraph};
use omnigraph_publish::CommitRef;
use omnigraph_tests::{Backend, TestRoot, objects};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const SCHEMA: &str = "
node Person { id: String @key, name: String, age: Int32?, score: Float64?, embedding: Vector(2)? }
node Company { id: String @key, name: String }
edge WorksAt: Person -> Company { since: Int32? }
";

const FORMATS: [InputFormat; 3] = [
    InputFormat::Csv,
    InputFormat::Parquet,
    InputFormat::ArrowIpc,
];

fn extension(format: InputFormat) -> &'static str {
    match format {
        InputFormat::Csv => "csv",
        InputFormat::Parquet => "parquet",
        InputFormat::ArrowIpc => "arrow",
        InputFormat::Jsonl => "jsonl",
    }
}

/// Writes `batch` as a file of `format` (CSV with a header; NaN as `NaN`, null as an
/// empty field).
fn write(dir: &Path, name: &str, format: InputFormat, batch: &RecordBatch) -> PathBuf {
    let path = dir.join(format!("{name}.{}", extension(format)));
    let file = std::fs::File::create(&path).unwrap();
    match format {
        InputFormat::Csv => {
            let mut writer = arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(file);
            writer.write(batch).unwrap();
        }
        InputFormat::Parquet => {
            let mut writer =
                parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
            writer.write(batch).unwrap();
            writer.close().unwrap();
        }
        InputFormat::ArrowIpc => {
            let mut writer =
                arrow::ipc::writer::FileWriter::try_new(file, &batch.schema()).unwrap();
            writer.write(batch).unwrap();
            writer.finish().unwrap();
        }
        InputFormat::Jsonl => unreachable!("not a columnar format"),
    }
    path
}

fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
    let fields: Vec<Field> = columns
        .iter()
        .map(|(name, array)| Field::new(*name, array.data_type().clone(), true))
        .collect();
    RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns.into_iter().map(|(_, array)| array).collect(),
    )
    .unwrap()
}

fn text(values: &[Option<&str>]) -> ArrayRef {
    Arc::new(StringArray::from(values.to_vec()))
}

/// People `ids` with names, ages 30.. and scores 0.5..
fn people(ids: &[Option<&str>]) -> Columns {
    let names: Vec<Option<String>> = (0..ids.len()).map(|i| Some(format!("n{i}"))).collect();
    let ages: Vec<Option<i32>> = (0..ids.len()).map(|i| Some(30 + i as i32)).collect();
    let scores: Vec<Option<f64>> = (0..ids.len()).map(|i| Some(0.5 + i as f64)).collect();
    vec![
        ("id", text(ids)),
        ("name", Arc::new(StringArray::from(names))),
        ("age", Arc::new(Int32Array::from(ages))),
        ("score", Arc::new(Float64Array::from(scores))),
    ]
}

fn with(mut columns: Columns, name: &'static str, array: ArrayRef) -> Columns {
    columns.retain(|(column, _)| *column != name);
    columns.push((name, array));
    columns
}

fn vectors(values: &[f32]) -> ArrayRef {
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    Arc::new(
        FixedSizeListArray::try_new(item, 2, Arc::new(Float32Array::from(values.to_vec())), None)
            .unwrap(),
    )
}

async fn graph() -> (Omnigraph, TestRoot) {
    let test = TestRoot::new(Backend::Memory).await;
    let graph = Omnigraph::create(&test.uri, SCHEMA).await.unwrap();
    graph
        .insert_json("Person", objects(json!([{"id": "p0", "name": "zero"}])))
        .await
        .unwrap();
    graph
        .insert_json("Company", objects(json!([{"id": "c1", "name": "Acme"}])))
        .await
        .unwrap();
    (graph, test)
}

async fn load(
    graph: &Omnigraph,
    path: &Path,
    format: InputFormat,
    type_name: &str,
) -> Result<u64, OmniError> {
    graph
        .load_columnar(path, format, type_name, LoadMode::Append)
        .await
        .map(|report| report.rows.get(type_name).copied().unwrap_or(0))
}

#[tokio::test]
async fn every_columnar_format_loads_a_good_file_and_keeps_nan() {
    for format in FORMATS {
        let (graph, _test) = graph().await;
        let dir = tempfile::tempdir().unwrap();
        let mut columns = people(&[Some("p1"), Some("p2"), Some("p3")]);
        columns = with(
            columns,
            "score",
            Arc::new(Float64Array::from(vec![Some(f64::NAN), None, Some(2.5)])),
        );
        if format != InputFormat::Csv {
            columns.push(("embedding", vectors(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])));
        }
        let path = write(dir.path(), "people", format, &batch(columns));
        assert_eq!(
            load(&graph, &path, format, "Person").await.unwrap(),
            3,
            "{format:?}"
        );
        let p1 = graph
            .get("Person", &json!("p1"), &CommitRef::Head)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(p1["age"], 30, "{format:?}");
        let scores = graph
            .scan(
                "Person",
                &omnigraph_graph::ScanRequest {
                    filter: Some("id = 'p1'".into()),
                    columns: vec!["score".into()],
                    limit: None,
                },
                &CommitRef::Head,
            )
            .await
            .unwrap();
        let score = scores[0]
            .column(0)
            .as_any()
            .downcast_ref::<Float64Array>()
            .unwrap()
            .value(0);
        assert!(score.is_nan(), "{format:?}: NaN is kept, got {score}");
        let p2 = graph
            .get("Person", &json!("p2"), &CommitRef::Head)
            .await
            .unwrap()
            .unwrap();
        assert!(p2["score"].is_null(), "{format:?}: {p2:?}");
        // Edges give src and dst; their ids are minted.
        let edges = batch(vec![
            ("src", text(&[Some("p1"), Some("p0")])),
            ("dst", text(&[Some("c1"), Some("c1")])),
            ("since", Arc::new(Int32Array::from(vec![Some(2020), None]))),
        ]);
        let path = write(dir.path(), "edges", format, &edges);
        assert_eq!(
            load(&graph, &path, format, "WorksAt").await.unwrap(),
            2,
            "{format:?}"
        );
    }
}

/// A bad file's case: its name, its type, its columns, and its refusal.
type Case = (&'static str, &'static str, Columns, Refusal);
type Columns = Vec<(&'static str, ArrayRef)>;

/// What a bad file must be refused with.
struct Refusal {
    kind: ErrorKind,
    /// Words the message must hold (besides the file's name).
    words: &'static [&'static str],
}

#[tokio::test]
async fn every_columnar_format_refuses_bad_files_naming_what_was_wrong_and_publishes_nothing() {
    for format in FORMATS {
        let (graph, _test) = graph().await;
        let dir = tempfile::tempdir().unwrap();
        let two = || people(&[Some("p1"), Some("p2")]);
        let mut cases: Vec<Case> = vec![
            (
                "wrong_type",
                "Person",
                with(two(), "age", text(&[Some("41"), Some("old")])),
                Refusal {
                    kind: ErrorKind::BadInput,
                    words: if format == InputFormat::Csv {
                        &["old"]
                    } else {
                        &["age", "Int32"]
                    },
                },
            ),
            (
                "missing_key",
                "Person",
                people(&[Some("p1"), None]),
                Refusal {
                    kind: ErrorKind::BadInput,
                    words: &["id", "missing"],
                },
            ),
            (
                "duplicate_key",
                "Person",
                people(&[Some("p1"), Some("p1")]),
                Refusal {
                    kind: ErrorKind::BadInput,
                    words: &["p1", "more than once"],
                },
            ),
            (
                "existing_key",
                "Person",
                people(&[Some("p5"), Some("p0")]),
                Refusal {
                    kind: ErrorKind::KeyConflict,
                    words: &["p0"],
                },
            ),
            (
                "unknown_column",
                "Person",
                with(two(), "shoe", text(&[Some("9"), Some("10")])),
                Refusal {
                    kind: ErrorKind::BadInput,
                    words: &["shoe"],
                },
            ),
            (
                "dangling_edge",
                "WorksAt",
                vec![
                    ("src", text(&[Some("p0"), Some("p0")])),
                    ("dst", text(&[Some("c1"), Some("nowhere")])),
                ],
                Refusal {
                    kind: ErrorKind::BadInput,
                    words: &["nowhere"],
                },
            ),
        ];
        if format != InputFormat::Csv {
            cases.push((
                "nan_vector",
                "Person",
                with(two(), "embedding", vectors(&[1.0, 2.0, f32::NAN, 4.0])),
                Refusal {
                    kind: ErrorKind::BadInput,
                    words: &["embedding", "NaN"],
                },
            ));
        }
        let head = graph.head().await.unwrap();
        for (name, type_name, columns, refusal) in cases {
            let path = write(dir.path(), name, format, &batch(columns));
            let error = load(&graph, &path, format, type_name).await.unwrap_err();
            let said = error.to_string();
            assert_eq!(error.kind(), refusal.kind, "{format:?} {name}: {said}");
            // Rows are checked before they are written: a bad file writes nothing (a
            // dangling edge included: endpoints are checked before the gathered rows
            // are staged).
            assert_eq!(
                error.evidence(),
                &omnigraph_core::Evidence::BeforeEffect,
                "{format:?} {name}"
            );
            assert!(
                said.contains(&format!("{name}.{}", extension(format))),
                "{format:?} {name} names the file: {said}"
            );
            for word in refusal.words {
                assert!(said.contains(word), "{format:?} {name}: {word:?} in {said}");
            }
            assert_eq!(
                graph.head().await.unwrap(),
                head,
                "{format:?} {name}: nothing published"
            );
        }
    }
}

#[tokio::test]
async fn a_truncated_parquet_or_arrow_file_and_a_short_csv_row_are_refused() {
    let (graph, _test) = graph().await;
    let dir = tempfile::tempdir().unwrap();
    let head = graph.head().await.unwrap();
    let many: Vec<String> = (1..2000).map(|i| format!("p{i}")).collect();
    let ids: Vec<Option<&str>> = many.iter().map(|id| Some(id.as_str())).collect();
    for format in [InputFormat::Parquet, InputFormat::ArrowIpc] {
        let path = write(dir.path(), "cut", format, &batch(people(&ids)));
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        let error = load(&graph, &path, format, "Person").await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::BadInput, "{format:?}: {error}");
        assert!(error.to_string().contains("cut."), "{format:?}: {error}");
        assert_eq!(graph.head().await.unwrap(), head, "{format:?}");
    }
    let path = dir.path().join("short.csv");
    std::fs::write(&path, "id,name,age\np1,Ada,3\np2,Bob\n").unwrap();
    let error = load(&graph, &path, InputFormat::Csv, "Person")
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadInput, "{error}");
    assert!(error.to_string().contains("short.csv"), "{error}");
    assert_eq!(graph.head().await.unwrap(), head);
}

#[tokio::test]
async fn a_columnar_load_reports_bytes_and_rows_as_it_reads() {
    let many: Vec<String> = (1..20_000).map(|i| format!("p{i}")).collect();
    let ids: Vec<Option<&str>> = many.iter().map(|id| Some(id.as_str())).collect();
    for format in FORMATS {
        let (graph, _test) = graph().await;
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "many", format, &batch(people(&ids)));
        let size = std::fs::metadata(&path).unwrap().len();
        let mut seen: Vec<omnigraph_graph::LoadProgress> = Vec::new();
        graph
            .load_columnar_with_progress(&path, format, "Person", LoadMode::Append, |progress| {
                seen.push(*progress)
            })
            .await
            .unwrap();
        // An Arrow IPC file comes in the batches it was written in: here one.
        let reports_min = if format == InputFormat::ArrowIpc {
            1
        } else {
            3
        };
        assert!(
            seen.len() >= reports_min,
            "{format:?}: one report per batch: {}",
            seen.len()
        );
        for pair in seen.windows(2) {
            assert!(
                pair[1].rows >= pair[0].rows && pair[1].bytes_read >= pair[0].bytes_read,
                "{format:?}: {pair:?}"
            );
        }
        let last = seen.last().unwrap();
        assert_eq!(last.rows, ids.len() as u64, "{format:?}");
        assert_eq!(last.total_bytes, Some(size), "{format:?}");
        assert!(
            last.bytes_read > 0 && last.bytes_read <= size,
            "{format:?}: {last:?}"
        );
        if format == InputFormat::Csv {
            assert_eq!(last.bytes_read, size, "a CSV file is read to its end");
        }
    }
}

#[tokio::test]
async fn a_minted_edge_id_is_a_key_like_any_other_for_the_next_writer() {
    let (graph, _test) = graph().await;
    // Two inserts warm the handle's key cache of WorksAt: it holds every key of the
    // table, and takes the keys of each append.
    for id in ["e1", "e2"] {
        graph
            .insert_json(
                "WorksAt",
                objects(json!([{"id": id, "src": "p0", "dst": "c1"}])),
            )
            .await
            .unwrap();
    }
    // One call: a batch with ids, and one without (its ids are minted).
    let given = batch(vec![
        ("id", text(&[Some("e3")])),
        ("src", text(&[Some("p0")])),
        ("dst", text(&[Some("c1")])),
    ]);
    let minted = batch(vec![
        ("src", text(&[Some("p0"), Some("p0")])),
        ("dst", text(&[Some("c1"), Some("c1")])),
    ]);
    graph
        .insert_batches("WorksAt", &[given, minted])
        .await
        .unwrap();
    let rows = graph
        .scan(
            "WorksAt",
            &omnigraph_graph::ScanRequest {
                filter: None,
                columns: vec!["id".into()],
                limit: None,
            },
            &CommitRef::Head,
        )
        .await
        .unwrap();
    let ids: Vec<serde_json::Value> = omnigraph_graph::rows::batches_to_json(&rows)
        .into_iter()
        .map(|row| row["id"].clone())
        .collect();
    assert_eq!(ids.len(), 5);
    let minted = ids
        .into_iter()
        .find(|id| !["e1", "e2", "e3"].contains(&id.as_str().unwrap()))
        .unwrap();
    // The same handle inserts an edge under a minted id: its key cache must not take
    // the call's kept keys as all it added.
    let error = graph
        .insert_json(
            "WorksAt",
            objects(json!([{"id": minted, "src": "p0", "dst": "c1"}])),
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::KeyConflict, "{error}");
}

#[tokio::test]
async fn an_empty_csv_field_is_an_empty_string_where_the_property_is_required() {
    let (graph, _test) = graph().await;
    let dir = tempfile::tempdir().unwrap();
    // `name` is a required String: its empty field (bare or quoted) is the empty
    // string. `age` is optional: its empty field is null.
    let path = dir.path().join("people.csv");
    std::fs::write(&path, "id,name,age\np1,,3\np2,\"\",\np3,Cy,\n").unwrap();
    let loaded = load(&graph, &path, InputFormat::Csv, "Person")
        .await
        .unwrap();
    assert_eq!(loaded, 3);
    for (id, name, age) in [
        ("p1", json!(""), json!(3)),
        ("p2", json!(""), json!(null)),
        ("p3", json!("Cy"), json!(null)),
    ] {
        let row = graph
            .get("Person", &json!(id), &CommitRef::Head)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((&row["name"], &row["age"]), (&name, &age), "{id}: {row:?}");
    }
    // A required key is never empty: an empty id is still refused, naming the row.
    std::fs::write(&path, "id,name\n,Dee\n").unwrap();
    let error = load(&graph, &path, InputFormat::Csv, "Person")
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadInput, "{error}");
    assert!(error.to_string().contains("id"), "{error}");
}

/// A type with a property of every scalar kind, for files as pandas, pyarrow and
/// polars write them.
const WIDE_SCHEMA: &str = "
node Item { id: String @key, name: String, n: Int32?, big: Int64?, f: Float32?, d: Float64?, at: Timestamp?, v: Vector(2)?, kind: String? }
";

/// The columns pandas, pyarrow and polars write for `ids`: `large_string` and
/// `string_view` text (polars), `int64` for every integer and `double` for every float
/// (pandas, pyarrow), a `timestamp[ns]` without a zone (pandas), vectors as lists of
/// doubles (numpy arrays), and a dictionary-encoded categorical.
fn python_columns(ids: &[&str], n: Vec<Option<i64>>, f: Vec<Option<f64>>, v: ArrayRef) -> Columns {
    use arrow_array::{
        DictionaryArray, Int64Array, LargeStringArray, StringViewArray, TimestampNanosecondArray,
        types::Int8Type,
    };
    let count = ids.len();
    vec![
        (
            "id",
            Arc::new(LargeStringArray::from(ids.to_vec())) as ArrayRef,
        ),
        (
            "name",
            Arc::new(StringViewArray::from(
                ids.iter()
                    .map(|id| format!("name of {id}"))
                    .collect::<Vec<_>>(),
            )),
        ),
        ("n", Arc::new(Int64Array::from(n))),
        (
            "big",
            Arc::new(Int64Array::from(vec![Some(1_i64 << 40); count])),
        ),
        ("f", Arc::new(Float64Array::from(f))),
        (
            "d",
            Arc::new(Float32Array::from(vec![Some(0.25_f32); count])),
        ),
        (
            "at",
            Arc::new(TimestampNanosecondArray::from(vec![
                Some(
                    1_700_000_000_123_456_000_i64
                );
                count
            ])),
        ),
        ("v", v),
        (
            "kind",
            Arc::new(
                (0..count)
                    .map(|i| ["small", "large"][i % 2])
                    .collect::<DictionaryArray<Int8Type>>(),
            ),
        ),
    ]
}

/// Vectors of `size` doubles each, as a list column (numpy arrays through pyarrow).
fn double_lists(rows: &[Vec<f64>]) -> ArrayRef {
    let mut builder =
        arrow_array::builder::ListBuilder::new(arrow_array::builder::Float64Builder::new());
    for row in rows {
        builder.values().append_slice(row);
        builder.append(true);
    }
    Arc::new(builder.finish())
}

#[tokio::test]
async fn columnar_loads_take_the_types_python_writers_give() {
    for format in [InputFormat::Parquet, InputFormat::ArrowIpc] {
        let test = TestRoot::new(Backend::Memory).await;
        let graph = Omnigraph::create(&test.uri, WIDE_SCHEMA).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let columns = python_columns(
            &["i1", "i2"],
            vec![Some(41), None],
            vec![Some(1.5), Some(f64::NAN)],
            double_lists(&[vec![1.0, 2.0], vec![3.0, 4.0]]),
        );
        let path = write(dir.path(), "items", format, &batch(columns));
        // The file really holds the types the writers give.
        if format == InputFormat::Parquet {
            let file = std::fs::File::open(&path).unwrap();
            let schema =
                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                    .unwrap()
                    .schema()
                    .clone();
            assert_eq!(
                schema.field_with_name("id").unwrap().data_type(),
                &DataType::LargeUtf8
            );
            assert_eq!(
                schema.field_with_name("n").unwrap().data_type(),
                &DataType::Int64
            );
        }
        assert_eq!(
            load(&graph, &path, format, "Item").await.unwrap(),
            2,
            "{format:?}"
        );
        let i1 = graph
            .get("Item", &json!("i1"), &CommitRef::Head)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(i1["name"], "name of i1", "{format:?}");
        assert_eq!(i1["n"], 41, "{format:?}");
        assert_eq!(i1["big"], 1_i64 << 40, "{format:?}");
        assert_eq!(i1["f"], 1.5, "{format:?}");
        assert_eq!(i1["d"], 0.25, "{format:?}");
        assert_eq!(i1["v"], json!([1.0, 2.0]), "{format:?}");
        assert_eq!(i1["kind"], "small", "{format:?}");
        // Nanoseconds without a zone, as microseconds in UTC.
        assert_eq!(i1["at"], 1_700_000_000_123_456_i64, "{format:?}");
        let i2 = graph
            .get("Item", &json!("i2"), &CommitRef::Head)
            .await
            .unwrap()
            .unwrap();
        assert!(i2["n"].is_null(), "{format:?}");
        assert_eq!(i2["kind"], "large", "{format:?}");

        // A value its property cannot hold is refused at its row, naming the field
        // and the value, and nothing is published.
        let head = graph.head().await.unwrap();
        let refusals: [(&str, Columns, &[&str]); 3] = [
            (
                "out_of_range",
                python_columns(
                    &["j1", "j2"],
                    vec![Some(1), Some(3_000_000_000)],
                    vec![None, None],
                    double_lists(&[vec![1.0, 2.0], vec![3.0, 4.0]]),
                ),
                &["row 1", "field n", "3000000000"],
            ),
            (
                "too_large_for_float32",
                python_columns(
                    &["j1", "j2"],
                    vec![None, None],
                    vec![Some(1e300), None],
                    double_lists(&[vec![1.0, 2.0], vec![3.0, 4.0]]),
                ),
                &["row 0", "field f", "Float32"],
            ),
            (
                "short_vector",
                python_columns(
                    &["j1", "j2"],
                    vec![None, None],
                    vec![None, None],
                    double_lists(&[vec![1.0, 2.0], vec![3.0, 4.0, 5.0]]),
                ),
                &["row 1", "field v", "got 3"],
            ),
        ];
        for (name, columns, words) in refusals {
            let path = write(dir.path(), name, format, &batch(columns));
            let error = load(&graph, &path, format, "Item").await.unwrap_err();
            assert_eq!(
                error.kind(),
                ErrorKind::BadInput,
                "{format:?} {name}: {error}"
            );
            let said = error.to_string();
            for word in words {
                assert!(said.contains(word), "{format:?} {name}: {word:?} in {said}");
            }
            assert_eq!(graph.head().await.unwrap(), head, "{format:?} {name}");
        }
    }
}

/// A bad CSV value names its field, the line of the file a text editor shows (the
/// header is line 1; a quoted field may span lines) and the value. (It said `row 0`,
/// the batch's first row, quoting arrow's parser.)
#[tokio::test]
async fn a_bad_csv_value_names_its_field_line_and_value() {
    let (graph, _test) = graph().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("people.csv");
    std::fs::write(
        &path,
        "id,name,score\np1,\"two\nlines\",1.5\np2,Bo,2\np3,Cy,abc\n",
    )
    .unwrap();
    let head = graph.head().await.unwrap();
    let error = load(&graph, &path, InputFormat::Csv, "Person")
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadInput, "{error}");
    let said = error.to_string();
    for word in ["people.csv", "line 5", "field score", "\"abc\""] {
        assert!(said.contains(word), "{word:?} in {said}");
    }
    assert!(!said.contains("row"), "{said}");
    assert_eq!(graph.head().await.unwrap(), head);
    // A missing required value is named by its line too.
    let path = dir.path().join("keys.csv");
    std::fs::write(&path, "id,name\np1,Ann\n,Bo\n").unwrap();
    let said = load(&graph, &path, InputFormat::Csv, "Person")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        said.contains("line 3") && said.contains("field id"),
        "{said}"
    );
}

/// Integer endpoints are checked by their numbers once a batch has found them (and by
/// the row before, when edges come grouped by an end): a missing node is still refused
/// at the first row that names it, past the first batch, and a good file loads every
/// edge.
#[tokio::test]
async fn integer_endpoints_over_many_batches_are_checked_to_the_row() {
    use arrow_array::Int64Array;
    const INT_SCHEMA: &str = "
node N { id: Int64 @key }
edge E: N -> N
";
    let (graph, _test) = keyed_by_numbers(INT_SCHEMA, "N", 0..1000).await;
    let dir = tempfile::tempdir().unwrap();
    let rows = 20_000_i64;
    // Grouped by src, twenty edges each; dst spread over every node.
    let src: Vec<i64> = (0..rows).map(|row| row / 20).map(|n| n % 1000).collect();
    let good_dst: Vec<i64> = (0..rows).map(|row| (row * 7) % 1000).collect();
    let mut bad_dst = good_dst.clone();
    // Twice in a row, past the first two batches of 8,192: the first is named.
    bad_dst[17_000] = 5000;
    bad_dst[17_001] = 5000;
    let edges = |dst: &[i64]| {
        batch(vec![
            ("src", Arc::new(Int64Array::from(src.clone())) as ArrayRef),
            ("dst", Arc::new(Int64Array::from(dst.to_vec())) as ArrayRef),
        ])
    };
    let head = graph.head().await.unwrap();
    let path = write(
        dir.path(),
        "bad_edges",
        InputFormat::Parquet,
        &edges(&bad_dst),
    );
    let error = load(&graph, &path, InputFormat::Parquet, "E")
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadInput, "{error}");
    assert_eq!(error.evidence(), &omnigraph_core::Evidence::BeforeEffect);
    let OmniError::BadInput { location, .. } = &error else {
        panic!("{error}");
    };
    assert_eq!(location.row, Some(17_000), "{error}");
    assert_eq!(location.field.as_deref(), Some("dst"), "{error}");
    assert!(error.to_string().contains("5000"), "{error}");
    assert_eq!(graph.head().await.unwrap(), head, "nothing published");
    let path = write(
        dir.path(),
        "good_edges",
        InputFormat::Parquet,
        &edges(&good_dst),
    );
    assert_eq!(
        load(&graph, &path, InputFormat::Parquet, "E")
            .await
            .unwrap(),
        rows as u64
    );
    assert_eq!(
        graph.count("E", None, &CommitRef::Head).await.unwrap(),
        rows as u64
    );
}

/// The same check when the nodes come in the same JSONL call as their edges: an
/// endpoint found among the call's own nodes is known by its number for the batches
/// after, and a missing one is still refused at its first line.
#[tokio::test]
async fn integer_endpoints_among_the_calls_own_nodes_are_checked_to_the_line() {
    const INT_SCHEMA: &str = "
node N { id: Int32 @key }
edge E: N -> N
";
    let (graph, _test) = keyed_by_numbers(INT_SCHEMA, "N", 0..100).await;
    let dir = tempfile::tempdir().unwrap();
    let write_lines = |name: &str, dangling: bool| {
        let mut lines: Vec<String> = (100..200)
            .map(|id| json!({"type": "N", "id": id}).to_string())
            .collect();
        for row in 0..20_000 {
            // From the call's nodes to the table's and the call's, grouped by src.
            let mut dst = (row * 7) % 200;
            if dangling && (row == 19_000 || row == 19_001) {
                dst = 777;
            }
            lines.push(json!({"type": "E", "src": 100 + row / 200, "dst": dst}).to_string());
        }
        let path = dir.path().join(name);
        std::fs::write(&path, lines.join("\n")).unwrap();
        path
    };
    let head = graph.head().await.unwrap();
    let error = graph
        .load(&write_lines("bad.jsonl", true), LoadMode::Append)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadInput, "{error}");
    let OmniError::BadInput { location, .. } = &error else {
        panic!("{error}");
    };
    // 100 node lines, then edge row 19,000 on line 100 + 19,000 + 1.
    assert_eq!(location.line, Some(19_101), "{error}");
    assert!(error.to_string().contains("777"), "{error}");
    assert_eq!(graph.head().await.unwrap(), head, "nothing published");
    let report = graph
        .load(&write_lines("good.jsonl", false), LoadMode::Append)
        .await
        .unwrap();
    assert_eq!(report.rows.get("E").copied(), Some(20_000));
    assert_eq!(report.rows.get("N").copied(), Some(100));
}

/// Int32 endpoints from Parquet, negative ones included: a missing one is named as its
/// number (rendered only then), and the ones found load.
#[tokio::test]
async fn int32_endpoints_are_named_by_their_number_when_missing() {
    const INT_SCHEMA: &str = "
node M { id: Int32 @key }
edge G: M -> M
";
    let (graph, _test) = keyed_by_numbers(INT_SCHEMA, "M", -5..5).await;
    let dir = tempfile::tempdir().unwrap();
    let edges = |dst: Vec<i32>| {
        let src: Vec<i32> = (0..dst.len()).map(|row| row as i32 % 10 - 5).collect();
        batch(vec![
            ("src", Arc::new(Int32Array::from(src)) as ArrayRef),
            ("dst", Arc::new(Int32Array::from(dst)) as ArrayRef),
        ])
    };
    let path = write(
        dir.path(),
        "bad",
        InputFormat::Parquet,
        &edges(vec![-5, 4, i32::MIN, -1]),
    );
    let error = load(&graph, &path, InputFormat::Parquet, "G")
        .await
        .unwrap_err();
    let OmniError::BadInput { location, .. } = &error else {
        panic!("{error}");
    };
    assert_eq!(location.row, Some(2), "{error}");
    assert!(
        error.to_string().contains("dst -2147483648 is not a M"),
        "{error}"
    );
    let path = write(
        dir.path(),
        "good",
        InputFormat::Parquet,
        &edges(vec![-5, 4, -3, -1]),
    );
    assert_eq!(
        load(&graph, &path, InputFormat::Parquet, "G")
            .await
            .unwrap(),
        4
    );
}

/// A graph of `schema` in memory whose node type `node_type` (an integer key `id`)
/// holds the keys `ids`.
async fn keyed_by_numbers(
    schema: &str,
    node_type: &str,
    ids: std::ops::Range<i64>,
) -> (Omnigraph, TestRoot) {
    let test = TestRoot::new(Backend::Memory).await;
    let graph = Omnigraph::create(&test.uri, schema).await.unwrap();
    let nodes: Vec<serde_json::Value> = ids.map(|id| json!({"id": id})).collect();
    graph
        .insert_json(node_type, objects(serde_json::Value::Array(nodes)))
        .await
        .unwrap();
    (graph, test)
}
