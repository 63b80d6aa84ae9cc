//! pmw-api in-process for the e2e tests: on its own database or beside a harness, accounts
//! created through its production code, its JSON client, and readiness polling.

use std::net::SocketAddr;
use std::ops::Deref;
use std::time::Duration;

use pmw_api::ApiConfig;
use pmw_core::CoreConfig;
use pmw_testkit::{Http, Resp, ServiceHandle, TestDb};

pub struct Api {
    pub db: TestDb,
    pub web: Http,
    _service: ServiceHandle,
}

/// `api.get(…)`, `api.base`, …: the JSON client of the running API.
impl Deref for Api {
    type Target = Http;

    fn deref(&self) -> &Http {
        &self.web
    }
}

/// API settings for tests: port 0, private webhooks refused, generous rate limits.
pub fn test_config() -> ApiConfig {
    ApiConfig {
        api_listen: "127.0.0.1:0".parse().unwrap(),
        api_rate_per_sec: 1_000,
        api_rate_burst: 1_000,
        ..ApiConfig::default()
    }
}

/// Start the API in-process on `core`; returns its address and handle.
pub async fn spawn_api(core: CoreConfig, cfg: ApiConfig) -> (SocketAddr, ServiceHandle) {
    let (handle, addr) = ServiceHandle::start_bound(Duration::from_secs(30), move |stop, bound| {
        pmw_api::run_with(core, cfg, stop, Some(bound))
    })
    .await;
    (addr, handle)
}

impl Api {
    pub async fn start_with(cfg: ApiConfig) -> Api {
        Api::start_on(TestDb::new().await, cfg).await
    }

    /// Start the API on an existing database.
    pub async fn start_on(db: TestDb, cfg: ApiConfig) -> Api {
        let (addr, service) = spawn_api(db.cfg.clone(), cfg).await;
        Api {
            db,
            web: Http::new(addr),
            _service: service,
        }
    }

    /// A new account on `plan` with one API key.
    pub async fn account(&self, plan: &str) -> (i64, String) {
        let c = self.db.pg.get().await.unwrap();
        let a = pmw_core::db::accounts::create_account(&**c, "test", None, plan)
            .await
            .unwrap();
        let k = pmw_core::db::accounts::create_key(&**c, a.id, "test")
            .await
            .unwrap();
        (a.id, k.key)
    }

    /// Count rows of a Postgres query returning one bigint.
    pub async fn count(&self, sql: &str) -> i64 {
        let c = self.db.pg.get().await.unwrap();
        c.query_one(sql, &[]).await.unwrap().get(0)
    }
}

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
