//! pmw-edge's run loop: follow the stream into the hub, serve `/v1/ws` and `/health`, beat the
//! heartbeat, and drain every session (1012) when the feed, the server or shutdown ends it.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use pmw_core::heartbeat::Heartbeat;
use pmw_core::stores::Stores;
use pmw_core::{CoreConfig, ServiceError};
use pmw_session::bus::Bus;
use pmw_session::hub::Hub;
use pmw_session::recorder::Recorder;
use pmw_session::{ws, SessionState};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::{feed, index, watchdog, EdgeConfig, EdgeError, FeedStats, SERVICE};

#[derive(Clone)]
struct AppState {
    session: SessionState,
    feed: Arc<FeedStats>,
}

impl axum::extract::FromRef<AppState> for SessionState {
    fn from_ref(st: &AppState) -> SessionState {
        st.session.clone()
    }
}

/// Run with explicit settings; `bound` receives the listen address once the feed follows the
/// stream and the port is bound.
pub async fn run_with(
    cfg: CoreConfig,
    edge: EdgeConfig,
    shutdown: CancellationToken,
    bound: Option<oneshot::Sender<SocketAddr>>,
) -> Result<(), ServiceError> {
    pmw_core::metrics_http::start(SERVICE, edge.edge_metrics_addr, &shutdown).await;
    let Some(stores) = Stores::open_waiting(&cfg, SERVICE, &shutdown).await? else {
        return Ok(());
    };
    let bus = Bus::connect(edge.bus(), SERVICE)
        .await
        .map_err(EdgeError::from)?;
    let feed::Start {
        ledger: at,
        finals,
        follower,
    } = match feed::start_waiting(&bus, &stores.pg, 0, &shutdown).await? {
        Some(start) => start,
        None => return Ok(()),
    };
    let tasks = shutdown.child_token();
    let _stop_tasks = tasks.clone().drop_guard();
    let hub = Hub::new(at);
    hub.start_finals(finals);
    let recorder = Recorder::spawn(stores.ch.clone(), tasks.clone());
    let stats = Arc::new(FeedStats::default());
    let mut feed = spawn_tasks(&cfg, &edge, &stores, &hub, &stats, follower, &tasks);
    let (listener, _) = pmw_core::listen::bind(edge.edge_listen, bound).await?;
    tracing::info!(%at, "feed following; serving sessions");
    let session = SessionState::new(
        stores.pg.clone(),
        stores.ch.clone(),
        hub.clone(),
        edge.session(),
        recorder.clone(),
        0,
    );
    session.spawn_upkeep(tasks.clone());
    let server_stop = CancellationToken::new();
    let mut server = serve(
        listener,
        AppState {
            session,
            feed: stats,
        },
        server_stop.clone(),
    );

    let outcome = tokio::select! {
        _ = shutdown.cancelled() => Ok(()),
        r = &mut feed => match r {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(ServiceError::from(e)),
            Err(e) => Err(ServiceError::Bug(e.into())),
        },
        r = &mut server => Err(ServiceError::transient(format!("server ended: {r:?}"))),
    };
    // A drain: no new connections, every session told to resume elsewhere (1012).
    server_stop.cancel();
    hub.close_all(1012);
    tasks.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), server).await;
    recorder.close(Duration::from_secs(2)).await;
    outcome
}

/// The index refresh, the heartbeat and the feed (with its watchdog) under `tasks`; the feed's
/// handle (its end, or the watchdog's verdict, ends the edge).
fn spawn_tasks(
    cfg: &CoreConfig,
    edge: &EdgeConfig,
    stores: &Stores,
    hub: &Hub,
    stats: &Arc<FeedStats>,
    follower: pmw_session::bus::Follower,
    tasks: &CancellationToken,
) -> JoinHandle<Result<(), EdgeError>> {
    tokio::spawn(index::run(
        cfg.clone(),
        stores.pg.clone(),
        hub.clone(),
        Duration::from_millis(edge.edge_index_refresh_ms),
        tasks.clone(),
    ));
    let heartbeat = Heartbeat::new(stores.pg.clone(), SERVICE, &cfg.instance_or(SERVICE));
    let view_bound = Duration::from_millis(edge.edge_view_stale_ms);
    tokio::spawn(beat(
        heartbeat,
        hub.clone(),
        stats.clone(),
        view_bound,
        tasks.clone(),
    ));
    let feed = feed::run(hub.clone(), follower, stats.clone(), tasks.clone());
    let stall = Duration::from_millis(edge.edge_feed_stall_ms);
    let watchdog = watchdog::run(hub.clone(), stores.pg.clone(), 0, stall);
    tokio::spawn(async move {
        tokio::select! {
            r = feed => r,
            e = watchdog => Err(e),
        }
    })
}

/// Serve `/v1/ws` and `/health` on `listener` until `stop` (graceful: no new connections).
fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    stop: CancellationToken,
) -> JoinHandle<std::io::Result<()>> {
    let app = Router::new()
        .route("/v1/ws", get(ws::upgrade))
        .route("/health", get(health))
        .with_state(state)
        .into_make_service_with_connect_info::<SocketAddr>();
    // The connections as push tunes them (NODELAY, small send buffers: the slow-consumer policy).
    let listener = pmw_session::listen::tuned(listener);
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await
    })
}

/// The edge's state: what `/health` says, in a heartbeat row every second (`pmwctl status`
/// lists it with the other services).
fn state(hub: &Hub, f: &FeedStats, view_bound: Duration) -> serde_json::Value {
    let degraded = f.degraded(pmw_core::UnixMs::now().0);
    let refused = f.refused.lock().expect("refused").clone();
    let view_age_ms = hub.view_age().as_millis() as u64;
    serde_json::json!({
        "role": "edge",
        // A stale view of keys and subscriptions: every session closed, none admitted.
        "ready": !hub.is_stale(view_bound),
        "view_age_ms": view_age_ms,
        "status": if degraded { "degraded" } else { "ok" },
        "refused": refused,
        "last_refused_ms": f.last_refused_ms.load(Ordering::Relaxed),
        "sessions": hub.sessions(),
        "dispatched": hub.dispatched().to_string(),
        "parts": f.parts.load(Ordering::Relaxed),
        "trades": f.trades.load(Ordering::Relaxed),
        "overlap": f.overlap.load(Ordering::Relaxed),
        "repairs": f.repairs.load(Ordering::Relaxed),
        "last_part_ms": f.last_part_ms.load(Ordering::Relaxed),
    })
}

async fn beat(
    heartbeat: Heartbeat,
    hub: Hub,
    stats: Arc<FeedStats>,
    view_bound: Duration,
    stop: CancellationToken,
) {
    loop {
        if let Err(e) = heartbeat.beat(&state(&hub, &stats, view_bound)).await {
            tracing::warn!(error = %e, "heartbeat failed");
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// 200 while the feed follows the stream and the view of keys is current (503 once it is
/// older than `PMW_EDGE_VIEW_STALE_MS`): sessions, and where the hub stands; `status` is
/// `degraded` for a while after the feed refused a message (`refused`: counts by reason).
async fn health(State(st): State<AppState>) -> (StatusCode, Json<serde_json::Value>) {
    let mut v = state(&st.session.hub, &st.feed, st.session.cfg.view_bound());
    v["revision"] = pmw_core::build_info::REVISION.into();
    let status = match v["ready"].as_bool() {
        Some(true) => StatusCode::OK,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, Json(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_reports_the_hub_and_the_feed() {
        let at = pmw_core::Position::maybe(pmw_core::Cursor::new(42, 7).unwrap(), None);
        let hub = Hub::new(at);
        let f = FeedStats::default();
        f.parts.store(3, Ordering::Relaxed);
        f.trades.store(11, Ordering::Relaxed);
        f.repairs.store(1, Ordering::Relaxed);
        let v = state(&hub, &f, Duration::from_secs(30));
        assert_eq!(v["role"], "edge");
        assert_eq!(v["ready"], true);
        assert_eq!(v["sessions"], 0);
        assert_eq!(v["dispatched"], at.to_string());
        assert_eq!(
            (v["parts"].as_u64(), v["trades"].as_u64()),
            (Some(3), Some(11))
        );
        assert_eq!(
            (v["repairs"].as_u64(), v["overlap"].as_u64()),
            (Some(1), Some(0))
        );
        assert_eq!(v["status"], "ok");
        f.refuse(pmw_session::bus::sign::Refusal::Forged);
        f.refuse(pmw_session::bus::sign::Refusal::Forged);
        let v = state(&hub, &f, Duration::from_secs(30));
        assert_eq!(v["status"], "degraded");
        assert_eq!(v["refused"]["forged"], 2);
    }
}
