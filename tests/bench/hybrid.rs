//! Hybrid retrieval (`--retrieval`, after the vectors; or `--hybrid` alone): D documents
//! (`--docs`, default 200,000) with a body of words drawn with Zipf skew and an
//! embedding of 128 float32 from the retrieval bench's Gaussian mixture, each written by
//! one of `AUTHORS` authors, who work at one of `COMPANIES` companies. Each query fuses
//! a vector leg and a BM25 leg over the documents written by a company's authors (a
//! one-hop graph filter, applied before top-k):
//!
//! ```text
//! MATCH (a:Author {company: $company})-[:Wrote]->(d:Doc)
//! CALL omni.fuse(d, [{vector: 'embedding', query: $v, k: 20},
//!                    {text: 'body', query: $q, k: 20}], 10) YIELD score
//! RETURN d.id ORDER BY score DESC, d.id
//! ```
//!
//! and each leg alone under the same filter is timed beside it (the goal: the fusion's
//! p50 at most 1.5 × the slowest leg's). On a sample of the queries the fused answer is
//! compared with a brute-force evaluation of the same ranking computed here: squared L2
//! over the candidates, BM25 from its formula with the whole corpus's statistics,
//! reciprocal rank fusion (k = 60) of the two top 20s, ties cut by key.

use crate::retrieval::{DIMENSION, centres, ids, percentile, points};
use omnigraph_core::arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
use omnigraph_core::arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use omnigraph_graph::{InputFormat, LoadMode, Omnigraph};
use omnigraph_maintenance::MaintenanceExt;
use omnigraph_query::QueryOptions;
use rand::{Rng, SeedableRng, rngs::StdRng};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SCHEMA: &str = "
node Author { name: String @key, company: String @index }
node Doc { id: Int64 @key, body: String @index(fts), embedding: Vector(128) @index(vector) }
edge Wrote: Author -> Doc
";
const AUTHORS: usize = 2_000;
const COMPANIES: usize = 50;
/// Distinct words of the corpus.
const VOCABULARY: usize = 4_000;
const WORDS_MIN: usize = 20;
const WORDS_MAX: usize = 60;
/// Each leg's k, and the fusion's.
const LEG_K: usize = 20;
const K: usize = 10;
const RRF_K: f64 = 60.0;
/// Queries whose fused answer is checked against brute force.
const CHECKED: usize = 20;

/// Syllables no English stemmer cuts and no stop-word list holds: a word is two of
/// them and a final consonant that is no suffix.
const SYLLABLES: [&str; 33] = [
    "ba", "bo", "bu", "da", "do", "du", "fa", "fo", "fu", "ka", "ko", "ku", "ma", "mo", "mu", "na",
    "no", "nu", "pa", "po", "pu", "ra", "ro", "ru", "ta", "to", "tu", "va", "vo", "vu", "za", "zo",
    "zu",
];
const FINALS: [&str; 4] = ["k", "p", "x", "z"];

fn word(rank: usize) -> String {
    let final_ = FINALS[rank % FINALS.len()];
    let rest = rank / FINALS.len();
    format!(
        "{}{}{final_}",
        SYLLABLES[rest % SYLLABLES.len()],
        SYLLABLES[(rest / SYLLABLES.len()) % SYLLABLES.len()]
    )
}

/// The corpus: each document's words (as ranks into the vocabulary) and its author.
struct Corpus {
    bodies: Vec<Vec<u16>>,
    authors: Vec<u32>,
    /// Documents holding each word.
    holding: Vec<u32>,
    average_length: f64,
}

fn corpus(docs: usize) -> Corpus {
    // Zipf (s = 1) over the vocabulary.
    let weights: Vec<f64> = (0..VOCABULARY).map(|r| 1.0 / (r as f64 + 1.0)).collect();
    let total: f64 = weights.iter().sum();
    let mut cdf = Vec::with_capacity(VOCABULARY);
    let mut running = 0.0;
    for weight in weights {
        running += weight / total;
        cdf.push(running);
    }
    let mut rng = StdRng::seed_from_u64(200);
    let mut bodies = Vec::with_capacity(docs);
    let mut authors = Vec::with_capacity(docs);
    let mut holding = vec![0u32; VOCABULARY];
    let mut words = 0usize;
    for _ in 0..docs {
        let length = rng.random_range(WORDS_MIN..=WORDS_MAX);
        let body: Vec<u16> = (0..length)
            .map(|_| {
                let u: f64 = rng.random();
                cdf.partition_point(|c| *c < u).min(VOCABULARY - 1) as u16
            })
            .collect();
        let mut distinct = body.clone();
        distinct.sort_unstable();
        distinct.dedup();
        for w in distinct {
            holding[w as usize] += 1;
        }
        words += length;
        bodies.push(body);
        authors.push(rng.random_range(0..AUTHORS as u32));
    }
    Corpus {
        bodies,
        authors,
        holding,
        average_length: words as f64 / docs as f64,
    }
}

fn company(author: u32) -> usize {
    author as usize % COMPANIES
}

/// One query: a company, a vector and two words.
struct Asked {
    company: usize,
    vector: Vec<f32>,
    words: [usize; 2],
}

fn queries(count: usize, centres: &[Vec<f32>]) -> Vec<Asked> {
    let vectors = points(centres, 9, count);
    let mut rng = StdRng::seed_from_u64(201);
    vectors
        .chunks(DIMENSION)
        .map(|vector| Asked {
            company: rng.random_range(0..COMPANIES),
            vector: vector.to_vec(),
            // Words of middling frequency: common enough to hit, rare enough to rank.
            words: [rng.random_range(20..400), rng.random_range(20..400)],
        })
        .collect()
}

impl Asked {
    fn text(&self) -> String {
        format!("{} {}", word(self.words[0]), word(self.words[1]))
    }

    /// The parameters `text` reads.
    fn options(&self, text: &str) -> QueryOptions {
        let mut options =
            QueryOptions::new().parameter("company", json!(format!("company{}", self.company)));
        if text.contains("$v") {
            options = options.parameter("v", json!(self.vector));
        }
        if text.contains("$q") {
            options = options.parameter("q", json!(self.text()));
        }
        options
    }
}

const FILTER: &str = "MATCH (a:Author {company: $company})-[:Wrote]->(d:Doc) ";

fn vector_leg() -> String {
    format!(
        "{FILTER}CALL omni.vector(d, 'embedding', $v, {LEG_K}) YIELD rank \
         RETURN d.id ORDER BY rank, d.id"
    )
}

fn text_leg() -> String {
    format!(
        "{FILTER}CALL omni.text(d, 'body', $q, {LEG_K}) YIELD rank \
         RETURN d.id ORDER BY rank, d.id"
    )
}

fn fusion() -> String {
    format!(
        "{FILTER}CALL omni.fuse(d, [{{vector: 'embedding', query: $v, k: {LEG_K}}}, \
         {{text: 'body', query: $q, k: {LEG_K}}}], {K}) YIELD score \
         RETURN d.id ORDER BY score DESC, d.id"
    )
}

/// p50 and p99 of `text` over `asked`, after one warm pass.
async fn timed(graph: &Omnigraph, text: &str, asked: &[Asked]) -> Value {
    for q in asked {
        ids(graph, text, &q.options(text)).await;
    }
    let mut times: Vec<Duration> = Vec::with_capacity(asked.len());
    for q in asked {
        let started = Instant::now();
        ids(graph, text, &q.options(text)).await;
        times.push(started.elapsed());
    }
    json!({"p50_ms": percentile(&mut times, 50), "p99_ms": percentile(&mut times, 99)})
}

/// Competition ranks of `(id, score)` sorted best first by `better` (ties by id), cut
/// at `k`.
fn ranked(
    mut hits: Vec<(i64, f64)>,
    better: fn(&f64, &f64) -> std::cmp::Ordering,
    k: usize,
) -> Vec<(i64, i64)> {
    hits.sort_by(|a, b| better(&a.1, &b.1).then(a.0.cmp(&b.0)));
    hits.truncate(k);
    let mut out: Vec<(i64, i64)> = Vec::with_capacity(hits.len());
    for (place, (id, score)) in hits.iter().enumerate() {
        let tied = place > 0 && (hits[place - 1].1 - score).abs() <= 1e-6 * score.abs().max(1e-9);
        let rank = if tied {
            out[place - 1].1
        } else {
            place as i64 + 1
        };
        out.push((*id, rank));
    }
    out
}

/// The fused top `K` of `q` by brute force.
fn brute_force(corpus: &Corpus, vectors: &[f32], q: &Asked) -> Vec<i64> {
    let candidates: Vec<usize> = (0..corpus.bodies.len())
        .filter(|&doc| company(corpus.authors[doc]) == q.company)
        .collect();
    let distances: Vec<(i64, f64)> = candidates
        .iter()
        .map(|&doc| {
            let row = &vectors[doc * DIMENSION..(doc + 1) * DIMENSION];
            let d: f32 = row
                .iter()
                .zip(&q.vector)
                .map(|(a, b)| (a - b) * (a - b))
                .sum();
            (doc as i64, f64::from(d))
        })
        .collect();
    let docs = corpus.bodies.len() as f64;
    let (k1, b) = (1.2, 0.75);
    let scores: Vec<(i64, f64)> = candidates
        .iter()
        .filter_map(|&doc| {
            let body = &corpus.bodies[doc];
            let norm = k1 * (1.0 - b + b * body.len() as f64 / corpus.average_length);
            let mut score = 0.0;
            let mut words = q.words.to_vec();
            words.dedup();
            for w in words {
                let tf = body.iter().filter(|x| **x as usize == w).count() as f64;
                if tf > 0.0 {
                    let n = f64::from(corpus.holding[w]);
                    let idf = ((docs - n + 0.5) / (n + 0.5) + 1.0).ln();
                    score += idf * (k1 + 1.0) * tf / (tf + norm);
                }
            }
            (score > 0.0).then_some((doc as i64, score))
        })
        .collect();
    let mut fused: HashMap<i64, f64> = HashMap::new();
    let nearest = |a: &f64, b: &f64| a.total_cmp(b);
    let highest = |a: &f64, b: &f64| b.total_cmp(a);
    for (id, rank) in ranked(distances, nearest, LEG_K)
        .into_iter()
        .chain(ranked(scores, highest, LEG_K))
    {
        *fused.entry(id).or_default() += 1.0 / (RRF_K + rank as f64);
    }
    let mut fused: Vec<(i64, f64)> = fused.into_iter().collect();
    fused.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    fused.truncate(K);
    fused.into_iter().map(|(id, _)| id).collect()
}

fn doc_batch(
    schema: &Arc<omnigraph_core::arrow_schema::Schema>,
    corpus: &Corpus,
    vectors: &[f32],
    start: usize,
    count: usize,
) -> RecordBatch {
    let ids = Int64Array::from((start as i64..(start + count) as i64).collect::<Vec<_>>());
    let bodies: StringArray = corpus.bodies[start..start + count]
        .iter()
        .map(|body| {
            Some(
                body.iter()
                    .map(|w| word(*w as usize))
                    .collect::<Vec<_>>()
                    .join(" "),
            )
        })
        .collect();
    let mut embeddings = FixedSizeListBuilder::new(Float32Builder::new(), DIMENSION as i32);
    for row in vectors[start * DIMENSION..(start + count) * DIMENSION].chunks(DIMENSION) {
        embeddings.values().append_slice(row);
        embeddings.append(true);
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(ids),
        Arc::new(bodies),
        Arc::new(embeddings.finish()),
    ];
    RecordBatch::try_new(schema.clone(), columns).expect("doc batch")
}

pub(crate) async fn hybrid_bench(dir: &Path, docs: usize, count: usize) -> Value {
    use omnigraph_core::arrow_schema::{DataType, Field, Schema};
    std::fs::create_dir_all(dir).expect("hybrid dir");
    println!("== hybrid: {docs} documents, {AUTHORS} authors at {COMPANIES} companies");
    let centres = centres();
    let corpus = corpus(docs);
    let vectors = points(&centres, 3_000, docs);
    let catalog = omnigraph_core::schema::parse("hybrid.pg", SCHEMA).expect("schema");
    let doc_schema = catalog.get("Doc").expect("Doc").arrow_schema();
    let doc_file = dir.join("docs.parquet");
    crate::write_parquet(&doc_file, docs, |start, count| {
        doc_batch(&doc_schema, &corpus, &vectors, start, count)
    });
    let author_schema = Arc::new(Schema::new(vec![
        Field::new("name", DataType::Utf8, false),
        Field::new("company", DataType::Utf8, false),
    ]));
    let author_file = dir.join("authors.parquet");
    crate::write_parquet(&author_file, AUTHORS, |start, count| {
        let names: StringArray = (start..start + count)
            .map(|a| Some(format!("author{a}")))
            .collect();
        let companies: StringArray = (start..start + count)
            .map(|a| Some(format!("company{}", company(a as u32))))
            .collect();
        RecordBatch::try_new(
            author_schema.clone(),
            vec![Arc::new(names), Arc::new(companies)],
        )
        .expect("author batch")
    });
    let wrote_schema = Arc::new(Schema::new(vec![
        Field::new("src", DataType::Utf8, false),
        Field::new("dst", DataType::Int64, false),
    ]));
    let wrote_file = dir.join("wrote.parquet");
    crate::write_parquet(&wrote_file, docs, |start, count| {
        let authors: StringArray = corpus.authors[start..start + count]
            .iter()
            .map(|a| Some(format!("author{a}")))
            .collect();
        let written = Int64Array::from((start as i64..(start + count) as i64).collect::<Vec<_>>());
        RecordBatch::try_new(
            wrote_schema.clone(),
            vec![Arc::new(authors), Arc::new(written)],
        )
        .expect("wrote batch")
    });

    let uri = dir.join("hybrid-graph").display().to_string();
    let _ = std::fs::remove_dir_all(dir.join("hybrid-graph"));
    let graph = Omnigraph::create(&uri, SCHEMA).await.expect("create graph");
    for (file, type_name) in [
        (&author_file, "Author"),
        (&doc_file, "Doc"),
        (&wrote_file, "Wrote"),
    ] {
        graph
            .load_columnar(file, InputFormat::Parquet, type_name, LoadMode::Append)
            .await
            .expect("load");
    }
    let started = Instant::now();
    graph.maintenance().optimize().await.expect("optimize");
    let optimize_seconds = started.elapsed().as_secs_f64();
    println!(
        "== hybrid: loaded; optimize (indexes, adjacency) in {optimize_seconds:.1} s; querying"
    );

    let asked = queries(count, &centres);
    let mut checked = 0;
    let mut equal = 0;
    let mut differing = Vec::new();
    for q in asked.iter().take(CHECKED) {
        let found = ids(&graph, &fusion(), &q.options(&fusion())).await;
        let expected = brute_force(&corpus, &vectors, q);
        checked += 1;
        if found == expected {
            equal += 1;
        } else {
            differing.push(json!({"found": found, "expected": expected}));
        }
    }
    let candidates = docs as f64 / COMPANIES as f64;
    // The graph filter alone: what every leg's time includes.
    let pattern = timed(&graph, &format!("{FILTER}RETURN count(d) AS n"), &asked).await;
    let vector = timed(&graph, &vector_leg(), &asked).await;
    let text = timed(&graph, &text_leg(), &asked).await;
    let fused = timed(&graph, &fusion(), &asked).await;
    let slowest = vector["p50_ms"]
        .as_f64()
        .unwrap_or_default()
        .max(text["p50_ms"].as_f64().unwrap_or_default());
    // The fused answers must be the brute-force ones: a bench of wrong answers is no
    // figure.
    assert!(
        differing.is_empty(),
        "the fusion differs from brute force on {} of {checked} queries: {differing:?}",
        differing.len()
    );
    json!({
        "docs": docs,
        "authors": AUTHORS,
        "companies": COMPANIES,
        "candidates_per_query": candidates,
        "queries": count,
        "optimize_seconds": optimize_seconds,
        "graph_filter_alone": pattern,
        "vector_leg": vector,
        "text_leg": text,
        "fusion": fused,
        "fusion_p50_over_slowest_leg": fused["p50_ms"].as_f64().unwrap_or_default() / slowest,
        "brute_force_checked": checked,
        "brute_force_equal": equal,
        "brute_force_differing": differing,
    })
}
