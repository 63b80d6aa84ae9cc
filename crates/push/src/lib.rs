//! pmw-push: leader/standby push of matched trades over WebSocket and signed webhooks. Run twice
//! (`push-a`, `push-b`): the standby waits on the slot's lock and binds nothing until it leads.

mod baseline;
mod catchup;
pub mod config;
pub mod fence;
mod hooks_and_finals;
mod lanes;
pub mod leader;
mod lease;
pub mod ledger;
pub mod matcher;
mod names;
mod pending_hooks;
mod pending_lane;
mod publish;
pub mod round;
mod round_loop;
mod server;
pub mod telemetry;
pub mod webhook;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64};
use std::sync::{Arc, Mutex};

use pmw_core::heartbeat::Heartbeat;
use pmw_core::pg::{self, PgPool};
use pmw_core::stores::Stores;
use pmw_core::{CoreConfig, ServiceError};
use pmw_session::SessionState;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

pub use config::PushConfig;

/// Service name used in logs, heartbeats and `application_name`.
pub const SERVICE: &str = "pmw-push";

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
    /// The webhook lane's cursor block, and when its last round completed.
    pub webhook_block: AtomicI64,
    pub webhook_round_ms: AtomicI64,
    /// The finality lane's cursor block, and when its last round completed.
    pub final_block: AtomicI64,
    pub final_round_ms: AtomicI64,
}

/// Shared by the HTTP handlers: the session layer's state (`/v1/ws`) and the leader's
/// (`/health`).
#[derive(Clone)]
pub struct AppState {
    pub session: SessionState,
    pub cfg: Arc<PushConfig>,
    pub health: Arc<Health>,
}

impl axum::extract::FromRef<AppState> for SessionState {
    fn from_ref(st: &AppState) -> SessionState {
        st.session.clone()
    }
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
    pmw_core::metrics_http::start(SERVICE, push.push_metrics_addr, &shutdown).await;
    telemetry::init();
    let Some(stores) = Stores::open_waiting(&cfg, SERVICE, &shutdown).await? else {
        return Ok(()); // stopped while waiting for the stores
    };
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
        leader::Candidate {
            instance: &instance,
            slot: push.push_slot,
            segment,
            lease: PushConfig::ms(push.push_lease_ms),
        },
        &shutdown,
    )
    .await
    .map_err(|e| ServiceError::transient(format!("cannot take the push lock: {e}")))?;
    let Some(lead) = lead else { return Ok(()) };
    let leading = leader::Leading {
        cfg: &cfg,
        push: &push,
        stores: &stores,
        pools: &pools,
        heartbeat: &heartbeat,
        shutdown: &shutdown,
    };
    leading.run(lead, hooks, bound).await
}

/// Separate Postgres pools, so one kind of work cannot starve another: rounds (the stores
/// pool), WebSocket session set-up (auth, grants: a reconnect storm), the webhook engine, and
/// heartbeats (which the standby's lease and readiness depend on).
pub(crate) struct Pools {
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
