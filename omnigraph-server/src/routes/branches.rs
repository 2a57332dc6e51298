//! The branch routes: list, create, delete, merge (with a dry run).

use super::writes::{answer, write_request};
use super::{State, json_body};
use crate::auth::Admitted;
use crate::error::ApiError;
use crate::idempotency::{Fingerprint, fingerprinted, the_commit};
use crate::tokens::Role;
use crate::view::{BranchView, commit_json, merge_json};
use axum::extract::{self, Path, Request};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use omnigraph_graph::MergeReport;
use omnigraph_publish::CommitRef;
use omnigraph_publish::request::WriteRequest;
use serde::Deserialize;
use serde_json::json;

/// A write that takes no idempotency key (a branch's own records do not carry one).
fn unkeyed(admitted: &Admitted) -> WriteRequest {
    WriteRequest {
        actor: Some(admitted.actor.clone()),
        idempotency_keys: Vec::new(),
        idempotency_fingerprints: Vec::new(),
    }
}

/// The live branches: each one's head, fork point and age.
#[utoipa::path(get, path = "/graphs/{graph}/branches",
    params(("graph" = String, Path, description = "The served graph")),
    responses(
        (status = 200, description = "{branches}"),
        (status = 401, description = "No token, or one not known"),
        (status = 403, description = "The token has no read role on the graph"),
        (status = 404, description = "No such graph"),
    ))]
pub(crate) async fn list(
    extract::State(state): extract::State<State>,
    Path(graph): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (served, _admitted) = state.admit(&headers, &graph, Role::Read)?;
    let branches = served.main().list_branches().await?;
    let views: Vec<BranchView<'_>> = branches.iter().map(BranchView::of).collect();
    Ok(axum::Json(json!({"branches": views})).into_response())
}

/// A branch to create.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateBody {
    /// The new branch's name.
    name: String,
    /// The branch to create it from (default `main`).
    from: Option<String>,
    /// A commit seq or id of `from` (default: its head).
    at: Option<String>,
}

/// Creates a branch from a commit: no data is copied.
#[utoipa::path(post, path = "/graphs/{graph}/branches", request_body = CreateBody,
    params(("graph" = String, Path, description = "The served graph")),
    responses(
        (status = 200, description = "{branch, commit}: the branch's first commit"),
        (status = 400, description = "A malformed body or branch name"),
        (status = 401, description = "No token, or one not known"),
        (status = 403, description = "The token has no write role on the graph"),
        (status = 404, description = "No such graph, branch or commit"),
        (status = 409, description = "The branch exists already (branch_exists)"),
    ))]
pub(crate) async fn create(
    extract::State(state): extract::State<State>,
    Path(graph): Path<String>,
    headers: HeaderMap,
    request: Request,
) -> Result<Response, ApiError> {
    let (served, admitted) = state.admit(&headers, &graph, Role::Write)?;
    let body: CreateBody = json_body(&state, request).await?;
    let from = served.handle(body.from.as_deref()).await?;
    let at = body.at.as_deref().map_or(CommitRef::Head, CommitRef::parse);
    let written = state
        .writes
        .run(
            &graph,
            from,
            unkeyed(&admitted),
            admitted,
            the_commit,
            move |from| Box::pin(async move { from.create_branch(&body.name, &at).await }),
        )
        .await?;
    Ok(answer(
        written,
        |first| json!({"branch": first.branch, "commit": commit_json(first)}),
    ))
}

/// Deletes a branch (never `main`); cleanup then reclaims what only it kept.
#[utoipa::path(delete, path = "/graphs/{graph}/branches/{branch}",
    params(("graph" = String, Path, description = "The served graph"), ("branch" = String, Path, description = "The branch to delete")),
    responses(
        (status = 200, description = "{branch, commit}: the commit that deleted it"),
        (status = 400, description = "A bad branch name, or main"),
        (status = 401, description = "No token, or one not known"),
        (status = 403, description = "The token has no admin role on the graph"),
        (status = 404, description = "No such graph or branch"),
    ))]
pub(crate) async fn delete(
    extract::State(state): extract::State<State>,
    Path((graph, branch)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (served, admitted) = state.admit(&headers, &graph, Role::Admin)?;
    omnigraph_publish::check_branch(&branch)?;
    let name = branch.clone();
    let written = state
        .writes
        .run(
            &graph,
            served.main(),
            unkeyed(&admitted),
            admitted,
            the_commit,
            move |main| Box::pin(async move { main.delete_branch(&name).await }),
        )
        .await?;
    served.forget(&branch).await;
    state.writes.forget(&graph, &branch);
    Ok(answer(
        written,
        |last| json!({"branch": branch, "commit": commit_json(last)}),
    ))
}

/// A merge.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct MergeBody {
    /// The branch to merge from.
    source: String,
    /// The branch to merge into (default `main`).
    into: Option<String>,
    /// Report what the merge would do, conflicts included, and change nothing.
    #[serde(default)]
    dry_run: bool,
}

/// Merges a branch into another: one commit, or the conflicts and nothing published.
#[utoipa::path(post, path = "/graphs/{graph}/merge", request_body = MergeBody,
    params(("graph" = String, Path, description = "The served graph")),
    responses(
        (status = 200, description = "The merge report: tables, conflicts (a dry run), commit"),
        (status = 400, description = "A malformed body or branch name"),
        (status = 401, description = "No token, or one not known"),
        (status = 403, description = "The token has no write role on the graph"),
        (status = 404, description = "No such graph or branch"),
        (status = 409, description = "Conflicts (merge_conflict, each one listed); nothing published"),
        (status = 422, description = "The Idempotency-Key landed already on the branch for another request (idempotency_key_reused); nothing was done"),
    ))]
pub(crate) async fn merge(
    extract::State(state): extract::State<State>,
    Path(graph): Path<String>,
    headers: HeaderMap,
    request: Request,
) -> Result<Response, ApiError> {
    let (served, admitted) = state.admit(&headers, &graph, Role::Write)?;
    let serving = write_request(&headers, &admitted)?;
    let body: MergeBody = json_body(&state, request).await?;
    omnigraph_publish::check_branch(&body.source)?;
    let into = served.handle(body.into.as_deref()).await?;
    let serving = fingerprinted(serving, || {
        let settings = json!({"into": into.branch(), "dry_run": body.dry_run});
        Fingerprint::of_json("merge", &settings, &body.source)
    });
    let dry_run = body.dry_run;
    let written = state
        .writes
        .run(
            &graph,
            into,
            serving,
            admitted,
            |report: &MergeReport| report.commit.as_ref(),
            move |into| {
                Box::pin(async move {
                    match dry_run {
                        true => into.merge_dry_run(&body.source).await,
                        false => into.merge(&body.source).await,
                    }
                })
            },
        )
        .await?;
    Ok(answer(written, |report| merge_json(report, dry_run)))
}
