//! The completeness audit end to end, with pmw-push delivering: pmw-live first runs with one
//! exchange left out of its allowlist (its fills are never stored, never pushed), and a row the
//! chain does not have is injected into a stored block and pushed to a WebSocket subscriber and a
//! webhook endpoint. Restarted with every exchange and the audit (anvil's `finalized` trails the
//! head by 4 blocks), pmw-live backfills the missing fills and retracts the injected one; push
//! rewinds and both the session and the endpoint end up holding exactly the chain's fills
//! (`eth_getLogs`), the backfilled ones flagged `audit`, the injected one retracted.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pmw_core::trade::Allowlist;
use pmw_core::{CoreConfig, Cursor};
use pmw_sim::demo_wallets;
use pmw_testkit::seed::Endpoint;
use pmw_testkit::{assert_eventually, eventually_every, ServiceHandle};
use serde_json::Value;

use crate::harness::{canonical, connect, hello_cursor, Client, Fill, Harness};

const WITHIN: Duration = Duration::from_secs(90);

fn start_live(core: CoreConfig, head: u64, audit: bool, allow: Allowlist) -> ServiceHandle {
    let live = pmw_live::LiveConfig {
        live_start_block: Some(head + 1),
        live_lock_segment_ms: 1_000,
        live_poll_interval_ms: 200,
        live_finalized_poll_ms: 100,
        live_audit_enabled: audit,
        live_audit_range_blocks: 5,
        live_audit_max_rps: 200.0,
        live_audit_interval_ms: 100,
        gamma_url: "http://127.0.0.1:9".into(),
        ..pmw_live::LiveConfig::default()
    };
    ServiceHandle::spawn(move |stop| pmw_live::run_with(core, live, allow, stop))
}

/// A webhook receiver answering 200 and recording each `webhook-id` once, in arrival order.
#[derive(Clone, Default)]
struct Hooks(Arc<Mutex<Vec<(String, Value)>>>);

impl Hooks {
    async fn start(&self) -> String {
        let me = self.clone();
        let app = axum::Router::new().fallback(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let me = me.clone();
                async move {
                    let v: Value = serde_json::from_slice(&body).unwrap_or_default();
                    let id = headers["webhook-id"].to_str().unwrap().to_string();
                    let mut d = me.0.lock().unwrap();
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
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(_, v)| v.clone())
            .collect()
    }
}

fn fill_of(m: &Value) -> Option<Fill> {
    let t = &m["trade"];
    Some((
        t["block_number"].as_u64()?,
        t["log_index"].as_u64()?,
        t["block_hash"].as_str()?.to_lowercase(),
    ))
}

/// Trades minus retracts, and how many trades came twice.
fn held(messages: &[Value]) -> (BTreeSet<Fill>, usize) {
    let mut held = BTreeSet::new();
    let mut duplicated = 0;
    for m in messages {
        let Some(f) = fill_of(m) else { continue };
        match m["type"].as_str() {
            Some("trade") if !held.insert(f.clone()) => duplicated += 1,
            Some("retract") => {
                held.remove(&f);
            }
            _ => {}
        }
    }
    (held, duplicated)
}

/// Frames until `done` says the frames so far are enough.
async fn collect_until(c: &mut Client, frames: &mut Vec<Value>, done: impl Fn(&[Value]) -> bool) {
    let deadline = tokio::time::Instant::now() + WITHIN;
    while !done(frames) {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout(left, c.events.recv()).await {
            Ok(Some(v)) => frames.push(v),
            _ => panic!("the session did not get what it was owed; frames: {frames:?}"),
        }
    }
}

async fn hooks_until(hooks: &Hooks, done: impl Fn(&[Value]) -> bool) {
    assert_eventually!(
        WITHIN,
        done(&hooks.messages()),
        "the endpoint did not get what it was owed: {:?}",
        hooks.messages()
    );
}

fn has(frames: &[Value], kind: &str, fill: &Fill) -> bool {
    frames
        .iter()
        .any(|m| m["type"] == kind && fill_of(m).as_ref() == Some(fill))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_ingest_missed_is_delivered_once_audited_and_an_injected_one_is_retracted() {
    let h = Harness::bare(&["--slots-in-an-epoch", "2"]).await;
    let (push, addr) = h.leader("push-a").await;
    let wallets = demo_wallets(6);
    let all: Vec<String> = wallets.iter().map(|w| w.to_lower_hex()).collect();
    let (account, key) = h.account(&wallets).await;
    let hooks = Hooks::default();
    let url = hooks.start().await;
    let c = h.db.connect().await;
    let secret = pmw_core::webhook::Secret::generate().expose();
    Endpoint::new(account, &url, &secret).insert(&c).await;
    c.execute("SELECT pg_notify('pmw_subscriptions', '')", &[])
        .await
        .unwrap();
    let start = h.sim.rpc().latest_block().await.unwrap().number.0;
    let full = Allowlist::polymarket();
    let left_out = full.addresses().next().unwrap().to_lower_hex();
    let partial =
        Allowlist::new(full.iter().filter(|(a, _)| a.to_lower_hex() != left_out)).unwrap();

    // 1. Live without one exchange: the session gets every other fill, never the left-out ones.
    let live = start_live(h.core(), start, false, partial);
    let mut ws = connect(addr, &key, None).await;
    hello_cursor(&mut ws).await;
    for _ in 0..6 {
        h.sim.run_matches(6).await.unwrap();
        let n = h
            .sim
            .canonical()
            .iter()
            .filter(|e| e.exchange.to_lower_hex() == left_out)
            .count();
        if n >= 2 {
            break;
        }
    }
    let on_chain = canonical(&h.anvil.http_url(), start, &all).await;
    let missed: BTreeSet<Fill> = h
        .sim
        .canonical()
        .iter()
        .filter(|e| e.exchange.to_lower_hex() == left_out)
        .map(|e| {
            (
                e.block_number,
                e.log_index,
                e.block_hash.to_string().to_lowercase(),
            )
        })
        .collect();
    assert!(missed.len() >= 2, "premise: the left-out exchange filled");
    let stored: BTreeSet<Fill> = on_chain.difference(&missed).cloned().collect();
    let mut frames = Vec::new();
    collect_until(&mut ws, &mut frames, |f| held(f).0 == stored).await;
    live.stop().await.unwrap();

    // 2. A row the chain does not have, in the last stored block: pushed like any trade.
    let (w, w_hash) = crate::harness::watermark(&c).await.expect("a watermark");
    let mut fake = pmw_core::pg::ledger::visible_after(&c, Cursor::ORIGIN, u64::MAX / 2, 1)
        .await
        .unwrap()
        .remove(0);
    fake.block_number = w as u64;
    fake.block_hash = w_hash.clone();
    fake.log_index = 900;
    fake.order_hash = format!("0x{:064x}", 900);
    pmw_testkit::rows::plant(&c, std::slice::from_ref(&fake)).await;
    c.execute(
        "UPDATE chain_blocks SET trade_count = trade_count + 1 WHERE block_number = $1",
        &[&w],
    )
    .await
    .unwrap();
    c.execute("SELECT pg_notify('pmw_blocks', $1)", &[&w.to_string()])
        .await
        .unwrap();
    let injected: Fill = (w as u64, 900, w_hash.to_lowercase());
    collect_until(&mut ws, &mut frames, |f| has(f, "trade", &injected)).await;
    hooks_until(&hooks, |m| has(m, "trade", &injected)).await;

    // 3. Live with every exchange and the audit; blocks mined until it has audited the run.
    let live = start_live(h.core(), start, true, full);
    let audited = eventually_every(WITHIN, Duration::from_millis(100), || async {
        let audited: Option<i64> = c
            .query_opt("SELECT block_number FROM audit_cursor WHERE id = 1", &[])
            .await
            .unwrap()
            .map(|r| r.get(0));
        let through = audited.is_some_and(|a| a >= w);
        if !through {
            h.sim.rpc().mine().await.unwrap();
        }
        through
    })
    .await;
    assert!(audited, "not audited through {w}");
    h.sim.run_matches(2).await.unwrap();
    let on_chain = canonical(&h.anvil.http_url(), start, &all).await;
    collect_until(&mut ws, &mut frames, |f| {
        held(f).0 == on_chain && has(f, "retract", &injected)
    })
    .await;
    hooks_until(&hooks, |m| {
        held(m).0 == on_chain && has(m, "retract", &injected)
    })
    .await;

    // Exactly the chain's fills, nothing twice; the backfilled ones flagged, late and not live.
    for (who, messages) in [("websocket", frames.clone()), ("webhook", hooks.messages())] {
        let (got, duplicated) = held(&messages);
        assert_eq!(got, on_chain, "{who}: holds exactly the chain's fills");
        assert_eq!(duplicated, 0, "{who}: nothing delivered twice");
        for f in &missed {
            let m = messages
                .iter()
                .find(|m| m["type"] == "trade" && fill_of(m).as_ref() == Some(f))
                .unwrap_or_else(|| panic!("{who}: the missed fill {f:?} was delivered"));
            assert_eq!(m["audit"], true, "{who}: flagged audit: {m}");
            assert_eq!(m["backfilled"], true, "{who}: {m}");
        }
        let retract = messages
            .iter()
            .find(|m| m["type"] == "retract" && fill_of(m).as_ref() == Some(&injected))
            .unwrap();
        assert_eq!(
            retract["audit"], false,
            "the retracted row was not the audit's"
        );
        assert!(
            messages
                .iter()
                .filter(|m| m["type"] == "trade" && m["audit"] == true)
                .all(|m| fill_of(m).is_some_and(|f| missed.contains(&f))),
            "{who}: only the missed fills are flagged"
        );
    }
    // Their deliveries are no live latency: push records them as backfilled, on both channels.
    let every = Duration::from_millis(200);
    let recorded = eventually_every(WITHIN, every, || async {
        let rows: Vec<(u64, u32, String, u8)> =
            h.db.ch
                .query("SELECT block_number, log_index, channel, backfilled FROM push_latency")
                .fetch_all()
                .await
                .unwrap();
        let of_missed: Vec<_> = rows
            .iter()
            .filter(|r| missed.iter().any(|f| f.0 == r.0 && f.1 == u64::from(r.1)))
            .collect();
        let channels: BTreeSet<&str> = of_missed.iter().map(|r| r.2.as_str()).collect();
        if channels.len() == 2 {
            assert!(
                of_missed.iter().all(|r| r.3 == 1),
                "an audit fill's delivery is recorded as backfilled: {of_missed:?}"
            );
            return Ok(());
        }
        Err(rows)
    })
    .await;
    if let Err(rows) = recorded {
        panic!("no latency rows of the missed fills: {rows:?}");
    }
    let r = c
        .query_one(
            "SELECT coalesce(sum(fills_checked), 0)::bigint, coalesce(sum(missing), 0)::bigint, \
             coalesce(sum(extra), 0)::bigint, max(to_block), max(head_block - to_block), \
             (SELECT count(*) FROM reorgs WHERE cause = 'audit'), max(audited_ms - to_block_time_ms) \
             FROM audit_ranges",
            &[],
        )
        .await
        .unwrap();
    let (checked, missing, extra): (i64, i64, i64) = (r.get(0), r.get(1), r.get(2));
    assert_eq!(missing, missed.len() as i64);
    assert_eq!(extra, 1);
    assert!(r.get::<_, i64>(5) >= 1, "push was told to rewind");
    println!(
        "audit e2e: {checked} fills checked through block {:?}, {missing} missing (delivered over WebSocket and webhook, flagged audit), {extra} extra (retracted); trailed the head by at most {:?} blocks, audited at most {:?} ms after its block's timestamp",
        r.get::<_, Option<i64>>(3),
        r.get::<_, Option<i64>>(4),
        r.get::<_, Option<i64>>(6)
    );
    live.stop().await.unwrap();
    push.stop().await.unwrap();
}
