//! Retries: the same `webhook-id` on every attempt, the schedule's 5 s step, retry state in
//! Postgres surviving a dispatcher restart and a leader change.

use std::time::Duration;

use crate::webhook_support::{config, eventually, Env, Receiver, Step};
use pmw_push::webhook::sign::Secret;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_500_then_200_same_id_twice_then_no_more() {
    let env = Env::new().await;
    let rx = Receiver::start(vec![Step::status(500), Step::status(200)]).await;
    let secret = Secret::generate();
    let ep = env.endpoint(&rx.url(), &secret.expose()).await;
    let ids = env.enqueue(1, ep, &[100]).await.unwrap();
    let d = env.dispatcher(1, config());
    d.wake();
    assert!(
        eventually(Duration::from_secs(20), || async { rx.count() >= 1 }).await,
        "first attempt"
    );
    assert!(
        eventually(Duration::from_secs(10), || async {
            env.delivery(&ids[0]).await.attempts == 1
        })
        .await
    );
    let retrying = env.delivery(&ids[0]).await;
    assert_eq!(
        (retrying.state.as_str(), retrying.body_kept),
        ("pending", true),
        "a delivery to retry keeps its body"
    );
    assert!(
        eventually(Duration::from_secs(20), || async { rx.count() >= 2 }).await,
        "second attempt"
    );
    assert!(
        eventually(Duration::from_secs(10), || async {
            env.delivery(&ids[0]).await.state == "delivered"
        })
        .await
    );
    // Negative check: a quiet window of several poll rounds, no third request.
    pmw_testkit::observe_for(Duration::from_secs(2)).await;
    let hits = rx.hits();
    assert_eq!(hits.len(), 2, "{hits:?}");
    assert_eq!(hits[0].id, ids[0]);
    assert_eq!(hits[1].id, ids[0], "webhook-id is stable across retries");
    let gap = hits[1].at - hits[0].at;
    assert!(
        gap >= Duration::from_millis(3_900),
        "second attempt follows the 5 s step (±20 %): {gap:?}"
    );
    for h in &hits {
        let sig = secret.sign(&h.id, h.timestamp.parse().unwrap(), &h.body);
        assert_eq!(h.signature, sig);
    }
    let row = env.delivery(&ids[0]).await;
    assert_eq!((row.attempts, row.last_status), (2, Some(200)), "{row:?}");
    assert!(!row.body_kept, "a delivered row keeps no body: {row:?}");
    let snap = d.snapshot();
    assert_eq!((snap.delivered, snap.failed_attempts), (1, 1), "{snap:?}");
    d.stop().await.unwrap();
    // Every attempt in delivery_log; one push_latency row for the delivery.
    let log = env
        .ch_count(
            "SELECT count() FROM delivery_log WHERE endpoint_id = ?",
            ep as u64,
        )
        .await;
    assert_eq!(log, 2);
    let outcomes: Vec<(u32, u16, String)> = env
        .db
        .ch
        .query("SELECT attempt, status_code, outcome FROM delivery_log WHERE endpoint_id = ? ORDER BY attempt")
        .bind(ep as u64)
        .fetch_all()
        .await
        .unwrap();
    assert_eq!(
        outcomes,
        vec![(1, 500, "http_error".into()), (2, 200, "delivered".into())]
    );
    let lat: Vec<(String, u64, i64, i64, u32)> = env
        .db
        .ch
        .query("SELECT channel, target_id, t_detect_ms, t_push_ms, attempt FROM push_latency WHERE target_id = ?")
        .bind(ep as u64)
        .fetch_all()
        .await
        .unwrap();
    assert_eq!(lat.len(), 1, "{lat:?}");
    assert_eq!(
        (lat[0].0.as_str(), lat[0].1, lat[0].2),
        ("webhook", ep as u64, 1_000)
    );
    // Delivered by the second attempt: the dashboard counts it as eventually delivered only.
    assert_eq!(lat[0].4, 2, "{lat:?}");
    assert!(
        lat[0].3 >= row.done_ms.unwrap() - 10_000 && lat[0].3 <= row.done_ms.unwrap(),
        "{lat:?} {row:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_retry_state_survives_dispatcher_restart() {
    let env = Env::new().await;
    let rx = Receiver::start(vec![Step::status(503), Step::status(204)]).await;
    let ep = env.endpoint(&rx.url(), &Secret::generate().expose()).await;
    let ids = env.enqueue(1, ep, &[200]).await.unwrap();
    let first = env.dispatcher(1, config());
    first.wake();
    env.wait_attempts(&ids[0], 1, Duration::from_secs(15)).await;
    // Health counters: one pending delivery, in backoff (not due).
    let backlog = || async {
        let s = first.snapshot();
        s.backlog == 1 && s.due == 0 && s.failed_attempts == 1 && s.last_scan_ms > 0
    };
    assert!(
        eventually(Duration::from_secs(5), backlog).await,
        "{:?}",
        first.snapshot()
    );
    // Mid-backoff: stop it. The retry state is in the row, unclaimed.
    first.stop().await.unwrap();
    let row = env.delivery(&ids[0]).await;
    assert_eq!(
        (row.state.as_str(), row.claimed_epoch, row.last_status),
        ("pending", None, Some(503)),
        "{row:?}"
    );
    assert_eq!(rx.count(), 1);
    // A new leader (new epoch) starts a new dispatcher: the retry happens there, once.
    let epoch = env.bump_epoch().await;
    let second = env.dispatcher(epoch, config());
    second.wake();
    assert!(
        eventually(Duration::from_secs(20), || async {
            env.delivery(&ids[0]).await.state == "delivered"
        })
        .await
    );
    // Negative check: no further attempt within the window.
    pmw_testkit::observe_for(Duration::from_secs(2)).await;
    let hits = rx.hits();
    assert_eq!(hits.len(), 2, "{hits:?}");
    assert!(
        hits[1].at_ms >= row.next_attempt_ms,
        "not before its scheduled time: {hits:?} {row:?}"
    );
    assert!(hits.iter().all(|h| h.id == ids[0]));
    let row = env.delivery(&ids[0]).await;
    assert_eq!(
        (row.attempts, row.claimed_epoch),
        (2, Some(epoch)),
        "{row:?}"
    );
    second.stop().await.unwrap();
}
