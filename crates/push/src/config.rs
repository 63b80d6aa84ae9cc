//! pmw-push settings beyond the core config (same layering: defaults → `PMW_CONFIG` → env).
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `PMW_PUSH_LISTEN` | `127.0.0.1:8081` | WebSocket listen address, bound only once this instance leads: loopback, or a private network's address for a Caddy on another machine, never public |
//! | `PMW_PUSH_METRICS_ADDR` | `127.0.0.1:9462` | private Prometheus `/metrics` address, served by the leader and the standby alike (the ecosystem gives push-b `127.0.0.1:9463`; a port in use is logged, not fatal) |
//! | `PMW_PUSH_SLOT` | `0` | leader slot (one leader/standby pair per slot) |
//! | `PMW_PUSH_WORKER` / `PUSH_WORKER` | `1` | `0` refuses to start (the push worker is disabled here) |
//! | `PMW_PUSH_LOCK_SEGMENT_MS` | `300000` | one segment of the standby's lock wait (`lock_timeout`) |
//! | `PMW_PUSH_FALLBACK_MS` | `3000` | poll period when no NOTIFY arrives |
//! | `PMW_PUSH_ROUND_LIMIT` | `5000` | trades read per round (at most half of `PMW_PUSH_WS_QUEUE`, so a round never overflows a session that keeps up) |
//! | `PMW_PUSH_CATCHUP_SPAN_BLOCKS` | `1000` | a round far behind the watermark reads at most this many blocks (when their trade counts are recorded), and moves past them only if every block returned its recorded count |
//! | `PMW_PUSH_ROUND_DEADLINE_MS` | `10000` | on SIGTERM, how long the current round may take before exiting with the lock held |
//! | `PMW_PUSH_WS_QUEUE` | `1024` | frames queued per WebSocket session before it is closed as a slow consumer (1013) |
//! | `PMW_PUSH_WS_CONNECTS_PER_SEC` / `PMW_PUSH_WS_CONNECT_BURST` | `5` / `60` | WebSocket connects per account (429 with `Retry-After` beyond); the burst covers a whole plan's sessions reconnecting after a failover. Fleet-wide: shared in Postgres with every edge (set the same values everywhere) |
//! | `PMW_PUSH_WS_AUTH_FAILURES_PER_SEC` / `PMW_PUSH_WS_AUTH_FAILURE_BURST` | `5` / `20` | failed WebSocket authentications (bad key or ticket) per client address; beyond, 429 with `Retry-After` before any lookup. Fleet-wide as above |
//! | `PMW_PUSH_VIEW_STALE_MS` | `30000` | a leader that could not confirm its view of keys and subscriptions for longer closes every WebSocket session with 1013 and admits none until it can |
//! | `PMW_PUSH_TRUSTED_PROXIES` | `127.0.0.0/8,::1` | addresses (or CIDR blocks, comma-separated) whose `X-Forwarded-For` is believed: Caddy's; from any other peer the peer is the client (core's rule, as the API's `PMW_API_TRUSTED_PROXIES`); `""` trusts none |
//! | `PMW_PUSH_WS_HEARTBEAT_MS` | `15000` | heartbeat period per session |
//! | `PMW_PUSH_RESUME_MAX_TRADES` | `10000` | most trades replayed on `since=`; beyond, the client is told to backfill over REST |
//! | `PMW_PUSH_READY_MAX_AGE_MS` | `15000` | `/health` is 503 when no round completed for this long |
//! | `PMW_PUSH_LEASE_MS` | `10000` | the standby terminates the lock session of a leader whose heartbeat is older than this (a frozen leader keeps its lock otherwise) |
//! | `PMW_PUSH_NATS_URLS` | unset | edge mode: NATS JetStream client URLs (comma-separated, all nodes of the cluster); the leader stores each WebSocket round on the stream before its cursor moves (unset: single-process mode, nothing published) |
//! | `PMW_PUSH_NATS_STREAM` / `PMW_PUSH_NATS_PREFIX` | `PMW_FRAMES` / `pmw` | the stream and its subjects' first token (`<prefix>.frames.all`, `<prefix>.epoch`) |
//! | `PMW_BUS_SIGNING_KEY` | required in edge mode | the leader's frame signing key, `<id>:<64 hex of the Ed25519 seed>` (`pmwctl bus keygen`; a secret: keep it in the sealed env file, never logged): every message push stores on the stream is signed with it, and without it an edge-mode push refuses to start (78) |
//! | `PMW_BUS_VERIFY_KEYS` | none | the public keys of the other signing keys of the slot's leaders (`<id>:<64 hex>`, comma-separated; a rotation's old and new): a stream moved under push's guard deposes it only when an epoch marker signed by one of these (or its own key) names a newer epoch |
//! | `PMW_PUSH_NATS_USER` / `PMW_PUSH_NATS_PASSWORD` | unset | push's identity on the locked broker (user `push` in deploy/nats/nats.conf; the password is a secret: never logged); both or neither (a URL's user and password are refused: the client would not send them) |
//! | `PMW_PUSH_NATS_CA` | unset | CA file the servers' TLS certificates are checked against; set, TLS is required (`tls://` URLs require it too) |
//! | `PMW_PUSH_NATS_ALLOW_INSECURE` | `false` | accept plain `nats://` (no CA, no `tls://`) to hosts other than loopback (127.0.0.0/8, `::1`, `localhost`) |
//! | `PMW_PUSH_NATS_MAX_BYTES` | `1073741824` (1 GiB) | the stream's `max_bytes`: the most it keeps (oldest frames dropped beyond) |
//! | `PMW_PUSH_NATS_MAX_MSG_SIZE` | `1048576` (1 MiB) | the stream's `max_msg_size` (at most the servers' `max_payload`, 1 MB in deploy/nats/nats.conf) |
//! | `PMW_PUSH_STALL_EXIT_MS` | the ready max age | a leader that completes no round for this long (rounds failing, or one round hanging) exits 75 so the standby takes over |

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use pmw_core::client::TrustedProxies;
use pmw_core::config::{ConfigError, Validate};
use pmw_session::bus::sign::{SigningKey, VerifyKeys};
use pmw_session::bus::BusAccess;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
pub struct PushConfig {
    #[serde(default = "d::listen")]
    pub push_listen: SocketAddr,
    #[serde(default)]
    pub push_slot: i16,
    #[serde(default = "d::yes")]
    pub push_worker: bool,
    #[serde(default = "d::segment")]
    pub push_lock_segment_ms: u64,
    #[serde(default = "d::fallback")]
    pub push_fallback_ms: u64,
    #[serde(default = "d::limit")]
    pub push_round_limit: u64,
    #[serde(default = "d::span")]
    pub push_catchup_span_blocks: u64,
    #[serde(default = "d::deadline")]
    pub push_round_deadline_ms: u64,
    #[serde(default = "d::queue")]
    pub push_ws_queue: usize,
    #[serde(default = "d::connects")]
    pub push_ws_connects_per_sec: u32,
    #[serde(default = "d::connect_burst")]
    pub push_ws_connect_burst: u32,
    #[serde(default = "d::auth_failures")]
    pub push_ws_auth_failures_per_sec: u32,
    #[serde(default = "d::auth_failure_burst")]
    pub push_ws_auth_failure_burst: u32,
    #[serde(default = "d::view_stale")]
    pub push_view_stale_ms: u64,
    #[serde(default)]
    pub push_trusted_proxies: TrustedProxies,
    #[serde(default = "d::heartbeat")]
    pub push_ws_heartbeat_ms: u64,
    #[serde(default = "d::resume")]
    pub push_resume_max_trades: u64,
    #[serde(default = "d::ready")]
    pub push_ready_max_age_ms: u64,
    #[serde(default)]
    pub push_stall_exit_ms: Option<u64>,
    #[serde(default = "d::lease")]
    pub push_lease_ms: u64,
    #[serde(default = "d::metrics")]
    pub push_metrics_addr: SocketAddr,
    #[serde(default)]
    pub push_nats_urls: Option<String>,
    #[serde(default = "d::nats_stream")]
    pub push_nats_stream: String,
    #[serde(default = "d::nats_prefix")]
    pub push_nats_prefix: String,
    #[serde(default)]
    pub bus_signing_key: Option<SecretString>,
    #[serde(default)]
    pub bus_verify_keys: String,
    #[serde(default)]
    pub push_nats_user: Option<String>,
    #[serde(default)]
    pub push_nats_password: Option<SecretString>,
    #[serde(default)]
    pub push_nats_ca: Option<PathBuf>,
    #[serde(default)]
    pub push_nats_allow_insecure: bool,
    #[serde(default = "d::nats_max_bytes")]
    pub push_nats_max_bytes: i64,
    #[serde(default = "d::nats_max_msg_size")]
    pub push_nats_max_msg_size: i32,
}

mod d {
    use std::net::SocketAddr;
    pub fn listen() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 8081))
    }
    pub fn metrics() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 9462))
    }
    pub fn yes() -> bool {
        true
    }
    pub fn segment() -> u64 {
        300_000
    }
    pub fn fallback() -> u64 {
        3_000
    }
    pub fn limit() -> u64 {
        5_000
    }
    pub fn span() -> u64 {
        1_000
    }
    pub fn deadline() -> u64 {
        10_000
    }
    pub fn queue() -> usize {
        1_024
    }
    pub fn lease() -> u64 {
        10_000
    }
    pub fn connects() -> u32 {
        5
    }
    pub fn connect_burst() -> u32 {
        60
    }
    pub fn auth_failures() -> u32 {
        5
    }
    pub fn auth_failure_burst() -> u32 {
        20
    }
    pub fn view_stale() -> u64 {
        30_000
    }
    pub fn heartbeat() -> u64 {
        15_000
    }
    pub fn resume() -> u64 {
        10_000
    }
    pub fn ready() -> u64 {
        15_000
    }
    pub fn nats_stream() -> String {
        "PMW_FRAMES".into()
    }
    pub fn nats_prefix() -> String {
        "pmw".into()
    }
    pub fn nats_max_bytes() -> i64 {
        1 << 30
    }
    pub fn nats_max_msg_size() -> i32 {
        1 << 20
    }
}

/// The defaults, for in-process runs (tests): the same as an empty environment, except that
/// metrics are served on a free port (`127.0.0.1:0`), so in-process instances never collide.
impl Default for PushConfig {
    fn default() -> Self {
        let mut c: PushConfig =
            pmw_core::config::load_from(figment::Figment::new()).expect("defaults are valid");
        c.push_metrics_addr = ([127, 0, 0, 1], 0).into();
        c
    }
}

impl PushConfig {
    /// From the layered sources; `PUSH_WORKER` (unprefixed, as operators know it) is honoured too.
    pub fn load() -> Result<PushConfig, ConfigError> {
        let mut f = pmw_core::config::figment();
        if let Ok(v) = std::env::var("PUSH_WORKER") {
            f = f.merge(figment::providers::Serialized::default(
                "push_worker",
                v != "0",
            ));
        }
        pmw_core::config::load_from(f)
    }

    pub fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    /// Trades read per round: the configured limit, capped at half a session queue.
    pub fn round_trades(&self) -> u64 {
        self.push_round_limit
            .min(self.push_ws_queue as u64 / 2)
            .max(1)
    }

    /// The session layer's settings.
    pub fn session(&self) -> pmw_session::SessionConfig {
        pmw_session::SessionConfig {
            ws_queue: self.push_ws_queue,
            heartbeat_ms: self.push_ws_heartbeat_ms,
            resume_max_trades: self.push_resume_max_trades,
            trusted_proxies: self.push_trusted_proxies.clone(),
            connects_per_sec: self.push_ws_connects_per_sec,
            connect_burst: self.push_ws_connect_burst,
            auth_failures_per_sec: self.push_ws_auth_failures_per_sec,
            auth_failure_burst: self.push_ws_auth_failure_burst,
            view_stale_ms: self.push_view_stale_ms,
        }
    }

    /// Edge mode's broker settings, when `PMW_PUSH_NATS_URLS` names any node.
    pub fn bus(&self) -> Option<pmw_session::bus::BusConfig> {
        let urls = self.push_nats_urls.as_deref().unwrap_or("");
        let signer = self
            .bus_signing_key
            .as_ref()
            .and_then(|k| SigningKey::parse(k.expose_secret()).ok());
        let verify = VerifyKeys::parse(&self.bus_verify_keys).unwrap_or_default();
        let mut c = pmw_session::bus::BusConfig::named(
            urls,
            &self.push_nats_stream,
            &self.push_nats_prefix,
        )
        .signed(signer, verify);
        c.access = BusAccess {
            user: self.push_nats_user.clone(),
            password: self.push_nats_password.clone(),
            ca: self.push_nats_ca.clone(),
            allow_insecure: self.push_nats_allow_insecure,
        };
        c.max_bytes = self.push_nats_max_bytes;
        c.max_msg_size = self.push_nats_max_msg_size;
        (!c.urls.is_empty()).then_some(c)
    }

    /// How long a leader may go without completing a round before it hands over.
    pub fn stall_exit_ms(&self) -> u64 {
        self.push_stall_exit_ms
            .unwrap_or(self.push_ready_max_age_ms)
    }
}

impl Validate for PushConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        pmw_core::listen::check("PMW_PUSH_LISTEN", self.push_listen)?;
        if self.push_slot < 0 {
            return Err(ConfigError::invalid("PMW_PUSH_SLOT", "must be ≥ 0"));
        }
        if self.push_lock_segment_ms < 10 || self.push_fallback_ms < 10 {
            return Err(ConfigError::invalid(
                "PMW_PUSH_FALLBACK_MS",
                "lock segment and fallback must be ≥ 10 ms",
            ));
        }
        if self.push_lease_ms < 2_000 {
            return Err(ConfigError::invalid(
                "PMW_PUSH_LEASE_MS",
                "must be ≥ 2000 ms (the leader beats every second)",
            ));
        }
        if self.stall_exit_ms() < 1_000 {
            return Err(ConfigError::invalid(
                "PMW_PUSH_STALL_EXIT_MS",
                "must be ≥ 1000 ms (a round must have time to complete)",
            ));
        }
        if self.push_catchup_span_blocks == 0 {
            return Err(ConfigError::invalid(
                "PMW_PUSH_CATCHUP_SPAN_BLOCKS",
                "must be positive",
            ));
        }
        if self.push_round_limit == 0 || self.push_ws_queue < 8 || self.push_resume_max_trades == 0
        {
            return Err(ConfigError::invalid(
                "PMW_PUSH_WS_QUEUE",
                "round limit, queue (≥ 8) and resume window must be positive",
            ));
        }
        if let Some(Err(e)) = self.bus().map(|b| b.check()) {
            return Err(ConfigError::invalid("PMW_PUSH_NATS_URLS", e.to_string()));
        }
        self.check_keys()?;
        Ok(())
    }
}

impl PushConfig {
    /// In edge mode the signing key is required; keys given must parse (the error never shows
    /// the key).
    fn check_keys(&self) -> Result<(), ConfigError> {
        if let Err(e) = VerifyKeys::parse(&self.bus_verify_keys) {
            return Err(ConfigError::invalid("PMW_BUS_VERIFY_KEYS", e.to_string()));
        }
        match &self.bus_signing_key {
            Some(k) => SigningKey::parse(k.expose_secret())
                .map(|_| ())
                .map_err(|_| {
                    ConfigError::invalid(
                        "PMW_BUS_SIGNING_KEY",
                        "expected <id>:<64 hex digits of an Ed25519 seed> (pmwctl bus keygen)",
                    )
                }),
            None if self.bus().is_some() => Err(ConfigError::invalid(
                "PMW_BUS_SIGNING_KEY",
                "required in edge mode (PMW_PUSH_NATS_URLS set): edges deliver only signed frames (pmwctl bus keygen)",
            )),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use figment::providers::Serialized;

    fn load(pairs: &[(&str, &str)]) -> Result<PushConfig, ConfigError> {
        let mut f = figment::Figment::new();
        for (k, v) in pairs {
            f = f.merge(Serialized::default(k, v));
        }
        pmw_core::config::load_from(f)
    }

    fn refused_for(pairs: &[(&str, &str)]) -> (&'static str, String) {
        match load(pairs) {
            Err(ConfigError::Invalid { key, reason }) => (key, reason),
            other => panic!("{pairs:?}: {other:?}"),
        }
    }

    #[test]
    fn an_edge_mode_push_needs_a_signing_key_and_never_shows_it() {
        let urls = ("push_nats_urls", "nats://127.0.0.1:1");
        assert!(load(&[]).is_ok(), "single-process mode needs no key");
        assert_eq!(refused_for(&[urls]).0, "PMW_BUS_SIGNING_KEY");
        let bad = "k1:not-a-seed-but-secret-text";
        let (key, reason) = refused_for(&[urls, ("bus_signing_key", bad)]);
        assert_eq!(key, "PMW_BUS_SIGNING_KEY");
        assert!(!reason.contains("secret-text"), "{reason}");
        let (secret, _) = pmw_session::bus::sign::generate("k1").unwrap();
        let c = load(&[urls, ("bus_signing_key", &secret)]).expect("valid");
        assert!(c.bus().unwrap().signer.is_some());
        let shown = format!("{c:?} {:?}", c.bus());
        assert!(
            !shown.contains(&secret[3..]),
            "the signing key is shown: {shown}"
        );
        let verify = ("bus_verify_keys", "k2:zz");
        assert_eq!(
            refused_for(&[urls, ("bus_signing_key", &secret), verify]).0,
            "PMW_BUS_VERIFY_KEYS"
        );
    }
}
