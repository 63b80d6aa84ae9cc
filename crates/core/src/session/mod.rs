//! The WebSocket session layer, one implementation for every process that serves `/v1/ws`
//! (push's leader in single-process mode, `pmw-edge` in edge mode): authentication (key or
//! ticket, failure throttle, connect quota), the session hub and its fan-out ([`hub`]), the
//! subscription index and grants ([`subs`]), resume from the ledger stores ([`resume`],
//! [`ws`]'s replay), heartbeats, the slow-consumer policy, and the latency facts ([`recorder`]).

pub mod hub;
pub mod recorder;
pub mod resume;
pub mod subs;
pub mod telemetry;
pub mod ws;

use std::sync::Arc;

use crate::ch::ChClient;
use crate::client::{FailureThrottle, TrustedProxies};
use crate::pg::PgPool;

/// The settings of the session layer (push takes them from its `PMW_PUSH_*` variables).
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// Frames queued per session before it is closed as a slow consumer (1013).
    pub ws_queue: usize,
    /// Heartbeat period per session.
    pub heartbeat_ms: u64,
    /// Most trades replayed on `since=`; beyond, the client is told to backfill over REST.
    pub resume_max_trades: u64,
    /// Peers whose `X-Forwarded-For` is believed.
    pub trusted_proxies: TrustedProxies,
}

/// What the `/v1/ws` handler works with.
#[derive(Clone)]
pub struct SessionState {
    /// Session set-up (auth, grants) and replay: its own pool, apart from rounds.
    pub pool: PgPool,
    pub ch: ChClient,
    pub hub: hub::Hub,
    pub cfg: Arc<SessionConfig>,
    pub recorder: recorder::Recorder,
    /// The epoch of the leader whose rounds the hub dispatches (named in `hello`).
    pub epoch: i64,
    /// WebSocket connects per account.
    pub connects: Arc<governor::DefaultKeyedRateLimiter<i64>>,
    /// Failed WebSocket authentications per client address, checked before the lookup.
    pub failures: Arc<FailureThrottle>,
}
