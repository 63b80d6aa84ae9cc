//! pmw-api: the subscriber REST API (keys, subscriptions, webhook endpoints, backfill, delivery
//! log, readiness), on loopback behind Caddy. Routes and their OpenAPI document are built
//! together in [`routes`]; errors leave through [`error::ApiError`]; auth and rate limits are in
//! [`auth`]. API-only settings ([`ApiConfig`]) are loaded here and nowhere else, so a broken
//! `PMW_API_*` value stops the API (exit 78) and never push or live.

pub mod auth;
mod client_ip;
pub mod config;
pub mod error;
pub mod extract;
pub mod hook_client;
mod http;
pub mod idempotency;
pub mod routes;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pmw_core::ch::ChClient;
use pmw_core::heartbeat::Heartbeat;
use pmw_core::pg::PgPool;
use pmw_core::stores::Stores;
use pmw_core::{CoreConfig, ServiceError};

pub use config::{ApiConfig, Plan};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

/// Service name used in logs, heartbeats, metrics and `application_name`.
pub const SERVICE: &str = "pmw-api";

/// Shared by every handler.
#[derive(Clone)]
pub struct AppState {
    pub pg: PgPool,
    pub ch: ChClient,
    pub cfg: Arc<ApiConfig>,
    pub limiter: Arc<auth::Limiter>,
    /// Failed authentications per client address, checked before the key lookup (bounded).
    pub failures: Arc<pmw_core::client::FailureThrottle>,
    /// Requests without a key per client address, before any other work (bounded).
    pub anonymous: Arc<pmw_core::client::FailureThrottle>,
    /// `POST /v1/webhooks/{id}/test` per account.
    pub test_limiter: Arc<auth::Limiter>,
    /// The SSRF-guarded client of test events.
    pub hooks: hook_client::HookClient,
    /// The markets API market subscriptions are resolved with (`PMW_GAMMA_URL`).
    pub markets: routes::markets::MarketsApi,
    /// Readiness's own pool (2 connections): its checks never take a request's connection.
    pub ready_pg: PgPool,
    /// The readiness verdict, evaluated at most once per `PMW_API_READY_INTERVAL_MS`.
    pub ready: Arc<routes::ReadyCache>,
}

/// Run with settings from the environment until `shutdown`. A broken API setting is a
/// configuration error (exit 78).
pub async fn run(cfg: CoreConfig, shutdown: CancellationToken) -> Result<(), ServiceError> {
    let api = ApiConfig::load()?;
    run_with(cfg, api, shutdown, None).await
}

/// Run with explicit settings; `bound` receives the listen address (tests listen on port 0).
pub async fn run_with(
    cfg: CoreConfig,
    api: ApiConfig,
    shutdown: CancellationToken,
    bound: Option<oneshot::Sender<SocketAddr>>,
) -> Result<(), ServiceError> {
    let stores = Stores::open_postgres_first(&cfg, SERVICE, &shutdown).await?;
    publish_plans(&stores.pg, &api)
        .await
        .map_err(|e| ServiceError::transient(format!("cannot publish plans: {e}")))?;
    pmw_core::metrics::install();
    pmw_core::metrics::build_info(SERVICE);
    let (listener, addr) = pmw_core::listen::bind(api.api_listen, bound).await?;
    let ready_pg = {
        let mut c = cfg.clone();
        c.postgres_pool_size = 2;
        pmw_core::pg::pool(&c, "pmw-api:ready").map_err(|e| ServiceError::Config(e.to_string()))?
    };
    let state = AppState {
        ready_pg,
        ready: Arc::new(routes::ReadyCache::new(Duration::from_millis(
            api.api_ready_interval_ms,
        ))),
        pg: stores.pg.clone(),
        ch: stores.ch.clone(),
        limiter: auth::limiter(&api),
        failures: auth::failure_limiter(&api),
        anonymous: auth::anonymous_limiter(&api),
        test_limiter: auth::test_limiter(&api),
        hooks: hook_client::HookClient::new(api.api_allow_private_webhooks)
            .map_err(|e| ServiceError::Bug(e.into()))?,
        markets: routes::markets::MarketsApi::new(&api.gamma_url)
            .map_err(|e| ServiceError::Bug(e.into()))?,
        cfg: Arc::new(api),
    };
    let app = http::app(state.clone());
    let heartbeat = Heartbeat::new(stores.pg.clone(), SERVICE, &cfg.instance_or(SERVICE));
    let beats = tokio::spawn(beat(heartbeat, addr, state, shutdown.clone()));
    let stop = shutdown.clone();
    let served = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async move { stop.cancelled().await })
    .await;
    beats.abort();
    served.map_err(|e| ServiceError::Bug(e.into()))
}

/// Drop the rate limiters' keys that are back to a full burst (forgetting them changes nothing).
pub fn forget_idle(st: &AppState) {
    st.limiter.retain_recent();
    st.test_limiter.retain_recent();
    st.limiter.shrink_to_fit();
    st.test_limiter.shrink_to_fit();
}

/// Publish the configured plans' session limits to `plans`, where push reads them (push does not
/// load API settings). Plans no longer configured are removed: their accounts get the default
/// plan, as [`ApiConfig::plan`] does.
pub async fn publish_plans(pool: &PgPool, api: &ApiConfig) -> Result<(), pmw_core::pg::PgError> {
    let mut c = pool.get().await?;
    let tx = c.transaction().await?;
    tx.execute(
        include_str!("sql/plans_lock.sql"),
        &[&pmw_core::lock::keys::PLANS],
    )
    .await?;
    let names: Vec<&str> = api.api_plans.keys().map(String::as_str).collect();
    tx.execute(include_str!("sql/plans_remove_others.sql"), &[&names])
        .await?;
    tx.execute(include_str!("sql/plans_clear_default.sql"), &[])
        .await?;
    let now = pmw_core::UnixMs::now().0;
    for (name, plan) in &api.api_plans {
        tx.execute(
            include_str!("sql/publish_plan.sql"),
            &[
                name,
                &(plan.max_ws_sessions.min(i32::MAX as u32) as i32),
                &(*name == api.api_default_plan),
                &now,
            ],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Heartbeat every 5 s; also forget idle rate-limiter keys (per key and per account's test
/// events: both tables shrink back to the keys used within their refill time).
async fn beat(hb: Heartbeat, addr: SocketAddr, st: AppState, shutdown: CancellationToken) {
    let state = serde_json::json!({ "role": "api", "listen": addr.to_string() });
    loop {
        if let Err(e) = hb.beat(&state).await {
            tracing::warn!(error = %e, "heartbeat failed");
        }
        forget_idle(&st);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
        }
    }
}
