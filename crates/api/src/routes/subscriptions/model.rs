//! What the subscription routes take and show: a followed wallet, a wallet to follow, and the
//! label rule (at most 200 characters, no control characters), for single and bulk changes alike.

use pmw_core::filter::FilterSpec;
use pmw_core::pg::accounts::MAX_LABEL_CHARS;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ApiError;

/// One followed wallet.
#[derive(Debug, Serialize, ToSchema)]
pub struct Subscription {
    /// Lowercase `0x…` hex.
    #[schema(example = "0x1111111111111111111111111111111111111111")]
    pub wallet: String,
    pub label: String,
    pub created_ms: i64,
    /// What push sends of this wallet (WebSocket and webhooks); `null`: every trade.
    pub filter: Option<FilterSpec>,
}

/// Follow a wallet.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddSubscription {
    /// `0x` + 40 hex digits; mixed case must carry a valid EIP-55 checksum.
    #[schema(
        example = "0x1111111111111111111111111111111111111111",
        pattern = r"^0x[0-9a-fA-F]{40}$"
    )]
    pub wallet: String,
    /// At most 200 characters, no control characters.
    #[serde(default)]
    #[schema(max_length = 200, pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$")]
    pub label: String,
    /// Narrow what push sends of this wallet (absent, `null` or `{}`: every trade). Ignored
    /// when the wallet is already followed: change it with `PATCH /v1/subscriptions/{wallet}`.
    #[serde(default)]
    pub filter: Option<FilterSpec>,
}

/// Whether a label may be stored: at most [`MAX_LABEL_CHARS`] characters, no control characters.
pub fn label_ok(label: &str) -> bool {
    label.chars().count() <= MAX_LABEL_CHARS && !label.chars().any(char::is_control)
}

/// The label rule as a refusal says it.
pub fn label_rule() -> String {
    format!("at most {MAX_LABEL_CHARS} characters without control characters")
}

/// 422 `invalid_label` unless [`label_ok`].
pub fn check_label(label: &str) -> Result<(), ApiError> {
    if label_ok(label) {
        return Ok(());
    }
    Err(ApiError::unprocessable(
        "invalid_label",
        format!("label must be {}", label_rule()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_up_to_200_characters_without_control_characters() {
        assert!(label_ok(""));
        assert!(label_ok(&"é".repeat(200)), "characters, not bytes");
        assert!(!label_ok(&"a".repeat(201)));
        assert!(!label_ok("tab\there"));
        assert!(!label_ok("c1\u{85}"));
        let e = check_label("new\nline").unwrap_err();
        assert_eq!(e.code, "invalid_label");
        assert_eq!(
            e.message,
            "label must be at most 200 characters without control characters"
        );
    }
}
