//! Shared support of the webhook tests: a migrated test database with an epoch and an account,
//! endpoints, enqueueing through the production path, the dispatcher's test settings. The
//! receivers and polling come from `pmw_testkit`.

use std::time::Duration;

use pmw_core::Cursor;
use pmw_push::webhook::{self, DeliveryKind, Dispatcher, NewDelivery, WebhookConfig};
use pmw_testkit::TestDb;

pub use pmw_testkit::eventually;
pub use pmw_testkit::hooks::{Receiver, Step};

/// A test database with `push_epoch` slot 0 at epoch 1 and one account.
pub struct Env {
    pub db: TestDb,
    pub account: i64,
}

impl Env {
    /// A dispatcher of `epoch` over this database with `cfg` (its own shutdown token).
    pub fn dispatcher(&self, epoch: i64, cfg: WebhookConfig) -> Dispatcher {
        Dispatcher::spawn(
            self.db.pg.clone(),
            self.db.ch.clone(),
            epoch,
            cfg,
            tokio_util::sync::CancellationToken::new(),
        )
    }

    /// Wait until delivery `id` has had `n` attempts (panics after `within`).
    pub async fn wait_attempts(&self, id: &str, n: i32, within: Duration) {
        let reached = eventually(within, || async { self.delivery(id).await.attempts == n }).await;
        assert!(reached, "delivery {id} never reached {n} attempts");
    }

    pub async fn new() -> Env {
        let db = TestDb::new().await;
        let c = db.connect().await;
        c.execute(
            "INSERT INTO push_epoch (slot, epoch, leader, acquired_ms) VALUES (0, 1, 'test', 0)",
            &[],
        )
        .await
        .unwrap();
        let account = pmw_testkit::seed::account(&c, "t", "free").await;
        Env { db, account }
    }

    pub async fn endpoint(&self, url: &str, secret: &str) -> i64 {
        self.endpoint_rotated(url, secret, None, None).await
    }

    pub async fn endpoint_rotated(
        &self,
        url: &str,
        secret: &str,
        previous: Option<&str>,
        previous_expires_ms: Option<i64>,
    ) -> i64 {
        pmw_testkit::seed::Endpoint {
            previous_secret: previous,
            previous_expires_ms,
            ..pmw_testkit::seed::Endpoint::new(self.account, url, secret)
        }
        .insert(&self.db.connect().await)
        .await
    }

    /// Enqueue one trade delivery per block number for `endpoint`, through [`webhook::enqueue`]
    /// in a transaction. Returns the ids.
    pub async fn enqueue(
        &self,
        epoch: i64,
        endpoint: i64,
        blocks: &[u64],
    ) -> Result<Vec<String>, webhook::WebhookError> {
        let items: Vec<NewDelivery> = blocks
            .iter()
            .map(|b| {
                let cursor = Cursor::new(*b, 3).unwrap();
                NewDelivery {
                    id: webhook::webhook_id(cursor, "0xabcdef0123456789", endpoint, DeliveryKind::Trade),
                    endpoint_id: endpoint,
                    kind: DeliveryKind::Trade,
                    cursor,
                    payload: serde_json::json!({"type": "trade", "cursor": cursor, "block": b, "t_detect_ms": 1_000}).to_string(),
                    t_detect_ms: 1_000,
                }
            })
            .collect();
        let mut c = self.db.connect().await;
        let tx = c.transaction().await.unwrap();
        let n = webhook::enqueue(&tx, epoch, &items).await?;
        tx.commit().await.unwrap();
        assert_eq!(n as usize, items.len(), "fresh ids are all inserted");
        Ok(items.into_iter().map(|i| i.id).collect())
    }

    pub async fn bump_epoch(&self) -> i64 {
        self.db
            .connect()
            .await
            .query_one(
                "UPDATE push_epoch SET epoch = epoch + 1 WHERE slot = 0 RETURNING epoch",
                &[],
            )
            .await
            .unwrap()
            .get(0)
    }

    /// `(enabled, disabled_reason)` of an endpoint.
    pub async fn endpoint_state(&self, endpoint: i64) -> (bool, Option<String>) {
        let r = self
            .db
            .connect()
            .await
            .query_one(
                "SELECT enabled, disabled_reason FROM webhook_endpoints WHERE id = $1",
                &[&endpoint],
            )
            .await
            .unwrap();
        (r.get(0), r.get(1))
    }

    pub async fn delivery(&self, id: &str) -> Delivery {
        let r = self
            .db
            .connect()
            .await
            .query_one(
                "SELECT state, attempts, next_attempt_ms, claimed_epoch, last_status, last_error, done_ms, \
                 payload IS NOT NULL FROM webhook_deliveries WHERE id = $1",
                &[&id],
            )
            .await
            .unwrap();
        Delivery {
            state: r.get(0),
            attempts: r.get(1),
            next_attempt_ms: r.get(2),
            claimed_epoch: r.get(3),
            last_status: r.get(4),
            last_error: r.get(5),
            done_ms: r.get(6),
            body_kept: r.get(7),
        }
    }

    /// `count()` of a ClickHouse query with one bound u64.
    pub async fn ch_count(&self, sql: &str, arg: u64) -> u64 {
        self.db
            .ch
            .query(sql)
            .bind(arg)
            .fetch_one::<u64>()
            .await
            .unwrap()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub state: String,
    pub attempts: i32,
    pub next_attempt_ms: i64,
    pub claimed_epoch: Option<i64>,
    pub last_status: Option<i32>,
    pub last_error: Option<String>,
    pub done_ms: Option<i64>,
    /// Its body is stored (a delivered row keeps none).
    pub body_kept: bool,
}

/// Test settings: private destinations allowed (receivers are on loopback), quick polls.
pub fn config() -> WebhookConfig {
    WebhookConfig {
        timeout: Duration::from_secs(5),
        allow_private_destinations: true,
        max_in_flight_per_endpoint: 2,
        poll_interval: Duration::from_millis(200),
        slot: 0,
        disable_failing_after: Some(Duration::from_secs(5 * 24 * 3600)),
        telegram_api: "http://127.0.0.1:9".into(),
    }
}
