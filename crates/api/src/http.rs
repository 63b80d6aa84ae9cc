//! The HTTP stack around the routes: body size limit, request metrics, panic → 500, and the
//! error shape for every non-JSON error response.

use std::time::Instant;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;
use tower_http::catch_panic::CatchPanicLayer;

use crate::error::error_shape;
use crate::{routes, AppState, SERVICE};

/// The complete application.
pub fn app(state: AppState) -> Router {
    let limit = state.cfg.api_max_body_bytes;
    let (router, _) = routes::router().split_for_parts();
    router
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(limit))
        .layer(CatchPanicLayer::new())
        .layer(middleware::map_response(error_shape))
        .layer(middleware::from_fn(track))
        .with_state(state)
}

async fn not_found() -> crate::error::ApiError {
    crate::error::ApiError::not_found("no such route")
}

/// Count and time every request by its route template.
async fn track(req: Request, next: Next) -> Response {
    let start = Instant::now();
    let method = req.method().to_string();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".into());
    let resp = next.run(req).await;
    let status = resp.status().as_u16();
    pmw_core::metrics::http_request(SERVICE, &method, &route, status, start.elapsed());
    if status >= 500 {
        tracing::warn!(%method, %route, status, "request failed");
    }
    resp
}
