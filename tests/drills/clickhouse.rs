//! The ClickHouse outage drill (issue 29): ClickHouse stopped for 60 s under load, on the real
//! stack (pm2, Caddy, 100 resuming clients). Delivery reads the Postgres hot ledger, so the
//! clients keep receiving trades through the outage and nothing restarts; REST history inside the
//! hot window answers during it; afterwards live's projector fills ClickHouse with every canonical
//! fill (checked against `eth_getLogs`) and REST history is the same across the hot ledger's
//! seam. The client-observed latency during the outage and in the minute before are printed and
//! recorded (figures, not assertions: speed belongs to the benchmark).

use std::collections::BTreeSet;
use std::time::Duration;

use pmw_core::trade::exchange::ORDER_FILLED_TOPICS;
use pmw_core::trade::Allowlist;
use pmw_core::{Cursor, UnixMs};
use pmw_sim::RunConfig;
use pmw_testkit::eventually_every;
use pmw_tools::harness::{any_exits, Drill, Opts};
use pmw_tools::verdict;
use tokio_util::sync::CancellationToken;

const BEFORE: Duration = Duration::from_secs(60);
const OUTAGE: Duration = Duration::from_secs(60);

/// p50 and p99 of the client-observed latencies of frames received in `[from, to)` (ms).
fn observed(d: &Drill, (from, to): (i64, i64)) -> (usize, i64, i64) {
    let mut v: Vec<i64> = d
        .clients
        .iter()
        .flat_map(|(_, l)| {
            l.lock()
                .unwrap()
                .observed_ms
                .iter()
                .filter(|(at, _)| (from..to).contains(at))
                .map(|(_, ms)| *ms)
                .collect::<Vec<_>>()
        })
        .collect();
    v.sort_unstable();
    let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    if v.is_empty() {
        return (0, 0, 0);
    }
    (v.len(), rank(0.5), rank(0.99))
}

/// Every trade cursor `GET /v1/trades` lists for `key` after `after`, page by page (via Caddy).
async fn history(d: &Drill, key: &str, after: Cursor) -> Vec<Cursor> {
    let http = reqwest::Client::new();
    let mut out = Vec::new();
    let mut next = after.to_string();
    loop {
        let page: serde_json::Value = http
            .get(format!(
                "http://127.0.0.1:{}/v1/trades?limit=1000&after={next}",
                d.site
            ))
            .bearer_auth(key)
            .send()
            .await
            .unwrap()
            .error_for_status()
            .unwrap()
            .json()
            .await
            .unwrap();
        for t in page["trades"].as_array().unwrap() {
            out.push(t["cursor"].as_str().unwrap().parse().unwrap());
        }
        next = page["next"].as_str().unwrap().to_string();
        if page["more"] != true {
            return out;
        }
    }
}

/// The canonical fills of `wallets` (all when empty) in `(after, through]`, by the simulator.
fn owed(d: &Drill, wallets: &[pmw_core::Address], after: Cursor, through: u64) -> Vec<Cursor> {
    let mut v: Vec<Cursor> = d
        .sim
        .canonical()
        .iter()
        .filter(|e| wallets.is_empty() || wallets.contains(&e.maker))
        .map(|e| Cursor {
            block: e.block_number,
            log_index: e.log_index as u32,
        })
        .filter(|c| *c > after && c.block <= through)
        .collect();
    v.sort();
    v
}

/// The fills `eth_getLogs` returns for blocks `from..=to` (the exchanges, both topics).
async fn on_chain(d: &Drill, from: u64, to: u64) -> BTreeSet<(u64, u32)> {
    let allow = Allowlist::polymarket();
    let addrs: Vec<_> = allow.addresses().collect();
    let chain = pmw_live::chain::Chain::new(&d.anvil.http_url()).unwrap();
    let logs = chain
        .logs_in_range(from, to, &addrs, &ORDER_FILLED_TOPICS)
        .await
        .unwrap();
    logs.iter()
        .filter_map(|l| pmw_core::trade::decode(l, &allow).ok().flatten())
        .map(|f| (f.block_number, f.log_index))
        .collect()
}

async fn watermark(d: &Drill) -> u64 {
    pmw_core::pg::watermark(&d.db.connect().await)
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_clickhouse_stopped_60s_under_load_delivery_goes_on_and_history_catches_up() {
    let ps = pmw_testkit::PrivateStack::start();
    let d = Drill::start_with(Opts {
        stack: Some(ps.env.clone()),
        ..Opts::default()
    })
    .await;
    let traffic = d.sim.spawn(
        RunConfig {
            matches_per_block: 2,
            interval: Duration::from_millis(250),
            count: None,
            duration: Some(BEFORE + OUTAGE + Duration::from_secs(10)),
        },
        CancellationToken::new(),
    );
    tokio::time::sleep(BEFORE).await;
    let down_ms = UnixMs::now().0;
    ps.run(&["down", "ch"]);
    tokio::time::sleep(OUTAGE / 2).await;
    // REST history within the hot window answers from Postgres while ClickHouse is down.
    let (key, mine) = d.accounts[0].clone();
    let wm = watermark(&d).await;
    let during: Vec<Cursor> = history(&d, &key, d.start_cursor)
        .await
        .into_iter()
        .filter(|c| c.block <= wm)
        .collect();
    assert_eq!(
        during,
        owed(&d, &mine, d.start_cursor, wm),
        "REST history during the outage"
    );
    tokio::time::sleep(OUTAGE / 2).await;
    ps.run(&["up", "ch"]);
    let up_ms = UnixMs::now().0;
    traffic.await.unwrap().unwrap();
    d.drain().await;
    let f = d.figures();
    let before = observed(&d, (down_ms - BEFORE.as_millis() as i64, down_ms));
    let outage = observed(&d, (down_ms, up_ms));

    // ClickHouse, once the projector caught up, holds every canonical fill.
    let pg = d.db.connect().await;
    let caught_up = eventually_every(
        Duration::from_secs(60),
        Duration::from_millis(200),
        || async {
            let p = pmw_core::pg::ledger::projection(&pg).await.unwrap();
            p.lag_rows() == 0
        },
    )
    .await;
    assert!(caught_up, "the projector did not catch up after the outage");
    let head = watermark(&d).await;
    let in_ch: BTreeSet<(u64, u32)> =
        pmw_core::ch::trades::trades_after(&d.db.ch, d.start_cursor, head, 1_000_000)
            .await
            .unwrap()
            .iter()
            .map(|r| (r.block_number, r.log_index))
            .collect();
    let chain = on_chain(&d, d.start_cursor.block + 1, head).await;
    assert_eq!(in_ch, chain, "clickhouse holds exactly the canonical fills");

    // REST history across the seam: the hot ledger's floor raised into the run (as retention
    // does once blocks are projected), the pages read ClickHouse below it and Postgres above.
    let seam = (d.start_cursor.block + head) / 2;
    pg.execute(
        "UPDATE stored_cursor SET floor_block = $1",
        &[&(seam as i64)],
    )
    .await
    .unwrap();
    for (key, mine) in d.accounts.iter().take(3) {
        assert_eq!(
            history(&d, key, d.start_cursor).await,
            owed(&d, mine, d.start_cursor, head),
            "REST history across the seam at block {seam}"
        );
    }

    let restarts: Vec<(String, usize)> = ["pmw-live", "pmw-push-a", "pmw-push-b"]
        .iter()
        .map(|a| (a.to_string(), any_exits(&d.pm2, a)))
        .collect();
    let figures = format!(
        "ClickHouse stopped for {} ms under load; client-observed WebSocket latency in the minute before: {} frames, p50 {} ms, p99 {} ms; during the outage: {} frames, p50 {} ms, p99 {} ms (p99 ratio {:.2}); service exits: {restarts:?}; {} canonical fills in ClickHouse after it caught up (= eth_getLogs); {f}",
        up_ms - down_ms,
        before.0,
        before.1,
        before.2,
        outage.0,
        outage.1,
        outage.2,
        outage.2 as f64 / before.2.max(1) as f64,
        in_ch.len(),
    );
    verdict("clickhouse outage", "clickhouse-outage", &figures);
    assert!(outage.0 > 0, "frames were delivered during the outage");
    assert!(
        restarts.iter().all(|(_, n)| *n == 0),
        "nothing restarts: {restarts:?}"
    );
    f.assert_clean();
}
