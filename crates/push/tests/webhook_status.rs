//! How responses are classified: 410 disables the endpoint, a redirect is a failure (never
//! followed), `Retry-After` is honoured for throttling.

mod webhook_support;

use std::time::Duration;

use pmw_push::webhook::sign::Secret;
use pmw_push::webhook::{Dispatcher, WebhookConfig};
use tokio_util::sync::CancellationToken;
use webhook_support::{config, eventually, Env, Receiver, Step};

fn one_at_a_time() -> WebhookConfig {
    WebhookConfig {
        max_in_flight_per_endpoint: 1,
        ..config()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_410_disables_endpoint() {
    let env = Env::new().await;
    let rx = Receiver::start(vec![Step::status(410)]).await;
    let ep = env.endpoint(&rx.url(), &Secret::generate().expose()).await;
    let ids = env.enqueue(1, ep, &[300, 301, 302]).await.unwrap();
    let d = Dispatcher::spawn(
        env.db.pg.clone(),
        env.db.ch.clone(),
        1,
        one_at_a_time(),
        CancellationToken::new(),
    );
    d.wake();
    assert!(
        eventually(Duration::from_secs(15), || async {
            env.delivery(&ids[0]).await.state == "failed"
        })
        .await
    );
    let c = env.db.connect().await;
    let r = c
        .query_one(
            "SELECT enabled, disabled_reason FROM webhook_endpoints WHERE id = $1",
            &[&ep],
        )
        .await
        .unwrap();
    assert!(!r.get::<_, bool>(0));
    let reason: String = r.get(1);
    assert!(reason.contains("410"), "{reason}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(rx.count(), 1, "nothing more goes to a disabled endpoint");
    let first = env.delivery(&ids[0]).await;
    assert_eq!(
        (first.attempts, first.last_status),
        (1, Some(410)),
        "{first:?}"
    );
    for id in &ids[1..] {
        let row = env.delivery(id).await;
        assert_eq!(
            (row.state.as_str(), row.attempts),
            ("pending", 0),
            "{row:?}"
        );
    }
    let snap = d.snapshot();
    assert_eq!(
        (snap.endpoints_disabled, snap.failed_final),
        (1, 1),
        "{snap:?}"
    );
    d.stop().await.unwrap();
    let outcome: String = env
        .db
        .ch
        .query("SELECT outcome FROM delivery_log WHERE endpoint_id = ?")
        .bind(ep as u64)
        .fetch_one()
        .await
        .unwrap();
    assert_eq!(outcome, "gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_redirect_is_a_failure_and_not_followed() {
    let env = Env::new().await;
    let target = Receiver::start(vec![Step::status(200)]).await;
    let redirector =
        Receiver::start(vec![Step::status(302).header("location", target.url())]).await;
    let ep = env
        .endpoint(&redirector.url(), &Secret::generate().expose())
        .await;
    let ids = env.enqueue(1, ep, &[400]).await.unwrap();
    let d = Dispatcher::spawn(
        env.db.pg.clone(),
        env.db.ch.clone(),
        1,
        config(),
        CancellationToken::new(),
    );
    d.wake();
    assert!(
        eventually(Duration::from_secs(15), || async {
            env.delivery(&ids[0]).await.attempts == 1
        })
        .await
    );
    let row = env.delivery(&ids[0]).await;
    assert_eq!(
        (row.state.as_str(), row.last_status),
        ("pending", Some(302)),
        "{row:?}"
    );
    assert!(
        row.next_attempt_ms > row.done_ms.unwrap_or(0),
        "scheduled for a retry: {row:?}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(redirector.count(), 1);
    assert_eq!(target.count(), 0, "the redirect target received nothing");
    d.stop().await.unwrap();
    let outcome: (u16, String) = env
        .db
        .ch
        .query("SELECT status_code, outcome FROM delivery_log WHERE endpoint_id = ?")
        .bind(ep as u64)
        .fetch_one()
        .await
        .unwrap();
    assert_eq!(outcome, (302, "redirect".to_string()));
    let delivered = env
        .ch_count(
            "SELECT count() FROM push_latency WHERE target_id = ?",
            ep as u64,
        )
        .await;
    assert_eq!(delivered, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_retry_after_is_honoured_for_429() {
    let env = Env::new().await;
    let rx = Receiver::start(vec![Step::status(429).header("retry-after", "120")]).await;
    let ep = env.endpoint(&rx.url(), &Secret::generate().expose()).await;
    let ids = env.enqueue(1, ep, &[500]).await.unwrap();
    let d = Dispatcher::spawn(
        env.db.pg.clone(),
        env.db.ch.clone(),
        1,
        config(),
        CancellationToken::new(),
    );
    d.wake();
    assert!(
        eventually(Duration::from_secs(15), || async {
            env.delivery(&ids[0]).await.attempts == 1
        })
        .await
    );
    let row = env.delivery(&ids[0]).await;
    let hit = rx.hits()[0].at_ms;
    let delay = row.next_attempt_ms - hit;
    // 120 s asked (not the 5 s of the schedule), measured from the response.
    assert!((118_000..=125_000).contains(&delay), "{delay} ms {row:?}");
    assert_eq!(row.last_status, Some(429));
    d.stop().await.unwrap();
}
