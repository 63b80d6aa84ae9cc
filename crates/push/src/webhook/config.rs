//! The delivery engine's settings (`PMW_PUSH_WEBHOOK_*`, `PMW_PUSH_SLOT`), with the same
//! layering as the core config: defaults, then `PMW_CONFIG`, then the environment.

use std::time::Duration;

use figment::Figment;
use pmw_core::config::{ConfigError, Validate};
use serde::Deserialize;

/// Delivery engine settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookConfig {
    /// Timeout of one attempt.
    pub timeout: Duration,
    /// Allow destinations that are loopback, private, link-local, … (off in production).
    pub allow_private_destinations: bool,
    /// Attempts in flight per endpoint (1 = strictly one at a time, in cursor order).
    pub max_in_flight_per_endpoint: usize,
    /// Look for due retries at least this often.
    pub poll_interval: Duration,
    /// Push slot whose `push_epoch` row fences every write.
    pub slot: i16,
    /// Disable an endpoint whose every attempt has failed for this long (`None` = never).
    pub disable_failing_after: Option<Duration>,
    /// The Telegram Bot API base chat endpoints of kind `telegram` post to
    /// (`<base>/bot<token>/sendMessage`).
    pub telegram_api: String,
}

impl Default for WebhookConfig {
    fn default() -> WebhookConfig {
        WebhookConfig {
            timeout: Duration::from_millis(d::timeout()),
            allow_private_destinations: false,
            max_in_flight_per_endpoint: d::in_flight(),
            poll_interval: Duration::from_millis(d::poll()),
            slot: 0,
            disable_failing_after: Some(Duration::from_millis(d::disable_after())),
            telegram_api: d::telegram_api(),
        }
    }
}

impl WebhookConfig {
    /// A claim of this dispatcher's own epoch older than this was abandoned (attempts are
    /// bounded by the timeout) and may be taken again.
    pub fn claim_ttl(&self) -> Duration {
        self.timeout * 2 + Duration::from_secs(30)
    }

    /// Load from the standard sources (`PMW_CONFIG`, `PMW_*`).
    pub fn load() -> Result<WebhookConfig, ConfigError> {
        WebhookConfig::from_figment(pmw_core::config::figment())
    }

    /// Load from an explicit figment.
    pub fn from_figment(f: Figment) -> Result<WebhookConfig, ConfigError> {
        let s: WebhookSettings = pmw_core::config::load_from(f)?;
        Ok(WebhookConfig {
            timeout: Duration::from_millis(s.push_webhook_timeout_ms),
            allow_private_destinations: s.push_allow_private_webhooks,
            max_in_flight_per_endpoint: s.push_webhook_max_in_flight,
            poll_interval: Duration::from_millis(s.push_webhook_poll_ms),
            slot: s.push_slot,
            disable_failing_after: (s.push_webhook_disable_after_ms > 0)
                .then(|| Duration::from_millis(s.push_webhook_disable_after_ms)),
            telegram_api: s.push_telegram_api,
        })
    }
}

/// The raw settings, keyed like the environment variables.
#[derive(Debug, Clone, Deserialize)]
struct WebhookSettings {
    #[serde(default = "d::timeout")]
    push_webhook_timeout_ms: u64,
    #[serde(default)]
    push_allow_private_webhooks: bool,
    #[serde(default = "d::in_flight")]
    push_webhook_max_in_flight: usize,
    #[serde(default = "d::poll")]
    push_webhook_poll_ms: u64,
    #[serde(default)]
    push_slot: i16,
    #[serde(default = "d::disable_after")]
    push_webhook_disable_after_ms: u64,
    #[serde(default = "d::telegram_api")]
    push_telegram_api: String,
}

impl Validate for WebhookSettings {
    fn validate(&self) -> Result<(), ConfigError> {
        if !(100..=120_000).contains(&self.push_webhook_timeout_ms) {
            return Err(ConfigError::invalid(
                "PMW_PUSH_WEBHOOK_TIMEOUT_MS",
                "must be between 100 and 120000",
            ));
        }
        if !(1..=64).contains(&self.push_webhook_max_in_flight) {
            return Err(ConfigError::invalid(
                "PMW_PUSH_WEBHOOK_MAX_IN_FLIGHT",
                "must be between 1 and 64",
            ));
        }
        if !(10..=60_000).contains(&self.push_webhook_poll_ms) {
            return Err(ConfigError::invalid(
                "PMW_PUSH_WEBHOOK_POLL_MS",
                "must be between 10 and 60000",
            ));
        }
        if (1..1_000).contains(&self.push_webhook_disable_after_ms) {
            return Err(ConfigError::invalid(
                "PMW_PUSH_WEBHOOK_DISABLE_AFTER_MS",
                "must be 0 (never) or at least 1000",
            ));
        }
        if !(self.push_telegram_api.starts_with("https://")
            || self.push_telegram_api.starts_with("http://"))
        {
            return Err(ConfigError::invalid(
                "PMW_PUSH_TELEGRAM_API",
                "must be an http(s) URL",
            ));
        }
        Ok(())
    }
}

mod d {
    pub fn timeout() -> u64 {
        10_000
    }
    pub fn in_flight() -> usize {
        4
    }
    pub fn poll() -> u64 {
        1_000
    }
    pub fn disable_after() -> u64 {
        5 * 24 * 3_600_000
    }
    pub fn telegram_api() -> String {
        "https://api.telegram.org".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use figment::providers::Serialized;

    #[test]
    fn webhook_config_defaults_and_overrides() {
        let c = WebhookConfig::from_figment(Figment::new()).unwrap();
        assert_eq!(c, WebhookConfig::default());
        assert_eq!(c.timeout, Duration::from_secs(10));
        assert!(!c.allow_private_destinations);
        let c = WebhookConfig::from_figment(
            Figment::new()
                .merge(Serialized::default("push_webhook_timeout_ms", 2500))
                .merge(Serialized::default("push_allow_private_webhooks", true))
                .merge(Serialized::default("push_webhook_max_in_flight", 1)),
        )
        .unwrap();
        assert_eq!(c.timeout, Duration::from_millis(2500));
        assert!(c.allow_private_destinations);
        assert_eq!(c.max_in_flight_per_endpoint, 1);
        assert_eq!(
            WebhookConfig::default().disable_failing_after,
            Some(Duration::from_secs(5 * 24 * 3600))
        );
        let never = WebhookConfig::from_figment(
            Figment::new().merge(Serialized::default("push_webhook_disable_after_ms", 0)),
        )
        .unwrap();
        assert_eq!(never.disable_failing_after, None);
        let e = WebhookConfig::from_figment(
            Figment::new().merge(Serialized::default("push_webhook_disable_after_ms", 5)),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("PMW_PUSH_WEBHOOK_DISABLE_AFTER_MS"),
            "{e}"
        );
        let e = WebhookConfig::from_figment(
            Figment::new().merge(Serialized::default("push_webhook_max_in_flight", 0)),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("PMW_PUSH_WEBHOOK_MAX_IN_FLIGHT"),
            "{e}"
        );
    }
}
