//! How responses are classified: 410 disables the endpoint, a redirect is a failure (never
//! followed), `Retry-After` is honoured for throttling; an endpoint failing every attempt for the
//! configured period is disabled, one that sometimes succeeds never is; disabling expires the
//! endpoint's pending deliveries.

use std::time::Duration;

use crate::webhook_support::{config, eventually, Env, Receiver, Step};
use pmw_push::webhook::sign::Secret;
use pmw_push::webhook::WebhookConfig;
use pmw_testkit::eventually_every;

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
    let d = env.dispatcher(1, one_at_a_time());
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
    // Negative check: nothing more arrives within the window.
    pmw_testkit::observe_for(Duration::from_secs(1)).await;
    assert_eq!(rx.count(), 1, "nothing more goes to a disabled endpoint");
    let first = env.delivery(&ids[0]).await;
    assert_eq!(
        (first.attempts, first.last_status),
        (1, Some(410)),
        "{first:?}"
    );
    // The rest expired with the endpoint, unsent: a re-enable does not fire them.
    for id in &ids[1..] {
        let row = env.delivery(id).await;
        assert_eq!((row.state.as_str(), row.attempts), ("failed", 0), "{row:?}");
        let error = row.last_error.unwrap_or_default();
        assert!(error.starts_with("endpoint disabled: 410 Gone"), "{error}");
    }
    let snap = d.snapshot();
    assert_eq!(
        (
            snap.endpoints_disabled,
            snap.failed_final,
            snap.deliveries_expired
        ),
        (1, 1, 2),
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
    let d = env.dispatcher(1, config());
    d.wake();
    env.wait_attempts(&ids[0], 1, Duration::from_secs(15)).await;
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
    // Negative check: the redirect is not followed within the window.
    pmw_testkit::observe_for(Duration::from_secs(1)).await;
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
    let d = env.dispatcher(1, config());
    d.wake();
    env.wait_attempts(&ids[0], 1, Duration::from_secs(15)).await;
    let row = env.delivery(&ids[0]).await;
    let hit = rx.hits()[0].at_ms;
    let delay = row.next_attempt_ms - hit;
    // 120 s asked (not the 5 s of the schedule), measured from the response.
    assert!((118_000..=125_000).contains(&delay), "{delay} ms {row:?}");
    assert_eq!(row.last_status, Some(429));
    d.stop().await.unwrap();
}

/// With a 2 s period: an endpoint that answers 500 to everything is disabled (its first failure
/// and its retry 5 s later are more than the period apart), with a reason the delivery log shows
/// too, and its pending deliveries expire; an endpoint that succeeds every other attempt is
/// never disabled, however long it runs (each failure follows a success, so no failing run ever
/// reaches the period).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_endpoint_failing_for_the_period_is_disabled_and_a_flaky_one_is_not() {
    let env = Env::new().await;
    let period = Duration::from_secs(2);
    let broken = Receiver::start(vec![Step::status(500)]).await;
    let flaky = Receiver::cycling(vec![Step::status(500), Step::status(200)]).await;
    let ep_broken = env
        .endpoint(&broken.url(), &Secret::generate().expose())
        .await;
    let ep_flaky = env
        .endpoint(&flaky.url(), &Secret::generate().expose())
        .await;
    let broken_ids = env.enqueue(1, ep_broken, &[10, 11, 12]).await.unwrap();
    let cfg = WebhookConfig {
        disable_failing_after: Some(period),
        ..one_at_a_time()
    };
    let d = env.dispatcher(1, cfg);
    // The flaky endpoint gets a new delivery every 300 ms below, for as long as the test runs.
    let block = std::cell::Cell::new(1_000u64);
    env.enqueue(1, ep_flaky, &[block.get()]).await.unwrap();
    d.wake();

    let disabled = eventually(Duration::from_secs(60), || async {
        !env.endpoint_state(ep_broken).await.0
    })
    .await;
    assert!(disabled, "the always-failing endpoint was never disabled");
    let (_, reason) = env.endpoint_state(ep_broken).await;
    let reason = reason.unwrap_or_default();
    assert!(
        reason.starts_with("every delivery attempt failed since ")
            && reason.contains("(limit 2 s)"),
        "{reason}"
    );
    assert!(reason.contains("http 500"), "{reason}");
    // Its first failure and the attempt that disabled it are at least the period apart.
    let hits = broken.hits();
    assert!(
        hits.len() >= 4,
        "3 first attempts and a retry: {}",
        hits.len()
    );
    let first = hits[0].at_ms;
    let last = hits.last().unwrap().at_ms;
    assert!(last - first >= period.as_millis() as i64, "{first} {last}");
    // Every delivery of it expired with it (the one whose retry disabled it was pending again).
    for id in &broken_ids {
        let row = env.delivery(id).await;
        assert_eq!(row.state, "failed", "{row:?}");
        let error = row.last_error.unwrap_or_default();
        assert!(
            error.starts_with("endpoint disabled: every delivery attempt failed since "),
            "{error}"
        );
    }
    // Nothing more is sent to it.
    let sent = broken.count();

    // The flaky endpoint keeps going for at least four periods of alternating results.
    let every = Duration::from_millis(300);
    let four_periods = eventually_every(Duration::from_secs(120), every, || async {
        let (enabled, reason) = env.endpoint_state(ep_flaky).await;
        assert!(
            enabled,
            "a sometimes-succeeding endpoint must stay enabled: {reason:?}"
        );
        let hits = flaky.hits();
        if hits.len() >= 10
            && hits.last().unwrap().at_ms - hits[0].at_ms >= 4 * period.as_millis() as i64
        {
            return Ok(());
        }
        block.set(block.get() + 1);
        env.enqueue(1, ep_flaky, &[block.get()]).await.unwrap();
        d.wake();
        Err(hits.len())
    })
    .await;
    if let Err(n) = four_periods {
        panic!("flaky endpoint got only {n} attempts");
    }
    let (enabled, reason) = env.endpoint_state(ep_flaky).await;
    assert!(
        enabled,
        "a sometimes-succeeding endpoint must stay enabled: {reason:?}"
    );
    assert_eq!(
        broken.count(),
        sent,
        "nothing more goes to a disabled endpoint"
    );
    let snap = d.snapshot();
    assert_eq!(snap.endpoints_disabled, 1, "{snap:?}");
    d.stop().await.unwrap();

    // The delivery log shows the attempt that disabled it.
    let logged = eventually(Duration::from_secs(30), || async {
        env.ch_count(
            "SELECT count() FROM delivery_log WHERE endpoint_id = ? \
             AND position(error, 'endpoint disabled: every delivery attempt failed since') > 0",
            ep_broken as u64,
        )
        .await
            == 1
    })
    .await;
    assert!(logged, "delivery_log row of the disabling attempt");
}
