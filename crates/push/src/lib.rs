//! pmw-push: leader/standby push of matched trades over WebSocket and signed webhooks. Run twice
//! (`push-a`, `push-b`): the standby waits on the slot's lock and binds nothing until it leads.

pub mod config;
mod driver;
pub mod hub;
pub mod leader;
mod lease;
pub mod recorder;
pub mod rounds;
mod server;
pub mod subs;
pub mod webhook;
pub mod ws;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pmw_core::ch::ChClient;
use pmw_core::heartbeat::Heartbeat;
use pmw_core::pg::{self, PgPool};
use pmw_core::storage::Storage;
use pmw_core::{CoreConfig, ServiceError};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

pub use config::PushConfig;
use hub::Hub;
use recorder::Recorder;
use rounds::Rounds;
use subs::Subscriptions;

/// Service name used in logs, heartbeats and `application_name`.
pub const SERVICE: &str = "pmw-push";

/// The channel live notifies after each block.
pub use pmw_core::channels::BLOCKS as BLOCKS_CHANNEL;

/// Leader health, for `/health`, heartbeats and logs.
#[derive(Debug, Default)]
pub struct Health {
    pub epoch: AtomicI64,
    pub last_round_ms: AtomicI64,
    pub rounds: AtomicU64,
    pub errors: AtomicU64,
    pub last_error: Mutex<Option<String>>,
    /// Webhook deliveries not enqueued because the endpoint was deleted or disabled meanwhile.
    pub webhooks_skipped: AtomicU64,
}

/// Shared by the HTTP handlers.
#[derive(Clone)]
pub struct AppState {
    /// Session set-up (auth, grants): its own pool, apart from rounds.
    pub pool: PgPool,
    pub ch: ChClient,
    pub hub: Hub,
    pub cfg: Arc<PushConfig>,
    pub recorder: Recorder,
    pub epoch: i64,
    pub health: Arc<Health>,
    /// WebSocket connects per account.
    pub connects: Arc<governor::DefaultKeyedRateLimiter<i64>>,
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
    let pools = Pools::open(&cfg)?;
    let instance = cfg.instance_or(SERVICE);
    let heartbeat = Heartbeat::new(pools.heartbeat.clone(), SERVICE, &instance);
    let _ = heartbeat
        .beat(&serde_json::json!({"role": "standby"}))
        .await;
    let segment = PushConfig::ms(push.push_lock_segment_ms);
    let lead = leader::take(
        &cfg,
        &pools.heartbeat,
        &heartbeat,
        &instance,
        push.push_slot,
        (segment, PushConfig::ms(push.push_lease_ms)),
        &shutdown,
    )
    .await
    .map_err(|e| ServiceError::transient(format!("cannot take the push lock: {e}")))?;
    let Some(lead) = lead else { return Ok(()) };

    // LISTEN before the first index load: a change committed in between is then either in the
    // load or notified (and every round checks the index version anyway).
    let listen = if push.push_legacy_poll_ms.is_some() {
        None
    } else {
        Some(driver::listen_session(&cfg).await?)
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
    let mut dispatcher = webhook::Dispatcher::spawn(
        pools.webhooks.clone(),
        storage.ch.clone(),
        lead.epoch,
        hooks,
        tasks.clone(),
    );
    let state = AppState {
        pool: pools.sessions.clone(),
        ch: storage.ch.clone(),
        hub: hub.clone(),
        cfg: Arc::new(push.clone()),
        recorder: Recorder::spawn(storage.ch.clone(), tasks.clone()),
        epoch: lead.epoch,
        health: health.clone(),
        connects: Arc::new(governor::RateLimiter::keyed(push.connect_quota())),
    };
    let server_stop = CancellationToken::new();
    let server = server::spawn(listener, state, server_stop.clone());

    let rounds = Rounds::new(
        storage.pg.clone(),
        storage.ch.clone(),
        push.push_slot,
        lead.epoch,
        lead.cursor,
        lead.reorg_id,
        push.round_trades(),
        subs,
        hub.clone(),
    );
    let stopped = driver::Driver {
        cfg: &cfg,
        push: &push,
        shutdown: &shutdown,
        lost: lead.lock.lost(),
        listen,
        rounds,
        hub: hub.clone(),
        health,
        heartbeat: &heartbeat,
        dispatcher: &mut dispatcher,
        relisten_at: tokio::time::Instant::now(),
        relisten_wait: Duration::from_millis(100),
        index_at: None,
        index_due: None,
    }
    .run()
    .await;
    let stopped = match stopped {
        Ok(s) => s,
        Err(e) => {
            hub.close_all(1012);
            return Err(e);
        }
    };
    if stopped == driver::Stopped::DeadlinePassed {
        hub.close_all(1012);
        return Ok(());
    }
    // Graceful stop: no new connections; the webhook dispatcher finishes its attempts in flight
    // (so the successor does not send them again), then the lock is released, then every
    // socket is closed with 1012.
    server_stop.cancel();
    let within = PushConfig::ms(push.push_round_deadline_ms);
    match tokio::time::timeout(within, dispatcher.stop()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "webhook dispatcher ended with an error"),
        Err(_) => tracing::warn!(
            within_ms = within.as_millis() as u64,
            "webhook dispatcher still busy at the deadline; releasing the lock anyway"
        ),
    }
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

/// Separate Postgres pools, so one kind of work cannot starve another: rounds (the storage
/// pool), WebSocket session set-up (auth, grants: a reconnect storm), the webhook engine, and
/// heartbeats (which the standby's lease and readiness depend on).
struct Pools {
    sessions: PgPool,
    webhooks: PgPool,
    heartbeat: PgPool,
}

impl Pools {
    fn open(cfg: &CoreConfig) -> Result<Pools, ServiceError> {
        let open = |name: &str, size: usize| {
            let mut c = cfg.clone();
            c.postgres_pool_size = size;
            pg::pool(&c, name).map_err(|e| ServiceError::Config(e.to_string()))
        };
        Ok(Pools {
            sessions: open("pmw-push:sessions", cfg.postgres_pool_size)?,
            webhooks: open("pmw-push:webhooks", cfg.postgres_pool_size)?,
            heartbeat: open("pmw-push:heartbeat", 2)?,
        })
    }
}
