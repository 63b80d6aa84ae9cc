//! Each chat service's rate-limit and dead-destination answers, read from its own responses:
//! Discord answers 429 with JSON `retry_after` (seconds, fractional), Slack 429 with a
//! `Retry-After` header (seconds), Telegram 429 with JSON `parameters.retry_after` (seconds).
//! A destination that is gone for good (a deleted Discord webhook's 404, a revoked Slack
//! webhook's 404/410, a Telegram bot that was blocked or whose token was revoked: 401/403)
//! disables the endpoint, as a 410 does for signed webhooks.

use std::time::Duration;

use super::ChatKind;

/// Longest wait a service's answer is taken at (a longer one is capped).
pub const MAX_WAIT: Duration = Duration::from_secs(3600);
/// The wait when a service answers 429 without saying how long.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(5);

/// How long `kind` asked to wait, from a 429 response's `Retry-After` header and the start of
/// its body; `None` when the status is not 429.
pub fn retry_after(
    kind: ChatKind,
    status: u16,
    header: Option<&str>,
    body: &str,
) -> Option<Duration> {
    if status != 429 {
        return None;
    }
    let json: Option<serde_json::Value> = serde_json::from_str(body.trim()).ok();
    let secs = match kind {
        ChatKind::Discord => json.as_ref().and_then(|v| v["retry_after"].as_f64()),
        ChatKind::Telegram => json
            .as_ref()
            .and_then(|v| v["parameters"]["retry_after"].as_f64()),
        ChatKind::Slack => None,
    }
    .or_else(|| header.and_then(|h| h.trim().parse::<f64>().ok()));
    let wait = secs
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map_or(DEFAULT_WAIT, Duration::from_secs_f64);
    Some(wait.min(MAX_WAIT))
}

/// Whether `status` from `kind` says the destination is gone for good.
pub fn is_gone(kind: ChatKind, status: u16) -> bool {
    match kind {
        ChatKind::Discord => matches!(status, 404 | 410),
        ChatKind::Slack => matches!(status, 404 | 410),
        ChatKind::Telegram => matches!(status, 401 | 403 | 404),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_service_says_how_long_to_wait_its_own_way() {
        let d =
            r#"{"message": "You are being rate limited.", "retry_after": 1.5, "global": false}"#;
        assert_eq!(
            retry_after(ChatKind::Discord, 429, None, d),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            retry_after(ChatKind::Slack, 429, Some("7"), "rate_limited"),
            Some(Duration::from_secs(7))
        );
        let t = r#"{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 3","parameters":{"retry_after":3}}"#;
        assert_eq!(
            retry_after(ChatKind::Telegram, 429, None, t),
            Some(Duration::from_secs(3))
        );
        assert_eq!(retry_after(ChatKind::Telegram, 200, None, t), None);
        assert_eq!(
            retry_after(ChatKind::Discord, 429, None, "<html>"),
            Some(DEFAULT_WAIT)
        );
        assert_eq!(
            retry_after(ChatKind::Slack, 429, Some("999999"), ""),
            Some(MAX_WAIT)
        );
        assert!(is_gone(ChatKind::Discord, 404) && !is_gone(ChatKind::Discord, 500));
        assert!(is_gone(ChatKind::Telegram, 403));
    }
}
