//! pmw-edge settings beyond the core config (same layering: defaults → `PMW_CONFIG` → env).
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `PMW_EDGE_LISTEN` | `127.0.0.1:8101` | WebSocket listen address (`/v1/ws`, `/health`): loopback, or a private network's address for a Caddy on another machine, never public (Caddy is the public listener) |
//! | `PMW_EDGE_METRICS_ADDR` | `127.0.0.1:9466` | private Prometheus `/metrics` address (a port in use is logged, not fatal) |
//! | `PMW_EDGE_NATS_URLS` | required | NATS JetStream client URLs, comma-separated (all nodes of the cluster) |
//! | `PMW_EDGE_NATS_STREAM` / `PMW_EDGE_NATS_PREFIX` | `PMW_FRAMES` / `pmw` | the stream push publishes to and its subjects' first token (as push's `PMW_PUSH_NATS_*`) |
//! | `PMW_BUS_VERIFY_KEYS` | required | the public keys of push's frame signing keys, `<id>:<64 hex>` comma-separated (two during a rotation; `pmwctl bus keygen` prints a pair): a message on the stream not signed by one of them is refused and skipped (docs/OPERATIONS.md, "Frame signing"); an edge without one refuses to start (78) |
//! | `PMW_EDGE_NATS_USER` / `PMW_EDGE_NATS_PASSWORD` | unset | the edges' identity on the locked broker (user `edge` in deploy/nats/nats.conf: reads the stream, publishes nothing; the password is a secret: never logged); both or neither (a URL's user and password are refused: the client would not send them) |
//! | `PMW_EDGE_NATS_CA` | unset | CA file the servers' TLS certificates are checked against; set, TLS is required (`tls://` URLs require it too) |
//! | `PMW_EDGE_NATS_ALLOW_INSECURE` | `false` | accept plain `nats://` (no CA, no `tls://`) to hosts other than loopback (127.0.0.0/8, `::1`, `localhost`) |
//! | `PMW_EDGE_INDEX_REFRESH_MS` | `1000` | the subscription index is reloaded on every change notification and at least this often (a revoked key's sessions close within it even if a NOTIFY was lost) |
//! | `PMW_EDGE_VIEW_STALE_MS` | `30000` | an edge that could not refresh its view of keys and subscriptions for longer closes every session with 1013 (try again later), admits none and reports `/health` unhealthy (503) until a refresh succeeds: a revoked key never keeps streaming from an edge cut from Postgres |
//! | `PMW_EDGE_FEED_STALL_MS` | `20000` | push's cursor past the hub's position for this long with the hub not moving (frames on the stream this edge does not get) ends the edge (exit 75, `feed stalled`): restarted at the stream's last round, its sessions resume from the ledger |
//! | `PMW_EDGE_WS_QUEUE` | `1024` | frames queued per session before it is closed as a slow consumer (1013) |
//! | `PMW_EDGE_WS_HEARTBEAT_MS` | `15000` | heartbeat period per session |
//! | `PMW_EDGE_RESUME_MAX_TRADES` | `10000` | most trades replayed on `since=`; beyond, the client is told to backfill over REST |
//! | `PMW_EDGE_WS_CONNECTS_PER_SEC` / `PMW_EDGE_WS_CONNECT_BURST` | `5` / `60` | WebSocket connects per account (429 with `Retry-After` beyond), fleet-wide (shared in Postgres by every edge and push: set the same values everywhere) |
//! | `PMW_EDGE_WS_AUTH_FAILURES_PER_SEC` / `PMW_EDGE_WS_AUTH_FAILURE_BURST` | `5` / `20` | failed authentications per client address, fleet-wide as above |
//! | `PMW_EDGE_TRUSTED_PROXIES` | `127.0.0.0/8,::1` | peers whose `X-Forwarded-For` is believed (Caddy's) |

use std::net::SocketAddr;
use std::path::PathBuf;

use pmw_core::client::TrustedProxies;
use pmw_core::config::{ConfigError, Validate};
use pmw_session::bus::sign::VerifyKeys;
use pmw_session::bus::{BusAccess, BusConfig};
use pmw_session::SessionConfig;
use secrecy::SecretString;
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
pub struct EdgeConfig {
    #[serde(default = "d::listen")]
    pub edge_listen: SocketAddr,
    #[serde(default = "d::metrics")]
    pub edge_metrics_addr: SocketAddr,
    #[serde(default)]
    pub edge_nats_urls: String,
    #[serde(default = "d::stream")]
    pub edge_nats_stream: String,
    #[serde(default = "d::prefix")]
    pub edge_nats_prefix: String,
    #[serde(default)]
    pub edge_nats_user: Option<String>,
    #[serde(default)]
    pub edge_nats_password: Option<SecretString>,
    #[serde(default)]
    pub edge_nats_ca: Option<PathBuf>,
    #[serde(default)]
    pub edge_nats_allow_insecure: bool,
    #[serde(default = "d::refresh")]
    pub edge_index_refresh_ms: u64,
    #[serde(default = "d::view_stale")]
    pub edge_view_stale_ms: u64,
    #[serde(default = "d::feed_stall")]
    pub edge_feed_stall_ms: u64,
    #[serde(default = "d::queue")]
    pub edge_ws_queue: usize,
    #[serde(default = "d::heartbeat")]
    pub edge_ws_heartbeat_ms: u64,
    #[serde(default = "d::resume")]
    pub edge_resume_max_trades: u64,
    #[serde(default = "d::connects")]
    pub edge_ws_connects_per_sec: u32,
    #[serde(default = "d::connect_burst")]
    pub edge_ws_connect_burst: u32,
    #[serde(default = "d::auth_failures")]
    pub edge_ws_auth_failures_per_sec: u32,
    #[serde(default = "d::auth_failure_burst")]
    pub edge_ws_auth_failure_burst: u32,
    #[serde(default)]
    pub edge_trusted_proxies: TrustedProxies,
    #[serde(default)]
    pub bus_verify_keys: String,
}

mod d {
    use std::net::SocketAddr;
    pub fn listen() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 8101))
    }
    pub fn metrics() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 9466))
    }
    pub fn stream() -> String {
        "PMW_FRAMES".into()
    }
    pub fn prefix() -> String {
        "pmw".into()
    }
    pub fn refresh() -> u64 {
        1_000
    }
    pub fn view_stale() -> u64 {
        30_000
    }
    pub fn feed_stall() -> u64 {
        20_000
    }
    pub fn queue() -> usize {
        1_024
    }
    pub fn heartbeat() -> u64 {
        15_000
    }
    pub fn resume() -> u64 {
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
}

impl EdgeConfig {
    /// From the layered sources.
    pub fn load() -> Result<EdgeConfig, ConfigError> {
        pmw_core::config::load_from(pmw_core::config::figment())
    }

    /// The defaults with the broker at `urls` and push's verify keys `verify_keys`, serving on
    /// a free loopback port (tests).
    pub fn with_nats(urls: &str, verify_keys: &str) -> EdgeConfig {
        let given = figment::Figment::new()
            .merge(figment::providers::Serialized::default(
                "edge_nats_urls",
                urls,
            ))
            .merge(figment::providers::Serialized::default(
                "bus_verify_keys",
                verify_keys,
            ));
        let mut c: EdgeConfig = pmw_core::config::load_from(given).expect("defaults are valid");
        c.edge_listen = ([127, 0, 0, 1], 0).into();
        c.edge_metrics_addr = ([127, 0, 0, 1], 0).into();
        c
    }

    /// The broker settings (verify keys that do not parse are none: [`Validate`] refuses them).
    pub fn bus(&self) -> BusConfig {
        BusConfig::named(
            &self.edge_nats_urls,
            &self.edge_nats_stream,
            &self.edge_nats_prefix,
        )
        .signed(
            None,
            VerifyKeys::parse(&self.bus_verify_keys).unwrap_or_default(),
        )
        .with_access(BusAccess {
            user: self.edge_nats_user.clone(),
            password: self.edge_nats_password.clone(),
            ca: self.edge_nats_ca.clone(),
            allow_insecure: self.edge_nats_allow_insecure,
        })
    }

    /// The session layer's settings.
    pub fn session(&self) -> SessionConfig {
        SessionConfig {
            ws_queue: self.edge_ws_queue,
            heartbeat_ms: self.edge_ws_heartbeat_ms,
            resume_max_trades: self.edge_resume_max_trades,
            trusted_proxies: self.edge_trusted_proxies.clone(),
            connects_per_sec: self.edge_ws_connects_per_sec,
            connect_burst: self.edge_ws_connect_burst,
            auth_failures_per_sec: self.edge_ws_auth_failures_per_sec,
            auth_failure_burst: self.edge_ws_auth_failure_burst,
            view_stale_ms: self.edge_view_stale_ms,
        }
    }
}

impl Validate for EdgeConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        pmw_core::listen::check("PMW_EDGE_LISTEN", self.edge_listen)?;
        if self.edge_nats_urls.trim().is_empty() {
            return Err(ConfigError::invalid(
                "PMW_EDGE_NATS_URLS",
                "required: the NATS JetStream cluster push publishes its rounds to",
            ));
        }
        self.bus()
            .check()
            .map_err(|e| ConfigError::invalid("PMW_EDGE_NATS_URLS", e.to_string()))?;
        match VerifyKeys::parse(&self.bus_verify_keys) {
            Err(e) => return Err(ConfigError::invalid("PMW_BUS_VERIFY_KEYS", e.to_string())),
            Ok(k) if k.is_empty() => {
                return Err(ConfigError::invalid(
                    "PMW_BUS_VERIFY_KEYS",
                    "required: the public key(s) of push's frame signing key (pmwctl bus keygen); an edge delivers only frames they verify",
                ))
            }
            Ok(_) => {}
        }
        if self.edge_index_refresh_ms < 100 {
            return Err(ConfigError::invalid(
                "PMW_EDGE_INDEX_REFRESH_MS",
                "must be ≥ 100 ms",
            ));
        }
        if self.edge_view_stale_ms < 2 * self.edge_index_refresh_ms {
            return Err(ConfigError::invalid(
                "PMW_EDGE_VIEW_STALE_MS",
                "must be at least twice PMW_EDGE_INDEX_REFRESH_MS",
            ));
        }
        if self.edge_feed_stall_ms < 5_000 {
            return Err(ConfigError::invalid(
                "PMW_EDGE_FEED_STALL_MS",
                "must be ≥ 5000 ms (a broker election alone takes seconds)",
            ));
        }
        if self.edge_ws_queue < 8 || self.edge_resume_max_trades == 0 {
            return Err(ConfigError::invalid(
                "PMW_EDGE_WS_QUEUE",
                "queue (≥ 8) and resume window must be positive",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use figment::providers::Serialized;

    fn load(verify_keys: &str) -> Result<EdgeConfig, ConfigError> {
        pmw_core::config::load_from(
            figment::Figment::new()
                .merge(Serialized::default("edge_nats_urls", "nats://127.0.0.1:1"))
                .merge(Serialized::default("bus_verify_keys", verify_keys)),
        )
    }

    #[test]
    fn an_edge_without_verify_keys_refuses_to_start() {
        for bad in ["", "k1", "k1:00"] {
            match load(bad) {
                Err(ConfigError::Invalid { key, .. }) => assert_eq!(key, "PMW_BUS_VERIFY_KEYS"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        let (_, public) = pmw_session::bus::sign::generate("k1").unwrap();
        let c = load(&public).expect("valid");
        assert!(!c.bus().verify.is_empty());
    }

    use secrecy::ExposeSecret;

    #[test]
    #[allow(clippy::result_large_err)] // figment's own Jail API returns its Error by value
    fn the_edges_identity_comes_from_the_env_and_its_password_is_never_shown() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("PMW_EDGE_NATS_URLS", "tls://10.0.0.7:4222");
            jail.set_env("PMW_EDGE_NATS_USER", "edge");
            jail.set_env("PMW_EDGE_NATS_PASSWORD", "s3cret-edge-pw");
            let (_, public) = pmw_session::bus::sign::generate("k1").unwrap();
            jail.set_env("PMW_BUS_VERIFY_KEYS", public);
            let c = EdgeConfig::load().map_err(|e| e.to_string())?;
            let access = c.bus().access;
            assert_eq!(access.user.as_deref(), Some("edge"));
            assert_eq!(
                access.password.as_ref().map(|p| p.expose_secret()),
                Some("s3cret-edge-pw")
            );
            for shown in [format!("{c:?}"), format!("{:?}", c.bus())] {
                assert!(!shown.contains("s3cret"), "{shown}");
            }
            // Plain nats:// to a host that is not loopback: refused unless allowed.
            jail.set_env("PMW_EDGE_NATS_URLS", "nats://10.0.0.7:4222");
            let e = EdgeConfig::load().map_err(|e| e.to_string());
            assert!(
                e.as_ref().is_err_and(|e| e.contains("not loopback")),
                "{e:?}"
            );
            jail.set_env("PMW_EDGE_NATS_ALLOW_INSECURE", "true");
            assert!(EdgeConfig::load().is_ok());
            Ok(())
        });
    }
}
