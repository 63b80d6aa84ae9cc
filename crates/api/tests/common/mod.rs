//! Shared harness for pmw-api tests: a private migrated database, the API in-process on port 0,
//! accounts and keys created through the production code, and a small JSON client.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use pmw_api::ApiConfig;
use pmw_testkit::{ServiceHandle, TestDb};
use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use serde_json::Value;

pub struct Api {
    pub db: TestDb,
    pub addr: SocketAddr,
    pub base: String,
    pub http: reqwest::Client,
    pub handle: Option<ServiceHandle>,
}

/// One response: status, headers and the body as JSON (`Value::Null` when it is not JSON).
#[derive(Debug)]
pub struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
    pub text: String,
}

impl Resp {
    /// The error code of an error response.
    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }

    /// Assert the status and, for errors, the error shape with `code`.
    #[track_caller]
    pub fn expect(&self, status: u16, code: Option<&str>) -> &Self {
        assert_eq!(
            self.status.as_u16(),
            status,
            "unexpected status; body: {}",
            self.text
        );
        if let Some(code) = code {
            assert_eq!(
                self.code(),
                code,
                "unexpected error code; body: {}",
                self.text
            );
            assert!(
                self.body["error"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty()),
                "errors carry a message: {}",
                self.text
            );
        }
        self
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

impl Api {
    pub async fn start() -> Api {
        Api::start_with(test_config()).await
    }

    pub async fn start_with(cfg: ApiConfig) -> Api {
        let db = TestDb::new().await;
        Api::start_on(db, cfg).await
    }

    /// Start the API on an existing database.
    pub async fn start_on(db: TestDb, cfg: ApiConfig) -> Api {
        let (addr, handle) = spawn_api(db.cfg.clone(), cfg).await;
        Api {
            db,
            addr,
            base: format!("http://{addr}"),
            http: reqwest::Client::new(),
            handle: Some(handle),
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

    pub async fn call(
        &self,
        method: Method,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> Resp {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        into_resp(req.send().await.expect("request")).await
    }

    /// A request with a raw body and content type.
    pub async fn raw(
        &self,
        method: Method,
        path: &str,
        key: Option<&str>,
        content_type: &str,
        body: Vec<u8>,
    ) -> Resp {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("content-type", content_type)
            .body(body);
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        into_resp(req.send().await.expect("request")).await
    }

    pub async fn get(&self, path: &str, key: &str) -> Resp {
        self.call(Method::GET, path, Some(key), None).await
    }

    pub async fn post(&self, path: &str, key: &str, body: Value) -> Resp {
        self.call(Method::POST, path, Some(key), Some(body)).await
    }

    /// Count rows of a Postgres query returning one bigint.
    pub async fn count(&self, sql: &str) -> i64 {
        let c = self.db.pg.get().await.unwrap();
        c.query_one(sql, &[]).await.unwrap().get(0)
    }
}

/// Start the API in-process; returns its address and handle.
pub async fn spawn_api(core: pmw_core::CoreConfig, cfg: ApiConfig) -> (SocketAddr, ServiceHandle) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let handle = ServiceHandle::spawn(move |stop| pmw_api::run_with(core, cfg, stop, Some(tx)));
    let addr = tokio::time::timeout(Duration::from_secs(30), rx)
        .await
        .expect("api listens within 30 s")
        .expect("api started");
    (addr, handle)
}

pub async fn into_resp(r: reqwest::Response) -> Resp {
    let status = r.status();
    let headers = r.headers().clone();
    let text = r.text().await.unwrap_or_default();
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    Resp {
        status,
        headers,
        body,
        text,
    }
}

/// A valid wallet in lowercase, distinct per `i`.
pub fn wallet(i: u8) -> String {
    format!("0x{}", hex::encode([i; 20]))
}

/// A stored trade row of `maker` at `(block, log_index)`, as live writes it.
pub fn trade_row(block: u64, log_index: u32, maker: &str) -> pmw_core::store::TradeRow {
    pmw_core::store::TradeRow {
        block_number: block,
        log_index,
        block_hash: format!("0x{:064x}", block),
        tx_hash: format!("0x{:064x}", block * 1_000 + u64::from(log_index)),
        block_time_ms: 1_700_000_000_000 + block as i64 * 2_000,
        exchange: "0x4bfb41d5b3570defd03c39a9a4d8de6bd8b8982e".into(),
        exchange_version: 1,
        order_hash: format!("0x{:064x}", u64::from(log_index) + 7),
        maker: maker.into(),
        taker: "0x4bfb41d5b3570defd03c39a9a4d8de6bd8b8982e".into(),
        side: (log_index % 2) as u8,
        token_id: "1234567890".into(),
        shares: "10.5".into(),
        collateral: "5.25".into(),
        price: "0.5".into(),
        fee: "0".into(),
        fee_asset: "collateral".into(),
        t_detect_ms: 1_700_000_000_000 + block as i64 * 2_000 + 300,
        backfilled: 0,
        retracted: 0,
        version: 1,
    }
}

/// Move the ingest watermark (what live does after a block's rows are stored).
pub async fn set_watermark(db: &TestDb, block: u64) {
    let c = db.pg.get().await.unwrap();
    c.execute(
        "INSERT INTO ingest_cursor (id, block_number, block_hash, updated_ms) VALUES (1, $1, '0x', 0) \
         ON CONFLICT (id) DO UPDATE SET block_number = EXCLUDED.block_number",
        &[&(block as i64)],
    )
    .await
    .unwrap();
}

/// Set the push cursor (what the push leader does after each round).
pub async fn set_push_cursor(db: &TestDb, block: u64, log_index: u32) {
    let c = db.pg.get().await.unwrap();
    c.execute(
        "INSERT INTO push_cursor (slot, block_number, log_index, epoch, updated_ms) VALUES (0, $1, $2, 1, 0) \
         ON CONFLICT (slot) DO UPDATE SET block_number = EXCLUDED.block_number, log_index = EXCLUDED.log_index",
        &[&(block as i64), &(log_index as i32)],
    )
    .await
    .unwrap();
}

/// Poll `GET /v1/ready` until it answers `status` (within `within`); returns that response.
pub async fn ready_becomes(api_base: &str, status: u16, within: Duration) -> Resp {
    let http = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let r = into_resp(
            http.get(format!("{api_base}/v1/ready"))
                .send()
                .await
                .expect("ready"),
        )
        .await;
        if r.status.as_u16() == status {
            return r;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "ready did not become {status} within {within:?}; last: {} {}",
            r.status,
            r.text
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Push settings for tests: port 0, short lock segments, a round at least every 200 ms.
pub fn push_config() -> pmw_push::PushConfig {
    pmw_push::PushConfig {
        push_listen: "127.0.0.1:0".parse().unwrap(),
        push_lock_segment_ms: 1_000,
        push_fallback_ms: 200,
        push_ws_heartbeat_ms: 500,
        ..pmw_push::PushConfig::default()
    }
}

/// Run pmw-push in-process and wait until it leads.
pub async fn start_push(core: pmw_core::CoreConfig, instance: &str) -> (ServiceHandle, SocketAddr) {
    let mut core = core;
    core.instance = Some(instance.to_string());
    let (tx, rx) = tokio::sync::oneshot::channel();
    let hooks = pmw_push::webhook::WebhookConfig::default();
    let handle = ServiceHandle::spawn(move |stop| {
        pmw_push::run_with(core, push_config(), hooks, stop, Some(tx))
    });
    let addr = tokio::time::timeout(Duration::from_secs(30), rx)
        .await
        .expect("push leads within 30 s")
        .expect("push started");
    (handle, addr)
}
