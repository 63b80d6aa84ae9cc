//! Where an endpoint posts, as the endpoint routes take it: a signed JSON webhook (`url`, with a
//! generated `whsec_` secret) or a chat destination (`discord`/`slack` with their incoming
//! webhook `url`, `telegram` with `bot_token` and `chat_id`; [`pmw_core::chat`]). A chat
//! destination is sealed whole into the `secret` column; the `url` column keeps only what may be
//! shown (`scheme://host`, or `telegram:<chat id>`). Mistakes are 422s that say what is wrong.

use pmw_core::chat::{ChatKind, ChatTarget};
use pmw_core::ssrf;
use pmw_core::webhook::Secret;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::endpoint::EventType;
use crate::error::ApiError;

/// What an endpoint is: signed JSON or a chat service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum EndpointKind {
    /// Signed JSON (Standard Webhooks), the default.
    #[default]
    Webhook,
    /// A Discord channel's webhook (`https://discord.com/api/webhooks/<id>/<token>`).
    Discord,
    /// A Slack incoming webhook (`https://hooks.slack.com/services/T…/B…/…`).
    Slack,
    /// A Telegram chat, through a bot (`bot_token`, `chat_id`).
    Telegram,
}

impl EndpointKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EndpointKind::Webhook => "webhook",
            EndpointKind::Discord => "discord",
            EndpointKind::Slack => "slack",
            EndpointKind::Telegram => "telegram",
        }
    }

    /// From the stored column.
    pub fn stored(s: &str) -> EndpointKind {
        match ChatKind::parse(s) {
            Some(ChatKind::Discord) => EndpointKind::Discord,
            Some(ChatKind::Slack) => EndpointKind::Slack,
            Some(ChatKind::Telegram) => EndpointKind::Telegram,
            None => EndpointKind::Webhook,
        }
    }

    fn chat(self) -> Option<ChatKind> {
        ChatKind::parse(self.as_str())
    }
}

/// A checked destination, ready to store.
pub struct Dest {
    /// The `url` column (shown by the API).
    pub url: String,
    /// What is sealed into the `secret` column.
    pub secret: String,
    /// The signing secret to show once (signed endpoints only).
    pub shown_secret: Option<String>,
}

/// The destination of a new endpoint of `kind`, checked.
pub fn new_dest(
    kind: EndpointKind,
    url: Option<&str>,
    bot_token: Option<&str>,
    chat_id: Option<&str>,
    allow_private: bool,
) -> Result<Dest, ApiError> {
    let Some(chat) = kind.chat() else {
        if bot_token.is_some() || chat_id.is_some() {
            return Err(ApiError::unprocessable(
                "invalid_destination",
                "bot_token and chat_id are for telegram endpoints",
            ));
        }
        let url = url.ok_or_else(|| ApiError::unprocessable("invalid_url", "url is required"))?;
        let url = ssrf::validate_url(url, allow_private)
            .map_err(|e| ApiError::unprocessable("invalid_url", e.to_string()))?;
        let secret = Secret::generate().expose();
        return Ok(Dest {
            url: url.to_string(),
            secret: secret.clone(),
            shown_secret: Some(secret),
        });
    };
    chat_dest(
        ChatTarget::new(chat, url, bot_token, chat_id),
        allow_private,
    )
}

/// A chat endpoint's destination changed by `url`, `bot_token`, `chat_id` (those present).
pub fn changed_dest(
    current: &ChatTarget,
    url: Option<&str>,
    bot_token: Option<&str>,
    chat_id: Option<&str>,
    allow_private: bool,
) -> Result<Dest, ApiError> {
    let pick = |new: Option<&str>, old: &Option<String>| new.or(old.as_deref()).map(str::to_string);
    let (url, token, chat) = (
        pick(url, &current.url),
        pick(bot_token, &current.token),
        pick(chat_id, &current.chat_id),
    );
    chat_dest(
        ChatTarget::new(
            current.kind,
            url.as_deref(),
            token.as_deref(),
            chat.as_deref(),
        ),
        allow_private,
    )
}

fn chat_dest(
    target: Result<ChatTarget, pmw_core::chat::ChatError>,
    allow_private: bool,
) -> Result<Dest, ApiError> {
    let target =
        target.map_err(|e| ApiError::unprocessable("invalid_destination", e.to_string()))?;
    if let Some(url) = &target.url {
        ssrf::validate_url(url, allow_private)
            .map_err(|e| ApiError::unprocessable("invalid_url", e.to_string()))?;
    }
    Ok(Dest {
        url: target.shown_url(),
        secret: target.stored_text(),
        shown_secret: None,
    })
}

/// A chat endpoint receives trades (and their retracts), never `final`s or the pending tier.
pub fn check_events(kind: EndpointKind, events: &[EventType]) -> Result<(), ApiError> {
    let other = |e: &EventType| *e != EventType::Trade;
    if kind.chat().is_some() && events.iter().any(other) {
        return Err(ApiError::unprocessable(
            "invalid_events",
            "chat endpoints (discord, slack, telegram) receive trade events only",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_destinations_are_refused_with_a_clear_reason() {
        let e = new_dest(
            EndpointKind::Discord,
            Some("http://127.0.0.1/x"),
            None,
            None,
            true,
        )
        .err()
        .unwrap();
        assert_eq!(e.code, "invalid_destination");
        let d = new_dest(
            EndpointKind::Discord,
            Some("http://127.0.0.1:5/api/webhooks/1/secretpath_xyz"),
            None,
            None,
            true,
        )
        .ok()
        .unwrap();
        assert_eq!(d.url, "http://127.0.0.1:5");
        assert!(d.shown_secret.is_none() && d.secret.contains("secretpath_xyz"));
        let private = new_dest(
            EndpointKind::Slack,
            Some("http://127.0.0.1:5/services/T0000001/B0000001/secretpath_xyz"),
            None,
            None,
            false,
        );
        assert_eq!(private.err().unwrap().code, "invalid_url");
        let t = new_dest(EndpointKind::Webhook, None, Some("1:x"), None, true);
        assert_eq!(t.err().unwrap().code, "invalid_destination");
        assert!(check_events(EndpointKind::Telegram, &[EventType::Final]).is_err());
        assert!(check_events(EndpointKind::Webhook, &[EventType::Final]).is_ok());
        let pending = [EventType::Trade, EventType::Pending];
        assert!(check_events(EndpointKind::Discord, &pending).is_err());
        assert!(check_events(EndpointKind::Webhook, &pending).is_ok());
    }
}
