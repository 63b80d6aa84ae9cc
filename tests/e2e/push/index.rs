//! The subscription index stays fresh (issue 11): a change whose NOTIFY was lost is still
//! matched by the next round, for WebSocket sessions and webhook endpoints alike.

use pmw_core::Cursor;
use pmw_push::PushConfig;
use pmw_sim::demo_wallets;
use pmw_testkit::eventually;
use pmw_testkit::seed::Endpoint;

use super::WITHIN;
use crate::harness::{connect, hello_cursor, Harness};

/// The ClickHouse-outage drill's loss (issue 11): subscriptions committed while push was between
/// loading its index and its LISTEN; their NOTIFY was lost, and as long as blocks kept waking
/// rounds (the 3 s fallback never fired) every round matched with the stale index and moved the
/// cursor past the new subscribers' trades. Here the notification is lost on purpose (none is
/// sent) and the fallback is an hour: the next round must still match the new account, for its
/// WebSocket session and its webhook endpoint alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_whose_notification_was_lost_is_matched_by_the_next_round() {
    let h = Harness::new().await;
    let cfg = PushConfig {
        push_fallback_ms: 3_600_000,
        ..h.push_config()
    };
    let (push, bound) = h.start_push("push-a", cfg);
    let addr = tokio::time::timeout(WITHIN, bound).await.unwrap().unwrap();
    // Rounds run with the index as it was before the account existed.
    h.sim.run_matches(2).await.unwrap();
    h.wait_pushed(WITHIN).await;
    let wallets = demo_wallets(6);
    let mine = vec![wallets[0], wallets[3]];
    let (account, key) = h.account_unnotified(&mine).await;
    let pg = h.db.connect().await;
    let now = pmw_core::UnixMs::now().0;
    let endpoint = Endpoint::new(
        account,
        "http://127.0.0.1:9/hook",
        "whsec_dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0",
    )
    .created(now)
    .insert(&pg)
    .await;
    let mut c = connect(addr, &key, None).await;
    let start: Cursor = hello_cursor(&mut c).await;
    h.sim.run_matches(8).await.unwrap();
    h.wait_pushed(WITHIN).await;
    let owed = h.expected(&mine, start);
    assert!(!owed.is_empty(), "the sim traded the account's wallets");
    // Both lanes done: every trade at the client, a delivery enqueued for each (the webhook
    // lane runs behind the WebSocket one).
    c.wait_trades(&owed, WITHIN).await;
    let enqueued_rows = || async {
        pg.query(
            "SELECT block_number, log_index FROM webhook_deliveries WHERE endpoint_id = $1 AND kind = 'trade' ORDER BY 1, 2",
            &[&endpoint],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect::<Vec<(i64, i32)>>()
    };
    let enqueued = eventually(WITHIN, || async {
        Some(enqueued_rows().await).filter(|e| e.len() >= owed.len())
    })
    .await
    .unwrap_or_default();
    push.stop().await.unwrap();
    let seen = c.done.await.unwrap();
    assert_eq!(seen.trades, owed, "every trade after the hello cursor");
    let after_endpoint: Vec<(i64, i32)> = owed
        .iter()
        .map(|c| (c.block as i64, c.log_index as i32))
        .collect();
    assert_eq!(
        enqueued, after_endpoint,
        "a webhook delivery for every trade after the endpoint was created"
    );
}
