//! `--query` (alone): a social graph (people with name, gender and age, power-law
//! follows, people living in cities in states in countries, and interests) as Parquet
//! files, loaded into OmniGraph and optimized (the adjacency artifacts), and a suite of Cypher queries each run `--runs` times
//! (p50, p99). The files and the suite (`queries.json`, with OmniGraph's rows and
//! times) stay in `--kuzu-dir` for `tools/bench/kuzu_query.py`, which loads the same
//! files into Kuzu, runs the same queries, checks the rows agree and prints the ratios.

use super::{peak_mib, reset_peak};
use omnigraph_core::arrow_array::{Int64Array, RecordBatch, StringArray};
use omnigraph_core::arrow_schema::{DataType, Field, Schema};
use omnigraph_graph::{InputFormat, LoadMode, Omnigraph};
use omnigraph_query::{QueryOptions, query};
use rand::{Rng, SeedableRng, rngs::StdRng};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// The schema both engines load; `kuzu_query.py` declares the same tables.
const SCHEMA: &str = "
node Person { id: Int64 @key, name: String, gender: String, age: Int64 }
node City { id: Int64 @key, name: String }
node State { id: Int64 @key, name: String }
node Country { id: Int64 @key, name: String }
node Interest { id: Int64 @key, name: String }
edge Follows: Person -> Person
edge LivesIn: Person -> City
edge CityIn: City -> State
edge StateIn: State -> Country
edge HasInterest: Person -> Interest
";

const CITIES: i64 = 1_000;
const STATES: i64 = 100;
const COUNTRIES: i64 = 10;
const INTERESTS: i64 = 500;
/// The mean number of people a person follows: 100,000 people make ~2.4M follows.
const FOLLOWS_MEAN: f64 = 24.0;
/// The most people one person follows (the power law's tail, cut).
const FOLLOWS_MAX: usize = 5_000;

/// The suite: a name and the query, the same text on both engines.
pub(crate) const SUITE: &[(&str, &str)] = &[
    (
        "top_followed",
        "MATCH (a:Person)-[:Follows]->(b:Person) RETURN b.id AS id, count(*) AS followers ORDER BY followers DESC, id LIMIT 5",
    ),
    (
        "top_followed_then_city",
        "MATCH (a:Person)-[:Follows]->(b:Person) WITH b, count(*) AS n ORDER BY n DESC, b.id LIMIT 5 MATCH (b)-[:LivesIn]->(c:City) RETURN b.id AS id, n, c.name AS city ORDER BY n DESC, id",
    ),
    (
        "any_edge_two_hops",
        "MATCH (p:Person)-[*1..2]->(x) WHERE p.id < 100 RETURN count(*) AS n",
    ),
    (
        "chain_filters_both_ends",
        "MATCH (a:Person)-[:LivesIn]->(:City)-[:CityIn]->(:State)-[:StateIn]->(co:Country) WHERE a.age < 25 AND co.name = 'country3' RETURN count(*) AS n",
    ),
    (
        "two_hop_count",
        "MATCH (a:Person)-[:Follows]->(b:Person)-[:Follows]->(c:Person) RETURN count(*) AS n",
    ),
    (
        "two_hop_count_filtered",
        "MATCH (a:Person)-[:Follows]->(b:Person)-[:Follows]->(c:Person) WHERE b.age < 30 AND c.age > 60 RETURN count(*) AS n",
    ),
    (
        "youngest_cities",
        "MATCH (p:Person)-[:LivesIn]->(c:City)-[:CityIn]->(:State)-[:StateIn]->(co:Country {name: 'country1'}) RETURN c.name AS city, avg(p.age) AS age ORDER BY age, city LIMIT 5",
    ),
    (
        "interests_by_gender",
        "MATCH (p:Person)-[:HasInterest]->(i:Interest) WHERE p.gender = 'female' RETURN i.name AS interest, count(*) AS n ORDER BY n DESC, interest LIMIT 10",
    ),
    (
        "followers_of_the_most_followed",
        "MATCH (a:Person)-[:Follows]->(b:Person) WITH b, count(*) AS n ORDER BY n DESC, b.id LIMIT 1 MATCH (f:Person)-[:Follows]->(b) WHERE f.age > 50 RETURN count(f) AS n",
    ),
    (
        "point_two_hop_distinct",
        "MATCH (p:Person {id: 12345})-[:Follows]->(:Person)-[:Follows]->(g:Person) RETURN count(DISTINCT g) AS n",
    ),
];

fn int_string_schema(names: &[&str]) -> Arc<Schema> {
    Arc::new(Schema::new(
        names
            .iter()
            .map(|name| match *name {
                "id" | "age" | "src" | "dst" => Field::new(*name, DataType::Int64, false),
                _ => Field::new(*name, DataType::Utf8, false),
            })
            .collect::<Vec<_>>(),
    ))
}

fn write_named(path: &Path, rows: i64, prefix: &str) {
    let schema = int_string_schema(&["id", "name"]);
    super::write_parquet(path, rows as usize, |start, count| {
        let ids: Int64Array = (start..start + count).map(|i| i as i64).collect();
        let names: StringArray = (start..start + count)
            .map(|i| Some(format!("{prefix}{i}")))
            .collect();
        RecordBatch::try_new(schema.clone(), vec![Arc::new(ids), Arc::new(names)]).expect("a batch")
    });
}

fn write_edges(path: &Path, edges: &[(i64, i64)]) {
    let schema = int_string_schema(&["src", "dst"]);
    super::write_parquet(path, edges.len(), |start, count| {
        let slice = &edges[start..start + count];
        let src: Int64Array = slice.iter().map(|(s, _)| *s).collect();
        let dst: Int64Array = slice.iter().map(|(_, d)| *d).collect();
        RecordBatch::try_new(schema.clone(), vec![Arc::new(src), Arc::new(dst)]).expect("a batch")
    });
}

/// A number in `0..n` drawn with a power-law bias toward small ones (the popular).
fn skewed(rng: &mut StdRng, n: i64) -> i64 {
    let u: f64 = rng.random();
    ((u * u * u) * n as f64) as i64
}

/// The graph's files in `dir`, by table name.
fn generate(dir: &Path, people: i64) -> Vec<(&'static str, std::path::PathBuf, usize)> {
    let mut rng = StdRng::seed_from_u64(48);
    let mut files = Vec::new();
    let person_schema = int_string_schema(&["id", "name", "gender", "age"]);
    let path = dir.join("person.parquet");
    super::write_parquet(&path, people as usize, |start, count| {
        let ids: Int64Array = (start..start + count).map(|i| i as i64).collect();
        let names: StringArray = (start..start + count)
            .map(|i| Some(format!("person{i}")))
            .collect();
        let genders: StringArray = (start..start + count)
            .map(|i| {
                Some(if (i * 7919) % 2 == 0 {
                    "female"
                } else {
                    "male"
                })
            })
            .collect();
        let ages: Int64Array = (start..start + count)
            .map(|i| 18 + ((i * 2_654_435_761) % 73) as i64)
            .collect();
        RecordBatch::try_new(
            person_schema.clone(),
            vec![
                Arc::new(ids),
                Arc::new(names),
                Arc::new(genders),
                Arc::new(ages),
            ],
        )
        .expect("a batch")
    });
    files.push(("Person", path, people as usize));
    for (table, rows, prefix) in [
        ("City", CITIES, "city"),
        ("State", STATES, "state"),
        ("Country", COUNTRIES, "country"),
        ("Interest", INTERESTS, "interest"),
    ] {
        let path = dir.join(format!("{}.parquet", table.to_lowercase()));
        write_named(&path, rows, prefix);
        files.push((table, path, rows as usize));
    }
    let mut follows = Vec::new();
    for person in 0..people {
        // A Pareto draw (alpha 2) with the wanted mean, cut at FOLLOWS_MAX.
        let u: f64 = rng.random_range(f64::EPSILON..1.0);
        let degree = ((FOLLOWS_MEAN / 2.0) / u.sqrt()) as usize;
        for _ in 0..degree.min(FOLLOWS_MAX) {
            let target = skewed(&mut rng, people);
            if target != person {
                follows.push((person, target));
            }
        }
    }
    let lives: Vec<(i64, i64)> = (0..people).map(|p| (p, skewed(&mut rng, CITIES))).collect();
    let city_in: Vec<(i64, i64)> = (0..CITIES).map(|c| (c, c % STATES)).collect();
    let state_in: Vec<(i64, i64)> = (0..STATES).map(|s| (s, s % COUNTRIES)).collect();
    let mut interests = Vec::new();
    for person in 0..people {
        if rng.random_bool(0.3) {
            for _ in 0..rng.random_range(1..=2) {
                interests.push((person, skewed(&mut rng, INTERESTS)));
            }
        }
    }
    for (table, edges) in [
        ("Follows", &follows),
        ("LivesIn", &lives),
        ("CityIn", &city_in),
        ("StateIn", &state_in),
        ("HasInterest", &interests),
    ] {
        let path = dir.join(format!("{}.parquet", table.to_lowercase()));
        write_edges(&path, edges);
        files.push((table, path, edges.len()));
    }
    files
}

/// The `p` quantile of sorted latencies, nearest rank.
pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

pub(crate) async fn query_bench(dir: &Path, people: usize, runs: usize) -> Value {
    let files = generate(dir, people as i64);
    let uri = dir.join("graph").display().to_string();
    let graph = Omnigraph::create(&uri, SCHEMA)
        .await
        .expect("create the graph");
    reset_peak();
    let started = Instant::now();
    for (table, path, rows) in &files {
        let report = graph
            .load_columnar(path, InputFormat::Parquet, table, LoadMode::Append)
            .await
            .expect("load");
        assert_eq!(
            report.rows.get(*table).copied(),
            Some(*rows as u64),
            "{table}"
        );
    }
    let load_seconds = started.elapsed().as_secs_f64();
    let load_peak = peak_mib();
    // Optimize builds each edge table's adjacency artifact, as Kuzu's COPY builds its
    // adjacency lists: the queries run on the optimized graph, and the time is
    // reported apart from the load's.
    let started = Instant::now();
    {
        use omnigraph_maintenance::MaintenanceExt;
        graph.maintenance().optimize().await.expect("optimize");
    }
    let optimize_seconds = started.elapsed().as_secs_f64();
    reset_peak();
    let mut results = Vec::new();
    for (name, text) in SUITE {
        let mut times = Vec::with_capacity(runs);
        let mut rows = Vec::new();
        for _ in 0..runs {
            let started = Instant::now();
            let result = query(&graph, text, &QueryOptions::new())
                .await
                .unwrap_or_else(|error| panic!("{name}: {error}"));
            let schema = result.schema();
            let batches = result
                .collect()
                .await
                .unwrap_or_else(|error| panic!("{name}: {error}"));
            times.push(started.elapsed().as_secs_f64() * 1e3);
            rows = omnigraph_tests::rows_in_column_order(&schema, &batches);
        }
        times.sort_by(f64::total_cmp);
        results.push(json!({
            "name": name,
            "query": text,
            "p50_ms": percentile(&times, 0.5),
            "p99_ms": percentile(&times, 0.99),
            "rows": rows,
        }));
    }
    let document = json!({
        "people": people,
        "tables": files.iter().map(|(t, p, r)| json!({"table": t, "file": p.file_name().and_then(|f| f.to_str()), "rows": r})).collect::<Vec<_>>(),
        "runs": runs,
        "omnigraph_load_seconds": load_seconds,
        "omnigraph_optimize_seconds": optimize_seconds,
        "omnigraph_load_peak_mib": load_peak,
        "omnigraph_query_peak_mib": peak_mib(),
        "queries": results,
    });
    std::fs::write(dir.join("queries.json"), document.to_string()).expect("write queries.json");
    document
}
