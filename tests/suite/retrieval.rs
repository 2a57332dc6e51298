//! Retrieval in the query language on real Lance tables: vector and text legs and their
//! fusion by reciprocal rank (`CALL omni.vector`, `omni.text`, `omni.fuse`), each
//! compared with an answer computed here from the rows themselves: distances by brute
//! force, BM25 from its formula, the fused ranking from the legs' ranks.

use omnigraph_core::{OmniError, QueryRefusal};
use omnigraph_graph::Omnigraph;
use omnigraph_maintenance::MaintenanceExt;
use omnigraph_publish::CommitRef;
use omnigraph_query::{QueryOptions, query};
use omnigraph_tests::{Backend, TestRoot, objects, rows_in_column_order};
use rand::{Rng, SeedableRng, rngs::StdRng};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

const DIMENSION: usize = 8;
const DOCS: usize = 2_400;
const SCHEMA: &str = "
node Author { name: String @key, company: String }
node Doc { id: Int64 @key, body: String @index(fts), embedding: Vector(8)? @index(vector) }
edge Wrote: Author -> Doc
";

/// Words no stemmer shortens into another and no stop-word list holds.
const WORDS: [&str; 12] = [
    "graph", "lance", "vector", "kernel", "tensor", "prism", "falcon", "meadow", "quartz", "ember",
    "harbor", "cobalt",
];

struct Corpus {
    /// By id: the body and the embedding (none for every 50th doc).
    docs: BTreeMap<i64, (String, Option<Vec<f32>>)>,
    /// The docs written by authors at acme.
    acme: BTreeSet<i64>,
}

fn corpus() -> Corpus {
    let mut rng = StdRng::seed_from_u64(50);
    let mut docs = BTreeMap::new();
    for id in 0..DOCS as i64 {
        let length = rng.random_range(3..12);
        let body: Vec<&str> = (0..length)
            .map(|_| {
                // Skewed, so words differ in how many docs hold them.
                let a = rng.random_range(0..WORDS.len());
                let b = rng.random_range(0..WORDS.len());
                WORDS[a.min(b)]
            })
            .collect();
        let embedding =
            (id % 50 != 7).then(|| (0..DIMENSION).map(|_| rng.random::<f32>()).collect());
        docs.insert(id, (body.join(" "), embedding));
    }
    // Two docs with the same vector: a tie.
    let twin = docs[&11].1.clone();
    docs.get_mut(&12).unwrap().1 = twin;
    let acme = (0..DOCS as i64).filter(|id| id % 97 == 3).collect();
    Corpus { docs, acme }
}

async fn graph(corpus: &Corpus) -> (Omnigraph, TestRoot) {
    let test = TestRoot::new(Backend::Memory).await;
    let graph = Omnigraph::create(&test.uri, SCHEMA).await.unwrap();
    let docs: Vec<Value> = corpus
        .docs
        .iter()
        .map(|(id, (body, embedding))| json!({"id": id, "body": body, "embedding": embedding}))
        .collect();
    graph
        .insert_json("Doc", objects(Value::Array(docs)))
        .await
        .unwrap();
    graph
        .insert_json(
            "Author",
            objects(json!([
                {"name": "ada", "company": "acme"}, {"name": "bo", "company": "acme"},
                {"name": "cy", "company": "initech"}
            ])),
        )
        .await
        .unwrap();
    let wrote: Vec<Value> = corpus
        .docs
        .keys()
        .map(|id| {
            let author = if corpus.acme.contains(id) {
                ["ada", "bo"][(*id as usize) % 2]
            } else {
                "cy"
            };
            json!({"src": author, "dst": id})
        })
        .collect();
    graph
        .insert_json("Wrote", objects(Value::Array(wrote)))
        .await
        .unwrap();
    (graph, test)
}

async fn rows(graph: &Omnigraph, text: &str, options: &QueryOptions) -> Vec<Value> {
    let result = Box::pin(query(graph, text, options))
        .await
        .unwrap_or_else(|error| panic!("{text}: {error}"));
    let schema = result.schema();
    let batches = result.collect().await.unwrap();
    rows_in_column_order(&schema, &batches)
}

fn with_vector(query: &[f32]) -> QueryOptions {
    QueryOptions::new().parameter("v", json!(query))
}

/// Lance's L2: the squared Euclidean distance.
fn l2(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum()
}

/// The `k` nearest of `among` by brute force: (id, distance, competition rank).
fn nearest(
    corpus: &Corpus,
    query: &[f32],
    k: usize,
    among: Option<&BTreeSet<i64>>,
) -> Vec<(i64, f64, i64)> {
    let mut hits: Vec<(i64, f64)> = corpus
        .docs
        .iter()
        .filter(|(id, _)| among.is_none_or(|among| among.contains(id)))
        .filter_map(|(id, (_, embedding))| Some((*id, l2(embedding.as_ref()?, query))))
        .collect();
    hits.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    hits.truncate(k);
    competition(hits, |a, b| (a - b).abs() < 1e-6)
}

fn competition(hits: Vec<(i64, f64)>, same: impl Fn(f64, f64) -> bool) -> Vec<(i64, f64, i64)> {
    let mut ranked: Vec<(i64, f64, i64)> = Vec::with_capacity(hits.len());
    for (place, (id, score)) in hits.into_iter().enumerate() {
        let rank = match ranked.last() {
            Some(last) if same(last.1, score) => last.2,
            _ => place as i64 + 1,
        };
        ranked.push((id, score, rank));
    }
    ranked
}

/// BM25 from its formula (k1 = 1.2, b = 0.75, idf = ln((N - n + 0.5) / (n + 0.5) + 1)),
/// over every doc, with the words as the tokens.
fn bm25(corpus: &Corpus, word: &str, k: usize) -> Vec<(i64, f64, i64)> {
    let (k1, b) = (1.2, 0.75);
    let lengths: Vec<usize> = corpus
        .docs
        .values()
        .map(|(body, _)| body.split(' ').count())
        .collect();
    let docs = corpus.docs.len() as f64;
    let average = lengths.iter().sum::<usize>() as f64 / docs;
    let holding = corpus
        .docs
        .values()
        .filter(|(body, _)| body.split(' ').any(|w| w == word))
        .count() as f64;
    let idf = ((docs - holding + 0.5) / (holding + 0.5) + 1.0).ln();
    let mut hits: Vec<(i64, f64)> = corpus
        .docs
        .iter()
        .filter_map(|(id, (body, _))| {
            let tf = body.split(' ').filter(|w| *w == word).count() as f64;
            let length = body.split(' ').count() as f64;
            (tf > 0.0).then(|| {
                let norm = k1 * (1.0 - b + b * length / average);
                (*id, idf * (k1 + 1.0) * tf / (tf + norm))
            })
        })
        .collect();
    hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    hits.truncate(k);
    competition(hits, |a, b| (a - b).abs() < 1e-4 * a.abs().max(1.0))
}

/// (id, score, rank) of a single leg's rows `[id, rank, score]`.
fn hits(rows: &[Value]) -> Vec<(i64, f64, i64)> {
    rows.iter()
        .map(|row| {
            (
                row[0].as_i64().unwrap(),
                row[2].as_f64().unwrap(),
                row[1].as_i64().unwrap(),
            )
        })
        .collect()
}

fn assert_hits(found: &[(i64, f64, i64)], expected: &[(i64, f64, i64)], what: &str) {
    assert_eq!(
        found.len(),
        expected.len(),
        "{what}: {found:?} vs {expected:?}"
    );
    for (f, e) in found.iter().zip(expected) {
        assert_eq!((f.0, f.2), (e.0, e.2), "{what}: {found:?} vs {expected:?}");
        assert!(
            (f.1 - e.1).abs() <= 1e-3 * e.1.abs().max(1.0),
            "{what}: score of {} is {}, expected {}",
            f.0,
            f.1,
            e.1
        );
    }
}

const VECTOR_LEG: &str = "CALL omni.vector('Doc', 'embedding', $v, $k) YIELD node, rank, distance \
     RETURN node.id, rank, distance ORDER BY rank, node.id";

#[tokio::test]
async fn a_vector_leg_returns_the_nearest_with_their_ranks_before_and_after_its_index() {
    let corpus = corpus();
    let (graph, _test) = graph(&corpus).await;
    let query = corpus.docs[&11].1.clone().unwrap();
    let options = with_vector(&query).parameter("k", json!(10));
    let expected = nearest(&corpus, &query, 10, None);
    // The twins share rank 1; the next is 3.
    assert_eq!(
        expected.iter().map(|h| h.2).take(3).collect::<Vec<_>>(),
        [1, 1, 3]
    );
    // No index: Lance's exact search.
    let exact = hits(&rows(&graph, VECTOR_LEG, &options).await);
    assert_hits(&exact, &expected, "without an index");
    // The twins tie at the cut of k = 1: the smaller key is kept.
    let one = hits(
        &rows(
            &graph,
            VECTOR_LEG,
            &with_vector(&query).parameter("k", json!(1)),
        )
        .await,
    );
    assert_eq!(
        one.iter().map(|h| (h.0, h.2)).collect::<Vec<_>>(),
        [(11, 1)]
    );
    let before = graph.head().await.unwrap();

    let report = graph.maintenance().build_indexes().await.unwrap();
    assert!(
        report
            .built
            .iter()
            .any(|(_, index)| index == "embedding_vector"),
        "{report:?}"
    );
    // Probing every partition, the index answers as the brute force does.
    let all = QueryOptions::new()
        .parameter("v", json!(query))
        .parameter("k", json!(10));
    let indexed = hits(
        &rows(
            &graph,
            "CALL omni.vector('Doc', 'embedding', $v, $k, {nprobes: 256}) YIELD node, rank, distance \
             RETURN node.id, rank, distance ORDER BY rank, node.id",
            &all,
        )
        .await,
    );
    assert_hits(&indexed, &expected, "through the index");

    // Rows written after the index are found too (Lance searches what it does not
    // cover exactly), and an older commit does not see them.
    let near: Vec<f32> = query.iter().map(|x| x + 1e-4).collect();
    graph
        .insert_json(
            "Doc",
            objects(json!([{"id": 100_000, "body": "ember", "embedding": near}])),
        )
        .await
        .unwrap();
    let now = hits(&rows(&graph, VECTOR_LEG, &options).await);
    assert_eq!(now[2].0, 100_000, "{now:?}");
    let then = hits(
        &rows(
            &graph,
            VECTOR_LEG,
            &with_vector(&query)
                .parameter("k", json!(10))
                .at(CommitRef::Seq(before.seq)),
        )
        .await,
    );
    assert_hits(&then, &expected, "at the commit before the index");

    // A metric the index was not built with: an exact search by that metric.
    let cosine = |a: &[f32], b: &[f32]| {
        let dot: f64 = a.iter().zip(b).map(|(x, y)| f64::from(x * y)).sum();
        let norm = |v: &[f32]| v.iter().map(|x| f64::from(x * x)).sum::<f64>().sqrt();
        1.0 - dot / (norm(a) * norm(b))
    };
    let mut by_cosine: Vec<(i64, f64)> = corpus
        .docs
        .iter()
        .filter_map(|(id, (_, embedding))| Some((*id, cosine(embedding.as_ref()?, &query))))
        .chain([(100_000, cosine(&near, &query))])
        .collect();
    by_cosine.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    by_cosine.truncate(5);
    let found = hits(
        &rows(
            &graph,
            "CALL omni.vector('Doc', 'embedding', $v, 5, {metric: 'cosine'}) YIELD node, rank, distance \
             RETURN node.id, rank, distance ORDER BY rank, node.id",
            &with_vector(&query),
        )
        .await,
    );
    assert_eq!(
        found.iter().map(|h| h.0).collect::<Vec<_>>(),
        by_cosine.iter().map(|h| h.0).collect::<Vec<_>>()
    );
    for (f, e) in found.iter().zip(&by_cosine) {
        assert!((f.1 - e.1).abs() < 1e-5, "{found:?} vs {by_cosine:?}");
    }

    // A doc without a vector is never a hit, however large k.
    let every = rows(
        &graph,
        "CALL omni.vector('Doc', 'embedding', $v, 10000) YIELD node RETURN count(*)",
        &with_vector(&query),
    )
    .await;
    let with_vectors = corpus.docs.values().filter(|d| d.1.is_some()).count() + 1;
    assert_eq!(every, [json!([with_vectors])]);
}

#[tokio::test]
async fn a_leg_restricted_by_a_pattern_ranks_only_the_nodes_the_pattern_bound() {
    let corpus = corpus();
    let (graph, _test) = graph(&corpus).await;
    graph.maintenance().build_indexes().await.unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let query: Vec<f32> = (0..DIMENSION).map(|_| rng.random::<f32>()).collect();
    let acme_with_vectors: BTreeSet<i64> = corpus
        .acme
        .iter()
        .copied()
        .filter(|id| corpus.docs[id].1.is_some())
        .collect();
    let expected = nearest(&corpus, &query, 10, Some(&corpus.acme));
    assert_eq!(expected.len(), 10);
    // A post-filter of the whole type's top 10 would keep fewer than 10.
    let unrestricted = nearest(&corpus, &query, 10, None);
    assert!(
        unrestricted
            .iter()
            .filter(|h| corpus.acme.contains(&h.0))
            .count()
            < 10
    );
    let restricted = "MATCH (a:Author {company: $company})-[:Wrote]->(d:Doc) \
        CALL omni.vector(d, 'embedding', $v, $k) YIELD rank, distance \
        RETURN d.id, rank, distance ORDER BY rank, d.id";
    let options = with_vector(&query)
        .parameter("company", json!("acme"))
        .parameter("k", json!(10));
    assert_hits(
        &hits(&rows(&graph, restricted, &options).await),
        &expected,
        "among acme's docs",
    );
    // A k past the candidates returns every candidate with a vector.
    let options = with_vector(&query)
        .parameter("company", json!("acme"))
        .parameter("k", json!(1_000));
    let all = hits(&rows(&graph, restricted, &options).await);
    assert_eq!(
        all.iter().map(|h| h.0).collect::<BTreeSet<_>>(),
        acme_with_vectors
    );
    // No candidate: no row.
    let options = with_vector(&query)
        .parameter("company", json!("nobody"))
        .parameter("k", json!(10));
    assert!(rows(&graph, restricted, &options).await.is_empty());

    // A text leg restricted alike: top k among the candidates, with corpus-wide BM25.
    let text = "MATCH (a:Author {company: 'acme'})-[:Wrote]->(d:Doc) \
        CALL omni.text(d, 'body', 'lance', 5) YIELD rank, score \
        RETURN d.id, rank, score ORDER BY rank, d.id";
    let found = hits(&rows(&graph, text, &QueryOptions::new()).await);
    let mut expected: Vec<(i64, f64)> = bm25(&corpus, "lance", DOCS)
        .into_iter()
        .filter(|h| corpus.acme.contains(&h.0))
        .map(|h| (h.0, h.1))
        .collect();
    expected.truncate(5);
    assert_eq!(expected.len(), 5);
    assert_hits(
        &found,
        &competition(expected, |a, b| (a - b).abs() < 1e-4 * a.abs().max(1.0)),
        "lance among acme's docs",
    );
}

#[tokio::test]
async fn a_text_leg_scores_by_bm25_as_its_formula_does() {
    let corpus = corpus();
    let (graph, _test) = graph(&corpus).await;
    graph.maintenance().build_indexes().await.unwrap();
    for word in ["cobalt", "harbor", "graph"] {
        let found = hits(
            &rows(
                &graph,
                "CALL omni.text('Doc', 'body', $q, 10) YIELD node, rank, score \
                 RETURN node.id, rank, score ORDER BY rank, node.id",
                &QueryOptions::new().parameter("q", json!(word)),
            )
            .await,
        );
        assert_hits(&found, &bm25(&corpus, word, 10), word);
    }
    // A word no doc holds: an empty leg.
    let none = rows(
        &graph,
        "CALL omni.text('Doc', 'body', 'zeppelin', 10) YIELD node RETURN node.id",
        &QueryOptions::new(),
    )
    .await;
    assert!(none.is_empty());
    // One edit away, fuzziness 1 finds the word; exactly, nothing.
    let fuzzy = rows(
        &graph,
        "CALL omni.text('Doc', 'body', 'cobalx', 10, {fuzziness: 1}) YIELD node RETURN node.body",
        &QueryOptions::new(),
    )
    .await;
    assert_eq!(fuzzy.len(), 10);
    assert!(
        fuzzy
            .iter()
            .all(|row| row[0].as_str().unwrap().split(' ').any(|w| w == "cobalt")),
        "{fuzzy:?}"
    );
    let exact = rows(
        &graph,
        "CALL omni.text('Doc', 'body', 'cobalx', 10) YIELD node RETURN node.body",
        &QueryOptions::new(),
    )
    .await;
    assert!(exact.is_empty(), "{exact:?}");
}

/// A leg's hits, (id, score, rank).
type Ranked = Vec<(i64, f64, i64)>;

/// RRF of single legs' `(id, _, rank)`, as the fusion documents it.
fn rrf(legs: &[(Ranked, f64)], rrf_k: f64, k: usize) -> Vec<(i64, f64, Vec<Option<i64>>)> {
    fuse(legs, k, |_, (_, _, rank), weight| {
        weight / (rrf_k + *rank as f64)
    })
}

/// The legs' hits summed by id, each hit adding `contribution(its leg's hits, the hit,
/// the leg's weight)`, with each leg's rank; the `k` best, ties by id.
fn fuse(
    legs: &[(Ranked, f64)],
    k: usize,
    contribution: impl Fn(&Ranked, &(i64, f64, i64), f64) -> f64,
) -> Vec<(i64, f64, Vec<Option<i64>>)> {
    let mut fused: BTreeMap<i64, (f64, Vec<Option<i64>>)> = BTreeMap::new();
    for (i, (hits, weight)) in legs.iter().enumerate() {
        for hit in hits {
            let entry = fused
                .entry(hit.0)
                .or_insert_with(|| (0.0, vec![None; legs.len()]));
            entry.0 += contribution(hits, hit, *weight);
            entry.1[i] = Some(hit.2);
        }
    }
    let mut fused: Vec<(i64, f64, Vec<Option<i64>>)> =
        fused.into_iter().map(|(id, (s, r))| (id, s, r)).collect();
    fused.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    fused.truncate(k);
    fused
}

fn fused(rows: &[Value]) -> Vec<(i64, f64, Vec<Option<i64>>)> {
    rows.iter()
        .map(|row| {
            (
                row[0].as_i64().unwrap(),
                row[1].as_f64().unwrap(),
                row[2]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(Value::as_i64)
                    .collect(),
            )
        })
        .collect()
}

fn assert_fused(found: &[(i64, f64, Vec<Option<i64>>)], expected: &[(i64, f64, Vec<Option<i64>>)]) {
    assert_eq!(found.len(), expected.len(), "{found:?} vs {expected:?}");
    for (f, e) in found.iter().zip(expected) {
        assert_eq!((f.0, &f.2), (e.0, &e.2), "{found:?} vs {expected:?}");
        assert!((f.1 - e.1).abs() < 1e-12, "{found:?} vs {expected:?}");
    }
}

#[tokio::test]
async fn a_fusion_ranks_as_reciprocal_rank_fusion_of_its_legs_and_feeds_a_match() {
    let corpus = corpus();
    let (graph, _test) = graph(&corpus).await;
    graph.maintenance().build_indexes().await.unwrap();
    let query = corpus.docs[&40].1.clone().unwrap();
    let options = with_vector(&query).parameter("q", json!("quartz"));
    let vector = nearest(&corpus, &query, 30, None);
    let text = bm25(&corpus, "quartz", 30);

    let fusion = "CALL omni.fuse('Doc', [{vector: 'embedding', query: $v, k: 30}, \
                                         {text: 'body', query: $q, k: 30}], 10) \
        YIELD node, score, ranks RETURN node.id, score, ranks ORDER BY score DESC, node.id";
    let found = fused(&rows(&graph, fusion, &options).await);
    assert_fused(
        &found,
        &rrf(&[(vector.clone(), 1.0), (text.clone(), 1.0)], 60.0, 10),
    );

    // Weights and the constant.
    let weighted = "CALL omni.fuse('Doc', [{vector: 'embedding', query: $v, k: 30, weight: 0.25}, \
                                          {text: 'body', query: $q, k: 30, weight: 2}], 10, {rrf_k: 5}) \
        YIELD node, score, ranks RETURN node.id, score, ranks ORDER BY score DESC, node.id";
    let found = fused(&rows(&graph, weighted, &options).await);
    assert_fused(
        &found,
        &rrf(&[(vector.clone(), 0.25), (text.clone(), 2.0)], 5.0, 10),
    );

    // An empty leg adds nothing: the fusion is the other leg's order.
    let options_empty = with_vector(&query).parameter("q", json!("zeppelin"));
    let found = fused(&rows(&graph, fusion, &options_empty).await);
    assert_fused(
        &found,
        &rrf(&[(vector.clone(), 1.0), (Vec::new(), 1.0)], 60.0, 10),
    );

    // The hits feed a MATCH: each hit's author.
    let context = "CALL omni.fuse('Doc', [{vector: 'embedding', query: $v, k: 30}, \
                                         {text: 'body', query: $q, k: 30}], 10) \
        YIELD node AS d, score \
        MATCH (a:Author)-[:Wrote]->(d) RETURN a.name, d.id, score ORDER BY score DESC, d.id";
    let with_authors = rows(&graph, context, &options).await;
    let expected: Vec<Value> = rrf(&[(vector, 1.0), (text, 1.0)], 60.0, 10)
        .into_iter()
        .map(|(id, score, _)| {
            let author = if corpus.acme.contains(&id) {
                ["ada", "bo"][(id as usize) % 2]
            } else {
                "cy"
            };
            json!([author, id, score])
        })
        .collect();
    assert_eq!(with_authors.len(), expected.len());
    for (row, want) in with_authors.iter().zip(&expected) {
        assert_eq!(row[0], want[0]);
        assert_eq!(row[1], want[1]);
        assert!((row[2].as_f64().unwrap() - want[2].as_f64().unwrap()).abs() < 1e-12);
    }

    // Restricted: both legs rank acme's docs only.
    let restricted = "MATCH (a:Author {company: 'acme'})-[:Wrote]->(d:Doc) \
        CALL omni.fuse(d, [{vector: 'embedding', query: $v, k: 5}, {text: 'body', query: $q, k: 5}], 5) \
        YIELD score, ranks RETURN d.id, score, ranks ORDER BY score DESC, d.id";
    let found = fused(&rows(&graph, restricted, &options).await);
    let vector_acme = nearest(&corpus, &query, 5, Some(&corpus.acme));
    let mut text_acme: Vec<(i64, f64)> = bm25(&corpus, "quartz", DOCS)
        .into_iter()
        .filter(|h| corpus.acme.contains(&h.0))
        .map(|h| (h.0, h.1))
        .collect();
    text_acme.truncate(5);
    let text_acme = competition(text_acme, |a, b| (a - b).abs() < 1e-4 * a.abs().max(1.0));
    assert_fused(
        &found,
        &rrf(&[(vector_acme, 1.0), (text_acme, 1.0)], 60.0, 5),
    );
    // One operator runs both legs: the pattern before them is read once.
    let plan = rows(&graph, &format!("EXPLAIN {restricted}"), &options).await;
    let plan = plan[0][0].as_str().unwrap();
    assert_eq!(plan.matches("LegExec").count(), 1, "{plan}");
    assert!(
        plan.contains("top 5 of Doc by vector embedding (8 dimensions), among candidates; top 5 of Doc by text body"),
        "{plan}"
    );
}

#[tokio::test]
async fn a_call_the_engine_cannot_run_is_refused_where_it_is_written() {
    let corpus = corpus();
    let (graph, _test) = graph(&corpus).await;
    let query = vec![0.5f32; DIMENSION];
    let cases: [(&str, QueryRefusal, &str); 10] = [
        (
            "CALL omni.nothing('Doc', 'embedding', $v, 3) YIELD node RETURN node",
            QueryRefusal::Unsupported,
            "procedure",
        ),
        (
            "CALL omni.vector('Nope', 'embedding', $v, 3) YIELD node RETURN node",
            QueryRefusal::UnknownLabel,
            "Nope",
        ),
        (
            "CALL omni.vector('Doc', 'body', $v, 3) YIELD node RETURN node",
            QueryRefusal::WrongType,
            "not a vector",
        ),
        (
            "CALL omni.vector('Doc', 'missing', $v, 3) YIELD node RETURN node",
            QueryRefusal::UnknownProperty,
            "missing",
        ),
        (
            "CALL omni.text('Author', 'company', 'x', 3) YIELD node RETURN node",
            QueryRefusal::WrongType,
            "full-text",
        ),
        (
            "CALL omni.vector('Doc', 'embedding', $v, 3) YIELD nodes RETURN nodes",
            QueryRefusal::UnknownVariable,
            "yields",
        ),
        (
            "CALL omni.vector('Doc', 'embedding', $v, 3) RETURN 1",
            QueryRefusal::Syntax,
            "YIELD",
        ),
        (
            "CALL omni.vector('Doc', 'embedding', $v, 0) YIELD node RETURN node",
            QueryRefusal::WrongType,
            "k is 1",
        ),
        (
            "CALL omni.vector('Doc', 'embedding', [1, 2], 3) YIELD node RETURN node",
            QueryRefusal::WrongType,
            "dimension",
        ),
        (
            "CALL omni.vector('Doc', 'embedding', $v, 3, {fuzziness: 1}) YIELD node RETURN node",
            QueryRefusal::Unsupported,
            "fuzziness",
        ),
    ];
    for (text, refusal, says) in cases {
        let options = if text.contains("$v") {
            with_vector(&query)
        } else {
            QueryOptions::new()
        };
        let before = graph.head().await.unwrap();
        let error = match query_result(&graph, text, &options).await {
            Err(error) => error,
            Ok(rows) => panic!("{text}: {rows:?}"),
        };
        let OmniError::BadQuery { refusal: found, .. } = &error else {
            panic!("{text}: {error}");
        };
        assert_eq!(*found, refusal, "{text}: {error}");
        assert!(error.to_string().contains(says), "{text}: {error}");
        assert_eq!(graph.head().await.unwrap().seq, before.seq);
    }
}

async fn query_result(
    graph: &Omnigraph,
    text: &str,
    options: &QueryOptions,
) -> omnigraph_core::Result<Vec<Value>> {
    let result = Box::pin(query(graph, text, options)).await?;
    let schema = result.schema();
    let batches = result.collect().await?;
    Ok(rows_in_column_order(&schema, &batches))
}

/// The sizing `status` reports for the Doc embedding index.
async fn sizing(graph: &Omnigraph) -> omnigraph_graph::VectorIndexSizing {
    graph
        .index_coverage(&CommitRef::Head)
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.index == "embedding_vector")
        .and_then(|c| c.vector)
        .expect("a built vector index")
}

#[tokio::test]
async fn optimize_keeps_vector_and_text_indexes_current_and_retrains_an_outgrown_one() {
    let test = TestRoot::new(Backend::Memory).await;
    let graph = Omnigraph::create(&test.uri, SCHEMA).await.unwrap();
    let mut rng = StdRng::seed_from_u64(3);
    let mut written: Vec<(i64, Vec<f32>)> = Vec::new();
    let mut insert = async |from: i64, count: i64, word: &str| {
        let docs: Vec<Value> = (from..from + count)
            .map(|id| {
                let embedding: Vec<f32> = (0..DIMENSION).map(|_| rng.random::<f32>()).collect();
                written.push((id, embedding.clone()));
                json!({"id": id, "body": format!("{word} graph"), "embedding": embedding})
            })
            .collect();
        graph
            .insert_json("Doc", objects(Value::Array(docs)))
            .await
            .unwrap();
    };
    insert(0, 300, "lance").await;
    graph.maintenance().build_indexes().await.unwrap();
    // √300 rounds to 17 partitions, uncompressed; a search probes 16 by default.
    let first = sizing(&graph).await;
    assert_eq!(
        (first.quantisation, first.partitions, first.nprobes_default),
        (omnigraph_core::adapter::Quantisation::Flat, 17, 16)
    );

    // A few more rows: optimize folds both indexes, keeping the partitions; the new
    // rows' word is found through the full-text index, which now covers every row.
    insert(300, 100, "quartz").await;
    let report = graph.maintenance().optimize().await.unwrap();
    let doc = report.table("Doc").unwrap();
    assert!(
        doc.indexes_folded.contains(&"embedding_vector".to_string())
            && doc.indexes_folded.contains(&"body_fts".to_string()),
        "{doc:?}"
    );
    assert!(doc.indexes_retrained.is_empty(), "{doc:?}");
    assert_eq!(sizing(&graph).await.partitions, 17);
    let coverage = graph.index_coverage(&CommitRef::Head).await.unwrap();
    assert!(
        coverage
            .iter()
            .filter(|c| c.type_name == "Doc")
            .all(|c| c.built && c.uncovered_rows == 0),
        "{coverage:?}"
    );
    let found = rows(
        &graph,
        "CALL omni.text('Doc', 'body', 'quartz', 1000) YIELD node RETURN count(*)",
        &QueryOptions::new(),
    )
    .await;
    assert_eq!(found, [json!([100])]);

    // Four times the rows: √1,400 rounds to 37, at least twice 17, so the fold retrains.
    insert(400, 1_000, "ember").await;
    let report = graph.maintenance().optimize().await.unwrap();
    let doc = report.table("Doc").unwrap();
    assert_eq!(doc.indexes_retrained, ["embedding_vector"], "{doc:?}");
    assert_eq!(sizing(&graph).await.partitions, 37);
    // The retrained index answers as the brute force does when every partition is
    // probed.
    let query: Vec<f32> = (0..DIMENSION).map(|_| rng.random::<f32>()).collect();
    let found = rows(
        &graph,
        "CALL omni.vector('Doc', 'embedding', $v, 5, {nprobes: 37}) YIELD node, rank \
         RETURN node.id ORDER BY rank, node.id",
        &with_vector(&query),
    )
    .await;
    let mut exact: Vec<(f64, i64)> = written
        .iter()
        .map(|(id, embedding)| (l2(embedding, &query), *id))
        .collect();
    exact.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let expected: Vec<Value> = exact.iter().take(5).map(|(_, id)| json!([id])).collect();
    assert_eq!(found, expected);

    // Shrunk below what trains: a rebuild is refused as bad input, nothing published.
    // (Optimize leaves the index: a delete does not make it lag, it still serves.)
    graph.delete("Doc", "id >= 100").await.unwrap();
    let head = graph.head().await.unwrap().seq;
    let error = graph
        .maintenance()
        .rebuild_index("Doc", "embedding_vector")
        .await
        .unwrap_err();
    assert_eq!(error.kind(), omnigraph_core::ErrorKind::BadInput, "{error}");
    assert_eq!(graph.head().await.unwrap().seq, head);
}

#[tokio::test]
async fn a_call_keeps_the_rows_before_it_whose_node_it_found() {
    let corpus = corpus();
    let (graph, _test) = graph(&corpus).await;
    let query = corpus.docs[&3].1.clone().unwrap();
    // A node in two rows (one per acme author): both rows are kept, each with the call's
    // columns; the call ranks the distinct nodes (doc 3 is nearer than doc 100).
    let twice = rows(
        &graph,
        "MATCH (a:Author {company: 'acme'}), (d:Doc) WHERE d.id IN [3, 100] \
         CALL omni.vector(d, 'embedding', $v, 1) YIELD rank RETURN a.name, d.id, rank ORDER BY a.name",
        &with_vector(&query),
    )
    .await;
    assert_eq!(twice, [json!(["ada", 3, 1]), json!(["bo", 3, 1])]);
    // A row whose node an OPTIONAL MATCH left null is not among the hits: dropped.
    let optional = rows(
        &graph,
        "MATCH (a:Author) OPTIONAL MATCH (a)-[:Wrote]->(d:Doc) WHERE d.id = 3 \
         CALL omni.vector(d, 'embedding', $v, 5) YIELD rank RETURN a.name, d.id, rank",
        &with_vector(&query),
    )
    .await;
    assert_eq!(optional, [json!(["bo", 3, 1])]);
    // YIELD ... WHERE filters the hits.
    let kept = rows(
        &graph,
        "CALL omni.vector('Doc', 'embedding', $v, 10) YIELD node, rank WHERE rank <= 3 \
         RETURN node.id ORDER BY node.id",
        &with_vector(&query),
    )
    .await;
    assert_eq!(kept.len(), 3, "{kept:?}");
    // EXPLAIN names the leg.
    let plan = rows(
        &graph,
        "EXPLAIN CALL omni.vector('Doc', 'embedding', $v, 10) YIELD node RETURN node.id",
        &with_vector(&query),
    )
    .await;
    let plan = plan[0][0].as_str().unwrap();
    assert!(
        plan.contains("LegExec: top 10 of Doc by vector embedding"),
        "{plan}"
    );
    // A value a call's plan cannot hold is refused before anything runs.
    let error = query_result(
        &graph,
        "MATCH (d:Doc) CALL omni.text('Doc', 'body', d.body, 3) YIELD node RETURN node.id",
        &QueryOptions::new(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            &error,
            OmniError::BadQuery {
                refusal: QueryRefusal::WrongType,
                ..
            }
        ),
        "{error}"
    );
}

/// The documents a phrase leg over `words` at `slop` returns.
async fn phrase_ids(graph: &Omnigraph, words: &str, slop: usize) -> BTreeSet<i64> {
    let text = format!(
        "CALL omni.text('Doc', 'body', '{words}', 2000, {{match: 'phrase', slop: {slop}}}) \
         YIELD node RETURN node.id"
    );
    rows(graph, &text, &QueryOptions::new())
        .await
        .iter()
        .map(|row| row[0].as_i64().unwrap())
        .collect()
}

/// The ids of the docs whose body holds `first` then `second`, at most `slop` words
/// between them (Lance's phrase: `second`'s position minus `first`'s is 1 to
/// `slop + 1`).
fn phrase(corpus: &Corpus, first: &str, second: &str, slop: usize) -> BTreeSet<i64> {
    corpus
        .docs
        .iter()
        .filter(|(_, (body, _))| {
            let words: Vec<&str> = body.split(' ').collect();
            words.iter().enumerate().any(|(p, w)| {
                *w == first
                    && words
                        .iter()
                        .enumerate()
                        .any(|(q, v)| *v == second && q > p && q - p <= slop + 1)
            })
        })
        .map(|(id, _)| *id)
        .collect()
}

/// Each leg's `(id, score, rank)` scaled over its hits to 1 (its best) down to 0 (its
/// worst), weighted and summed by id: the fusion by score as documented.
fn by_score(legs: &[(Ranked, f64)], k: usize) -> Vec<(i64, f64, Vec<Option<i64>>)> {
    fuse(legs, k, |hits, (_, score, _), weight| {
        let (best, worst) = (hits[0].1, hits[hits.len() - 1].1);
        let scaled = if best == worst {
            1.0
        } else {
            (score - worst) / (best - worst)
        };
        weight * scaled
    })
}

#[tokio::test]
async fn a_text_leg_matches_every_word_or_a_phrase_and_a_fusion_may_sum_scaled_scores() {
    let corpus = corpus();
    let (graph, _test) = graph(&corpus).await;
    graph.maintenance().build_indexes().await.unwrap();
    // Every word: the docs holding both, scored as the sum of each word's BM25.
    let both = rows(
        &graph,
        "CALL omni.text('Doc', 'body', 'cobalt harbor', 10, {match: 'all'}) YIELD node, rank, score \
         RETURN node.id, rank, score ORDER BY rank, node.id",
        &QueryOptions::new(),
    )
    .await;
    let cobalt = bm25(&corpus, "cobalt", DOCS);
    let harbor = bm25(&corpus, "harbor", DOCS);
    let mut expected: Vec<(i64, f64)> = cobalt
        .iter()
        .filter_map(|(id, a, _)| {
            let b = harbor.iter().find(|h| h.0 == *id)?.1;
            Some((*id, a + b))
        })
        .collect();
    expected.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    expected.truncate(10);
    assert!(expected.len() == 10, "the corpus has docs holding both");
    let expected = competition(expected, |a, b| (a - b).abs() < 1e-4 * a.abs().max(1.0));
    assert_hits(&hits(&both), &expected, "cobalt AND harbor");

    // A phrase: the words adjacent and in order; with slop 2, up to two words between.
    for slop in [0usize, 2] {
        let found = phrase_ids(&graph, "quartz ember", slop).await;
        let want = phrase(&corpus, "quartz", "ember", slop);
        assert!(!want.is_empty());
        assert_eq!(found, want, "slop {slop}");
    }
    assert!(
        phrase(&corpus, "quartz", "ember", 2).len() > phrase(&corpus, "quartz", "ember", 0).len()
    );
    // Three words, adjacent and in order.
    let three = phrase_ids(&graph, "graph lance vector", 0).await;
    let want: BTreeSet<i64> = corpus
        .docs
        .iter()
        .filter(|(_, (body, _))| body.contains("graph lance vector"))
        .map(|(id, _)| *id)
        .collect();
    assert!(!want.is_empty());
    assert_eq!(three, want);
    // The reversed order is another phrase.
    let reversed = phrase_ids(&graph, "ember quartz", 0).await;
    assert_eq!(reversed, phrase(&corpus, "ember", "quartz", 0));

    // A prefix stands for the words that begin with it: 'cob' for 'cobalt' (and 'Co',
    // two letters, for 'cobalt' alone too); earlier words match whole.
    let prefixed = |text: &str| {
        format!(
            "CALL omni.text('Doc', 'body', '{text}', 10, {{match: 'prefix'}}) YIELD node, rank, score \
             RETURN node.id, rank, score ORDER BY rank, node.id"
        )
    };
    for text in ["cob", "Co"] {
        let found = hits(&rows(&graph, &prefixed(text), &QueryOptions::new()).await);
        assert_hits(&found, &bm25(&corpus, "cobalt", 10), text);
    }
    let found = hits(&rows(&graph, &prefixed("harbor qua"), &QueryOptions::new()).await);
    let harbor = bm25(&corpus, "harbor", DOCS);
    let quartz = bm25(&corpus, "quartz", DOCS);
    let mut summed: BTreeMap<i64, f64> = BTreeMap::new();
    for (id, score, _) in harbor.iter().chain(&quartz) {
        *summed.entry(*id).or_default() += score;
    }
    let mut expected: Vec<(i64, f64)> = summed.into_iter().collect();
    expected.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    expected.truncate(10);
    let expected = competition(expected, |a, b| (a - b).abs() < 1e-4 * a.abs().max(1.0));
    assert_hits(&found, &expected, "harbor qua*");
    assert!(
        rows(&graph, &prefixed("zzq"), &QueryOptions::new())
            .await
            .is_empty()
    );

    // Fusion by score: each leg's scores scaled over its hits, weighted, summed.
    let query = corpus.docs[&40].1.clone().unwrap();
    let options = with_vector(&query).parameter("q", json!("quartz"));
    let vector = nearest(&corpus, &query, 30, None);
    let text = bm25(&corpus, "quartz", 30);
    // Every partition probed: the vector leg's 30th, which scales it, is exact.
    let fusion = "CALL omni.fuse('Doc', [{vector: 'embedding', query: $v, k: 30, nprobes: 4096}, \
                                         {text: 'body', query: $q, k: 30, weight: 0.5}], 10, {method: 'score'}) \
        YIELD node, score, ranks RETURN node.id, score, ranks ORDER BY score DESC, node.id";
    let found = fused(&rows(&graph, fusion, &options).await);
    let expected = by_score(&[(vector, 1.0), (text, 0.5)], 10);
    assert!(
        expected.iter().any(|hit| hit.2[0].is_some())
            && expected.iter().any(|hit| hit.2[1].is_some()),
        "both legs reach the top 10: {expected:?}"
    );
    assert_eq!(found.len(), expected.len());
    for (f, e) in found.iter().zip(&expected) {
        // Lance scores in 32 bits.
        assert_eq!((f.0, &f.2), (e.0, &e.2), "{found:?} vs {expected:?}");
        assert!((f.1 - e.1).abs() < 1e-4, "{found:?} vs {expected:?}");
    }

    // What the options refuse, each where it is written, with the head unmoved.
    let before = graph.head().await.unwrap().seq;
    for (text, says) in [
        (
            "CALL omni.text('Doc', 'body', 'x y', 3, {match: 'phrase', fuzziness: 1}) YIELD node RETURN node",
            "fuzziness applies",
        ),
        (
            "CALL omni.text('Doc', 'body', 'x y', 3, {slop: 1}) YIELD node RETURN node",
            "slop applies",
        ),
        (
            "CALL omni.text('Doc', 'body', 'x', 3, {match: 'suffix'}) YIELD node RETURN node",
            "'any', 'all', 'phrase' or 'prefix'",
        ),
        (
            "CALL omni.text('Doc', 'body', 'quartz c', 3, {match: 'prefix'}) YIELD node RETURN node",
            "at least 2 characters, not 'c'",
        ),
        (
            "CALL omni.text('Doc', 'body', 'x y', 3, {match: 'phrase', slop: 17}) YIELD node RETURN node",
            "slop is 0 to 16",
        ),
        (
            "CALL omni.fuse('Doc', [{text: 'body', query: 'x', k: 3}], 3, {method: 'score', rrf_k: 5}) YIELD node RETURN node",
            "rrf_k applies",
        ),
        (
            "CALL omni.fuse('Doc', [{text: 'body', query: 'x', k: 3}], 3, {method: 'mean'}) YIELD node RETURN node",
            "'rrf' or 'score'",
        ),
    ] {
        let error = match query_result(&graph, text, &QueryOptions::new()).await {
            Err(error) => error,
            Ok(rows) => panic!("{text}: {rows:?}"),
        };
        let OmniError::BadQuery { refusal, .. } = &error else {
            panic!("{text}: {error}");
        };
        assert_eq!(*refusal, QueryRefusal::WrongType, "{text}: {error}");
        assert!(error.to_string().contains(says), "{text}: {error}");
    }
    assert_eq!(graph.head().await.unwrap().seq, before);
}

#[tokio::test]
async fn a_call_on_a_type_returns_its_node_whole_and_orders_by_its_properties() {
    let corpus = corpus();
    let (graph, _test) = graph(&corpus).await;
    let found = rows(
        &graph,
        "CALL omni.text('Doc', 'body', 'quartz', 3) YIELD node, rank \
         RETURN node, rank ORDER BY rank, node.id",
        &QueryOptions::new(),
    )
    .await;
    let expected = bm25(&corpus, "quartz", 3);
    assert_eq!(found.len(), expected.len(), "{found:?}");
    for (row, (id, _, rank)) in found.iter().zip(&expected) {
        assert_eq!(row[0]["id"], json!(id), "{found:?}");
        assert_eq!(row[0]["body"], json!(corpus.docs[id].0), "{found:?}");
        assert_eq!(row[1], json!(rank), "{found:?}");
    }
    // On candidates, renamed, ordered by another property.
    let acme = rows(
        &graph,
        "MATCH (:Author {company: 'acme'})-[:Wrote]->(d:Doc) \
         CALL omni.text(d, 'body', 'quartz', 100) YIELD node AS hit \
         RETURN hit ORDER BY hit.body, hit.id",
        &QueryOptions::new(),
    )
    .await;
    let mut expected: Vec<(String, i64)> = bm25(&corpus, "quartz", DOCS)
        .into_iter()
        .filter(|hit| corpus.acme.contains(&hit.0))
        .map(|hit| (corpus.docs[&hit.0].0.clone(), hit.0))
        .collect();
    expected.sort();
    let found: Vec<(String, i64)> = acme
        .iter()
        .map(|row| {
            (
                row[0]["body"].as_str().unwrap().to_string(),
                row[0]["id"].as_i64().unwrap(),
            )
        })
        .collect();
    assert!(!expected.is_empty());
    assert_eq!(found, expected);
}
