//! pmw-live settings, beyond the core config (layered the same way: defaults → `PMW_CONFIG` file →
//! environment).
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `PMW_LIVE_REORG_MAX_DEPTH` | `64` | deepest reorg walked back before giving up (exit 1: a human must look) |
//! | `PMW_LIVE_LOCK_SEGMENT_MS` | `300000` | one segment of the writer-lock wait (`lock_timeout`) |
//! | `PMW_LIVE_POLL_INTERVAL_MS` | `1000` | HTTP head polling period while the WebSocket is down |
//! | `PMW_LIVE_WS_STALL_MS` | `30000` | a WebSocket silent this long is treated as lost |
//! | `PMW_LIVE_FINALIZED_POLL_MS` | `1000` | how often the chain's `finalized` block is asked for (the finalized watermark behind `final` events) |
//! | `PMW_LIVE_AUDIT_ENABLED` | `true` | run the completeness audit (re-reads finalized blocks with `eth_getLogs`, backfills missing fills, retracts extra ones) |
//! | `PMW_LIVE_AUDIT_RANGE_BLOCKS` | `100` | blocks per audit `eth_getLogs` range, at most (1–10000) |
//! | `PMW_LIVE_AUDIT_MAX_RPS` | `5` | RPC calls per second the audit makes, at most (two per range: the logs and the range's top block) |
//! | `PMW_LIVE_AUDIT_INTERVAL_MS` | `30000` | how often an audit that has caught up looks for newly finalized blocks |
//! | `PMW_LIVE_RPC_PROVIDERS` | unset | several RPC providers, raced ([`crate::providers`]): `name=ws_url\|http_url` entries separated by spaces, e.g. `a=wss://a.example/KEY\|https://a.example/KEY b=wss://…\|https://…`. Unset: one provider `rpc` from `PMW_RPC_WS_URL`/`PMW_RPC_HTTP_URL`. URLs are secrets (logs show the host only) |
//! | `PMW_LIVE_PROVIDER_MAX_LAG_BLOCKS` | `3` | a provider whose head is more than this many blocks behind (or ahead of) the providers' median head is demoted until it is back within it |
//! | `PMW_LIVE_RPC_QUORUM` | `2` with several providers, `1` with one | providers that must agree on a block's hash before its header and logs are ingested (and that must report a block finalized); 1 to the number of providers. A single provider is a warning in `pmwctl status` and `/v1/ready` |
//! | `PMW_LIVE_CHAIN_ID` | `137` (Polygon) | the chain id every provider must report (`eth_chainId`, at start and at each reconnect); a provider on another chain is not used; a single one stops startup (exit 78) |
//! | `PMW_LIVE_ALLOW_INSECURE_RPC` | `false` | accept plain `ws://`/`http://` provider URLs to hosts other than loopback (127.0.0.0/8, `::1`, `localhost`) |
//! | `PMW_LIVE_LEDGER_KEEP_HOURS` | `24` | hot-ledger retention in Postgres: a partition leaves (history then read from ClickHouse) once projected, finalized, audited and older than this (at least 1; keep it above the longest resume you serve from Postgres while ClickHouse is down) |
//! | `PMW_LIVE_EXTRA_EXCHANGES` | unset | exchange contracts trusted besides the four built-in Polymarket ones: `0x<address>=<ABI version 1\|2>` entries separated by spaces or commas. Only after checking the contract (docs/OPERATIONS.md, "Unlisted emitters"; docs/EXCHANGES.md): every fill it emits is delivered |
//! | `PMW_LIVE_MEMPOOL` | `false` | run the pending tier's mempool watcher and recorder ([`crate::pending`], docs/SETTLEMENT.md): settlements seen in the providers' pools are stored in `pending_txs`/`pending_fills`/`pending_events` and paired with their trades at commit |
//! | `PMW_LIVE_MEMPOOL_FEE_MODULES` | unset | fee modules whose `matchOrders` settle an exchange's orders, watched besides the exchange list: `0x<module>=0x<exchange>` entries separated by spaces or commas (confirm them against the chain: docs/SETTLEMENT.md) |
//! | `PMW_LIVE_PENDING_EXPIRE_BLOCKS` | `30` | a pending settlement not mined this many blocks after it was recorded ends `expired` (at least 2) |
//! | `PMW_LIVE_START_BLOCK` | unset | first block to ingest when no watermark exists (default: the first head seen) |
//! | `PMW_LIVE_METRICS_ADDR` | `127.0.0.1:9461` | private Prometheus `/metrics` address (loopback; a port in use is logged, not fatal) |
//! | `PMW_GAMMA_URL` | `https://gamma-api.polymarket.com` | Gamma-compatible market metadata API |

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use pmw_core::config::{within, ConfigError, Validate};
use pmw_core::redact;
use serde::Deserialize;

/// pmw-live's own settings. Its `Debug` shows the Gamma URL's host only ([`redact`]).
#[derive(Clone, Deserialize)]
pub struct LiveConfig {
    #[serde(default = "d::depth")]
    pub live_reorg_max_depth: u64,
    #[serde(default = "d::segment")]
    pub live_lock_segment_ms: u64,
    #[serde(default = "d::poll")]
    pub live_poll_interval_ms: u64,
    #[serde(default = "d::stall")]
    pub live_ws_stall_ms: u64,
    #[serde(default = "d::finalized_poll")]
    pub live_finalized_poll_ms: u64,
    #[serde(default = "d::yes")]
    pub live_audit_enabled: bool,
    #[serde(default = "d::audit_range")]
    pub live_audit_range_blocks: u64,
    #[serde(default = "d::audit_rps")]
    pub live_audit_max_rps: f64,
    #[serde(default = "d::audit_interval")]
    pub live_audit_interval_ms: u64,
    #[serde(default = "d::keep_hours")]
    pub live_ledger_keep_hours: u64,
    #[serde(default)]
    pub live_start_block: Option<u64>,
    #[serde(default)]
    pub live_extra_exchanges: Option<String>,
    #[serde(default = "d::gamma")]
    pub gamma_url: String,
    #[serde(default = "d::metrics")]
    pub live_metrics_addr: SocketAddr,
    #[serde(default)]
    pub live_rpc_providers: Option<String>,
    #[serde(default = "d::max_lag")]
    pub live_provider_max_lag_blocks: u64,
    #[serde(default)]
    pub live_rpc_quorum: Option<usize>,
    #[serde(default = "d::chain_id")]
    pub live_chain_id: u64,
    #[serde(default)]
    pub live_allow_insecure_rpc: bool,
    #[serde(default)]
    pub live_mempool: bool,
    #[serde(default)]
    pub live_mempool_fee_modules: Option<String>,
    #[serde(default = "d::expire_blocks")]
    pub live_pending_expire_blocks: u64,
}

impl fmt::Debug for LiveConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LiveConfig")
            .field("live_reorg_max_depth", &self.live_reorg_max_depth)
            .field("live_lock_segment_ms", &self.live_lock_segment_ms)
            .field("live_poll_interval_ms", &self.live_poll_interval_ms)
            .field("live_ws_stall_ms", &self.live_ws_stall_ms)
            .field("live_finalized_poll_ms", &self.live_finalized_poll_ms)
            .field("live_audit_enabled", &self.live_audit_enabled)
            .field("live_audit_range_blocks", &self.live_audit_range_blocks)
            .field("live_audit_max_rps", &self.live_audit_max_rps)
            .field("live_audit_interval_ms", &self.live_audit_interval_ms)
            .field("live_ledger_keep_hours", &self.live_ledger_keep_hours)
            .field("live_start_block", &self.live_start_block)
            .field("live_extra_exchanges", &self.live_extra_exchanges)
            .field("gamma_url", &redact::Url(&self.gamma_url))
            .field("live_metrics_addr", &self.live_metrics_addr)
            .field(
                "live_rpc_providers",
                &self.live_rpc_providers.as_ref().map(|_| redact::HIDDEN),
            )
            .field(
                "live_provider_max_lag_blocks",
                &self.live_provider_max_lag_blocks,
            )
            .field("live_rpc_quorum", &self.live_rpc_quorum)
            .field("live_chain_id", &self.live_chain_id)
            .field("live_allow_insecure_rpc", &self.live_allow_insecure_rpc)
            .field("live_mempool", &self.live_mempool)
            .field("live_mempool_fee_modules", &self.live_mempool_fee_modules)
            .field(
                "live_pending_expire_blocks",
                &self.live_pending_expire_blocks,
            )
            .finish()
    }
}

mod d {
    pub fn depth() -> u64 {
        64
    }
    pub fn segment() -> u64 {
        300_000
    }
    pub fn poll() -> u64 {
        1_000
    }
    pub fn finalized_poll() -> u64 {
        1_000
    }
    pub fn yes() -> bool {
        true
    }
    pub fn audit_range() -> u64 {
        100
    }
    pub fn audit_rps() -> f64 {
        5.0
    }
    pub fn audit_interval() -> u64 {
        30_000
    }
    pub fn keep_hours() -> u64 {
        24
    }
    pub fn expire_blocks() -> u64 {
        30
    }
    pub fn max_lag() -> u64 {
        3
    }
    pub fn chain_id() -> u64 {
        137
    }
    pub fn stall() -> u64 {
        30_000
    }
    pub fn metrics() -> std::net::SocketAddr {
        ([127, 0, 0, 1], 9461).into()
    }
    pub fn gamma() -> String {
        "https://gamma-api.polymarket.com".into()
    }
}

impl LiveConfig {
    pub fn lock_segment(&self) -> Duration {
        Duration::from_millis(self.live_lock_segment_ms)
    }
    pub fn poll_interval(&self) -> Duration {
        Duration::from_millis(self.live_poll_interval_ms)
    }
    pub fn finalized_poll(&self) -> Duration {
        Duration::from_millis(self.live_finalized_poll_ms)
    }

    /// The hot ledger's retention window (`PMW_LIVE_LEDGER_KEEP_HOURS`), the projector's `keep`.
    pub fn ledger_keep(&self) -> Duration {
        Duration::from_secs(self.live_ledger_keep_hours * 3_600)
    }

    /// The completeness audit's pacing.
    pub fn audit(&self) -> AuditSettings {
        AuditSettings {
            range_blocks: self.live_audit_range_blocks,
            max_rps: self.live_audit_max_rps,
            interval: Duration::from_millis(self.live_audit_interval_ms),
        }
    }

    /// The exchange list: the four Polymarket exchanges plus `PMW_LIVE_EXTRA_EXCHANGES`.
    pub fn exchanges(&self) -> Result<pmw_core::trade::Allowlist, ConfigError> {
        let base = pmw_core::trade::Allowlist::polymarket();
        match &self.live_extra_exchanges {
            Some(extra) => base
                .with_extra(extra)
                .map_err(|e| ConfigError::invalid("PMW_LIVE_EXTRA_EXCHANGES", e.to_string())),
            None => Ok(base),
        }
    }

    pub fn ws_stall(&self) -> Duration {
        Duration::from_millis(self.live_ws_stall_ms)
    }

    /// The providers to race: `PMW_LIVE_RPC_PROVIDERS` when set, else one named `rpc` from the
    /// core settings' `PMW_RPC_WS_URL`/`PMW_RPC_HTTP_URL` (today's single provider).
    /// Plain `ws://`/`http://` URLs are refused unless loopback or `PMW_LIVE_ALLOW_INSECURE_RPC`.
    pub fn providers(&self, core: &pmw_core::CoreConfig) -> Result<Vec<ProviderUrls>, ConfigError> {
        let out = match &self.live_rpc_providers {
            Some(list) => parse_providers(list)?,
            None => vec![ProviderUrls {
                name: "rpc".into(),
                ws_url: core.rpc_ws_url.clone(),
                http_url: core.rpc_http_url.clone(),
            }],
        };
        if !self.live_allow_insecure_rpc {
            for p in &out {
                refuse_insecure(p)?;
            }
        }
        Ok(out)
    }

    /// The quorum for `providers` providers: `PMW_LIVE_RPC_QUORUM`, else 2 with several, 1
    /// with one.
    pub fn quorum(&self, providers: usize) -> Result<usize, ConfigError> {
        let q = self
            .live_rpc_quorum
            .unwrap_or(if providers >= 2 { 2 } else { 1 });
        if q == 0 || q > providers {
            return Err(ConfigError::invalid(
                "PMW_LIVE_RPC_QUORUM",
                format!("must be 1 to the number of providers ({providers})"),
            ));
        }
        Ok(q)
    }
}

/// A plain (`ws://`, `http://`) URL to a host that is not loopback is an error (never quoting
/// the URL: it may hold a key).
fn refuse_insecure(p: &ProviderUrls) -> Result<(), ConfigError> {
    for url in [&p.ws_url, &p.http_url] {
        let plain = url.starts_with("ws://") || url.starts_with("http://");
        if plain && !is_loopback(url) {
            return Err(ConfigError::invalid(
                "PMW_LIVE_RPC_PROVIDERS",
                format!(
                    "provider {}: plain ws:// or http:// to a host that is not loopback \
                     (use wss:// and https://, or set PMW_LIVE_ALLOW_INSECURE_RPC=true)",
                    p.name
                ),
            ));
        }
    }
    Ok(())
}

/// Whether `url`'s host is loopback: 127.0.0.0/8, `::1` or `localhost`.
pub fn is_loopback(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host_port.split(':').next().unwrap_or(""),
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// One RPC provider's name and URLs. Its `Debug` shows the URLs' hosts only ([`redact`]).
#[derive(Clone, PartialEq, Eq)]
pub struct ProviderUrls {
    pub name: String,
    pub ws_url: String,
    pub http_url: String,
}

impl fmt::Debug for ProviderUrls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderUrls")
            .field("name", &self.name)
            .field("ws_url", &redact::Url(&self.ws_url))
            .field("http_url", &redact::Url(&self.http_url))
            .finish()
    }
}

/// At most this many providers (the race table keeps who saw a head in a 64-bit mask).
pub const MAX_PROVIDERS: usize = 16;

/// `name=ws_url|http_url` entries separated by whitespace. Errors never quote a URL.
pub fn parse_providers(list: &str) -> Result<Vec<ProviderUrls>, ConfigError> {
    const KEY: &str = "PMW_LIVE_RPC_PROVIDERS";
    let mut out: Vec<ProviderUrls> = Vec::new();
    for (i, entry) in list.split_whitespace().enumerate() {
        let bad = |why: &str| ConfigError::invalid(KEY, format!("entry {}: {why}", i + 1));
        let (name, urls) = entry.split_once('=').ok_or_else(|| bad("no `name=`"))?;
        let (ws_url, http_url) = urls
            .split_once('|')
            .ok_or_else(|| bad("no `ws_url|http_url`"))?;
        let name_ok = !name.is_empty()
            && name.len() <= 32
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !name_ok {
            return Err(bad("a name is 1-32 of [A-Za-z0-9_-]"));
        }
        if !(ws_url.starts_with("ws://") || ws_url.starts_with("wss://")) {
            return Err(bad("the first URL must be ws:// or wss://"));
        }
        if !(http_url.starts_with("http://") || http_url.starts_with("https://")) {
            return Err(bad("the second URL must be http:// or https://"));
        }
        if out.iter().any(|p| p.name == name) {
            return Err(bad("the name is used twice"));
        }
        out.push(ProviderUrls {
            name: name.into(),
            ws_url: ws_url.into(),
            http_url: http_url.into(),
        });
    }
    if out.is_empty() || out.len() > MAX_PROVIDERS {
        return Err(ConfigError::invalid(
            KEY,
            format!("1 to {MAX_PROVIDERS} providers"),
        ));
    }
    Ok(out)
}

/// The defaults, for in-process runs (tests): the same as an empty environment, except that
/// metrics are served on a free port (`127.0.0.1:0`), so in-process instances never collide.
impl Default for LiveConfig {
    fn default() -> Self {
        let mut c: LiveConfig =
            pmw_core::config::load_from(figment::Figment::new()).expect("defaults are valid");
        c.live_metrics_addr = ([127, 0, 0, 1], 0).into();
        c
    }
}

impl Validate for LiveConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        within(
            self.live_reorg_max_depth,
            1..=u64::MAX,
            "PMW_LIVE_REORG_MAX_DEPTH",
        )?;
        within(
            self.live_lock_segment_ms,
            10..=u64::MAX,
            "PMW_LIVE_LOCK_SEGMENT_MS",
        )?;
        if self.live_poll_interval_ms < 10 || self.live_ws_stall_ms < 100 {
            return Err(ConfigError::invalid(
                "PMW_LIVE_POLL_INTERVAL_MS",
                "poll ≥ 10 ms, stall ≥ 100 ms",
            ));
        }
        within(
            self.live_pending_expire_blocks,
            2..=u64::MAX,
            "PMW_LIVE_PENDING_EXPIRE_BLOCKS",
        )?;
        within(
            self.live_ledger_keep_hours,
            1..=u64::MAX,
            "PMW_LIVE_LEDGER_KEEP_HOURS",
        )?;
        within(
            self.live_finalized_poll_ms,
            10..=u64::MAX,
            "PMW_LIVE_FINALIZED_POLL_MS",
        )?;
        if !(1..=10_000).contains(&self.live_audit_range_blocks) {
            return Err(ConfigError::invalid(
                "PMW_LIVE_AUDIT_RANGE_BLOCKS",
                "must be 1 to 10000",
            ));
        }
        if !(self.live_audit_max_rps.is_finite() && self.live_audit_max_rps > 0.0) {
            return Err(ConfigError::invalid(
                "PMW_LIVE_AUDIT_MAX_RPS",
                "must be a number above 0",
            ));
        }
        within(
            self.live_audit_interval_ms,
            10..=u64::MAX,
            "PMW_LIVE_AUDIT_INTERVAL_MS",
        )?;
        if let Some(list) = &self.live_rpc_providers {
            let providers = parse_providers(list)?;
            self.quorum(providers.len())?;
            if !self.live_allow_insecure_rpc {
                providers.iter().try_for_each(refuse_insecure)?;
            }
        }
        self.exchanges()?;
        if self.live_chain_id == 0 {
            return Err(ConfigError::invalid(
                "PMW_LIVE_CHAIN_ID",
                "must be a chain id (137: Polygon)",
            ));
        }
        within(
            self.live_provider_max_lag_blocks,
            1..=u64::MAX,
            "PMW_LIVE_PROVIDER_MAX_LAG_BLOCKS",
        )?;
        if !(self.gamma_url.starts_with("http://") || self.gamma_url.starts_with("https://")) {
            return Err(ConfigError::invalid(
                "PMW_GAMMA_URL",
                "must be an http(s) URL",
            ));
        }
        Ok(())
    }
}

/// How the audit paces itself.
#[derive(Debug, Clone, Copy)]
pub struct AuditSettings {
    /// Blocks per `eth_getLogs` range, at most.
    pub range_blocks: u64,
    /// RPC calls per second, at most.
    pub max_rps: f64,
    /// How often an audit that has caught up looks for newly finalized blocks.
    pub interval: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_and_the_lag_are_read_from_the_config_file_keys() {
        use figment::providers::{Format, Toml};
        let file = "live_rpc_providers = \"a=ws://h:1|http://h:1 b=ws://h:2|http://h:2\"\n\
                    live_provider_max_lag_blocks = 5\n\
                    live_rpc_quorum = 2\n\
                    live_chain_id = 31337\n\
                    live_allow_insecure_rpc = true\n";
        let live: LiveConfig =
            pmw_core::config::load_from(figment::Figment::from(Toml::string(file))).unwrap();
        assert_eq!(live.live_provider_max_lag_blocks, 5);
        assert_eq!((live.live_rpc_quorum, live.live_chain_id), (Some(2), 31337));
        let core: pmw_core::CoreConfig =
            pmw_core::config::load_from(figment::Figment::new()).unwrap();
        let names: Vec<String> = live
            .providers(&core)
            .unwrap()
            .into_iter()
            .map(|p| p.name)
            .collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn a_provider_list_parses_in_order() {
        let p = parse_providers(
            " a=wss://a.example/KEY1|https://a.example/KEY1\n b_2=ws://127.0.0.1:1|http://127.0.0.1:2 ",
        )
        .unwrap();
        let names: Vec<&str> = p.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["a", "b_2"]);
        assert_eq!(p[0].ws_url, "wss://a.example/KEY1");
        assert_eq!(p[1].http_url, "http://127.0.0.1:2");
    }

    #[test]
    fn bad_lists_are_refused_without_quoting_a_url() {
        for bad in [
            "",
            "a=wss://h/SECRETKEY",
            "a=https://h/SECRETKEY|https://h/SECRETKEY",
            "a=wss://h/SECRETKEY|wss://h/SECRETKEY",
            "a=wss://h/SECRETKEY|https://h/SECRETKEY a=wss://h/SECRETKEY|https://h/SECRETKEY",
            "a b=wss://h/SECRETKEY|https://h/SECRETKEY",
            "bad.name=wss://h/SECRETKEY|https://h/SECRETKEY",
        ] {
            let e = parse_providers(bad).expect_err(bad).to_string();
            assert!(e.contains("PMW_LIVE_RPC_PROVIDERS"), "{e}");
            assert!(!e.contains("SECRETKEY"), "{e}");
        }
    }

    #[test]
    fn plain_urls_are_refused_unless_loopback_or_allowed() {
        let core: pmw_core::CoreConfig =
            pmw_core::config::load_from(figment::Figment::new()).unwrap();
        let with = |list: &str, allow: bool| LiveConfig {
            live_rpc_providers: Some(list.into()),
            live_allow_insecure_rpc: allow,
            ..LiveConfig::default()
        };
        for ok in [
            "a=ws://127.0.0.1:1|http://127.0.0.1:2",
            "a=ws://127.9.8.7:1/KEY|http://localhost:2/KEY",
            "a=ws://[::1]:1|http://user:pw@LOCALHOST:2",
            "a=wss://h.example/KEY|https://h.example/KEY",
        ] {
            let live = with(ok, false);
            assert!(live.providers(&core).is_ok(), "{ok}");
            assert!(live.validate().is_ok(), "{ok}");
        }
        for bad in [
            "a=ws://h.example/SECRETKEY|https://h.example/SECRETKEY",
            "a=wss://h.example/SECRETKEY|http://h.example/SECRETKEY",
            "a=wss://h/SECRETKEY|https://h/SECRETKEY b=ws://10.0.0.1/SECRETKEY|https://h/SECRETKEY",
            "a=ws://127.0.0.1.evil.example/SECRETKEY|https://h/SECRETKEY",
            "a=ws://localhost@evil.example/SECRETKEY|https://h/SECRETKEY",
        ] {
            let e = with(bad, false)
                .providers(&core)
                .expect_err(bad)
                .to_string();
            assert!(e.contains("PMW_LIVE_ALLOW_INSECURE_RPC"), "{e}");
            assert!(!e.contains("SECRETKEY"), "{e}");
            assert!(with(bad, false).validate().is_err(), "{bad}");
            assert!(with(bad, true).providers(&core).is_ok(), "{bad}");
        }
        // The single provider from the core URLs too.
        let mut far = core.clone();
        far.rpc_ws_url = "ws://rpc.example/KEY".into();
        assert!(LiveConfig::default().providers(&far).is_err());
    }

    #[test]
    fn the_quorum_defaults_to_two_of_several_and_one_of_one() {
        let live = LiveConfig::default();
        assert_eq!(live.live_chain_id, 137);
        assert_eq!(live.quorum(1).unwrap(), 1);
        assert_eq!(live.quorum(3).unwrap(), 2);
        let three = LiveConfig {
            live_rpc_quorum: Some(3),
            ..LiveConfig::default()
        };
        assert_eq!(three.quorum(3).unwrap(), 3);
        assert!(three.quorum(2).is_err());
        let zero = LiveConfig {
            live_rpc_quorum: Some(0),
            ..LiveConfig::default()
        };
        assert!(zero.quorum(2).is_err());
    }

    #[test]
    fn unset_means_one_provider_from_the_core_urls() {
        let core: pmw_core::CoreConfig =
            pmw_core::config::load_from(figment::Figment::new()).unwrap();
        let p = LiveConfig::default().providers(&core).unwrap();
        assert_eq!(
            p,
            vec![ProviderUrls {
                name: "rpc".into(),
                ws_url: core.rpc_ws_url.clone(),
                http_url: core.rpc_http_url.clone(),
            }]
        );
    }

    #[test]
    fn debug_hides_provider_urls() {
        let live = LiveConfig {
            live_rpc_providers: Some("a=wss://h/SECRETKEY|https://h/SECRETKEY".into()),
            ..LiveConfig::default()
        };
        assert!(!format!("{live:?}").contains("SECRETKEY"));
        let core: pmw_core::CoreConfig =
            pmw_core::config::load_from(figment::Figment::new()).unwrap();
        let p = live.providers(&core).unwrap();
        assert!(!format!("{p:?}").contains("SECRETKEY"));
    }

    #[test]
    fn extra_exchanges_extend_the_list_and_a_bad_one_names_the_variable() {
        let extra = |v: &str| LiveConfig {
            live_extra_exchanges: Some(v.into()),
            ..LiveConfig::default()
        };
        assert_eq!(LiveConfig::default().exchanges().unwrap().len(), 4);
        let one = extra("0x7e57000000000000000000000000000000000e11=2");
        assert_eq!(one.exchanges().unwrap().len(), 5);
        let err = extra("0x7e57=2").validate().unwrap_err().to_string();
        assert!(err.contains("PMW_LIVE_EXTRA_EXCHANGES"), "{err}");
    }
}
