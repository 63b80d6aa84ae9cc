//! pmw-stats settings, beyond the core config (layered the same way: defaults → `PMW_CONFIG` file →
//! environment).
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `PMW_STATS_LISTEN` | `127.0.0.1:8082` | dashboard listen address; loopback only (Caddy is the public listener) |
//! | `PMW_STATS_INTERVAL_MS` | `60000` | how often the latency snapshot is recomputed |
//! | `PMW_STATS_LOCK_SEGMENT_MS` | `300000` | one segment of the writer-lock wait (`lock_timeout`) |
//! | `PMW_STATS_RETENTION_DAYS` | `32` | latency partitions (UTC days) ending more than this many days ago are dropped: the 30-day window plus a margin; at least 31 |
//! | `PMW_STATS_RETENTION_INTERVAL_MS` | `86400000` | how often the retention job runs (also once at start) |

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
}

mod d {
    use std::net::SocketAddr;

    pub fn listen() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 8082))
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
        86_400_000
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
}

impl Default for StatsConfig {
    fn default() -> Self {
        pmw_core::config::load_from(figment::Figment::new()).expect("defaults are valid")
    }
}

impl Validate for StatsConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if !self.stats_listen.ip().is_loopback() {
            return Err(ConfigError::invalid(
                "PMW_STATS_LISTEN",
                "must be a loopback address (Caddy is the public listener)",
            ));
        }
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
