//! The maintenance routes: start optimize or cleanup (a request for the operation
//! already running joins it), a run's status, and cancel. A run goes on in a task of its
//! own; `?wait=true` holds the request until it ends, and a cancelled run answers its
//! waiters 503 with its evidence.

use super::{Shared, State, json_body, query_params};
use crate::error::{ApiError, retry_later};
use crate::graphs::ServedGraph;
use crate::runs::{Operation, Outcome, Run, Start};
use crate::tokens::Role;
use axum::extract::{self, Path, Request};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use omnigraph_maintenance::{CleanupOptions, CleanupSettings};
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// How to answer a start or status request.
#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub(crate) struct WaitParams {
    /// Hold the request until the run ends, and answer with its outcome.
    #[serde(default)]
    wait: bool,
}

/// The response for a run: 202 while it goes on, its outcome's status when waited for.
async fn answer(run: Arc<Run>, joined: Option<bool>, wait: bool) -> Response {
    let outcome = match wait {
        true => Some(run.finished().await),
        false => None,
    };
    let mut document = run.json();
    if let Some(joined) = joined {
        document["joined"] = json!(joined);
    }
    let status = match outcome {
        None if joined.is_some() => StatusCode::ACCEPTED,
        None => StatusCode::OK,
        Some(Outcome::Finished { .. }) => StatusCode::OK,
        Some(Outcome::Failed { status, .. }) => {
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
        }
    };
    let mut response = (status, axum::Json(document)).into_response();
    if status == StatusCode::SERVICE_UNAVAILABLE {
        retry_later(&mut response);
    }
    response
}

/// Where a run goes.
#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub(crate) struct StartParams {
    /// Hold the request until the run ends, and answer with its outcome.
    #[serde(default)]
    wait: bool,
    /// The branch whose head the run publishes to (default `main`).
    branch: Option<String>,
}

/// Starts optimize on the graph, or joins the one going.
#[utoipa::path(post, path = "/graphs/{graph}/maintenance/optimize", params(StartParams, ("graph" = String, Path, description = "The served graph")),
    responses(
        (status = 202, description = "The run: {id, state, progress, joined}"),
        (status = 200, description = "With wait: the run ended; its report"),
        (status = 401, description = "No token, or one not known"),
        (status = 403, description = "The token has no maintain role on the graph"),
        (status = 404, description = "No such graph or branch"),
        (status = 503, description = "With wait: the run was cancelled (maintenance_cancelled, with its evidence)"),
    ))]
pub(crate) async fn optimize(
    extract::State(state): extract::State<State>,
    Path(graph): Path<String>,
    headers: HeaderMap,
    request: Request,
) -> Result<Response, ApiError> {
    let (served, _admitted) = state.admit(&headers, &graph, Role::Maintain)?;
    let params: StartParams = query_params(request.uri())?;
    start(&state, &served, graph, params, Operation::Optimize, None).await
}

/// Starts `operation` on the branch `params` names, or joins the same run going, and
/// answers with the run.
async fn start(
    state: &Shared,
    served: &ServedGraph,
    graph: String,
    params: StartParams,
    operation: Operation,
    cleanup: Option<CleanupOptions>,
) -> Result<Response, ApiError> {
    let handle = served.handle(params.branch.as_deref()).await?;
    let start = Start {
        graph,
        branch: handle.branch().to_owned(),
        operation,
        cleanup,
    };
    let (run, joined) = state.runs.start(start, handle);
    Ok(answer(run, Some(joined), params.wait).await)
}

/// What cleanup keeps and whether it deletes.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CleanupBody {
    /// Keep the newest N commits of each branch readable.
    keep: Option<u64>,
    /// Keep commits younger than this many seconds readable.
    older_than_seconds: Option<u64>,
    /// Keep every commit and file younger than this many seconds (default 24 h, at
    /// least 60).
    grace_seconds: Option<u64>,
    /// Delete; without it the run only reports what it would delete.
    #[serde(default)]
    confirm: bool,
}

/// Starts cleanup (a preview unless `confirm`), or joins the one going.
#[utoipa::path(post, path = "/graphs/{graph}/maintenance/cleanup", request_body = CleanupBody, params(StartParams, ("graph" = String, Path, description = "The served graph")),
    responses(
        (status = 202, description = "The run: {id, state, progress, joined}"),
        (status = 200, description = "With wait: the run ended; its report"),
        (status = 400, description = "A malformed body or policy"),
        (status = 401, description = "No token, or one not known"),
        (status = 403, description = "The token has no maintain role on the graph"),
        (status = 404, description = "No such graph or branch"),
        (status = 503, description = "With wait: the run was cancelled (maintenance_cancelled, with its evidence)"),
    ))]
pub(crate) async fn cleanup(
    extract::State(state): extract::State<State>,
    Path(graph): Path<String>,
    headers: HeaderMap,
    request: Request,
) -> Result<Response, ApiError> {
    let (served, _admitted) = state.admit(&headers, &graph, Role::Maintain)?;
    let params: StartParams = query_params(request.uri())?;
    let body: CleanupBody = json_body(&state, request).await?;
    let options = CleanupSettings {
        keep: body.keep,
        older_than: body.older_than_seconds.map(Duration::from_secs),
        grace: body.grace_seconds.map(Duration::from_secs),
        lower_grace: false,
    }
    .options()?;
    let operation = match body.confirm {
        true => Operation::Cleanup,
        false => Operation::CleanupPreview,
    };
    start(&state, &served, graph, params, operation, Some(options)).await
}

/// A run's state, progress and, once it ended, its report or error.
#[utoipa::path(get, path = "/graphs/{graph}/maintenance/runs/{run}", params(WaitParams,
        ("graph" = String, Path, description = "The served graph"), ("run" = String, Path, description = "The run's id")),
    responses(
        (status = 200, description = "The run"),
        (status = 401, description = "No token, or one not known"),
        (status = 403, description = "The token has no read role on the graph"),
        (status = 404, description = "No such graph or run"),
        (status = 503, description = "With wait: the run was cancelled"),
    ))]
pub(crate) async fn run(
    extract::State(state): extract::State<State>,
    Path((graph, id)): Path<(String, String)>,
    headers: HeaderMap,
    request: Request,
) -> Result<Response, ApiError> {
    let (_served, _admitted) = state.admit(&headers, &graph, Role::Read)?;
    let params: WaitParams = query_params(request.uri())?;
    let run = state.runs.find(&graph, &id)?;
    Ok(answer(run, None, params.wait).await)
}

/// Cancels a run at its next cancel point; every maintenance run waiting on the
/// graph's root ends too (they share its lane), each with its evidence.
#[utoipa::path(post, path = "/graphs/{graph}/maintenance/runs/{run}/cancel", params(WaitParams,
        ("graph" = String, Path, description = "The served graph"), ("run" = String, Path, description = "The run's id")),
    responses(
        (status = 200, description = "The run, cancelling (or already ended)"),
        (status = 401, description = "No token, or one not known"),
        (status = 403, description = "The token has no maintain role on the graph"),
        (status = 404, description = "No such graph or run"),
        (status = 503, description = "With wait: the run ended cancelled, with its evidence"),
    ))]
pub(crate) async fn cancel(
    extract::State(state): extract::State<State>,
    Path((graph, id)): Path<(String, String)>,
    headers: HeaderMap,
    request: Request,
) -> Result<Response, ApiError> {
    let (_served, _admitted) = state.admit(&headers, &graph, Role::Maintain)?;
    let params: WaitParams = query_params(request.uri())?;
    let run = state.runs.find(&graph, &id)?;
    run.cancel();
    Ok(answer(run, None, params.wait).await)
}
