//! pmw-stats settings, beyond the core config (layered the same way: defaults → `PMW_CONFIG` file →
//! environment).
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `PMW_STATS_LISTEN` | `127.0.0.1:8082` | dashboard listen address: loopback, or a private network's address for a Caddy on another machine, never public (Caddy is the public listener) |
//! | `PMW_STATS_METRICS_ADDR` | `127.0.0.1:9464` | private Prometheus `/metrics` address, served from start (also while waiting for the lock; a port in use is logged, not fatal) |
//! | `PMW_STATS_INTERVAL_MS` | `60000` | how often the latency snapshot is recomputed |
//! | `PMW_STATS_LOCK_SEGMENT_MS` | `300000` | one segment of the writer-lock wait (`lock_timeout`) |
//! | `PMW_STATS_RETENTION_DAYS` | `32` | latency partitions (UTC days) ending more than this many days ago are dropped: the 30-day window plus a margin; at least 31; at 90 or more the dashboard draws 90 daily availability bars instead of 30 |
//! | `PMW_STATS_RETENTION_INTERVAL_MS` | `3600000` | how often the retention jobs run (also once at start) |
//! | `PMW_STATS_WS_CLAIMS_RETENTION_SECS` | `86400` (1 day) | Postgres `ws_claims` rows `delivered` or `voided` longer ago are deleted; at least 60 |
//! | `PMW_STATS_WEBHOOK_DELIVERIES_RETENTION_SECS` | `604800` (7 days) | Postgres `webhook_deliveries` rows `delivered` or `failed` longer ago are deleted (pending ones never); at least 60 |
//! | `PMW_STATS_DELIVERY_LOG_RETENTION_DAYS` | `30` | ClickHouse `delivery_log` day partitions (UTC) ending more than this many days ago are dropped; at least 1 |
//! | `PMW_STATS_RETENTION_BATCH` | `1000` | rows per Postgres DELETE statement of the retention job (1–100000) |
//! | `PMW_STATS_AVAILABILITY_SAMPLER` | `true` | sample push and ingest availability once a second ([`crate::sampler`]); `false` leaves every second unknown (tests that plant samples) |

use std::net::SocketAddr;
use std::time::Duration;

use pmw_core::config::{ConfigError, Validate};
use serde::Deserialize;

/// Settings of the stats service.
#[derive(Debug, Clone, Deserialize)]
pub struct StatsConfig {
    #[serde(default = "d::listen")]
    pub stats_listen: SocketAddr,
    #[serde(default = "d::interval")]
    pub stats_interval_ms: u64,
    #[serde(default = "d::segment")]
    pub stats_lock_segment_ms: u64,
    #[serde(default = "d::retention_days")]
    pub stats_retention_days: u32,
    #[serde(default = "d::retention_interval")]
    pub stats_retention_interval_ms: u64,
    #[serde(default = "d::ws_claims_retention")]
    pub stats_ws_claims_retention_secs: u64,
    #[serde(default = "d::webhook_deliveries_retention")]
    pub stats_webhook_deliveries_retention_secs: u64,
    #[serde(default = "d::delivery_log_retention")]
    pub stats_delivery_log_retention_days: u32,
    #[serde(default = "d::retention_batch")]
    pub stats_retention_batch: u32,
    #[serde(default = "d::metrics")]
    pub stats_metrics_addr: SocketAddr,
    #[serde(default = "d::sampler")]
    pub stats_availability_sampler: bool,
}

mod d {
    use std::net::SocketAddr;

    pub fn listen() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 8082))
    }
    pub fn metrics() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 9464))
    }
    pub fn interval() -> u64 {
        60_000
    }
    pub fn segment() -> u64 {
        300_000
    }
    pub fn retention_days() -> u32 {
        32
    }
    pub fn retention_interval() -> u64 {
        3_600_000
    }
    pub fn ws_claims_retention() -> u64 {
        86_400
    }
    pub fn webhook_deliveries_retention() -> u64 {
        7 * 86_400
    }
    pub fn delivery_log_retention() -> u32 {
        30
    }
    pub fn retention_batch() -> u32 {
        1_000
    }
    pub fn sampler() -> bool {
        true
    }
}

impl StatsConfig {
    pub fn load() -> Result<StatsConfig, ConfigError> {
        pmw_core::config::load()
    }
    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.stats_interval_ms)
    }
    pub fn lock_segment(&self) -> Duration {
        Duration::from_millis(self.stats_lock_segment_ms)
    }
    pub fn retention_interval(&self) -> Duration {
        Duration::from_millis(self.stats_retention_interval_ms)
    }
    /// Retention of finished Postgres rows.
    pub fn row_retention(&self) -> crate::purge::RowRetention {
        crate::purge::RowRetention {
            ws_claims: Duration::from_secs(self.stats_ws_claims_retention_secs),
            webhook_deliveries: Duration::from_secs(self.stats_webhook_deliveries_retention_secs),
            batch: self.stats_retention_batch,
        }
    }
}

/// The defaults, for in-process runs (tests): the same as an empty environment, except that
/// metrics are served on a free port (`127.0.0.1:0`), so in-process instances never collide.
impl Default for StatsConfig {
    fn default() -> Self {
        let mut c: StatsConfig =
            pmw_core::config::load_from(figment::Figment::new()).expect("defaults are valid");
        c.stats_metrics_addr = ([127, 0, 0, 1], 0).into();
        c
    }
}

impl Validate for StatsConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        pmw_core::listen::check("PMW_STATS_LISTEN", self.stats_listen)?;
        if self.stats_interval_ms < 100 {
            return Err(ConfigError::invalid(
                "PMW_STATS_INTERVAL_MS",
                "must be at least 100",
            ));
        }
        if self.stats_lock_segment_ms < 10 {
            return Err(ConfigError::invalid(
                "PMW_STATS_LOCK_SEGMENT_MS",
                "must be at least 10",
            ));
        }
        if self.stats_retention_days < 31 {
            return Err(ConfigError::invalid(
                "PMW_STATS_RETENTION_DAYS",
                "must be at least 31 (the 30-day window must stay whole)",
            ));
        }
        for (key, secs) in [
            (
                "PMW_STATS_WS_CLAIMS_RETENTION_SECS",
                self.stats_ws_claims_retention_secs,
            ),
            (
                "PMW_STATS_WEBHOOK_DELIVERIES_RETENTION_SECS",
                self.stats_webhook_deliveries_retention_secs,
            ),
        ] {
            if !(60..=10 * 365 * 86_400).contains(&secs) {
                return Err(ConfigError::invalid(
                    key,
                    "must be between 60 and 315360000 (10 years)",
                ));
            }
        }
        if self.stats_delivery_log_retention_days < 1 {
            return Err(ConfigError::invalid(
                "PMW_STATS_DELIVERY_LOG_RETENTION_DAYS",
                "must be at least 1",
            ));
        }
        if !(1..=100_000).contains(&self.stats_retention_batch) {
            return Err(ConfigError::invalid(
                "PMW_STATS_RETENTION_BATCH",
                "must be between 1 and 100000",
            ));
        }
        if self.stats_retention_interval_ms < 1_000 {
            return Err(ConfigError::invalid(
                "PMW_STATS_RETENTION_INTERVAL_MS",
                "must be at least 1000",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use figment::providers::Serialized;
    use figment::Figment;

    #[test]
    fn defaults_are_valid_and_loopback() {
        let c = StatsConfig::default();
        assert_eq!(c.stats_listen, "127.0.0.1:8082".parse().unwrap());
        assert_eq!(c.interval(), Duration::from_secs(60));
        let keep = c.row_retention();
        assert_eq!(keep.ws_claims, Duration::from_secs(86_400));
        assert_eq!(keep.webhook_deliveries, Duration::from_secs(7 * 86_400));
        assert_eq!(
            (c.stats_delivery_log_retention_days, keep.batch),
            (30, 1_000)
        );
    }

    #[test]
    fn public_listen_and_short_retention_are_rejected() {
        for (k, v, key) in [
            (
                "stats_listen",
                serde_json::json!("0.0.0.0:8082"),
                "PMW_STATS_LISTEN",
            ),
            (
                "stats_retention_days",
                serde_json::json!(30),
                "PMW_STATS_RETENTION_DAYS",
            ),
            (
                "stats_interval_ms",
                serde_json::json!(5),
                "PMW_STATS_INTERVAL_MS",
            ),
            (
                "stats_ws_claims_retention_secs",
                serde_json::json!(1),
                "PMW_STATS_WS_CLAIMS_RETENTION_SECS",
            ),
            (
                "stats_webhook_deliveries_retention_secs",
                serde_json::json!(0),
                "PMW_STATS_WEBHOOK_DELIVERIES_RETENTION_SECS",
            ),
            (
                "stats_delivery_log_retention_days",
                serde_json::json!(0),
                "PMW_STATS_DELIVERY_LOG_RETENTION_DAYS",
            ),
            (
                "stats_retention_batch",
                serde_json::json!(0),
                "PMW_STATS_RETENTION_BATCH",
            ),
        ] {
            let err = pmw_core::config::load_from::<StatsConfig>(
                Figment::new().merge(Serialized::default(k, &v)),
            )
            .unwrap_err()
            .to_string();
            assert!(err.contains(key), "{k}={v}: {err}");
        }
    }
}
