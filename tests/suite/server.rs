//! The served graph over real HTTP on loopback: every route, the roles that gate them,
//! the limits, maintenance runs, and a graceful shutdown. The graph is a real Lance
//! graph in a folder; faults (a held store) go through the root's wrapper.

use arrow_array::{Array, Int64Array, StringArray};
use futures::StreamExt;
use omnigraph_core::storage::{FaultAction, FaultRule, RequestKind, StorageOptions, StorageRoot};
use omnigraph_graph::Omnigraph;
use omnigraph_server::tokens::{Role, TokenFile};
use omnigraph_server::{Limits, Server, ServerConfig};
use omnigraph_tests::{SOCIAL_SCHEMA, objects};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A token of each role on the served graph, one on another graph, and the file.
struct Tokens {
    read: String,
    write: String,
    maintain: String,
    admin: String,
    other_graph_admin: String,
    file: PathBuf,
}

impl Tokens {
    fn of(&self, role: Role) -> &str {
        match role {
            Role::Read => &self.read,
            Role::Write => &self.write,
            Role::Maintain => &self.maintain,
            Role::Admin => &self.admin,
        }
    }
}

/// A server on a fresh graph named `people`, until it is shut down.
struct Served {
    base: String,
    client: reqwest::Client,
    root: Arc<StorageRoot>,
    tokens: Tokens,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<omnigraph_core::Result<()>>>,
    dir: tempfile::TempDir,
}

async fn serve(limits: Limits) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("people").to_str().unwrap().to_owned();
    let root = StorageRoot::open_with(&uri, &StorageOptions::default())
        .await
        .unwrap();
    Omnigraph::create_in_root(root.clone(), SOCIAL_SCHEMA, "test")
        .await
        .unwrap();
    let file = dir.path().join("tokens.json");
    let mut tokens = TokenFile::read_or_empty(&file).unwrap();
    let mut token = |role, graph| tokens.add(role, graph).unwrap().1;
    let issued = Tokens {
        read: token(Role::Read, Some("people")),
        write: token(Role::Write, Some("people")),
        maintain: token(Role::Maintain, None),
        admin: token(Role::Admin, Some("people")),
        other_graph_admin: token(Role::Admin, Some("other")),
        file: file.clone(),
    };
    tokens.write().unwrap();
    start(root, issued, limits, dir).await
}

/// A server of `root` as `people`, with the tokens in `tokens.file`, until it is shut
/// down; `dir` (which holds the root) lives as long.
async fn start(
    root: Arc<StorageRoot>,
    tokens: Tokens,
    limits: Limits,
    dir: tempfile::TempDir,
) -> Served {
    let config = ServerConfig::new("127.0.0.1:0".parse().unwrap())
        .graph_in_root("people", root.clone())
        .unwrap()
        .tokens(tokens.file.clone())
        .limits(limits);
    let server = Server::bind(config).await.unwrap();
    let base = format!("http://{}", server.local_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    Served {
        base,
        client: reqwest::Client::new(),
        root,
        tokens,
        stop: Some(stop),
        task: Some(task),
        dir,
    }
}

impl Served {
    fn request(&self, method: Method, path: &str, token: Option<&str>) -> reqwest::RequestBuilder {
        let request = self.client.request(method, format!("{}{path}", self.base));
        match token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// A JSON call: the status and the body as JSON (null when it is not JSON).
    async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = self.request(method, path, token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn head_seq(&self) -> u64 {
        let (status, body) = self
            .call(
                Method::GET,
                "/graphs/people/status",
                Some(&self.tokens.read),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["head"]["seq"].as_u64().unwrap()
    }

    async fn query(&self, cypher: &str) -> Vec<Value> {
        let (status, body) = self
            .call(
                Method::POST,
                "/graphs/people/query",
                Some(&self.tokens.read),
                Some(json!({"query": cypher})),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["rows"].as_array().unwrap().clone()
    }

    /// A new server of the same root and tokens (default limits), once this one has
    /// stopped: what a restart does.
    async fn restarted(mut self) -> Served {
        let _ = self.stop.take().unwrap().send(());
        self.task.take().unwrap().await.unwrap().unwrap();
        let Served {
            root, tokens, dir, ..
        } = self;
        start(root, tokens, Limits::default(), dir).await
    }

    async fn shutdown(mut self) -> omnigraph_core::Result<()> {
        let _ = self.stop.take().unwrap().send(());
        self.task.take().unwrap().await.unwrap()
    }
}

fn people(range: std::ops::Range<usize>) -> Value {
    json!(
        range
            .map(|n| json!({"id": format!("p{n:04}"), "name": format!("person {n}"), "age": 20 + (n % 50) as i64}))
            .collect::<Vec<_>>()
    )
}

/// The name of the largest data file of `type_name`'s table at the head.
async fn largest_data_file(served: &Served, type_name: &str) -> String {
    let (_, tables) = served
        .call(
            Method::GET,
            "/graphs/people/tables",
            Some(&served.tokens.read),
            None,
        )
        .await;
    let person = tables["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|table| table["type"] == type_name)
        .unwrap();
    let data = PathBuf::from(
        person["uri"]
            .as_str()
            .unwrap()
            .trim_start_matches("file://"),
    )
    .join("data");
    std::fs::read_dir(&data)
        .unwrap()
        .map(|entry| entry.unwrap())
        .max_by_key(|entry| entry.metadata().unwrap().len())
        .unwrap()
        .file_name()
        .into_string()
        .unwrap()
}

/// The role each route needs; `None` for the routes anyone may call.
fn needed_role(method: &str, path: &str) -> Option<Role> {
    match (method, path) {
        (_, "/healthz" | "/readyz" | "/openapi.json") => None,
        ("get", _) => Some(Role::Read),
        ("post", "/graphs/{graph}/query") => Some(Role::Read),
        ("post", "/graphs/{graph}/schema") | ("delete", _) => Some(Role::Admin),
        ("post", path) if path.contains("/maintenance/") => Some(Role::Maintain),
        ("post", _) => Some(Role::Write),
        _ => panic!("a route with no role in this table: {method} {path}"),
    }
}

fn concrete(path: &str) -> String {
    path.replace("{graph}", "people")
        .replace("{branch}", "feature")
        .replace("{run}", "run_unknown")
        .replace("{type}", "Person")
}

#[tokio::test]
async fn the_document_lists_the_served_routes_and_each_wants_its_role() {
    let served = serve(Limits::default()).await;
    let (status, document) = served.call(Method::GET, "/openapi.json", None, None).await;
    assert_eq!(status, StatusCode::OK);
    let operations = omnigraph_server::openapi::operations();
    let mut listed: Vec<(String, String)> = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            listed.push((method.clone(), path.clone()));
        }
    }
    listed.sort();
    assert_eq!(listed, operations);
    assert!(operations.len() >= 21, "{operations:?}");
    for (method, path) in &operations {
        let http = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let url = concrete(path);
        let Some(role) = needed_role(method, path) else {
            let (status, _) = served.call(http, &url, None, None).await;
            assert_eq!(status, StatusCode::OK, "{method} {path}");
            continue;
        };
        // No token, a token nobody issued: 401, before anything is read.
        for token in [None, Some("og_0000")] {
            let (status, body) = served.call(http.clone(), &url, token, None).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path}: {body}");
            assert_eq!(body["error"]["code"], "unauthorized");
            assert_eq!(body["error"]["evidence"]["kind"], "before_effect");
        }
        // A role on another graph, and the role just below the one needed: 403.
        let (status, body) = served
            .call(
                http.clone(),
                &url,
                Some(&served.tokens.other_graph_admin),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {body}");
        assert_eq!(body["error"]["code"], "forbidden");
        if role > Role::Read {
            let below = Role::ALL[Role::ALL.iter().position(|r| *r == role).unwrap() - 1];
            let (status, body) = served
                .call(http.clone(), &url, Some(served.tokens.of(below)), None)
                .await;
            assert_eq!(
                status,
                StatusCode::FORBIDDEN,
                "{method} {path} as {below}: {body}"
            );
        }
        // The role needed gets past the gate (the empty body may still be refused).
        let (status, body) = served
            .call(http.clone(), &url, Some(served.tokens.of(role)), None)
            .await;
        assert!(
            ![
                StatusCode::UNAUTHORIZED,
                StatusCode::FORBIDDEN,
                StatusCode::METHOD_NOT_ALLOWED
            ]
            .contains(&status),
            "{method} {path} as {role}: {status} {body}"
        );
    }
    // The token is checked before the body is read: a body that never ends still gets
    // its 401.
    let (sender, body) = held_body();
    sender
        .send(b"{\"type\": \"Person\", \"rows\": [".to_vec())
        .await
        .unwrap();
    let response = served
        .request(Method::POST, "/graphs/people/insert", None)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    drop(sender);
    // No route, or not this method: the same error document.
    let (status, body) = served
        .call(Method::GET, "/graphs/people/nowhere", None, None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], "not_found");
    let (status, body) = served
        .call(Method::GET, "/graphs/people/insert", None, None)
        .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(body["error"]["code"], "method_not_allowed");
    assert_eq!(served.head_seq().await, 0, "no request published anything");
    served.shutdown().await.unwrap();
}

/// JSON lines as rows, in the order of their ids.
fn rows_by_id(text: &str) -> Vec<Value> {
    let mut rows: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    rows.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    rows
}

#[tokio::test]
async fn a_type_exports_whole_streamed_and_loads_back_and_a_large_answer_is_refused() {
    let served = serve(Limits {
        query_result_bytes: 64 << 10,
        ..Limits::default()
    })
    .await;
    let genesis = served.head_seq().await;
    let insert = |range| {
        served.call(
            Method::POST,
            "/graphs/people/insert",
            Some(&served.tokens.write),
            Some(json!({"type": "Person", "rows": people(range)})),
        )
    };
    let (status, body) = insert(0..5_000).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = insert(5_000..20_000).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let two_writes = served.head_seq().await;
    let (status, body) = insert(20_000..20_010).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let export = |path: &str, accept: Option<&str>| {
        let mut request = served.request(Method::GET, path, Some(&served.tokens.read));
        if let Some(accept) = accept {
            request = request.header("accept", accept);
        }
        request.send()
    };

    // JSON lines in the load route's format: every row once, as the query reads it.
    let response = export("/graphs/people/export/Person", None).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "application/x-ndjson");
    assert_eq!(response.headers()["x-omnigraph-rows"], "20010");
    let head = served.head_seq().await;
    assert_eq!(
        response.headers()["x-omnigraph-seq"],
        head.to_string().as_str()
    );
    let text = response.text().await.unwrap();
    let lines = rows_by_id(&text);
    assert_eq!(lines.len(), 20_010);
    assert_eq!(
        lines[7],
        json!({"type": "Person", "id": "p0007", "name": "person 7", "age": 27})
    );
    let mut ids: Vec<&str> = lines
        .iter()
        .map(|line| line["id"].as_str().unwrap())
        .collect();
    ids.dedup();
    assert_eq!(ids.len(), 20_010, "no row twice");

    // Arrow, at an earlier commit: the type's columns, that commit's rows.
    let response = export(
        &format!("/graphs/people/export/Person?at={two_writes}"),
        Some("application/vnd.apache.arrow.stream"),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["x-omnigraph-seq"],
        two_writes.to_string().as_str()
    );
    let bytes = response.bytes().await.unwrap();
    let reader =
        arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None).unwrap();
    let schema = reader.schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, ["id", "name", "age"]);
    let rows: usize = reader.map(|batch| batch.unwrap().num_rows()).sum();
    assert_eq!(rows, 20_000);

    // A store that fails while the export streams: the client never gets a short
    // table as if it were whole (an incomplete body, or an error status when the failure
    // comes before the first rows).
    let largest = largest_data_file(&served, "Person").await;
    let mut cut_off = 0;
    for accept in [None, Some("application/vnd.apache.arrow.stream")] {
        let _failing = served.root.inject(FaultRule::new(
            format!("*{largest}"),
            &[RequestKind::Get, RequestKind::RangedGet],
            FaultAction::FailBefore(omnigraph_core::StorageKind::Permanent),
        ));
        // The connection may close before the status line has reached the client
        // (hyper sends it with the first rows): that too is an incomplete answer.
        let Ok(response) = export("/graphs/people/export/Person", accept).await else {
            cut_off += 1;
            continue;
        };
        let status = response.status();
        let body = response.bytes().await;
        match status {
            StatusCode::OK => {
                assert!(body.is_err(), "a short body ended as if whole ({accept:?})");
                cut_off += 1;
            }
            status => {
                assert!(status.is_server_error(), "{status}");
                let document: Value = serde_json::from_slice(&body.unwrap()).unwrap();
                assert!(document["error"]["code"].is_string(), "{document}");
            }
        }
    }
    // The failing file is not the first the scan reads: the cut comes after rows.
    assert!(cut_off > 0, "no export was cut off after its first rows");

    // An empty table is its schema and the end of the stream.
    let response = export(
        "/graphs/people/export/Company",
        Some("application/vnd.apache.arrow.stream"),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = response.bytes().await.unwrap();
    let reader =
        arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None).unwrap();
    assert_eq!(reader.schema().fields().len(), 2);
    assert_eq!(reader.count(), 0);

    // The JSON lines load back as they are, into a branch from before any row.
    let (status, body) = served
        .call(
            Method::POST,
            "/graphs/people/branches",
            Some(&served.tokens.write),
            Some(json!({"name": "copy", "at": genesis.to_string()})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let response = served
        .request(
            Method::POST,
            "/graphs/people/load?branch=copy",
            Some(&served.tokens.write),
        )
        .body(text.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let copy = export("/graphs/people/export/Person?branch=copy", None)
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(rows_by_id(&copy), lines);

    // Refusals: a type the schema lacks, a format the route does not give.
    let response = export("/graphs/people/export/Nobody", None).await.unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let response = export("/graphs/people/export/Person", Some("text/html"))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_ACCEPTABLE);

    // A query whose rows pass the answer's limit stops with its own status; a page of
    // the same rows is answered.
    let (status, body) = served
        .call(
            Method::POST,
            "/graphs/people/query",
            Some(&served.tokens.read),
            Some(json!({"query": "MATCH (p:Person) RETURN p.id AS id, p.name AS name"})),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["code"], "result_too_large");
    assert_eq!(body["error"]["evidence"]["kind"], "before_effect");
    let page = served
        .query("MATCH (p:Person) RETURN p.id AS id ORDER BY id SKIP 10 LIMIT 5")
        .await;
    assert_eq!(
        page,
        vec![
            json!(["p0010"]),
            json!(["p0011"]),
            json!(["p0012"]),
            json!(["p0013"]),
            json!(["p0014"])
        ]
    );
    served.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_whose_client_hangs_up_mid_body_gives_back_its_slot() {
    // One request in flight per token: a slot the export kept would refuse the next.
    let served = serve(Limits {
        token_concurrent_requests: 1,
        ..Limits::default()
    })
    .await;
    for range in [0..5_000, 5_000..20_000] {
        let (status, body) = served
            .call(
                Method::POST,
                "/graphs/people/insert",
                Some(&served.tokens.write),
                Some(json!({"type": "Person", "rows": people(range)})),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    // The second file's reads are held far longer than the test waits: the export
    // sends its first rows, then waits there.
    let largest = largest_data_file(&served, "Person").await;
    let held = Duration::from_secs(30);
    let _held = served.root.inject(FaultRule::new(
        format!("*{largest}"),
        &[RequestKind::Get, RequestKind::RangedGet],
        FaultAction::Delay(held),
    ));
    let client = reqwest::Client::new();
    // The first file is not held: the status and the first rows come at once.
    let prompt = Duration::from_secs(15);
    let mut response = tokio::time::timeout(
        prompt,
        client
            .get(format!("{}/graphs/people/export/Person", served.base))
            .bearer_auth(&served.tokens.read)
            .send(),
    )
    .await
    .expect("the export answers before the held file is read")
    .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let first = tokio::time::timeout(prompt, response.chunk())
        .await
        .expect("the first rows come before the held file is read")
        .unwrap()
        .expect("the first rows");
    assert!(first.starts_with(b"{"), "JSON lines");
    // The rows before the held file arrive; then the body waits, short of its end.
    let mut lines = first.iter().filter(|byte| **byte == b'\n').count();
    while let Ok(chunk) = tokio::time::timeout(Duration::from_secs(2), response.chunk()).await {
        let chunk = chunk.unwrap().expect("the body waits, it does not end");
        lines += chunk.iter().filter(|byte| **byte == b'\n').count();
    }
    assert!((1..20_000).contains(&lines), "{lines} rows before the wait");
    // While the export streams, its slot is taken.
    let (status, _) = served
        .call(
            Method::GET,
            "/graphs/people/status",
            Some(&served.tokens.read),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    // The client hangs up mid-body: the server drops the export and its slot then,
    // not when the held read would have ended.
    let hung_up = Instant::now();
    drop(response);
    drop(client);
    let deadline = hung_up + Duration::from_secs(10);
    loop {
        let (status, body) = served
            .call(
                Method::GET,
                "/graphs/people/status",
                Some(&served.tokens.read),
                None,
            )
            .await;
        if status == StatusCode::OK {
            break;
        }
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
        assert!(
            Instant::now() < deadline,
            "the slot was still held {:?} after the client hung up",
            hung_up.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(hung_up.elapsed() < held);
}

#[tokio::test]
async fn a_revoked_token_is_refused_without_a_restart() {
    let served = serve(Limits::default()).await;
    let insert = json!({"type": "Person", "rows": people(0..1)});
    let (status, _) = served
        .call(
            Method::POST,
            "/graphs/people/insert",
            Some(&served.tokens.write),
            Some(insert.clone()),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let mut file = TokenFile::read(&served.tokens.file).unwrap();
    let id = file
        .entries()
        .iter()
        .find(|entry| entry.role == Role::Write)
        .unwrap()
        .id
        .clone();
    file.revoke(&id).unwrap();
    file.write().unwrap();
    let insert = json!({"type": "Person", "rows": people(1..2)});
    let (status, body) = served
        .call(
            Method::POST,
            "/graphs/people/insert",
            Some(&served.tokens.write),
            Some(insert),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(served.head_seq().await, 1);
    // A damaged file lets nobody in, rather than missing a revocation.
    std::fs::write(&served.tokens.file, "{").unwrap();
    let (status, _) = served
        .call(
            Method::GET,
            "/graphs/people/status",
            Some(&served.tokens.read),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    served.shutdown().await.unwrap();
}

#[tokio::test]
async fn writes_queries_and_history_over_http() {
    let served = serve(Limits::default()).await;
    let write = Some(served.tokens.write.as_str());
    let (status, body) = served
        .call(
            Method::POST,
            "/graphs/people/insert",
            write,
            Some(json!({"type": "Person", "rows": people(0..10)})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["commit"]["seq"], 1);
    let companies = json!({"type": "Company", "rows": [{"id": "c1", "name": "Acme"}]});
    let (status, _) = served
        .call(
            Method::POST,
            "/graphs/people/insert",
            write,
            Some(companies),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let jsonl = "{\"type\":\"WorksAt\",\"src\":\"p0001\",\"dst\":\"c1\",\"since\":2020}\n{\"type\":\"WorksAt\",\"src\":\"p0002\",\"dst\":\"c1\"}\n";
    let response = served
        .request(Method::POST, "/graphs/people/load", write)
        .body(jsonl)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let loaded: Value = response.json().await.unwrap();
    assert_eq!(loaded["rows"]["WorksAt"], 2);
    let csv = "id,name,age\np0100,csv person,61\np0101,csv other,\n";
    let response = served
        .request(
            Method::POST,
            "/graphs/people/load?format=csv&type=Person",
            write,
        )
        .body(csv)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(served.head_seq().await, 4);

    // Rows as JSON, with parameters.
    let (status, body) = served
        .call(
            Method::POST,
            "/graphs/people/query",
            Some(&served.tokens.read),
            Some(json!({"query": "MATCH (p:Person)-[:WorksAt]->(c:Company) WHERE c.id = $company RETURN p.id AS id ORDER BY id", "params": {"company": "c1"}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["columns"], json!(["id"]));
    assert_eq!(body["rows"], json!([["p0001"], ["p0002"]]));
    assert_eq!(body["seq"], 4);
    // Retrieval runs unchanged through the route: a text leg on the whole type (its
    // equal scores share rank 1, and the cut at k is by key), and one prefiltered to
    // the people the pattern bound.
    let (status, body) = served
        .call(
            Method::POST,
            "/graphs/people/query",
            Some(&served.tokens.read),
            Some(json!({"query": "CALL omni.text('Person', 'name', $q, 3) YIELD node, rank RETURN node.id AS id, rank ORDER BY rank, id", "params": {"q": "person"}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["rows"],
        json!([["p0000", 1], ["p0001", 1], ["p0002", 1]])
    );
    let (status, body) = served
        .call(
            Method::POST,
            "/graphs/people/query",
            Some(&served.tokens.read),
            Some(json!({"query": "MATCH (p:Person)-[:WorksAt]->(:Company {id: 'c1'}) CALL omni.fuse(p, [{text: 'name', query: 'person', k: 10}], 10) YIELD score, ranks RETURN p.id AS id, ranks ORDER BY score DESC, id"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["rows"], json!([["p0001", [1]], ["p0002", [1]]]));
    // The same as an Arrow IPC stream.
    let response = served
        .request(Method::POST, "/graphs/people/query", Some(&served.tokens.read))
        .header("accept", "application/vnd.apache.arrow.stream")
        .json(&json!({"query": "MATCH (p:Person) WHERE p.age >= 60 RETURN p.id AS id, p.age AS age ORDER BY id"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["x-omnigraph-seq"], "4");
    let bytes = response.bytes().await.unwrap();
    let reader =
        arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None).unwrap();
    let mut ids = Vec::new();
    for batch in reader {
        let batch = batch.unwrap();
        let column = batch
            .column(0)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        ids.extend((0..column.len()).map(|row| column.value(row).to_owned()));
    }
    assert_eq!(ids, ["p0100"]);
    // A type the client does not accept: 406.
    let response = served
        .request(
            Method::POST,
            "/graphs/people/query",
            Some(&served.tokens.read),
        )
        .header("accept", "text/html")
        .json(&json!({"query": "MATCH (p:Person) RETURN count(*)"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_ACCEPTABLE);

    // Update and delete, then the rows at an older commit.
    let (status, body) = served
        .call(
            Method::POST,
            "/graphs/people/update",
            write,
            Some(json!({"type": "Person", "where": "id = 'p0003'", "set": {"name": "renamed"}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["commit"]["seq"], 5);
    let (status, body) = served
        .call(
            Method::POST,
            "/graphs/people/delete",
            write,
            Some(json!({"type": "Person", "where": "id = 'p0004'"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        served
            .query(
                "MATCH (p:Person) WHERE p.id IN ['p0003', 'p0004'] RETURN p.name ORDER BY p.name"
            )
            .await,
        vec![json!(["renamed"])]
    );
    let (status, body) = served
        .call(
            Method::POST,
            "/graphs/people/query",
            Some(&served.tokens.read),
            Some(json!({"query": "MATCH (p:Person) WHERE p.id IN ['p0003', 'p0004'] RETURN p.name AS name ORDER BY name", "at": "4"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["rows"], json!([["person 3"], ["person 4"]]));

    // Bad input changes nothing and says where and what.
    let before = served.head_seq().await;
    let bad = json!({"type": "Person", "rows": [{"id": "p0200", "name": "x", "age": 1}, {"id": "p0201", "name": "y", "age": "old"}]});
    let (status, body) = served
        .call(Method::POST, "/graphs/people/insert", write, Some(bad))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["code"], "bad_input");
    assert_eq!(body["error"]["evidence"]["kind"], "before_effect");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("age"),
        "{body}"
    );
    let duplicate = json!({"type": "Person", "rows": people(0..1)});
    let (status, body) = served
        .call(
            Method::POST,
            "/graphs/people/insert",
            write,
            Some(duplicate),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "key_conflict");
    let response = served
        .request(Method::POST, "/graphs/people/load", write)
        .body("{\"type\":\"Person\",\"id\":\"p0300\",\"name\":\"a\"}\n{not json\n")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("line 2"),
        "{body}"
    );
    let (status, body) = served
        .call(
            Method::POST,
            "/graphs/people/query",
            Some(&served.tokens.read),
            Some(json!({"query": "MATCH (p:Nobody) RETURN p"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["code"], "bad_query");
    assert_eq!(body["error"]["query"]["line"], 1);
    let (status, body) = served
        .call(
            Method::POST,
            "/graphs/people/insert",
            write,
            Some(json!({"type": "Person", "rowz": []})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"]["message"].as_str().unwrap().contains("rowz"),
        "{body}"
    );
    assert_eq!(served.head_seq().await, before);

    // History: the log, the tables a commit pins, the schema.
    let (status, body) = served
        .call(
            Method::GET,
            "/graphs/people/commits?limit=3",
            Some(&served.tokens.read),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let seqs: Vec<u64> = body["commits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [before, before - 1, before - 2]);
    assert_eq!(body["truncated"], true);
    let (status, body) = served
        .call(
            Method::GET,
            "/graphs/people/tables?at=1",
            Some(&served.tokens.read),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let person = body["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["type"] == "Person")
        .unwrap()
        .clone();
    assert_eq!(person["rows"], 10);
    let (status, body) = served
        .call(
            Method::GET,
            "/graphs/people/commits?limit=many",
            Some(&served.tokens.read),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = served
        .call(
            Method::GET,
            "/graphs/people/schema",
            Some(&served.tokens.read),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let types: Vec<&str> = body["schema"]["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["Person", "Company", "WorksAt"]);
    let applied = format!("{SOCIAL_SCHEMA}\nnode City {{ id: String @key }}\n");
    let (status, body) = served
        .call(
            Method::POST,
            "/graphs/people/schema",
            Some(&served.tokens.admin),
            Some(json!({"schema": applied})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["commit"]["seq"], before + 1);
    served.shutdown().await.unwrap();
}

#[tokio::test]
async fn branches_over_http_and_names_that_try_to_leave_the_root() {
    let served = serve(Limits::default()).await;
    let write = Some(served.tokens.write.as_str());
    let (status, _) = served
        .call(
            Method::POST,
            "/graphs/people/insert",
            write,
            Some(json!({"type": "Person", "rows": people(0..3)})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = served
        .call(
            Method::POST,
            "/graphs/people/branches",
            write,
            Some(json!({"name": "feature"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["branch"], "feature");
    let (status, body) = served
        .call(
            Method::POST,
            "/graphs/people/branches",
            write,
            Some(json!({"name": "feature"})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "branch_exists");
    let (status, _) = served
        .call(
            Method::POST,
            "/graphs/people/insert",
            write,
            Some(json!({"type": "Person", "rows": people(3..5), "branch": "feature"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        served.query("MATCH (p:Person) RETURN count(*)").await,
        vec![json!([3])]
    );
    let (status, body) = served
        .call(
            Method::POST,
            "/graphs/people/query",
            Some(&served.tokens.read),
            Some(json!({"query": "MATCH (p:Person) RETURN count(*)", "branch": "feature"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["rows"], json!([[5]]));
    let (status, body) = served
        .call(
            Method::POST,
            "/graphs/people/merge",
            write,
            Some(json!({"source": "feature", "dry_run": true})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["dry_run"], true);
    assert_eq!(body["commit"], Value::Null);
    assert_eq!(
        served.query("MATCH (p:Person) RETURN count(*)").await,
        vec![json!([3])]
    );
    let (status, body) = served
        .call(
            Method::POST,
            "/graphs/people/merge",
            write,
            Some(json!({"source": "feature"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        served.query("MATCH (p:Person) RETURN count(*)").await,
        vec![json!([5])]
    );
    let (status, body) = served
        .call(
            Method::GET,
            "/graphs/people/branches",
            Some(&served.tokens.read),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let names: Vec<&str> = body["branches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"feature") && names.contains(&"main"),
        "{names:?}"
    );
    let (status, body) = served
        .call(
            Method::DELETE,
            "/graphs/people/branches/feature",
            Some(&served.tokens.admin),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _) = served
        .call(
            Method::POST,
            "/graphs/people/query",
            Some(&served.tokens.read),
            Some(json!({"query": "MATCH (p:Person) RETURN count(*)", "branch": "feature"})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Names that try to leave the root are refused, and nothing appears outside it.
    let outside_before = listing(served.dir.path());
    for name in ["../escape", "a/../../b", "..", "/abs", "x\\..\\y", "%2e%2e"] {
        let (status, body) = served
            .call(
                Method::POST,
                "/graphs/people/branches",
                write,
                Some(json!({"name": name})),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{name}: {body}");
        let (status, body) = served
            .call(
                Method::POST,
                "/graphs/people/query",
                Some(&served.tokens.read),
                Some(json!({"query": "MATCH (p:Person) RETURN count(*)", "branch": name})),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{name}: {body}");
    }
    for path in [
        "/graphs/people/branches/..%2F..%2Fescape",
        "/graphs/people/branches/main",
    ] {
        let (status, body) = served
            .call(Method::DELETE, path, Some(&served.tokens.admin), None)
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
    }
    for graph in ["%2e%2e", "..%2Fpeople", "other"] {
        let (status, body) = served
            .call(
                Method::GET,
                &format!("/graphs/{graph}/status"),
                Some(&served.tokens.maintain),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{graph}: {body}");
    }
    assert_eq!(listing(served.dir.path()), outside_before);
    assert_eq!(
        served.query("MATCH (p:Person) RETURN count(*)").await,
        vec![json!([5])]
    );
    served.shutdown().await.unwrap();
}

/// The entries of a folder and of its parent, by name.
fn listing(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .chain(std::fs::read_dir(dir.parent().unwrap()).unwrap())
        .map(|entry| entry.unwrap().path().display().to_string())
        .filter(|name| !name.contains(".tmp"))
        .collect();
    names.sort();
    names
}

/// A body the test sends a chunk at a time, for as long as it likes.
fn held_body() -> (tokio::sync::mpsc::Sender<Vec<u8>>, reqwest::Body) {
    let (sender, receiver) = tokio::sync::mpsc::channel::<Vec<u8>>(4);
    let stream = tokio_stream(receiver).map(Ok::<_, std::io::Error>);
    (sender, reqwest::Body::wrap_stream(stream))
}

fn tokio_stream(
    mut receiver: tokio::sync::mpsc::Receiver<Vec<u8>>,
) -> impl futures::Stream<Item = Vec<u8>> {
    futures::stream::poll_fn(move |context| receiver.poll_recv(context))
}

#[tokio::test]
async fn limits_refuse_before_any_effect() {
    let limits = Limits {
        request_body_bytes: 4096,
        load_body_bytes: 10_000,
        query_time: Duration::from_millis(300),
        request_time: Duration::from_millis(700),
        header_read_time: Duration::from_millis(500),
        token_concurrent_requests: 1,
        ..Limits::default()
    };
    let served = serve(limits).await;
    let write = Some(served.tokens.write.as_str());
    let (status, _) = served
        .call(
            Method::POST,
            "/graphs/people/insert",
            write,
            Some(json!({"type": "Person", "rows": people(0..40)})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    // A JSON body past its limit, declared or streamed: 413, nothing published.
    let (status, body) = served
        .call(
            Method::POST,
            "/graphs/people/insert",
            write,
            Some(json!({"type": "Person", "rows": people(100..200)})),
        )
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_eq!(body["error"]["code"], "body_too_large");
    let big = (0..400)
        .map(|n| format!("{{\"type\":\"Person\",\"id\":\"q{n}\",\"name\":\"n\"}}\n"))
        .collect::<String>();
    assert!(big.len() > 10_000);
    let response = served
        .request(Method::POST, "/graphs/people/load", write)
        .body(big.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let (sender, body) = held_body();
    let streamed = tokio::spawn(
        served
            .request(Method::POST, "/graphs/people/load", write)
            .body(body)
            .send(),
    );
    for chunk in big.as_bytes().chunks(1000) {
        if sender.send(chunk.to_vec()).await.is_err() {
            break;
        }
    }
    drop(sender);
    assert_eq!(
        streamed.await.unwrap().unwrap().status(),
        StatusCode::PAYLOAD_TOO_LARGE
    );
    assert_eq!(served.head_seq().await, 1);

    // A query that would run for ever is stopped at the query time.
    let started = std::time::Instant::now();
    let (status, body) = served
        .call(
            Method::POST,
            "/graphs/people/query",
            Some(&served.tokens.read),
            Some(json!({"query": "MATCH (a:Person), (b:Person), (c:Person), (d:Person), (e:Person), (f:Person) RETURN max(a.age + b.age + c.age + d.age + e.age + f.age)"})),
        )
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "query_time_exceeded");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );

    // One request in flight per token: the second gets 429 with Retry-After, and the
    // first still lands.
    let (sender, body) = held_body();
    let first = tokio::spawn(
        served
            .request(Method::POST, "/graphs/people/load", write)
            .body(body)
            .send(),
    );
    sender
        .send(b"{\"type\":\"Person\",\"id\":\"h1\",\"name\":\"held\"}\n".to_vec())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let response = served
        .request(Method::GET, "/graphs/people/status", write)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(response.headers()["retry-after"], "1");
    // Another token has slots of its own (head_seq asks with the read token).
    assert_eq!(served.head_seq().await, 1);
    drop(sender);
    let response = first.await.unwrap().unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(served.head_seq().await, 2);

    // A client that stops sending its body past the request time: 408, nothing published.
    let (sender, body) = held_body();
    let slow = tokio::spawn(
        served
            .request(Method::POST, "/graphs/people/load", write)
            .body(body)
            .send(),
    );
    sender
        .send(b"{\"type\":\"Person\",\"id\":\"s1\",\"name\":\"slow\"}\n".to_vec())
        .await
        .unwrap();
    let response = slow.await.unwrap().unwrap();
    assert_eq!(response.status(), StatusCode::REQUEST_TIMEOUT);
    drop(sender);
    assert_eq!(served.head_seq().await, 2);

    // A client that trickles its headers past the header-read time: its connection is
    // closed, before any handler ran (the insert in them is not published).
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = served.base.trim_start_matches("http://").to_owned();
    let mut slowloris = tokio::net::TcpStream::connect(&address).await.unwrap();
    slowloris
        .write_all(b"POST /graphs/people/insert HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let began = std::time::Instant::now();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), slowloris.read_to_end(&mut answer))
        .await
        .expect("the server closes a connection whose headers never end");
    // Closed (or reset) without a response to a request it never read whole.
    assert!(read.is_err() || answer.is_empty(), "{answer:?}");
    assert!(
        began.elapsed() >= Duration::from_millis(400),
        "{:?}",
        began.elapsed()
    );
    assert_eq!(served.head_seq().await, 2);
    served.shutdown().await.unwrap();
}

#[tokio::test]
async fn maintenance_runs_are_joined_watched_and_cancelled() {
    let served = serve(Limits::default()).await;
    let write = Some(served.tokens.write.as_str());
    let maintain = Some(served.tokens.maintain.as_str());
    for batch in 0..3 {
        let rows = people(batch * 10..batch * 10 + 10);
        let (status, _) = served
            .call(
                Method::POST,
                "/graphs/people/insert",
                write,
                Some(json!({"type": "Person", "rows": rows})),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
    }
    let (status, body) = served
        .call(
            Method::POST,
            "/graphs/people/maintenance/optimize?wait=true",
            maintain,
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["state"], "finished");
    assert_eq!(body["joined"], false);
    assert!(body["report"]["tables"].is_array(), "{body}");
    let optimized = served.head_seq().await;
    assert!(optimized > 3, "optimize published: {optimized}");
    for batch in 3..6 {
        let rows = people(batch * 10..batch * 10 + 10);
        let (status, _) = served
            .call(
                Method::POST,
                "/graphs/people/insert",
                write,
                Some(json!({"type": "Person", "rows": rows})),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
    }
    // Every store request held: the run is still going when the second request comes.
    let held = served.root.inject(FaultRule::new(
        "*",
        &[],
        FaultAction::Delay(Duration::from_millis(300)),
    ));
    let (status, first) = served
        .call(
            Method::POST,
            "/graphs/people/maintenance/optimize",
            maintain,
            None,
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{first}");
    assert_eq!(first["state"], "running");
    let (status, second) = served
        .call(
            Method::POST,
            "/graphs/people/maintenance/optimize",
            maintain,
            None,
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(second["joined"], true);
    assert_eq!(second["id"], first["id"]);
    let id = first["id"].as_str().unwrap();
    let (status, body) = served
        .call(
            Method::GET,
            "/graphs/people/status",
            Some(&served.tokens.read),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["maintenance"][0]["id"], id);
    // A waiter, then the cancel: both end 503 with the run's evidence.
    let waiter = tokio::spawn(
        served
            .request(
                Method::GET,
                &format!("/graphs/people/maintenance/runs/{id}?wait=true"),
                Some(&served.tokens.read),
            )
            .send(),
    );
    let (status, body) = served
        .call(
            Method::POST,
            &format!("/graphs/people/maintenance/runs/{id}/cancel?wait=true"),
            maintain,
            None,
        )
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["state"], "failed");
    assert_eq!(body["error"]["code"], "maintenance_cancelled");
    assert!(body["error"]["evidence"]["kind"].is_string(), "{body}");
    let waited = waiter.await.unwrap().unwrap();
    assert_eq!(waited.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(waited.headers()["retry-after"], "1");
    // Cancelled before the lane admitted it: it still ends cancelled, never runs on.
    let (status, started) = served
        .call(
            Method::POST,
            "/graphs/people/maintenance/optimize",
            maintain,
            None,
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    assert_eq!(started["joined"], false);
    let id = started["id"].as_str().unwrap();
    let (status, body) = served
        .call(
            Method::POST,
            &format!("/graphs/people/maintenance/runs/{id}/cancel?wait=true"),
            maintain,
            None,
        )
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "maintenance_cancelled");
    drop(held);
    let (status, body) = served
        .call(
            Method::GET,
            "/graphs/people/maintenance/runs/run_nothing",
            maintain,
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    // Whatever the cancelled run published, every row is still there.
    assert_eq!(
        served.query("MATCH (p:Person) RETURN count(*)").await,
        vec![json!([60])]
    );
    let (status, body) = served
        .call(
            Method::POST,
            "/graphs/people/maintenance/cleanup?wait=true",
            maintain,
            Some(json!({"keep": 1})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["operation"], "cleanup_preview");
    assert_eq!(body["state"], "finished");
    served.shutdown().await.unwrap();
}

#[tokio::test]
async fn shutdown_lets_a_write_in_flight_land() {
    let served = serve(Limits::default()).await;
    let write = Some(served.tokens.write.as_str());
    let (sender, body) = held_body();
    let load = tokio::spawn(
        served
            .request(Method::POST, "/graphs/people/load", write)
            .body(body)
            .send(),
    );
    sender
        .send(b"{\"type\":\"Person\",\"id\":\"late\",\"name\":\"in flight\"}\n".to_vec())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let Served {
        base,
        client,
        root,
        stop,
        task,
        dir,
        ..
    } = served;
    let _ = stop.unwrap().send(());
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(sender);
    let response = load.await.unwrap().unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    task.unwrap().await.unwrap().unwrap();
    assert!(
        client.get(format!("{base}/healthz")).send().await.is_err(),
        "the server stopped listening"
    );
    let graph = Omnigraph::open_root(root).await.unwrap();
    let count = omnigraph_query::query(
        &graph,
        "MATCH (p:Person {id: 'late'}) RETURN count(*)",
        &Default::default(),
    )
    .await
    .unwrap()
    .collect()
    .await
    .unwrap();
    let counted = count[0]
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap()
        .value(0);
    assert_eq!(counted, 1);
    drop(dir);
}

/// Inserts that arrive while another publishes are published together in the next
/// round, in one commit that records each request's key; a round that fails before any
/// effect runs each request alone, so one request's bad row or existing key refuses
/// only that request. Every commit PUT is held 150 ms, so the rounds are seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_inserts_share_a_round_and_each_answers_for_itself() {
    const GATHERED: usize = 12;
    let served = Arc::new(serve(Limits::default()).await);
    let held = served.root.inject(FaultRule::new(
        "_graph/branches/main/commits/*",
        &[RequestKind::PutIfAbsent],
        FaultAction::Delay(Duration::from_millis(150)),
    ));
    let insert = |key: String, rows: Value| {
        let served = served.clone();
        tokio::spawn(async move {
            let response = served
                .request(
                    Method::POST,
                    "/graphs/people/insert",
                    Some(&served.tokens.write),
                )
                .header("idempotency-key", key)
                .json(&json!({"type": "Person", "rows": rows}))
                .send()
                .await
                .unwrap();
            let status = response.status();
            (status, response.json::<Value>().await.unwrap())
        })
    };
    let first = insert("first".into(), people(0..1));
    // The first publishes (its commit PUT held) while the others arrive.
    tokio::time::sleep(Duration::from_millis(60)).await;
    let gathered: Vec<_> = (1..=GATHERED)
        .map(|n| insert(format!("k{n}"), people(n..n + 1)))
        .collect();
    let (status, body) = first.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    let mut seqs = std::collections::BTreeMap::new();
    for (n, answer) in (1..=GATHERED).zip(gathered) {
        let (status, body) = answer.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["replayed"], false);
        seqs.insert(format!("k{n}"), body["commit"]["seq"].as_u64().unwrap());
    }
    // Gathered: far fewer commits than inserts (the first, then one round or two).
    let head = served.head_seq().await;
    // (A loaded machine may let one request miss the round it was sent in.)
    assert!((2..=4).contains(&head), "{head} commits for 13 inserts");
    let graph = Omnigraph::open_root(served.root.clone()).await.unwrap();
    for (key, seq) in &seqs {
        let commit = graph
            .graph()
            .commit("main", &omnigraph_publish::CommitRef::Seq(*seq))
            .await
            .unwrap();
        assert!(commit.idempotency_keys.contains(key), "{key} not in {seq}");
        // Each key with its own request's fingerprint.
        assert_eq!(
            commit.idempotency_fingerprints.len(),
            commit.idempotency_keys.len()
        );
        assert!(commit.actor.starts_with("token:tok_"), "{}", commit.actor);
    }
    // A retry of each gathered key replays its round's commit; the key with another
    // insert is refused.
    for n in 1..=GATHERED {
        let key = format!("k{n}");
        let (status, body) = insert(key.clone(), people(n..n + 1)).await.unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["replayed"], true);
        assert_eq!(body["commit"]["seq"], json!(seqs[&key]));
    }
    let (status, body) = insert("k5".into(), people(6..7)).await.unwrap();
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["code"], "idempotency_key_reused");

    // A round with a bad row and a key two requests share: each answers for itself.
    let first = insert("second".into(), people(100..101));
    tokio::time::sleep(Duration::from_millis(60)).await;
    let good: Vec<_> = (101..105)
        .map(|n| insert(format!("g{n}"), people(n..n + 1)))
        .collect();
    let bad = insert(
        "bad".into(),
        json!([{"id": "p0200", "name": "bad", "age": "old"}]),
    );
    let twice = [
        insert("twice-a".into(), people(300..301)),
        insert("twice-b".into(), people(300..301)),
    ];
    assert_eq!(first.await.unwrap().0, StatusCode::OK);
    for answer in good {
        let (status, body) = answer.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let (status, body) = bad.await.unwrap();
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["code"], "bad_input", "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("age"),
        "{body}"
    );
    let mut statuses = Vec::new();
    for answer in twice {
        let (status, body) = answer.await.unwrap();
        statuses.push((status, body["error"]["code"].clone()));
    }
    statuses.sort_by_key(|(status, _)| *status);
    assert_eq!(
        statuses,
        vec![
            (StatusCode::OK, Value::Null),
            (StatusCode::CONFLICT, json!("key_conflict"))
        ]
    );
    let count = |cypher: &'static str| {
        let served = served.clone();
        async move { served.query(cypher).await }
    };
    // 13 + 1 + 4 + 1 rows, none of the bad one.
    assert_eq!(
        count("MATCH (p:Person) RETURN count(*)").await,
        vec![json!([19])]
    );
    assert_eq!(
        count("MATCH (p:Person {id: 'p0200'}) RETURN count(*)").await,
        vec![json!([0])]
    );
    drop((held, insert, count));
    let Ok(served) = Arc::try_unwrap(served) else {
        panic!("every request ended");
    };
    served.shutdown().await.unwrap();
}

/// Faults for [`a_write_retried_with_its_key_lands_once`]: each severs one write's
/// acknowledgement, alternately between the client and the server and at the store.
const SEVERED_ACKNOWLEDGEMENTS: usize = 1_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_retried_with_its_key_lands_once() {
    let served = serve(Limits::default()).await;
    let write = served.tokens.write.clone();
    let insert = |n: usize| json!({"type": "Person", "rows": people(n..n + 1)});
    let keyed = |client: &reqwest::Client, n: usize| {
        client
            .post(format!("{}/graphs/people/insert", served.base))
            .bearer_auth(&write)
            .header("idempotency-key", format!("person-{n}"))
            .json(&insert(n))
    };
    // The same key twice: the second answers with the first's commit.
    let first: Value = keyed(&served.client, 0)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(first["replayed"], false, "{first}");
    let again = keyed(&served.client, 0).send().await.unwrap();
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["commit"]["commit_id"], first["commit"]["commit_id"]);
    assert_eq!(again["replayed"], true);
    // A key that is not printable ASCII is refused before anything is written.
    let refused = served
        .request(Method::POST, "/graphs/people/insert", Some(&write))
        .header("idempotency-key", "x".repeat(300))
        .json(&insert(99_999))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);

    // Severed acknowledgements: a client that gives up before the answer (every commit
    // PUT held 20 ms, the client waits 5 ms), or a commit PUT whose acknowledgement the
    // store loses; each time the client retries with its key until it has an answer.
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(5))
        .build()
        .unwrap();
    let commits = "_graph/branches/main/commits/*";
    let mut replayed = 0;
    for n in 1..=SEVERED_ACKNOWLEDGEMENTS {
        let severed = if n % 2 == 0 {
            let _held = served.root.inject(FaultRule::new(
                commits,
                &[RequestKind::PutIfAbsent],
                FaultAction::Delay(Duration::from_millis(20)),
            ));
            let gave_up = keyed(&impatient, n).send().await;
            assert!(gave_up.is_err(), "the client gave up before the answer");
            None
        } else {
            let lost = served.root.inject(
                FaultRule::new(commits, &[RequestKind::PutIfAbsent], FaultAction::LostAck).times(1),
            );
            let answer = keyed(&served.client, n).send().await.unwrap();
            assert_eq!(lost.fired(), 1);
            Some(answer.status())
        };
        let mut attempts = 0;
        let answer: Value = loop {
            attempts += 1;
            assert!(attempts <= 20, "write {n} never answered");
            let response = keyed(&served.client, n).send().await.unwrap();
            if response.status() == StatusCode::OK {
                break response.json().await.unwrap();
            }
        };
        if answer["replayed"] == true {
            replayed += 1;
        }
        // The store lost the commit's acknowledgement: the publisher read it back (200)
        // or could not tell (500 publish_in_doubt); never a refusal.
        if let Some(status) = severed {
            assert!(
                status == StatusCode::OK || status == StatusCode::INTERNAL_SERVER_ERROR,
                "{status}"
            );
        }
    }
    assert!(
        replayed >= SEVERED_ACKNOWLEDGEMENTS / 2,
        "replayed {replayed}"
    );
    // Zero duplicates: one row and one commit per key.
    assert_eq!(
        served.query("MATCH (p:Person) RETURN count(*)").await,
        vec![json!([SEVERED_ACKNOWLEDGEMENTS + 1])]
    );
    let graph = Omnigraph::open_root(served.root.clone()).await.unwrap();
    let head = graph.head().await.unwrap();
    let mut keys = std::collections::BTreeSet::new();
    for seq in 1..=head.seq {
        let commit = graph
            .graph()
            .commit("main", &omnigraph_publish::CommitRef::Seq(seq))
            .await
            .unwrap();
        // One write at a time: each commit answers one request.
        let [key] = commit.idempotency_keys.as_slice() else {
            panic!("one key per commit: {:?}", commit.idempotency_keys);
        };
        let key = key.clone();
        assert!(keys.insert(key.clone()), "{key} landed twice");
        assert!(commit.actor.starts_with("token:tok_"), "{}", commit.actor);
    }
    assert_eq!(keys.len(), SEVERED_ACKNOWLEDGEMENTS + 1);

    // Across a restart: a new server on the same root finds a key from before.
    let served = served.restarted().await;
    let response = served
        .request(Method::POST, "/graphs/people/insert", Some(&write))
        .header("idempotency-key", "person-7")
        .json(&insert(7))
        .send()
        .await
        .unwrap();
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["replayed"], true, "{body}");
    assert_eq!(body["commit"]["seq"], 8);
    assert!(served.dir.path().exists());
    served.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_reused_for_another_request_is_refused_and_the_same_request_replays() {
    let served = serve(Limits::default()).await;
    let write = served.tokens.write.clone();
    let send = |path: &str, key: &str, body: String| {
        served
            .request(Method::POST, path, Some(&write))
            .header("idempotency-key", key)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let count = || served.query("MATCH (p:Person) RETURN count(*)");
    let first = send(
        "/graphs/people/insert",
        "k-a",
        json!({"type": "Person", "rows": people(0..2)}).to_string(),
    )
    .await
    .unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let first: Value = first.json().await.unwrap();
    assert_eq!(first["replayed"], false);
    // The commit records the request's fingerprint beside its key.
    let graph = Omnigraph::open_root(served.root.clone()).await.unwrap();
    let head = graph.head().await.unwrap();
    assert_eq!(head.idempotency_keys, ["k-a"]);
    assert_eq!(head.idempotency_fingerprints.len(), 1);
    assert!(
        head.idempotency_fingerprints[0].starts_with("og1-sha256:"),
        "{:?}",
        head.idempotency_fingerprints
    );
    // The same request, its JSON written another way (keys in another order, spaces):
    // a replay.
    let rows: Vec<String> = (0..2)
        .map(|n| {
            format!(
                r#"{{ "age": {}, "name": "person {n}", "id": "p{n:04}" }}"#,
                20 + n
            )
        })
        .collect();
    let same = format!(r#"{{ "rows": [{}], "type": "Person" }}"#, rows.join(" , "));
    let again = send("/graphs/people/insert", "k-a", same).await.unwrap();
    assert_eq!(again.status(), StatusCode::OK);
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["replayed"], true, "{again}");
    assert_eq!(again["commit"]["commit_id"], first["commit"]["commit_id"]);
    // The default branch spelled out is the same request.
    let spelled = json!({"type": "Person", "rows": people(0..2), "branch": "main"});
    let again: Value = send("/graphs/people/insert", "k-a", spelled.to_string())
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(again["replayed"], true, "{again}");
    // Another body, or another route, with the key: refused, nothing written.
    let reused = [
        (
            "/graphs/people/insert",
            json!({"type": "Person", "rows": people(5..6)}),
        ),
        (
            "/graphs/people/update",
            json!({"type": "Person", "where": "id = 'p0000'", "set": {"age": 99}}),
        ),
    ];
    for (path, body) in reused {
        let refused = send(path, "k-a", body.to_string()).await.unwrap();
        assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY, "{path}");
        let body: Value = refused.json().await.unwrap();
        assert_eq!(body["error"]["code"], "idempotency_key_reused", "{body}");
        assert_eq!(body["error"]["evidence"]["kind"], "before_effect", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("commit {}", head.seq)),
            "{message}"
        );
    }
    assert_eq!(count().await, vec![json!([2])]);
    assert_eq!(
        graph.head().await.unwrap().seq,
        head.seq,
        "nothing published"
    );

    // A load: its settings and bytes are its request.
    let lines = |range: std::ops::Range<usize>| {
        range
            .map(|n| format!(r#"{{"type": "Person", "id": "l{n}", "name": "loaded {n}"}}"#))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let load = |body: String, mode: &'static str| {
        served
            .request(
                Method::POST,
                &format!("/graphs/people/load?mode={mode}"),
                Some(&write),
            )
            .header("idempotency-key", "k-load")
            .body(body)
            .send()
    };
    let loaded: Value = load(lines(0..3), "append")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(loaded["replayed"], false, "{loaded}");
    let replayed: Value = load(lines(0..3), "append")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(replayed["replayed"], true, "{replayed}");
    for (body, mode) in [(lines(0..4), "append"), (lines(0..3), "merge")] {
        let refused = load(body, mode).await.unwrap();
        assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY, "{mode}");
    }
    assert_eq!(count().await, vec![json!([5])]);

    // A key a build before fingerprints recorded (no fingerprint): any request with it
    // replays, as it did then.
    // An insert through the library that records `key` with `fingerprints`.
    let recorded = |key: &str, fingerprints: Vec<String>, rows: std::ops::Range<usize>| {
        let request = omnigraph_publish::request::WriteRequest {
            actor: None,
            idempotency_keys: vec![key.to_owned()],
            idempotency_fingerprints: fingerprints,
        };
        request.serve(graph.insert_json("Person", objects(people(rows))))
    };
    let old = recorded("k-old", Vec::new(), 10..11).await.unwrap();
    // An insert through the server with `key` and rows other than those it recorded.
    let another = |key: &str, rows: std::ops::Range<usize>| {
        let sent = send(
            "/graphs/people/insert",
            key,
            json!({"type": "Person", "rows": people(rows)}).to_string(),
        );
        async move { sent.await.unwrap().json::<Value>().await.unwrap() }
    };
    let replayed = another("k-old", 11..12).await;
    assert_eq!(replayed["replayed"], true, "{replayed}");
    assert_eq!(replayed["commit"]["seq"], old.seq);
    // A fingerprint of another scheme (a later build's) is not compared: a replay.
    let later = recorded("k-later", vec!["og9-other:0123".into()], 12..13)
        .await
        .unwrap();
    let replayed = another("k-later", 13..14).await;
    assert_eq!(replayed["replayed"], true, "{replayed}");
    assert_eq!(replayed["commit"]["seq"], later.seq);

    // Across a restart: the fingerprint is read back from the commit.
    let served = served.restarted().await;
    let keyed = |body: Value| {
        served
            .request(Method::POST, "/graphs/people/insert", Some(&write))
            .header("idempotency-key", "k-a")
            .json(&body)
            .send()
    };
    let refused = keyed(json!({"type": "Person", "rows": people(5..6)}))
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let replayed: Value = keyed(json!({"type": "Person", "rows": people(0..2)}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(replayed["replayed"], true, "{replayed}");
    served.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_token_past_its_request_rate_gets_429_and_others_do_not() {
    let served = serve(Limits {
        token_requests_per_second: Some(3),
        ..Limits::default()
    })
    .await;
    let mut statuses = Vec::new();
    for _ in 0..8 {
        let response = served
            .request(
                Method::GET,
                "/graphs/people/schema",
                Some(&served.tokens.read),
            )
            .send()
            .await
            .unwrap();
        statuses.push(response.status());
        if response.status() == StatusCode::TOO_MANY_REQUESTS {
            assert_eq!(response.headers()["retry-after"], "1");
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["error"]["code"], "too_many_requests");
        }
    }
    // A burst of the rate goes through; the rest of the same instant does not.
    assert!(
        statuses[..3].iter().all(|status| *status == StatusCode::OK),
        "{statuses:?}"
    );
    assert!(
        statuses.contains(&StatusCode::TOO_MANY_REQUESTS),
        "{statuses:?}"
    );
    // Another token has a bucket of its own; the first one refills within a second.
    let (status, _) = served
        .call(
            Method::GET,
            "/graphs/people/schema",
            Some(&served.tokens.write),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let (status, _) = served
        .call(
            Method::GET,
            "/graphs/people/schema",
            Some(&served.tokens.read),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    served.shutdown().await.unwrap();
}

/// A library caller's request that a commit could not record (a key given twice, a
/// fingerprint for one of two keys) is refused before its write runs: `bad_input` with
/// `before_effect`, and the root as it was, nothing staged.
#[tokio::test]
async fn a_write_request_a_commit_could_not_record_changes_nothing() {
    use omnigraph_core::{ErrorKind, Evidence};
    use omnigraph_publish::request::WriteRequest;
    use omnigraph_tests::{Backend, TestRoot, all_objects};
    let test = TestRoot::new(Backend::Local).await;
    let graph = Omnigraph::create(&test.uri, SOCIAL_SCHEMA).await.unwrap();
    let before = all_objects(&test.root).await;
    let refused = [
        (vec!["k", "k"], vec![]),
        (vec!["k1", "k2"], vec!["og1-sha256:00"]),
    ];
    for (keys, fingerprints) in refused {
        let request = WriteRequest {
            actor: None,
            idempotency_keys: keys.iter().map(|key| key.to_string()).collect(),
            idempotency_fingerprints: fingerprints.iter().map(|f| f.to_string()).collect(),
        };
        let error = request
            .serve(graph.insert_json("Person", objects(json!([{"id": "p1", "name": "Ada"}]))))
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::BadInput, "{error}");
        assert_eq!(error.evidence(), &Evidence::BeforeEffect, "{error}");
        assert_eq!(
            all_objects(&test.root).await,
            before,
            "nothing staged: {keys:?}"
        );
    }
    assert_eq!(graph.head().await.unwrap().seq, 0);
}
