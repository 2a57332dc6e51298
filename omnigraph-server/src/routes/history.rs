//! The read routes of a graph's history and state: the commit log, the tables a commit
//! pins (for any Lance reader), and the status of a branch's head.

use super::{State, query_params};
use crate::error::ApiError;
use crate::limits::LOG_LIMIT_MAX;
use crate::tokens::Role;
use crate::view::{LogPage, Status, tables_json};
use axum::extract::{self, Path, Request};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use omnigraph_publish::CommitRef;
use serde::Deserialize;

/// Which commits to list.
#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub(crate) struct LogParams {
    /// The branch (default `main`).
    branch: Option<String>,
    /// The most commits, newest first (default 20, at most 1000).
    limit: Option<usize>,
}

/// The branch's commits, newest first.
#[utoipa::path(get, path = "/graphs/{graph}/commits", params(LogParams, ("graph" = String, Path, description = "The served graph")),
    responses(
        (status = 200, description = "{commits, limit, truncated}"),
        (status = 400, description = "A malformed query string"),
        (status = 401, description = "No token, or one not known"),
        (status = 403, description = "The token has no read role on the graph"),
        (status = 404, description = "No such graph or branch"),
    ))]
pub(crate) async fn commits(
    extract::State(state): extract::State<State>,
    Path(graph): Path<String>,
    headers: HeaderMap,
    request: Request,
) -> Result<Response, ApiError> {
    let (served, _admitted) = state.admit(&headers, &graph, Role::Read)?;
    let params: LogParams = query_params(request.uri())?;
    let handle = served.handle(params.branch.as_deref()).await?;
    let page = LogPage::read(&handle, params.limit.unwrap_or(20).min(LOG_LIMIT_MAX)).await?;
    Ok(axum::Json(page.json()).into_response())
}

/// Which commit's tables.
#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub(crate) struct TablesParams {
    /// The branch (default `main`).
    branch: Option<String>,
    /// A commit seq or id (default: the head).
    at: Option<String>,
}

/// Each table a commit pins: its Lance URI and exact version, for any Lance reader.
#[utoipa::path(get, path = "/graphs/{graph}/tables", params(TablesParams, ("graph" = String, Path, description = "The served graph")),
    responses(
        (status = 200, description = "{seq, commit_id, tables}"),
        (status = 400, description = "A malformed query string"),
        (status = 401, description = "No token, or one not known"),
        (status = 403, description = "The token has no read role on the graph"),
        (status = 404, description = "No such graph, branch or commit"),
        (status = 410, description = "Cleanup reclaimed the commit (commit_reclaimed)"),
    ))]
pub(crate) async fn tables(
    extract::State(state): extract::State<State>,
    Path(graph): Path<String>,
    headers: HeaderMap,
    request: Request,
) -> Result<Response, ApiError> {
    let (served, _admitted) = state.admit(&headers, &graph, Role::Read)?;
    let params: TablesParams = query_params(request.uri())?;
    let handle = served.handle(params.branch.as_deref()).await?;
    let at = params
        .at
        .as_deref()
        .map_or(CommitRef::Head, CommitRef::parse);
    let commit = handle.graph().commit(handle.branch(), &at).await?;
    Ok(axum::Json(tables_json(&handle, &commit)).into_response())
}

/// The branch's head, its tables, index coverage and adjacency artifacts, and the
/// maintenance runs going on the graph.
#[utoipa::path(get, path = "/graphs/{graph}/status", params(super::schema::BranchParam, ("graph" = String, Path, description = "The served graph")),
    responses(
        (status = 200, description = "{root, branch, head, tables, indexes, adjacency, maintenance}"),
        (status = 401, description = "No token, or one not known"),
        (status = 403, description = "The token has no read role on the graph"),
        (status = 404, description = "No such graph or branch"),
    ))]
pub(crate) async fn status(
    extract::State(state): extract::State<State>,
    Path(graph): Path<String>,
    headers: HeaderMap,
    request: Request,
) -> Result<Response, ApiError> {
    let (served, _admitted) = state.admit(&headers, &graph, Role::Read)?;
    let params: super::schema::BranchParam = query_params(request.uri())?;
    let handle = served.handle(params.branch.as_deref()).await?;
    let mut document = Status::read(&handle).await?.json(&handle);
    let runs: Vec<serde_json::Value> = state
        .runs
        .running()
        .iter()
        .filter(|run| run.graph() == graph)
        .map(|run| run.json())
        .collect();
    document["maintenance"] = serde_json::json!(runs);
    Ok(axum::Json(document).into_response())
}
