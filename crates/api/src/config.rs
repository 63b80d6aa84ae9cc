//! API-only settings ([`ApiConfig`]), loaded only by `pmw-api` (and never by push or live, so a
//! broken `PMW_API_*` value cannot stop the push path). Same layering as the core settings.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `PMW_API_LISTEN` | `127.0.0.1:8080` | API listen address: loopback, or a private network's address for a Caddy on another machine, never public (Caddy is the public listener) |
//! | `PMW_API_MAX_BODY_BYTES` | `65536` | request body limit (413 beyond) |
//! | `PMW_API_RATE_PER_SEC` | `20` | per-account sustained request rate (all its keys together) (429 + `Retry-After` beyond) |
//! | `PMW_API_RATE_BURST` | `40` | per-account burst |
//! | `PMW_API_ANON_RATE_PER_SEC` / `PMW_API_ANON_RATE_BURST` | `20` / `100` | requests without an `Authorization` header (any path: `/v1/ready`, an unknown route's 404, sign-up…) per client address, counted in-process before any other work (429 + `Retry-After` beyond, saying the limit is the address's); requests with a key are limited per account instead |
//! | `PMW_API_WS_TICKET_TTL_SECS` | `60` | lifetime of a browser WebSocket ticket |
//! | `PMW_API_IDEMPOTENCY_TTL_SECS` | `86400` | how long a POST's `Idempotency-Key` and its stored response are kept (60..=604800) |
//! | `PMW_API_WEBHOOK_TEST_PER_MIN` | `6` | `POST /v1/webhooks/{id}/test` per account per minute (429 + `Retry-After` beyond) |
//! | `PMW_API_DEFAULT_PLAN` | `free` | plan given to new accounts; must name a plan |
//! | `PMW_API_PLANS` | free and pro | plans as a table (TOML file) or JSON in the variable: `{"free":{"max_wallets":10,"max_webhook_endpoints":1,"max_ws_sessions":2,"max_markets":5,"market_min_collateral":"1000"}}` (`max_markets`, default 10: markets an account may follow; `market_min_collateral`, default `"100"` USDC: the least `filter.min_collateral` of a market subscription, `"0"` for none) |
//! | `PMW_GAMMA_URL` | `https://gamma-api.polymarket.com` | the Gamma-compatible markets API (shared with pmw-live) that `/v1/markets` resolves condition ids, token ids and event slugs with, when a market subscription is created or changed (503 when it does not answer) |
//! | `PMW_API_ALLOW_PRIVATE_WEBHOOKS` | `false` | accept webhook URLs on loopback/private/link-local addresses and local names (tests, on-prem); push has its own `PMW_PUSH_ALLOW_PRIVATE_WEBHOOKS` |
//! | `PMW_API_TRUSTED_PROXIES` | `127.0.0.0/8,::1` | addresses (or CIDR blocks, comma-separated) whose `X-Forwarded-For` is believed: Caddy's. From any other peer the header is ignored and the peer is the client (the per-address failure throttle keys by it); `""` trusts none |
//! | `PMW_API_READY_INTERVAL_MS` | `1000` | `/v1/ready` (and `/metrics`' readiness gauges) evaluate the checks at most this often, shared by every caller (100..=60000) |
//! | `PMW_API_READY_ROUND_MAX_AGE_MS` | `15000` | `/v1/ready` is 503 when the push leader's heartbeat or its last completed round is older |
//! | `PMW_API_READY_LATENCY_MAX_MS` | `5000` | `/v1/ready` is 503 when the median detect→push (WS, live rows) exceeds this |
//! | `PMW_API_READY_LATENCY_WINDOW_MS` | `1200000` | the window of that median (20 min, bounded on both sides); webhook deliveries count when there is no WebSocket sample |
//! | `PMW_API_READY_INGEST_MAX_LAG_BLOCKS` | `10` | `/v1/ready` is 503 when pmw-live's watermark trails the newest head it saw by more blocks, or its heartbeat is older than the round max age |
//! | `PMW_API_READY_WEBHOOK_DUE_MAX_AGE_MS` | `60000` | `/v1/ready` is 503 when a webhook delivery has been due and unclaimed for longer (the dispatcher is not running) |

use std::net::SocketAddr;

use serde::Deserialize;

use pmw_core::client::TrustedProxies;
use pmw_core::config::{within, ConfigError, Validate};
use pmw_core::plans;
pub use pmw_core::plans::Plan;

use std::collections::BTreeMap;

/// Settings only the API reads: listen address, auth, limits, plans, readiness thresholds.
#[derive(Debug, Clone, Deserialize)]
pub struct ApiConfig {
    #[serde(default = "defaults::api_listen")]
    pub api_listen: SocketAddr,
    #[serde(default = "defaults::max_body")]
    pub api_max_body_bytes: usize,
    #[serde(default = "defaults::rate")]
    pub api_rate_per_sec: u32,
    #[serde(default = "defaults::burst")]
    pub api_rate_burst: u32,
    #[serde(default = "defaults::anon_rate")]
    pub api_anon_rate_per_sec: u32,
    #[serde(default = "defaults::anon_burst")]
    pub api_anon_rate_burst: u32,
    #[serde(default = "defaults::ticket_ttl")]
    pub api_ws_ticket_ttl_secs: u64,
    #[serde(default = "defaults::idempotency_ttl")]
    pub api_idempotency_ttl_secs: u64,
    #[serde(default = "defaults::webhook_test_per_min")]
    pub api_webhook_test_per_min: u32,
    /// Also read by `pmwctl account create` ([`pmw_core::plans::Plans`]).
    #[serde(default = "plans::default_plan")]
    pub api_default_plan: String,
    #[serde(
        default = "plans::default_plans",
        deserialize_with = "plans::plans_from_table_or_json"
    )]
    pub api_plans: BTreeMap<String, Plan>,
    /// The markets API market subscriptions are resolved with (`PMW_GAMMA_URL`, as pmw-live's).
    #[serde(default = "defaults::gamma_url")]
    pub gamma_url: String,
    #[serde(default)]
    pub api_allow_private_webhooks: bool,
    #[serde(default)]
    pub api_trusted_proxies: TrustedProxies,
    #[serde(default = "defaults::ready_interval")]
    pub api_ready_interval_ms: u64,
    #[serde(default = "defaults::ready_round_age")]
    pub api_ready_round_max_age_ms: u64,
    #[serde(default = "defaults::ready_latency")]
    pub api_ready_latency_max_ms: u64,
    #[serde(default = "defaults::ready_window")]
    pub api_ready_latency_window_ms: u64,
    #[serde(default = "defaults::ready_ingest_lag")]
    pub api_ready_ingest_max_lag_blocks: u64,
    #[serde(default = "defaults::ready_webhook_due")]
    pub api_ready_webhook_due_max_age_ms: u64,
}

impl ApiConfig {
    pub fn load() -> Result<ApiConfig, ConfigError> {
        pmw_core::config::load()
    }

    /// The plan named `name`, or the default plan when `name` is not configured (any more).
    pub fn plan(&self, name: &str) -> (&str, &Plan) {
        plans::plan(&self.api_default_plan, &self.api_plans, name)
    }
}

impl Default for ApiConfig {
    fn default() -> Self {
        pmw_core::config::load_from(figment::Figment::new()).expect("api defaults are valid")
    }
}

impl Validate for ApiConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        pmw_core::listen::check("PMW_API_LISTEN", self.api_listen)?;
        plans::validate(&self.api_default_plan, &self.api_plans)?;
        if !(self.gamma_url.starts_with("http://") || self.gamma_url.starts_with("https://")) {
            return Err(ConfigError::invalid(
                "PMW_GAMMA_URL",
                "must be an http:// or https:// URL",
            ));
        }
        if self.api_rate_per_sec == 0 || self.api_rate_burst == 0 {
            return Err(ConfigError::invalid(
                "PMW_API_RATE_PER_SEC",
                "rate and burst must be positive",
            ));
        }
        if self.api_anon_rate_per_sec == 0 || self.api_anon_rate_burst == 0 {
            return Err(ConfigError::invalid(
                "PMW_API_ANON_RATE_PER_SEC",
                "rate and burst must be positive",
            ));
        }
        if self.api_max_body_bytes < 1024 {
            return Err(ConfigError::invalid(
                "PMW_API_MAX_BODY_BYTES",
                "must be at least 1024",
            ));
        }
        within(
            self.api_ws_ticket_ttl_secs,
            5..=3600,
            "PMW_API_WS_TICKET_TTL_SECS",
        )?;
        within(
            self.api_idempotency_ttl_secs,
            60..=604_800,
            "PMW_API_IDEMPOTENCY_TTL_SECS",
        )?;
        if self.api_webhook_test_per_min == 0 {
            return Err(ConfigError::invalid(
                "PMW_API_WEBHOOK_TEST_PER_MIN",
                "must be positive",
            ));
        }
        within(
            self.api_ready_interval_ms,
            100..=60_000,
            "PMW_API_READY_INTERVAL_MS",
        )?;
        within(
            self.api_ready_round_max_age_ms,
            1_000..=u64::MAX,
            "PMW_API_READY_ROUND_MAX_AGE_MS",
        )?;
        if self.api_ready_latency_max_ms == 0 {
            return Err(ConfigError::invalid(
                "PMW_API_READY_LATENCY_MAX_MS",
                "must be positive",
            ));
        }
        within(
            self.api_ready_latency_window_ms,
            1_000..=86_400_000,
            "PMW_API_READY_LATENCY_WINDOW_MS",
        )?;
        within(
            self.api_ready_webhook_due_max_age_ms,
            1_000..=u64::MAX,
            "PMW_API_READY_WEBHOOK_DUE_MAX_AGE_MS",
        )?;
        Ok(())
    }
}

mod defaults {
    use super::*;

    pub fn gamma_url() -> String {
        "https://gamma-api.polymarket.com".into()
    }

    pub fn api_listen() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 8080))
    }
    pub fn max_body() -> usize {
        64 * 1024
    }
    pub fn rate() -> u32 {
        20
    }
    pub fn burst() -> u32 {
        40
    }
    pub fn anon_rate() -> u32 {
        20
    }
    pub fn anon_burst() -> u32 {
        100
    }
    pub fn ticket_ttl() -> u64 {
        60
    }
    pub fn idempotency_ttl() -> u64 {
        24 * 3600
    }
    pub fn webhook_test_per_min() -> u32 {
        6
    }
    pub fn ready_interval() -> u64 {
        1_000
    }
    pub fn ready_round_age() -> u64 {
        15_000
    }
    pub fn ready_latency() -> u64 {
        5_000
    }
    pub fn ready_window() -> u64 {
        20 * 60 * 1_000
    }
    pub fn ready_ingest_lag() -> u64 {
        10
    }
    pub fn ready_webhook_due() -> u64 {
        60_000
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use figment::providers::Serialized;
    use figment::Figment;
    use pmw_core::config::{load_from, CoreConfig};

    #[test]
    fn new_api_settings_default_and_validate() {
        let api = ApiConfig::default();
        assert!(!api.api_allow_private_webhooks);
        assert_eq!(api.api_ready_latency_max_ms, 5_000);
        assert_eq!(api.api_ready_latency_window_ms, 1_200_000);
        assert_eq!(
            api.plan("gone").0,
            "free",
            "an unknown plan falls back to the default"
        );
        let cases: [(&str, serde_json::Value, &str); 3] = [
            ("api_listen", "0.0.0.0:8080".into(), "PMW_API_LISTEN"),
            (
                "api_ready_round_max_age_ms",
                10.into(),
                "PMW_API_READY_ROUND_MAX_AGE_MS",
            ),
            (
                "api_ready_latency_window_ms",
                1.into(),
                "PMW_API_READY_LATENCY_WINDOW_MS",
            ),
        ];
        for (k, v, key) in cases {
            let err = load_from::<ApiConfig>(Figment::new().merge(Serialized::default(k, &v)))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key), "{k}={v}: {err}");
        }
        let api: ApiConfig = load_from(
            Figment::new().merge(Serialized::default("api_allow_private_webhooks", true)),
        )
        .unwrap();
        assert!(api.api_allow_private_webhooks);
    }

    fn with(pairs: &[(&str, &str)]) -> Figment {
        pmw_core::config::from_pairs(pairs)
    }

    #[test]
    fn defaults_are_valid() {
        let api: ApiConfig = load_from(Figment::new()).unwrap();
        assert_eq!(api.api_default_plan, "free");
    }

    #[test]
    fn broken_api_settings_do_not_stop_core() {
        let f = with(&[
            ("api_default_plan", "platinum"),
            ("api_rate_per_sec", "fast"),
        ]);
        assert!(load_from::<ApiConfig>(f.clone()).is_err());
        let core: CoreConfig = load_from(f).expect("core must load despite broken api settings");
        assert_eq!(core.clickhouse_url, "http://127.0.0.1:58123");
    }

    #[test]
    fn unknown_default_plan_names_the_key() {
        let err = load_from::<ApiConfig>(with(&[("api_default_plan", "platinum")])).unwrap_err();
        assert!(err.to_string().contains("PMW_API_DEFAULT_PLAN"), "{err}");
    }

    #[test]
    fn plans_accept_json_from_env_form() {
        let api: ApiConfig = load_from(with(&[
            (
                "api_plans",
                r#"{"solo":{"max_wallets":3,"max_webhook_endpoints":0,"max_ws_sessions":1}}"#,
            ),
            ("api_default_plan", "solo"),
        ]))
        .unwrap();
        assert_eq!(api.api_plans["solo"].max_wallets, 3);
    }
}
