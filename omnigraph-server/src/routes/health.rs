//! Liveness, readiness and the OpenAPI document: no token needed.

use super::State;
use axum::extract;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Alive: the process answers.
#[utoipa::path(get, path = "/healthz", responses((status = 200, description = "The process answers")))]
pub(crate) async fn healthz() -> Response {
    axum::Json(json!({"status": "ok"})).into_response()
}

/// Ready: every served graph's head can be read now.
#[utoipa::path(get, path = "/readyz", responses(
    (status = 200, description = "Every graph's head was read"),
    (status = 503, description = "A graph's head could not be read, or the server is shutting down"),
))]
pub(crate) async fn readyz(extract::State(state): extract::State<State>) -> Response {
    let mut graphs = serde_json::Map::new();
    let mut ready = !state
        .shutting_down
        .load(std::sync::atomic::Ordering::SeqCst);
    for (name, graph) in &state.graphs {
        let document = match graph.main().head().await {
            Ok(head) => json!({"ready": true, "seq": head.seq}),
            // The code only: this route takes no token, so it names no paths.
            Err(error) => {
                ready = false;
                json!({"ready": false, "code": error.code().code})
            }
        };
        graphs.insert(name.clone(), document);
    }
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        axum::Json(json!({"ready": ready, "graphs": graphs})),
    )
        .into_response()
}

/// The OpenAPI document of every route.
#[utoipa::path(get, path = "/openapi.json", responses((status = 200, description = "The OpenAPI 3.1 document")))]
pub(crate) async fn openapi() -> Response {
    axum::Json(crate::openapi::document()).into_response()
}
