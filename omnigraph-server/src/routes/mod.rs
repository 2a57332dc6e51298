//! The routes: one table ([`ROUTES`]) builds the router and is what the OpenAPI test
//! compares the document with, so a route cannot be served without being documented.
//! A handler admits the request (token, role, slot) before it reads anything.

pub(crate) mod branches;
pub(crate) mod export;
pub(crate) mod health;
pub(crate) mod history;
pub(crate) mod maintenance;
pub(crate) mod query;
pub(crate) mod schema;
pub(crate) mod writes;

use crate::auth::{Admitted, Authenticator};
use crate::error::ApiError;
use crate::graphs::ServedGraph;
use crate::limits::{ERROR_CHAIN_DEPTH_MAX, Limits};
use crate::runs::Runs;
use crate::tokens::Role;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, header};
use bytes::BytesMut;
use futures::StreamExt;
use omnigraph_core::{InputLocation, OmniError};
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// What every handler shares.
pub(crate) struct Shared {
    pub(crate) graphs: BTreeMap<String, Arc<ServedGraph>>,
    pub(crate) auth: Authenticator,
    pub(crate) runs: Runs,
    pub(crate) writes: Arc<crate::idempotency::Writes>,
    pub(crate) limits: Limits,
    pub(crate) shutting_down: AtomicBool,
}

pub(crate) type State = Arc<Shared>;

impl Shared {
    /// Admits a request for `needed` on graph `name`: 401 or 403 or 429 from the
    /// token, then 404 when no graph has that name, 503 while shutting down.
    pub(crate) fn admit(
        &self,
        headers: &HeaderMap,
        name: &str,
        needed: Role,
    ) -> Result<(Arc<ServedGraph>, Admitted), ApiError> {
        let admitted = self.auth.admit(headers, name, needed)?;
        let graph = self
            .graphs
            .get(name)
            .cloned()
            .ok_or_else(|| OmniError::not_found(format!("graph {name:?}")))?;
        if self.shutting_down.load(Ordering::SeqCst) && needed > Role::Read {
            return Err(ApiError::ShuttingDown);
        }
        Ok((graph, admitted))
    }
}

/// Reads a request's body whole, within `limit` bytes: past it 413 (a declared length
/// is refused before a byte is read), too slow 408.
pub(crate) async fn read_body(
    body: Body,
    headers: &HeaderMap,
    limit: usize,
) -> Result<Bytes, ApiError> {
    if declared_length(headers).is_some_and(|length| length > limit as u64) {
        return Err(ApiError::TooLarge {
            limit: limit as u64,
        });
    }
    let mut stream = body.into_data_stream();
    let mut buffer = BytesMut::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|error| chunk_error(&error))?;
        if buffer.len() + chunk.len() > limit {
            return Err(ApiError::TooLarge {
                limit: limit as u64,
            });
        }
        buffer.extend_from_slice(&chunk);
    }
    Ok(buffer.freeze())
}

/// The body's declared length, when the client gave one.
pub(crate) fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// Why a chunk of a body could not be read: the client was too slow (408), or the
/// connection broke.
pub(crate) fn chunk_error(error: &axum::Error) -> ApiError {
    if is_body_timeout(error) {
        return ApiError::BodyTimedOut;
    }
    ApiError::from(OmniError::bad_input(
        InputLocation::in_source("request body"),
        format!("cannot read the body: {error}"),
    ))
}

/// A JSON body, read within the server's limit and parsed into `T`; one that does not
/// parse is `bad_input` naming its line and column.
pub(crate) async fn json_body<T: DeserializeOwned>(
    state: &Shared,
    request: Request,
) -> Result<T, ApiError> {
    let (parts, body) = request.into_parts();
    let bytes = read_body(body, &parts.headers, state.limits.request_body_bytes).await?;
    serde_json::from_slice(&bytes).map_err(|error| {
        ApiError::from(OmniError::bad_input(
            InputLocation::in_source("request body").at(error.line() as u64, error.column() as u64),
            format!("not the JSON this route takes: {error}"),
        ))
    })
}

/// The query string parsed into `T`; one that does not parse is `bad_input`.
pub(crate) fn query_params<T: DeserializeOwned>(uri: &axum::http::Uri) -> Result<T, ApiError> {
    let text = uri.query().unwrap_or_default();
    axum::extract::Query::<T>::try_from_uri(uri)
        .map(|query| query.0)
        .map_err(|rejection| {
            ApiError::from(OmniError::bad_input(
                InputLocation::in_source("query string").field(text),
                rejection.body_text(),
            ))
        })
}

/// The media types an `Accept` header names, without their parameters; `None` without
/// a readable header (the client takes anything).
pub(crate) fn accepted(headers: &HeaderMap) -> Option<Vec<&str>> {
    // A header that is not text names no type: as if absent.
    let accept = headers.get(header::ACCEPT)?.to_str().ok()?;
    Some(
        accept
            .split(',')
            .map(|part| part.split(';').next().unwrap_or_default().trim())
            .collect(),
    )
}

/// Names the commit an answer reads in its headers, for a body (Arrow, JSON lines)
/// that cannot carry it.
pub(crate) fn commit_headers(headers: &mut HeaderMap, seq: u64, commit_id: &str) {
    headers.insert("x-omnigraph-seq", HeaderValue::from(seq));
    if let Ok(value) = HeaderValue::from_str(commit_id) {
        headers.insert("x-omnigraph-commit-id", value);
    }
}

/// A failure to write rows as Arrow IPC: the rows were read, so it is ours.
pub(crate) fn arrow_failed(error: arrow::error::ArrowError) -> OmniError {
    OmniError::internal(format!("encoding rows as Arrow IPC: {error}"))
}

/// Whether reading the body failed because the client was too slow to send it.
pub(crate) fn is_body_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(error);
    let mut depth = 0;
    // The chain is short; the bound keeps a cyclic one from spinning.
    while let Some(error) = source
        && depth < ERROR_CHAIN_DEPTH_MAX
    {
        if error.is::<tower_http::timeout::TimeoutError>() {
            return true;
        }
        source = error.source();
        depth += 1;
    }
    false
}

/// A path that is no route: 404 with the error document every route gives.
async fn no_route(uri: axum::http::Uri) -> ApiError {
    ApiError::from(OmniError::not_found(format!("route {}", uri.path())))
}

/// A route asked with a method it does not take: 405 with the error document.
async fn no_method() -> ApiError {
    ApiError::MethodNotAllowed
}

/// Declares every route once: the router and [`ROUTES`] come from the same list.
macro_rules! routes {
    ($($method:ident $path:literal => $handler:path),* $(,)?) => {
        /// Every route the server serves, as (method, path) in OpenAPI's spelling.
        pub(crate) const ROUTES: &[(&str, &str)] = &[$((stringify!($method), $path)),*];

        /// The router of every route in [`ROUTES`].
        pub(crate) fn router(state: State) -> Router {
            Router::new()
                $(.route($path, axum::routing::$method($handler)))*
                .fallback(no_route)
                .method_not_allowed_fallback(no_method)
                .with_state(state)
        }
    };
}

routes! {
    get "/healthz" => health::healthz,
    get "/readyz" => health::readyz,
    get "/openapi.json" => health::openapi,
    post "/graphs/{graph}/query" => query::query,
    get "/graphs/{graph}/export/{type}" => export::export,
    post "/graphs/{graph}/insert" => writes::insert,
    post "/graphs/{graph}/load" => writes::load,
    post "/graphs/{graph}/update" => writes::update,
    post "/graphs/{graph}/delete" => writes::delete,
    get "/graphs/{graph}/schema" => schema::show,
    post "/graphs/{graph}/schema" => schema::apply,
    get "/graphs/{graph}/branches" => branches::list,
    post "/graphs/{graph}/branches" => branches::create,
    delete "/graphs/{graph}/branches/{branch}" => branches::delete,
    post "/graphs/{graph}/merge" => branches::merge,
    get "/graphs/{graph}/commits" => history::commits,
    get "/graphs/{graph}/tables" => history::tables,
    get "/graphs/{graph}/status" => history::status,
    post "/graphs/{graph}/maintenance/optimize" => maintenance::optimize,
    post "/graphs/{graph}/maintenance/cleanup" => maintenance::cleanup,
    get "/graphs/{graph}/maintenance/runs/{run}" => maintenance::run,
    post "/graphs/{graph}/maintenance/runs/{run}/cancel" => maintenance::cancel,
}
