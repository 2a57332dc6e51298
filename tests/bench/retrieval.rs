//! Retrieval (`--retrieval`): N vectors of 128 float32 from a seeded Gaussian mixture
//! (clustered, not uniform) and Q queries from the same mixture. OmniGraph loads them,
//! builds its index (its own sizing: partitions, quantisation) and answers
//! `CALL omni.vector(...)` at its default probe count; recall@10 is against exact search
//! computed here. The vectors (Parquet), the queries, the exact answers and the
//! engine's choice are written to `--retrieval-dir`, where pylance 14.0.2
//! (`tools/bench/retrieval_pylance.py`, run by `cargo xtask bench --retrieval`) builds
//! the same index with the same parameters on the same data and runs the same queries.

use omnigraph_graph::{LoadMode, Omnigraph};
use omnigraph_maintenance::MaintenanceExt;
use omnigraph_publish::CommitRef;
use omnigraph_query::{QueryOptions, query};
use rand::{Rng, SeedableRng, rngs::StdRng};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

pub(crate) const DIMENSION: usize = 128;
const CLUSTERS: usize = 256;
/// Each point's spread around its cluster's centre (centres are N(0, 1) per dimension).
const SPREAD: f32 = 0.35;
const K: usize = 10;
const SCHEMA: &str = "node Doc { id: Int64 @key, embedding: Vector(128) @index(vector) }";
const WRITE_BATCH_ROWS: usize = 50_000;

/// A standard normal draw (Box-Muller).
fn normal(rng: &mut StdRng) -> f32 {
    let u: f32 = rng.random::<f32>().max(f32::MIN_POSITIVE);
    let v: f32 = rng.random();
    (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
}

pub(crate) fn centres() -> Vec<Vec<f32>> {
    let mut rng = StdRng::seed_from_u64(50);
    (0..CLUSTERS)
        .map(|_| (0..DIMENSION).map(|_| normal(&mut rng)).collect())
        .collect()
}

/// `count` points of the mixture from `seed`, flat.
pub(crate) fn points(centres: &[Vec<f32>], seed: u64, count: usize) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(count * DIMENSION);
    for _ in 0..count {
        let centre = &centres[rng.random_range(0..CLUSTERS)];
        out.extend(centre.iter().map(|c| c + SPREAD * normal(&mut rng)));
    }
    out
}

fn batch(start: usize, flat: &[f32]) -> omnigraph_core::arrow_array::RecordBatch {
    use omnigraph_core::arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
    use omnigraph_core::arrow_array::{ArrayRef, Int64Array};
    let catalog = omnigraph_core::schema::parse("bench.pg", SCHEMA).expect("schema");
    let schema = catalog.get("Doc").expect("Doc").arrow_schema();
    let count = flat.len() / DIMENSION;
    let ids = Int64Array::from((start as i64..(start + count) as i64).collect::<Vec<_>>());
    let mut vectors = FixedSizeListBuilder::new(Float32Builder::new(), DIMENSION as i32);
    for row in flat.chunks(DIMENSION) {
        vectors.values().append_slice(row);
        vectors.append(true);
    }
    let columns: Vec<ArrayRef> = vec![
        std::sync::Arc::new(ids),
        std::sync::Arc::new(vectors.finish()),
    ];
    omnigraph_core::arrow_array::RecordBatch::try_new(schema, columns).expect("batch")
}

/// The exact top `K` of each query by squared L2, on every core.
fn exact(data: &[f32], queries: &[f32]) -> Vec<Vec<i64>> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per = queries.len() / DIMENSION;
    let chunk = per.div_ceil(threads);
    let mut answers: Vec<Vec<i64>> = vec![Vec::new(); per];
    std::thread::scope(|scope| {
        for (part, out) in answers.chunks_mut(chunk).enumerate() {
            scope.spawn(move || {
                for (i, slot) in out.iter_mut().enumerate() {
                    let q = &queries[(part * chunk + i) * DIMENSION..][..DIMENSION];
                    let mut best: Vec<(f32, i64)> = Vec::with_capacity(K + 1);
                    for (id, row) in data.chunks_exact(DIMENSION).enumerate() {
                        let d: f32 = row.iter().zip(q).map(|(a, b)| (a - b) * (a - b)).sum();
                        if best.len() < K || d < best[K - 1].0 {
                            let at = best.partition_point(|(e, _)| *e <= d);
                            best.insert(at, (d, id as i64));
                            best.truncate(K);
                        }
                    }
                    *slot = best.into_iter().map(|(_, id)| id).collect();
                }
            });
        }
    });
    answers
}

pub(crate) fn percentile(times: &mut [Duration], percent: usize) -> f64 {
    times.sort_unstable();
    let at = (times.len() * percent / 100).min(times.len() - 1);
    times[at].as_secs_f64() * 1e3
}

/// The first column of `text`'s rows, an Int64 (the nodes' ids).
pub(crate) async fn ids(graph: &Omnigraph, text: &str, options: &QueryOptions) -> Vec<i64> {
    let result = query(graph, text, options).await.expect("query");
    let batches = result.collect().await.expect("rows");
    let mut ids = Vec::new();
    for batch in &batches {
        let column = batch
            .column(0)
            .as_any()
            .downcast_ref::<omnigraph_core::arrow_array::Int64Array>()
            .expect("ids");
        ids.extend(column.values().iter().copied());
    }
    ids
}

/// Recall@K and latencies of `text` (reading `$v`) over every query, after one warm pass.
async fn measure(graph: &Omnigraph, text: &str, queries: &[f32], truth: &[Vec<i64>]) -> Value {
    let run = |q: &[f32]| {
        let options = QueryOptions::new().parameter("v", json!(q));
        async move { ids(graph, text, &options).await }
    };
    for q in queries.chunks(DIMENSION) {
        run(q).await;
    }
    let mut times = Vec::with_capacity(truth.len());
    let mut hits = 0usize;
    for (q, exact) in queries.chunks(DIMENSION).zip(truth) {
        let started = Instant::now();
        let found = run(q).await;
        times.push(started.elapsed());
        hits += found.iter().filter(|id| exact.contains(id)).count();
    }
    json!({
        "recall_at_10": hits as f64 / (truth.len() * K) as f64,
        "p50_ms": percentile(&mut times, 50),
        "p99_ms": percentile(&mut times, 99),
    })
}

pub(crate) async fn retrieval_bench(dir: &Path, vectors: usize, queries: usize) -> Value {
    std::fs::create_dir_all(dir).expect("retrieval dir");
    let centres = centres();
    println!("== retrieval: {vectors} × {DIMENSION} vectors, {CLUSTERS} clusters");
    let mut data = Vec::with_capacity(vectors * DIMENSION);
    let mut start = 0;
    while start < vectors {
        let count = (vectors - start).min(WRITE_BATCH_ROWS);
        data.extend(points(&centres, 1_000 + start as u64, count));
        start += count;
    }
    let parquet = dir.join("vectors.parquet");
    crate::write_parquet(&parquet, vectors, |start, count| {
        batch(start, &data[start * DIMENSION..(start + count) * DIMENSION])
    });
    let asked = points(&centres, 7, queries);
    println!("== retrieval: exact answers of {queries} queries");
    let truth = exact(&data, &asked);
    drop(data);

    let uri = dir.join("graph").display().to_string();
    let _ = std::fs::remove_dir_all(dir.join("graph"));
    let graph = Omnigraph::create(&uri, SCHEMA).await.expect("create graph");
    let started = Instant::now();
    graph
        .load_columnar(
            &parquet,
            omnigraph_graph::InputFormat::Parquet,
            "Doc",
            LoadMode::Append,
        )
        .await
        .expect("load");
    let load_seconds = started.elapsed().as_secs_f64();
    println!("== retrieval: loaded in {load_seconds:.1} s; building the index");
    let started = Instant::now();
    graph
        .maintenance()
        .build_indexes()
        .await
        .expect("build indexes");
    let build_seconds = started.elapsed().as_secs_f64();
    let sizing = graph
        .index_coverage(&CommitRef::Head)
        .await
        .expect("status")
        .into_iter()
        .find(|c| c.index == "embedding_vector")
        .and_then(|c| c.vector)
        .expect("a built vector index");
    let index_bytes = index_bytes(&graph, dir).await;
    println!(
        "== retrieval: {} with {} partitions built in {build_seconds:.1} s; querying",
        sizing.quantisation.lance_name(),
        sizing.partitions
    );
    let leg = format!("CALL omni.vector('Doc', 'embedding', $v, {K}) YIELD node RETURN node.id");
    let default = measure(&graph, &leg, &asked, &truth).await;
    let doubled = format!(
        "CALL omni.vector('Doc', 'embedding', $v, {K}, {{nprobes: {}}}) YIELD node RETURN node.id",
        sizing.nprobes_default * 2
    );
    let more = measure(&graph, &doubled, &asked, &truth).await;

    // What pylance needs for the same work.
    std::fs::write(
        dir.join("queries.json"),
        serde_json::to_vec(&json!({
            "dimension": DIMENSION,
            "k": K,
            "queries": asked.chunks(DIMENSION).collect::<Vec<_>>(),
            "truth": truth,
            "index_type": sizing.quantisation.lance_name(),
            "partitions": sizing.partitions,
            "nprobes": sizing.nprobes_default,
            "refine": sizing.refine_default,
        }))
        .expect("json"),
    )
    .expect("write queries");
    let figures = json!({
        "vectors": vectors,
        "dimension": DIMENSION,
        "queries": queries,
        "index_type": sizing.quantisation.lance_name(),
        "partitions": sizing.partitions,
        "nprobes_default": sizing.nprobes_default,
        "refine_default": sizing.refine_default,
        "load_seconds": load_seconds,
        "build_seconds": build_seconds,
        "index_bytes": index_bytes,
        "default_nprobes": default,
        "twice_the_nprobes": more,
    });
    std::fs::write(
        dir.join("omnigraph.json"),
        serde_json::to_vec(&figures).expect("json"),
    )
    .expect("write figures");
    figures
}

/// The bytes of the vector index's files.
async fn index_bytes(graph: &Omnigraph, dir: &Path) -> u64 {
    use omnigraph_core::lance::index::DatasetIndexExt;
    let table = graph
        .graph()
        .snapshot("main", &CommitRef::Head)
        .await
        .expect("snapshot")
        .table("Doc")
        .await
        .expect("Doc");
    let indexes = table.load_indices().await.expect("indexes");
    let uuid = indexes
        .iter()
        .find(|index| index.name == "embedding_vector")
        .expect("the vector index")
        .uuid
        .to_string();
    let mut bytes = 0;
    let mut pending = vec![dir.join("graph")];
    while let Some(folder) = pending.pop() {
        for entry in std::fs::read_dir(&folder).expect("read dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.to_string_lossy().contains(&uuid) {
                bytes += entry.metadata().map_or(0, |m| m.len());
            }
        }
    }
    bytes
}
