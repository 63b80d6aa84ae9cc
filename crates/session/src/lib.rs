//! pmw-session: the WebSocket session layer and the broker client, linked by push and edge only.
//!
//! The WebSocket session layer, one implementation for every process that serves `/v1/ws`
//! (push's leader in single-process mode, `pmw-edge` in edge mode): authentication (key or
//! ticket, failure throttle, connect quota; the session cap, connect rate and failure budget held
//! fleet-wide in Postgres, and the stale-view bound: [`fleet`]), the session hub and its fan-out ([`hub`]), the
//! subscription index and grants ([`subs`]), resume from the ledger stores ([`resume`],
//! [`ws`]'s replay), heartbeats, the slow-consumer policy (with the connections' small send buffers,
//! [`listen`]), and the latency facts ([`recorder`]).

pub mod bus;
pub mod fleet;
pub mod hub;
pub mod items;
pub mod listen;
pub mod pending;
pub mod recorder;
pub mod resume;
pub mod stamped;
pub mod subs;
pub mod telemetry;
pub mod ws;

use std::num::NonZeroU32;
use std::sync::Arc;

use pmw_core::ch::ChClient;
use pmw_core::client::{FailureThrottle, TrustedProxies};
use pmw_core::pg::PgPool;

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
    /// WebSocket connects per account per second, and the burst allowed above it.
    pub connects_per_sec: u32,
    pub connect_burst: u32,
    /// Failed authentications per client address per second, and the burst.
    pub auth_failures_per_sec: u32,
    pub auth_failure_burst: u32,
    /// A view of keys and subscriptions older than this closes every session (1013) and admits
    /// none until it is current again.
    pub view_stale_ms: u64,
}

impl SessionConfig {
    /// An account's connects, fleet-wide.
    pub fn connect_rate(&self) -> fleet::Rate {
        fleet::Rate {
            per_sec: self.connects_per_sec,
            burst: self.connect_burst,
        }
    }

    /// An address's failed authentications, fleet-wide.
    pub fn failure_rate(&self) -> fleet::Rate {
        fleet::Rate {
            per_sec: self.auth_failures_per_sec,
            burst: self.auth_failure_burst,
        }
    }

    pub fn view_bound(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.view_stale_ms)
    }
}

fn at_least_one(v: u32) -> NonZeroU32 {
    NonZeroU32::new(v.max(1)).expect("at least 1")
}

impl SessionState {
    /// The state of a server whose hub dispatches the rounds of the leader of `epoch`.
    pub fn new(
        pool: PgPool,
        ch: ChClient,
        hub: hub::Hub,
        cfg: SessionConfig,
        recorder: recorder::Recorder,
        epoch: i64,
    ) -> SessionState {
        let quota = governor::Quota::per_second(at_least_one(cfg.connects_per_sec))
            .allow_burst(at_least_one(cfg.connect_burst));
        let failures = FailureThrottle::new(
            at_least_one(cfg.auth_failures_per_sec),
            at_least_one(cfg.auth_failure_burst),
        );
        SessionState {
            fleet: fleet::Fleet::new(pool.clone()),
            pool,
            ch,
            hub,
            cfg: Arc::new(cfg),
            recorder,
            epoch,
            connects: Arc::new(governor::RateLimiter::keyed(quota)),
            failures: Arc::new(failures),
        }
    }
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
    /// The fleet-wide limits: session leases, connects per account, failures per address.
    pub fleet: fleet::Fleet,
}

impl SessionState {
    /// The fleet upkeep of this server's sessions until `stop` ([`fleet::Fleet::upkeep`]).
    pub fn spawn_upkeep(
        &self,
        stop: tokio_util::sync::CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let fleet = self.fleet.clone();
        tokio::spawn(fleet.upkeep(self.hub.clone(), self.cfg.view_bound(), stop))
    }
}
