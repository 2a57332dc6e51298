//! The schema routes: the schema in force, and a move to a new one.

use super::writes::{answer, write_request};
use super::{State, json_body, query_params};
use crate::error::ApiError;
use crate::idempotency::{Fingerprint, fingerprinted};
use crate::tokens::Role;
use crate::view::{catalog_json, commit_json};
use axum::extract::{self, Path, Request};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use omnigraph_graph::SchemaApplyReport;
use serde::Deserialize;
use serde_json::json;

/// Which branch to read.
#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub(crate) struct BranchParam {
    /// The branch (default `main`).
    pub(crate) branch: Option<String>,
}

/// The schema in force at the branch's head.
#[utoipa::path(get, path = "/graphs/{graph}/schema", params(BranchParam, ("graph" = String, Path, description = "The served graph")),
    responses(
        (status = 200, description = "{seq, schema}: the head's seq and the catalog (hash, types, columns, indexes)"),
        (status = 401, description = "No token, or one not known"),
        (status = 403, description = "The token has no read role on the graph"),
        (status = 404, description = "No such graph or branch"),
    ))]
pub(crate) async fn show(
    extract::State(state): extract::State<State>,
    Path(graph): Path<String>,
    headers: HeaderMap,
    request: Request,
) -> Result<Response, ApiError> {
    let (served, _admitted) = state.admit(&headers, &graph, Role::Read)?;
    let params: BranchParam = query_params(request.uri())?;
    let handle = served.handle(params.branch.as_deref()).await?;
    let head = handle.head().await?;
    let catalog = handle.catalog_at(&head).await?;
    Ok(axum::Json(json!({"seq": head.seq, "schema": catalog_json(&catalog)})).into_response())
}

/// A schema to move to.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApplyBody {
    /// The `.pg` schema text.
    schema: String,
    /// Allow changes that lose data.
    #[serde(default)]
    force: bool,
    /// The branch (default `main`).
    branch: Option<String>,
}

/// Moves the branch to a new schema, in one commit.
#[utoipa::path(post, path = "/graphs/{graph}/schema", request_body = ApplyBody,
    params(("graph" = String, Path, description = "The served graph")),
    responses(
        (status = 200, description = "{commit, changes}: the commit (null when nothing changed) and the changes"),
        (status = 400, description = "A malformed body or schema (bad_input naming line and column)"),
        (status = 401, description = "No token, or one not known"),
        (status = 403, description = "The token has no admin role on the graph"),
        (status = 404, description = "No such graph or branch"),
        (status = 422, description = "A change that loses data without force (schema_violation), or an Idempotency-Key that landed already on the branch for another request (idempotency_key_reused); nothing was done"),
    ))]
pub(crate) async fn apply(
    extract::State(state): extract::State<State>,
    Path(graph): Path<String>,
    headers: HeaderMap,
    request: Request,
) -> Result<Response, ApiError> {
    let (served, admitted) = state.admit(&headers, &graph, Role::Admin)?;
    let serving = write_request(&headers, &admitted)?;
    let body: ApplyBody = json_body(&state, request).await?;
    let handle = served.handle(body.branch.as_deref()).await?;
    let serving = fingerprinted(serving, || {
        let settings = json!({"force": body.force, "branch": handle.branch()});
        Fingerprint::of_json("schema apply", &settings, &body.schema)
    });
    omnigraph_core::schema::parse("request body", &body.schema)?;
    let written = state
        .writes
        .run(
            &graph,
            handle,
            serving,
            admitted,
            |report: &SchemaApplyReport| report.commit.as_ref(),
            move |handle| {
                Box::pin(async move { handle.apply_schema(&body.schema, body.force).await })
            },
        )
        .await?;
    Ok(answer(written, |report| {
        json!({
            "commit": report.commit.as_ref().map(commit_json),
            "changes": report.changes,
        })
    }))
}
