//! pmw-api's integration tests, one module per subject, on the real local stack (the API in-
//! process; tests that also run push live in the top-level `tests/e2e`).

mod account;
mod bulk;
mod caddy;
mod chat_endpoints;
mod common;
mod config;
mod contract;
mod deliveries;
mod filters;
mod hook_test;
mod limits;
mod openapi;
mod ready_emitters;
mod ready_indexes;
mod ready_projector;
mod schema_guard;
mod secrets_at_rest;
mod security;
mod ssrf_oracle;
mod subscriptions;
mod trades;
mod webhooks;
