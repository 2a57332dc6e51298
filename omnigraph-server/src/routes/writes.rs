//! The write routes: insert, load, update and delete. Each write runs in a task of its
//! own, so a client that hangs up never abandons a publication half way: the write
//! lands or fails with its evidence, as it would for an embedded caller. With an
//! `Idempotency-Key`, a write whose key landed already answers with that commit
//! (`crate::idempotency`).

use super::{State, chunk_error, declared_length, json_body, query_params};
use crate::auth::Admitted;
use crate::error::ApiError;
use crate::idempotency::{Fingerprint, Written, fingerprinted};
use crate::tokens::Role;
use crate::view::commit_json;
use axum::extract::{self, Path, Request};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use omnigraph_core::{InputLocation, OmniError};
use omnigraph_graph::{IngestReport, InputFormat, LoadMode};
use omnigraph_publish::request::{WriteRequest, check_idempotency_key};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::io::AsyncWriteExt;

/// The header that names a write's idempotency key.
pub(crate) const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// Rows of one type to insert.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct InsertBody {
    /// The node or edge type.
    #[serde(rename = "type")]
    type_name: String,
    /// The rows: objects of property values (an edge's `src` and `dst` are its
    /// endpoints' keys).
    #[schema(value_type = Vec<Object>)]
    rows: Vec<Map<String, Value>>,
    /// The branch (default `main`).
    branch: Option<String>,
}

/// Inserts rows of one type in one commit.
#[utoipa::path(post, path = "/graphs/{graph}/insert", request_body = InsertBody,
    params(("graph" = String, Path, description = "The served graph")),
    responses(
        (status = 200, description = "The commit: {commit}"),
        (status = 400, description = "A malformed body, or rows that do not fit the schema (bad_input naming the row and field)"),
        (status = 401, description = "No token, or one not known"),
        (status = 403, description = "The token has no write role on the graph"),
        (status = 404, description = "No such graph, branch or type"),
        (status = 409, description = "A key exists already (key_conflict), or the read set changed"),
        (status = 413, description = "The body is past the server's limit"),
        (status = 422, description = "The Idempotency-Key landed already on the branch for another request (idempotency_key_reused); nothing was done"),
        (status = 429, description = "The token has as many requests in flight as it may"),
    ))]
pub(crate) async fn insert(
    extract::State(state): extract::State<State>,
    Path(graph): Path<String>,
    headers: HeaderMap,
    request: Request,
) -> std::result::Result<Response, ApiError> {
    let (served, admitted) = state.admit(&headers, &graph, Role::Write)?;
    let serving = write_request(&headers, &admitted)?;
    let body: InsertBody = json_body(&state, request).await?;
    // Refused here as the engine refuses it: a round would publish it with the others.
    if body.rows.is_empty() {
        return Err(ApiError::from(OmniError::bad_input(
            InputLocation::in_source("insert").type_name(&body.type_name),
            "there are no rows to insert",
        )));
    }
    let handle = served.handle(body.branch.as_deref()).await?;
    let serving = fingerprinted(serving, || {
        let settings = json!({"type": body.type_name, "branch": handle.branch()});
        Fingerprint::of_json("insert", &settings, &body.rows)
    });
    let written = state
        .writes
        .insert(&graph, handle, serving, admitted, body.type_name, body.rows)
        .await?;
    Ok(answer(
        written,
        |commit| json!({"commit": commit_json(commit)}),
    ))
}

/// A load's settings, in the query string (the body is the file).
#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub(crate) struct LoadParams {
    /// `jsonl` (default), `csv`, `parquet` or `arrow` (an Arrow IPC file).
    format: Option<String>,
    /// The type of every row of a CSV, Parquet or Arrow file.
    #[serde(rename = "type")]
    type_name: Option<String>,
    /// `append` (default: every key must be new) or `merge` (upsert by key).
    mode: Option<String>,
    /// The branch (default `main`).
    branch: Option<String>,
}

/// Loads a file sent as the body: spooled to a temporary file as it arrives (never held
/// in memory), within the load limit, then loaded in one commit.
#[utoipa::path(post, path = "/graphs/{graph}/load", params(LoadParams, ("graph" = String, Path, description = "The served graph")),
    request_body(content = Vec<u8>, description = "The file: JSONL, CSV, Parquet or Arrow IPC", content_type = "application/octet-stream"),
    responses(
        (status = 200, description = "{commit, rows}: the commit (null when there were no rows) and the rows per type"),
        (status = 400, description = "A bad line or row (bad_input naming the line or row and field); nothing published"),
        (status = 401, description = "No token, or one not known"),
        (status = 403, description = "The token has no write role on the graph"),
        (status = 404, description = "No such graph or branch"),
        (status = 408, description = "The client did not send the body within the request time"),
        (status = 409, description = "A key exists already (append)"),
        (status = 413, description = "The body is past the load limit; nothing published"),
        (status = 422, description = "The Idempotency-Key landed already on the branch for another request (idempotency_key_reused); nothing was done"),
        (status = 429, description = "The token has as many requests in flight as it may"),
    ))]
pub(crate) async fn load(
    extract::State(state): extract::State<State>,
    Path(graph): Path<String>,
    headers: HeaderMap,
    request: Request,
) -> std::result::Result<Response, ApiError> {
    let (served, admitted) = state.admit(&headers, &graph, Role::Write)?;
    let serving = write_request(&headers, &admitted)?;
    let params: LoadParams = query_params(request.uri())?;
    let format = match params.format.as_deref().unwrap_or("jsonl") {
        "jsonl" => InputFormat::Jsonl,
        "csv" => InputFormat::Csv,
        "parquet" => InputFormat::Parquet,
        "arrow" => InputFormat::ArrowIpc,
        other => {
            return Err(bad_param(
                "format",
                Some(other),
                "jsonl, csv, parquet or arrow",
            ));
        }
    };
    let mode = match params.mode.as_deref().unwrap_or("append") {
        "append" => LoadMode::Append,
        "merge" => LoadMode::Merge,
        other => return Err(bad_param("mode", Some(other), "append or merge")),
    };
    match (format, &params.type_name) {
        (InputFormat::Jsonl, Some(_)) => {
            return Err(bad_param(
                "type",
                None,
                "JSONL rows name their own type; type is for CSV, Parquet and Arrow",
            ));
        }
        (InputFormat::Jsonl, None) | (_, Some(_)) => {}
        (_, None) => {
            return Err(bad_param(
                "type",
                None,
                "a CSV, Parquet or Arrow file holds one type: name it",
            ));
        }
    }
    let handle = served.handle(params.branch.as_deref()).await?;
    let limit = state.limits.load_body_bytes;
    if declared_length(&headers).is_some_and(|length| length > limit) {
        return Err(ApiError::TooLarge { limit });
    }
    // The spool: a file of its own in a folder of its own, so a bad line's error names
    // `request-body` and the folder goes when the load ends.
    let folder = tempfile::tempdir()
        .map_err(|error| OmniError::internal(format!("cannot make a spool folder: {error}")))?;
    let path = folder.path().join("request-body");
    let mut file = tokio::fs::File::create(&path)
        .await
        .map_err(|error| OmniError::internal(format!("cannot spool the body: {error}")))?;
    // A keyed load's fingerprint: its settings, as it reads them, and its bytes.
    let mut fingerprint = (!serving.idempotency_keys.is_empty()).then(|| {
        let mut fingerprint = Fingerprint::of_route("load");
        fingerprint.json(&json!({
            "format": params.format.as_deref().unwrap_or("jsonl"),
            "type": params.type_name,
            "mode": params.mode.as_deref().unwrap_or("append"),
            "branch": handle.branch(),
        }));
        fingerprint
    });
    let mut body = fingerprint.as_mut().map(Fingerprint::streamed);
    let mut stream = request.into_body().into_data_stream();
    let mut written: u64 = 0;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|error| chunk_error(&error))?;
        written += chunk.len() as u64;
        if written > limit {
            return Err(ApiError::TooLarge { limit });
        }
        if let Some(body) = body.as_mut() {
            body.update(&chunk);
        }
        file.write_all(&chunk)
            .await
            .map_err(|error| OmniError::internal(format!("cannot spool the body: {error}")))?;
    }
    drop(body);
    let serving = match fingerprint {
        Some(fingerprint) => fingerprinted(serving, || fingerprint),
        None => serving,
    };
    file.flush()
        .await
        .map_err(|error| OmniError::internal(format!("cannot spool the body: {error}")))?;
    drop(file);
    let type_name = params.type_name;
    let written = state
        .writes
        .run(
            &graph,
            handle,
            serving,
            admitted,
            |report: &IngestReport| report.commit.as_ref(),
            move |handle| {
                Box::pin(async move {
                    // The folder lives until the load ends, in the task.
                    let _folder = folder;
                    match type_name {
                        None => handle.load(&path, mode).await,
                        Some(type_name) => {
                            handle.load_columnar(&path, format, &type_name, mode).await
                        }
                    }
                })
            },
        )
        .await?;
    Ok(answer(written, |report| {
        json!({
            "commit": report.commit.as_ref().map(commit_json),
            "rows": report.rows,
        })
    }))
}

/// The request a write serves: the token's actor, and the client's `Idempotency-Key`
/// when it gave one (checked: printable ASCII, at most 256 bytes).
pub(crate) fn write_request(
    headers: &HeaderMap,
    admitted: &Admitted,
) -> std::result::Result<WriteRequest, ApiError> {
    let key = match headers.get(IDEMPOTENCY_KEY) {
        None => None,
        Some(value) => {
            let key = value.to_str().unwrap_or_default();
            check_idempotency_key(key)?;
            Some(key.to_owned())
        }
    };
    // The fingerprint comes with the body, once the route has read it.
    Ok(WriteRequest {
        actor: Some(admitted.actor.clone()),
        idempotency_keys: key.into_iter().collect(),
        idempotency_fingerprints: Vec::new(),
    })
}

/// The response of a write: its document, or the commit a replayed key answered with
/// (`replayed: true`, and the `Idempotent-Replayed` header).
pub(crate) fn answer<T>(written: Written<T>, document: impl FnOnce(&T) -> Value) -> Response {
    match written {
        Written::Fresh(result) => {
            let mut body = document(&result);
            body["replayed"] = json!(false);
            axum::Json(body).into_response()
        }
        Written::Reused { seq } => ApiError::KeyReused { seq }.into_response(),
        Written::Replayed(commit) => {
            let mut response =
                axum::Json(json!({"commit": commit_json(&commit), "replayed": true}))
                    .into_response();
            response.headers_mut().insert(
                "idempotent-replayed",
                axum::http::HeaderValue::from_static("true"),
            );
            response
        }
    }
}

/// A query-string parameter that is wrong: its value, when it has one, and what it
/// should be.
fn bad_param(name: &str, value: Option<&str>, expected: &str) -> ApiError {
    ApiError::from(OmniError::bad_input(
        InputLocation::in_source("query string").field(name),
        match value {
            None => expected.to_owned(),
            Some(value) => format!("{value:?}: expected {expected}"),
        },
    ))
}

/// Properties to set on the rows of a type where a predicate holds.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateBody {
    /// The type.
    #[serde(rename = "type")]
    type_name: String,
    /// A SQL predicate over the type's properties, e.g. `age > 30`.
    #[serde(rename = "where")]
    predicate: String,
    /// The new values by property.
    #[schema(value_type = Object)]
    set: Map<String, Value>,
    /// The branch (default `main`).
    branch: Option<String>,
}

/// Sets properties where a predicate holds, in one commit.
#[utoipa::path(post, path = "/graphs/{graph}/update", request_body = UpdateBody,
    params(("graph" = String, Path, description = "The served graph")),
    responses(
        (status = 200, description = "{commit}: null when no row matched"),
        (status = 400, description = "A malformed body, predicate or value"),
        (status = 401, description = "No token, or one not known"),
        (status = 403, description = "The token has no write role on the graph"),
        (status = 404, description = "No such graph, branch or type"),
        (status = 409, description = "The rows changed under the update (read_set_changed)"),
        (status = 422, description = "The Idempotency-Key landed already on the branch for another request (idempotency_key_reused); nothing was done"),
        (status = 429, description = "The token has as many requests in flight as it may"),
    ))]
pub(crate) async fn update(
    extract::State(state): extract::State<State>,
    Path(graph): Path<String>,
    headers: HeaderMap,
    request: Request,
) -> std::result::Result<Response, ApiError> {
    let (served, admitted) = state.admit(&headers, &graph, Role::Write)?;
    let serving = write_request(&headers, &admitted)?;
    let body: UpdateBody = json_body(&state, request).await?;
    let handle = served.handle(body.branch.as_deref()).await?;
    let serving = fingerprinted(serving, || {
        let settings =
            json!({"type": body.type_name, "where": body.predicate, "branch": handle.branch()});
        Fingerprint::of_json("update", &settings, &body.set)
    });
    let assignments: Vec<(String, Value)> = body.set.into_iter().collect();
    let written = state
        .writes
        .run(
            &graph,
            handle,
            serving,
            admitted,
            Option::as_ref,
            move |handle| {
                Box::pin(async move {
                    handle
                        .update(&body.type_name, &body.predicate, &assignments)
                        .await
                })
            },
        )
        .await?;
    Ok(answer(
        written,
        |commit| json!({"commit": commit.as_ref().map(commit_json)}),
    ))
}

/// The rows of a type where a predicate holds.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeleteBody {
    /// The type.
    #[serde(rename = "type")]
    type_name: String,
    /// A SQL predicate over the type's properties.
    #[serde(rename = "where")]
    predicate: String,
    /// The branch (default `main`).
    branch: Option<String>,
}

/// Deletes the rows where a predicate holds (a node takes its edges), in one commit.
#[utoipa::path(post, path = "/graphs/{graph}/delete", request_body = DeleteBody,
    params(("graph" = String, Path, description = "The served graph")),
    responses(
        (status = 200, description = "{commit}: null when no row matched"),
        (status = 400, description = "A malformed body or predicate"),
        (status = 401, description = "No token, or one not known"),
        (status = 403, description = "The token has no write role on the graph"),
        (status = 404, description = "No such graph, branch or type"),
        (status = 409, description = "The rows changed under the delete (read_set_changed)"),
        (status = 422, description = "The Idempotency-Key landed already on the branch for another request (idempotency_key_reused); nothing was done"),
        (status = 429, description = "The token has as many requests in flight as it may"),
    ))]
pub(crate) async fn delete(
    extract::State(state): extract::State<State>,
    Path(graph): Path<String>,
    headers: HeaderMap,
    request: Request,
) -> std::result::Result<Response, ApiError> {
    let (served, admitted) = state.admit(&headers, &graph, Role::Write)?;
    let serving = write_request(&headers, &admitted)?;
    let body: DeleteBody = json_body(&state, request).await?;
    let handle = served.handle(body.branch.as_deref()).await?;
    let serving = fingerprinted(serving, || {
        let settings = json!({"type": body.type_name, "branch": handle.branch()});
        Fingerprint::of_json("delete", &settings, &body.predicate)
    });
    let written = state
        .writes
        .run(
            &graph,
            handle,
            serving,
            admitted,
            Option::as_ref,
            move |handle| {
                Box::pin(async move { handle.delete(&body.type_name, &body.predicate).await })
            },
        )
        .await?;
    Ok(answer(
        written,
        |commit| json!({"commit": commit.as_ref().map(commit_json)}),
    ))
}
