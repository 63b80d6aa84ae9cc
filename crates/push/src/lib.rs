//! pmw-push: leader/standby push of matched trades over WebSocket and signed webhooks. Run twice
//! (`push-a`, `push-b`): the standby waits on the slot's lock and binds nothing until it leads.

pub mod config;
pub mod hub;
pub mod leader;
pub mod payload;
pub mod recorder;
pub mod rounds;
pub mod subs;
pub mod webhook;
pub mod ws;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use pmw_core::ch::ChClient;
use pmw_core::heartbeat::Heartbeat;
use pmw_core::pg::{self, PgPool, Session};
use pmw_core::storage::Storage;
use pmw_core::{CoreConfig, ServiceError, UnixMs};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

pub use config::PushConfig;
use hub::Hub;
use recorder::Recorder;
use rounds::{RoundError, Rounds};
use subs::{Subscriptions, CHANGES_CHANNEL};

/// Service name used in logs, heartbeats and `application_name`.
pub const SERVICE: &str = "pmw-push";
/// Kernel send buffer per WebSocket connection.
const SEND_BUFFER: usize = 32 * 1024;

/// The channel live notifies after each block.
pub const BLOCKS_CHANNEL: &str = "pmw_blocks";

/// Leader health, for `/health`, heartbeats and logs.
#[derive(Debug, Default)]
pub struct Health {
    pub epoch: AtomicI64,
    pub last_round_ms: AtomicI64,
    pub rounds: AtomicU64,
    pub errors: AtomicU64,
    pub last_error: Mutex<Option<String>>,
}

/// Shared by the HTTP handlers.
#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub ch: ChClient,
    pub hub: Hub,
    pub subs: Subscriptions,
    pub cfg: Arc<PushConfig>,
    pub recorder: Recorder,
    pub epoch: i64,
    pub health: Arc<Health>,
}

/// Run with settings from the environment until `shutdown`.
pub async fn run(cfg: CoreConfig, shutdown: CancellationToken) -> Result<(), ServiceError> {
    let push = PushConfig::load()?;
    let hooks = webhook::WebhookConfig::load()?;
    run_with(cfg, push, hooks, shutdown, None).await
}

/// Run with explicit settings; `bound` receives the listen address once this instance leads.
pub async fn run_with(
    cfg: CoreConfig,
    push: PushConfig,
    hooks: webhook::WebhookConfig,
    shutdown: CancellationToken,
    bound: Option<oneshot::Sender<SocketAddr>>,
) -> Result<(), ServiceError> {
    if !push.push_worker {
        return Err(ServiceError::Config(
            "PUSH_WORKER=0: the push worker is disabled on this host; refusing to start".into(),
        ));
    }
    let storage = Storage::open(&cfg, SERVICE).await?;
    let instance = cfg.instance_or(SERVICE);
    let heartbeat = Heartbeat::new(storage.pg.clone(), SERVICE, &instance);
    let _ = heartbeat
        .beat(&serde_json::json!({"role": "standby"}))
        .await;
    let segment = PushConfig::ms(push.push_lock_segment_ms);
    let lead = leader::take(
        &cfg,
        &storage.pg,
        &instance,
        push.push_slot,
        segment,
        &shutdown,
    )
    .await
    .map_err(|e| ServiceError::transient(format!("cannot take the push lock: {e}")))?;
    let Some(lead) = lead else { return Ok(()) };
    let lost = lead.lock.lost();

    // LISTEN before the first index load: a change committed in between is then either in the
    // load or notified (and every round checks the index version anyway).
    let mut listen = if push.push_legacy_poll_ms.is_some() {
        None
    } else {
        Some(listen_session(&cfg).await?)
    };
    let subs = Subscriptions::default();
    subs.reload(&storage.pg)
        .await
        .map_err(|e| ServiceError::transient(e.to_string()))?;

    let listener = tokio::net::TcpListener::bind(push.push_listen)
        .await
        .map_err(|e| ServiceError::Config(format!("cannot bind {}: {e}", push.push_listen)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| ServiceError::Bug(e.into()))?;
    tracing::info!(%addr, epoch = lead.epoch, "listening");
    if let Some(b) = bound {
        let _ = b.send(addr);
    }

    let tasks = CancellationToken::new();
    let _stop_tasks = tasks.clone().drop_guard();
    let hub = Hub::new(lead.cursor);
    let health = Arc::new(Health::default());
    health.epoch.store(lead.epoch, Ordering::Relaxed);
    let recorder = Recorder::spawn(storage.ch.clone(), tasks.clone());
    let dispatcher = webhook::Dispatcher::spawn(
        storage.pg.clone(),
        storage.ch.clone(),
        lead.epoch,
        hooks,
        tasks.clone(),
    );
    let state = AppState {
        pool: storage.pg.clone(),
        ch: storage.ch.clone(),
        hub: hub.clone(),
        subs: subs.clone(),
        cfg: Arc::new(push.clone()),
        recorder,
        epoch: lead.epoch,
        health: health.clone(),
    };
    let app = Router::new()
        .route("/v1/ws", get(ws::upgrade))
        .route("/health", get(health_handler))
        .with_state(state);
    let server_stop = CancellationToken::new();
    let stop = server_stop.clone();
    // Small kernel send buffers per connection: a slow consumer fills its bounded queue (and is
    // closed) instead of hiding megabytes in the socket; NODELAY for frame latency.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp: &mut tokio::net::TcpStream| {
        let _ = tcp.set_nodelay(true);
        let _ = socket2::SockRef::from(&*tcp).set_send_buffer_size(SEND_BUFFER);
    });
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await
    });

    let mut rounds = Rounds::new(
        storage.pg.clone(),
        storage.ch.clone(),
        push.push_slot,
        lead.epoch,
        lead.cursor,
        lead.reorg_id,
        push.push_round_limit,
        subs.clone(),
        hub.clone(),
    );
    let fallback = PushConfig::ms(push.push_legacy_poll_ms.unwrap_or(push.push_fallback_ms));
    let deadline = PushConfig::ms(push.push_round_deadline_ms);
    let mut backoff = Duration::from_millis(100);
    let mut last_beat = 0i64;
    let mut run_now = true; // catch up from the cursor at once
    loop {
        if !run_now {
            let listen_lost = listen.as_ref().map(Session::lost);
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                _ = lost.cancelled() => {
                    hub.close_all(1012);
                    return Err(ServiceError::transient("push lock session lost"));
                }
                _ = async { match &listen_lost { Some(t) => t.cancelled().await, None => std::future::pending().await } } => {
                    tracing::warn!("block listener lost");
                    listen = Some(reconnect_listen(&cfg, &shutdown).await?);
                }
                // A block or a subscription change: run a round (it reloads the index when the
                // version it reads beside the watermark moved). Coalesce whatever else is queued.
                _ = async { match listen.as_mut() { Some(s) => s.notifications.recv().await, None => std::future::pending().await } } => {
                    if let Some(s) = listen.as_mut() {
                        while s.notifications.try_recv().is_ok() {}
                    }
                }
                _ = tokio::time::sleep(fallback) => {}
            }
        }
        let outcome = {
            let mut round = std::pin::pin!(rounds.round());
            tokio::select! {
                r = &mut round => r,
                _ = shutdown.cancelled() => match tokio::time::timeout(deadline, &mut round).await {
                    Ok(r) => r,
                    Err(_) => {
                        tracing::error!(deadline_ms = deadline.as_millis() as u64, "round deadline passed on shutdown; exiting with the lock held");
                        hub.close_all(1012);
                        return Ok(());
                    }
                },
                _ = lost.cancelled() => {
                    hub.close_all(1012);
                    return Err(ServiceError::transient("push lock session lost"));
                }
            }
        };
        match outcome {
            Ok(o) => {
                backoff = Duration::from_millis(100);
                health.rounds.fetch_add(1, Ordering::Relaxed);
                health
                    .last_round_ms
                    .store(UnixMs::now().0, Ordering::Relaxed);
                if o.trades + o.retracted > 0 {
                    dispatcher.wake();
                    tracing::debug!(trades = o.trades, retracted = o.retracted, frames = o.frames, webhooks = o.webhooks, cursor = %rounds.cursor, "round");
                }
                run_now = o.more;
            }
            Err(RoundError::Fenced) => {
                tracing::error!(
                    epoch = lead.epoch,
                    "deposed: a newer leader bumped the epoch"
                );
                hub.close_all(1012);
                return Err(ServiceError::transient("push epoch superseded"));
            }
            Err(e) => {
                health.errors.fetch_add(1, Ordering::Relaxed);
                *health.last_error.lock().expect("health lock") = Some(e.to_string());
                tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "push round failed");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = shutdown.cancelled() => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
                run_now = true;
            }
        }
        let now = UnixMs::now().0;
        if now - last_beat >= 1_000 {
            last_beat = now;
            let state = serde_json::json!({
                "role": "leader", "epoch": lead.epoch, "cursor": rounds.cursor.to_string(),
                "last_round_ms": health.last_round_ms.load(Ordering::Relaxed),
                "errors": health.errors.load(Ordering::Relaxed), "sessions": hub.sessions(),
                "listener": if listen.is_some() { "listen" } else { "poll" },
            });
            if let Err(e) = heartbeat.beat(&state).await {
                tracing::warn!(error = %e, "heartbeat failed");
            }
        }
    }
    // Graceful stop: no new connections, round finished, lock released, then sockets closed 1012.
    server_stop.cancel();
    if let Err(e) = lead.lock.release().await {
        tracing::warn!(error = %e, "releasing the push lock failed (it ends with the session)");
    }
    hub.close_all(1012);
    let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
    let _ = heartbeat
        .beat(&serde_json::json!({"role": "stopped"}))
        .await;
    Ok(())
}

async fn listen_session(cfg: &CoreConfig) -> Result<Session, ServiceError> {
    let s = pg::dedicated(cfg, "pmw-push:listen")
        .await
        .map_err(|e| ServiceError::transient(format!("cannot open the listen session: {e}")))?;
    s.client
        .batch_execute(&format!(
            "LISTEN {BLOCKS_CHANNEL}; LISTEN {CHANGES_CHANNEL}"
        ))
        .await
        .map_err(|e| ServiceError::transient(format!("LISTEN failed: {e}")))?;
    Ok(s)
}

async fn reconnect_listen(
    cfg: &CoreConfig,
    shutdown: &CancellationToken,
) -> Result<Session, ServiceError> {
    let mut wait = Duration::from_millis(100);
    loop {
        match listen_session(cfg).await {
            Ok(s) => {
                tracing::info!("block listener reconnected");
                return Ok(s);
            }
            Err(e) => tracing::warn!(error = %e, "block listener reconnect failed"),
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.cancelled() => return Err(ServiceError::transient("shutdown while reconnecting the listener")),
        }
        wait = (wait * 2).min(Duration::from_secs(5));
    }
}

async fn health_handler(State(st): State<AppState>) -> impl IntoResponse {
    let last = st.health.last_round_ms.load(Ordering::Relaxed);
    let age = UnixMs::now().0 - last;
    let ready = last > 0 && age <= st.cfg.push_ready_max_age_ms as i64;
    let body = Json(serde_json::json!({
        "role": "leader",
        "epoch": st.epoch,
        "ready": ready,
        "last_round_ms": last,
        "rounds": st.health.rounds.load(Ordering::Relaxed),
        "errors": st.health.errors.load(Ordering::Relaxed),
        "last_error": st.health.last_error.lock().expect("health lock").clone(),
        "sessions": st.hub.sessions(),
        "latency_rows_lost": st.recorder.lost(),
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
