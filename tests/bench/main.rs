//! `cargo xtask bench`: OmniGraph's ingest measured against a baseline run in the same
//! process. Figures are for the dev profile the workspace builds in (dependencies at
//! opt-level 1); compare ratios, not absolute times, across machines.
//!
//! - load: a JSONL file of N Person rows (default 200,000) through `Omnigraph::load`,
//!   against the baseline of staging the same rows, already as Arrow batches, with the
//!   adapter alone (no parsing, validation, key checks or publication).
//! - insert: single-row inserts on a warm handle: requests (exact, from the root's
//!   probe) and wall time per insert.
//!
//! `--rows N` changes N; `--json` prints one JSON document.

use omnigraph_core::adapter;
use omnigraph_publish::rows::{RowSource, rows_from_json};
use omnigraph_publish::{LoadMode, Omnigraph};
use omnigraph_tests::{SOCIAL_SCHEMA, origin};
use serde_json::{Map, Value, json};
use std::io::Write;
use std::time::{Duration, Instant};

/// Single-row inserts timed on the warm handle.
const INSERTS: usize = 50;

fn person(index: usize) -> Map<String, Value> {
    json!({"type": "Person", "id": format!("p{index}"), "name": format!("person {index}"), "age": (index % 90) as i32})
        .as_object()
        .cloned()
        .unwrap_or_default()
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rows = args
        .iter()
        .position(|arg| arg == "--rows")
        .and_then(|at| args.get(at + 1))
        .and_then(|value| value.parse::<usize>().ok())
        .unwrap_or(200_000);
    let as_json = args.iter().any(|arg| arg == "--json");
    let dir = tempfile::tempdir().expect("temp dir");

    // The input file.
    let path = dir.path().join("people.jsonl");
    {
        let mut file = std::io::BufWriter::new(std::fs::File::create(&path).expect("create jsonl"));
        for index in 0..rows {
            writeln!(file, "{}", Value::Object(person(index))).expect("write jsonl");
        }
    }

    // Baseline: the same rows as Arrow batches, staged by the adapter alone.
    let catalog = omnigraph_core::schema::parse("bench.pg", SOCIAL_SCHEMA).expect("schema");
    let person_type = catalog.get("Person").expect("Person");
    let batches: Vec<_> = (0..rows)
        .collect::<Vec<_>>()
        .chunks(omnigraph_publish::ingest::INGEST_BATCH_ROWS)
        .map(|chunk| {
            let objects: Vec<_> = chunk
                .iter()
                .map(|index| {
                    let source = RowSource {
                        source: "bench".into(),
                        line: None,
                        row: *index as u64,
                    };
                    (source, person(*index))
                })
                .collect();
            rows_from_json(person_type, &objects).expect("rows").batch
        })
        .collect();
    let baseline_root = omnigraph_core::storage::StorageRoot::open(
        &dir.path().join("baseline").display().to_string(),
    )
    .await
    .expect("baseline root");
    let mut tip =
        adapter::create_table(&baseline_root, "tables/people", person_type.arrow_schema())
            .await
            .expect("baseline table");
    let started = Instant::now();
    for batch in batches {
        tip = adapter::stage_append(&tip, vec![batch], &origin(1))
            .await
            .expect("baseline append")
            .dataset;
    }
    let baseline = started.elapsed();

    // OmniGraph's load of the file.
    let uri = dir.path().join("graph").display().to_string();
    let graph = Omnigraph::create(&uri, SOCIAL_SCHEMA)
        .await
        .expect("create graph");
    let started = Instant::now();
    let report = graph.load(&path, LoadMode::Append).await.expect("load");
    let load = started.elapsed();
    assert_eq!(report.rows.get("Person").copied(), Some(rows as u64));

    // Single-row inserts on the warm handle.
    let mut requests = Vec::with_capacity(INSERTS);
    let mut times = Vec::with_capacity(INSERTS);
    for index in 0..INSERTS {
        let probe = graph.graph().root().probe();
        let started = Instant::now();
        graph
            .insert_json("Person", vec![person(rows + index)])
            .await
            .expect("insert");
        times.push(started.elapsed());
        requests.push(probe.counts().total());
    }
    times.sort();
    let median = times[times.len() / 2];
    let ratio = load.as_secs_f64() / baseline.as_secs_f64().max(f64::EPSILON);
    let rows_per_second = rows as f64 / load.as_secs_f64().max(f64::EPSILON);
    let document = json!({
        "profile": "dev (dependencies at opt-level 1)",
        "rows": rows,
        "load_seconds": load.as_secs_f64(),
        "load_rows_per_second": rows_per_second,
        "baseline_seconds": baseline.as_secs_f64(),
        "load_to_baseline_ratio": ratio,
        "insert_requests_min": requests.iter().min(),
        "insert_requests_max": requests.iter().max(),
        "insert_median_ms": millis(median),
        "insert_p90_ms": millis(times[times.len() * 9 / 10]),
    });
    if as_json {
        println!("{document}");
        return;
    }
    println!(
        "OmniGraph ingest benchmark ({})",
        document["profile"].as_str().unwrap_or_default()
    );
    println!(
        "  load {rows} rows from JSONL    {:>10.2} s   {:>12.0} rows/s",
        load.as_secs_f64(),
        rows_per_second
    );
    println!(
        "  baseline: adapter appends       {:>10.2} s   (load / baseline = {ratio:.2})",
        baseline.as_secs_f64()
    );
    println!(
        "  single-row insert, warm handle  {:>10.2} ms median, {:.2} ms p90, {}..{} requests",
        millis(median),
        millis(times[times.len() * 9 / 10]),
        requests.iter().min().unwrap_or(&0),
        requests.iter().max().unwrap_or(&0)
    );
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
