//! Shared harness for pmw-api tests (also the top-level e2e tests'): a private migrated
//! database, the API in-process on port 0, accounts and keys created through the production
//! code, the JSON client of `pmw_testkit`, and stored rows as live and push write them.

use std::net::SocketAddr;
use std::ops::Deref;
use std::time::Duration;

use pmw_api::ApiConfig;
use pmw_core::CoreConfig;
use pmw_testkit::{Http, ServiceHandle, TestDb};

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

/// API settings for tests: port 0, private webhooks refused, generous rate limits, and a
/// markets API on a closed loopback port (no request leaves the machine; `/v1/markets` answers
/// 503 unless a test gives it pmw-sim's).
pub fn test_config() -> ApiConfig {
    ApiConfig {
        api_listen: "127.0.0.1:0".parse().unwrap(),
        gamma_url: "http://127.0.0.1:9".into(),
        api_rate_per_sec: 1_000,
        api_rate_burst: 1_000,
        api_anon_rate_per_sec: 1_000,
        api_anon_rate_burst: 1_000,
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
    pub async fn start() -> Api {
        Api::start_with(test_config()).await
    }

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
        let mut c = self.db.pg.get().await.unwrap();
        let a = pmw_core::pg::accounts::create_account(&**c, "test", None, plan)
            .await
            .unwrap();
        let k = pmw_core::pg::accounts::create_key(&mut **c, a.id, "test")
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

/// A valid wallet in lowercase, distinct per `i`.
pub fn wallet(i: u8) -> String {
    format!("0x{}", hex::encode([i; 20]))
}

/// A stored trade row of `maker` at `(block, log_index)`, as live writes it.
pub fn trade_row(block: u64, log_index: u32, maker: &str) -> pmw_core::ch::TradeRow {
    pmw_core::ch::TradeRow {
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
        audit: 0,
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

/// Set the push and webhook-lane cursors (what the push leader does after its rounds).
pub async fn set_push_cursor(db: &TestDb, block: u64, log_index: u32) {
    let c = db.pg.get().await.unwrap();
    for table in ["push_cursor", "webhook_cursor"] {
        c.execute(
            &format!(
                "INSERT INTO {table} (slot, block_number, log_index, epoch, updated_ms) VALUES (0, $1, $2, 1, 0) \
                 ON CONFLICT (slot) DO UPDATE SET block_number = EXCLUDED.block_number, log_index = EXCLUDED.log_index"
            ),
            &[&(block as i64), &(log_index as i32)],
        )
        .await
        .unwrap();
    }
}
