//! A webhook endpoint as the API reads it: its row (never the secret), the events it receives,
//! and the lookup of one owned by the caller. A leaf shared by the endpoint routes, the delivery
//! log and replay.

use pmw_core::filter::FilterSpec;
use pmw_core::UnixMs;
use serde::{Deserialize, Serialize};
use tokio_postgres::Row;
use utoipa::ToSchema;

use crate::error::ApiError;

/// The columns [`Endpoint::from_row`] reads, in order.
pub const COLUMNS: &str =
    "id, url, enabled, disabled_reason, previous_expires_ms, created_ms, updated_ms, filter::text, events, kind";

/// An event type an endpoint (or a WebSocket session, `events=`) receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum EventType {
    /// Each trade at once (and its `retract` if a reorg removes it).
    Trade,
    /// Each trade once its block is finalized: a small `final` naming it when `trade` is also
    /// chosen, else the full trade body with `finalized: true`.
    Final,
    /// Opt-in beside `trade`: each fill of a settlement seen in the mempool (`pending`), before
    /// its block, and a `void` with its reason when it does not confirm (docs/SETTLEMENT.md).
    Pending,
}

/// The stored form of an event list: `{trade}`, `{final}`, `{trade,final}`, with `pending` after
/// `trade` when asked (an empty list, or `pending` without `trade`, is refused).
pub fn event_names(events: &[EventType]) -> Result<Vec<&'static str>, ApiError> {
    let has = |e| events.contains(&e);
    let mut names = Vec::new();
    if has(EventType::Trade) {
        names.push("trade");
    }
    if has(EventType::Final) {
        names.push("final");
    }
    if names.is_empty() {
        return Err(ApiError::unprocessable(
            "invalid_events",
            "events needs at least one of trade, final",
        ));
    }
    if has(EventType::Pending) {
        if !has(EventType::Trade) {
            return Err(ApiError::unprocessable(
                "invalid_events",
                "pending needs trade (a pending is followed by its trade)",
            ));
        }
        names.push("pending");
    }
    Ok(names)
}

/// A webhook endpoint (never its secret). Its `Debug` shows the URL's host only.
#[derive(Serialize, ToSchema)]
pub struct Endpoint {
    pub id: i64,
    /// `webhook` (signed JSON) or a chat service: `discord`, `slack`, `telegram`.
    pub kind: super::chat_dest::EndpointKind,
    /// Where it posts. A chat endpoint shows only `scheme://host` (its webhook path is its
    /// secret) or `telegram:<chat id>`.
    pub url: String,
    pub enabled: bool,
    /// Why it was disabled: by the account, by a 410 from the receiver, or by the dispatcher
    /// after every attempt failed for the configured period (5 days by default).
    pub disabled_reason: Option<String>,
    /// While a rotation overlaps, the previous secret also signs until then.
    pub previous_expires_ms: Option<i64>,
    pub created_ms: i64,
    pub updated_ms: i64,
    /// Which trades this endpoint gets, on top of each followed wallet's own filter; `null`:
    /// every trade of the followed wallets that passes theirs.
    pub filter: Option<FilterSpec>,
    /// What it receives: `trade`, `final`, or both.
    pub events: Vec<EventType>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("id", &self.id)
            .field("kind", &self.kind)
            .field("url", &pmw_core::redact::Url(&self.url))
            .field("enabled", &self.enabled)
            .field("disabled_reason", &self.disabled_reason)
            .field("previous_expires_ms", &self.previous_expires_ms)
            .field("created_ms", &self.created_ms)
            .field("updated_ms", &self.updated_ms)
            .field("filter", &self.filter)
            .field("events", &self.events)
            .finish()
    }
}

impl Endpoint {
    pub fn from_row(r: &Row) -> Endpoint {
        let now = UnixMs::now().0;
        Endpoint {
            id: r.get(0),
            kind: super::chat_dest::EndpointKind::stored(r.get(9)),
            url: r.get(1),
            enabled: r.get(2),
            disabled_reason: r.get(3),
            previous_expires_ms: r.get::<_, Option<i64>>(4).filter(|t| *t > now),
            created_ms: r.get(5),
            updated_ms: r.get(6),
            filter: super::filters::shown(r.get(7)),
            events: r
                .get::<_, Vec<String>>(8)
                .iter()
                .map(|e| match e.as_str() {
                    "final" => EventType::Final,
                    "pending" => EventType::Pending,
                    _ => EventType::Trade,
                })
                .collect(),
        }
    }
}

/// The endpoint `id` of the caller's account, or 404.
pub async fn owned(
    c: &crate::routes::txn::Client,
    account_id: i64,
    id: i64,
) -> Result<Endpoint, ApiError> {
    c.query_opt(
        &format!(include_str!("sql/owned_endpoint.sql"), COLUMNS = COLUMNS),
        &[&id, &account_id],
    )
    .await?
    .map(|r| Endpoint::from_row(&r))
    .ok_or_else(|| ApiError::not_found(format!("no webhook endpoint {id}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_lists_are_stored_in_one_order_and_never_empty() {
        use EventType::{Final, Trade};
        assert_eq!(event_names(&[Trade]).unwrap(), ["trade"]);
        assert_eq!(event_names(&[Final, Trade]).unwrap(), ["trade", "final"]);
        assert_eq!(event_names(&[Final, Final]).unwrap(), ["final"]);
        assert_eq!(event_names(&[]).unwrap_err().code, "invalid_events");
        use EventType::Pending;
        assert_eq!(
            event_names(&[Pending, Trade]).unwrap(),
            ["trade", "pending"]
        );
        assert_eq!(
            event_names(&[Pending, Final]).unwrap_err().code,
            "invalid_events"
        );
    }
}
