//! pmw-push's integration tests: the webhook engine against real receivers and the real stores
//! (push with live, api or stats is in the top-level `tests/e2e`).

mod ledger;
mod schema_guard;
mod visibility;
mod webhook_chat;
mod webhook_fence;
mod webhook_handoff;
mod webhook_isolation;
mod webhook_pool;
mod webhook_retry;
mod webhook_signing;
mod webhook_ssrf;
mod webhook_status;
mod webhook_support;
