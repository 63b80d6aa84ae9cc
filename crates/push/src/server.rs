//! The leader's HTTP side on the push port: `/v1/ws` (sessions) and `/health` (200 only while
//! the last round is fresh), with small kernel send buffers per connection.

use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use pmw_core::UnixMs;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::AppState;
use pmw_session::ws;

/// Serve until `stop` (graceful: no new connections, open ones end with their sessions).
pub(crate) fn spawn(
    listener: TcpListener,
    state: AppState,
    stop: CancellationToken,
) -> JoinHandle<std::io::Result<()>> {
    let app = Router::new()
        .route("/v1/ws", get(ws::upgrade))
        .route("/health", get(health))
        .with_state(state);
    let listener = pmw_session::listen::tuned(listener);
    tokio::spawn(async move {
        // Peers for the failure throttle's client address (`ws::upgrade`).
        let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await
    })
}

async fn health(State(st): State<AppState>) -> impl IntoResponse {
    let last = st.health.last_round_ms.load(Ordering::Relaxed);
    let age = UnixMs::now().0 - last;
    let ready = last > 0 && age <= st.cfg.push_ready_max_age_ms as i64;
    let body = Json(serde_json::json!({
        "role": "leader",
        "epoch": st.session.epoch,
        "ready": ready,
        "last_round_ms": last,
        "rounds": st.health.rounds.load(Ordering::Relaxed),
        "errors": st.health.errors.load(Ordering::Relaxed),
        "last_error": st.health.last_error.lock().expect("health lock").clone(),
        "webhooks_skipped": st.health.webhooks_skipped.load(Ordering::Relaxed),
        "sessions": st.session.hub.sessions(),
        "fact_rows_dropped": st.session.recorder.stats().dropped.load(Ordering::Relaxed),
        "fact_write_errors": st.session.recorder.stats().write_errors.load(Ordering::Relaxed),
    }));
    (
        if ready {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        },
        body,
    )
}
