//! Typed, layered configuration: built-in defaults → TOML file → `PMW_*` environment variables,
//! validated at load. Split in two so a broken API-only setting can never stop push or live.
//!
//! Sources, later wins:
//! 1. defaults (below, per field);
//! 2. the TOML file named by `PMW_CONFIG` (optional; flat keys, e.g. `postgres_url = "…"`);
//! 3. environment variables `PMW_<KEY>` (e.g. `PMW_POSTGRES_URL`).
//!
//! Core settings ([`CoreConfig`], loaded by every service):
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `PMW_CONFIG` | unset | path of a TOML file with any of the keys below |
//! | `PMW_POSTGRES_URL` | `postgres://pmw@127.0.0.1:55432/pmw` | Postgres (secret: never logged). Lock and LISTEN sessions connect directly, never through PgBouncer transaction pooling. Postgres HA: several hosts, tried in order (`postgres://pmw@h1:5432,h2:5432/pmw`); every session connects read-write only (`target_session_attrs=read-write` is implied; `read-only` is refused) and follows the primary ([`crate::pg::follow`]) |
//! | `PMW_POSTGRES_PATRONI_URLS` | unset | Postgres HA on Patroni: the REST API of each host's Patroni, in the order of the hosts of `PMW_POSTGRES_URL`, comma-separated (`http://h1:8008,http://h2:8008`). Set, a session connects only to the host whose Patroni holds the leader key, and every session to a node Patroni stops naming is ended ([`crate::pg::patroni`]); a thawed or healed old primary, still read-write until Patroni demotes it, is never used. Needs as many URLs as hosts |
//! | `PMW_POSTGRES_POOL_SIZE` | `16` | pooled connections per process (handed out last-returned first, so the hot statements run on backends that have them planned) |
//! | `PMW_POSTGRES_STATEMENT_TIMEOUT_MS` | `30000` | `statement_timeout` of pooled sessions and of a writer's lock session once it holds the lock (a longer statement fails with SQLSTATE 57014); `0` = none |
//! | `PMW_POSTGRES_LOCK_TIMEOUT_MS` | `10000` | `lock_timeout` of pooled sessions and of a writer's lock session once it holds the lock (a longer lock wait fails with SQLSTATE 55P03); `0` = none |
//! | `PMW_POSTGRES_IDLE_IN_TRANSACTION_TIMEOUT_MS` | `60000` | `idle_in_transaction_session_timeout` of pooled sessions (the server ends a session idle that long inside a transaction); `0` = none |
//! | `PMW_CLICKHOUSE_URL` | `http://127.0.0.1:58123` | ClickHouse HTTP interface |
//! | `PMW_CLICKHOUSE_DATABASE` | `pmw` | ClickHouse database |
//! | `PMW_CLICKHOUSE_USER` | `default` | ClickHouse user |
//! | `PMW_CLICKHOUSE_PASSWORD` | empty | ClickHouse password (secret) |
//! | `PMW_RPC_WS_URL` | `ws://127.0.0.1:58545` | chain RPC, WebSocket (`newHeads`) |
//! | `PMW_RPC_HTTP_URL` | `http://127.0.0.1:58545` | chain RPC, HTTP (fallback polling, backfill) |
//! | `PMW_INSTANCE` | the service name | instance name shown in status/heartbeats (`push-a`, `push-b`) |
//! | `PMW_LOG_FORMAT` | `text` | `text` or `json` |
//! | `PMW_LOG` | `info` | tracing filter directives (`info,pmw_push=debug`) |
//! | `PMW_SECRET_KEYS` | unset | operator keys sealing webhook signing secrets at rest (secret; environment only, not the TOML file): `id:base64 of 32 bytes[,id:…]`, the first seals, all open ([`crate::sealed`]; rotation with `pmwctl secrets reseal`). Unset: new secrets are stored unsealed (development only: `/v1/ready` and `pmwctl status` warn, and production refuses to start) |
//! | `PMW_ENV` | `development` | `development` or `production`. The shipped systemd units and the pm2 ecosystem set `production`; `scripts/dev` and the tests leave the default. In production every service refuses to start (exit 78) without `PMW_SECRET_KEYS` (pmwctl runs, so it can make the first key) |
//! | `PMW_ALLOW_UNSEALED_SECRETS` | `false` | production only: start without `PMW_SECRET_KEYS` anyway (secrets stored unsealed; the warnings stay) |
//!
//! The three timeouts apply to pooled sessions only. Dedicated sessions (advisory locks, LISTEN;
//! [`crate::pg::dedicated`]) get none of them: a lock wait is a long statement by design and sets
//! its own `lock_timeout` per segment ([`crate::lock`]).
//!
//! API settings (`PMW_API_*`) live in the API crate (`pmw_api::config`) and are loaded only by
//! pmw-api, with [`load`] and [`Validate`] from here.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use figment::providers::{Env, Format, Toml};
use figment::Figment;
use secrecy::{ExposeSecret, SecretString};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use tokio_postgres::config::TargetSessionAttrs;

use crate::redact;

/// A configuration that cannot be used. Services exit 78 on this.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration could not be read: {0}")]
    Load(String),
    #[error("invalid setting {key}: {reason}")]
    Invalid { key: &'static str, reason: String },
}

impl ConfigError {
    pub fn invalid(key: &'static str, reason: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            key,
            reason: reason.into(),
        }
    }
}

/// A settings struct that checks itself after loading.
pub trait Validate {
    fn validate(&self) -> Result<(), ConfigError>;
}

/// `value` must lie in `range`, else the variable `var` is refused, saying the range (`must be
/// at least N` for a range without an end).
pub fn within(
    value: u64,
    range: std::ops::RangeInclusive<u64>,
    var: &'static str,
) -> Result<(), ConfigError> {
    if range.contains(&value) {
        return Ok(());
    }
    let reason = match *range.end() {
        u64::MAX => format!("must be at least {}", range.start()),
        end => format!("must be {}..={end}", range.start()),
    };
    Err(ConfigError::invalid(var, reason))
}

/// The layered sources: defaults come from serde, then `PMW_CONFIG`'s file, then `PMW_*`.
pub fn figment() -> Figment {
    let mut f = Figment::new();
    if let Ok(path) = std::env::var("PMW_CONFIG") {
        f = f.merge(Toml::file_exact(PathBuf::from(path)));
    }
    f.merge(Env::prefixed("PMW_").ignore(&["config"]))
}

/// Load and validate any settings struct from the layered sources.
pub fn load<T: DeserializeOwned + Validate>() -> Result<T, ConfigError> {
    load_from(figment())
}

/// Load and validate from an explicit figment (tests layer their own values on top).
pub fn load_from<T: DeserializeOwned + Validate>(f: Figment) -> Result<T, ConfigError> {
    let cfg: T = f.extract().map_err(|e| ConfigError::Load(e.to_string()))?;
    cfg.validate()?;
    Ok(cfg)
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Everything push and live need: storage and chain. Nothing API-specific.
#[derive(Clone, Deserialize)]
pub struct CoreConfig {
    #[serde(default = "defaults::postgres_url")]
    pub postgres_url: SecretString,
    #[serde(default)]
    pub postgres_patroni_urls: Option<String>,
    #[serde(default = "defaults::pool_size")]
    pub postgres_pool_size: usize,
    #[serde(default = "defaults::statement_timeout")]
    pub postgres_statement_timeout_ms: u64,
    #[serde(default = "defaults::lock_timeout")]
    pub postgres_lock_timeout_ms: u64,
    #[serde(default = "defaults::idle_in_transaction_timeout")]
    pub postgres_idle_in_transaction_timeout_ms: u64,
    #[serde(default = "defaults::clickhouse_url")]
    pub clickhouse_url: String,
    #[serde(default = "defaults::clickhouse_database")]
    pub clickhouse_database: String,
    #[serde(default = "defaults::clickhouse_user")]
    pub clickhouse_user: String,
    #[serde(default = "defaults::empty_secret")]
    pub clickhouse_password: SecretString,
    #[serde(default = "defaults::rpc_ws_url")]
    pub rpc_ws_url: String,
    #[serde(default = "defaults::rpc_http_url")]
    pub rpc_http_url: String,
    #[serde(default)]
    pub instance: Option<String>,
    #[serde(default)]
    pub log_format: LogFormat,
    #[serde(default = "defaults::log", rename = "log")]
    pub log_filter: String,
    /// `PMW_ENV`: what the deployment is (production refuses unsafe defaults).
    #[serde(default)]
    pub env: Deployment,
    #[serde(default)]
    pub allow_unsealed_secrets: bool,
}

/// `PMW_ENV`: a development box (the default) or production.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Deployment {
    #[default]
    Development,
    Production,
}

impl CoreConfig {
    pub fn load() -> Result<CoreConfig, ConfigError> {
        load()
    }

    /// The Postgres connection settings parsed from the secret URL, read-write only: with several
    /// hosts (Postgres HA) a session connects to the first one that takes writes, the primary.
    pub fn postgres(&self) -> tokio_postgres::Config {
        // Validated at load.
        let mut pg = tokio_postgres::Config::from_str(self.postgres_url.expose_secret())
            .expect("postgres_url validated at load");
        pg.target_session_attrs(TargetSessionAttrs::ReadWrite);
        pg
    }

    /// The Patroni REST APIs of `PMW_POSTGRES_PATRONI_URLS` (none when unset).
    pub fn patroni(&self) -> crate::pg::patroni::Patroni {
        crate::pg::patroni::Patroni::new(self.patroni_urls())
    }

    fn patroni_urls(&self) -> Vec<String> {
        self.postgres_patroni_urls
            .as_deref()
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(String::from)
            .collect()
    }

    /// The instance name, defaulting to the service name.
    pub fn instance_or(&self, service: &str) -> String {
        self.instance.clone().unwrap_or_else(|| service.to_string())
    }
}

impl fmt::Debug for CoreConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pg = self.postgres();
        f.debug_struct("CoreConfig")
            .field("postgres_host", &pg.get_hosts())
            .field("postgres_port", &pg.get_ports())
            .field("postgres_db", &pg.get_dbname())
            .field("postgres_password", &"[redacted]")
            .field("postgres_patroni_urls", &self.patroni_urls())
            .field("postgres_pool_size", &self.postgres_pool_size)
            .field(
                "postgres_statement_timeout_ms",
                &self.postgres_statement_timeout_ms,
            )
            .field("postgres_lock_timeout_ms", &self.postgres_lock_timeout_ms)
            .field(
                "postgres_idle_in_transaction_timeout_ms",
                &self.postgres_idle_in_transaction_timeout_ms,
            )
            .field("clickhouse_url", &redact::Url(&self.clickhouse_url))
            .field("clickhouse_database", &self.clickhouse_database)
            .field("clickhouse_user", &self.clickhouse_user)
            .field("clickhouse_password", &"[redacted]")
            .field("rpc_ws_url", &redact::Url(&self.rpc_ws_url))
            .field("rpc_http_url", &redact::Url(&self.rpc_http_url))
            .field("instance", &self.instance)
            .field("log_format", &self.log_format)
            .field("log", &self.log_filter)
            .field("env", &self.env)
            .field("allow_unsealed_secrets", &self.allow_unsealed_secrets)
            .finish()
    }
}

impl Validate for CoreConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        let pg = tokio_postgres::Config::from_str(self.postgres_url.expose_secret())
            .map_err(|e| ConfigError::invalid("PMW_POSTGRES_URL", e.to_string()))?;
        if pg.get_hosts().is_empty() {
            return Err(ConfigError::invalid("PMW_POSTGRES_URL", "no host"));
        }
        if pg.get_target_session_attrs() == TargetSessionAttrs::ReadOnly {
            return Err(ConfigError::invalid(
                "PMW_POSTGRES_URL",
                "target_session_attrs=read-only: pmw writes (read-write is implied)",
            ));
        }
        self.validate_patroni(pg.get_hosts().len())?;
        if self.postgres_pool_size == 0 {
            return Err(ConfigError::invalid(
                "PMW_POSTGRES_POOL_SIZE",
                "must be at least 1",
            ));
        }
        for (key, ms) in [
            (
                "PMW_POSTGRES_STATEMENT_TIMEOUT_MS",
                self.postgres_statement_timeout_ms,
            ),
            (
                "PMW_POSTGRES_LOCK_TIMEOUT_MS",
                self.postgres_lock_timeout_ms,
            ),
            (
                "PMW_POSTGRES_IDLE_IN_TRANSACTION_TIMEOUT_MS",
                self.postgres_idle_in_transaction_timeout_ms,
            ),
        ] {
            // Postgres takes these as a 32-bit count of milliseconds.
            if ms > i32::MAX as u64 {
                return Err(ConfigError::invalid(key, "must be at most 2147483647"));
            }
        }
        check_scheme(
            "PMW_CLICKHOUSE_URL",
            &self.clickhouse_url,
            &["http", "https"],
        )?;
        if self.clickhouse_database.is_empty()
            || !self
                .clickhouse_database
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            return Err(ConfigError::invalid(
                "PMW_CLICKHOUSE_DATABASE",
                "must be a non-empty identifier of letters, digits and _",
            ));
        }
        check_scheme("PMW_RPC_WS_URL", &self.rpc_ws_url, &["ws", "wss"])?;
        check_scheme("PMW_RPC_HTTP_URL", &self.rpc_http_url, &["http", "https"])?;
        tracing_subscriber::EnvFilter::try_new(&self.log_filter)
            .map_err(|e| ConfigError::invalid("PMW_LOG", e.to_string()))?;
        // Read from the environment by `sealed::keyring`; checked here so a bad value exits 78.
        // Whether production may run without keys is the services' check
        // ([`CoreConfig::check_secrets`], in `service::main`): pmwctl makes the first key.
        if let Ok(spec) = std::env::var(crate::sealed::ENV) {
            if !spec.trim().is_empty() {
                crate::sealed::Keyring::parse(&spec)
                    .map_err(|e| ConfigError::invalid("PMW_SECRET_KEYS", e.to_string()))?;
            }
        }
        Ok(())
    }
}

impl CoreConfig {
    /// Production needs operator keys for secrets at rest, unless explicitly overridden: every
    /// service checks it at start (`service::main`, exit 78); pmwctl does not (it makes keys).
    pub fn check_secrets(&self, keys_set: bool) -> Result<(), ConfigError> {
        if self.env == Deployment::Production && !keys_set && !self.allow_unsealed_secrets {
            return Err(ConfigError::invalid(
                "PMW_SECRET_KEYS",
                "required with PMW_ENV=production (webhook signing secrets would be stored unsealed); generate one with `pmwctl secrets generate-key`, or set PMW_ALLOW_UNSEALED_SECRETS=true to start anyway",
            ));
        }
        Ok(())
    }
}

impl CoreConfig {
    /// `PMW_POSTGRES_PATRONI_URLS`: http(s) URLs, one per Postgres host.
    fn validate_patroni(&self, hosts: usize) -> Result<(), ConfigError> {
        const KEY: &str = "PMW_POSTGRES_PATRONI_URLS";
        let urls = self.patroni_urls();
        if urls.is_empty() {
            return Ok(());
        }
        if urls.len() != hosts {
            return Err(ConfigError::invalid(
                KEY,
                format!(
                    "{} URLs for {hosts} hosts in PMW_POSTGRES_URL: give one per host, in the same order",
                    urls.len()
                ),
            ));
        }
        for url in &urls {
            check_scheme(KEY, url, &["http", "https"])?;
        }
        Ok(())
    }
}

fn check_scheme(key: &'static str, url: &str, allowed: &[&str]) -> Result<(), ConfigError> {
    let ok = url
        .split_once("://")
        .is_some_and(|(s, rest)| allowed.contains(&s) && !rest.is_empty());
    if ok {
        Ok(())
    } else {
        Err(ConfigError::invalid(
            key,
            format!("must be a {} URL", allowed.join("/")),
        ))
    }
}

mod defaults {
    use super::*;

    pub fn postgres_url() -> SecretString {
        SecretString::from("postgres://pmw@127.0.0.1:55432/pmw")
    }
    pub fn pool_size() -> usize {
        16
    }
    pub fn statement_timeout() -> u64 {
        30_000
    }
    pub fn lock_timeout() -> u64 {
        10_000
    }
    pub fn idle_in_transaction_timeout() -> u64 {
        60_000
    }
    pub fn clickhouse_url() -> String {
        "http://127.0.0.1:58123".into()
    }
    pub fn clickhouse_database() -> String {
        "pmw".into()
    }
    pub fn clickhouse_user() -> String {
        "default".into()
    }
    pub fn empty_secret() -> SecretString {
        SecretString::from("")
    }
    pub fn rpc_ws_url() -> String {
        "ws://127.0.0.1:58545".into()
    }
    pub fn rpc_http_url() -> String {
        "http://127.0.0.1:58545".into()
    }
    pub fn log() -> String {
        "info".into()
    }
}

/// Settings as `(key, value)` pairs, lowercase as in the TOML file (what tests and tools pass
/// instead of the environment); load them with [`load_from`].
pub fn from_pairs(pairs: &[(&str, &str)]) -> Figment {
    pairs.iter().fold(Figment::new(), |f, (k, v)| {
        f.merge(figment::providers::Serialized::default(k, v))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use figment::providers::Serialized;

    fn with(pairs: &[(&str, &str)]) -> Figment {
        from_pairs(pairs)
    }

    #[test]
    fn defaults_are_valid() {
        let core: CoreConfig = load_from(Figment::new()).unwrap();
        assert_eq!(core.clickhouse_database, "pmw");
        assert_eq!(core.postgres().get_ports(), &[55432]);
        assert_eq!(
            (
                core.postgres_statement_timeout_ms,
                core.postgres_lock_timeout_ms,
                core.postgres_idle_in_transaction_timeout_ms
            ),
            (30_000, 10_000, 60_000)
        );
    }

    #[test]
    fn multi_host_urls_connect_read_write_only() {
        let url = "postgres://pmw@127.0.0.1:55442,127.0.0.1:55443/pmw";
        let core: CoreConfig = load_from(with(&[("postgres_url", url)])).unwrap();
        let pg = core.postgres();
        assert_eq!(pg.get_ports(), &[55442, 55443]);
        assert_eq!(pg.get_hosts().len(), 2);
        assert_eq!(pg.get_target_session_attrs(), TargetSessionAttrs::ReadWrite);
        let explicit = format!("{url}?target_session_attrs=read-write");
        let core: CoreConfig = load_from(with(&[("postgres_url", &explicit)])).unwrap();
        assert_eq!(core.postgres().get_ports(), &[55442, 55443]);
        let ro = format!("{url}?target_session_attrs=read-only");
        let err = load_from::<CoreConfig>(with(&[("postgres_url", &ro)]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("PMW_POSTGRES_URL"), "{err}");
    }

    #[test]
    fn patroni_urls_name_one_rest_api_per_postgres_host() {
        let url = "postgres://pmw@10.0.0.1:5432,10.0.0.2:5432/pmw";
        let two = "http://10.0.0.1:8008, http://10.0.0.2:8008/";
        let core: CoreConfig = load_from(with(&[
            ("postgres_url", url),
            ("postgres_patroni_urls", two),
        ]))
        .unwrap();
        assert!(core.patroni().is_set());
        assert_eq!(
            format!("{:?}", core.patroni()),
            r#"Patroni { urls: ["http://10.0.0.1:8008", "http://10.0.0.2:8008"] }"#
        );
        let unset: CoreConfig = load_from(with(&[("postgres_url", url)])).unwrap();
        assert!(!unset.patroni().is_set());
        for bad in ["http://10.0.0.1:8008", "http://a:8008,ftp://b:8008"] {
            let err = load_from::<CoreConfig>(with(&[
                ("postgres_url", url),
                ("postgres_patroni_urls", bad),
            ]))
            .unwrap_err()
            .to_string();
            assert!(err.contains("PMW_POSTGRES_PATRONI_URLS"), "{bad}: {err}");
        }
    }

    #[test]
    fn invalid_core_values_are_rejected_with_their_key() {
        for (k, v, key) in [
            ("clickhouse_url", "ftp://x", "PMW_CLICKHOUSE_URL"),
            ("rpc_ws_url", "http://x", "PMW_RPC_WS_URL"),
            ("clickhouse_database", "a;drop", "PMW_CLICKHOUSE_DATABASE"),
            ("postgres_url", "postgres://", "PMW_POSTGRES_URL"),
        ] {
            let err = load_from::<CoreConfig>(with(&[(k, v)]))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key), "{k}={v}: {err}");
        }
        assert!(load_from::<CoreConfig>(with(&[("postgres_pool_size", "0")])).is_err());
        let err = load_from::<CoreConfig>(Figment::new().merge(Serialized::default(
            "postgres_statement_timeout_ms",
            3_000_000_000u64,
        )))
        .unwrap_err()
        .to_string();
        assert!(err.contains("PMW_POSTGRES_STATEMENT_TIMEOUT_MS"), "{err}");
    }

    #[test]
    fn production_refuses_to_start_without_secret_keys_unless_overridden() {
        let prod: CoreConfig = load_from(
            with(&[("env", "production")])
                .merge(Serialized::default("allow_unsealed_secrets", true)),
        )
        .unwrap();
        assert_eq!(prod.env, Deployment::Production);
        let strict = CoreConfig {
            allow_unsealed_secrets: false,
            ..prod.clone()
        };
        let err = strict.check_secrets(false).unwrap_err().to_string();
        assert!(
            err.contains("PMW_SECRET_KEYS") && err.contains("PMW_ENV=production"),
            "{err}"
        );
        assert!(strict.check_secrets(true).is_ok());
        assert!(prod.check_secrets(false).is_ok(), "explicitly overridden");
        let dev: CoreConfig = load_from(Figment::new()).unwrap();
        assert_eq!(dev.env, Deployment::Development);
        assert!(dev.check_secrets(false).is_ok());
        assert!(load_from::<CoreConfig>(with(&[("env", "staging")])).is_err());
    }

    #[test]
    fn secrets_never_appear_in_debug_output() {
        let core: CoreConfig = load_from(with(&[
            (
                "postgres_url",
                "postgres://pmw:hunter2@db.internal:5432/pmw",
            ),
            ("clickhouse_password", "chpass-s3cret"),
            ("rpc_ws_url", "wss://polygon.example/v2/rpc-key-abc"),
            (
                "rpc_http_url",
                "https://u:rpc-user-pw@polygon.example/?key=rpc-query",
            ),
            (
                "clickhouse_url",
                "http://ch-user:ch-url-pw@ch.internal:8123/ch-path",
            ),
        ]))
        .unwrap();
        let dbg = format!("{core:?}");
        for secret in [
            "hunter2",
            "chpass-s3cret",
            "rpc-key-abc",
            "rpc-user-pw",
            "rpc-query",
            "ch-url-pw",
            "ch-path",
        ] {
            assert!(!dbg.contains(secret), "{secret} leaked: {dbg}");
        }
        assert!(dbg.contains("db.internal"), "{dbg}");
        assert!(dbg.contains("http://ch.internal:8123"), "{dbg}");
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's own Jail API returns its Error by value
    fn env_layer_overrides_file_layer() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "pmw.toml",
                "clickhouse_database = \"from_file\"\ninstance = \"push-a\"",
            )?;
            jail.set_env("PMW_CONFIG", "pmw.toml");
            jail.set_env("PMW_CLICKHOUSE_DATABASE", "from_env");
            let core = CoreConfig::load().map_err(|e| e.to_string())?;
            assert_eq!(core.clickhouse_database, "from_env");
            assert_eq!(core.instance.as_deref(), Some("push-a"));
            Ok(())
        });
    }
}
