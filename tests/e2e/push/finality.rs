//! `final` events on real anvil (its `finalized` tag trailing the head by 4 blocks) through
//! pmw-live, pmw-push and the official Standard Webhooks library: a `trade,final` session gets
//! each fill's `trade` and later its small `final`; a `final`-only session and endpoint get only
//! `final`s with the full body; a `trade` session gets no `final`. The oracle is the chain's own
//! `eth_getLogs` and `finalized` block, not pmw's records.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use pmw_core::Cursor;
use pmw_sim::demo_wallets;
use pmw_testkit::hooks::PyReceiver;
use pmw_testkit::seed::Endpoint;
use pmw_testkit::{assert_eventually, eventually, observe_for};
use serde_json::Value;

use super::WITHIN;
use crate::harness::{canonical, connect_url, hello_cursor, rpc_call, Harness};

const FINALITY: &[&str] = &["--slots-in-an-epoch", "2"];

/// The chain's finalized block number, asked directly.
async fn chain_finalized(rpc: &str) -> u64 {
    let req = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "eth_getBlockByNumber",
        "params": ["finalized", false]});
    let v = rpc_call(rpc, &req).await;
    let n = v["result"]["number"]
        .as_str()
        .unwrap()
        .trim_start_matches("0x");
    u64::from_str_radix(n, 16).unwrap()
}

/// The chain's fills of `wallets` after block `from_block` (`eth_getLogs`), as cursors after
/// `after`.
async fn fills_after(
    rpc: &str,
    from_block: u64,
    wallets: &[String],
    after: Cursor,
) -> BTreeSet<Cursor> {
    canonical(rpc, from_block, wallets)
        .await
        .into_iter()
        .map(|(b, l, _)| Cursor {
            block: b,
            log_index: l as u32,
        })
        .filter(|c| *c > after)
        .collect()
}

fn cursor_of(f: &Value) -> Cursor {
    f["cursor"].as_str().unwrap().parse().unwrap()
}

fn of_type<'a>(frames: &'a [Value], kind: &str) -> Vec<&'a Value> {
    frames.iter().filter(|f| f["type"] == kind).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finals_follow_their_trades_and_final_only_subscribers_get_only_finals() {
    let h = Harness::with_anvil(FINALITY).await;
    let (push, addr) = h.leader("push-a").await;
    let mine = vec![demo_wallets(6)[0], demo_wallets(6)[2], demo_wallets(6)[4]];
    let (account, key) = h.account(&mine).await;
    let wallets: Vec<String> = mine.iter().map(|w| w.to_lower_hex()).collect();

    // Two endpoints, verified by the official library: `final` only, and `trade,final`.
    let secret = pmw_push::webhook::sign::Secret::generate();
    let only_final = PyReceiver::start(&secret.expose()).await;
    let both_hook = PyReceiver::start(&secret.expose()).await;
    let c = h.db.connect().await;
    for (r, events) in [
        (&only_final, vec!["final"]),
        (&both_hook, vec!["trade", "final"]),
    ] {
        let (url, secret) = (r.url(), secret.expose());
        Endpoint::new(account, &url, &secret)
            .events(&events)
            .insert(&c)
            .await;
    }
    c.execute("SELECT pg_notify('pmw_subscriptions', '')", &[])
        .await
        .unwrap();
    // No wait for the NOTIFY to be handled: each lane's round reads `subs_version` with its state
    // and reloads a stale index before it matches (push/index.rs proves it with the NOTIFY lost).

    let url = |q: &str| format!("ws://{addr}/v1/ws{q}");
    let mut both = connect_url(&url("?events=trade,final"), Some(&key)).await;
    let mut finals = connect_url(&url("?events=final"), Some(&key)).await;
    let mut trades = connect_url(&url(""), Some(&key)).await;
    let start = hello_cursor(&mut both).await;
    hello_cursor(&mut finals).await;
    hello_cursor(&mut trades).await;
    let from_block = h.sim.rpc().latest_block().await.unwrap().number.0;

    h.trade(2, Duration::from_millis(300), 16).await;
    // Empty blocks until every traded block is finalized on the chain.
    let last = h.sim.rpc().latest_block().await.unwrap().number.0;
    while chain_finalized(&h.anvil.http_url()).await < last {
        h.sim.rpc().mine().await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let expected = fills_after(&h.anvil.http_url(), from_block, &wallets, start).await;
    assert!(
        expected.len() >= 8,
        "premise: enough fills of these wallets ({})",
        expected.len()
    );

    // Wait for every final on every channel (the final-only endpoint gets exactly one per fill).
    let count = |r: &PyReceiver, kind: &str| {
        r.verdicts()
            .iter()
            .filter(|v| v["body"]["type"] == kind)
            .count()
    };
    assert_eventually!(
        WITHIN,
        count(&only_final, "final") >= expected.len()
            && count(&both_hook, "final") >= expected.len(),
        "webhook finals: {} and {} of {}",
        count(&only_final, "final"),
        count(&both_hook, "final"),
        expected.len()
    );
    // And on the WebSocket channels: the frames of the same rounds.
    let has_all = |s: &crate::harness::Seen, kind: &str| {
        let got: BTreeSet<Cursor> = cursors(&s.frames, kind).into_iter().collect();
        got.is_superset(&expected)
    };
    both.wait_seen(WITHIN, "every trade and final", |s| {
        has_all(s, "trade") && has_all(s, "final")
    })
    .await;
    finals
        .wait_seen(WITHIN, "every final", |s| has_all(s, "final"))
        .await;
    trades
        .wait_seen(WITHIN, "every trade", |s| has_all(s, "trade"))
        .await;
    // The finals' latency rows are written in batches: flushed before push stops (asserted
    // below).
    let final_rows = || async {
        h.db.ch
            .query(
                "SELECT count() FROM push_latency WHERE channel IN ('ws_final', 'webhook_final')",
            )
            .fetch_one::<u64>()
            .await
            .unwrap()
    };
    eventually(WITHIN, || async {
        final_rows().await as usize >= 3 * expected.len()
    })
    .await;
    push.stop().await.unwrap();
    let (both, finals, trades) = (
        both.done.await.unwrap(),
        finals.done.await.unwrap(),
        trades.done.await.unwrap(),
    );

    // trade,final: every fill's trade, then its small final, each once.
    let mut trade_at = BTreeMap::new();
    let mut final_at = BTreeMap::new();
    for (i, f) in both.frames.iter().enumerate() {
        match f["type"].as_str().unwrap() {
            "trade" => assert!(
                trade_at.insert(cursor_of(f), i).is_none(),
                "trade twice: {f}"
            ),
            "final" => {
                assert!(f.get("trade").is_none(), "a small final: {f}");
                assert!(
                    final_at.insert(cursor_of(f), (i, f)).is_none(),
                    "final twice: {f}"
                );
            }
            _ => {}
        }
    }
    assert_eq!(trade_at.keys().copied().collect::<BTreeSet<_>>(), expected);
    assert_eq!(final_at.keys().copied().collect::<BTreeSet<_>>(), expected);
    let mut delays = Vec::new();
    for (c, (i, f)) in &final_at {
        let t = trade_at[c];
        assert!(t < *i, "the final of {c} came after its trade");
        delays.push(f["_recv_ms"].as_i64().unwrap() - both.frames[t]["_recv_ms"].as_i64().unwrap());
    }
    delays.sort_unstable();
    println!(
        "trade→final at the client over {} fills: p50 {} ms, max {} ms",
        delays.len(),
        delays[delays.len() / 2],
        delays[delays.len() - 1]
    );

    // final only: only finals, full bodies marked finalized, ledger order, each once.
    assert!(
        of_type(&finals.frames, "trade").is_empty(),
        "no trade frames"
    );
    let got: Vec<Cursor> = of_type(&finals.frames, "final")
        .iter()
        .map(|f| cursor_of(f))
        .collect();
    assert_eq!(got, expected.iter().copied().collect::<Vec<_>>());
    for f in of_type(&finals.frames, "final") {
        assert_eq!(f["finalized"], true, "{f}");
        assert!(f["trade"]["wallet"].is_string(), "full body: {f}");
    }
    // trade only: no finals.
    assert!(of_type(&trades.frames, "final").is_empty());
    assert_eq!(trades.trades, expected.iter().copied().collect::<Vec<_>>());

    // Webhooks: verified; the final-only endpoint got only full finals; the other each trade
    // before its small final.
    let v = only_final.verdicts();
    assert!(v.iter().all(|v| v["ok"] == true));
    let got: BTreeSet<Cursor> = v.iter().map(|v| cursor_of(&v["body"])).collect();
    assert_eq!(got, expected);
    assert!(v
        .iter()
        .all(|v| v["body"]["type"] == "final" && v["body"]["finalized"] == true));
    let v = both_hook.verdicts();
    assert!(v.iter().all(|v| v["ok"] == true));
    let mut seen_trade = BTreeSet::new();
    for v in &v {
        let c = cursor_of(&v["body"]);
        match v["body"]["type"].as_str().unwrap() {
            "trade" => assert!(seen_trade.insert(c)),
            "final" => assert!(
                seen_trade.contains(&c),
                "webhook final of {c} before its trade"
            ),
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!(seen_trade, expected);

    // The dashboard's final stage has its rows: one per final pushed.
    let n = final_rows().await;
    assert!(n as usize >= 3 * expected.len(), "final latency rows: {n}");
}

/// Frames from `c` until `done(frames)` holds (or fail after `WITHIN`).
async fn collect_until(
    c: &mut crate::harness::Client,
    mut frames: Vec<Value>,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + WITHIN;
    while !done(&frames) {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout(left, c.events.recv()).await {
            Ok(Some(v)) => frames.push(v),
            _ => panic!(
                "condition not met within {WITHIN:?}; last frames: {:?}",
                frames.iter().rev().take(3).collect::<Vec<_>>()
            ),
        }
    }
    frames
}

fn cursors(frames: &[Value], kind: &str) -> Vec<Cursor> {
    of_type(frames, kind).iter().map(|f| cursor_of(f)).collect()
}

/// Mine empty blocks until the chain has finalized `block`.
async fn finalize_through(h: &Harness, block: u64) {
    while chain_finalized(&h.anvil.http_url()).await < block {
        h.sim.rpc().mine().await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resumed_sessions_miss_no_final_and_repeat_none() {
    let h = Harness::with_anvil(FINALITY).await;
    let (push, addr) = h.leader("push-a").await;
    let mine = vec![demo_wallets(6)[1], demo_wallets(6)[3], demo_wallets(6)[5]];
    let (_account, key) = h.account(&mine).await;
    let wallets: Vec<String> = mine.iter().map(|w| w.to_lower_hex()).collect();
    let url = |q: &str| format!("ws://{addr}/v1/ws?{q}");
    let mut fin = connect_url(&url("events=final"), Some(&key)).await;
    let mut both = connect_url(&url("events=trade,final"), Some(&key)).await;
    let fin_start = hello_cursor(&mut fin).await;
    let both_start = hello_cursor(&mut both).await;
    let from_block = h.sim.rpc().latest_block().await.unwrap().number.0;
    let rpc = h.anvil.http_url();
    let fills = |after: Cursor| fills_after(&rpc, from_block, &wallets, after);

    // Batch 1: the `trade,final` session leaves once it has every trade, before (most of)
    // their finals; the `final` session once it has every final.
    h.trade(2, Duration::from_millis(200), 10).await;
    let batch1 = fills(both_start).await;
    assert!(
        batch1.len() >= 4,
        "premise: fills in batch 1 ({})",
        batch1.len()
    );
    let b1 = batch1.clone();
    let both_frames = collect_until(&mut both, Vec::new(), |f| {
        cursors(f, "trade").len() >= b1.len()
    })
    .await;
    both.done.abort();
    finalize_through(&h, h.sim.rpc().latest_block().await.unwrap().number.0).await;
    let b1 = batch1.clone();
    let fin_frames = collect_until(&mut fin, Vec::new(), |f| {
        cursors(f, "final").len() >= b1.len()
    })
    .await;
    fin.done.abort();
    let last_resume = |frames: &[Value], kind: &str| {
        of_type(frames, kind)
            .last()
            .map(|f| f["resume"].as_str().unwrap().to_string())
    };
    let fin_resume = last_resume(&fin_frames, "final").expect("finals in batch 1");
    let trade_resume = last_resume(&both_frames, "trade").expect("trades in batch 1");
    // Where the `trade,final` session's finals stood when it left (its last final, else the
    // start it was given).
    let final_since = of_type(&both_frames, "final")
        .last()
        .map_or(both_start, |f| cursor_of(f));

    // Batch 2 while both are away, then everything finalizes.
    h.trade(2, Duration::from_millis(200), 10).await;
    finalize_through(&h, h.sim.rpc().latest_block().await.unwrap().number.0).await;
    let all = fills(both_start).await;
    let batch2: BTreeSet<Cursor> = all.difference(&batch1).copied().collect();
    assert!(
        batch2.len() >= 4,
        "premise: fills in batch 2 ({})",
        batch2.len()
    );

    // The `final` session resumes after its last final: exactly batch 2's finals, in order.
    let mut fin2 = connect_url(
        &url(&format!("events=final&since={fin_resume}")),
        Some(&key),
    )
    .await;
    let b2 = batch2.clone();
    let fin2_frames = collect_until(&mut fin2, Vec::new(), |f| {
        cursors(f, "final").len() >= b2.len()
    })
    .await;
    assert_eq!(
        cursors(&fin2_frames, "final"),
        batch2.iter().copied().collect::<Vec<_>>()
    );
    assert!(cursors(&fin2_frames, "trade").is_empty());

    // The `trade,final` session resumes its trades after its last trade and its finals after
    // its last final: batch 2's trades, every final it had not had, each after its trade.
    let q = format!("events=trade,final&since={trade_resume}&final_since={final_since}");
    let mut both2 = connect_url(&url(&q), Some(&key)).await;
    let owed: BTreeSet<Cursor> = all.iter().copied().filter(|c| *c > final_since).collect();
    let n = owed.len();
    let both2_frames =
        collect_until(&mut both2, Vec::new(), |f| cursors(f, "final").len() >= n).await;
    // Negative check: nothing more comes within the window.
    observe_for(Duration::from_millis(500)).await;
    let mut both2_frames = both2_frames;
    while let Ok(v) = both2.events.try_recv() {
        both2_frames.push(v);
    }
    push.stop().await.unwrap();
    assert_eq!(
        cursors(&both2_frames, "trade"),
        batch2.iter().copied().collect::<Vec<_>>()
    );
    let finals2 = cursors(&both2_frames, "final");
    assert_eq!(
        finals2.iter().copied().collect::<BTreeSet<_>>(),
        owed,
        "the finals owed, no more"
    );
    assert_eq!(finals2.len(), n, "each once");
    let first_final = cursors(&both_frames, "final");
    let mut every: Vec<Cursor> = first_final.iter().chain(&finals2).copied().collect();
    every.sort();
    assert_eq!(
        every,
        all.iter().copied().collect::<Vec<_>>(),
        "over both connections: every final once"
    );
    for (i, f) in both2_frames.iter().enumerate() {
        if f["type"] == "final" && batch2.contains(&cursor_of(f)) {
            let t = both2_frames
                .iter()
                .position(|g| g["type"] == "trade" && cursor_of(g) == cursor_of(f))
                .expect("its trade on this connection");
            assert!(t < i, "final after its trade");
        }
    }
    println!(
        "resume: final-only replayed {} finals; trade,final replayed {} trades and {} finals ({} of batch 1)",
        batch2.len(),
        batch2.len(),
        n,
        n - batch2.len()
    );
    let _ = fin_start;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reorg_above_finality_retracts_trades_and_no_orphan_is_ever_final() {
    let h = Harness::with_anvil(FINALITY).await;
    let (push, addr) = h.leader("push-a").await;
    let mine: Vec<_> = demo_wallets(6);
    let (_account, key) = h.account(&mine).await;
    let wallets: Vec<String> = mine.iter().map(|w| w.to_lower_hex()).collect();
    let mut both = connect_url(&format!("ws://{addr}/v1/ws?events=trade,final"), Some(&key)).await;
    let start = hello_cursor(&mut both).await;
    let from_block = h.sim.rpc().latest_block().await.unwrap().number.0;
    h.sim.run_matches(6).await.unwrap();
    h.wait_pushed(WITHIN).await;
    // Two blocks replaced, above the finalized block (4 behind the head).
    let outcome = h.sim.reorg(2).await.unwrap();
    assert!(
        !outcome.orphaned.is_empty(),
        "premise: the reorg orphaned fills"
    );
    h.sim.run_matches(2).await.unwrap();
    let last = h.sim.rpc().latest_block().await.unwrap().number.0;
    finalize_through(&h, last).await;
    let canonical = fills_after(&h.anvil.http_url(), from_block, &wallets, start).await;
    let n = canonical.len();
    let frames = collect_until(&mut both, Vec::new(), |f| cursors(f, "final").len() >= n).await;
    // Negative check: nothing more comes within the window.
    observe_for(Duration::from_millis(500)).await;
    let mut frames = frames;
    while let Ok(v) = both.events.try_recv() {
        frames.push(v);
    }
    push.stop().await.unwrap();
    // Finals: exactly the canonical fills, each naming the canonical block hash.
    let finals = of_type(&frames, "final");
    assert_eq!(
        finals.iter().map(|f| cursor_of(f)).collect::<BTreeSet<_>>(),
        canonical,
        "finals are the canonical fills"
    );
    assert_eq!(finals.len(), n, "each once");
    let orphaned: BTreeSet<String> = outcome
        .orphaned_blocks
        .iter()
        .map(|b| b.to_string())
        .collect();
    for f in &finals {
        assert!(
            !orphaned.contains(f["block_hash"].as_str().unwrap()),
            "a final names an orphaned block: {f}"
        );
    }
    // What the session holds (trades minus retracts) is the canonical set too.
    let mut held = BTreeSet::new();
    for f in &frames {
        let key = (
            cursor_of_opt(f),
            f["trade"]["block_hash"].as_str().map(String::from),
        );
        match f["type"].as_str() {
            Some("trade") => {
                held.insert(key);
            }
            Some("retract") => {
                assert!(held.remove(&key), "a retract of a trade held: {f}");
            }
            _ => {}
        }
    }
    let held: BTreeSet<Cursor> = held.into_iter().filter_map(|(c, _)| c).collect();
    assert_eq!(held, canonical, "trades minus retracts");
    assert!(
        !of_type(&frames, "retract").is_empty(),
        "the orphaned trades were retracted"
    );
}

fn cursor_of_opt(f: &Value) -> Option<Cursor> {
    f["cursor"].as_str().and_then(|c| c.parse().ok())
}
