//! A failed request as a response: the engine's error table gives the code and status of
//! every engine error; the server adds its own (401, 403, 405, 406, 408, 413, 429, a
//! query past its time (503) or its answer's size (422), shutting down (503)). Every body is `{"error": {code, message, evidence, ...}}`, the
//! document the CLI prints with `--json`.

use crate::tokens::Role;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use omnigraph_core::{Evidence, OmniError};
use serde_json::{Value, json};
use std::time::Duration;

/// Why a request failed.
#[derive(Debug)]
pub(crate) enum ApiError {
    /// The engine refused or failed: its code and status come from the error table.
    /// Shared: one failure of a group commit answers every request of its round.
    Engine(std::sync::Arc<OmniError>),
    /// No bearer token, or one the tokens file does not hold.
    Unauthorized(&'static str),
    /// The token's role on this graph does not allow the route.
    Forbidden {
        graph: String,
        needed: Role,
        held: Option<Role>,
    },
    /// A body past its limit; nothing was done.
    TooLarge { limit: u64 },
    /// The client took longer than the request time to send its body.
    BodyTimedOut,
    /// The token has as many requests in flight as it may.
    TooManyRequests { limit: usize },
    /// The token made as many requests in the last second as it may.
    RateExceeded { per_second: u32 },
    /// A query ran past the query time; it was stopped.
    QueryTimeExceeded(Duration),
    /// A query's rows took more memory than the server holds for one answer; it was
    /// stopped.
    ResultTooLarge { limit: usize },
    /// A write's idempotency key landed already on its branch, in commit `seq`, for
    /// another request (another route or body); nothing was done.
    KeyReused { seq: u64 },
    /// The server is shutting down and takes no new work.
    ShuttingDown,
    /// The client asked for a response type the route does not give.
    NotAcceptable(String),
    /// The path is a route, the method is not one of its.
    MethodNotAllowed,
}

impl From<OmniError> for ApiError {
    fn from(error: OmniError) -> ApiError {
        ApiError::Engine(std::sync::Arc::new(error))
    }
}

impl From<std::sync::Arc<OmniError>> for ApiError {
    fn from(error: std::sync::Arc<OmniError>) -> ApiError {
        ApiError::Engine(error)
    }
}

/// The document of an engine error: its code, message and evidence, and where a query
/// went wrong or which merge conflicts there were, for a tool to act on.
pub(crate) fn engine_document(error: &OmniError) -> Value {
    let code = error.code();
    let mut document = json!({
        "code": code.code,
        "message": error.to_string(),
        "evidence": error.evidence(),
        "exit_code": code.exit_code,
    });
    if let OmniError::BadQuery {
        refusal,
        line,
        column,
        ..
    } = error
    {
        document["query"] = json!({"refusal": refusal.name(), "line": line, "column": column});
    }
    if let OmniError::QueryFailed { reason, .. } = error {
        document["query"] = json!({"failure": reason.name()});
    }
    if let OmniError::MergeConflict { conflicts, .. } = error {
        document["conflicts"] = json!(conflicts);
    }
    document
}

impl ApiError {
    /// The HTTP status.
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            ApiError::Engine(error) => StatusCode::from_u16(error.code().http_status)
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden { .. } => StatusCode::FORBIDDEN,
            ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BodyTimedOut => StatusCode::REQUEST_TIMEOUT,
            ApiError::TooManyRequests { .. } | ApiError::RateExceeded { .. } => {
                StatusCode::TOO_MANY_REQUESTS
            }
            ApiError::QueryTimeExceeded(_) | ApiError::ShuttingDown => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ApiError::ResultTooLarge { .. } | ApiError::KeyReused { .. } => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            ApiError::NotAcceptable(_) => StatusCode::NOT_ACCEPTABLE,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        }
    }

    /// The stable code in the body.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            ApiError::Engine(error) => error.code().code,
            ApiError::Unauthorized(_) => "unauthorized",
            ApiError::Forbidden { .. } => "forbidden",
            ApiError::TooLarge { .. } => "body_too_large",
            ApiError::BodyTimedOut => "body_timed_out",
            ApiError::TooManyRequests { .. } | ApiError::RateExceeded { .. } => "too_many_requests",
            ApiError::QueryTimeExceeded(_) => "query_time_exceeded",
            ApiError::ResultTooLarge { .. } => "result_too_large",
            ApiError::KeyReused { .. } => "idempotency_key_reused",
            ApiError::ShuttingDown => "shutting_down",
            ApiError::NotAcceptable(_) => "not_acceptable",
            ApiError::MethodNotAllowed => "method_not_allowed",
        }
    }

    /// Whether the client may retry after [`RETRY_AFTER_SECONDS_MAX`](crate::limits::RETRY_AFTER_SECONDS_MAX).
    fn retryable(&self) -> bool {
        match self {
            ApiError::TooManyRequests { .. }
            | ApiError::RateExceeded { .. }
            | ApiError::ShuttingDown => true,
            ApiError::Engine(error) => error.code().exit_code == omnigraph_core::EXIT_TEMPORARY,
            _ => false,
        }
    }

    /// The body's document.
    pub(crate) fn document(&self) -> Value {
        if let ApiError::Engine(error) = self {
            return engine_document(error);
        }
        let message = match self {
            ApiError::Engine(_) => unreachable!("handled above"),
            ApiError::Unauthorized(why) => (*why).to_owned(),
            ApiError::Forbidden {
                graph,
                needed,
                held,
            } => match held {
                Some(held) => format!(
                    "the route needs the {needed} role on graph {graph:?}; the token has {held}"
                ),
                None => format!(
                    "the route needs the {needed} role on graph {graph:?}; the token has no role on it"
                ),
            },
            ApiError::TooLarge { limit } => {
                format!("the body is larger than the server's limit of {limit} bytes")
            }
            ApiError::BodyTimedOut => {
                "the client did not send its body within the request time".to_owned()
            }
            ApiError::TooManyRequests { limit } => format!(
                "the token has {limit} requests in flight, its limit; retry after the Retry-After seconds"
            ),
            ApiError::RateExceeded { per_second } => format!(
                "the token made {per_second} requests in the last second, its limit; retry after the Retry-After seconds"
            ),
            ApiError::QueryTimeExceeded(limit) => format!(
                "the query ran longer than the server's query time of {:.1} s and was stopped",
                limit.as_secs_f64()
            ),
            ApiError::ResultTooLarge { limit } => format!(
                "the query's rows take more than the server's limit of {limit} bytes for one answer; \
                 add a LIMIT, page with SKIP and LIMIT, or read a whole type with the export route"
            ),
            ApiError::KeyReused { seq } => format!(
                "the idempotency key landed already on this branch, in commit {seq}, for \
                 another request (another route or body); a key names one logical write: \
                 send a new write with a new key"
            ),
            ApiError::ShuttingDown => "the server is shutting down".to_owned(),
            ApiError::NotAcceptable(what) => what.clone(),
            ApiError::MethodNotAllowed => {
                "the route does not take this method (see /openapi.json)".to_owned()
            }
        };
        // The server's own refusals come before any effect.
        json!({
            "code": self.code(),
            "message": message,
            "evidence": Evidence::BeforeEffect,
        })
    }
}

/// Tells the client to retry after [`RETRY_AFTER_SECONDS_MAX`](crate::limits::RETRY_AFTER_SECONDS_MAX).
pub(crate) fn retry_later(response: &mut Response) {
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(crate::limits::RETRY_AFTER_SECONDS_MAX),
    );
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut response =
            (status, axum::Json(json!({ "error": self.document() }))).into_response();
        if self.retryable() {
            retry_later(&mut response);
        }
        response
    }
}
