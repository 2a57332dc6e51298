//! The query route: Cypher with parameters at a branch head or a commit, within the
//! query time and memory budget; rows as JSON, or as an Arrow IPC stream when the
//! client accepts one.

use super::{State, accepted, arrow_failed, commit_headers, json_body};
use crate::error::ApiError;
use crate::tokens::Role;
use arrow::array::RecordBatch;
use arrow::ipc::writer::StreamWriter;
use axum::extract::{self, Path, Request};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use omnigraph_publish::CommitRef;
use omnigraph_query::QueryOptions;
use serde::Deserialize;
use serde_json::{Map, Value};

/// The media type of an Arrow IPC stream.
pub(crate) const ARROW_STREAM: &str = "application/vnd.apache.arrow.stream";

/// A query.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct QueryBody {
    /// The Cypher query (`docs/query.md`).
    query: String,
    /// Parameters by name, without the `$`.
    #[serde(default)]
    #[schema(value_type = Object)]
    params: Map<String, Value>,
    /// The branch (default `main`).
    branch: Option<String>,
    /// A commit seq or id of the branch (default: its head).
    at: Option<String>,
}

/// Runs a Cypher query.
#[utoipa::path(post, path = "/graphs/{graph}/query", request_body = QueryBody,
    params(("graph" = String, Path, description = "The served graph")),
    responses(
        (status = 200, description = "The rows: JSON {columns, rows, seq, commit_id}, or an Arrow IPC stream (Accept: application/vnd.apache.arrow.stream) with the commit in x-omnigraph-seq and x-omnigraph-commit-id"),
        (status = 400, description = "A malformed body or a query the checker refused (bad_query, with line and column)"),
        (status = 401, description = "No token, or one not known"),
        (status = 403, description = "The token has no read role on the graph"),
        (status = 404, description = "No such graph, branch or commit"),
        (status = 413, description = "The body is past the server's limit"),
        (status = 422, description = "The query failed while running (query_failed), or its rows took more than the server holds for one answer (result_too_large)"),
        (status = 429, description = "The token has as many requests in flight as it may"),
        (status = 503, description = "The query ran past the query time (query_time_exceeded)"),
    ))]
pub(crate) async fn query(
    extract::State(state): extract::State<State>,
    Path(graph): Path<String>,
    headers: HeaderMap,
    request: Request,
) -> Result<Response, ApiError> {
    let (served, _admitted) = state.admit(&headers, &graph, Role::Read)?;
    let arrow = wants_arrow(&headers)?;
    let body: QueryBody = json_body(&state, request).await?;
    let handle = served.handle(body.branch.as_deref()).await?;
    let mut options =
        QueryOptions::new().at(body.at.as_deref().map_or(CommitRef::Head, CommitRef::parse));
    for (name, value) in body.params {
        options = options.parameter(name, value);
    }
    if let Some(bytes) = state.limits.query_memory_bytes {
        options = options.memory_bytes(bytes);
    }
    let limit = state.limits.query_time;
    // Planning and every row within the query time: dropping the future stops the
    // plan's streams.
    let result_limit = state.limits.query_result_bytes;
    let run = async {
        let mut rows = omnigraph_query::query(&handle, &body.query, &options).await?;
        let schema = rows.schema();
        let (seq, commit_id) = (rows.seq(), rows.commit_id().to_owned());
        // The answer is gathered before its status is sent, so a failure while the rows
        // are read gets its own status and error body; the limit bounds what is held.
        let mut batches = Vec::new();
        let mut held = 0usize;
        while let Some(batch) = rows.next().await {
            let batch = batch?;
            held = held.saturating_add(batch.get_array_memory_size());
            if held > result_limit {
                return Err(ApiError::ResultTooLarge {
                    limit: result_limit,
                });
            }
            batches.push(batch);
        }
        Ok::<_, ApiError>((schema, batches, seq, commit_id))
    };
    let (schema, batches, seq, commit_id) = tokio::time::timeout(limit, run)
        .await
        .map_err(|_| ApiError::QueryTimeExceeded(limit))??;
    if arrow {
        let mut writer = StreamWriter::try_new(Vec::new(), &schema).map_err(arrow_failed)?;
        for batch in &batches {
            writer.write(batch).map_err(arrow_failed)?;
        }
        writer.finish().map_err(arrow_failed)?;
        let bytes = writer.into_inner().map_err(arrow_failed)?;
        let mut response = bytes.into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(ARROW_STREAM));
        commit_headers(headers, seq, &commit_id);
        return Ok(response);
    }
    let columns: Vec<String> = schema
        .fields()
        .iter()
        .map(|field| field.name().clone())
        .collect();
    let body = json_answer(&columns, &batches, seq, &commit_id, result_limit)?;
    let mut response = body.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

/// The answer as JSON, `{columns, rows, seq, commit_id}`, written a batch at a time and
/// within `limit` bytes too: JSON takes several times the rows' Arrow memory, and the
/// limit bounds what the server holds for one answer in either form.
fn json_answer(
    columns: &[String],
    batches: &[RecordBatch],
    seq: u64,
    commit_id: &str,
    limit: usize,
) -> Result<Vec<u8>, ApiError> {
    let encoding =
        |error: serde_json::Error| omnigraph_core::OmniError::internal(error.to_string());
    let mut out = Vec::new();
    out.extend_from_slice(b"{\"columns\":");
    serde_json::to_writer(&mut out, columns).map_err(encoding)?;
    out.extend_from_slice(b",\"rows\":[");
    let mut first = true;
    for batch in batches {
        for row in omnigraph_graph::batches_to_json(std::slice::from_ref(batch)) {
            if !first {
                out.push(b',');
            }
            first = false;
            let cells: Vec<&Value> = columns
                .iter()
                .map(|column| row.get(column).unwrap_or(&Value::Null))
                .collect();
            serde_json::to_writer(&mut out, &cells).map_err(encoding)?;
        }
        if out.len() > limit {
            return Err(ApiError::ResultTooLarge { limit });
        }
    }
    out.extend_from_slice(b"],\"seq\":");
    serde_json::to_writer(&mut out, &seq).map_err(encoding)?;
    out.extend_from_slice(b",\"commit_id\":");
    serde_json::to_writer(&mut out, commit_id).map_err(encoding)?;
    out.push(b'}');
    Ok(out)
}

/// Whether the client asked for an Arrow IPC stream; 406 when it accepts neither that
/// nor JSON.
fn wants_arrow(headers: &HeaderMap) -> Result<bool, ApiError> {
    let Some(types) = accepted(headers) else {
        return Ok(false);
    };
    if types.contains(&ARROW_STREAM) {
        return Ok(true);
    }
    if types
        .iter()
        .any(|kind| matches!(*kind, "application/json" | "application/*" | "*/*"))
    {
        return Ok(false);
    }
    Err(ApiError::NotAcceptable(format!(
        "the query route gives application/json or {ARROW_STREAM}, not {types:?}"
    )))
}
