//! The floor: the bare cost on this machine of the hops every pushed trade must take, each timed
//! alone over N sequential repetitions (after a few unmeasured warm-ups), through the production
//! code where there is one: `eth_getLogs` by block hash (`pmw_live::chain::Chain::logs`, HTTP,
//! the allowlist and topics pmw-live uses), one Postgres commit of the block's trades into the
//! hot ledger (`pmw_core::pg::ledger::append`, the ledger insert of live's commit, into copies of
//! `ledger` and `ledger_head` so push never sees them), push's round read (the one statement of
//! `pmw_push::ledger::Ledger::read`: state and the trades after the cursor), one WebSocket frame
//! (a real rendered trade frame sent by a tungstenite server and received by a tungstenite client
//! over loopback). The floor before issue 29 (ClickHouse on the path: one INSERT of 100 rows, one
//! read-back, one Postgres round trip in place of the commit and the read) is measured and
//! printed beside it.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure};
use futures::{SinkExt, StreamExt};
use pmw_core::ch::{latency, trades, TradeRow};
use pmw_core::trade::exchange::ORDER_FILLED_TOPICS;
use pmw_core::trade::Allowlist;
use pmw_core::{Address, Cursor};
use pmw_testkit::eventually;
use tokio_tungstenite::tungstenite::Message;

use crate::setup::Bench;
use crate::stats::Summary;

const WARMUP: usize = 5;

/// One hop's cost.
pub struct Hop {
    pub name: &'static str,
    pub how: &'static str,
    pub cost: Summary,
}

pub struct Floor {
    pub hops: Vec<Hop>,
    /// The hops before issue 29 (ClickHouse on the delivery path), for comparison.
    pub old_hops: Vec<Hop>,
}

impl Floor {
    /// The floor: the sum of the hops' medians.
    pub fn sum_p50(&self) -> f64 {
        self.hops.iter().map(|h| h.cost.p50).sum()
    }

    /// The floor before issue 29.
    pub fn old_sum_p50(&self) -> f64 {
        self.old_hops.iter().map(|h| h.cost.p50).sum()
    }
}

/// Time `f` `reps` times (after [`WARMUP`] unmeasured calls), in ms.
async fn time<F, Fut, T>(reps: usize, mut f: F) -> anyhow::Result<Summary>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<T>>,
{
    let mut v = Vec::with_capacity(reps);
    for i in 0..WARMUP + reps {
        let t = Instant::now();
        f().await?;
        if i >= WARMUP {
            v.push(t.elapsed().as_secs_f64() * 1_000.0);
        }
    }
    Summary::of(&v).ok_or_else(|| anyhow::anyhow!("no repetitions"))
}

/// A block with trades, ingested by pmw-live, stored in Postgres and copied to ClickHouse.
struct Stored {
    block: u64,
    hash: [u8; 32],
    trades: Vec<TradeRow>,
}

async fn stored_block(b: &Bench) -> anyhow::Result<Stored> {
    // A block with trades, ingested by pmw-live.
    let fills = b.sim.run_block(4).await?;
    let last = fills
        .last()
        .ok_or_else(|| anyhow::anyhow!("the simulator emitted nothing"))?;
    let (block, hash) = (last.block_number, last.block_hash.0);
    // `Some` ends the wait: ingested, or an error to return; `None` polls again.
    let ingested = eventually(Duration::from_secs(30), || async {
        match b.cursors().await {
            Ok((i, _)) => (i.unwrap_or(0) >= block).then_some(Ok(())),
            Err(e) => Some(Err(e)),
        }
    })
    .await;
    ensure!(
        ingested.transpose()?.is_some(),
        "pmw-live did not ingest block {block}"
    );
    let ch = &b.db.ch;
    let stored = {
        let c = b.db.connect().await;
        pmw_core::pg::ledger::visible_after(&c, Cursor::default(), block, 1_000).await?
    };
    ensure!(!stored.is_empty(), "no stored trades to copy");
    // The old floor's read-back needs them in ClickHouse: the projector copies them.
    let projected = eventually(Duration::from_secs(30), || async {
        trades::trades_after(ch, Cursor::default(), block, 1)
            .await
            .is_ok_and(|r| !r.is_empty())
    })
    .await;
    ensure!(
        projected,
        "the projector did not copy block {block} to clickhouse"
    );
    Ok(Stored {
        block,
        hash,
        trades: stored,
    })
}

pub async fn measure(b: &Bench, reps: usize) -> anyhow::Result<Floor> {
    let Stored {
        block,
        hash,
        trades: stored,
    } = stored_block(b).await?;
    let ch = &b.db.ch;
    let rows: Vec<TradeRow> = stored.iter().cycle().take(100).cloned().collect();
    let frame = pmw_core::message::stamp(
        pmw_core::message::Kind::Trade,
        &pmw_core::message::TradeMessage::from_row(&stored[0], None).to_json(),
        pmw_core::UnixMs::now().0,
    );

    let chain = pmw_live::chain::Chain::new(&b.anvil.http_url())?;
    let addrs: Vec<Address> = Allowlist::polymarket().addresses().collect();
    let logs = time(reps, || async {
        let l = chain.logs(&hash, &addrs, &ORDER_FILLED_TOPICS).await?;
        ensure!(!l.is_empty(), "getLogs returned no logs");
        Ok(())
    })
    .await?;

    ch.query("CREATE TABLE floor_trades AS trades")
        .execute()
        .await?;
    let insert = time(reps, || async {
        Ok(latency::insert_all(ch, "floor_trades", &rows).await?)
    })
    .await?;
    let read = time(reps, || async {
        let r = trades::trades_after(ch, Cursor::default(), block, 100).await?;
        ensure!(!r.is_empty(), "read returned nothing");
        Ok(())
    })
    .await?;

    let pg = b.db.pg.get().await?;
    let pg_rt = time(reps, || async { Ok(pg.query_one("SELECT 1", &[]).await?) }).await?;
    drop(pg);
    let commit = ledger_commit(b, &stored, reps).await?;
    let round = round_read(b, block, reps).await?;

    let ws = ws_frames(reps, frame).await?;
    let logs_hop = || {
        Hop { name: "eth_getLogs by block hash", how: "`pmw_live::chain::Chain::logs` (HTTP, 4 exchange addresses, 2 topics) on a block with 4 matches", cost: logs }
    };
    let ws_hop = || Hop {
        name: "WebSocket frame",
        how:
            "a rendered trade frame, tungstenite send → tungstenite receive over loopback (NODELAY)",
        cost: ws,
    };
    Ok(Floor {
        hops: vec![
            logs_hop(),
            Hop { name: "Postgres commit with the trades", how: "`pmw_core::pg::ledger::append` of the block's trades (one statement, committed) into copies of `ledger` and `ledger_head`", cost: commit },
            Hop { name: "Postgres round read", how: "`pmw_push::ledger::Ledger::read`: the round's one statement (state, reorgs, version, the block's trades after the cursor)", cost: round },
            ws_hop(),
        ],
        old_hops: vec![
            logs_hop(),
            Hop { name: "ClickHouse INSERT, 100 rows", how: "`pmw_core::ch::latency::insert_all` of 100 trade rows (what `insert_trades` does per table) into a copy of `trades`", cost: insert },
            Hop { name: "ClickHouse read", how: "`pmw_core::ch::trades::trades_after` (push's round read before #29, de-duplicated), up to 100 rows", cost: read },
            Hop { name: "Postgres round trip", how: "`SELECT 1` on a pooled connection", cost: pg_rt },
            ws_hop(),
        ],
    })
}

/// One committed append of `stored` (new versions each time) into copies of the hot ledger's
/// tables in a schema of their own, through the production append.
async fn ledger_commit(b: &Bench, stored: &[TradeRow], reps: usize) -> anyhow::Result<Summary> {
    let c = b.db.connect().await;
    c.batch_execute(
        "CREATE SCHEMA IF NOT EXISTS floor_bench;
         CREATE TABLE IF NOT EXISTS floor_bench.ledger (LIKE public.ledger INCLUDING ALL);
         CREATE TABLE IF NOT EXISTS floor_bench.ledger_head (LIKE public.ledger_head INCLUDING ALL);
         INSERT INTO floor_bench.ledger_head VALUES (1, 0) ON CONFLICT DO NOTHING;
         SET search_path = floor_bench, public",
    )
    .await?;
    let mut rows = stored.to_vec();
    let summary = time(reps, || {
        for r in rows.iter_mut() {
            r.version += 1;
        }
        let batch = rows.clone();
        let c = &c;
        async move {
            let n = pmw_core::pg::ledger::append(c, &batch, pmw_core::UnixMs::now()).await?;
            ensure!(n == batch.len() as u64, "appended {n} of {}", batch.len());
            Ok(())
        }
    })
    .await?;
    c.batch_execute("DROP SCHEMA floor_bench CASCADE").await?;
    Ok(summary)
}

/// Push's round read of block `block` (its trades after the end of the block before).
async fn round_read(b: &Bench, block: u64, reps: usize) -> anyhow::Result<Summary> {
    use pmw_push::ledger::{LaneCursor, Ledger, Source};
    use pmw_push::matcher::Matcher;
    let mut ledger = Ledger::new(b.db.pg.clone(), b.db.ch.clone(), Source::Ws, 100, 1_000);
    let mut matcher = Matcher::new(pmw_session::subs::Subscriptions::default(), false);
    let at = LaneCursor::new(
        pmw_core::Position::maybe(
            Cursor {
                block: block - 1,
                log_index: pmw_core::types::cursor::MAX_LOG_INDEX,
            },
            None,
        ),
        i64::MAX,
    );
    let mut v = Vec::with_capacity(reps);
    for i in 0..WARMUP + reps {
        let t = Instant::now();
        let r = ledger.read(&at, &mut matcher, None).await?;
        ensure!(
            r.batch.is_some_and(|b| !b.rows.is_empty()),
            "the round read returned nothing"
        );
        if i >= WARMUP {
            v.push(t.elapsed().as_secs_f64() * 1_000.0);
        }
    }
    Summary::of(&v).ok_or_else(|| anyhow::anyhow!("no repetitions"))
}

/// One-way frame cost: send on the server side, receive on the client side, one task, loopback.
async fn ws_frames(reps: usize, frame: String) -> anyhow::Result<Summary> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let accept = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await?;
        tcp.set_nodelay(true)?;
        anyhow::Ok(tokio_tungstenite::accept_async(tcp).await?)
    });
    let (mut client, _) =
        tokio_tungstenite::connect_async_with_config(format!("ws://{addr}"), None, true).await?;
    let mut server = accept.await??;
    let n = frame.len();
    let mut v = Vec::with_capacity(reps);
    for i in 0..WARMUP + reps {
        let t = Instant::now();
        server.send(Message::text(frame.clone())).await?;
        match client.next().await {
            Some(Ok(Message::Text(m))) if m.len() == n => {}
            other => bail!("unexpected frame: {other:?}"),
        }
        if i >= WARMUP {
            v.push(t.elapsed().as_secs_f64() * 1_000.0);
        }
    }
    Summary::of(&v).ok_or_else(|| anyhow::anyhow!("no repetitions"))
}
