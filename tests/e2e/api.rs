//! pmw-api in-process for the e2e tests (the API crate's own test harness, shared), readiness
//! polling, and push and live beside it.

use std::net::SocketAddr;
use std::time::Duration;

use pmw_core::CoreConfig;
use pmw_testkit::{Http, Resp, ServiceHandle};

// The API's own test harness, shared rather than copied.
#[path = "../../crates/api/tests/it/common.rs"]
#[allow(dead_code)]
mod common;
pub use common::{spawn_api, test_config, Api};

/// Poll `GET /v1/ready` of the API at `base` until it answers `status` (within `within`).
pub async fn ready_becomes(base: &str, status: u16, within: Duration) -> Resp {
    Http::at(base)
        .until("/v1/ready", within, &format!("status {status}"), |r| {
            r.status.as_u16() == status
        })
        .await
}

/// Push settings for the API's readiness tests: port 0, short lock segments, a round at least
/// every 200 ms, heartbeats every 500 ms.
pub fn push_config() -> pmw_push::PushConfig {
    pmw_push::PushConfig {
        push_listen: "127.0.0.1:0".parse().unwrap(),
        push_lock_segment_ms: 1_000,
        push_fallback_ms: 200,
        push_ws_heartbeat_ms: 500,
        ..pmw_push::PushConfig::default()
    }
}

/// Run pmw-push in-process with [`push_config`] and wait until it leads.
pub async fn start_push(core: CoreConfig, instance: &str) -> (ServiceHandle, SocketAddr) {
    crate::harness::start_push(core, instance, push_config(), Default::default()).await
}

/// pmw-live in-process on `core`'s database, following a private anvil (returned with it: the
/// chain lives as long as the handle).
pub async fn live_for(core: &CoreConfig) -> (pmw_sim::anvil::Anvil, ServiceHandle) {
    let anvil = pmw_sim::anvil::Anvil::spawn().await.expect("anvil");
    let mut core = core.clone();
    core.rpc_ws_url = anvil.ws_url();
    core.rpc_http_url = anvil.http_url();
    let live = crate::harness::start_live(core, 0);
    (anvil, live)
}
