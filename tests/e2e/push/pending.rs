//! The pending tier on `/v1/ws` (issue 43): pmw-sim settling real-shaped calldata on an anvil
//! mining every 2 s (settlements wait in its pool; some revert, are replaced or dropped),
//! pmw-live's mempool watcher recording them, push's pending lane delivering them. A session
//! with `events=trade,pending` gets each `pending` before its `trade` (which names it with
//! `pending_id`) and a `void` with its reason for one that does not confirm; a default session
//! gets no `pending` or `void`; a session that resumes while a fill is open is sent it. In edge
//! mode the same frames travel the broker and an edge delivers them.

use pmw_core::trade::Allowlist;
use pmw_sim::anvil::Anvil;
use pmw_sim::{Outcome, Sim, SimConfig};
use pmw_testkit::{bound_within, stack_env, workspace_bin, ServiceHandle, TestDb};
use pmw_tools::chain::Chain;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

use super::edge::{drop_stream, edge_push, start_edge};
use super::nats::shared_bus;
use super::WITHIN;
use crate::harness::{connect, connect_url, Client, Harness, LEADS_WITHIN};

/// The simulator in settle mode, as pmw-live's own pending test drives it.
fn settle_config() -> SimConfig {
    SimConfig {
        seed: 4_301,
        settle: true,
        revert_share: 0.2,
        replace_share: 0.2,
        drop_share: 0.2,
        linger_ms: 300,
        ..SimConfig::default()
    }
}

pub(super) async fn harness() -> Harness {
    let db = TestDb::new_on(stack_env()).await;
    let anvil = Anvil::spawn_with(&["--block-time", "2"]).await.unwrap();
    let sim = Sim::connect_with(&anvil.http_url(), settle_config())
        .await
        .unwrap();
    sim.install_emitters().await.unwrap();
    let mut h = Harness {
        chain: Chain { db, anvil, sim },
        live: None,
    };
    let head = h.head().await;
    let fee_modules = pmw_sim::settlement::fee_modules_setting();
    let live = pmw_live::LiveConfig {
        live_start_block: Some(head + 1),
        live_lock_segment_ms: 1_000,
        live_poll_interval_ms: 200,
        gamma_url: "http://127.0.0.1:9".into(),
        live_mempool: true,
        live_mempool_fee_modules: Some(fee_modules),
        live_pending_expire_blocks: 20,
        ..pmw_live::LiveConfig::default()
    };
    let core = h.core();
    h.live = Some(ServiceHandle::spawn(move |stop| {
        pmw_live::run_with(core, live, Allowlist::polymarket(), stop)
    }));
    h
}

pub(super) fn of_type<'a>(
    frames: &'a [Value],
    kind: &'a str,
) -> impl Iterator<Item = &'a Value> + 'a {
    frames.iter().filter(move |f| f["type"] == kind)
}

/// Every `trade` with a `pending_id` and every `void` came after that id's `pending`, and no
/// `pending` came after its `trade` or `void`. Returns the ids paired with a trade and the
/// voids' reasons by id.
pub(super) fn judged(frames: &[Value]) -> (BTreeSet<i64>, BTreeMap<i64, String>) {
    let (mut pending, mut ended) = (BTreeSet::new(), BTreeSet::new());
    let (mut paired, mut voids) = (BTreeSet::new(), BTreeMap::new());
    for f in frames {
        let id = f["pending_id"].as_i64();
        match (f["type"].as_str(), id) {
            (Some("pending"), Some(id)) => {
                assert!(!ended.contains(&id), "a pending after its end: {f}");
                assert!(pending.insert(id), "a pending sent twice: {f}");
            }
            (Some("trade"), Some(id)) => {
                ended.insert(id);
                if pending.contains(&id) {
                    paired.insert(id);
                }
            }
            (Some("void"), Some(id)) => {
                ended.insert(id);
                voids.insert(id, f["reason"].as_str().unwrap().to_string());
            }
            _ => {}
        }
    }
    (paired, voids)
}

/// Wait until `c` has a `pending` followed by its `trade`, and a `void`, settling batches.
async fn drive_until_paired_and_voided(h: &Harness, c: &Client) {
    for _ in 0..40 {
        h.sim.run_block(4).await.unwrap();
        let (paired, voids) = judged(&c.frames());
        if !paired.is_empty() && !voids.is_empty() {
            return;
        }
    }
    let (paired, voids) = judged(&c.frames());
    panic!("after 40 batches: {} paired, voids {voids:?}", paired.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opted_in_session_gets_each_pending_before_its_trade_and_voids_with_reasons() {
    // This process's recorder, so the lane's metrics can be read below.
    pmw_core::metrics::install();
    let h = harness().await;
    let (_push, addr) = h.leader("push-a").await;
    let (_, key) = h.account(&h.sim.config().wallets).await;
    let opted = connect_url(
        &format!("ws://{addr}/v1/ws?events=trade,pending"),
        Some(&key),
    )
    .await;
    let plain = connect(addr, &key, None).await;
    drive_until_paired_and_voided(&h, &opted).await;
    // Operators see the lane: events queued by kind, and pending fills' wait from first sighting.
    let page = pmw_core::metrics::render();
    for kind in ["pending", "void"] {
        let line = format!("pmw_push_pending_events_total{{kind=\"{kind}\"}}");
        assert!(
            page.lines().any(|l| l.starts_with(&line)),
            "{line} in:\n{page}"
        );
    }
    assert!(
        page.contains("pmw_push_pending_seen_to_queued_seconds_count"),
        "the seen → queued histogram in:\n{page}"
    );

    let frames = opted.frames();
    let (paired, voids) = judged(&frames);
    let reasons = ["reverted", "replaced", "dropped", "expired"];
    assert!(
        voids.values().all(|r| reasons.contains(&r.as_str())),
        "{voids:?}"
    );
    // The pending's fill is the trade's: same order hash and transaction (or a re-send).
    let id = *paired.first().unwrap();
    let p = of_type(&frames, "pending")
        .find(|f| f["pending_id"] == id)
        .unwrap();
    let t = of_type(&frames, "trade")
        .find(|f| f["pending_id"] == id)
        .unwrap();
    assert_eq!(p["fill"]["order_hash"], t["trade"]["order_hash"]);
    assert_eq!(p["fill"]["wallet"], t["trade"]["wallet"]);
    assert!(p["t_seen_ms"].as_i64().unwrap() > 0);
    pushes_are_recorded_with_their_pending(&h, id, p, "ws").await;

    // The default session got the same trades, and no pending tier.
    plain
        .wait_seen(WITHIN, "the paired trade", |s| {
            s.frames
                .iter()
                .any(|f| f["type"] == "trade" && f["pending_id"] == id)
        })
        .await;
    no_pending_tier(&plain);

    // A session resuming from before the paired trade gets it replayed, naming its pending as
    // the live frame did.
    let hello = of_type(&frames, "hello").next().unwrap();
    let from = hello["resume"].as_str().unwrap();
    let replayed = connect_url(&format!("ws://{addr}/v1/ws?since={from}"), Some(&key)).await;
    replayed
        .wait_seen(
            WITHIN,
            "the paired trade replayed with its pending_id",
            |s| {
                s.frames
                    .iter()
                    .any(|f| f["type"] == "trade" && f["pending_id"] == id)
            },
        )
        .await;

    // A session that resumes while a fill is open is sent it, then its end.
    let since = of_type(&opted.frames(), "trade")
        .last()
        .map(|t| t["resume"].as_str().unwrap().to_string())
        .unwrap();
    resume_gets_the_open_pending(&h, addr, &key, &since).await;
    // A client away while its pending was voided is sent the void when it resumes.
    resume_gets_the_void_it_missed(&h, addr, &key).await;
}

/// push's `push_latency` rows (the dashboard's pending figures) on `channel` (`ws` or
/// `webhook`): the `pending` pushed as `<channel>_pending` from the fill's first sighting (a
/// frame: to its own push time), its confirming trade as `<channel>` naming the fill; no pending
/// or void row in a trade's channel (block 0).
pub(super) async fn pushes_are_recorded_with_their_pending(
    h: &Harness,
    id: i64,
    p: &Value,
    channel: &str,
) {
    type R = (String, u64, i64, i64);
    let pending = format!("{channel}_pending");
    let rows = pmw_testkit::eventually(WITHIN, || async {
        let rows: Vec<R> =
            h.db.ch
                .query(
                    "SELECT channel, block_number, t_detect_ms, t_push_ms FROM push_latency \
                 WHERE pending_id = ?",
                )
                .bind(id as u64)
                .fetch_all()
                .await
                .unwrap();
        let has = |c: &str| rows.iter().any(|r| r.0 == c);
        (has(&pending) && has(channel)).then_some(rows)
    })
    .await
    .unwrap_or_else(|| panic!("no {pending} and {channel} rows of pending {id}"));
    let seen = p["t_seen_ms"].as_i64().unwrap();
    // A frame's row ends at the frame's stamp; a webhook's at the receiver's answer.
    let pushed = (channel == "ws").then(|| p["t_push_ms"].as_i64().unwrap());
    assert!(
        rows.iter()
            .any(|r| r.0 == pending && r.1 == 0 && r.2 == seen && pushed.is_none_or(|t| t == r.3)),
        "the pending's row (seen {seen}, pushed {pushed:?}) in {rows:?}"
    );
    assert!(rows.iter().all(|r| r.0 != channel || r.1 > 0), "{rows:?}");
    let stray: u64 =
        h.db.ch
            .query(
                "SELECT count() FROM push_latency WHERE channel IN ('ws', 'webhook') \
             AND block_number = 0",
            )
            .fetch_one()
            .await
            .unwrap();
    assert_eq!(stray, 0, "a pending or void row in a trade's channel");
}

/// The first fill still open of a settlement the simulator dropped, of its wallets.
async fn open_dropped_fill(h: &Harness, c: &tokio_postgres::Client) -> Option<i64> {
    let wallets: Vec<String> = h
        .sim
        .config()
        .wallets
        .iter()
        .map(|w| w.to_lower_hex())
        .collect();
    let dropped: Vec<String> = h
        .sim
        .settlements()
        .iter()
        .filter(|x| x.outcome == Outcome::Dropped)
        .map(|x| x.tx_hash.to_string())
        .collect();
    c.query(
        "SELECT id FROM pending_fills WHERE status = 'open' AND tx_hash = ANY($1) \
         AND maker = ANY($2) ORDER BY id",
        &[&dropped, &wallets],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get::<_, i64>(0))
    .next()
}

/// Resume (`since`) while a dropped settlement's fills are still open (they stay open for the
/// drop grace: a few blocks): the session is sent them, then their `void`.
async fn resume_gets_the_open_pending(
    h: &Harness,
    addr: std::net::SocketAddr,
    key: &str,
    since: &str,
) {
    let c = h.db.connect().await;
    for _ in 0..40 {
        h.sim.run_block(4).await.unwrap();
        let Some(id) = open_dropped_fill(h, &c).await else {
            continue;
        };
        let url = format!("ws://{addr}/v1/ws?events=trade,pending&since={since}");
        let client = connect_url(&url, Some(key)).await;
        client
            .wait_seen(WITHIN, "the open pending, then its void", |s| {
                let (_, voids) = judged(&s.frames);
                let pending = s
                    .frames
                    .iter()
                    .any(|f| f["type"] == "pending" && f["pending_id"] == id);
                pending && voids.get(&id).is_some_and(|r| r == "dropped")
            })
            .await;
        return;
    }
    panic!("no dropped settlement's fill seen open");
}

/// Connect while a dropped settlement's fill of the account's wallets is open (the session is
/// sent it), go away, let it be voided, then resume: the void comes on the resume.
async fn resume_gets_the_void_it_missed(h: &Harness, addr: std::net::SocketAddr, key: &str) {
    let c = h.db.connect().await;
    for _ in 0..40 {
        h.sim.run_block(4).await.unwrap();
        let Some(id) = open_dropped_fill(h, &c).await else {
            continue;
        };
        let away = connect_url(
            &format!("ws://{addr}/v1/ws?events=trade,pending"),
            Some(key),
        )
        .await;
        away.wait_seen(WITHIN, "the open pending", |s| {
            s.frames
                .iter()
                .any(|f| f["type"] == "pending" && f["pending_id"] == id)
        })
        .await;
        let resume = of_type(&away.frames(), "hello").next().unwrap()["resume"]
            .as_str()
            .unwrap()
            .to_string();
        away.done.abort();
        let voided = pmw_testkit::eventually(WITHIN, || async {
            h.sim.run_block(1).await.unwrap();
            c.query_one("SELECT status FROM pending_fills WHERE id = $1", &[&id])
                .await
                .unwrap()
                .get::<_, String>(0)
                .ne("open")
        })
        .await;
        assert!(voided, "fill {id} never ended");
        let url = format!("ws://{addr}/v1/ws?events=trade,pending&since={resume}");
        let back = connect_url(&url, Some(key)).await;
        back.wait_seen(WITHIN, "the void it missed", |s| {
            s.frames
                .iter()
                .any(|f| f["type"] == "void" && f["pending_id"] == id)
        })
        .await;
        return;
    }
    panic!("no dropped settlement's fill seen open");
}

/// No pending tier on a session that did not opt in.
fn no_pending_tier(c: &Client) {
    let frames = c.frames();
    assert_eq!(
        of_type(&frames, "pending").count() + of_type(&frames, "void").count(),
        0,
        "a session that did not opt in gets no pending tier"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_edge_mode_pending_and_void_travel_the_broker_to_opted_in_sessions() {
    let h = harness().await;
    let bus = shared_bus();
    let (_push, bound) = h.start_push("push-a", edge_push(&h, &bus));
    bound_within(bound, LEADS_WITHIN).await;
    let (_edge, addr) = start_edge(&h, &bus).await;
    let (_, key) = h.account(&h.sim.config().wallets).await;
    let opted = connect_url(
        &format!("ws://{addr}/v1/ws?events=trade,pending"),
        Some(&key),
    )
    .await;
    let plain = connect(addr, &key, None).await;
    drive_until_paired_and_voided(&h, &opted).await;
    let (paired, _) = judged(&opted.frames());
    let id = *paired.first().unwrap();
    plain
        .wait_seen(WITHIN, "the paired trade", |s| {
            s.frames
                .iter()
                .any(|f| f["type"] == "trade" && f["pending_id"] == id)
        })
        .await;
    no_pending_tier(&plain);
    drop_stream(&bus).await;
}

/// `pmwctl watch --pending` prints each pending fill, then the trade that confirms it (naming
/// it), and voids with their reasons: what `scripts/dev` shows its subscriber.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pmwctl_watch_shows_pending_then_its_trade_and_voids() {
    use tokio::io::AsyncBufReadExt;

    let h = harness().await;
    let (_push, addr) = h.leader("push-a").await;
    let (_, key) = h.account(&h.sim.config().wallets).await;
    let mut child = tokio::process::Command::new(workspace_bin("pmwctl"))
        .args(["watch", "--pending", "--key", &key, "--url"])
        .arg(format!("ws://{addr}/v1/ws"))
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut out = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut pending, mut paired, mut voided) = (BTreeSet::new(), None, None);
    let deadline = tokio::time::Instant::now() + WITHIN * 2;
    while paired.is_none() || voided.is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no pending → trade pair and void printed"
        );
        // Settle a batch while reading what it printed.
        let batch = h.sim.run_block(4);
        tokio::pin!(batch);
        loop {
            tokio::select! {
                done = &mut batch => { done.unwrap(); break; }
                line = out.next_line() => {
                    let line = line.unwrap().expect("watch exited");
                    let words: Vec<&str> = line.split_whitespace().collect();
                    match words.as_slice() {
                        ["PENDING", id, ..] => { pending.insert(id.to_string()); }
                        ["VOID", id, reason, ..] => voided = Some((id.to_string(), reason.to_string())),
                        [.., "confirms", "pending", id] => {
                            assert!(pending.contains(*id), "a trade names a pending not printed before it: {line}");
                            paired = Some(id.to_string());
                        }
                        _ => {}
                    }
                }
            }
        }
    }
    let (id, reason) = voided.unwrap();
    assert!(
        pending.contains(&id),
        "a void of a pending printed before it"
    );
    assert!(["reverted", "replaced", "dropped", "expired"].contains(&reason.as_str()));
}
