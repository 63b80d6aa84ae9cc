//! Endpoints are independent: one that hangs past the timeout does not delay another.

use std::time::Duration;

use crate::webhook_support::{config, eventually, Env, Receiver, Step};
use pmw_push::webhook::sign::Secret;
use pmw_push::webhook::WebhookConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_slow_endpoint_does_not_delay_fast_one() {
    let env = Env::new().await;
    let slow = Receiver::start(vec![Step::status(200).delay(Duration::from_secs(60))]).await;
    let fast = Receiver::start(vec![Step::status(204)]).await;
    let ep_slow = env
        .endpoint(&slow.url(), &Secret::generate().expose())
        .await;
    let ep_fast = env
        .endpoint(&fast.url(), &Secret::generate().expose())
        .await;
    // The slow endpoint's deliveries come first in cursor order.
    let slow_ids = env.enqueue(1, ep_slow, &[1, 2, 3]).await.unwrap();
    let fast_ids = env.enqueue(1, ep_fast, &[4, 5, 6, 7, 8]).await.unwrap();
    let cfg = WebhookConfig {
        timeout: Duration::from_secs(6),
        max_in_flight_per_endpoint: 1,
        ..config()
    };
    let d = env.dispatcher(1, cfg);
    d.wake();
    let all_fast = || async {
        for id in &fast_ids {
            if env.delivery(id).await.state != "delivered" {
                return false;
            }
        }
        true
    };
    assert!(
        eventually(Duration::from_secs(5), all_fast).await,
        "fast endpoint delivered while the slow one hangs"
    );
    // At that moment the slow endpoint's first attempt is still hanging (timeout 6 s).
    assert_eq!(slow.count(), 1, "one slow attempt at a time");
    assert_eq!(
        env.delivery(&slow_ids[0]).await.attempts,
        0,
        "slow attempt not finished yet"
    );
    // Fast deliveries went out in cursor order.
    let order: Vec<String> = fast.hits().into_iter().map(|h| h.id).collect();
    assert_eq!(order, fast_ids);
    // The hanging attempt ends as a timeout and is scheduled for a retry.
    env.wait_attempts(&slow_ids[0], 1, Duration::from_secs(15))
        .await;
    let row = env.delivery(&slow_ids[0]).await;
    assert_eq!(row.state, "pending");
    assert!(
        row.last_error
            .as_deref()
            .unwrap_or("")
            .contains("timed out"),
        "{row:?}"
    );
    d.stop().await.unwrap();
    let timeouts: Vec<(String, i64)> = env
        .db
        .ch
        .query("SELECT outcome, duration_ms FROM delivery_log WHERE endpoint_id = ? ORDER BY t_attempt_ms LIMIT 1")
        .bind(ep_slow as u64)
        .fetch_all()
        .await
        .unwrap();
    assert_eq!(timeouts[0].0, "timeout");
    assert!(timeouts[0].1 >= 5_000, "{timeouts:?}");
}
