//! Reorgs against the canonical chain itself: after anvil reorganises the tip (depth 1, 2 and 5;
//! the orphaned fills re-mined at other log indexes, dropped, or moved to a later block), what a
//! subscriber holds (trades minus retracts) must equal the fills `eth_getLogs` returns for its
//! wallets — for a session connected throughout, one that resumes across the reorg with its
//! `resume` position, and a webhook endpoint — with nothing duplicated and ledger order kept.
//! Also: a retract never reaches an endpoint before its trade.

use std::collections::{BTreeSet, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pmw_sim::{demo_wallets, ReorgPlan, ReplayOrder};
use pmw_testkit::eventually;
use serde_json::Value;

use crate::harness::{canonical, connect_url, first_of, Client, Fill, Harness};

const WITHIN: Duration = Duration::from_secs(60);

/// What a subscriber holds after a stream of `trade`/`retract` messages, and what went wrong.
#[derive(Debug, Default)]
struct View {
    held: Vec<Fill>,
    duplicated: usize,
    retract_without_trade: usize,
}

impl View {
    fn of<'a>(messages: impl IntoIterator<Item = &'a Value>) -> View {
        let mut v = View::default();
        for m in messages {
            let t = &m["trade"];
            let Some(block) = t["block_number"].as_u64() else {
                continue;
            };
            let fill = (
                block,
                t["log_index"].as_u64().unwrap(),
                t["block_hash"].as_str().unwrap().to_lowercase(),
            );
            match m["type"].as_str() {
                Some("trade") if v.held.contains(&fill) => v.duplicated += 1,
                Some("trade") => v.held.push(fill),
                Some("retract") => match v.held.iter().position(|f| *f == fill) {
                    Some(i) => {
                        v.held.remove(i);
                    }
                    None => v.retract_without_trade += 1,
                },
                _ => {}
            }
        }
        v
    }

    /// Whether what it holds is exactly the canonical set (nothing lost, no phantom).
    fn holds(&self, owed: &BTreeSet<Fill>) -> bool {
        self.held.iter().cloned().collect::<BTreeSet<Fill>>() == *owed
    }

    /// Counts against the canonical set: (lost, phantom, duplicated, out of order).
    fn check(&self, who: &str, owed: &BTreeSet<Fill>) -> (usize, usize, usize, usize) {
        let held: BTreeSet<Fill> = self.held.iter().cloned().collect();
        let lost = owed.difference(&held).count();
        let phantom = held.difference(owed).count();
        let out_of_order = self
            .held
            .windows(2)
            .filter(|w| (w[0].0, w[0].1) >= (w[1].0, w[1].1))
            .count();
        println!(
            "{who}: owed {} held {} lost {lost} phantom {phantom} duplicated {} out of order {out_of_order} retract without trade {}",
            owed.len(),
            held.len(),
            self.duplicated,
            self.retract_without_trade
        );
        (lost, phantom, self.duplicated, out_of_order)
    }
}

/// A webhook receiver that answers 500 to `trade` bodies while `fail_trades` is set (200 to
/// everything else) and records what it answered 2xx, in arrival order, once per `webhook-id`.
#[derive(Clone, Default)]
struct Hooks {
    fail_trades: Arc<AtomicBool>,
    delivered: Arc<Mutex<Vec<(String, Value)>>>,
}

impl Hooks {
    async fn start(&self) -> String {
        let me = self.clone();
        let app = axum::Router::new().fallback(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let me = me.clone();
                async move {
                    let v: Value = serde_json::from_slice(&body).unwrap_or_default();
                    if v["type"] == "trade" && me.fail_trades.load(Ordering::SeqCst) {
                        return axum::http::StatusCode::INTERNAL_SERVER_ERROR;
                    }
                    let id = headers["webhook-id"].to_str().unwrap().to_string();
                    let mut d = me.delivered.lock().unwrap();
                    if !d.iter().any(|(i, _)| *i == id) {
                        d.push((id, v));
                    }
                    axum::http::StatusCode::OK
                }
            },
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}/hook")
    }

    fn messages(&self) -> Vec<Value> {
        self.delivered
            .lock()
            .unwrap()
            .iter()
            .map(|(_, v)| v.clone())
            .collect()
    }
}

/// Wait until `count_sql` (a `SELECT count(*)`) is 0.
async fn until_none(h: &Harness, count_sql: &str) {
    let c = h.db.connect().await;
    let left = || async { c.query_one(count_sql, &[]).await.unwrap().get::<_, i64>(0) };
    if !eventually(WITHIN, || async { left().await == 0 }).await {
        panic!("{} left: {count_sql}", left().await);
    }
}

/// Wait until no webhook delivery is pending.
async fn deliveries_settle(h: &Harness) {
    until_none(
        h,
        "SELECT count(*) FROM webhook_deliveries WHERE state = 'pending'",
    )
    .await;
}

/// Frames until (and with) the first of `kind`, appended to `into`.
async fn until(c: &mut Client, kind: &str, into: &mut Vec<Value>) {
    loop {
        let v = tokio::time::timeout(WITHIN, c.events.recv())
            .await
            .unwrap_or_else(|_| panic!("no {kind} frame"))
            .expect("client ended");
        let done = v["type"] == kind;
        into.push(v);
        if done {
            return;
        }
    }
}

/// Frames received so far (without waiting).
fn drain(c: &mut Client, into: &mut Vec<Value>) {
    while let Ok(v) = c.events.try_recv() {
        into.push(v);
    }
}

/// The position to resume with: the `resume` of the last hello, trade or heartbeat.
fn resume_of(frames: &[Value]) -> String {
    frames
        .iter()
        .rev()
        .find(|f| ["hello", "trade", "heartbeat"].contains(&f["type"].as_str().unwrap_or("")))
        .and_then(|f| f["resume"].as_str())
        .expect("a frame with resume")
        .to_string()
}

/// One case of the matrix. An account follows one wallet that trades in the blocks the reorg
/// replaces, with a session connected across the reorg and one that leaves before it and resumes
/// after with its last `resume`; another account follows every wallet with a webhook endpoint.
async fn reorg_case(depth: u64, replay: Option<ReplayOrder>) {
    let h = Harness::new().await;
    let (push, addr) = h.leader("push-a").await;
    let wallets = demo_wallets(6);
    let (all_account, _) = h.account(&wallets).await;
    let hooks = Hooks::default();
    h.endpoint(all_account, &hooks.start().await).await;
    let start = h.sim.rpc().latest_block().await.unwrap().number.0;

    h.sim.run_matches(3 * depth + 3).await.unwrap();
    h.wait_pushed(WITHIN).await;
    // The followed wallet: a maker in the newest block with fills, which the reorg replaces.
    let fills = h.sim.canonical();
    let newest = fills.iter().map(|e| e.block_number).max().expect("fills");
    assert!(newest + depth > h.sim.rpc().latest_block().await.unwrap().number.0);
    let followed = fills
        .iter()
        .find(|e| e.block_number == newest)
        .expect("fills in the newest block")
        .maker;
    let one = vec![followed.to_lower_hex()];
    let (_, key) = h.account(&[followed]).await;
    // Both sessions start at the run's first block: a replay, then live.
    let from = format!("{start:012}-999999");
    let url = format!("ws://{addr}/v1/ws?since={from}");
    let mut stays = connect_url(&url, Some(&key)).await;
    first_of(&mut stays, "heartbeat").await;
    let mut leaves = connect_url(&url, Some(&key)).await;
    let mut before = Vec::new();
    until(&mut leaves, "heartbeat", &mut before).await;
    drain(&mut leaves, &mut before);
    leaves.done.abort();
    let since = resume_of(&before);

    let plan = ReorgPlan {
        depth,
        new_matches_per_block: 1,
        replay_orphaned: replay.is_some(),
        replay_order: replay.unwrap_or_default(),
    };
    let outcome = h.sim.reorg_with(plan).await.unwrap();
    assert!(outcome.orphaned.iter().any(|e| e.maker == followed));
    h.sim.run_matches(2).await.unwrap();
    h.wait_pushed(WITHIN).await;
    let mut back = connect_url(&format!("ws://{addr}/v1/ws?since={since}"), Some(&key)).await;
    h.sim.run_matches(1).await.unwrap();
    h.wait_pushed(WITHIN).await;
    first_of(&mut back, "heartbeat").await;
    deliveries_settle(&h).await;
    let rpc = h.anvil.http_url();
    let owed = canonical(&rpc, start, &one).await;
    let all: Vec<String> = wallets.iter().map(|w| w.to_lower_hex()).collect();
    let owed_all = canonical(&rpc, start, &all).await;
    // Both sessions converge on the canonical chain (every owed trade held, every orphan
    // retracted) before push stops.
    stays
        .wait_seen(WITHIN, "the canonical view", |s| {
            View::of(&s.frames).holds(&owed)
        })
        .await;
    back.wait_seen(WITHIN, "the canonical view after the resume", |s| {
        View::of(before.iter().chain(&s.frames)).holds(&owed)
    })
    .await;
    push.stop().await.unwrap();
    let stays = stays.done.await.unwrap();
    let back = back.done.await.unwrap();
    assert!(
        back.close_code.is_none_or(|c| c == 1012),
        "the resumed session closed with {:?}",
        back.close_code
    );
    let resumed: Vec<&Value> = before.iter().chain(&back.frames).collect();

    let case = format!("depth {depth} {replay:?}");
    for (who, view, owed) in [
        ("connected", View::of(&stays.frames), &owed),
        ("resumed", View::of(resumed.iter().copied()), &owed),
        ("webhook", View::of(&hooks.messages()), &owed_all),
    ] {
        let mut counts = view.check(&format!("{case} {who}"), owed);
        if who == "webhook" {
            // Up to PMW_PUSH_WEBHOOK_MAX_IN_FLIGHT attempts per endpoint run at once: arrival
            // order is not ledger order (receivers order by `cursor`, README).
            counts.3 = 0;
        }
        assert_eq!(
            counts,
            (0, 0, 0, 0),
            "{case} {who}: lost, phantom, duplicated, out of order"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reorg_depth_1_fills_re_mined_at_other_positions() {
    reorg_case(1, Some(ReplayOrder::Reversed)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reorg_depth_2_fills_dropped() {
    reorg_case(2, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reorg_depth_5_fills_moved_to_a_later_block() {
    reorg_case(5, Some(ReplayOrder::LastBlock)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reorg_depth_2_fills_re_mined_in_reverse() {
    reorg_case(2, Some(ReplayOrder::Reversed)).await;
}

/// A trade whose first attempt failed is waiting for its retry when a reorg orphans it: the
/// endpoint gets neither (the delivery is cancelled and logged so), never the retract first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reorg_retract_never_overtakes_its_trade_on_a_webhook() {
    let h = Harness::new().await;
    let (push, _addr) = h.leader("push-a").await;
    let wallets = demo_wallets(6);
    let all: Vec<String> = wallets.iter().map(|w| w.to_lower_hex()).collect();
    let (account, _key) = h.account(&wallets).await;
    let hooks = Hooks::default();
    hooks.fail_trades.store(true, Ordering::SeqCst);
    h.endpoint(account, &hooks.start().await).await;
    let start = h.sim.rpc().latest_block().await.unwrap().number.0;
    h.sim.run_matches(4).await.unwrap();
    h.wait_pushed(WITHIN).await;
    // Every trade delivery has had its first (failed) attempt and waits for the retry.
    until_none(
        &h,
        "SELECT count(*) FROM webhook_deliveries WHERE attempts = 0 AND state = 'pending'",
    )
    .await;
    let c = h.db.connect().await;
    let outcome = h.sim.reorg(2).await.unwrap();
    h.sim.run_matches(1).await.unwrap();
    h.wait_pushed(WITHIN).await;
    hooks.fail_trades.store(false, Ordering::SeqCst);
    deliveries_settle(&h).await;
    // The cancellations reach delivery_log (written in batches) before push stops.
    let logged_cancelled = || async {
        let cancelled: i64 = c
            .query_one(
                "SELECT count(*) FROM webhook_deliveries WHERE last_error LIKE 'cancelled:%'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        let logged: u64 =
            h.db.ch
                .query("SELECT count() FROM delivery_log WHERE outcome = 'cancelled'")
                .fetch_one()
                .await
                .unwrap();
        (cancelled, logged)
    };
    eventually(WITHIN, || async {
        let (cancelled, logged) = logged_cancelled().await;
        cancelled > 0 && logged >= cancelled as u64
    })
    .await;
    push.stop().await.unwrap();

    let messages = hooks.messages();
    let orphaned: HashSet<Fill> = outcome
        .orphaned
        .iter()
        .map(|e| {
            (
                e.block_number,
                e.log_index,
                e.block_hash.to_string().to_lowercase(),
            )
        })
        .collect();
    let mut overtaken = 0;
    for f in &orphaned {
        let at = |kind: &str| {
            messages.iter().position(|m| {
                m["type"] == kind
                    && (
                        m["trade"]["block_number"].as_u64(),
                        m["trade"]["log_index"].as_u64(),
                    ) == (Some(f.0), Some(f.1))
                    && m["trade"]["block_hash"]
                        .as_str()
                        .map(str::to_lowercase)
                        .as_deref()
                        == Some(f.2.as_str())
            })
        };
        match (at("trade"), at("retract")) {
            (None, None) => {}
            (Some(t), Some(r)) if t < r => {}
            _ => overtaken += 1,
        }
    }
    let (cancelled, logged) = logged_cancelled().await;
    let owed = canonical(&h.anvil.http_url(), start, &all).await;
    let counts = View::of(&messages).check("webhook with failing trades", &owed);
    println!(
        "orphaned {} retract before its trade {overtaken} cancelled {cancelled} logged cancelled {logged}",
        orphaned.len()
    );
    assert_eq!(
        overtaken, 0,
        "a retract reached the endpoint before its trade"
    );
    assert!(cancelled > 0, "the waiting orphaned trades were cancelled");
    assert_eq!(
        logged, cancelled as u64,
        "each cancellation is in delivery_log"
    );
    // Lost, phantom, duplicated: none. (Order is per attempt: a delivery waiting for its retry
    // does not hold back the endpoint's later ones, so retried trades arrive late by design.)
    assert_eq!((counts.0, counts.1, counts.2), (0, 0, 0));
}

/// Market subscriptions across a reorg (issue 45): an account follows a market with a fill the
/// reorg orphans, and a wallet too (a fill of both reaches it once); what its
/// connected session and its webhook endpoint hold converges on the canonical chain's fills of
/// the wallet or in the market (every orphan retracted, nothing duplicated).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reorg_retracts_reach_market_followers_once() {
    let depth = 2;
    let h = Harness::new().await;
    let (push, addr) = h.leader("push-a").await;
    let start = h.sim.rpc().latest_block().await.unwrap().number.0;
    // The account follows the sim's first market and its first wallet, with an endpoint, before
    // any trade.
    let market = h.sim.config().markets[0].clone();
    let wallet = h.sim.config().wallets[0];
    let tokens: Vec<String> = market.token_ids.iter().map(|t| t.to_string()).collect();
    let (account, key) = h.account_unnotified(&[wallet]).await;
    let c = h.db.connect().await;
    c.execute(
        "INSERT INTO market_subscriptions (account_id, kind, market, conditions, tokens, created_ms, updated_ms) \
         VALUES ($1, 'condition', $2, ARRAY[$2], $3, 0, 0)",
        &[&account, &market.condition_id.to_string(), &tokens],
    )
    .await
    .unwrap();
    let hooks = Hooks::default();
    h.endpoint(account, &hooks.start().await).await;
    let url = format!("ws://{addr}/v1/ws?since={start:012}-999999");
    let mut stays = connect_url(&url, Some(&key)).await;
    first_of(&mut stays, "heartbeat").await;
    // Trade until one of the `depth` newest blocks (those the reorg replaces) holds a fill in
    // the market.
    let in_market = |e: &pmw_sim::Emitted| tokens.contains(&e.token_id.to_string());
    let mut tail_has_market = false;
    for _ in 0..10 {
        h.sim.run_matches(depth + 1).await.unwrap();
        let fills = h.sim.canonical();
        let newest = fills.iter().map(|e| e.block_number).max().expect("fills");
        tail_has_market = fills
            .iter()
            .any(|e| e.block_number + depth > newest && in_market(e));
        if tail_has_market {
            break;
        }
    }
    assert!(
        tail_has_market,
        "a fill in the market among the newest blocks"
    );
    h.wait_pushed(WITHIN).await;

    let plan = ReorgPlan {
        depth,
        new_matches_per_block: 1,
        replay_orphaned: true,
        replay_order: ReplayOrder::default(),
    };
    let outcome = h.sim.reorg_with(plan).await.unwrap();
    assert!(outcome.orphaned.iter().any(in_market));
    h.sim.run_matches(2).await.unwrap();
    h.wait_pushed(WITHIN).await;
    deliveries_settle(&h).await;
    let owed: BTreeSet<Fill> = h
        .sim
        .canonical()
        .iter()
        .filter(|e| e.block_number > start)
        .filter(|e| e.maker == wallet || in_market(e))
        .map(|e| {
            (
                e.block_number,
                e.log_index,
                e.block_hash.to_string().to_lowercase(),
            )
        })
        .collect();
    assert!(
        owed.len()
            > canonical(&h.anvil.http_url(), start, &[wallet.to_lower_hex()])
                .await
                .len(),
        "the market adds fills of other wallets"
    );
    stays
        .wait_seen(WITHIN, "the canonical view", |s| {
            View::of(&s.frames).holds(&owed)
        })
        .await;
    push.stop().await.unwrap();
    let stays = stays.done.await.unwrap();
    for (who, view) in [
        ("connected", View::of(&stays.frames)),
        ("webhook", View::of(&hooks.messages())),
    ] {
        let mut counts = view.check(&format!("market {who}"), &owed);
        if who == "webhook" {
            counts.3 = 0; // arrival order is not ledger order (see reorg_case)
        }
        assert_eq!(
            counts,
            (0, 0, 0, 0),
            "market {who}: lost, phantom, duplicated, out of order"
        );
    }
}
