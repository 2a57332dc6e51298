//! `--serve` (alone): a graph served by `omnigraph_server` in this process, driven over
//! loopback by N concurrent HTTP clients (the load generator shares the process and the
//! machine's cores with the server, as a sidecar would).
//!
//! - reads: point reads and one-hop queries from random people, p50 and p99 at 1, 8 and
//!   32 clients, beside the same queries through the library on the server's handle;
//! - floors: at 32 clients, `GET /healthz` (this machine's HTTP, no token, no graph) in
//!   turn with a query that reads no table (`RETURN $id`: the query route without
//!   storage), with the server's CPU per request: what a read costs before it reads;
//! - inserts: single-row inserts from 8 clients, on the local folder (with and without
//!   an idempotency key), and with every store request held 17 ms (as on S3);
//! - maintenance: the read mix at 8 clients while optimize compacts a 1M-row table made
//!   of many appends, once with Lance's work on the maintenance runtime and once on the
//!   serving runtime, against the same mix with no maintenance, with peak memory;
//! - every acknowledged insert is present afterwards, exactly once.

use crate::query::percentile;
use crate::{peak_mib, reset_peak, write_parquet};
use omnigraph_core::arrow_array::{Int32Array, Int64Array, RecordBatch, StringArray};
use omnigraph_core::arrow_schema::{DataType, Field, Schema};
use omnigraph_core::storage::{FaultAction, FaultRule, StorageOptions, StorageRoot};
use omnigraph_graph::{InputFormat, LoadMode, Omnigraph};
use omnigraph_maintenance::MaintenanceExt;
use omnigraph_server::tokens::{Role, TokenFile};
use omnigraph_server::{Server, ServerConfig};
use rand::{Rng, SeedableRng, rngs::StdRng};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SERVE_SCHEMA: &str = "
node Person { id: String @key, name: String, age: Int32 }
edge Knows: Person -> Person
node EventA { id: Int64 @key, v: Int64 @index }
node EventB { id: Int64 @key, v: Int64 @index }
";
/// Client counts the reads are measured at.
const READ_CLIENTS: [usize; 3] = [1, 8, 32];
/// How long each read figure is measured.
const READ_WINDOW: Duration = Duration::from_secs(4);
/// Clients that insert at once.
const INSERT_CLIENTS: usize = 8;
/// Inserts per client on the local folder.
const INSERTS_PER_CLIENT: usize = 40;
/// Inserts per client with every store request held.
const HELD_INSERTS_PER_CLIENT: usize = 12;
/// How long every store request is held in the held-insert figure (S3's typical
/// request latency).
const STORE_DELAY: Duration = Duration::from_millis(17);
/// Appends that build each maintenance table.
const EVENT_APPENDS: usize = 50;
/// Rows of each maintenance table.
const EVENT_ROWS: usize = 1_000_000;

/// The name of the server's threads in the bench.
const SERVER_THREAD_NAME: &str = "og-server";

/// CPU milliseconds this process has spent so far: on the server's threads (and
/// Lance's CPU pool, whose work is the server's), and on the rest of the process (the
/// process's total, which keeps the time of threads that ended, less the server's).
/// `None` without `/proc`.
fn cpu_ms() -> Option<(f64, f64)> {
    // Linux reports CPU times in USER_HZ, 100 a second on every architecture it runs.
    const TICKS_PER_MS: f64 = 100.0 / 1_000.0;
    // `pid (comm) state ...`: the name may hold spaces, so the fields start after `)`;
    // utime and stime are the 14th and 15th (`state` is the 3rd).
    let read = |stat: &str| -> Option<(String, f64)> {
        let (open, close) = (stat.find('(')?, stat.rfind(')')?);
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let ticks = |at: usize| fields.get(at - 3)?.parse::<f64>().ok();
        Some((
            stat[open + 1..close].to_owned(),
            (ticks(14)? + ticks(15)?) / TICKS_PER_MS,
        ))
    };
    let (_, total) = read(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
    let mut server = 0.0;
    for thread in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let Some((name, ms)) = std::fs::read_to_string(thread.path().join("stat"))
            .ok()
            .and_then(|stat| read(&stat))
        else {
            continue;
        };
        if name.starts_with(SERVER_THREAD_NAME) || name.starts_with("lance-cpu") {
            server += ms;
        }
    }
    Some((server, total - server))
}

/// CPU milliseconds per request between two [`cpu_ms`] readings, of the server's
/// threads and of the rest of the process (the load generator).
fn cpu_per_request(
    before: Option<(f64, f64)>,
    after: Option<(f64, f64)>,
    requests: usize,
) -> (Option<f64>, Option<f64>) {
    let requests = requests.max(1) as f64;
    match before.zip(after) {
        Some((before, after)) => (
            Some((after.0 - before.0) / requests),
            Some((after.1 - before.1) / requests),
        ),
        None => (None, None),
    }
}

fn percentiles(mut times: Vec<f64>) -> Value {
    times.sort_by(f64::total_cmp);
    let at = |p: f64| match times.is_empty() {
        true => 0.0,
        false => percentile(&times, p),
    };
    json!({"requests": times.len(), "p50_ms": at(0.5), "p99_ms": at(0.99), "max_ms": at(1.0)})
}

/// What a client of the load generator asks.
#[derive(Clone, Copy)]
enum Ask {
    Point,
    Hop,
    /// The query route without storage.
    NoTable,
    /// The HTTP floor.
    Healthz,
}

struct Target {
    base: String,
    token: String,
    client: reqwest::Client,
    people: usize,
}

const POINT: &str = "MATCH (p:Person {id: $id}) RETURN p.name, p.age";
const HOP: &str = "MATCH (p:Person {id: $id})-[:Knows]->(f:Person) RETURN f.id";
/// A hop that reads the far nodes' properties: their rows are looked up by key.
const HOP_PROPERTY: &str = "MATCH (p:Person {id: $id})-[:Knows]->(f:Person) RETURN f.name, f.age";
/// A query that reads no table: the query route's cost without storage.
const NO_TABLE: &str = "RETURN $id AS id";

impl Target {
    async fn query(&self, text: &str, id: &str) -> f64 {
        let started = Instant::now();
        let response = self
            .client
            .post(format!("{}/graphs/bench/query", self.base))
            .bearer_auth(&self.token)
            .json(&json!({"query": text, "params": {"id": id}}))
            .send()
            .await
            .expect("query sent");
        assert!(response.status().is_success(), "{}", response.status());
        response.bytes().await.expect("rows read");
        started.elapsed().as_secs_f64() * 1e3
    }

    /// `GET /healthz`: the HTTP floor (no token, no graph).
    async fn healthz(&self) -> f64 {
        let started = Instant::now();
        let response = self
            .client
            .get(format!("{}/healthz", self.base))
            .send()
            .await
            .expect("healthz sent");
        assert!(response.status().is_success(), "{}", response.status());
        response.bytes().await.expect("healthz read");
        started.elapsed().as_secs_f64() * 1e3
    }

    /// One request of kind `ask` (of a random person where it names one): its latency.
    async fn ask(&self, ask: Ask, rng: &mut StdRng) -> f64 {
        let id = format!("p{}", rng.random_range(0..self.people));
        match ask {
            Ask::Point => self.query(POINT, &id).await,
            Ask::Hop => self.query(HOP, &id).await,
            Ask::NoTable => self.query(NO_TABLE, &id).await,
            Ask::Healthz => self.healthz().await,
        }
    }

    /// `clients` tasks asking the two kinds of `asks` in turn for `window`: each kind's
    /// latencies.
    async fn mix(
        self: &Arc<Self>,
        clients: usize,
        window: Duration,
        asks: [Ask; 2],
    ) -> (Vec<f64>, Vec<f64>) {
        let deadline = Instant::now() + window;
        let mut tasks = Vec::new();
        for client in 0..clients {
            let target = self.clone();
            tasks.push(tokio::spawn(async move {
                let mut rng = StdRng::seed_from_u64(client as u64);
                let (mut first, mut second) = (Vec::new(), Vec::new());
                while Instant::now() < deadline {
                    first.push(target.ask(asks[0], &mut rng).await);
                    second.push(target.ask(asks[1], &mut rng).await);
                }
                (first, second)
            }));
        }
        let (mut first, mut second) = (Vec::new(), Vec::new());
        for task in tasks {
            let (f, s) = task.await.expect("client task");
            first.extend(f);
            second.extend(s);
        }
        (first, second)
    }

    /// `clients` tasks alternating point reads and hops for `window`: each kind's
    /// latencies.
    async fn read_mix(self: &Arc<Self>, clients: usize, window: Duration) -> (Vec<f64>, Vec<f64>) {
        self.mix(clients, window, [Ask::Point, Ask::Hop]).await
    }

    /// `clients` tasks inserting `each` single rows: latencies of the acknowledged ones,
    /// their ids, and the refusals.
    async fn inserts(
        self: &Arc<Self>,
        label: &str,
        clients: usize,
        each: usize,
        keyed: bool,
    ) -> (Vec<f64>, Vec<String>, usize) {
        let mut tasks = Vec::new();
        for client in 0..clients {
            let target = self.clone();
            let label = label.to_owned();
            tasks.push(tokio::spawn(async move {
                let (mut times, mut acknowledged, mut refused) = (Vec::new(), Vec::new(), 0);
                for n in 0..each {
                    let id = format!("{label}-{client}-{n}");
                    let mut request = target
                        .client
                        .post(format!("{}/graphs/bench/insert", target.base))
                        .bearer_auth(&target.token)
                        .json(&json!({"type": "Person", "rows": [{"id": id, "name": "new", "age": 1}]}));
                    if keyed {
                        request = request.header("idempotency-key", id.clone());
                    }
                    let started = Instant::now();
                    let response = request.send().await.expect("insert sent");
                    let elapsed = started.elapsed().as_secs_f64() * 1e3;
                    if response.status().is_success() {
                        times.push(elapsed);
                        acknowledged.push(id);
                    } else {
                        refused += 1;
                    }
                }
                (times, acknowledged, refused)
            }));
        }
        let (mut times, mut acknowledged, mut refused) = (Vec::new(), Vec::new(), 0);
        for task in tasks {
            let (t, a, r) = task.await.expect("insert task");
            times.extend(t);
            acknowledged.extend(a);
            refused += r;
        }
        (times, acknowledged, refused)
    }
}

/// The same queries through the library on one handle, one at a time.
async fn embedded(graph: &Omnigraph, people: usize) -> Value {
    let mut rng = StdRng::seed_from_u64(7);
    let (mut points, mut hops, mut far) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..200 {
        for (text, times) in [
            (POINT, &mut points),
            (HOP, &mut hops),
            (HOP_PROPERTY, &mut far),
        ] {
            let id = format!("p{}", rng.random_range(0..people));
            let options = omnigraph_query::QueryOptions::new().parameter("id", json!(id));
            let started = Instant::now();
            omnigraph_query::query(graph, text, &options)
                .await
                .expect("query")
                .collect()
                .await
                .expect("rows");
            times.push(started.elapsed().as_secs_f64() * 1e3);
        }
    }
    json!({
        "point": percentiles(points),
        "one_hop": percentiles(hops),
        "one_hop_far_properties": percentiles(far),
    })
}

fn people_files(
    dir: &Path,
    people: usize,
    edges: usize,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let person_schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("name", DataType::Utf8, false),
        Field::new("age", DataType::Int32, false),
    ]));
    let edge_schema = Arc::new(Schema::new(vec![
        Field::new("src", DataType::Utf8, false),
        Field::new("dst", DataType::Utf8, false),
    ]));
    let people_path = dir.join("people.parquet");
    write_parquet(&people_path, people, |start, count| {
        let ids: StringArray = (start..start + count)
            .map(|i| Some(format!("p{i}")))
            .collect();
        let names: StringArray = (start..start + count)
            .map(|i| Some(format!("person {i}")))
            .collect();
        let ages: Int32Array = (start..start + count)
            .map(|i| Some((i % 90) as i32))
            .collect();
        RecordBatch::try_new(
            person_schema.clone(),
            vec![Arc::new(ids), Arc::new(names), Arc::new(ages)],
        )
        .expect("people batch")
    });
    let knows_path = dir.join("knows.parquet");
    write_parquet(&knows_path, edges, |start, count| {
        let mut rng = StdRng::seed_from_u64(start as u64);
        let src: StringArray = (0..count)
            .map(|_| Some(format!("p{}", rng.random_range(0..people))))
            .collect();
        let dst: StringArray = (0..count)
            .map(|_| Some(format!("p{}", rng.random_range(0..people))))
            .collect();
        RecordBatch::try_new(edge_schema.clone(), vec![Arc::new(src), Arc::new(dst)])
            .expect("edge batch")
    });
    (people_path, knows_path)
}

/// Loads `EVENT_ROWS` rows of `type_name` in `EVENT_APPENDS` appends.
async fn event_appends(dir: &Path, graph: &Omnigraph, type_name: &str) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("v", DataType::Int64, false),
    ]));
    let per = EVENT_ROWS / EVENT_APPENDS;
    for append in 0..EVENT_APPENDS {
        let path = dir.join(format!("{type_name}-{append}.parquet"));
        let first = append * per;
        write_parquet(&path, per, |start, count| {
            let ids: Int64Array = (first + start..first + start + count)
                .map(|i| Some(i as i64))
                .collect();
            let values: Int64Array = (first + start..first + start + count)
                .map(|i| Some((i * 7919 % 1_000_003) as i64))
                .collect();
            RecordBatch::try_new(schema.clone(), vec![Arc::new(ids), Arc::new(values)])
                .expect("event batch")
        });
        graph
            .load_columnar(&path, InputFormat::Parquet, type_name, LoadMode::Append)
            .await
            .expect("event append");
        let _ = std::fs::remove_file(&path);
    }
}

/// The read mix at 8 clients while `optimize` runs: its latencies, the optimize's time
/// and the peak memory.
async fn reads_during(
    target: &Arc<Target>,
    optimize: impl std::future::Future<Output = Duration> + Send + 'static,
) -> Value {
    reset_peak();
    let running = tokio::spawn(optimize);
    let started = Instant::now();
    let mut points = Vec::new();
    let mut hops = Vec::new();
    // Windows of reads until the optimize ends: only reads that overlap it count.
    while !running.is_finished() {
        let (p, h) = target.read_mix(8, Duration::from_millis(500)).await;
        points.extend(p);
        hops.extend(h);
    }
    let optimize_time = running.await.expect("optimize task");
    let _ = started;
    json!({
        "point": percentiles(points),
        "one_hop": percentiles(hops),
        "optimize_s": optimize_time.as_secs_f64(),
        "peak_mib": peak_mib(),
    })
}

pub(crate) async fn serve_bench(dir: &Path, people: usize, edges: usize) -> Value {
    let uri = dir.join("graph").display().to_string();
    let root = StorageRoot::open_with(&uri, &StorageOptions::default())
        .await
        .expect("root");
    let graph = Omnigraph::create_in_root(root.clone(), SERVE_SCHEMA, "bench")
        .await
        .expect("graph");
    let (people_path, knows_path) = people_files(dir, people, edges);
    let loading = Instant::now();
    graph
        .load_columnar(
            &people_path,
            InputFormat::Parquet,
            "Person",
            LoadMode::Append,
        )
        .await
        .expect("people");
    graph
        .load_columnar(&knows_path, InputFormat::Parquet, "Knows", LoadMode::Append)
        .await
        .expect("knows");
    graph.maintenance().optimize().await.expect("optimize");
    let setup_s = loading.elapsed().as_secs_f64();
    // How the two queries run, as `EXPLAIN` shows them.
    let mut plans = serde_json::Map::new();
    for (name, text) in [
        ("point", POINT),
        ("one_hop", HOP),
        ("one_hop_far_properties", HOP_PROPERTY),
    ] {
        let options = omnigraph_query::QueryOptions::new().parameter("id", json!("p1"));
        let explained = omnigraph_query::query(&graph, &format!("EXPLAIN {text}"), &options)
            .await
            .expect("explain")
            .collect()
            .await
            .expect("plan");
        let plan = explained[0]
            .column(0)
            .as_any()
            .downcast_ref::<StringArray>()
            .expect("plan column")
            .value(0)
            .to_owned();
        plans.insert(name.to_owned(), json!(plan.lines().collect::<Vec<_>>()));
    }

    let tokens = dir.join("tokens.json");
    let mut file = TokenFile::read_or_empty(&tokens).expect("tokens");
    let (_, token) = file.add(Role::Admin, None).expect("token");
    file.write().expect("tokens written");
    let config = ServerConfig::new("127.0.0.1:0".parse().expect("address"))
        .graph_in_root("bench", root.clone())
        .expect("config")
        .tokens(tokens);
    // The server on threads of its own, so the CPU it takes is told apart from the
    // load generator's (both share this machine's cores).
    let server_runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_name(SERVER_THREAD_NAME)
        .enable_all()
        .build()
        .expect("server runtime");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (bound, address) = tokio::sync::oneshot::channel();
    let serving = server_runtime.spawn(async move {
        let server = Server::bind(config).await?;
        let _ = bound.send(server.local_addr());
        server
            .run(async move {
                let _ = stopped.await;
            })
            .await
    });
    let Ok(address) = address.await else {
        panic!("the server did not bind: {:?}", serving.await);
    };
    let base = format!("http://{address}");
    let target = Arc::new(Target {
        base,
        token,
        client: reqwest::Client::new(),
        people,
    });
    // Warm the server's handle and the client's connections.
    let _ = target.read_mix(8, Duration::from_millis(500)).await;

    let mut reads = serde_json::Map::new();
    for clients in READ_CLIENTS {
        let probe = root.probe();
        let before = cpu_ms();
        let (points, hops) = target.read_mix(clients, READ_WINDOW).await;
        let after = cpu_ms();
        let requests = points.len() + hops.len();
        let (server, load_generator) = cpu_per_request(before, after, requests);
        // Store requests per read: the head's probes (shared by reads that ask at once)
        // and what Lance reads below its caches.
        let store_requests = probe.total() as f64 / requests.max(1) as f64;
        reads.insert(
            format!("clients_{clients}"),
            json!({
                "point": percentiles(points),
                "one_hop": percentiles(hops),
                // CPU per request of the server's threads (with Lance's) and of the
                // rest of the process (the load generator).
                "server_cpu_ms_per_request": server,
                "load_generator_cpu_ms_per_request": load_generator,
                "store_requests_per_request": store_requests,
            }),
        );
    }
    // The floors at the most clients: what this machine's HTTP costs, and the query
    // route without storage, beside the reads above.
    let floors = {
        let clients = READ_CLIENTS[READ_CLIENTS.len() - 1];
        let before = cpu_ms();
        let (health, no_table) = target
            .mix(clients, READ_WINDOW, [Ask::Healthz, Ask::NoTable])
            .await;
        let after = cpu_ms();
        let (server, load_generator) =
            cpu_per_request(before, after, health.len() + no_table.len());
        json!({
            "clients": clients,
            "healthz": percentiles(health),
            "query_no_table": percentiles(no_table),
            "server_cpu_ms_per_request": server,
            "load_generator_cpu_ms_per_request": load_generator,
        })
    };
    let library = embedded(&graph, people).await;

    // One insert first: the server's handle reads the Person keys once (a cold cache,
    // not the steady state the figures measure).
    let (_, warm_ids, _) = target.inserts("warm", 1, 1, false).await;
    // Commits each figure's inserts made: fewer than inserts when rounds gathered them.
    let head_seq = || async { graph.head().await.expect("head").seq };
    let before = head_seq().await;
    let (local, mut acknowledged, local_refused) = target
        .inserts("local", INSERT_CLIENTS, INSERTS_PER_CLIENT, false)
        .await;
    let local_commits = head_seq().await - before;
    let before = head_seq().await;
    let (keyed, keyed_ids, keyed_refused) = target
        .inserts("keyed", INSERT_CLIENTS, INSERTS_PER_CLIENT, true)
        .await;
    let keyed_commits = head_seq().await - before;
    acknowledged.extend(keyed_ids);
    acknowledged.extend(warm_ids);
    let before = head_seq().await;
    let held_store = root.inject(FaultRule::new("*", &[], FaultAction::Delay(STORE_DELAY)));
    let (held, held_ids, held_refused) = target
        .inserts("held", INSERT_CLIENTS, HELD_INSERTS_PER_CLIENT, false)
        .await;
    drop(held_store);
    let held_commits = head_seq().await - before;
    acknowledged.extend(held_ids);
    // The stress checker's rule: every acknowledged write is there, once.
    let present = omnigraph_query::query(
        &graph,
        "MATCH (p:Person) WHERE p.name = 'new' RETURN count(*) AS n",
        &omnigraph_query::QueryOptions::new(),
    )
    .await
    .expect("count")
    .collect()
    .await
    .expect("count rows");
    let present = present[0]
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .expect("count column")
        .value(0) as usize;
    let attempted = 1 + INSERT_CLIENTS * (2 * INSERTS_PER_CLIENT + HELD_INSERTS_PER_CLIENT);
    assert!(
        present >= acknowledged.len() && present <= attempted,
        "{present} present, {} acknowledged",
        acknowledged.len()
    );

    // Reads beside maintenance: none, then optimize of a 1M-row table of many appends
    // with Lance on the maintenance runtime, then another with Lance on this (the
    // serving) runtime. The inserts' fragments are compacted first, so each optimize
    // measured does the same work: one Event table.
    let compacting = Instant::now();
    graph
        .maintenance()
        .optimize()
        .await
        .expect("optimize after the inserts");
    let compact_after_inserts_s = compacting.elapsed().as_secs_f64();
    reset_peak();
    let (points, hops) = target.read_mix(8, READ_WINDOW).await;
    let quiet =
        json!({"point": percentiles(points), "one_hop": percentiles(hops), "peak_mib": peak_mib()});
    event_appends(dir, &graph, "EventA").await;
    let maintenance_root = root.clone();
    let on_runtime = reads_during(&target, async move {
        let handle = Omnigraph::open_root(maintenance_root)
            .await
            .expect("handle");
        let started = Instant::now();
        handle.maintenance().optimize().await.expect("optimize");
        started.elapsed()
    })
    .await;
    event_appends(dir, &graph, "EventB").await;
    let maintenance_root = root.clone();
    let on_serving_runtime = reads_during(&target, async move {
        let handle = Omnigraph::open_root(maintenance_root)
            .await
            .expect("handle");
        let started = Instant::now();
        handle
            .maintenance()
            .with_lance_work_on_callers_runtime()
            .optimize()
            .await
            .expect("optimize");
        started.elapsed()
    })
    .await;

    let _ = stop.send(());
    serving.await.expect("server task").expect("server");
    // Its threads end without blocking this runtime.
    server_runtime.shutdown_background();
    let reads_32 = &reads["clients_32"];
    json!({
        "people": people,
        "edges": edges,
        "setup_s": setup_s,
        "plans": plans,
        "reads": reads,
        "floors": floors,
        "library_one_at_a_time": library,
        "inserts": {
            "clients": INSERT_CLIENTS,
            "local": percentiles(local),
            "local_refused": local_refused,
            "local_commits": local_commits,
            "local_keyed": percentiles(keyed),
            "local_keyed_refused": keyed_refused,
            "local_keyed_commits": keyed_commits,
            "store_held_17ms": percentiles(held),
            "store_held_refused": held_refused,
            "store_held_commits": held_commits,
            "acknowledged": acknowledged.len(),
            "present": present,
        },
        "maintenance": {
            "optimize_after_inserts_s": compact_after_inserts_s,
            "reads_without": quiet,
            "reads_during_optimize_maintenance_runtime": on_runtime,
            "reads_during_optimize_serving_runtime": on_serving_runtime,
        },
        "goals": {
            "read_p99_32_clients_ms_max_10": reads_32["point"]["p99_ms"].as_f64().unwrap_or(f64::MAX).max(reads_32["one_hop"]["p99_ms"].as_f64().unwrap_or(f64::MAX)),
        },
    })
}
