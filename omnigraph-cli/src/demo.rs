//! `omnigraph demo`: the main job on an embedded default. It builds a sample graph in a
//! local folder (people, companies, documents, edges, text and 16-dimensional
//! embeddings, generated from a fixed seed), builds its indexes, and runs a get, a
//! two-hop traversal, a text search and a vector search, timing each step.

use crate::output::{Output, print_rows};
use omnigraph_core::{Evidence, InputLocation, OmniError, Result};
use omnigraph_graph::{Direction, LoadMode, Omnigraph};
use omnigraph_maintenance::MaintenanceExt;
use omnigraph_publish::CommitRef;
use rand::{Rng, SeedableRng, rngs::StdRng};
use serde_json::{Value, json};
use std::io::Write;
use std::path::Path;
use std::time::Instant;

/// The actor of a demo graph's genesis: how `demo` recognises a graph it may replace.
pub const DEMO_ACTOR: &str = "omnigraph-demo";
/// The seed of the sample data.
pub const DEMO_SEED: u64 = 20_261_129;
/// People per company in the sample graph.
pub const PEOPLE_PER_COMPANY: usize = 30;
/// The most people a demo builds.
pub const DEMO_PEOPLE_MAX: usize = 1_000_000;
const DIMENSION: usize = 16;
const SCHEMA: &str = include_str!("../../examples/social.pg");
const WORDS: [&str; 16] = [
    "graph", "lance", "storage", "commit", "vector", "index", "query", "table", "snapshot",
    "branch", "merge", "cluster", "search", "engine", "object", "version",
];
const NAMES: [&str; 12] = [
    "Ada", "Alan", "Grace", "Edsger", "Barbara", "Donald", "Frances", "John", "Leslie", "Niklaus",
    "Radia", "Tony",
];

/// Builds and queries the demo graph at `root`.
pub async fn run(out: &Output, root: &Path, people: usize) -> Result<()> {
    if people == 0 || people > DEMO_PEOPLE_MAX {
        return Err(OmniError::bad_input(
            InputLocation::in_source("--people"),
            format!("give 1 to {DEMO_PEOPLE_MAX} people"),
        ));
    }
    prepare_root(root).await?;
    let uri = root.display().to_string();
    let mut steps: Vec<Value> = Vec::new();
    let mut step = |name: &str, started: Instant, detail: Value| {
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        if !out.json() {
            println!("  {name:<40} {ms:>9.1} ms");
        }
        steps.push(json!({"step": name, "ms": ms, "detail": detail}));
    };
    if !out.json() {
        println!("OmniGraph demo at {uri}");
    }

    let started = Instant::now();
    let graph = Omnigraph::create_as(&uri, SCHEMA, DEMO_ACTOR).await?;
    step("create graph", started, json!({"root": uri}));

    let started = Instant::now();
    let data = tempfile::NamedTempFile::new()
        .map_err(|error| OmniError::internal(format!("temporary file: {error}")))?;
    let counts = write_sample(data.path(), people)?;
    step("generate sample JSONL", started, counts.clone());

    let started = Instant::now();
    let report = out
        .spinning("loading the sample graph", |_| {
            graph.load(data.path(), LoadMode::Append)
        })
        .await;
    let report = report?;
    step(
        "load",
        started,
        json!({"rows": report.rows, "seq": report.commit.map(|c| c.seq)}),
    );

    // The load staged one fragment per batch; insert a few single rows so there is
    // something to compact, then optimize and show fragments before and after.
    for extra in 0..5 {
        let row = json!({"id": format!("x{extra}"), "name": format!("Late {extra}")});
        graph
            .insert_json("Person", vec![row.as_object().cloned().unwrap_or_default()])
            .await?;
    }
    let started = Instant::now();
    let optimized = omnigraph_maintenance::optimize(&graph, &Default::default()).await?;
    let fragments: Vec<Value> = optimized
        .tables
        .iter()
        .map(|table| json!({"type": table.type_key, "before": table.fragments_before, "after": table.fragments_after}))
        .collect();
    step("optimize", started, json!({"fragments": fragments}));
    if !out.json() {
        crate::commands::print_optimize(&optimized);
    }

    let started = Instant::now();
    let maintenance = graph.maintenance();
    let indexes = out
        .spinning("building indexes", |_| maintenance.build_indexes())
        .await;
    let indexes = indexes?;
    step(
        "build indexes",
        started,
        json!({"built": indexes.built.len(), "pending": indexes.pending_indexes}),
    );

    let head = CommitRef::Head;
    let started = Instant::now();
    let ada = graph
        .get("Person", &json!("p0"), &head)
        .await?
        .ok_or_else(|| OmniError::internal("the demo's person p0 is missing"))?;
    step("get Person p0", started, json!({"name": ada["name"]}));

    let started = Instant::now();
    let companies = graph
        .neighbors("Person", &json!("p0"), "WorksAt", Direction::Out, 10, &head)
        .await?;
    let company = companies
        .first()
        .and_then(|row| row["id"].as_str())
        .ok_or_else(|| OmniError::internal("p0 works nowhere"))?
        .to_string();
    let coworkers = graph
        .neighbors(
            "Company",
            &json!(company),
            "WorksAt",
            Direction::In,
            10,
            &head,
        )
        .await?;
    step(
        "two hops: p0 -> company -> coworkers",
        started,
        json!({"company": company, "coworkers": coworkers.len()}),
    );

    let started = Instant::now();
    let documents = graph
        .search_text("Document", "body", "snapshot branch", 5, &head)
        .await?;
    step(
        "text search Document.body",
        started,
        json!({"hits": documents.len()}),
    );

    let embedding: Vec<f32> = ada["embedding"]
        .as_array()
        .map(|values| {
            values
                .iter()
                .filter_map(Value::as_f64)
                .map(|v| v as f32)
                .collect()
        })
        .unwrap_or_default();
    let started = Instant::now();
    let similar = graph
        .nearest("Person", "embedding", &embedding, 5, None, &head)
        .await?;
    step(
        "vector search Person.embedding",
        started,
        json!({"hits": similar.len()}),
    );

    if out.json() {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"root": uri, "steps": steps})).unwrap_or_default()
        );
        return Ok(());
    }
    let trim = |rows: &[serde_json::Map<String, Value>],
                keep: &[&str]|
     -> Vec<serde_json::Map<String, Value>> {
        rows.iter()
            .map(|row| {
                row.iter()
                    .filter(|(key, _)| keep.contains(&key.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .collect()
    };
    println!("\ncoworkers of p0 at {company}:");
    print_rows(&trim(&coworkers, &["id", "name", "age"]));
    println!("\ndocuments matching \"snapshot branch\":");
    print_rows(&trim(&documents, &["id", "title", "_score"]));
    println!("\npeople nearest to p0's embedding:");
    print_rows(&trim(&similar, &["id", "name", "_distance"]));
    println!("\nnext: omnigraph status {uri}   omnigraph tables {uri}   omnigraph log {uri}");
    Ok(())
}

/// Refuses a root that holds anything but a demo graph; clears a demo graph.
async fn prepare_root(root: &Path) -> Result<()> {
    let Ok(mut entries) = std::fs::read_dir(root) else {
        return Ok(());
    };
    if entries.next().is_none() {
        return Ok(());
    }
    let uri = root.display().to_string();
    let refuse = || OmniError::AlreadyInitialized {
        root: format!("{uri} (not a demo graph; the demo leaves it untouched)"),
        evidence: Evidence::BeforeEffect,
    };
    let graph = Omnigraph::open(&uri).await.map_err(|_| refuse())?;
    let genesis = graph
        .graph()
        .commit(graph.branch(), &CommitRef::Seq(0))
        .await
        .map_err(|_| refuse())?;
    if genesis.actor != DEMO_ACTOR {
        return Err(refuse());
    }
    std::fs::remove_dir_all(root).map_err(|error| {
        OmniError::storage(
            omnigraph_core::StorageKind::Permanent,
            format!("remove the previous demo graph at {uri}"),
            Box::new(error),
        )
    })
}

/// Writes the sample graph as JSONL; returns the counts per type.
fn write_sample(path: &Path, people: usize) -> Result<Value> {
    let io = |error: std::io::Error| OmniError::internal(format!("write the sample: {error}"));
    let mut rng = StdRng::seed_from_u64(DEMO_SEED);
    let companies = people.div_ceil(PEOPLE_PER_COMPANY);
    let centroids: Vec<Vec<f32>> = (0..companies)
        .map(|_| (0..DIMENSION).map(|_| rng.random::<f32>()).collect())
        .collect();
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
    for company in 0..companies {
        let line = json!({"type": "Company", "id": format!("c{company}"), "name": format!("{} {} Labs", WORDS[company % WORDS.len()], company)});
        writeln!(file, "{line}").map_err(io)?;
    }
    for person in 0..people {
        let company = person % companies;
        let embedding: Vec<f32> = centroids[company]
            .iter()
            .map(|center| center + (rng.random::<f32>() - 0.5) * 0.1)
            .collect();
        let name = format!("{} {}", NAMES[person % NAMES.len()], person);
        let line = json!({"type": "Person", "id": format!("p{person}"), "name": name, "age": 20 + (person % 50) as i32, "embedding": embedding});
        writeln!(file, "{line}").map_err(io)?;
        let works = json!({"type": "WorksAt", "id": format!("w{person}"), "src": format!("p{person}"), "dst": format!("c{company}"), "since": 2000 + (person % 25) as i32});
        writeln!(file, "{works}").map_err(io)?;
    }
    for document in 0..people {
        let body: Vec<&str> = (0..12)
            .map(|_| WORDS[rng.random_range(0..WORDS.len())])
            .collect();
        let line = json!({"type": "Document", "id": format!("d{document}"), "title": format!("Notes {document}"), "body": body.join(" "), "published": 1_700_000_000_000_000i64 + document as i64 * 60_000_000});
        writeln!(file, "{line}").map_err(io)?;
        let wrote = json!({"type": "Wrote", "id": format!("r{document}"), "src": format!("p{}", document % people), "dst": format!("d{document}")});
        writeln!(file, "{wrote}").map_err(io)?;
    }
    file.flush().map_err(io)?;
    Ok(
        json!({"Person": people, "Company": companies, "Document": people, "WorksAt": people, "Wrote": people}),
    )
}
