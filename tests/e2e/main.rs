//! Cross-service end-to-end tests on the real local stack: pmw-push with pmw-live ingesting what
//! pmw-sim trades, pmw-api and pmwctl against a running push, the dashboard against clients.

mod api;
mod api_config;
mod api_events;
mod api_push;
mod api_ready;
mod api_webhooks;
mod audit;
mod ctl_status;
mod ctl_watch;
mod examples;
mod filters;
mod harness;
mod markets;
mod providers;
mod push;
mod readable;
mod reorg;
mod reorg_live;
mod unlisted;
