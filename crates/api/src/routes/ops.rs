//! Operations: `/v1/health` (the process answers), `/v1/openapi.json` and `/metrics` (loopback
//! only, undocumented publicly; `/v1/ready` is [`super::ready`]).

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use crate::AppState;

#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    #[schema(example = "ok")]
    pub status: String,
    pub service: String,
    pub version: String,
}

/// The process is up and serving (no dependency checked; see `/v1/ready`).
#[utoipa::path(get, path = "/v1/health", tag = "ops", responses((status = 200, body = Health)))]
pub async fn health() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        service: crate::SERVICE.into(),
        version: env!("CARGO_PKG_VERSION").into(),
    })
}

/// This document.
#[utoipa::path(get, path = "/v1/openapi.json", tag = "ops",
    responses((status = 200, description = "the OpenAPI 3.1 document", content_type = "application/json")))]
pub async fn openapi_json() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        super::openapi_json(),
    )
        .into_response()
}

/// The AsyncAPI 3.0 document of the WebSocket `/v1/ws` (every frame's schema).
#[utoipa::path(get, path = "/v1/asyncapi.json", tag = "ops",
    responses((status = 200, description = "the AsyncAPI 3.0 document of `/v1/ws`", content_type = "application/json")))]
pub async fn asyncapi_json() -> Json<&'static serde_json::Value> {
    Json(super::events::asyncapi())
}

/// Prometheus text exposition (`pmw_api_http_requests_total`, …), on the loopback listener
/// only: Caddy answers 404 for `/metrics`, so it is not in the public document. Each scrape also
/// reads the shared readiness verdict (at most one evaluation per interval) and exports it (`pmw_api_ready`, `pmw_api_ready_check{check}`,
/// …): the alert rules see readiness without a blackbox prober.
pub async fn metrics(State(st): State<AppState>) -> Response {
    super::ready::metrics::export(&*st.ready.get(&st).await);
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        pmw_core::metrics::render(),
    )
        .into_response()
}
