//! No one stalls anyone (issue 12): one account's churn never fails a round for the others, a
//! leader that cannot complete rounds hands over (exit 75), SIGTERM finishes in every state,
//! session limits hold, and revocation closes what it covered.

use std::time::{Duration, Instant};

use pmw_core::{Cursor, ServiceError, UnixMs};
use pmw_push::PushConfig;
use pmw_sim::demo_wallets;
use pmw_testkit::seed::Endpoint;
use pmw_testkit::{bound_within, eventually, eventually_every, observe_for, TcpProxy};

use super::WITHIN;
use crate::harness::{
    change_as_api, closed_with, connect, first_of, hello_cursor, key_id, spawn_push, Harness,
};

const SECRET: &str = "whsec_dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0";

async fn endpoint(h: &Harness, account: i64) -> i64 {
    Endpoint::new(account, "http://127.0.0.1:9/hook", SECRET)
        .created(UnixMs::now().0)
        .insert(&h.db.connect().await)
        .await
}

/// The churn stall: an endpoint deleted while the leader's index still lists it made every
/// round fail on the foreign key, for every account, forever. The trigger that versions the
/// index is switched off here so the index stays stale on purpose: the delivery to the vanished
/// endpoint must be skipped (and counted) and everyone else served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_deleted_behind_the_index_is_skipped_and_others_are_served() {
    let h = Harness::new().await;
    let wallets = demo_wallets(6);
    let (watched, key) = h.account(&wallets).await;
    let mine = endpoint(&h, watched).await;
    let (churner, _) = h.account(&wallets).await;
    let doomed = endpoint(&h, churner).await;
    let (push, addr) = h.leader("push-a").await;
    let mut c = connect(addr, &key, None).await;
    let start: Cursor = hello_cursor(&mut c).await;
    // The webhook lane loads its index at its first round: let one run (a trade enqueued to
    // `mine`) while `doomed` still exists, so the lane's index holds it. Deleting before that
    // round left nothing stale to skip (seen once on a loaded machine).
    let pg = h.db.connect().await;
    h.sim.run_matches(1).await.unwrap();
    h.wait_pushed(WITHIN).await;
    let before = h.expected(&wallets, start).len();
    assert!(before > 0, "the first match filled a followed wallet");
    let enqueued_to = |endpoint: i64| {
        let pg = &pg;
        async move {
            let n: i64 = pg
                .query_one(
                    "SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND kind = 'trade'",
                    &[&endpoint],
                )
                .await
                .unwrap()
                .get(0);
            n as usize
        }
    };
    let first = eventually(WITHIN, || async {
        let n = enqueued_to(mine).await;
        if n >= before {
            Ok(n)
        } else {
            Err(n)
        }
    })
    .await;
    assert!(
        first.is_ok(),
        "the first match reached the webhook lane: {first:?}"
    );
    // The index now holds `doomed`; delete it without moving the version.
    pg.batch_execute(&format!(
        "ALTER TABLE webhook_endpoints DISABLE TRIGGER webhook_endpoints_bump_subs_version_delete; \
         DELETE FROM webhook_endpoints WHERE id = {doomed}"
    ))
    .await
    .unwrap();
    h.sim.run_matches(6).await.unwrap();
    h.wait_pushed(WITHIN).await;
    let owed = h.expected(&wallets, start);
    assert!(!owed.is_empty());
    // The counter moves when the round that committed the cursor returns: poll for it.
    let polled = eventually(WITHIN, || async {
        let health: serde_json::Value = reqwest::get(format!("http://{addr}/health"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if health["webhooks_skipped"].as_u64() >= Some((owed.len() - before) as u64) {
            Ok(health)
        } else {
            Err(health)
        }
    })
    .await;
    let health = polled.unwrap_or_else(|last| last);
    c.wait_trades(&owed, WITHIN).await;
    let enqueued = eventually(WITHIN, || async { enqueued_to(mine).await >= owed.len() }).await;
    assert!(enqueued, "the watched endpoint's deliveries enqueued");
    push.stop().await.unwrap();
    assert_eq!(c.done.await.unwrap().trades, owed, "the watched session");
    assert_eq!(enqueued_to(mine).await, owed.len(), "the watched endpoint");
    println!("health after the churn: {health}");
    assert!(
        health["webhooks_skipped"].as_u64().unwrap() >= (owed.len() - before) as u64,
        "deliveries to the vanished endpoint are counted as skipped: {health}"
    );
}

/// A leader whose ClickHouse hangs (a proxy that accepts and never answers) completes no round:
/// it must hand over by exiting 75 within the stall limit, not hold the lock forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_rounds_hang_exits_75_to_hand_over() {
    let h = Harness::new().await;
    let (ch, handle, _addr) = leader_behind_ch_proxy(
        &h,
        PushConfig {
            push_stall_exit_ms: Some(3_000),
            ..h.push_config()
        },
    )
    .await;
    h.sim.run_matches(1).await.unwrap();
    h.wait_pushed(WITHIN).await;
    ch.freeze();
    let frozen = Instant::now();
    h.sim.run_matches(2).await.unwrap();
    let out = tokio::time::timeout(WITHIN, handle.join())
        .await
        .expect("the stalled leader exits by itself");
    println!(
        "leader with a hung clickhouse exited after {} ms: {out:?}",
        frozen.elapsed().as_millis()
    );
    assert!(
        matches!(&out, Err(e @ ServiceError::Transient(_)) if e.exit_code() == 75),
        "exit 75 (hand over): {out:?}"
    );
}

/// The webhook lane hangs (its cursor row locked by another transaction): no webhook round
/// completes, so the leader hands over (exit 75) within the stall limit, as for the WebSocket
/// rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_webhook_lane_hangs_exits_75_to_hand_over() {
    let h = Harness::new().await;
    let push = PushConfig {
        push_stall_exit_ms: Some(3_000),
        ..h.push_config()
    };
    let (handle, rx) = spawn_push(h.core(), "push-a", push, hooks());
    bound_within(rx, WITHIN).await;
    h.sim.run_matches(1).await.unwrap();
    h.wait_pushed(WITHIN).await;
    let mut blocker = h.db.connect().await;
    let hold = blocker.transaction().await.unwrap();
    hold.execute(
        "SELECT 1 FROM webhook_cursor WHERE slot = 0 FOR UPDATE",
        &[],
    )
    .await
    .unwrap();
    let held = Instant::now();
    h.sim.run_matches(2).await.unwrap();
    let out = tokio::time::timeout(WITHIN, handle.join())
        .await
        .expect("the leader with a hung webhook lane exits by itself");
    println!(
        "leader with a hung webhook lane exited after {} ms: {out:?}",
        held.elapsed().as_millis()
    );
    hold.rollback().await.unwrap();
    assert!(
        matches!(&out, Err(e @ ServiceError::Transient(_)) if e.exit_code() == 75),
        "exit 75 (hand over): {out:?}"
    );
}

/// SIGTERM while ClickHouse refuses connections (the recorder cannot flush its facts): the leader
/// stops within its bound and releases the lock. Rounds used to fail on ClickHouse here (the old
/// loop retried them forever after shutdown); since ClickHouse left the delivery path they
/// succeed, and a round that cannot finish is the stall test's case above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_clickhouse_refuses_stops_and_releases_the_lock() {
    let h = Harness::new().await;
    let (ch, handle, _addr) = leader_behind_ch_proxy(
        &h,
        PushConfig {
            push_round_deadline_ms: 2_000,
            push_stall_exit_ms: Some(600_000),
            ..h.push_config()
        },
    )
    .await;
    ch.cut();
    h.sim.run_matches(2).await.unwrap();
    // The rounds of those matches run while ClickHouse refuses: push's cursor reaches the head.
    // (They no longer fail on it: ClickHouse is off the delivery path, and push's health
    // counts 0 errors here; the stop below still comes while ClickHouse refuses.)
    h.wait_pushed(WITHIN).await;
    let asked = Instant::now();
    let out = tokio::time::timeout(Duration::from_secs(30), handle.stop())
        .await
        .expect("SIGTERM ends the leader while ClickHouse refuses");
    println!(
        "stop while ClickHouse refuses took {} ms: {out:?}",
        asked.elapsed().as_millis()
    );
    assert!(out.is_ok(), "{out:?}");
    // The lock is free: a second leader takes over.
    let (_b, _) = h.leader("push-b").await;
}

/// Live and push started while ClickHouse is down lead at once and deliver (ClickHouse is off
/// the delivery path); once it answers, the projector fills it with what was delivered. Push
/// used to wait for ClickHouse at start (and before that exit 75 into pm2's growing restart
/// delay), so a leader killed or deployed during a ClickHouse outage stayed dark until it ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_and_push_started_while_clickhouse_is_down_lead_and_deliver_without_it() {
    let mut h = Harness::new().await;
    h.live.take().unwrap().stop().await.unwrap();
    let ch = TcpProxy::start(ch_addr(&h)).await;
    ch.cut();
    let mut core = h.core();
    core.clickhouse_url = format!("http://{}", ch.addr);
    let head = h.sim.rpc().latest_block().await.unwrap().number.0;
    let live = crate::harness::start_live(core.clone(), head);
    let (push, rx) = spawn_push(core, "push-a", h.push_config(), hooks());
    let addr = bound_within(rx, WITHIN).await;
    let wallets = demo_wallets(2);
    let (_, key) = h.account(&wallets).await;
    let mut c = connect(addr, &key, None).await;
    let start: Cursor = hello_cursor(&mut c).await;
    h.sim.run_matches(2).await.unwrap();
    h.wait_pushed(WITHIN).await;
    let want = h.expected(&wallets, start);
    assert!(!want.is_empty());
    let mut got = Vec::new();
    while got.len() < want.len() {
        let f = first_of(&mut c, "trade").await;
        got.push(f["cursor"].as_str().unwrap().parse::<Cursor>().unwrap());
    }
    assert_eq!(
        got, want,
        "every owed trade, in order, with ClickHouse down"
    );
    // Back: the projector fills ClickHouse with every canonical fill delivered meanwhile.
    ch.restore();
    let fills = h.sim.canonical().len() as u64;
    let filled = eventually(WITHIN, || async {
        let n: u64 =
            h.db.ch
                .query("SELECT count() FROM (SELECT DISTINCT block_number, log_index FROM trades)")
                .fetch_one()
                .await
                .unwrap_or(0);
        (n >= fills).then_some(n).ok_or(n)
    })
    .await;
    assert!(
        filled.is_ok(),
        "ClickHouse holds {filled:?} of {fills} fills"
    );
    push.stop().await.unwrap();
    live.stop().await.unwrap();
}

/// A leader (push-a) whose ClickHouse is behind a proxy the test can cut or freeze; returns once
/// it listens.
async fn leader_behind_ch_proxy(
    h: &Harness,
    push: PushConfig,
) -> (TcpProxy, pmw_testkit::ServiceHandle, std::net::SocketAddr) {
    let ch = TcpProxy::start(ch_addr(h)).await;
    let mut core = h.core();
    core.clickhouse_url = format!("http://{}", ch.addr);
    let (handle, rx) = spawn_push(core, "push-a", push, hooks());
    (ch, handle, bound_within(rx, WITHIN).await)
}

fn ch_addr(h: &Harness) -> std::net::SocketAddr {
    let url = url::Url::parse(&h.db.cfg.clickhouse_url).unwrap();
    format!(
        "{}:{}",
        url.host_str().unwrap(),
        url.port_or_known_default().unwrap()
    )
    .parse()
    .unwrap()
}

fn hooks() -> pmw_push::webhook::WebhookConfig {
    pmw_push::webhook::WebhookConfig {
        allow_private_destinations: true,
        ..pmw_push::webhook::WebhookConfig::default()
    }
}

/// The plan's `max_ws_sessions` caps concurrent sessions (1008 with the reason); a closed one
/// frees its slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_caps_concurrent_sessions() {
    let h = Harness::new().await;
    let pg = h.db.connect().await;
    pg.execute(
        "INSERT INTO plans (name, max_ws_sessions, is_default, updated_ms) VALUES ('pro', 2, true, 0)",
        &[],
    )
    .await
    .unwrap();
    let (_, key) = h.account(&demo_wallets(2)).await;
    let (push, addr) = h.leader("push-a").await;
    let mut a = connect(addr, &key, None).await;
    first_of(&mut a, "hello").await;
    let mut b = connect(addr, &key, None).await;
    first_of(&mut b, "hello").await;
    let third = connect(addr, &key, None).await.done.await.unwrap();
    assert_eq!(third.close_code, Some(1008), "{third:?}");
    b.done.abort();
    drop(b.events);
    // The slot is freed once the server sees the close.
    let freed = eventually_every(WITHIN, Duration::from_millis(100), || async {
        let mut c = connect(addr, &key, None).await;
        let v = tokio::time::timeout(Duration::from_secs(10), c.events.recv()).await;
        matches!(&v, Ok(Some(f)) if f["type"] == "hello")
    })
    .await;
    assert!(freed, "the closed session's slot was never freed");
    push.stop().await.unwrap();
}

/// Revoking a key closes its open sessions (1008) and kills its outstanding tickets; disabling
/// an account closes every session of it; removing a subscription stops that wallet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revocation_closes_sessions_and_tickets_and_unsubscribing_stops_a_wallet() {
    let h = Harness::new().await;
    let wallets = demo_wallets(6);
    let (account, key) = h.account(&wallets[..2]).await;
    let (other, other_key) = h.account(&wallets[..2]).await;
    let pg = h.db.connect().await;
    let key_id = key_id(&pg, account).await;
    let (ticket, _) = pmw_core::auth::generate(pmw_core::auth::TICKET_PREFIX);
    pg.execute(
        "INSERT INTO ws_tickets (ticket_hash, account_id, key_id, expires_ms) VALUES ($1, $2, $3, $4)",
        &[&pmw_core::auth::hash_secret(&ticket).as_slice(), &account, &key_id, &(UnixMs::now().0 + 600_000)],
    )
    .await
    .unwrap();
    let (push, addr) = h.leader("push-a").await;
    let mut by_key = connect(addr, &key, None).await;
    first_of(&mut by_key, "hello").await;
    let mut watched = connect(addr, &other_key, None).await;
    let start: Cursor = hello_cursor(&mut watched).await;

    // Revoke (as the API does: the row, then a NOTIFY).
    let revoked_at = Instant::now();
    let revoke = format!("UPDATE api_keys SET revoked_ms = 1 WHERE id = {key_id}");
    change_as_api(&pg, &revoke).await;
    closed_with(by_key, 1008, WITHIN, "the revoked key's session is closed").await;
    println!(
        "revoked key's session closed after {} ms",
        revoked_at.elapsed().as_millis()
    );
    let url = format!("ws://{addr}/v1/ws?ticket={ticket}");
    let by_ticket = crate::harness::connect_url(&url, None)
        .await
        .done
        .await
        .unwrap();
    assert_eq!(
        by_ticket.close_code,
        Some(1008),
        "a ticket issued by the revoked key is dead: {by_ticket:?}"
    );

    // Unsubscribe `other` from wallets[1]: trades of wallets[0] only from then on.
    h.sim.run_matches(3).await.unwrap();
    h.wait_pushed(WITHIN).await;
    let cut: Cursor = Cursor {
        block: h.sim.rpc().latest_block().await.unwrap().number.0,
        log_index: pmw_core::types::cursor::MAX_LOG_INDEX,
    };
    pg.execute(
        "DELETE FROM subscriptions WHERE account_id = $1 AND wallet = $2",
        &[&other, &wallets[1].as_bytes().as_slice()],
    )
    .await
    .unwrap();
    pg.execute("SELECT pg_notify('pmw_subscriptions', '')", &[])
        .await
        .unwrap();
    // No wait for the NOTIFY to be handled: the next round reads `subs_version` with its state
    // and reloads the index before it matches anything (push/index.rs, with the NOTIFY lost).
    h.sim.run_matches(4).await.unwrap();
    h.wait_pushed(WITHIN).await;

    // Disable the account: its session is closed.
    let disable = format!("UPDATE accounts SET disabled_ms = 1 WHERE id = {other}");
    change_as_api(&pg, &disable).await;
    let what = "the disabled account's session is closed";
    let seen = closed_with(watched, 1008, WITHIN, what).await;
    push.stop().await.unwrap();
    let mut owed: Vec<Cursor> = h
        .expected(&wallets[..2], start)
        .into_iter()
        .filter(|c| *c <= cut)
        .collect();
    owed.extend(h.expected(&wallets[..1], cut));
    assert_eq!(
        seen.trades, owed,
        "both wallets until the unsubscribe, only the followed one after"
    );
}

/// A catch-up after an outage (here: ClickHouse unreachable while trades pile up) is read in
/// rounds of at most half a session queue, so a session that keeps up is never closed as a slow
/// consumer just because the backlog is larger than its queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catch_up_larger_than_the_queue_does_not_close_a_fast_session() {
    let h = Harness::new().await;
    let wallets = demo_wallets(6);
    let (_, key) = h.account(&wallets).await;
    let (ch, handle, addr) = leader_behind_ch_proxy(
        &h,
        PushConfig {
            push_ws_queue: 16,
            push_stall_exit_ms: Some(600_000),
            ..h.push_config()
        },
    )
    .await;
    let mut c = connect(addr, &key, None).await;
    let start: Cursor = hello_cursor(&mut c).await;
    ch.cut();
    h.sim.run_matches(25).await.unwrap();
    let owed = h.expected(&wallets, start);
    assert!(
        owed.len() > 32,
        "a backlog of {} trades, twice the queue",
        owed.len()
    );
    ch.restore();
    h.wait_pushed(WITHIN).await;
    c.wait_trades(&owed, WITHIN).await;
    handle.stop().await.unwrap();
    let seen = c.done.await.unwrap();
    assert_eq!(
        seen.close_code,
        Some(1012),
        "closed only by the stop: {seen:?}"
    );
    assert_eq!(seen.trades, owed);
}

/// A frozen leader (here: a session that holds the slot's lock while the leader it speaks for
/// has stopped beating, as a SIGSTOPped process does: its kernel keeps the TCP session alive)
/// keeps the lock forever unless the standby treats the heartbeat as a lease: the standby must
/// terminate the holder's session and lead once the lease ran out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standby_takes_the_lock_from_a_frozen_leader_after_the_lease() {
    let h = Harness::new().await;
    let ghost = h.db.connect().await;
    let key = pmw_push::leader::lock_key(0);
    ghost
        .execute("SELECT pg_advisory_lock($1)", &[&key])
        .await
        .unwrap();
    let silent_since = UnixMs::now().0 - 60_000;
    ghost
        .execute(
            "INSERT INTO push_epoch (slot, epoch, leader, acquired_ms) VALUES (0, 7, 'push-frozen', $1)",
            &[&silent_since],
        )
        .await
        .unwrap();
    let push = PushConfig {
        push_lease_ms: 2_000,
        ..h.push_config()
    };
    let waited = Instant::now();
    let (handle, bound) = h.start_push("push-b", push);
    tokio::time::timeout(WITHIN, bound)
        .await
        .expect("the standby leads once the lease ran out")
        .unwrap();
    println!(
        "standby took over a frozen leader's lock after {} ms",
        waited.elapsed().as_millis()
    );
    let pg = h.db.connect().await;
    let (epoch, leader): (i64, String) = pg
        .query_one("SELECT epoch, leader FROM push_epoch WHERE slot = 0", &[])
        .await
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(
        (epoch, leader.as_str()),
        (8, "push-b"),
        "epoch bumped past the frozen leader's"
    );
    assert!(
        ghost.execute("SELECT 1", &[]).await.is_err(),
        "the frozen leader's session was terminated"
    );
    handle.stop().await.unwrap();
}

/// A graceful stop lets the webhook attempts in flight finish and record their results before
/// the lock is released: the successor must not send them again (every deploy would otherwise
/// resend whatever was in flight).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_finishes_webhooks_in_flight_and_the_successor_sends_none_again() {
    use axum::http::HeaderMap;
    let h = Harness::new().await;
    let wallets = demo_wallets(6);
    let (account, _) = h.account(&wallets).await;
    let ids: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
    let seen = ids.clone();
    let app = axum::Router::new().route(
        "/slow",
        axum::routing::post(move |headers: HeaderMap| {
            let seen = seen.clone();
            async move {
                let id = headers
                    .get("webhook-id")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                seen.lock().unwrap().push(id);
                tokio::time::sleep(Duration::from_millis(1500)).await;
                "ok"
            }
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/slow", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await });
    Endpoint::new(account, &url, SECRET)
        .created(UnixMs::now().0)
        .insert(&h.db.connect().await)
        .await;
    h.db.connect()
        .await
        .execute("SELECT pg_notify('pmw_subscriptions', '')", &[])
        .await
        .unwrap();
    let (a, _) = h.leader("push-a").await;
    let (b, b_bound) = h.start_push("push-b", h.push_config());
    h.sim.run_matches(1).await.unwrap();
    let started = eventually_every(WITHIN, Duration::from_millis(20), || async {
        !ids.lock().unwrap().is_empty()
    })
    .await;
    assert!(started, "no webhook attempt started");
    // Attempts are in flight (the receiver answers after 1.5 s): stop the leader now.
    a.stop().await.unwrap();
    tokio::time::timeout(WITHIN, b_bound)
        .await
        .unwrap()
        .unwrap();
    let pg = h.db.connect().await;
    let pending = || async {
        let n: i64 = pg
            .query_one(
                "SELECT count(*) FROM webhook_deliveries WHERE state <> 'delivered'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        n
    };
    if !eventually(WITHIN, || async { pending().await == 0 }).await {
        panic!("{} deliveries never delivered", pending().await);
    }
    // Negative check: no second attempt of a delivered webhook within the window.
    observe_for(Duration::from_secs(2)).await;
    b.stop().await.unwrap();
    let got = ids.lock().unwrap().clone();
    let unique: std::collections::BTreeSet<&String> = got.iter().collect();
    println!("{} attempts, {} webhook ids", got.len(), unique.len());
    assert!(!got.is_empty());
    assert_eq!(
        got.len(),
        unique.len(),
        "no webhook sent twice across the handover: {got:?}"
    );
}

/// A resume beyond the window is served page by page up to `push_resume_max_trades`, then a
/// `resync` names the last trade sent, so the client backfills over REST from there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_past_the_window_sends_the_window_then_resync_from_the_last_trade() {
    let h = Harness::new().await;
    let wallets = demo_wallets(6);
    let (_, key) = h.account(&wallets).await;
    let cfg = PushConfig {
        push_resume_max_trades: 3,
        ..h.push_config()
    };
    let (push, bound) = h.start_push("push-a", cfg);
    let addr = tokio::time::timeout(WITHIN, bound).await.unwrap().unwrap();
    let mut c = connect(addr, &key, None).await;
    let start: Cursor = hello_cursor(&mut c).await;
    h.sim.run_matches(4).await.unwrap();
    h.wait_pushed(WITHIN).await;
    let owed = h.expected(&wallets, start);
    assert!(owed.len() > 3);
    let late = connect(addr, &key, Some(start)).await.done.await.unwrap();
    push.stop().await.unwrap();
    assert_eq!(late.trades, owed[..3].to_vec(), "the window, in order");
    let resync = late
        .frames
        .iter()
        .find(|f| f["type"] == "resync")
        .expect("a resync frame");
    assert_eq!(resync["after"], owed[2].to_string(), "{resync}");
    assert_eq!(late.close_code, Some(1008));
}
