//! The HTTP stack around the routes: the whole request body read first (so no rejection ever
//! leaves an unread body on a kept-alive connection, which a proxy would then reuse poisoned),
//! body size limit (413 in the error shape, connection closed), request metrics, panic → 500,
//! and the error shape for every non-JSON error response; requests without a key are limited per
//! client address right after the body is read ([`crate::auth::anonymous_limit`]).

use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use futures::StreamExt;
use tower_http::catch_panic::CatchPanicLayer;

use crate::error::{error_shape, ApiError};
use crate::{routes, AppState, SERVICE};

/// Past the limit, a body is still read and dropped up to this many bytes (so the 413 reaches a
/// client or proxy that is still sending); beyond it the connection is closed.
const DRAIN_MAX_BYTES: usize = 4 << 20;
/// Reading a request body (or draining an oversized one) gives up after this long.
const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// The complete application.
pub fn app(state: AppState) -> Router {
    let limit = state.cfg.api_max_body_bytes;
    let (router, _) = routes::router().split_for_parts();
    router
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            crate::idempotency::idempotency,
        ))
        // Operators' Prometheus endpoint: on the loopback listener only (Caddy answers 404 for
        // it), so not in the public document.
        .route("/metrics", get(routes::metrics))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(limit))
        .layer(CatchPanicLayer::new())
        .layer(middleware::map_response(error_shape))
        // After the body is read (a refusal leaves nothing unread on the connection).
        .layer(middleware::from_fn_with_state(
            state.clone(),
            crate::auth::anonymous_limit,
        ))
        .layer(middleware::from_fn_with_state(state.clone(), read_body))
        .layer(middleware::from_fn(track))
        .with_state(state)
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such route")
}

/// Read the whole body before routing: handlers and extractors then reject early without
/// leaving bytes on the connection. Too large → 413 and `Connection: close`; a body that breaks
/// off or stalls → 400 and `Connection: close`.
async fn read_body(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let limit = st.cfg.api_max_body_bytes;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let (parts, body) = req.into_parts();
    // Declared too large: answer before reading (a client sending `Expect: 100-continue` never
    // sends it); otherwise drain what arrives, within bounds.
    if declared.is_some_and(|n| n > limit as u64) {
        if declared.is_some_and(|n| n <= DRAIN_MAX_BYTES as u64) {
            drain(body, DRAIN_MAX_BYTES).await;
        }
        return closing(ApiError::too_large());
    }
    let mut stream = body.into_data_stream();
    let mut buf: Vec<u8> = Vec::new();
    let deadline = tokio::time::Instant::now() + BODY_TIMEOUT;
    loop {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(None) => break,
            Ok(Some(Ok(chunk))) => {
                if buf.len() + chunk.len() > limit {
                    drain(Body::from_stream(stream), DRAIN_MAX_BYTES).await;
                    return closing(ApiError::too_large());
                }
                buf.extend_from_slice(&chunk);
            }
            Ok(Some(Err(_))) | Err(_) => {
                return closing(ApiError::bad_request(
                    "invalid_body",
                    "the request body could not be read completely",
                ))
            }
        }
    }
    next.run(Request::from_parts(parts, Body::from(Bytes::from(buf))))
        .await
}

/// Read and drop up to `max` bytes of a body (bounded in time).
async fn drain(body: Body, max: usize) {
    let mut stream = body.into_data_stream();
    let mut seen = 0usize;
    let deadline = tokio::time::Instant::now() + BODY_TIMEOUT;
    while let Ok(Some(Ok(chunk))) = tokio::time::timeout_at(deadline, stream.next()).await {
        seen += chunk.len();
        if seen > max {
            return;
        }
    }
}

/// An error response after which the connection is closed.
fn closing(err: ApiError) -> Response {
    let mut resp = err.into_response();
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
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
