//! Signed webhooks: Standard Webhooks signatures, an SSRF-guarded HTTP client, a published retry
//! schedule and a delivery engine whose whole state lives in Postgres (`webhook_deliveries`), so
//! it survives restarts and leader changes. At least once, with a `webhook-id` stable across
//! retries.
//!
//! Flow: the webhook lane (push's `lanes`, beside the WebSocket lane) calls
//! [`enqueue_in_slot`] inside the transaction that moves `webhook_cursor` (fenced by the push
//! epoch in the same statement), with new trade deliveries claimed by the epoch, commits, then
//! hands those to the dispatcher in memory ([`Handoff`]) and wakes it only for what it must
//! claim itself (retracts, finals). The dispatcher's scan claims due deliveries for every idle
//! endpoint in one statement; it runs one queue per endpoint (independent of each other; cursor
//! order within an endpoint; at most `max_in_flight_per_endpoint` attempts in flight). Each claim and each result update checks the epoch in the same statement; a
//! dispatcher whose epoch was bumped gets [`WebhookError::Fenced`] and stops. Every attempt is
//! logged to ClickHouse `delivery_log`; each delivered message adds one `push_latency` row
//! (channel `webhook`, `target_id` = endpoint id), both through the leader's
//! [`pmw_session::recorder::Recorder`].
//!
//! Settings (same layering as the core config: defaults → `PMW_CONFIG` → env):
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `PMW_PUSH_WEBHOOK_TIMEOUT_MS` | `10000` | whole-attempt timeout (connect, send, response head) |
//! | `PMW_PUSH_ALLOW_PRIVATE_WEBHOOKS` | `false` | allow loopback/private/link-local destinations (tests, on-prem) |
//! | `PMW_PUSH_WEBHOOK_MAX_IN_FLIGHT` | `4` | attempts in flight per endpoint |
//! | `PMW_PUSH_WEBHOOK_POLL_MS` | `1000` | how often due retries are looked for without a wake-up |
//! | `PMW_PUSH_SLOT` | `0` | push slot whose epoch fences claims and updates |
//! | `PMW_PUSH_WEBHOOK_DISABLE_AFTER_MS` | `432000000` (5 days) | an endpoint whose every attempt has failed for this long is disabled; `0` = never |
//! | `PMW_PUSH_TELEGRAM_API` | `https://api.telegram.org` | Telegram Bot API base for `telegram` endpoints (`<base>/bot<token>/sendMessage`); tests point it at 127.0.0.1 |
//!
//! Disabling (a 410, the rule below, or the account through the API) expires the endpoint's
//! pending deliveries in the same transaction: they become `failed` with `last_error`
//! `endpoint disabled: <reason>` and are never sent, so re-enabling starts from new trades
//! instead of firing a backlog all at once ([`expire_pending`]).
//!
//! Persistently failing endpoints (Svix's rule): `webhook_failing` holds, per endpoint, the time
//! of the first failed attempt since its last successful one (set on that failure, deleted on
//! any 2xx). An attempt that fails while that time is older than
//! `PMW_PUSH_WEBHOOK_DISABLE_AFTER_MS` disables the endpoint with a `disabled_reason` saying
//! since when it has failed and the last error; the attempt's `delivery_log` row says so too.
//!
//! The retry schedule is in [`retry`]; signing in [`pmw_core::webhook::sign`]; the SSRF rules in
//! [`pmw_core::ssrf`] and [`client`].

mod attempt;
mod body;
mod build;
mod chat;
pub mod client;
mod config;
mod context;
mod dispatcher;
mod error;
mod handoff;
mod queue;
mod results;
pub mod retry;
mod running;
mod stats;
mod store;

pub use pmw_core::webhook::sign;

pub use build::{deliveries_of, finals_of};
pub use config::WebhookConfig;
pub use dispatcher::Dispatcher;
pub use error::WebhookError;
pub use handoff::Handoff;
pub use stats::{StatsSnapshot, WebhookStats};
pub use store::{
    enqueue, enqueue_in_slot, expire_pending, webhook_id, DeliveryKind, Enqueued, NewDelivery,
};
