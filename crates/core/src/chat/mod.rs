//! Chat destinations: a webhook endpoint of kind `discord`, `slack` or `telegram` gets readable
//! messages in that service's own request format instead of signed JSON. This module owns the
//! destination itself ([`ChatTarget`]: what is sealed at rest in the endpoint's `secret` column,
//! and the path-shape checks the API runs), the rendering ([`render`]) and the reading of each
//! service's rate-limit answers ([`limits`]).
//!
//! At rest a chat endpoint's `secret` column holds, sealed ([`crate::sealed`]), `chat:` and the
//! JSON of its [`ChatTarget`] (the Discord/Slack URL, whose path is the credential, or the
//! Telegram bot token and chat id); its `url` column holds only `scheme://host` (shown by the
//! API). Nothing on the push path reads it: only the dispatcher, per claim.

pub mod limits;
pub mod render;

use serde::{Deserialize, Serialize};

/// What a chat endpoint's sealed secret starts with.
const STORED_PREFIX: &str = "chat:";

/// Which chat service an endpoint posts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChatKind {
    Discord,
    Slack,
    Telegram,
}

impl ChatKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChatKind::Discord => "discord",
            ChatKind::Slack => "slack",
            ChatKind::Telegram => "telegram",
        }
    }

    /// `discord`, `slack` or `telegram`; `None` for anything else (`webhook` included).
    pub fn parse(s: &str) -> Option<ChatKind> {
        match s {
            "discord" => Some(ChatKind::Discord),
            "slack" => Some(ChatKind::Slack),
            "telegram" => Some(ChatKind::Telegram),
            _ => None,
        }
    }
}

/// Where a chat endpoint posts: its secrets in clear. Its `Debug` shows neither the URL's path
/// nor the bot token.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatTarget {
    pub kind: ChatKind,
    /// Discord and Slack: the incoming-webhook URL (its path is the secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Telegram: the bot token (`<bot id>:<secret>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Telegram: the chat id (`-100…`, a number, or `@channel`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_id: Option<String>,
}

impl std::fmt::Debug for ChatTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTarget")
            .field("kind", &self.kind)
            .field("url", &self.url.as_deref().map(crate::redact::Url))
            .field("token", &self.token.as_ref().map(|_| crate::redact::HIDDEN))
            .field("chat_id", &self.chat_id)
            .finish()
    }
}

/// Why a chat destination is refused (shown to API users with a 422).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChatError {
    #[error("{kind} endpoints need {field}")]
    Missing {
        kind: &'static str,
        field: &'static str,
    },
    #[error("{kind} endpoints take no {field}")]
    Extra {
        kind: &'static str,
        field: &'static str,
    },
    #[error("{0}")]
    Shape(String),
}

impl ChatTarget {
    /// A destination as an API request gives it, checked: a Discord URL's path must be
    /// `/api/webhooks/<id>/<token>`, a Slack one's `/services/<T…>/<B…>/<secret>`; a Telegram
    /// token `<digits>:<secret>` and a chat id a number or `@name`. Only the path shape is
    /// checked, not the host (the SSRF guard judges the host).
    pub fn new(
        kind: ChatKind,
        url: Option<&str>,
        token: Option<&str>,
        chat_id: Option<&str>,
    ) -> Result<ChatTarget, ChatError> {
        let k = kind.as_str();
        let need = |v: Option<&str>, field| {
            v.map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .ok_or(ChatError::Missing { kind: k, field })
        };
        let refuse = |v: Option<&str>, field| match v {
            Some(_) => Err(ChatError::Extra { kind: k, field }),
            None => Ok(()),
        };
        match kind {
            ChatKind::Discord | ChatKind::Slack => {
                refuse(token, "bot_token")?;
                refuse(chat_id, "chat_id")?;
                let url = need(url, "url")?;
                check_path(kind, &url)?;
                Ok(ChatTarget {
                    kind,
                    url: Some(url),
                    token: None,
                    chat_id: None,
                })
            }
            ChatKind::Telegram => {
                refuse(url, "url (the API base is the operator's setting)")?;
                let token = need(token, "bot_token")?;
                let chat_id = need(chat_id, "chat_id")?;
                check_token(&token)?;
                check_chat_id(&chat_id)?;
                Ok(ChatTarget {
                    kind,
                    url: None,
                    token: Some(token),
                    chat_id: Some(chat_id),
                })
            }
        }
    }

    /// The plain text sealed into the endpoint's `secret` column.
    pub fn stored_text(&self) -> String {
        format!(
            "{STORED_PREFIX}{}",
            serde_json::to_string(self).expect("a chat target serialises")
        )
    }

    /// The destination of endpoint `endpoint` from its stored `secret`: `None` for a signed
    /// JSON endpoint (or a secret that cannot be opened, which then fails as a signing error).
    pub fn from_stored(stored: &str, endpoint: i64) -> Option<ChatTarget> {
        let plain = crate::sealed::open(stored, endpoint).ok()?;
        serde_json::from_str(plain.strip_prefix(STORED_PREFIX)?).ok()
    }

    /// What the endpoint's `url` column holds and the API shows: `scheme://host` of the URL
    /// (Discord, Slack: the path is the secret), or `telegram:<chat id>`.
    pub fn shown_url(&self) -> String {
        match (&self.url, &self.chat_id) {
            (Some(url), _) => crate::redact::url(url),
            (None, Some(chat)) => format!("telegram:{chat}"),
            _ => String::new(),
        }
    }

    /// Where a message is posted: the URL itself, or `<api>/bot<token>/sendMessage`.
    pub fn post_url(&self, telegram_api: &str) -> String {
        match (self.kind, &self.url, &self.token) {
            (ChatKind::Telegram, _, Some(token)) => format!(
                "{}/bot{token}/sendMessage",
                telegram_api.trim_end_matches('/')
            ),
            (_, Some(url), _) => url.clone(),
            _ => String::new(),
        }
    }
}

fn shape(kind: ChatKind, want: &str) -> ChatError {
    ChatError::Shape(format!(
        "a {} url's path must look like {want}",
        kind.as_str()
    ))
}

/// The URL parses and its path has the service's incoming-webhook shape.
fn check_path(kind: ChatKind, raw: &str) -> Result<(), ChatError> {
    let url =
        url::Url::parse(raw).map_err(|e| ChatError::Shape(format!("url is not valid: {e}")))?;
    let parts: Vec<&str> = url.path().trim_matches('/').split('/').collect();
    let token_like = |s: &str| {
        s.len() >= 8
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    };
    let ok = match kind {
        ChatKind::Discord => {
            parts.len() == 4
                && parts[0] == "api"
                && parts[1] == "webhooks"
                && !parts[2].is_empty()
                && parts[2].chars().all(|c| c.is_ascii_digit())
                && token_like(parts[3])
        }
        ChatKind::Slack => {
            parts.len() == 4
                && parts[0] == "services"
                && parts[1].starts_with('T')
                && parts[2].starts_with('B')
                && parts[1..3]
                    .iter()
                    .all(|p| p.len() >= 2 && p.chars().all(|c| c.is_ascii_alphanumeric()))
                && token_like(parts[3])
        }
        ChatKind::Telegram => false,
    };
    if ok {
        return Ok(());
    }
    Err(match kind {
        ChatKind::Discord => shape(kind, "/api/webhooks/<numeric id>/<token>"),
        _ => shape(kind, "/services/T…/B…/<secret>"),
    })
}

fn check_token(token: &str) -> Result<(), ChatError> {
    let ok = token.split_once(':').is_some_and(|(id, secret)| {
        !id.is_empty()
            && id.chars().all(|c| c.is_ascii_digit())
            && secret.len() >= 20
            && secret
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    });
    ok.then_some(()).ok_or_else(|| {
        ChatError::Shape(
            "a telegram bot_token must look like <bot id>:<secret> (from @BotFather)".into(),
        )
    })
}

fn check_chat_id(id: &str) -> Result<(), ChatError> {
    let numeric = id.strip_prefix('-').unwrap_or(id);
    let ok = (!numeric.is_empty() && numeric.chars().all(|c| c.is_ascii_digit()))
        || id.strip_prefix('@').is_some_and(|n| {
            n.len() >= 4 && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
    ok.then_some(()).ok_or_else(|| {
        ChatError::Shape(
            "a telegram chat_id must be a number (e.g. -1001234567890) or @channelname".into(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_destinations_are_checked_by_path_shape_not_host() {
        let d = ChatTarget::new(
            ChatKind::Discord,
            Some("http://127.0.0.1:9/api/webhooks/123/abcDEF_-12345"),
            None,
            None,
        )
        .unwrap();
        assert_eq!(
            d.post_url("x"),
            "http://127.0.0.1:9/api/webhooks/123/abcDEF_-12345"
        );
        for bad in [
            "http://127.0.0.1/hooks/x",
            "http://h/api/webhooks/abc/tokentoken",
        ] {
            let e = ChatTarget::new(ChatKind::Discord, Some(bad), None, None).unwrap_err();
            assert!(e.to_string().contains("/api/webhooks/"), "{e}");
        }
        ChatTarget::new(
            ChatKind::Slack,
            Some("https://hooks.slack.com/services/T0001/B0001/XXXXXXXXXXXXXXXX"),
            None,
            None,
        )
        .unwrap();
        assert!(
            ChatTarget::new(ChatKind::Slack, Some("https://h/services/x"), None, None).is_err()
        );
        let t = ChatTarget::new(
            ChatKind::Telegram,
            None,
            Some("123456:AAH-abcdefghijklmnopqrstu"),
            Some("-1001234"),
        )
        .unwrap();
        assert_eq!(
            t.post_url("http://127.0.0.1:5/"),
            "http://127.0.0.1:5/bot123456:AAH-abcdefghijklmnopqrstu/sendMessage"
        );
        assert!(!format!("{t:?}").contains("AAH"), "the token never shows");
        assert!(ChatTarget::new(ChatKind::Telegram, None, Some("nope"), Some("1")).is_err());
        assert!(ChatTarget::new(
            ChatKind::Telegram,
            None,
            Some("1:AAAAAAAAAAAAAAAAAAAAAAA"),
            None
        )
        .is_err());
        assert!(matches!(
            ChatTarget::new(ChatKind::Discord, None, None, None),
            Err(ChatError::Missing { .. })
        ));
    }

    #[test]
    fn a_chat_target_round_trips_through_its_stored_text() {
        let t = ChatTarget::new(
            ChatKind::Telegram,
            None,
            Some("1:AAAAAAAAAAAAAAAAAAAAAAAA"),
            Some("@alerts_here"),
        )
        .unwrap();
        let stored = crate::sealed::seal(&t.stored_text(), 7);
        assert_eq!(ChatTarget::from_stored(&stored, 7), Some(t));
        assert_eq!(
            ChatTarget::from_stored(&crate::sealed::seal("whsec_x", 7), 7),
            None
        );
    }
}
