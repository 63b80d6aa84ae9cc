//! Issue 30, item 6: a flood of real subscription changes cannot starve push's rounds. The same
//! trading (pmw-sim through pmw-live) is pushed to a WebSocket client twice: once quietly, once
//! while another account changes its subscriptions 20 times a second (each a real change that
//! moves `subs_version`, so push reloads its index). The detect → push latency of the trades
//! (`t_push_ms - t_detect_ms`, one round's work) is printed for both runs and must stay within
//! 2× of the quiet run (with a 50 ms floor: on loopback both are a few ms, where 2× is noise).

use std::time::Duration;

use pmw_sim::demo_wallets;
use tokio_util::sync::CancellationToken;

use super::WITHIN;
use crate::harness::{change_as_api, connect, hello_cursor, Client, Harness};

/// Trades for about 15 s; the latencies (ms) of the trade frames `c` received meanwhile.
async fn run(h: &Harness, c: &mut Client) -> Vec<i64> {
    h.trade(1, Duration::from_millis(500), 30).await;
    h.wait_pushed(WITHIN).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut out = Vec::new();
    while let Ok(v) = c.events.try_recv() {
        if v["type"] == "trade" {
            out.push(v["t_push_ms"].as_i64().unwrap() - v["t_detect_ms"].as_i64().unwrap());
        }
    }
    out
}

fn quantile(v: &mut [i64], q: f64) -> i64 {
    v.sort_unstable();
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// 20 real changes a second until `stop`: follow, then unfollow, a wallet nobody trades.
async fn flood(h: &Harness, account: i64, stop: CancellationToken) -> u64 {
    let pg = h.db.connect().await;
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let mut n = 0u64;
    while !stop.is_cancelled() {
        tick.tick().await;
        let sql = if n.is_multiple_of(2) {
            format!(
                "INSERT INTO subscriptions (account_id, wallet, created_ms) \
                 VALUES ({account}, '\\x{}'::bytea, 0)",
                "ee".repeat(20)
            )
        } else {
            format!("DELETE FROM subscriptions WHERE account_id = {account}")
        };
        change_as_api(&pg, &sql).await;
        n += 1;
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_a_flood_of_subscription_changes_does_not_starve_rounds() {
    let h = Harness::new().await;
    let wallets = demo_wallets(6);
    let (_, key) = h.account(&wallets).await;
    let (churner, _) = h.account(&[]).await;
    let (push, addr) = h.leader("push-a").await;
    let mut c = connect(addr, &key, None).await;
    hello_cursor(&mut c).await;

    let mut quiet = run(&h, &mut c).await;
    let version = |pg: tokio_postgres::Client| async move {
        let v: i64 = pg
            .query_one("SELECT seq FROM subs_version WHERE id = 1", &[])
            .await
            .unwrap()
            .get(0);
        v
    };
    let v0 = version(h.db.connect().await).await;
    let stop = CancellationToken::new();
    let flooding = flood(&h, churner, stop.clone());
    let (mut flooded, changes) = tokio::join!(
        async {
            let out = run(&h, &mut c).await;
            stop.cancel();
            out
        },
        flooding
    );
    let moved = version(h.db.connect().await).await - v0;
    push.stop().await.unwrap();
    assert!(
        quiet.len() >= 20 && flooded.len() >= 20,
        "{quiet:?} {flooded:?}"
    );
    let (q50, q99) = (quantile(&mut quiet, 0.5), quantile(&mut quiet, 0.99));
    let (f50, f99) = (quantile(&mut flooded, 0.5), quantile(&mut flooded, 0.99));
    println!(
        "detect->push (ms): quiet p50 {q50} p99 {q99} ({} trades); \
         flood of {changes} changes (subs_version +{moved}): p50 {f50} p99 {f99} ({} trades)",
        quiet.len(),
        flooded.len()
    );
    assert!(
        moved >= changes as i64 / 2,
        "the changes were real: {moved} of {changes}"
    );
    // Within 2x, with a floor for this shared 2-core debug build's scheduling noise on
    // figures of tens of ms (it runs alone, in the exclusive pass); the figures are printed.
    assert!(
        f99 <= 2 * q99 + 50,
        "rounds starved by the change flood: p99 {f99} ms against {q99} ms"
    );
}
